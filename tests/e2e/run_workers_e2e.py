#!/usr/bin/env python3
"""End-to-end tests of worker processes (`shardyard run --placement local`,
docs/worker-processes.md): real worker processes, real SIGKILLs, real shared memory.

Usage: run_workers_e2e.py --shardyard BIN --crash-shardyard BIN CASE
  same_batches  --placement local dumps the very rows --placement inproc dumps, for several
                ranks, workers, orders, a stateful stage, a windows dataset, large samples
                (file ranges) with a 1 MiB arena; dispatch modes
                that need placement inproc are refused with a clear message
  kill_workers  SIGKILL of a worker process at 20 random moments: every run exactly once and
                identical to an undisturbed run (a stateful stage included), restarts counted;
                5 more on large samples, whose big fields cross as file ranges
  crash_stage   a stage that segfaults once on one key: the run goes on, the log names pid,
                signal, item and unit, the batches are the undisturbed ones
  poison        a stage that crashes on one key every time: the run stops after
                --max-worker-restarts restarts, naming the key
  orphans       SIGKILL of the trainer (and once of the whole process tree): its worker
                processes are gone within 5 s, and the shm folder holds what it held before
  checkpoint    stop at a step with worker processes, resume (other workers too): the rows
                joined are those of an uninterrupted inproc run
  tiny_shm      a shm folder too small for the arenas (a private 1 MiB tmpfs): a clear error
                that says what to do, no crash
  fork_server   the workers are the children of the rank's fork server (of the rank itself
                with SHARDYARD_WORKER_FORK_SERVER=0); the fork server SIGKILLed at 5 random
                moments: its workers die with it, new ones start, the batches are the
                undisturbed ones
Runs start their workers from the fork server, except where a case says otherwise
(same_batches and kill_workers start some by starting the program again).
Exit 0 = pass, 77 = skipped (tiny_shm and orphans need root to mount a tmpfs).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (make, read_dump, check)

check = base.check
# Every wait of this file is bounded: a run that hangs fails its case, it does not hang it.
RUN_TIMEOUT = 180


def dataset(tmp, shards=8, samples=60, **kw):
    exp = base.make(os.path.join(tmp, "d"), shards=shards, samples=samples, **kw)
    return os.path.join(tmp, "d", f"shard-{{000000..{shards - 1:06d}}}.tar"), exp


def run(binary, source, dump, *extra, env=None, timeout=RUN_TIMEOUT):
    argv = [binary, "run", "--source", source, "--shuffle", "--seed", "5", "--batch-size", "8",
            "--no-cache", "--json", *map(str, extra)]
    if dump:
        argv += ["--dump-keys", dump]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env=env if env is not None else os.environ)


def summary(p):
    try:
        return json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}


def same_rows(ref_dir, got_dir, ranks, what):
    ref = base.read_dump(ref_dir, ranks)
    got = base.read_dump(got_dir, ranks)
    for r in range(ranks):
        if got[r] != ref[r]:
            first = next((i for i, (a, b) in enumerate(zip(got[r], ref[r])) if a != b),
                         min(len(got[r]), len(ref[r])))
            check(False, f"{what}: rank {r} delivered {len(got[r])} rows, not the {len(ref[r])} "
                         f"of placement inproc; first difference at row {first}")
    return got


def children(pid):
    """The child processes of `pid`, whichever of its threads started them."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out


# The name (/proc/PID/comm) of the process that forks a rank's worker processes when the
# program started one (`shardyard run` does, unless SHARDYARD_WORKER_FORK_SERVER=0).
FORK_SERVER = "sy-fork-server"
NO_FORK_SERVER = dict(os.environ, SHARDYARD_WORKER_FORK_SERVER="0")


def comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def fork_servers_of(pid):
    return [c for c in children(pid) if alive(c) and comm(c) == FORK_SERVER]


def started_as_worker(pid):
    """Whether `pid` was started as a worker process: its environment names its control
    socket. A child the rank forked for something else (ThreadSanitizer forks one to run its
    symbolizer when it matches a suppression) runs the rank's binary until it execs, with
    the rank's environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return any(v.startswith(b"SHARDYARD_WORKER_FD=") for v in f.read().split(b"\0"))
    except OSError:
        return False


def workers_of(pid, binary):
    """The live worker processes of a rank process: the processes running `binary` that its
    fork server forked, or that it started by starting the program again."""
    out = []
    for c in children(pid):
        if comm(c) == FORK_SERVER:
            candidates = children(c)
        elif started_as_worker(c):
            candidates = [c]
        else:
            continue
        for w in candidates:
            try:
                if alive(w) and os.path.realpath(f"/proc/{w}/exe") == os.path.realpath(binary):
                    out.append(w)
            except OSError:
                pass
    return out


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][0] != "Z"
    except OSError:
        return False


def mount_tmpfs(size):
    """A private tmpfs (root only): its folder, or None."""
    if os.geteuid() != 0:
        return None
    mnt = tempfile.mkdtemp(prefix="sy-shm-")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", mnt],
                      capture_output=True).returncode != 0:
        os.rmdir(mnt)
        return None
    return mnt


def unmount(mnt):
    subprocess.run(["umount", mnt], capture_output=True)
    os.rmdir(mnt)


def used_bytes(folder):
    st = os.statvfs(folder)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


# ---- cases ------------------------------------------------------------------------------

def case_same_batches(tmp):
    source, exp = dataset(tmp)
    combos = [
        ("R1 W1", ["--workers", "1"], 1),
        ("R1 W3 count", ["--workers", "3", "--map", "count:field=seq", "--epochs", "2"], 1),
        ("R2 W2", ["--ranks", "2", "--workers", "2", "--epochs", "2"], 2),
        ("R1 W2 as completed", ["--workers", "2", "--order", "as_completed"], 1),
        ("R1 W4 contiguous", ["--workers", "4", "--worker-strategy", "contiguous",
                              "--logical-shards", "16"], 1),
        ("R1 W3 round robin count", ["--workers", "3", "--dispatch", "round_robin", "--map",
                                     "count:field=seq", "--epochs", "2"], 1),
        ("R2 W2 by key", ["--ranks", "2", "--workers", "2", "--dispatch", "by_key"], 2),
        ("R1 W3 on request", ["--workers", "3", "--dispatch", "on_request"], 1),
        ("R1 W3 broadcast count", ["--workers", "3", "--dispatch", "broadcast", "--map",
                                   "count:field=seq", "--epochs", "2"], 1),
        ("R2 W2 broadcast contiguous", ["--ranks", "2", "--workers", "2", "--dispatch",
                                        "broadcast", "--worker-strategy", "contiguous"], 2),
        ("R1 W2 once stage", ["--workers", "2", "--map", "once/count:field=order"], 1),
        ("R1 W3 count, exec", ["--workers", "3", "--map", "count:field=seq", "--epochs", "2"],
         1),
    ]
    for name, extra, ranks in combos:
        ref, got = os.path.join(tmp, "ref-" + name), os.path.join(tmp, "got-" + name)
        a = run(base.ARGS.shardyard, source, ref, *extra)
        b = run(base.ARGS.shardyard, source, got, *extra, "--placement", "local",
                env=NO_FORK_SERVER if name.endswith("exec") else None)
        check(a.returncode == 0, f"{name}: inproc failed: {a.stderr[-400:]}")
        check(b.returncode == 0, f"{name}: local failed: {b.stderr[-400:]}")
        if a.returncode or b.returncode:
            continue
        check(summary(b).get("placement") == "local", f"{name}: the summary says "
                                                      f"{summary(b).get('placement')}")
        check(summary(b).get("worker_restarts") == 0, f"{name}: restarts without a death")
        # cpu_seconds counts the worker processes too, and says how much was theirs.
        wcpu, cpu = summary(b).get("worker_process_cpu_seconds"), summary(b).get("cpu_seconds")
        check(isinstance(wcpu, float) and 0 < wcpu <= cpu,
              f"{name}: worker_process_cpu_seconds {wcpu} of cpu_seconds {cpu}")
        check(summary(b).get("worker_process_peak_rss_kb", 0) > 0,
              f"{name}: worker_process_peak_rss_kb {summary(b).get('worker_process_peak_rss_kb')}")
        check(summary(a).get("worker_process_peak_rss_kb") == 0,
              f"{name}: inproc has a worker process of "
              f"{summary(a).get('worker_process_peak_rss_kb')} KiB")
        check(summary(a).get("worker_process_cpu_seconds") == 0,
              f"{name}: inproc counts {summary(a).get('worker_process_cpu_seconds')} s of "
              "worker processes")
        if "as completed" in name:
            rows = base.read_dump(got, ranks)
            base.check_exactly_once(rows, exp, 1, 8, name)
        else:
            same_rows(ref, got, ranks, name)
    # As completed, with more packets per worker than it may have in flight: the workers
    # share one channel of the loader, which must not wait on one worker's process while
    # another's packets are ready (a loader that pulled one worker's channel hung here).
    many, many_exp = dataset(os.path.join(tmp, "many"), samples=400)
    got = os.path.join(tmp, "got-as-completed-many")
    b = run(base.ARGS.shardyard, many, got, "--workers", "2", "--order", "as_completed",
            "--placement", "local")
    check(b.returncode == 0, f"as completed, many packets: {b.stderr[-400:]}")
    if b.returncode == 0:
        base.check_exactly_once(base.read_dump(got, 1), many_exp, 1, 8,
                                "as completed, many packets")
    # Large samples of 1 byte to 400 KB: fields of 64 KiB and more that a worker reads from
    # its shards by mapping cross as ranges of the shard files, which the rank maps itself;
    # smaller ones, and items a dispatcher hands out, through arenas.
    large, _ = dataset(os.path.join(tmp, "large"), shards=4, samples=20, bytes=200000,
                       vary=True)
    for name, extra, ranks in [
            ("large R1 W2", ["--workers", "2", "--map", "count:field=seq"], 1),
            ("large R2 W2 round robin", ["--ranks", "2", "--workers", "2", "--dispatch",
                                         "round_robin"], 2),
            ("large R1 W3 broadcast", ["--workers", "3", "--dispatch", "broadcast"], 1)]:
        ref, got = os.path.join(tmp, "ref-" + name), os.path.join(tmp, "got-" + name)
        a = run(base.ARGS.shardyard, large, ref, *extra)
        b = run(base.ARGS.shardyard, large, got, *extra, "--placement", "local")
        check(a.returncode == 0 and b.returncode == 0,
              f"{name}: {a.stderr[-300:]} {b.stderr[-300:]}")
        if a.returncode == 0 and b.returncode == 0:
            same_rows(ref, got, ranks, name)
    # Samples of 300 KB, each read by mapping: a 1 MiB arena is enough, since only their
    # descriptors take room in it (copied, one packet of them would need 4 MiB).
    big, _ = dataset(os.path.join(tmp, "big"), shards=2, samples=12, bytes=300000)
    ref, got = os.path.join(tmp, "ref-big"), os.path.join(tmp, "got-big")
    a = run(base.ARGS.shardyard, big, ref, "--workers", "2")
    b = run(base.ARGS.shardyard, big, got, "--workers", "2", "--placement", "local",
            "--shm-arena-mb", "1")
    check(a.returncode == 0 and b.returncode == 0,
          f"300 KB samples, 1 MiB arena: {a.stderr[-300:]} {b.stderr[-300:]}")
    if a.returncode == 0 and b.returncode == 0:
        same_rows(ref, got, 1, "300 KB samples, 1 MiB arena")
    # A windows dataset: each worker process rebuilds its manifest from the record files.
    rec = os.path.join(tmp, "rec")
    os.makedirs(rec)
    for i in range(3):
        with open(os.path.join(rec, f"part-{i}.bin"), "wb") as f:
            f.write(bytes((i * 7 + j) % 251 for j in range(4 * 500)))
    wargs = ["--windows", "16:4:1", "--record-bytes", "4", "--workers", "3"]
    a = run(base.ARGS.shardyard, rec, os.path.join(tmp, "w-ref"),
            *wargs)
    b = run(base.ARGS.shardyard, rec, os.path.join(tmp, "w-got"),
            *wargs, "--placement", "local")
    check(a.returncode == 0 and b.returncode == 0,
          f"windows: {a.stderr[-300:]} {b.stderr[-300:]}")
    if a.returncode == 0 and b.returncode == 0:
        same_rows(os.path.join(tmp, "w-ref"), os.path.join(tmp, "w-got"), 1, "windows")


def start_run(binary, source, dump, *extra, env=None):
    argv = [binary, "run", "--source", source, "--shuffle", "--seed", "5", "--batch-size", "8",
            "--no-cache", "--json", "--dump-keys", dump, "--placement", "local",
            *map(str, extra)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env if env is not None else os.environ)


def wait_run(p, what):
    """(stdout, stderr) of a started run once it ended; None, a failed check, when it did not
    end within RUN_TIMEOUT (it is killed)."""
    try:
        return p.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
        check(False, f"{what}: the run did not end")
        return None


def undisturbed_run(source, ref, extra):
    """Seconds an undisturbed run of `extra` took, its dump in `ref` (run once per `ref`);
    None when it failed."""
    if not os.path.exists(ref):
        a = run(base.ARGS.shardyard, source, ref, *extra)
        check(a.returncode == 0,
              f"{os.path.basename(ref)}: undisturbed run failed: {a.stderr[-400:]}")
        if a.returncode:
            return None
        with open(os.path.join(ref, "seconds"), "w") as f:
            f.write(str(summary(a).get("total_seconds", 1.0)))
    with open(os.path.join(ref, "seconds")) as f:
        return float(f.read())


def case_kill_workers(tmp):
    """20 SIGKILLs, spread over the dispatch modes: a worker reading its own shards, routed
    items (round robin, by key, on request) and loaded shards (broadcast)."""
    source, exp = dataset(tmp)
    modes = [("none", True), ("round_robin", True), ("broadcast", True), ("by_key", True),
             ("on_request", False)]  # on request: which worker runs an item is not fixed
    rng = random.Random(13)
    restarts_seen = 0
    for i in range(20):
        mode, exact = modes[i % len(modes)]
        extra = ["--workers", "3", "--epochs", "2", "--dispatch", mode, "--map", "sleep:us=1500"]
        if exact:
            extra += ["--map", "count:field=seq"]
        ref = os.path.join(tmp, f"ref-{mode}")
        undisturbed = undisturbed_run(source, ref, extra)
        if undisturbed is None:
            return
        dump = os.path.join(tmp, f"k{i}")
        # Every other run starts its worker processes by starting the program again.
        p = start_run(base.ARGS.shardyard, source, dump, *extra,
                      env=NO_FORK_SERVER if i % 2 else None)
        time.sleep(rng.uniform(0.05, max(0.1, undisturbed * 0.9)))
        kids = workers_of(p.pid, base.ARGS.shardyard)
        killed = None
        if kids:
            killed = rng.choice(kids)
            os.kill(killed, signal.SIGKILL)
        try:
            out, err = p.communicate(timeout=RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            check(False, f"kill {i} ({mode}): the run did not end after worker {killed} was "
                         "killed")
            continue
        what = f"kill {i} ({mode}, worker pid {killed}{', exec' if i % 2 else ''})"
        check(p.returncode == 0, f"{what}: rc {p.returncode}: {err[-400:]}")
        if p.returncode:
            continue
        if exact:
            same_rows(ref, dump, 1, what)
        else:
            base.check_exactly_once(base.read_dump(dump, 1), exp, 2, 8, what)
        j = json.loads(out.strip().splitlines()[-1])
        restarts_seen += j.get("worker_restarts", 0)
        if killed and j.get("worker_restarts", 0) > 0:
            check(f"pid {killed}" in err and "SIGKILL" in err and "epoch" in err,
                  f"{what}: the log does not name the pid, the signal and the unit: "
                  f"{err[-300:]}")
    # Large samples, whose big fields cross as file ranges the rank maps: 5 more kills.
    large, _ = dataset(os.path.join(tmp, "large"), shards=4, samples=30, bytes=200000,
                       vary=True)
    extra = ["--workers", "3", "--epochs", "2", "--map", "sleep:us=1500", "--map",
             "count:field=seq"]
    ref = os.path.join(tmp, "ref-large")
    a = run(base.ARGS.shardyard, large, ref, *extra)
    check(a.returncode == 0, f"large: undisturbed run failed: {a.stderr[-400:]}")
    undisturbed = summary(a).get("total_seconds", 1.0)
    for i in range(5):
        dump = os.path.join(tmp, f"large-k{i}")
        p = start_run(base.ARGS.shardyard, large, dump, *extra)
        time.sleep(rng.uniform(0.05, max(0.1, undisturbed * 0.9)))
        kids = workers_of(p.pid, base.ARGS.shardyard)
        if kids:
            os.kill(rng.choice(kids), signal.SIGKILL)
        ended = wait_run(p, f"large kill {i}")
        if ended is None:
            continue
        out, err = ended
        check(p.returncode == 0, f"large kill {i}: rc {p.returncode}: {err[-400:]}")
        if p.returncode == 0:
            same_rows(ref, dump, 1, f"large kill {i}")
            restarts_seen += summary(subprocess.CompletedProcess([], 0, out, err)).get(
                "worker_restarts", 0)
    check(restarts_seen >= 10, f"only {restarts_seen} of 25 kills met a running worker")
    print(f"kill_workers: {restarts_seen} restarts over 25 runs", file=sys.stderr)


def key_of(exp, index):
    return sorted(exp["digests"])[index]


def case_crash_stage(tmp):
    source, exp = dataset(tmp)
    key = key_of(exp, 77)
    marker = os.path.join(tmp, "crashed-once")
    extra = ["--workers", "2", "--epochs", "2", "--map", "count:field=seq"]
    ref = os.path.join(tmp, "ref")
    a = run(base.ARGS.shardyard, source, ref, *extra)
    check(a.returncode == 0, f"reference failed: {a.stderr[-400:]}")
    got = os.path.join(tmp, "got")
    # Under ThreadSanitizer the worker dies of its SIGSEGV as it would without it, instead
    # of TSan's handler writing a report that a failed run's digest would show.
    env = dict(os.environ)
    env["TSAN_OPTIONS"] = (env.get("TSAN_OPTIONS", "") + " handle_segv=0").strip()
    b = run(base.ARGS.crash_shardyard, source, got, "--workers", "2", "--epochs", "2",
            "--map", f"crash:key={key};once={marker}", "--map", "count:field=seq",
            "--placement", "local", env=env)
    check(b.returncode == 0, f"crash once: rc {b.returncode}: {b.stderr[-600:]}")
    if b.returncode == 0 and a.returncode == 0:
        same_rows(ref, got, 1, "crash once")
        check(summary(b).get("worker_restarts") == 1,
              f"crash once: {summary(b).get('worker_restarts')} restarts, not 1")
        check(f"on item '{key}'" in b.stderr and "pid " in b.stderr and "epoch 0" in b.stderr,
              f"crash once: the log does not name the item, pid and unit: {b.stderr[-400:]}")
    check(os.path.exists(marker), "the crash stage never ran in a worker process")


def case_poison(tmp):
    source, exp = dataset(tmp)
    key = key_of(exp, 123)
    t0 = time.monotonic()
    p = run(base.ARGS.crash_shardyard, source, None, "--workers", "2", "--map",
            f"crash:key={key};signal=ABRT", "--placement", "local", "--max-worker-restarts", "2")
    took = time.monotonic() - t0
    check(p.returncode not in (0, None), "a poison sample did not stop the run")
    check(f"'{key}'" in p.stderr and "poison" in p.stderr and "3 times" in p.stderr,
          f"the error does not name the poison sample {key}: {p.stderr[-600:]}")
    check(p.stderr.count("starting a new one") == 2,
          f"{p.stderr.count('starting a new one')} restarts logged, not 2")
    print(f"poison: stopped after {took:.1f} s", file=sys.stderr)


def case_orphans(tmp):
    source, _ = dataset(tmp)
    mnt = mount_tmpfs("256m")
    env = dict(os.environ)
    if mnt:
        env["SHARDYARD_SHM_DIR"] = mnt
    shm = mnt or "/dev/shm"
    try:
        before_files = sorted(os.listdir(shm))
        before_used = used_bytes(shm)
        for round_ in range(3):
            p = start_run(base.ARGS.shardyard, source, os.path.join(tmp, f"o{round_}"),
                          "--workers", "3", "--epochs", "50", "--map", "sleep:us=2000", env=env)
            kids = []
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and len(kids) < 3:
                time.sleep(0.1)
                kids = workers_of(p.pid, base.ARGS.shardyard)
            check(len(kids) == 3, f"round {round_}: {len(kids)} worker processes, not 3")
            servers = fork_servers_of(p.pid)
            check(len(servers) == 1, f"round {round_}: {len(servers)} fork servers, not 1")
            kids += servers
            time.sleep(0.3)
            # The trainer alone, then (last round) the whole process tree at once.
            if round_ == 2:
                for k in kids:
                    os.kill(k, signal.SIGKILL)
            os.kill(p.pid, signal.SIGKILL)
            p.communicate(timeout=30)
            t0 = time.monotonic()
            while time.monotonic() - t0 < 5 and any(alive(k) for k in kids):
                time.sleep(0.05)
            left = [k for k in kids if alive(k)]
            check(not left, f"round {round_}: worker processes {left} outlived their trainer "
                            "by 5 s")
            for k in left:
                os.kill(k, signal.SIGKILL)
        if mnt:  # the private tmpfs: nothing else uses it
            time.sleep(0.2)
            check(used_bytes(shm) == before_used,
                  f"the shm folder uses {used_bytes(shm) - before_used} bytes more after the "
                  "kills")
        check(sorted(os.listdir(shm)) == before_files, "files were left in the shm folder")
    finally:
        if mnt:
            unmount(mnt)


def case_checkpoint(tmp):
    """Stop with worker processes at a step, save, resume (other workers too): the rows
    joined are those of an uninterrupted inproc run; a stateful stage's state included."""
    source, exp = dataset(tmp)
    for mode, w, w2, stop in [("none", 3, 2, 7), ("round_robin", 2, 3, 11),
                              ("broadcast", 3, 3, 5)]:
        what = f"{mode} W={w}->{w2} stop={stop}"
        flags = ["--epochs", "2", "--dispatch", mode, "--map", "count:field=seq"]
        full = os.path.join(tmp, f"full-{mode}")
        p = run(base.ARGS.shardyard, source, full, "--workers", str(w), *flags)
        check(p.returncode == 0, f"{what}: inproc run failed: {p.stderr[-300:]}")
        ck = os.path.join(tmp, f"ck-{mode}")
        a_dump, b_dump = os.path.join(tmp, f"a-{mode}"), os.path.join(tmp, f"b-{mode}")
        a = run(base.ARGS.shardyard, source, a_dump, "--workers", str(w), *flags,
                "--placement", "local", "--checkpoint-dir", ck, "--stop-after-steps", stop)
        check(a.returncode == 0, f"{what}: stopped run failed: {a.stderr[-300:]}")
        b = run(base.ARGS.shardyard, source, b_dump, "--workers", str(w2), *flags,
                "--placement", "local", "--resume", ck)
        check(b.returncode == 0, f"{what}: resumed run failed: {b.stderr[-300:]}")
        if p.returncode or a.returncode or b.returncode:
            continue
        joined = base.read_dump(a_dump, 1)[0] + base.read_dump(b_dump, 1)[0]
        ref = base.read_dump(full, 1)[0]
        if w2 == w:
            check(joined == ref, f"{what}: stop+resume differs from the uninterrupted run "
                                 f"({len(joined)} vs {len(ref)} rows)")
        else:  # another W: a stateful stage's numbers differ, the items do not
            check([r[:3] for r in joined] == [r[:3] for r in ref],
                  f"{what}: stop+resume delivers other items than the uninterrupted run")


def case_tiny_shm(tmp):
    source, _ = dataset(tmp)
    mnt = mount_tmpfs("1m")
    if not mnt:
        print("SKIPPED: mounting a tmpfs needs root", file=sys.stderr)
        sys.exit(77)
    try:
        env = dict(os.environ, SHARDYARD_SHM_DIR=mnt)
        p = run(base.ARGS.shardyard, source, None, "--workers", "2", "--placement", "local",
                env=env)
        check(p.returncode != 0, "a 1 MiB shm folder did not stop the run")
        check("--shm-arena-mb" in p.stderr and mnt in p.stderr,
              f"the error does not say what to do: {p.stderr[-600:]}")
        check(p.returncode in (1, 2), f"rc {p.returncode}: not a clean error exit")
        check(os.listdir(mnt) == [], "files were left in the shm folder")
    finally:
        unmount(mnt)


def case_fork_server(tmp):
    """Who starts the worker processes: a fork server of the rank, or the program started
    again; and a fork server SIGKILLed at random moments (its workers die with it)."""
    source, exp = dataset(tmp)
    extra = ["--workers", "3", "--epochs", "50", "--map", "sleep:us=2000"]
    for env, want_server in ((None, True), (NO_FORK_SERVER, False)):
        p = start_run(base.ARGS.shardyard, source, os.path.join(tmp, f"tree-{want_server}"),
                      *extra, env=env)
        try:
            kids, deadline = [], time.monotonic() + 60
            while time.monotonic() < deadline and len(kids) < 3:
                time.sleep(0.05)
                kids = workers_of(p.pid, base.ARGS.shardyard)
            servers = fork_servers_of(p.pid)
            direct = [c for c in children(p.pid) if c in kids]
            what = "with the fork server" if want_server else "SHARDYARD_WORKER_FORK_SERVER=0"
            check(len(kids) == 3, f"{what}: {len(kids)} worker processes, not 3")
            if want_server:
                check(len(servers) == 1 and not direct and
                      sorted(children(servers[0])) == sorted(kids),
                      f"{what}: the workers {kids} are not the children of one fork server "
                      f"(servers {servers}, children of the rank {children(p.pid)})")
            else:
                check(not servers and sorted(direct) == sorted(kids),
                      f"{what}: the workers {kids} are not the rank's children (fork servers "
                      f"{servers})")
        finally:
            p.kill()
            p.communicate(timeout=30)
    # The fork server killed: its workers die with it, the rank starts new ones by starting
    # the program again, and the run delivers what an undisturbed one delivers.
    rng = random.Random(29)
    restarts_seen = 0
    for i, mode in enumerate(["none", "round_robin", "broadcast", "none", "by_key"]):
        extra = ["--workers", "3", "--epochs", "2", "--dispatch", mode, "--map", "sleep:us=1500",
                 "--map", "count:field=seq"]
        ref = os.path.join(tmp, f"fs-ref-{mode}")
        undisturbed = undisturbed_run(source, ref, extra)
        if undisturbed is None:
            return
        dump = os.path.join(tmp, f"fs{i}")
        p = start_run(base.ARGS.shardyard, source, dump, *extra)
        time.sleep(rng.uniform(0.05, max(0.1, undisturbed * 0.9)))
        servers = fork_servers_of(p.pid)
        if servers:
            os.kill(servers[0], signal.SIGKILL)
        what = f"fork server kill {i} ({mode})"
        ended = wait_run(p, what)
        if ended is None:
            continue
        out, err = ended
        check(p.returncode == 0, f"{what}: rc {p.returncode}: {err[-400:]}")
        if p.returncode:
            continue
        same_rows(ref, dump, 1, what)
        restarts = summary(subprocess.CompletedProcess([], 0, out, err)).get("worker_restarts", 0)
        restarts_seen += restarts
        # A worker that was running says it died with its fork server; one that was being
        # started then (a kill early in the run) says that it is started again instead.
        if servers and restarts:
            check("with its fork server" in err or "fork server is gone" in err,
                  f"{what}: the log does not say that the workers died with their fork "
                  f"server: {err[-400:]}")
    check(restarts_seen >= 3, f"only {restarts_seen} restarts after 5 fork server kills")
    print(f"fork_server: {restarts_seen} restarts over 5 kills of the fork server",
          file=sys.stderr)


CASES = {
    "same_batches": case_same_batches,
    "kill_workers": case_kill_workers,
    "crash_stage": case_crash_stage,
    "poison": case_poison,
    "orphans": case_orphans,
    "tiny_shm": case_tiny_shm,
    "checkpoint": case_checkpoint,
    "fork_server": case_fork_server,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    ap.add_argument("--crash-shardyard", required=True)
    ap.add_argument("case", choices=sorted(CASES))
    base.ARGS = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sy-workers-")
    try:
        CASES[base.ARGS.case](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if base.FAILS:
        print(f"{len(base.FAILS)} checks failed", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
