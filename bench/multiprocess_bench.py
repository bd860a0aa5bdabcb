#!/usr/bin/env python3
"""A job across processes: what the network costs.

    python3 bench/multiprocess_bench.py --shardyard build-release/tools/shardyard [--reps 3]

1. Join: tools/shardyard-launch starts the coordinator and N rank processes of
   `shardyard run` on a tiny dataset; the time from the launcher's start to the
   coordinator's "every rank of N joined" line (process start-up, connect, the token's
   challenge-response, the agreement check, the join barrier), and to the job's end.
2. Checkpoint save across 8 processes: `--checkpoint-every 10` over one epoch; every rank
   process reports the median and slowest of its Loader::save() calls (the barrier at the
   coordinator, the rank file's write and fsync, the commit of CHECKPOINT).
3. Throughput: 4 rank processes (the launcher) against `--ranks 4` in one process on the
   same data, alternating, page cache warm; samples/s of the whole job = samples / the
   slowest rank's seconds.
Each figure is the median over --reps runs.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
LAUNCH = os.path.join(ROOT, "tools", "shardyard-launch")


def make(out, shards, samples, nbytes):
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/e2e/make_dataset.py"), "--out",
                    out, "--shards", str(shards), "--samples", str(samples), "--bytes",
                    str(nbytes)], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "shard-{000000..%06d}.tar" % (shards - 1))


def launch(binary, nproc, src, *flags):
    """Runs a launched job; returns (seconds to every rank joined, seconds in all, the
    ranks' JSON summaries)."""
    argv = [sys.executable, LAUNCH, "--shardyard", binary, "--nproc-per-node", str(nproc),
            "--", binary, "run", "--source", src, "--json", *map(str, flags)]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    joined = None
    summaries = []
    for line in p.stdout:
        if joined is None and "every rank of" in line and "joined" in line:
            joined = time.monotonic() - t0
        m = re.match(r"\[rank \d+\] (\{.*\})$", line.strip())
        if m:
            summaries.append(json.loads(m.group(1)))
    p.wait(timeout=600)
    total = time.monotonic() - t0
    if p.returncode != 0 or len(summaries) != nproc:
        raise SystemExit(f"launched job of {nproc} failed ({p.returncode})")
    return joined, total, summaries


def one_process(binary, ranks, src, *flags):
    p = subprocess.run([binary, "run", "--source", src, "--ranks", str(ranks), "--json",
                        *map(str, flags)], capture_output=True, text=True, check=True,
                       timeout=600)
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--join-ranks", type=int, default=64)
    args = ap.parse_args()
    binary = os.path.abspath(args.shardyard)
    tmp = tempfile.mkdtemp(prefix="shardyard-mpbench-")
    os.environ["SHARDYARD_CACHE_DIR"] = os.path.join(tmp, "cache")
    try:
        tiny = make(os.path.join(tmp, "tiny"), 64, 4, 64)
        joins, totals = [], []
        for _ in range(args.reps):
            j, t, _ = launch(binary, args.join_ranks, tiny, "--batch-size", 1, "--workers", 1)
            joins.append(j)
            totals.append(t)
        print(f"join of {args.join_ranks} rank processes: median {statistics.median(joins):.2f} s "
              f"(runs {', '.join(f'{x:.2f}' for x in joins)}); whole job "
              f"{statistics.median(totals):.2f} s")

        data = make(os.path.join(tmp, "data"), 16, 2000, 4096)
        one_process(binary, 4, data, "--batch-size", 64)  # warm the page cache and manifest
        medians, worst, saves = [], [], 0
        for r in range(args.reps):
            ck = os.path.join(tmp, f"ck{r}")
            _, _, sums = launch(binary, 8, data, "--batch-size", 64, "--workers", 1,
                                "--checkpoint-dir", ck, "--checkpoint-every", 10)
            for s in sums:
                medians.append(s["checkpoint"]["median_save_ms"])
                worst.append(s["checkpoint"]["max_save_ms"])
            saves = sums[0]["checkpoint"]["saves"]
            shutil.rmtree(ck)
        print(f"checkpoint save across 8 processes ({saves} cuts per run, {args.reps} runs): "
              f"median {statistics.median(medians):.2f} ms, worst {max(worst):.2f} ms")

        flags = ("--batch-size", 64, "--workers", 2, "--shuffle", "--seed", 5, "--epochs", 8)
        multi, single, multi_wall, single_wall = [], [], [], []
        for _ in range(args.reps):
            t0 = time.monotonic()
            _, _, sums = launch(binary, 4, data, *flags)
            multi_wall.append(time.monotonic() - t0)
            samples = sum(s["samples"] for s in sums)
            multi.append(samples / max(s["seconds"] for s in sums))
            t0 = time.monotonic()
            s1 = one_process(binary, 4, data, *flags)
            single_wall.append(time.monotonic() - t0)
            single.append(s1["samples_per_s"])
        m, s = statistics.median(multi), statistics.median(single)
        print(f"throughput over {samples:,} samples: 4 rank processes {m:,.0f} samples/s "
              f"(wall {statistics.median(multi_wall):.2f} s with start-up); --ranks 4 in one "
              f"process {s:,.0f} samples/s (wall {statistics.median(single_wall):.2f} s); "
              f"ratio {m / s:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
