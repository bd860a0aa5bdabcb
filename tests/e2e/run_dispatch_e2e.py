#!/usr/bin/env python3
"""End-to-end tests of dispatch modes (--dispatch) with the real `shardyard` binary.

Usage: run_dispatch_e2e.py --shardyard BIN CASE
Runs `shardyard run --dispatch none|round_robin|on_request|broadcast` on tar shards written
by make_dataset.py and on record files of windows (run_windows_e2e.py), and compares the
--dump-keys output: routed modes against --dispatch none, broadcast against what the
generator wrote, stop + resume (--checkpoint-dir/--stop-after-steps, --resume) against an
uninterrupted run, with once/ and post/ count stages whose state the checkpoint carries.
Exit 0 = pass.
"""
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: make, run, read_dump, check)
import run_windows_e2e as windows  # noqa: E402  (record files and their expected windows)

check = base.check

TAR_SHARDS = 6
# The dispatcher numbers the rank order (once/count), the payload is dropped so the digest
# covers the numbering, and the loader numbers the batches' items again (post/count): a
# resume that lost or double-counted either state gives other digests.
COUNT_STAGES = ["--map", "once/count", "--map", "select_fields:fields=seq,cls",
                "--map", "post/count:field=post"]


def make_tar(tmp):
    exp = base.make(os.path.join(tmp, "d"), shards=TAR_SHARDS, samples=40, uneven=True,
                    vary=True, bytes=300, seed=6)
    return exp, os.path.join(tmp, "d", "shard-{000000..%06d}.tar" % (TAR_SHARDS - 1))


def dump_run(src, tmp, name, ranks, workers, batch, *extra):
    """Runs; returns (rows by rank, raw bytes of every rank file, summary)."""
    dump = os.path.join(tmp, name)
    shutil.rmtree(dump, ignore_errors=True)
    _, summary = base.run(src, "--ranks", ranks, "--workers", workers, "--batch-size", batch,
                          "--no-cache", *extra, dump=dump)
    raw = []
    for r in range(ranks):
        with open(os.path.join(dump, f"rank-{r}.tsv"), "rb") as f:
            raw.append(f.read())
    return base.read_dump(dump, ranks), raw, summary


flat = windows.flat
check_keys_once = windows.check_keys_once


# ---- cases ---------------------------------------------------------------------------------

def case_same_as_none(tmp):
    """round_robin, on_request and by_key give byte-identical dumps to none, whatever W."""
    exp, src = make_tar(tmp)
    for (r, w, b, extra) in [(1, 3, 10, []), (2, 2, 7, ["--chunk-items", "9"])]:
        flags = ["--epochs", 2, "--shuffle", "--seed", 13] + extra
        rows, want, _ = dump_run(src, tmp, "none", r, w, b, *flags, "--dispatch", "none")
        base.check_exactly_once(rows, exp, 2, b, f"R={r} B={b} none")
        for mode in ("round_robin", "on_request", "by_key"):
            for w2 in (1, w, 4):
                what = f"R={r} B={b} {mode} W={w2} {' '.join(extra)}"
                _, got, s = dump_run(src, tmp, "dump", r, w2, b, *flags, "--dispatch", mode)
                check(s["dispatch"] == mode, f"{what}: summary says {s['dispatch']}")
                for x in range(r):
                    check(got[x] == want[x], f"{what}: rank {x}: the dump differs from none")


def case_broadcast_exactly_once(tmp):
    """Broadcast delivers every sample (tar) and every window (records) once per epoch."""
    exp, src = make_tar(tmp)
    _, none_raw, _ = dump_run(src, tmp, "none", 2, 2, 8, "--epochs", 2, "--shuffle",
                              "--seed", 5)
    for (r, w, b, extra) in [(1, 1, 16, []), (1, 3, 7, ["--worker-strategy", "contiguous"]),
                             (2, 2, 8, []), (3, 2, 5, ["--prefetch-sources", "3"])]:
        what = f"tar broadcast R={r} W={w} B={b} {' '.join(extra)}"
        rows, raw, s = dump_run(src, tmp, "dump", r, w, b, "--epochs", 2, "--shuffle",
                                "--seed", 5, "--dispatch", "broadcast", *extra)
        check(s["samples"] == 2 * exp["samples"], f"{what}: {s['samples']} samples")
        base.check_exactly_once(rows, exp, 2, b, what)
        if (r, w, b) == (2, 2, 8):
            check(raw != none_raw, f"{what}: same order as none (shards should follow "
                                   "one another)")
    files = windows.write_months(os.path.join(tmp, "w"))
    wsrc = os.path.join(tmp, "w", "1979-{01..04}.bin")
    for (spec, stitch) in [("6:2:1", False), ("5:3:2", True), ("12:4", True)]:
        length, stride, target = (list(map(int, spec.split(":"))) + [0])[:3]
        want = windows.expected_windows(files, length, stride, target, stitch)
        for (r, w, b) in [(1, 3, 7), (2, 2, 8)]:
            what = f"windows {spec}{' --stitch' if stitch else ''} broadcast R={r} W={w} B={b}"
            rows, _, s = dump_run(wsrc, tmp, "dump", r, w, b, "--epochs", 2, "--shuffle",
                                  "--seed", 3, "--dispatch", "broadcast",
                                  *windows.window_flags(spec, stitch))
            check(s["samples"] == 2 * len(want), f"{what}: {s['samples']} windows")
            windows.check_windows(rows, want, 2, b, what)


def resume_pair(src, tmp, r, w, b, r2, w2, b2, stop, flags, what):
    """Stops after `stop` steps at (r, w, b), resumes at (r2, w2, b2); returns both dumps."""
    ck = os.path.join(tmp, "ck")
    shutil.rmtree(ck, ignore_errors=True)
    a, _, sa = dump_run(src, tmp, "a", r, w, b, *flags, "--checkpoint-dir", ck,
                        "--stop-after-steps", stop)
    check(sa["batches"] == stop * r, f"{what}: stopped run delivered {sa['batches']} batches")
    rest, _, sb = dump_run(src, tmp, "b", r2, w2, b2, *flags, "--resume", ck)
    check(sb["resumed"]["step"] == stop, f"{what}: resumed at {sb['resumed']}")
    return a, rest


def case_resume(tmp):
    """Checkpoint and resume with stateful once/ and post/ stages in every mode."""
    exp, src = make_tar(tmp)
    keys = set(exp["digests"])
    base_flags = ["--epochs", 2, "--shuffle", "--seed", 17]
    # Routed modes (none resolves to round robin for a once/ stage): at the same ranks and
    # batch size the pieces are the uninterrupted run, whatever the workers.
    for mode in ("none", "round_robin", "on_request"):
        flags = base_flags + ["--dispatch", mode] + COUNT_STAGES
        full, full_raw, _ = dump_run(src, tmp, "full", 2, 2, 8, *flags)
        _, other_w, _ = dump_run(src, tmp, "full3", 2, 3, 8, *flags)
        check(other_w == full_raw, f"{mode}: once/count numbers depend on the workers")
        for (w, w2, stop) in [(2, 3, 4), (3, 1, 9)]:
            what = f"{mode} R=2 W={w}->{w2} B=8 stop={stop}"
            a, rest = resume_pair(src, tmp, 2, w, 8, 2, w2, 8, stop, flags, what)
            for x in range(2):
                check(a[x] + rest[x] == full[x],
                      f"{what}: rank {x}: stop + resume differs from the uninterrupted run")
            check_keys_once({0: flat(a) + flat(rest)}, keys, 0, what)
    # Broadcast (no once/ stage before the merge: the loader's post/count carries state).
    flags = base_flags + ["--dispatch", "broadcast", "--map", "post/count:field=post"]
    full, _, _ = dump_run(src, tmp, "full", 2, 2, 8, *flags)
    for (r2, w2, b2, stop) in [(2, 3, 8, 5), (2, 1, 8, 2), (4, 2, 8, 3), (1, 3, 16, 6)]:
        what = f"tar broadcast R=2 W=2 B=8 -> R={r2} W={w2} B={b2} stop={stop}"
        a, rest = resume_pair(src, tmp, 2, 2, 8, r2, w2, b2, stop, flags, what)
        check_keys_once({0: flat(a) + flat(rest)}, keys, 0, what)
        if (r2, b2) == (2, 8):
            for x in range(2):
                check(a[x] + rest[x] == full[x],
                      f"{what}: rank {x}: stop + resume differs from the uninterrupted run")
    # Broadcast over windows: W=4 -> 1 and 3 bit-identical, 2 ranks -> 4 exactly once.
    files = windows.write_months(os.path.join(tmp, "w"))
    wsrc = os.path.join(tmp, "w", "1979-{01..04}.bin")
    want = windows.expected_windows(files, 6, 2, 1, True)
    flags = (windows.window_flags("6:2:1", True) + ["--shuffle", "--seed", 9, "--dispatch",
                                                    "broadcast", "--logical-shards", 6])
    full, _, _ = dump_run(wsrc, tmp, "full", 2, 4, 6, *flags)
    for (r2, w2, stop) in [(2, 1, 3), (2, 3, 5), (4, 4, 2)]:
        what = f"windows broadcast R=2 W=4 -> R={r2} W={w2} stop={stop}"
        a, rest = resume_pair(wsrc, tmp, 2, 4, 6, r2, w2, 6, stop, flags, what)
        rows = {0: flat(a) + flat(rest)}
        check_keys_once(rows, want, 0, what)
        bad = [row[2] for row in rows[0] if want.get(row[2]) != [row[4], row[3]]]
        check(not bad, f"{what}: wrong bytes in {bad[:3]}")
        if r2 == 2:
            for x in range(2):
                check(a[x] + rest[x] == full[x], f"{what}: rank {x} differs from a full run")


def case_bad_input(tmp):
    """Pipelines and options a mode cannot run fail with their message."""
    _, src = make_tar(tmp)

    def expect(flags, code, words, what):
        p, _ = base.run(src, "--no-cache", *flags, expect_ok=False)
        ok = p.returncode == code and all(w in p.stderr for w in words)
        check(ok, f"{what}: exit {p.returncode}, stderr: {p.stderr.strip()[:300]}")

    expect(["--dispatch", "broadcast", "--map", "once/count"], 1,
           ["non-replicable", "'count'"], "broadcast + once/ stage before the merge")
    expect(["--dispatch", "broadcast", "--map", "post/count"], 0, [],
           "broadcast + post/ stage (after the merge) is fine")
    expect(["--dispatch", "bogus"], 2, ["--dispatch"], "unknown dispatch mode")
    expect(["--dispatch", "broadcast", "--worker-strategy", "by-something"], 1,
           ["broadcast", "'by-something'"], "broadcast + unknown worker strategy")
    expect(["--dispatch", "round_robin", "--order", "as_completed", "--checkpoint-dir",
            os.path.join(tmp, "ck"), "--stop-after-steps", 2], 2,
           ["--order exact", "as_completed"], "as_completed + dispatch + checkpoint, at start")
    check(not os.path.exists(os.path.join(tmp, "ck", "CHECKPOINT")),
          "a refused save still wrote a checkpoint")
    expect(["--map", "once/nosuchstage"], 1, ["'nosuchstage'"], "unknown once/ stage")
    expect(["--prefetch-sources", 0, "--dispatch", "broadcast"], 2, ["--prefetch-sources"],
           "--prefetch-sources 0")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-dispatch-e2e")


if __name__ == "__main__":
    sys.exit(main())
