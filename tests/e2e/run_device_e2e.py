#!/usr/bin/env python3
"""End-to-end tests of `shardyard run --device` with the real binary.

Usage: run_device_e2e.py --shardyard BIN CASE
`--device host` runs the whole device path (pinned columns, copy stream, events, reuse)
on the host stand-in; `--check-device` copies every batch back and compares it with the
host batch. A CUDA device is used where one is usable; elsewhere it must fail with a clear
message. Exit 0 = pass.
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: make, run, read_dump, check)

check = base.check


def dataset(tmp):
    exp = base.make(f"{tmp}/d", shards=6, samples=19, uneven=True, vary=True, bytes=900, seed=8)
    return exp, f"{tmp}/d/shard-{{000000..000005}}.tar"


def same_run_on_device(src, tmp, device, what):
    """The device run delivers the batches of the host run, every one checked on the device."""
    flags = ["--ranks", 2, "--workers", 2, "--batch-size", 9, "--epochs", 2, "--shuffle",
             "--seed", 3]
    _, plain = base.run(src, *flags, dump=f"{tmp}/plain")
    _, dev = base.run(src, *flags, "--device", device, "--device-prefetch", 3, "--check-device",
                      dump=f"{tmp}/dev-{device}")
    check(dev["device"] == device, f"{what}: summary names device {dev.get('device')}")
    check(dev["samples"] == plain["samples"], f"{what}: {dev['samples']} samples, "
          f"{plain['samples']} without a device")
    check(base.read_dump(f"{tmp}/dev-{device}", 2) == base.read_dump(f"{tmp}/plain", 2),
          f"{what}: the dumped batches differ from the run without a device")


def case_host_device(tmp):
    exp, src = dataset(tmp)
    same_run_on_device(src, tmp, "host", "--device host")
    # Collation on the prefetcher's thread (no collators), depth 1.
    _, s = base.run(src, "--workers", 3, "--batch-size", 4, "--prefetch-batches", 0, "--device",
                    "host", "--device-prefetch", 1, "--check-device")
    check(s["samples"] == exp["samples"], f"prefetch-batches 0: {s['samples']} samples")


def case_cuda_or_clear_error(tmp):
    _, src = dataset(tmp)
    p, _ = base.run(src, "--device", "cuda:0", expect_ok=False)
    if p.returncode == 0:
        print("a GPU is usable here: checking cuda:0 like host")
        same_run_on_device(src, tmp, "cuda:0", "--device cuda:0")
        return
    check(p.returncode == 1, f"--device cuda:0 without a GPU: exit {p.returncode}, not 1")
    check("cannot deliver batches to the device: cuda:0" in p.stderr,
          f"--device cuda:0 without a GPU: unclear message: {p.stderr.strip()}")
    check("Traceback" not in p.stderr and "terminate" not in p.stderr,
          f"--device cuda:0 crashed: {p.stderr.strip()}")


def case_bad_input(tmp):
    _, src = dataset(tmp)

    def expect(extra, code, words, what):
        p, _ = base.run(src, *extra, expect_ok=False)
        check(p.returncode == code, f"{what}: exit {p.returncode}, expected {code}")
        for w in words:
            check(w in p.stderr, f"{what}: '{w}' not in: {p.stderr.strip()}")

    expect(["--device", "tpu:0"], 1, ["unknown device 'tpu:0'", "cuda:N", "host"], "unknown device")
    expect(["--device", "cuda:x"], 1, ["unknown device 'cuda:x'"], "bad ordinal")
    expect(["--check-device"], 2, ["--check-device needs --device"], "--check-device alone")
    expect(["--device", "host", "--device-prefetch", 0], 2, ["--device-prefetch"], "depth 0")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-device-e2e")


if __name__ == "__main__":
    sys.exit(main())
