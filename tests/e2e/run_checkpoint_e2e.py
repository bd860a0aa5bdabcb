#!/usr/bin/env python3
"""End-to-end tests of checkpoints with the real `shardyard` binary.

Usage: run_checkpoint_e2e.py --shardyard BIN CASE
Each case stops a run after some steps with --checkpoint-dir/--stop-after-steps, resumes it
with --resume (at the same or another topology) and compares the --dump-keys output of the
pieces with an uninterrupted run. Exit 0 = pass.
"""
import collections
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: make, run, read_dump, check)

check = base.check


def rows_of(folder, ranks):
    return base.read_dump(folder, ranks)


def flat(rows):
    return [row for r in sorted(rows) for row in rows[r]]


def run_piece(src, tmp, name, ranks, workers, batch, *extra):
    dump = os.path.join(tmp, name)
    _, summary = base.run(src, "--ranks", ranks, "--workers", workers, "--batch-size", batch,
                          *extra, dump=dump)
    return rows_of(dump, ranks), summary


def global_batches(rows, epoch):
    """step -> sorted keys of the global batch (all ranks) of an epoch."""
    out = collections.defaultdict(list)
    for row in flat(rows):
        if row[0] == epoch:
            out[row[1]].append(row[2])
    return {s: sorted(k) for s, k in out.items()}


def check_pieces_exactly_once(pieces, expected, epoch, what):
    keys = [row[2] for rows in pieces for row in flat(rows) if row[0] == epoch]
    counts = collections.Counter(keys)
    dup = [k for k, c in counts.items() if c > 1]
    check(not dup, f"{what}: {len(dup)} samples of epoch {epoch} delivered twice, e.g. {dup[:3]}")
    missing = set(expected["digests"]) - set(counts)
    check(not missing, f"{what}: {len(missing)} samples of epoch {epoch} never delivered, "
                       f"e.g. {sorted(missing)[:3]}")
    # every delivered sample carries the bytes the generator wrote
    bad = [row[2] for rows in pieces for row in flat(rows)
           if expected["digests"].get(row[2]) != [row[4], row[3]]]
    check(not bad, f"{what}: {len(bad)} samples with wrong bytes, e.g. {bad[:3]}")


def plan_flags(seed=7):
    return ["--shuffle", "--seed", seed, "--no-cache"]


# ---- cases ---------------------------------------------------------------------------------

def case_resume_same_topology(tmp):
    """Same ranks and batch size (any workers): the batches after resume are bit-identical."""
    exp = base.make(os.path.join(tmp, "d"), shards=6, samples=70, uneven=True, vary=True,
                    bytes=300)
    src = os.path.join(tmp, "d", "shard-{000000..000005}.tar")
    for (r, w, b, w2, stop, order_flags) in [(2, 2, 16, 3, 7, []), (1, 3, 10, 1, 13, []),
                                              (3, 1, 8, 2, 1, ["--chunk-items", "5"]),
                                              (2, 2, 7, 2, 20, ["--logical-shards", "6"])]:
        what = f"R={r} W={w}->{w2} B={b} stop={stop}"
        flags = plan_flags() + ["--epochs", 2] + order_flags
        full, _ = run_piece(src, tmp, "full", r, w, b, *flags)
        ck = os.path.join(tmp, "ck")
        shutil.rmtree(ck, ignore_errors=True)
        a, sa = run_piece(src, tmp, "a", r, w, b, *flags, "--checkpoint-dir", ck,
                          "--stop-after-steps", stop)
        check(sa["batches"] == stop * r, f"{what}: stopped run delivered {sa['batches']} batches")
        b_rows, sb = run_piece(src, tmp, "b", r, w2, b, *flags, "--resume", ck)
        check(sb["resumed"]["step"] == stop, f"{what}: resumed at step {sb['resumed']}")
        for rank in range(r):
            joined = a[rank] + b_rows[rank]
            check(joined == full[rank],
                  f"{what}: rank {rank}: stop+resume differs from the uninterrupted run "
                  f"({len(joined)} vs {len(full[rank])} rows)")
        check_pieces_exactly_once([a, b_rows], exp, 0, what)


def case_resume_keeps_chunk(tmp):
    """A checkpoint keeps its shuffle block: resumed without --chunk-items, a run saved with
    --chunk-items 5 goes on with 5 and delivers what the uninterrupted run delivers (as a
    checkpoint saved by a binary with another default chunk size does); resumed with another
    --chunk-items, it is refused, both values named."""
    exp = base.make(os.path.join(tmp, "d"), shards=6, samples=70, uneven=True, bytes=300)
    src = os.path.join(tmp, "d", "shard-{000000..000005}.tar")
    r, w, b, stop = 2, 2, 8, 6
    flags = plan_flags() + ["--epochs", 2]
    full, _ = run_piece(src, tmp, "full", r, w, b, *flags, "--chunk-items", 5)
    ck = os.path.join(tmp, "ck")
    a, _ = run_piece(src, tmp, "a", r, w, b, *flags, "--chunk-items", 5, "--checkpoint-dir", ck,
                     "--stop-after-steps", stop)
    rest, sr = run_piece(src, tmp, "b", r, w, b, *flags, "--resume", ck)
    check(sr["resumed"]["step"] == stop, f"resumed at {sr['resumed']}")
    for rank in range(r):
        check(a[rank] + rest[rank] == full[rank],
              f"rank {rank}: stop+resume without --chunk-items differs from the run with 5")
    check_pieces_exactly_once([a, rest], exp, 0, "resumed without --chunk-items")
    p, _ = base.run(src, "--ranks", r, "--workers", w, "--batch-size", b, *flags,
                    "--chunk-items", 6, "--resume", ck, expect_ok=False)
    check(p.returncode == 1 and "shuffle block" in p.stderr and "5" in p.stderr
          and "6" in p.stderr, f"another --chunk-items: exit {p.returncode}: {p.stderr[-300:]}")


def case_rescale(tmp):
    """Other ranks and workers: exactly once over both runs; later epochs as a fresh run."""
    exp = base.make(os.path.join(tmp, "d"), shards=7, samples=60, uneven=True)
    src = os.path.join(tmp, "d", "shard-{000000..000006}.tar")
    for (r, w, r2, w2, b, b2, stop, extra) in [
            (2, 2, 3, 3, 16, 16, 5, []), (3, 2, 1, 4, 8, 8, 9, []), (1, 4, 4, 1, 32, 8, 3, []),
            (2, 3, 2, 2, 12, 12, 6, ["--order", "as_completed"]),
            (4, 2, 3, 5, 5, 9, 11, ["--drop-last"])]:
        what = f"R={r} W={w} B={b} -> R={r2} W={w2} B={b2} stop={stop} {' '.join(extra)}"
        flags = plan_flags(11) + ["--epochs", 2] + extra
        ck = os.path.join(tmp, "ck")
        shutil.rmtree(ck, ignore_errors=True)
        a, _ = run_piece(src, tmp, "a", r, w, b, *flags, "--checkpoint-dir", ck,
                         "--stop-after-steps", stop)
        rest, sr = run_piece(src, tmp, "b", r2, w2, b2, *flags, "--resume", ck)
        check(sr["resumed"]["rescaled"], f"{what}: not reported as rescaled")
        if "--drop-last" in extra:
            # drop_last's tail is decided by the interrupted run's plan: compare the delivered
            # set with an uninterrupted run at the old topology.
            full, _ = run_piece(src, tmp, "full", r, w, b, *flags)
            want = collections.Counter(row[2] for row in flat(full) if row[0] == 0)
            got = collections.Counter(row[2] for rows in (a, rest) for row in flat(rows)
                                      if row[0] == 0)
            check(got == want, f"{what}: epoch 0 delivered {sum(got.values())} samples, "
                               f"the uninterrupted run {sum(want.values())}")
        else:
            check_pieces_exactly_once([a, rest], exp, 0, what)
        steps0 = sorted({row[1] for row in flat(rest) if row[0] == 0})
        check(steps0 and steps0[0] == stop, f"{what}: resumed steps start at {steps0[:1]}")
        per_rank = [len({row[1] for row in rest[x] if row[0] == 0}) for x in rest]
        check(len(set(per_rank)) == 1, f"{what}: unequal steps per rank after resume {per_rank}")
        if "--order" not in extra:
            fresh, _ = run_piece(src, tmp, "fresh", r2, w2, b2, *flags)
            for x in range(r2):
                e1 = [row for row in rest[x] if row[0] == 1]
                f1 = [row for row in fresh[x] if row[0] == 1]
                check(e1 == f1, f"{what}: epoch 1 of rank {x} differs from a fresh run")


def case_elastic(tmp):
    """R | L, R' | L, L | N and R x B = R' x B': the global batch at every step is the same."""
    exp = base.make(os.path.join(tmp, "d"), shards=8, samples=48)
    src = os.path.join(tmp, "d", "shard-{000000..000007}.tar")
    flags = plan_flags(3) + ["--logical-shards", 16]
    full = global_batches(run_piece(src, tmp, "full", 2, 2, 12, *flags)[0], 0)
    for (r2, w2, b2, stop) in [(4, 1, 6, 5), (1, 3, 24, 9), (8, 2, 3, 1)]:
        what = f"R=2 B=12 -> R={r2} B={b2} stop={stop}"
        ck = os.path.join(tmp, "ck")
        shutil.rmtree(ck, ignore_errors=True)
        a, _ = run_piece(src, tmp, "a", 2, 2, 12, *flags, "--checkpoint-dir", ck,
                         "--stop-after-steps", stop)
        rest, _ = run_piece(src, tmp, "b", r2, w2, b2, *flags, "--resume", ck)
        got = global_batches(a, 0)
        got.update(global_batches(rest, 0))
        check(got == full, f"{what}: global batches differ from the uninterrupted run at steps "
                           f"{sorted(s for s in full if got.get(s) != full[s])[:5]}")
        check_pieces_exactly_once([a, rest], exp, 0, what)


def case_epoch_boundary(tmp):
    """A cut at the end of an epoch resumes at the start of the next one."""
    exp = base.make(os.path.join(tmp, "d"), shards=4, samples=40)
    src = os.path.join(tmp, "d", "shard-{000000..000003}.tar")
    flags = plan_flags(5) + ["--epochs", 3]
    full, sf = run_piece(src, tmp, "full", 2, 2, 10, *flags)
    steps = sf["steps_per_epoch"]
    ck = os.path.join(tmp, "ck")
    a, _ = run_piece(src, tmp, "a", 2, 2, 10, *flags, "--checkpoint-dir", ck,
                     "--stop-after-steps", steps)
    p = subprocess.run([base.ARGS.shardyard, "checkpoint", "inspect", ck], capture_output=True,
                       text=True)
    check(p.returncode == 0 and "epoch complete" in p.stdout and "resume     at epoch 1"
          in p.stdout, f"inspect of an epoch-end checkpoint: {p.stdout[:300]} {p.stderr}")
    rest, sr = run_piece(src, tmp, "b", 2, 1, 10, *flags, "--resume", ck)
    check(sr["resumed"]["epoch"] == 1, f"resumed at epoch {sr['resumed']}")
    check(sorted({row[0] for row in flat(rest)}) == [1, 2], "resumed run repeats or skips epochs")
    for x in range(2):
        check(a[x] + rest[x] == full[x], f"rank {x}: epoch-end resume differs from the full run")
    check_pieces_exactly_once([a, rest], exp, 0, "epoch boundary")


def case_resume_twice(tmp):
    """Checkpoint, resume elsewhere, checkpoint again, resume again: every guarantee holds."""
    exp = base.make(os.path.join(tmp, "d"), shards=5, samples=66, uneven=True)
    src = os.path.join(tmp, "d", "shard-{000000..000004}.tar")
    flags = plan_flags(9)
    ck1, ck2 = os.path.join(tmp, "ck1"), os.path.join(tmp, "ck2")
    a, _ = run_piece(src, tmp, "a", 2, 2, 8, *flags, "--checkpoint-dir", ck1,
                     "--stop-after-steps", 6)
    # uninterrupted continuation at the second topology, for the same-topology guarantee
    cont, _ = run_piece(src, tmp, "cont", 3, 1, 8, *flags, "--resume", ck1)
    b, _ = run_piece(src, tmp, "b", 3, 1, 8, *flags, "--resume", ck1, "--checkpoint-dir", ck2,
                     "--stop-after-steps", 4)
    c, _ = run_piece(src, tmp, "c", 3, 2, 8, *flags, "--resume", ck2)
    for x in range(3):
        check(b[x] + c[x] == cont[x], f"rank {x}: second resume at the same topology differs")
    check_pieces_exactly_once([a, b, c], exp, 0, "resume twice (same topology)")
    d, _ = run_piece(src, tmp, "d", 1, 4, 5, *flags, "--resume", ck2)
    check_pieces_exactly_once([a, b, d], exp, 0, "resume twice (another topology)")
    # saving again into a directory replaces the checkpoint: a newer generation, and only
    # its files are left
    gen_before = inspect_generation(ck2)
    run_piece(src, tmp, "b2", 3, 1, 8, *flags, "--resume", ck1, "--checkpoint-dir", ck2,
              "--stop-after-steps", 2)
    gen = inspect_generation(ck2)
    check(gen > gen_before, f"second save into a directory: generation {gen} after {gen_before}")
    names = sorted(os.listdir(ck2))
    want = ["CHECKPOINT"] + [f"rank-{r:05d}.g{gen:06d}.ckpt" for r in range(3)]
    check(names == want, f"checkpoint directory after a second save: {names}")


def inspect_generation(ck):
    p = subprocess.run([base.ARGS.shardyard, "checkpoint", "inspect", "--json", ck],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)["generation"]


def expect_refused(src, ck, words, what, *extra):
    p, _ = base.run(src, "--ranks", 2, "--workers", 2, "--batch-size", 8, *plan_flags(),
                    *extra, "--resume", ck, expect_ok=False)
    ok = p.returncode == 1 and all(w in p.stderr for w in words)
    check(ok, f"{what}: exit {p.returncode}, stderr: {p.stderr.strip()[:300]}")


def case_bad_checkpoints(tmp):
    """Every broken or foreign checkpoint is refused with a clear message."""
    base.make(os.path.join(tmp, "d"), shards=4, samples=30)
    base.make(os.path.join(tmp, "other"), shards=4, samples=31, seed=99)
    src = os.path.join(tmp, "d", "shard-{000000..000003}.tar")
    other = os.path.join(tmp, "other", "shard-{000000..000003}.tar")
    good = os.path.join(tmp, "good")
    run_piece(src, tmp, "a", 2, 2, 8, *plan_flags(), "--checkpoint-dir", good,
              "--stop-after-steps", 3)

    def copy(name):
        d = os.path.join(tmp, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(good, d)
        return d

    expect_refused(other, good, ["another dataset"], "other dataset")
    expect_refused(src, good, ["logical shards"], "other L", "--logical-shards", 7)
    p, _ = base.run(src, "--ranks", 2, "--workers", 2, "--batch-size", 8, "--shuffle", "--seed",
                    8, "--no-cache", "--resume", good, expect_ok=False)
    check(p.returncode == 1 and "seed" in p.stderr, f"other seed: {p.stderr.strip()[:300]}")

    d = copy("newer")
    with open(os.path.join(d, "CHECKPOINT"), "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<I", 99))
    expect_refused(src, d, ["newer", "99"], "newer format version")

    d = copy("flipped")
    path = os.path.join(d, "rank-00001.g000001.ckpt")
    data = bytearray(open(path, "rb").read())
    data[len(data) // 2] ^= 0x40
    open(path, "wb").write(bytes(data))
    expect_refused(src, d, ["checksum mismatch", "rank-00001"], "damaged rank file")

    d = copy("truncated")
    path = os.path.join(d, "rank-00000.g000001.ckpt")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) - 9])
    expect_refused(src, d, ["truncated"], "truncated rank file")

    d = copy("manifest_damaged")
    path = os.path.join(d, "CHECKPOINT")
    data = bytearray(open(path, "rb").read())
    data[30] ^= 0x01
    open(path, "wb").write(bytes(data))
    expect_refused(src, d, ["CHECKPOINT", "checksum mismatch"], "damaged CHECKPOINT")

    d = copy("missing")
    os.remove(os.path.join(d, "rank-00001.g000001.ckpt"))
    expect_refused(src, d, ["incomplete", "rank 1"], "missing rank file")

    empty = os.path.join(tmp, "empty")
    os.makedirs(empty)
    expect_refused(src, empty, ["no checkpoint"], "directory without a checkpoint")
    expect_refused(src, os.path.join(tmp, "nowhere"), ["no checkpoint"], "missing directory")

    p = subprocess.run([base.ARGS.shardyard, "checkpoint", "inspect", copy("flipped2")],
                       capture_output=True, text=True)
    check(p.returncode == 0, "inspect of a good copy fails")
    p = subprocess.run([base.ARGS.shardyard, "checkpoint", "inspect", empty], capture_output=True,
                       text=True)
    check(p.returncode == 1 and "no checkpoint" in p.stderr, f"inspect empty: {p.stderr}")
    p, _ = base.run(src, "--stop-after-steps", 2, expect_ok=False)
    check(p.returncode == 2 and "--checkpoint-dir" in p.stderr, "--stop-after-steps alone")


def case_kill_during_save(tmp):
    """SIGKILL between the rank files and the commit leaves the previous checkpoint intact."""
    exp = base.make(os.path.join(tmp, "d"), shards=4, samples=50)
    src = os.path.join(tmp, "d", "shard-{000000..000003}.tar")
    flags = plan_flags(13)
    full, _ = run_piece(src, tmp, "full", 2, 2, 8, *flags)
    ck = os.path.join(tmp, "ck")
    check(base.ARGS.fault_shardyard, "kill_during_save needs --fault-shardyard")
    if not base.ARGS.fault_shardyard:
        return
    # The same command line over a file system that holds every rename onto CHECKPOINT (the
    # commit) for 3 s, after every rank's file of the cut is durable.
    cmd = [base.ARGS.fault_shardyard, "--hold-renames-onto", "CHECKPOINT", "--hold-ms", 3000,
           "--", "run", "--source", src, "--ranks", 2, "--workers", 2,
           "--batch-size", 8, *flags, "--json", "--checkpoint-dir", ck, "--checkpoint-every", 3]
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    # Wait for the first commit (step 3, held 3 s too), then for the second save's rank files
    # (step 6), and kill the process while it holds that commit back.
    deadline = time.time() + 60
    second = [os.path.join(ck, f"rank-0000{r}.g000002.ckpt") for r in range(2)]
    while time.time() < deadline and not all(os.path.exists(p) for p in second):
        time.sleep(0.01)
    check(all(os.path.exists(p) for p in second), "the second save never wrote its rank files")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    p = subprocess.run([base.ARGS.shardyard, "checkpoint", "inspect", "--json", ck],
                       capture_output=True, text=True)
    check(p.returncode == 0 and '"generation": 1' in p.stdout and '"step": 3' in p.stdout,
          f"after SIGKILL, inspect: {p.stdout[:200]} {p.stderr}")
    rest, _ = run_piece(src, tmp, "b", 2, 2, 8, *flags, "--resume", ck)
    for x in range(2):
        check(rest[x] == [row for row in full[x] if row[1] >= 3],
              f"rank {x}: resume after SIGKILL differs from the uninterrupted run")
    # the next save cleans up the interrupted generation
    run_piece(src, tmp, "c", 2, 2, 8, *flags, "--resume", ck, "--checkpoint-dir", ck,
              "--stop-after-steps", 1)
    names = sorted(os.listdir(ck))
    check(names == ["CHECKPOINT", "rank-00000.g000003.ckpt", "rank-00001.g000003.ckpt"],
          f"after the next save: {names}")
    del exp


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-ckpt-e2e")


if __name__ == "__main__":
    sys.exit(main())
