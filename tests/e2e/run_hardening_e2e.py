#!/usr/bin/env python3
"""End-to-end tests of `shardyard run` against hostile but realistic conditions.

Usage: run_hardening_e2e.py --shardyard BIN CASE
Each case reproduces one condition for real: a shard cut short while the run reads it, a
server that trickles or stalls, a server that ignores Range, a full tmpfs under a
checkpoint, member names that would forge --dump-keys lines, a decompression bomb,
SIGINT and SIGTERM sent to the run. Exit 0 = pass, 77 = skipped (a tool is missing).
"""
import collections
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: make, run, read_dump, check)

check = base.check
SKIP = 77


def shardyard(*args, env=None, timeout=300):
    cmd = [base.ARGS.shardyard, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def summary_of(stdout):
    lines = stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        return None


def mappings_of(pid, path):
    """How many memory mappings of `path` process `pid` holds now."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return sum(1 for line in f if line.rstrip("\n").endswith(" " + path))
    except OSError:
        return 0


# ---- 1: a shard cut short while the run reads it -------------------------------------------

def case_truncate_during_read(tmp):
    """Samples of 4 MiB are memory-mapped. Freeze the run while it holds mappings of a
    shard, cut the shard short, let it go on: every try must end with exit 1 and a message
    naming the shard, never with SIGBUS."""
    exp = base.make(f"{tmp}/d", shards=2, samples=40, bytes=4 << 20, seed=31)
    src = f"{tmp}/d/shard-{{000000..000001}}.tar"
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    p = shardyard("manifest", "build", "--source", src, env=env)  # the run scans nothing
    check(p.returncode == 0, f"manifest build: {p.stderr}")
    victim = f"{tmp}/d/shard-000001.tar"
    shutil.copy(victim, f"{tmp}/victim.bak")
    tries = 0
    for attempt in range(8):
        shutil.copy(f"{tmp}/victim.bak", victim)
        os.utime(victim, ns=(os.stat(f"{tmp}/victim.bak").st_atime_ns,
                             os.stat(f"{tmp}/victim.bak").st_mtime_ns))
        p = shardyard("manifest", "build", "--source", src, env=env)
        # One logical shard per source and chunks of one sample: the second worker maps the
        # shard's samples one by one and queues them until the trainer takes them.
        proc = subprocess.Popen([base.ARGS.shardyard, "run", "--source", src, "--workers", "2",
                                 "--logical-shards", "2", "--chunk-items", "1",
                                 "--batch-size", "2", "--json", "--dump-keys", f"{tmp}/dump"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # Several mappings at once: samples read ahead, waiting in the data plane to be
        # copied into a batch (one alone may be a sample already copied, not yet released).
        deadline = time.time() + 60
        while time.time() < deadline and proc.poll() is None and mappings_of(proc.pid, victim) < 3:
            time.sleep(0.001)
        if proc.poll() is not None or mappings_of(proc.pid, victim) < 3:
            proc.kill()
            proc.communicate()
            continue  # the run never held a mapping of the shard: not a try
        proc.send_signal(signal.SIGSTOP)
        with open(victim, "r+b") as f:
            f.truncate(1 << 20)
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=120)
        tries += 1
        check(proc.returncode == 1,
              f"try {attempt}: exit {proc.returncode} (a negative status is a signal: "
              f"{-proc.returncode if proc.returncode < 0 else ''}); stderr {err[-300:]!r}")
        check("shard-000001.tar" in err and "changed" in err,
              f"try {attempt}: message does not name the changed shard: {err[-300:]!r}")
        check("truncated" not in err, f"try {attempt}: a changed shard called truncated: {err!r}")
        # What was delivered before the error is the shards' bytes (no zeros of a cut mapping).
        rows = base.read_dump(f"{tmp}/dump", 1)[0]
        bad = [r[2] for r in rows if exp["digests"].get(r[2]) != [r[4], r[3]]]
        check(not bad, f"try {attempt}: {len(bad)} delivered samples with wrong bytes: {bad[:3]}")
        if tries >= 3:
            break
    check(tries >= 3, f"only {tries} tries caught the run holding a mapping of the shard")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-hardening-e2e")


if __name__ == "__main__":
    sys.exit(main())
