#!/usr/bin/env python3
"""End-to-end tests of time-series windows with the real `shardyard` binary.

Usage: run_windows_e2e.py --shardyard BIN CASE
Writes month files of fixed-size records with Python's struct (no numpy), runs
`shardyard run --windows LENGTH:STRIDE[:TARGET] --record-bytes N [--stitch] --dump-keys` and
checks the dumped keys, sizes and digests against windows Python cuts from the same bytes
(docs/windows.md). Exit 0 = pass.
"""
import collections
import hashlib
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: run, read_dump, check)

check = base.check

RECORD = struct.Struct("<4I")  # one record: 4 x uint32 (16 bytes), like 4 float32 channels
MONTHS = {"1979-01.bin": 50, "1979-02.bin": 43, "1979-03.bin": 47, "1979-04.bin": 40}


def write_months(folder, months=MONTHS):
    """Writes each month's records; returns {name: bytes}."""
    os.makedirs(folder, exist_ok=True)
    out = {}
    for m, (name, n) in enumerate(sorted(months.items())):
        data = b"".join(RECORD.pack(m, r, (r * r * 7 + m) % 65521, 0xC0FFEE) for r in range(n))
        with open(os.path.join(folder, name), "wb") as f:
            f.write(data)
        out[name] = data
    return out


def expected_windows(files, length, stride, target, stitch):
    """{key: [sha16, bytes]} of every window, as the contract defines them."""
    names = sorted(files)
    out = {}
    for i, name in enumerate(names):
        data = files[name]
        nxt = files[names[i + 1]] if i + 1 < len(names) else b""
        records = len(data) // RECORD.size
        limit = records + (len(nxt) // RECORD.size if stitch else 0)
        joined = data + nxt
        span = length + target
        for start in range(0, records, stride):
            if start + span > limit:
                continue
            x = joined[start * RECORD.size:(start + length) * RECORD.size]
            payload = x
            if target:
                t = start + length - 1 + target
                payload += joined[t * RECORD.size:(t + 1) * RECORD.size]
            out[f"{name}@{start}"] = [hashlib.sha256(payload).hexdigest()[:16], len(payload)]
    return out


def window_flags(spec, stitch):
    return ["--windows", spec, "--record-bytes", RECORD.size] + (["--stitch"] if stitch else [])


def run_windows(src, tmp, name, ranks, workers, batch, *extra):
    dump = os.path.join(tmp, name)
    shutil.rmtree(dump, ignore_errors=True)
    _, summary = base.run(src, "--ranks", ranks, "--workers", workers, "--batch-size", batch,
                          *extra, dump=dump)
    return base.read_dump(dump, ranks), summary


def flat(rows):
    return [row for r in sorted(rows) for row in rows[r]]


def check_keys_once(rows, want_keys, epoch, what):
    """Every wanted key exactly once in `epoch` of the dumps of all ranks, and no other."""
    keys = collections.Counter(row[2] for row in flat(rows) if row[0] == epoch)
    dup = [k for k, c in keys.items() if c > 1]
    check(not dup, f"{what}: epoch {epoch}: {len(dup)} keys twice, e.g. {dup[:3]}")
    missing = set(want_keys) - set(keys)
    check(not missing, f"{what}: epoch {epoch}: {len(missing)} keys missing, "
                       f"e.g. {sorted(missing)[:3]}")
    extra = set(keys) - set(want_keys)
    check(not extra, f"{what}: epoch {epoch}: unexpected keys {sorted(extra)[:3]}")


def check_windows(rows, want, epochs, batch, what):
    for e in range(epochs):
        check_keys_once(rows, want, e, what)
        steps = {r: len({row[1] for row in rows[r] if row[0] == e}) for r in rows}
        check(len(set(steps.values())) == 1, f"{what}: epoch {e}: unequal steps {steps}")
        for r in rows:
            per_step = collections.Counter(row[1] for row in rows[r] if row[0] == e)
            check(all(c <= batch for c in per_step.values()), f"{what}: batch over {batch}")
    bad = [row[2] for row in flat(rows) if want.get(row[2]) != [row[4], row[3]]]
    check(not bad, f"{what}: {len(bad)} windows with wrong bytes, e.g. {bad[:3]}")


# ---- cases ---------------------------------------------------------------------------------

def case_exactly_once(tmp):
    """Every window once per epoch, with the bytes Python cuts, for many shapes."""
    files = write_months(os.path.join(tmp, "d"))
    src = os.path.join(tmp, "d", "1979-{01..04}.bin")
    for (spec, stitch) in [("6:1", False), ("6:2:1", False), ("5:3:2", True), ("12:4", True),
                           ("1:1", False)]:
        length, stride, target = (list(map(int, spec.split(":"))) + [0])[:3]
        want = expected_windows(files, length, stride, target, stitch)
        for (r, w, b, shuffle) in [(1, 1, 7, False), (2, 2, 8, True), (3, 2, 5, True),
                                   (4, 3, 16, False)]:
            what = f"--windows {spec}{' --stitch' if stitch else ''} R={r} W={w} B={b}" \
                   f"{' shuffled' if shuffle else ''}"
            flags = window_flags(spec, stitch) + ["--epochs", 2, "--seed", 3]
            if shuffle:
                flags.append("--shuffle")
            rows, summary = run_windows(src, tmp, "dump", r, w, b, *flags)
            check(summary["samples"] == 2 * len(want),
                  f"{what}: {summary['samples']} items, expected {2 * len(want)}")
            check(summary["logical_shards"] == 4,
                  f"{what}: {summary['logical_shards']} logical shards, expected one per month")
            check_windows(rows, want, 2, b, what)
    # The months are the unit the DISTRIBUTED level assigns: with R = L = 4 (strided, no
    # shuffle) rank r delivers exactly month r's windows.
    want = expected_windows(files, 6, 1, 0, False)
    rows, _ = run_windows(src, tmp, "dump", 4, 1, 4, *window_flags("6:1", False))
    for r in range(4):
        months = {row[2].split("@")[0] for row in rows[r]}
        check(months == {sorted(MONTHS)[r]}, f"rank {r} got months {sorted(months)}")
    # Another L cuts windows into balanced shards; still every window once.
    rows, s = run_windows(src, tmp, "dump", 2, 2, 8, *window_flags("6:1", False), "--shuffle",
                          "--logical-shards", 10)
    check(s["logical_shards"] == 10, f"--logical-shards 10 gave {s['logical_shards']}")
    check_windows(rows, want, 1, 8, "--logical-shards 10")


def case_resume(tmp):
    """Checkpoint at one topology, resume at another: every window exactly once."""
    files = write_months(os.path.join(tmp, "d"))
    src = os.path.join(tmp, "d", "1979-{01..04}.bin")
    want = expected_windows(files, 6, 2, 1, True)
    flags = window_flags("6:2:1", True) + ["--shuffle", "--seed", 9]
    full, _ = run_windows(src, tmp, "full", 2, 2, 8, *flags)
    for (r, w, b, r2, w2, b2, stop) in [(2, 2, 8, 2, 1, 8, 3), (2, 2, 8, 4, 3, 5, 4),
                                        (4, 1, 3, 1, 2, 16, 2), (1, 3, 10, 3, 2, 4, 5)]:
        what = f"R={r} W={w} B={b} -> R={r2} W={w2} B={b2} stop={stop}"
        ck = os.path.join(tmp, "ck")
        shutil.rmtree(ck, ignore_errors=True)
        a, sa = run_windows(src, tmp, "a", r, w, b, *flags, "--checkpoint-dir", ck,
                            "--stop-after-steps", stop)
        check(sa["batches"] == stop * r, f"{what}: stopped run delivered {sa['batches']} batches")
        rest, sb = run_windows(src, tmp, "b", r2, w2, b2, *flags, "--resume", ck)
        check(sb["resumed"]["step"] == stop, f"{what}: resumed at {sb['resumed']}")
        rows = {0: flat(a) + flat(rest)}
        keys = collections.Counter(row[2] for row in rows[0])
        dup = [k for k, c in keys.items() if c > 1]
        check(not dup, f"{what}: {len(dup)} windows twice, e.g. {dup[:3]}")
        missing = set(want) - set(keys)
        check(not missing, f"{what}: {len(missing)} windows never delivered")
        bad = [row[2] for row in rows[0] if want.get(row[2]) != [row[4], row[3]]]
        check(not bad, f"{what}: wrong bytes in {bad[:3]}")
        if (r2, b2) == (r, b):  # same ranks and batch size: the very same batches
            for x in range(r):
                check(a[x] + rest[x] == full[x], f"{what}: rank {x} differs from a full run")
    # A checkpoint of other windows over the same files is another dataset.
    ck = os.path.join(tmp, "ck")
    p, _ = base.run(src, "--ranks", 2, "--workers", 2, "--batch-size", 8,
                    *window_flags("6:1:1", True), "--shuffle", "--seed", 9, "--resume", ck,
                    expect_ok=False)
    check(p.returncode == 1 and "another dataset" in p.stderr,
          f"resume with other windows: exit {p.returncode}: {p.stderr.strip()[:300]}")


def case_bad_input(tmp):
    """Each bad input fails at start with its message; flag misuse is a usage error."""
    d = os.path.join(tmp, "d")
    write_months(d, {"a.bin": 30, "b.bin": 5})
    with open(os.path.join(d, "odd.bin"), "wb") as f:
        f.write(b"\0" * (RECORD.size * 3 + 5))
    open(os.path.join(d, "empty.bin"), "wb").close()
    a, b = os.path.join(d, "a.bin"), os.path.join(d, "b.bin")

    def expect(source, flags, code, words, what):
        p, _ = base.run(source, *flags, expect_ok=False)
        ok = p.returncode == code and all(w in p.stderr for w in words)
        check(ok, f"{what}: exit {p.returncode}, stderr: {p.stderr.strip()[:300]}")

    expect(os.path.join(d, "odd.bin"), window_flags("2:1", False), 1,
           ["odd.bin", "size 53 bytes is not a multiple of --record-bytes 16", "remainder 5"],
           "size not a multiple")
    expect(os.path.join(d, "{a,empty}.bin"), window_flags("2:1", False), 1,
           ["empty.bin", "empty record file"], "empty file")
    expect(os.path.join(d, "{a,b}.bin"), window_flags("6:1:1", False), 1,
           ["b.bin", "5 records", "span of 7", "--stitch"], "window longer than a source")
    expect(os.path.join(d, "{a,b}.bin"), window_flags("6:1:1", True), 1,
           ["b.bin", "yields no window"], "last source too short even stitched")
    expect(os.path.join(d, "{b,a}.bin"), window_flags("6:1:1", True), 0, [],
           "a short source completed by stitching")
    expect(a, window_flags("0:1", False), 1, ["LENGTH must be at least 1"], "LENGTH 0")
    expect(a, window_flags("2:0", False), 1, ["STRIDE must be at least 1"], "STRIDE 0")
    expect(a, ["--windows", "2:1", "--record-bytes", 0], 1, ["--record-bytes must be at least 1"],
           "record bytes 0")
    expect(os.path.join(d, "missing.bin"), window_flags("2:1", False), 1, ["missing.bin"],
           "missing file")
    expect(a, ["--windows", "2:1"], 2, ["--windows needs --record-bytes"], "--windows alone")
    expect(a, ["--record-bytes", 16], 2, ["--record-bytes needs --windows"],
           "--record-bytes alone")
    expect(a, ["--stitch"], 2, ["--stitch needs --windows"], "--stitch alone")
    expect(a, ["--windows", "24", "--record-bytes", 16], 2, ["LENGTH:STRIDE"], "malformed spec")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-windows-e2e")


if __name__ == "__main__":
    sys.exit(main())
