#!/usr/bin/env python3
"""End-to-end tests of one job across several processes: tools/shardyard-launch, torchrun,
mpirun and SLURM's variables start real `shardyard run` rank processes that meet at one
coordinator over the network (loopback).

Usage: run_multiprocess_e2e.py --shardyard BIN [--trainer BIN] CASE
Every case compares the ranks' --dump-keys files with the same job run with --ranks in one
process (exact order, exactly once), or checks that a failure stops every process in time,
names the culprit and leaves no process behind. Exit 0 = pass, 77 = skipped (a launcher
that is not installed).
"""
import collections
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (make, read_dump, check)
sys.path.insert(0, os.path.join(HERE, "..", "servers"))
from servers import free_port  # noqa: E402  (a port outside the ephemeral range)

LAUNCH = os.path.normpath(os.path.join(HERE, "..", "..", "tools", "shardyard-launch"))
check = base.check
# Every wait of this file is bounded: a job that hangs fails its case, it does not hang it.
JOB_TIMEOUT = 120


def dataset(tmp, shards=8, samples=40, **kw):
    exp = base.make(os.path.join(tmp, "d"), shards=shards, samples=samples, **kw)
    return os.path.join(tmp, "d", f"shard-{{000000..{shards - 1:06d}}}.tar"), exp


def job_flags(source, *extra):
    return ["--source", source, "--shuffle", "--seed", "3", "--batch-size", "4",
            "--workers", "2", "--no-cache", *map(str, extra)]


def rank_cmd(source, *extra):
    return [base.ARGS.shardyard, "run", *job_flags(source, *extra)]


def launch(nproc, command, *launcher_flags, env=None, timeout=JOB_TIMEOUT):
    argv = [sys.executable, LAUNCH, "--shardyard", base.ARGS.shardyard, "--nproc-per-node",
            str(nproc), *map(str, launcher_flags), "--", *command]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              env=env if env is not None else os.environ)
    except subprocess.TimeoutExpired as e:
        # What the launcher printed before it was killed says which processes had finished;
        # kill_leftovers() then shows what still ran and where its threads waited.
        said = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        print(f"the launcher ran past {timeout} s; its stderr so far:\n{(said or '')[-3000:]}",
              file=sys.stderr)
        raise


def in_one_process(tmp, name, source, ranks, *extra):
    """The reference: the same job with every rank in one process."""
    dump = os.path.join(tmp, name)
    p = subprocess.run([base.ARGS.shardyard, "run", "--ranks", str(ranks),
                        *job_flags(source, *extra), "--dump-keys", dump],
                       capture_output=True, text=True, timeout=JOB_TIMEOUT)
    check(p.returncode == 0, f"--ranks {ranks} in one process failed: {p.stderr[-500:]}")
    return base.read_dump(dump, ranks)


def same_as_one_process(tmp, dump, source, ranks, what, *extra):
    ref = in_one_process(tmp, "ref-" + os.path.basename(dump), source, ranks, *extra)
    got = base.read_dump(dump, ranks)
    for r in range(ranks):
        check(got[r] == ref[r], f"{what}: rank {r} delivered {len(got[r])} rows, not the "
                                f"{len(ref[r])} of --ranks {ranks} in one process, in order")
    return got


def exactly_once(pieces, exp, epochs, what):
    keys = collections.Counter(row[2] for rows in pieces for r in rows for row in rows[r])
    for key in exp["digests"]:
        if keys.get(key, 0) != epochs:
            check(False, f"{what}: sample {key} delivered {keys.get(key, 0)} times, "
                         f"not {epochs}")
            return
    extra = set(keys) - set(exp["digests"])
    check(not extra, f"{what}: unknown samples {sorted(extra)[:3]}")


def ok(p, what):
    check(p.returncode == 0, f"{what}: exit {p.returncode}\n{base.excerpt(p.stderr)}")


def leftovers(marker):
    """Processes still running whose command line names `marker` (this case's folder)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append((int(pid), cmd))
    return found


def no_leftovers(tmp, what):
    deadline = time.monotonic() + 5
    while leftovers(tmp) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = leftovers(tmp)
    check(not left, f"{what}: processes left behind: {[f'{p}: {c[:160]}' for p, c in left]}")


# ---- cases ---------------------------------------------------------------------------------

def case_launch_1x4(tmp):
    """One node, 4 rank processes: identical to --ranks 4 in one process, exactly once."""
    src, exp = dataset(tmp, uneven=True, vary=True, bytes=300)
    dump = os.path.join(tmp, "mp")
    p = launch(4, rank_cmd(src, "--epochs", 2, "--json", "--dump-keys", dump))
    ok(p, "launcher 1x4")
    for r in range(4):
        check(f"[rank {r}] " in p.stdout, f"no output line prefixed with rank {r}")
        check(f'"rank":{r}' in p.stdout and '"world_size":4' in p.stdout,
              f"rank {r}'s JSON summary lacks its rank or the world size")
    got = same_as_one_process(tmp, dump, src, 4, "launcher 1x4", "--epochs", 2)
    exactly_once([got], exp, 2, "launcher 1x4")
    no_leftovers(tmp, "launcher 1x4")


def case_launch_2x2(tmp):
    """Two nodes of 2 processes on loopback: two launcher invocations meet at node 0's
    coordinator with a shared token file and run id."""
    src, exp = dataset(tmp)
    dump = os.path.join(tmp, "mp")
    token = os.path.join(tmp, "token")
    fd = os.open(token, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"a-secret-both-nodes-share\n")
    os.close(fd)
    port = free_port()
    flags = ["--nnodes", 2, "--coordinator", f"127.0.0.1:{port}", "--token-file", token,
             "--run-id", "job-2x2"]
    argv = lambda node: [sys.executable, LAUNCH, "--shardyard", base.ARGS.shardyard,  # noqa: E731
                         "--nproc-per-node", "2", *map(str, flags), "--node-rank", str(node),
                         "--", *rank_cmd(src, "--dump-keys", dump)]
    nodes = [subprocess.Popen(argv(n), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in (0, 1)]
    outs = [n.communicate(timeout=JOB_TIMEOUT) for n in nodes]
    for n, node in enumerate(nodes):
        check(node.returncode == 0, f"node {n}'s launcher: exit {node.returncode}\n"
                                    f"{outs[n][1][-1500:]}")
    check("[rank 2] " in outs[1][0] and "[rank 0] " in outs[0][0],
          "node 1 runs ranks 2 and 3, node 0 ranks 0 and 1")
    got = same_as_one_process(tmp, dump, src, 4, "launcher 2x2")
    exactly_once([got], exp, 1, "launcher 2x2")
    no_leftovers(tmp, "launcher 2x2")


def case_rescale(tmp):
    """A checkpoint cut at 4 processes, resumed at 4 (bit-exact) and at 3 (exactly once)."""
    src, exp = dataset(tmp, uneven=True)
    common = ["--epochs", 2]
    ck = os.path.join(tmp, "ck")
    p = launch(4, rank_cmd(src, *common, "--checkpoint-dir", ck, "--stop-after-steps", 7,
                           "--dump-keys", os.path.join(tmp, "a")))
    ok(p, "the run that saves at 4 processes")
    names = sorted(os.listdir(ck))
    check(names == ["CHECKPOINT"] + [f"rank-{r:05d}.g000001.ckpt" for r in range(4)],
          f"the checkpoint of 4 processes holds {names}")
    first = base.read_dump(os.path.join(tmp, "a"), 4)
    full = in_one_process(tmp, "full", src, 4, *common)
    for r in range(4):
        check(first[r] == full[r][:len(first[r])], f"rank {r} before the cut differs")
    # the same number of processes: the rest of the uninterrupted run, bit for bit
    p = launch(4, rank_cmd(src, *common, "--resume", ck, "--dump-keys",
                           os.path.join(tmp, "b4")))
    ok(p, "resume at 4 processes")
    rest = base.read_dump(os.path.join(tmp, "b4"), 4)
    for r in range(4):
        check(first[r] + rest[r] == full[r], f"rank {r}: cut + resume at 4 processes is not "
                                             "the uninterrupted run")
    # 3 processes: every sample of both epochs exactly once across the two pieces
    p = launch(3, rank_cmd(src, *common, "--resume", ck, "--dump-keys",
                           os.path.join(tmp, "b3")))
    ok(p, "resume at 3 processes")
    exactly_once([first, base.read_dump(os.path.join(tmp, "b3"), 3)], exp, 2,
                 "4 processes, then 3")
    # a checkpoint of another dataset is refused, naming why, by every rank
    base.make(os.path.join(tmp, "o"), shards=3, samples=5)
    other = os.path.join(tmp, "o", "shard-{000000..000002}.tar")
    p = launch(2, rank_cmd(other, *common, "--resume", ck))
    check(p.returncode != 0 and "fingerprint" in p.stderr.lower() + p.stdout.lower(),
          f"a checkpoint of another dataset: exit {p.returncode}: {p.stderr[-600:]}")
    # a rank file missing: refused by name
    os.remove(os.path.join(ck, "rank-00002.g000001.ckpt"))
    p = launch(2, rank_cmd(src, *common, "--resume", ck))
    check(p.returncode != 0 and "rank-00002.g000001.ckpt" in p.stderr,
          f"a checkpoint missing a rank file: exit {p.returncode}: {p.stderr[-600:]}")
    no_leftovers(tmp, "rescale")


def case_trainer(tmp):
    """examples/trainer as one rank of a launched job: each rank checks its own samples."""
    if not base.ARGS.trainer:
        sys.exit(77)
    src, _ = dataset(tmp)
    p = launch(3, [base.ARGS.trainer, "--source", src, "--workers", "2", "--batch-size", "8",
                   "--epochs", "2"])
    ok(p, "examples/trainer as 3 ranks")
    for r in range(3):
        check(f"[rank {r}] " in p.stdout + p.stderr, f"no output of the trainer's rank {r}")
    no_leftovers(tmp, "trainer")


def case_seed_mismatch(tmp):
    """A rank started with another seed: every rank stops within 30 s, naming the field and
    both values."""
    src, _ = dataset(tmp)
    script = (f'seed=3; [ "$RANK" = 2 ] && seed=9; exec {base.ARGS.shardyard} run --source "{src}" '
              '--shuffle --seed $seed --batch-size 4 --no-cache --epochs 1000')
    t0 = time.monotonic()
    p = launch(4, ["sh", "-c", script], timeout=60)
    took = time.monotonic() - t0
    out = p.stdout + p.stderr
    check(p.returncode != 0, "a job whose rank 2 has another seed exited 0")
    check(took < 30, f"the mismatch took {took:.1f} s to stop the job")
    check("seed" in out and "9" in out and "3" in out,
          f"the message does not name the seed and both values: {out[-1500:]}")
    no_leftovers(tmp, "seed mismatch")


def case_sigkill(tmp):
    """SIGKILL of one rank mid-run: the others and the launcher exit non-zero within 30 s,
    naming the lost rank; no process is left behind."""
    src, _ = dataset(tmp)
    argv = [sys.executable, LAUNCH, "--shardyard", base.ARGS.shardyard, "--nproc-per-node", "4",
            "--", *rank_cmd(src, "--epochs", 100000)]
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victim = None
    deadline = time.monotonic() + 30
    while victim is None and time.monotonic() < deadline:
        time.sleep(0.2)
        ranks = {pid for pid, cmd in leftovers(tmp)
                 if cmd.startswith(base.ARGS.shardyard + " run") and "--epochs 100000" in cmd}
        for pid in ranks:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    rank_1 = b"RANK=1" in f.read().split(b"\0")
                with open(f"/proc/{pid}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            # A child of a rank with the rank's command line is no rank: ThreadSanitizer
            # forks one to run its symbolizer, and it runs the rank's binary until it execs.
            if rank_1 and parent not in ranks:
                victim = pid
    check(victim is not None, "rank 1 never started")
    if victim is None:
        launcher.kill()
        launcher.communicate()
        return
    time.sleep(1.0)  # mid-run
    os.kill(victim, signal.SIGKILL)
    t0 = time.monotonic()
    try:
        out, err = launcher.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        launcher.kill()
        out, err = launcher.communicate()
        check(False, "the launcher did not exit within 60 s of the SIGKILL")
    took = time.monotonic() - t0
    check(launcher.returncode != 0, "the launcher exited 0 after a rank was killed")
    check(took < 30, f"the job took {took:.1f} s to stop after the SIGKILL")
    check(f"rank 1 (pid {victim}) failed: killed by SIGKILL" in err,
          f"the launcher does not name the killed rank: {err[-1500:]}")
    check("rank 1" in out + err and "lost" in (out + err).lower(),
          f"the other ranks do not say they lost rank 1: {(out + err)[-1500:]}")
    no_leftovers(tmp, "sigkill")


def case_intruder(tmp):
    """A process with a wrong token is refused with a message saying so, the coordinator logs
    it, and the job goes on."""
    src, exp = dataset(tmp)
    token, wrong = os.path.join(tmp, "token"), os.path.join(tmp, "wrong")
    for path, text in ((token, "the-job-token\n"), (wrong, "a-guessed-token\n")):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, text.encode())
        os.close(fd)
    port_file = os.path.join(tmp, "port")
    coord = subprocess.Popen([base.ARGS.shardyard, "coordinator", "--listen", "127.0.0.1:0",
                              "--world-size", "2", "--token-file", token, "--port-file",
                              port_file], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            check(time.monotonic() < deadline and coord.poll() is None,
                  "the coordinator did not write its port")
            if FAILED():
                return
            time.sleep(0.05)
        where = "127.0.0.1:" + open(port_file).read().strip().rpartition(":")[2]
        rank = lambda r, tok, dump: [base.ARGS.shardyard, "run", *job_flags(src),  # noqa: E731
                                     "--rank", str(r), "--world-size", "2", "--coordinator",
                                     where, "--token-file", tok, "--dump-keys", dump]
        # Rank 0 hosts the coordinator unless told that it runs on its own.
        env = dict(os.environ, SHARDYARD_COORDINATOR_EXTERNAL="1")
        bad = subprocess.run(rank(0, wrong, os.path.join(tmp, "x")), capture_output=True,
                             text=True, timeout=60, env=env)
        check(bad.returncode != 0 and "token" in bad.stderr,
              f"the intruder: exit {bad.returncode}: {bad.stderr[-600:]}")
        dump = os.path.join(tmp, "mp")
        ranks = [subprocess.Popen(rank(r, token, dump), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env) for r in (0, 1)]
        for r, proc in enumerate(ranks):
            _, err = proc.communicate(timeout=JOB_TIMEOUT)
            check(proc.returncode == 0, f"rank {r} after the intruder: {err[-600:]}")
        _, cerr = coord.communicate(timeout=30)
        check(coord.returncode == 0, f"the coordinator: exit {coord.returncode}: {cerr}")
        check("refused" in cerr and "token" in cerr,
              f"the coordinator did not log the intruder: {cerr[-800:]}")
        got = same_as_one_process(tmp, dump, src, 2, "after an intruder")
        exactly_once([got], exp, 1, "after an intruder")
    finally:
        if coord.poll() is None:
            coord.kill()
            coord.communicate()


def FAILED():
    return bool(base.FAILS)


def case_tls(tmp):
    """SHARDYARD_TLS=1: the same job over mutual TLS delivers the same batches."""
    src, _ = dataset(tmp)
    dump = os.path.join(tmp, "mp")
    p = launch(3, rank_cmd(src, "--dump-keys", dump), env=dict(os.environ, SHARDYARD_TLS="1"))
    ok(p, "launcher with TLS")
    same_as_one_process(tmp, dump, src, 3, "TLS")


def case_max_restarts(tmp):
    """--max-restarts: a job whose rank 1 fails after a checkpoint starts again from it
    (`--resume auto`), and the two attempts together deliver every sample exactly once."""
    src, exp = dataset(tmp, uneven=True)
    ck = os.path.join(tmp, "ck")
    # Attempt 0 cuts at step 5 and then rank 1 fails; attempt 1 resumes from the cut.
    script = (f'flags="--source {src} --shuffle --seed 3 --batch-size 4 --no-cache --epochs 2 '
              f'--checkpoint-dir {ck} --dump-keys {tmp}/attempt-$TORCHELASTIC_RESTART_COUNT"; '
              'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then '
              f'  {base.ARGS.shardyard} run $flags --stop-after-steps 5 || exit $?; '
              '  [ "$RANK" = 1 ] && exit 3; exit 0; '
              f'else exec {base.ARGS.shardyard} run $flags --resume auto; fi')
    p = launch(3, ["sh", "-c", script], "--max-restarts", 1, "--grace-period", 0)
    ok(p, "a job restarted once")
    check("restarting the job (1 of 1)" in p.stderr, f"no restart announced: {p.stderr[-800:]}")
    check("resuming from the checkpoint" in p.stdout + p.stderr, "attempt 1 did not resume")
    exactly_once([base.read_dump(os.path.join(tmp, "attempt-0"), 3),
                  base.read_dump(os.path.join(tmp, "attempt-1"), 3)], exp, 2,
                 "attempt 0 + attempt 1")
    # Without restarts left, the failure is the job's.
    shutil.rmtree(ck)
    p = launch(3, ["sh", "-c", script.replace("--resume auto", "--resume auto; exit 4")],
               "--max-restarts", 0)
    check(p.returncode != 0 and "rank 1" in p.stderr and "exit status 3" in p.stderr,
          f"a failure without restarts: exit {p.returncode}: {p.stderr[-800:]}")
    no_leftovers(tmp, "max restarts")


def under_launcher(tmp, what, program, package, launcher_argv):
    """Runs 3 ranks under another launcher (`launcher_argv` before the rank's command), with
    no SHARDYARD_ variable set: they must find each other on their own."""
    if shutil.which(program) is None:
        print(f"{program} is not installed ({package}): skipped")
        sys.exit(77)
    src, exp = dataset(tmp)
    dump = os.path.join(tmp, "mp")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDYARD_")}
    p = subprocess.run([*launcher_argv, *rank_cmd(src, "--dump-keys", dump)],
                       capture_output=True, text=True, timeout=JOB_TIMEOUT, env=env)
    ok(p, what)
    got = same_as_one_process(tmp, dump, src, 3, what)
    exactly_once([got], exp, 1, what)
    no_leftovers(tmp, what)


def case_torchrun(tmp):
    """Under torchrun (one node). Not `--standalone`: there torch takes MASTER_PORT from the
    kernel's ephemeral range, and MASTER_PORT + 1, where the ranks meet, can be taken by any
    outgoing connection before rank 0 listens (it was, once, with the suite's other tests
    connecting beside it; docs/multi-process.md says so for users). A MASTER_PORT below that
    range, as a cluster's launcher sets it, does not race."""
    port = free_port()
    under_launcher(tmp, f"torchrun --nproc_per_node 3 --master_port {port}", "torchrun",
                   "python3-torch",
                   ["/usr/bin/python3", shutil.which("torchrun") or "torchrun", "--nnodes", "1",
                    "--nproc_per_node", "3", "--master_addr", "127.0.0.1", "--master_port",
                    str(port), "--no_python", "--redirects", "1", "--tee", "1",
                    "--log_dir", os.path.join(tmp, "logs")])


def case_mpirun(tmp):
    """Under Open MPI's mpirun on one node."""
    root = ["--allow-run-as-root"] if os.getuid() == 0 else []
    under_launcher(tmp, "mpirun -np 3", "mpirun", "openmpi-bin",
                   ["mpirun", *root, "--oversubscribe", "-np", "3"])


def case_slurm(tmp):
    """SLURM's variables (set by hand, SLURM is not installed): one node through the
    rendezvous file; two nodes through MASTER_ADDR/MASTER_PORT."""
    src, exp = dataset(tmp)
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("SHARDYARD_", "SLURM_", "MASTER_", "RANK", "WORLD_"))}
    base_env["XDG_RUNTIME_DIR"] = tmp  # the rendezvous file lives in this case's folder
    for nodes, extra in ((1, {}), (2, {"MASTER_ADDR": "127.0.0.1",
                                       "MASTER_PORT": str(free_port())})):
        dump = os.path.join(tmp, f"mp{nodes}")
        procs = []
        for r in range(4):
            env = dict(base_env, SLURM_JOB_ID=f"42{nodes}", SLURM_STEP_ID="0",
                       SLURM_PROCID=str(r), SLURM_NTASKS="4", SLURM_NNODES=str(nodes),
                       SLURM_NODEID=str(r * nodes // 4), SLURM_LOCALID=str(r % (4 // nodes)),
                       SLURM_NTASKS_PER_NODE=str(4 // nodes), **extra)
            procs.append(subprocess.Popen(rank_cmd(src, "--dump-keys", dump), env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, start_new_session=True))
        for r, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=JOB_TIMEOUT)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                proc.communicate()
                err = "timed out"
            check(proc.returncode == 0, f"SLURM, {nodes} node(s), rank {r}: {err[-600:]}")
        got = same_as_one_process(tmp, dump, src, 4, f"SLURM on {nodes} node(s)")
        exactly_once([got], exp, 1, f"SLURM on {nodes} node(s)")


def describe_threads(pid):
    """Each thread of a process with its name and the kernel function it waits in."""
    lines = []
    try:
        tids = sorted(os.listdir(f"/proc/{pid}/task"), key=int)
    except OSError:
        return lines
    for tid in tids:
        parts = []
        for what in ("comm", "wchan"):
            try:
                with open(f"/proc/{pid}/task/{tid}/{what}") as f:
                    parts.append(f.read().strip() or "-")
            except OSError:
                parts.append("?")
        lines.append(f"    thread {tid} {parts[0]}: waits in {parts[1]}")
    return lines


def kill_leftovers(tmp):
    """A failed case still leaves nothing running; what ran is shown first (a hang's trace)."""
    for pid, cmd in leftovers(tmp):
        print(f"still running after the case: pid {pid}: {cmd[:300]}", file=sys.stderr)
        for line in describe_threads(pid):
            print(line, file=sys.stderr)
    for pid, _ in leftovers(tmp):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-mp", cleanup=kill_leftovers)


if __name__ == "__main__":
    sys.exit(main())
