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

def open_fds_of(pid, path):
    """How many file descriptors of process `pid` are open on `path` now."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return 0
    n = 0
    for fd in fds:
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == path
        except OSError:
            pass
    return n


def case_truncate_during_read(tmp):
    """Samples of 4 MiB. Mapped (--read-into-batch 0, the read path of jobs whose stages
    read bytes): freeze the run while it holds mappings of a shard, cut the shard short, let
    it go on. Read into the batch (the default): freeze it while it has the shard open, with
    samples of it left unread in the data plane, and the same. Every try must end with exit 1
    and a message naming the shard, never with SIGBUS or a short or zeroed sample."""
    exp = base.make(f"{tmp}/d", shards=2, samples=40, bytes=4 << 20, seed=31)
    src = f"{tmp}/d/shard-{{000000..000001}}.tar"
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    p = shardyard("manifest", "build", "--source", src, env=env)  # the run scans nothing
    check(p.returncode == 0, f"manifest build: {p.stderr}")
    victim = f"{tmp}/d/shard-000001.tar"
    shutil.copy(victim, f"{tmp}/victim.bak")
    for mode, extra, held in [("mapped", ["--read-into-batch", "0"], mappings_of),
                              ("into batch", [], open_fds_of)]:
        tries = 0
        for attempt in range(8):
            shutil.copy(f"{tmp}/victim.bak", victim)
            os.utime(victim, ns=(os.stat(f"{tmp}/victim.bak").st_atime_ns,
                                 os.stat(f"{tmp}/victim.bak").st_mtime_ns))
            p = shardyard("manifest", "build", "--source", src, env=env)
            # One logical shard per source and chunks of one sample: the second worker reads
            # the shard's samples one by one and queues them until the trainer takes them.
            proc = subprocess.Popen([base.ARGS.shardyard, "run", "--source", src, "--workers",
                                     "2", "--logical-shards", "2", "--chunk-items", "1",
                                     "--batch-size", "2", "--json", "--dump-keys", f"{tmp}/dump",
                                     *extra],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True)
            # Mapped: several mappings at once (samples read ahead, waiting in the data plane
            # to be copied into a batch; one alone may be a sample already copied, not yet
            # released). Into the batch: the shard open (its samples are read when batched).
            want = 3 if mode == "mapped" else 1
            deadline = time.time() + 60
            while time.time() < deadline and proc.poll() is None and held(proc.pid, victim) < want:
                time.sleep(0.001)
            if proc.poll() is not None or held(proc.pid, victim) < want:
                proc.kill()
                proc.communicate()
                continue  # the run never held the shard: not a try
            proc.send_signal(signal.SIGSTOP)
            with open(victim, "r+b") as f:
                f.truncate(1 << 20)
            proc.send_signal(signal.SIGCONT)
            out, err = proc.communicate(timeout=120)
            tries += 1
            what = f"{mode}, try {attempt}"
            check(proc.returncode == 1,
                  f"{what}: exit {proc.returncode} (a negative status is a signal: "
                  f"{-proc.returncode if proc.returncode < 0 else ''}); stderr {err[-300:]!r}")
            check("shard-000001.tar" in err and "changed" in err,
                  f"{what}: message does not name the changed shard: {err[-300:]!r}")
            check("truncated" not in err, f"{what}: a changed shard called truncated: {err!r}")
            # What was delivered before the error is the shards' bytes (no zeros of a cut
            # mapping, no short read).
            rows = base.read_dump(f"{tmp}/dump", 1)[0]
            bad = [r[2] for r in rows if exp["digests"].get(r[2]) != [r[4], r[3]]]
            check(not bad, f"{what}: {len(bad)} delivered samples with wrong bytes: {bad[:3]}")
            if tries >= 3:
                break
        check(tries >= 3, f"{mode}: only {tries} tries caught the run holding the shard")


# ---- 2 and 9: slow servers, servers that ignore Range --------------------------------------

def remote_env(**extra):
    env = dict(os.environ, SHARDYARD_HTTP_BACKOFF_MS="10", SHARDYARD_HTTP_BACKOFF_MAX_MS="100")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def expect_gives_up(src, env, what, timeout, tmp):
    """A run on `src` must fail (exit 1, naming the shard and the deadline) within `timeout`
    seconds, and with --on-corrupt skip count the shard as skipped."""
    try:
        p = shardyard("run", "--source", src, "--json", "--no-cache", env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        check(False, f"{what}: the run was still going after {timeout} s")
        return
    check(p.returncode == 1, f"{what}: exit {p.returncode}: {p.stderr[-400:]!r}")
    check("shard-000001.tar" in p.stderr and "SHARDYARD_HTTP_DEADLINE_S" in p.stderr,
          f"{what}: the error does not name the shard and the deadline: {p.stderr[-400:]!r}")


def case_slow_server(tmp):
    """A server that sends 1 byte per second, and one that sends part of a body and then
    nothing on an open connection: a run gives up within the deadline, naming the shard."""
    servers = base.remote_servers()
    base.make(f"{tmp}/root/d", shards=2, samples=20, bytes=5000, seed=39)
    env = remote_env(SHARDYARD_HTTP_DEADLINE_S=6, SHARDYARD_HTTP_TIMEOUT_S=2)
    with servers.Nginx(f"{tmp}/root") as ng, servers.FaultProxy(ng.port) as px:
        good = f"{ng.url}/d/shard-000000.tar"
        for fault in ("slow:1", "hang:30000"):
            bad = f"{px.url}/_f/{fault}/d/shard-000001.tar"
            expect_gives_up(f"{{{good},{bad}}}", env, fault, 60, tmp)
            # The same under --on-corrupt skip: the shard is skipped and counted.
            try:
                p = shardyard("run", "--source", good, "--source", bad, "--json", "--no-cache",
                              "--on-corrupt", "skip", env=env, timeout=60)
            except subprocess.TimeoutExpired:
                check(False, f"{fault} skip: the run was still going after 60 s")
                continue
            s = summary_of(p.stdout) or {}
            check(p.returncode == 0 and s.get("corrupt_skipped") == 1 and s.get("samples") == 20,
                  f"{fault} skip: exit {p.returncode}: {p.stderr[-300:]!r} {s}")


def case_stalled_server_defaults(tmp):
    """With no setting at all, a shard whose server stalls after part of a body ends the
    run within 2 minutes (the defaults: 30 s below 1 KiB/s aborts an attempt, 90 s ends a
    request)."""
    servers = base.remote_servers()
    base.make(f"{tmp}/root/d", shards=2, samples=20, bytes=5000, seed=40)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHARDYARD_HTTP_")}
    with servers.Nginx(f"{tmp}/root") as ng, servers.FaultProxy(ng.port) as px:
        src = f"{{{ng.url}/d/shard-000000.tar,{px.url}/_f/hang:30000/d/shard-000001.tar}}"
        expect_gives_up(src, env, "defaults", 120, tmp)


def case_range_ignored(tmp):
    """A server that answers every ranged GET with the whole object (200): the run reads the
    same bytes as from disk, and each object moves about once, not once per read."""
    servers = base.remote_servers()
    base.make(f"{tmp}/root/d", shards=4, samples=40, bytes=32768, vary=True, seed=41)
    local = f"{tmp}/root/d/shard-{{000000..000003}}.tar"
    flags = ["--workers", 2, "--shuffle", "--seed", 4, "--batch-size", 8, "--no-cache"]
    base.run(local, *flags, dump=f"{tmp}/local")
    with servers.Nginx(f"{tmp}/root") as ng, servers.FaultProxy(ng.port) as px:
        src = f"{px.url}/_f/norange/d/shard-{{000000..000003}}.tar"
        p, s = base.run_env(src, remote_env(), *flags, dump=f"{tmp}/norange")
        check(p.returncode == 0, f"norange: exit {p.returncode}: {p.stderr[-400:]!r}")
        if p.returncode == 0:
            check(base.same_dump(f"{tmp}/local", f"{tmp}/norange", 1), "norange: dump differs")
        for k in range(4):
            path = f"/d/shard-{k:06d}.tar"
            size = os.path.getsize(f"{tmp}/root{path}")
            moved = px.sent_bytes().get(path, 0)
            # Once for the spool, plus what went out before the first ranged answer was
            # dropped (socket buffers).
            check(moved <= 2 * size + (4 << 20),
                  f"{path}: {moved} bytes moved for a {size}-byte object")


def case_sigint_slow_server(tmp):
    """SIGINT while the workers wait on a server that stalls: the run stops at once (it does
    not wait for the transfers' deadline), with its message, summary and exit 130."""
    servers = base.remote_servers()
    base.make(f"{tmp}/root/d", shards=2, samples=20, bytes=5000, seed=42)
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    with servers.Nginx(f"{tmp}/root") as ng, servers.FaultProxy(ng.port) as px:
        src = f"{px.url}/_f/hang:1000/d/shard-{{000000..000001}}.tar"
        px.set_faults(False)  # the manifest comes from a clean scan, cached
        p = shardyard("manifest", "build", "--source", src, env=env)
        check(p.returncode == 0, f"manifest build: {p.stderr[-300:]!r}")
        px.set_faults(True)
        seen = len(px.requests())
        proc = subprocess.Popen([base.ARGS.shardyard, "run", "--source", src, "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.time() + 30
        while time.time() < deadline and not any(r[1] == "GET" for r in px.requests()[seen:]):
            time.sleep(0.05)
        time.sleep(1)  # the workers are waiting on the stalled bodies now
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            check(False, "the run did not stop within 30 s of SIGINT (it waits on the server)")
        check(proc.returncode == 130, f"exit {proc.returncode}: {err[-300:]!r}")
        check("stopped by SIGINT" in err, f"not stopped in the run: {err[-300:]!r}")
        s = summary_of(out)
        check(s is not None and s.get("interrupted") == "SIGINT" and s.get("samples") == 0,
              f"summary: {out[-300:]!r}")


# ---- 4: a checkpoint write that fails on one rank -----------------------------------------

def fill_leaving_one_page(folder):
    """Fills the file system of `folder` and frees exactly one page again."""
    path = os.path.join(folder, "filler")
    written = 0
    with open(path, "wb", buffering=0) as f:
        block = b"\0" * 4096
        try:
            while True:
                n = f.write(block)
                written += n
                if n < len(block):
                    break
        except OSError:
            pass
    with open(path, "r+b") as f:
        f.truncate((written // 4096 - 1) * 4096)
    return path


def case_checkpoint_disk_full(tmp):
    """3 ranks save into a real tmpfs with room for one rank file: the ranks that cannot
    write abort the cut for all (exit 1 at once, naming a rank and the error, not a 120 s
    wait), CHECKPOINT stays at the last commit, and the next save cleans up the aborted
    cut's files; the resumed run goes on exactly once."""
    mnt = f"{tmp}/mnt"
    os.makedirs(mnt)
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt],
                                           capture_output=True).returncode != 0:
        print("SKIPPED: mounting a tmpfs needs root", file=sys.stderr)
        sys.exit(SKIP)
    try:
        exp = base.make(f"{tmp}/d", shards=4, samples=50, seed=38)
        src = f"{tmp}/d/shard-{{000000..000003}}.tar"
        flags = ["--ranks", 3, "--workers", 1, "--batch-size", 4, "--shuffle", "--seed", 3,
                 "--no-cache", "--json"]
        ck = f"{mnt}/ck"
        p = shardyard("run", "--source", src, *flags, "--dump-keys", f"{tmp}/full")
        full = base.read_dump(f"{tmp}/full", 3)
        p = shardyard("run", "--source", src, *flags, "--checkpoint-dir", ck,
                      "--stop-after-steps", 2, "--dump-keys", f"{tmp}/a")
        check(p.returncode == 0, f"first save: {p.stderr[-300:]!r}")
        check(all(os.path.getsize(f"{ck}/{n}") < 4096 for n in os.listdir(ck)),
              "a rank file is larger than a page: the disk would not fail on one rank only")
        filler = fill_leaving_one_page(mnt)
        try:
            p = shardyard("run", "--source", src, *flags, "--resume", ck, "--checkpoint-dir", ck,
                          "--stop-after-steps", 2, timeout=60)
        except subprocess.TimeoutExpired:
            check(False, "a save on a full disk hangs the run (the other ranks wait for the "
                         "rank that could not write)")
            return
        check(p.returncode == 1, f"full disk: exit {p.returncode}: {p.stderr[-400:]!r}")
        check("aborted: rank" in p.stderr and "No space left on device" in p.stderr,
              f"the error does not name the rank and the cause: {p.stderr[-400:]!r}")
        p = shardyard("checkpoint", "inspect", "--json", ck)
        cursor = json.loads(p.stdout)["cursor"] if p.returncode == 0 else {}
        check(p.returncode == 0 and cursor.get("step") == 2,
              f"CHECKPOINT no longer the last commit: {p.stdout[:200]} {p.stderr}")
        os.remove(filler)
        check(any(".g000002." in n for n in os.listdir(ck)), "the aborted cut left nothing")
        # The next save (of the resumed run) cleans up what the aborted cut left, and commits.
        p = shardyard("run", "--source", src, *flags, "--resume", ck, "--checkpoint-dir", ck,
                      "--stop-after-steps", 2, "--dump-keys", f"{tmp}/c")
        check(p.returncode == 0, f"resume after the full disk: {p.stderr[-300:]!r}")
        names = sorted(os.listdir(ck))
        check(names == ["CHECKPOINT"] + [f"rank-0000{r}.g000003.ckpt" for r in range(3)],
              f"after the next save: {names}")
        a, c = base.read_dump(f"{tmp}/a", 3), base.read_dump(f"{tmp}/c", 3)
        for r in range(3):
            check(a[r] + c[r] == [row for row in full[r] if row[1] < 4],
                  f"rank {r}: steps 0-3 over the runs differ from a run never stopped")
        del exp
    finally:
        subprocess.run(["umount", "-l", mnt], capture_output=True)


# ---- 5 and 11: forged --dump-keys lines, stale rank files, seeds ---------------------------

def unescape_key(text):
    """The inverse of the key escaping of --dump-keys (tools/dump_keys.h)."""
    out, i = bytearray(), 0
    raw = text.encode("utf-8", "surrogateescape")
    simple = {ord("\\"): b"\\", ord("t"): b"\t", ord("n"): b"\n", ord("r"): b"\r"}
    while i < len(raw):
        if raw[i] == ord("\\"):
            nxt = raw[i + 1]
            if nxt == ord("x"):
                out.append(int(raw[i + 2:i + 4], 16))
                i += 4
                continue
            out += simple[nxt]
            i += 2
            continue
        out.append(raw[i])
        i += 1
    return out.decode("utf-8", "surrogateescape")


def sample_digest(fields):
    import hashlib
    h = hashlib.sha256()
    for name in sorted(fields):
        h.update(fields[name])
    return h.hexdigest()[:16], sum(len(v) for v in fields.values())


def write_tar(path, samples, mode="w"):
    """samples: [(key, {field: bytes})] -> a tar shard (mode "w:gz" for .tar.gz)."""
    with tarfile.open(path, mode, format=tarfile.PAX_FORMAT) as t:
        for key, fields in samples:
            for name in sorted(fields):
                info = tarfile.TarInfo(f"{key}.{name}")
                info.size = len(fields[name])
                info.mtime = 1700000000
                t.addfile(info, io.BytesIO(fields[name]))


def case_dump_key_escaping(tmp):
    """Member names with TAB, newline, CR, backslash and other control bytes: a crafted shard
    of 2 samples must give 2 lines of 5 fields, and the keys must read back exactly."""
    forged = "x\t0\t0\nforged\t5\tdeadbeefdeadbeef\n0\t0\tevil"
    samples = [(forged, {"cls": b"1"}), ("back\\slash\rcr\x01\x7f\u00e9", {"cls": b"22"}),
               ("plain", {"cls": b"333"})]
    os.makedirs(f"{tmp}/d")
    write_tar(f"{tmp}/d/shard-000000.tar", samples)
    p = shardyard("run", "--source", f"{tmp}/d/shard-000000.tar", "--json", "--no-cache",
                  "--dump-keys", f"{tmp}/dump")
    check(p.returncode == 0, f"run: exit {p.returncode}: {p.stderr}")
    with open(f"{tmp}/dump/rank-0.tsv", encoding="utf-8", errors="surrogateescape") as f:
        lines = f.read().split("\n")
    check(lines[-1] == "", "the dump does not end with a newline")
    lines = lines[:-1]
    check(len(lines) == len(samples), f"{len(samples)} samples gave {len(lines)} lines: {lines}")
    want = {key: sample_digest(fields) for key, fields in samples}
    for line in lines:
        parts = line.split("\t")
        check(len(parts) == 5, f"line with {len(parts)} fields: {line!r}")
        if len(parts) != 5:
            continue
        key = unescape_key(parts[2])
        check(key in want, f"key {parts[2]!r} reads back as {key!r}, not a sample's key")
        if key in want:
            check([parts[4], int(parts[3])] == list(want[key]), f"{key!r}: wrong digest or size")
    check("plain\t" in "\n".join(lines), "a plain key is not written as it is")


def case_stale_dump_files(tmp):
    """A run with fewer ranks than the last one in the same --dump-keys folder removes the
    other rank files, and leaves other files alone."""
    base.make(f"{tmp}/d", shards=4, samples=20, seed=32)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    base.run(src, "--ranks", 3, "--workers", 1, "--no-cache", dump=f"{tmp}/dump")
    check(sorted(os.listdir(f"{tmp}/dump")) == ["rank-0.tsv", "rank-1.tsv", "rank-2.tsv"],
          f"3 ranks wrote {sorted(os.listdir(f'{tmp}/dump'))}")
    for other in ("notes.txt", "rank-x.tsv", "rank-2.tsv.bak"):
        open(f"{tmp}/dump/{other}", "w").close()
    _, s = base.run(src, "--ranks", 2, "--workers", 1, "--no-cache", dump=f"{tmp}/dump")
    names = sorted(os.listdir(f"{tmp}/dump"))
    check(names == ["notes.txt", "rank-0.tsv", "rank-1.tsv", "rank-2.tsv.bak", "rank-x.tsv"],
          f"after a 2-rank run: {names}")
    rows = base.read_dump(f"{tmp}/dump", 2)
    check(sum(len(r) for r in rows.values()) == s["samples"] == 80,
          f"the 2 rank files hold {sum(len(r) for r in rows.values())} lines")


def case_seed_range(tmp):
    """--seed takes 0 .. 2^64-1 and nothing else."""
    base.make(f"{tmp}/d", shards=1, samples=5, seed=33)
    src = f"{tmp}/d/shard-000000.tar"
    for bad in ("-1", "18446744073709551616", "99999999999999999999999", "1e3", "+5", "", "0x10"):
        p = shardyard("run", "--source", src, "--json", "--seed", bad)
        check(p.returncode == 2 and "--seed" in p.stderr and "18446744073709551615" in p.stderr,
              f"--seed {bad!r}: exit {p.returncode}: {p.stderr!r}")
    for good in ("0", "18446744073709551615"):
        p = shardyard("run", "--source", src, "--json", "--shuffle", "--seed", good)
        check(p.returncode == 0, f"--seed {good}: exit {p.returncode}: {p.stderr!r}")


# ---- 7: a decompression bomb ----------------------------------------------------------------

def write_bomb(path, inflated):
    """A .tar.gz of a small sample and one of `inflated` zero bytes, streamed: the file is a
    few MB whatever `inflated` is."""
    import zlib
    with open(path, "wb") as out:
        z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip wrapper
        small = tarfile.TarInfo("a-small.bin")
        small.size = 5
        head = small.tobuf(tarfile.USTAR_FORMAT) + b"hello" + b"\0" * 507
        big = tarfile.TarInfo("b-bomb.bin")
        big.size = inflated
        out.write(z.compress(head + big.tobuf(tarfile.USTAR_FORMAT)))
        chunk = b"\0" * (1 << 20)
        for _ in range(inflated // len(chunk)):
            out.write(z.compress(chunk))
        out.write(z.compress(b"\0" * 1024))  # the end-of-archive blocks
        out.write(z.flush())


def case_decompression_bomb(tmp):
    """A .tar.gz that inflates to 1 GiB: the run fails before its first batch, naming the
    sample, and never holds the inflated sample in memory."""
    import resource
    os.makedirs(f"{tmp}/d")
    write_bomb(f"{tmp}/d/bomb.tar.gz", 1 << 30)
    check(os.path.getsize(f"{tmp}/d/bomb.tar.gz") < 8 << 20, "the bomb is not small")
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    p = shardyard("run", "--source", f"{tmp}/d/bomb.tar.gz", "--json", "--no-cache")
    rss_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024
    check(p.returncode == 1, f"exit {p.returncode} (expected a clean failure): {p.stderr[-300:]!r}")
    check("b-bomb" in p.stderr and "--max-sample-bytes" in p.stderr and "bomb.tar.gz" in p.stderr,
          f"the error does not name the sample and the bound: {p.stderr!r}")
    check(before < 512 * 1024 and rss_mib < 512, f"peak RSS {rss_mib} MiB for a refused sample")
    # Raised above the sample, the bound lets it through (a small sample here: 1 KiB).
    make_dir = f"{tmp}/small"
    base.make(make_dir, shards=1, samples=4, bytes=2000, seed=34)
    src = f"{make_dir}/shard-000000.tar"
    p = shardyard("run", "--source", src, "--json", "--max-sample-bytes", "1K")
    check(p.returncode == 1 and "s0000/x00000" in p.stderr,
          f"--max-sample-bytes 1K: exit {p.returncode}: {p.stderr!r}")
    p = shardyard("run", "--source", src, "--json", "--max-sample-bytes", "64K")
    check(p.returncode == 0 and summary_of(p.stdout)["samples"] == 4,
          f"--max-sample-bytes 64K: exit {p.returncode}: {p.stderr!r}")
    for bad in ("0", "-1", "12Q", "lots"):
        p = shardyard("run", "--source", src, "--json", "--max-sample-bytes", bad)
        check(p.returncode == 2 and "--max-sample-bytes" in p.stderr,
              f"--max-sample-bytes {bad}: exit {p.returncode}: {p.stderr!r}")


# ---- 10: SIGINT and SIGTERM ----------------------------------------------------------------

def dump_lines(folder, ranks):
    n = 0
    for r in range(ranks):
        try:
            with open(f"{folder}/rank-{r}.tsv", "rb") as f:
                n += f.read().count(b"\n")
        except OSError:
            pass
    return n


def run_until_signal(cmd, dump, ranks, sig, env=None, lines=200):
    """Starts `cmd`, waits until its dump holds `lines` lines, sends `sig`; returns the
    finished process's (returncode, stdout, stderr)."""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None and dump_lines(dump, ranks) < lines:
        time.sleep(0.01)
    check(proc.poll() is None, f"the run ended before the signal: {proc.returncode}")
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        check(False, f"the run did not stop within 120 s of {sig!r}")
    return proc.returncode, out, err


def check_stopped_run(code, out, err, exp, dump, ranks, name, status, src, flags, tmp):
    """The stopped run said why, printed its summary, and each rank's dump is a prefix of an
    uninterrupted run's that ends at a batch boundary: complete up to the last batch."""
    check(code == status, f"{name}: exit {code}, expected {status}: {err[-300:]!r}")
    check(f"stopped by {name}" in err, f"{name}: no message on stderr: {err[-300:]!r}")
    s = summary_of(out)
    check(s is not None and s.get("interrupted") == name, f"{name}: no JSON summary: {out[-300:]!r}")
    rows = base.read_dump(dump, ranks)
    n = sum(len(r) for r in rows.values())
    check(s is not None and s.get("samples") == n,
          f"{name}: the summary says {s and s.get('samples')} samples, the dumps hold {n}")
    bad = [row[2] for r in rows.values() for row in r if exp["digests"].get(row[2]) != [row[4], row[3]]]
    check(not bad, f"{name}: {len(bad)} dumped samples with wrong bytes")
    epochs = 1 + max((r[-1][0] for r in rows.values() if r), default=0)
    p = shardyard("run", "--source", src, *flags, "--json", "--epochs", epochs, "--dump-keys",
                  f"{tmp}/reference")
    check(p.returncode == 0, f"reference run: {p.stderr[-300:]!r}")
    ref = base.read_dump(f"{tmp}/reference", ranks)
    for r, got in rows.items():
        whole = got == ref[r][:len(got)] and (
            len(got) in (0, len(ref[r])) or got[-1][:2] != ref[r][len(got)][:2])
        check(whole, f"{name}: rank {r}: the dump ({len(got)} lines) is not whole batches of "
                     f"an uninterrupted run")
    return s, rows


def case_sigint(tmp):
    """SIGINT ends the run: a message, the JSON summary of what was delivered, dumps complete
    up to the last delivered batch, exit 130."""
    exp = base.make(f"{tmp}/d", shards=4, samples=100, bytes=4096, seed=35)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    flags = ["--ranks", 2, "--workers", 2, "--batch-size", 4, "--no-cache"]
    cmd = [base.ARGS.shardyard, "run", "--source", src, *flags, "--epochs", 100000, "--json",
           "--dump-keys", f"{tmp}/dump"]
    code, out, err = run_until_signal(cmd, f"{tmp}/dump", 2, signal.SIGINT)
    check_stopped_run(code, out, err, exp, f"{tmp}/dump", 2, "SIGINT", 130, src, flags, tmp)


def case_sigterm(tmp):
    """SIGTERM without --checkpoint-dir: the same clean stop, exit 143."""
    exp = base.make(f"{tmp}/d", shards=4, samples=100, bytes=4096, seed=36)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    flags = ["--ranks", 3, "--workers", 1, "--batch-size", 4, "--shuffle", "--no-cache"]
    cmd = [base.ARGS.shardyard, "run", "--source", src, *flags, "--epochs", 100000, "--json",
           "--dump-keys", f"{tmp}/dump"]
    code, out, err = run_until_signal(cmd, f"{tmp}/dump", 3, signal.SIGTERM)
    check_stopped_run(code, out, err, exp, f"{tmp}/dump", 3, "SIGTERM", 143, src, flags, tmp)


def case_sigterm_checkpoint(tmp):
    """SIGTERM with --checkpoint-dir saves a checkpoint at one step of every rank first; the
    resumed run delivers the rest: every sample exactly once, and the same batches as a run
    that was never stopped."""
    exp = base.make(f"{tmp}/d", shards=4, samples=100, bytes=4096, seed=37)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    flags = ["--ranks", 2, "--workers", 2, "--batch-size", 4, "--shuffle", "--seed", 7,
             "--no-cache", "--json"]
    ck = f"{tmp}/ck"
    cmd = [base.ARGS.shardyard, "run", "--source", src, *flags, "--epochs", 100000,
           "--checkpoint-dir", ck, "--dump-keys", f"{tmp}/a"]
    code, out, err = run_until_signal(cmd, f"{tmp}/a", 2, signal.SIGTERM, lines=500)
    s, first = check_stopped_run(code, out, err, exp, f"{tmp}/a", 2, "SIGTERM", 143, src,
                                 flags, tmp)
    check(s is not None and s.get("checkpoint", {}).get("saved_on_signal") is True,
          f"no checkpoint saved on SIGTERM: {s}")
    p = shardyard("checkpoint", "inspect", "--json", ck)
    cursor = json.loads(p.stdout)["cursor"] if p.returncode == 0 else {}
    check(p.returncode == 0, f"inspect: {p.stderr}")
    epoch, step = cursor.get("epoch", 0), cursor.get("step", 0)
    for r, rows in first.items():  # every rank stopped exactly at the checkpoint's cut
        last = (rows[-1][0], rows[-1][1] + 1) if rows else None
        check(last == (epoch, step) or (step == 0 and last[0] == epoch - 1),
              f"rank {r}: the dump ends at {last}, the checkpoint is at {(epoch, step)}")
    # Finish the interrupted epoch from the checkpoint, and compare with a run never stopped.
    p = shardyard("run", "--source", src, *flags, "--epochs", epoch + 1, "--resume", ck,
                  "--dump-keys", f"{tmp}/b")
    check(p.returncode == 0, f"resume: exit {p.returncode}: {p.stderr[-300:]!r}")
    second = base.read_dump(f"{tmp}/b", 2)
    p = shardyard("run", "--source", src, *flags, "--epochs", epoch + 1, "--dump-keys",
                  f"{tmp}/full")
    full = base.read_dump(f"{tmp}/full", 2)
    for r in range(2):
        got = [row for row in first[r] + second[r] if row[0] == epoch]
        want = [row for row in full[r] if row[0] == epoch]
        check(got == want, f"rank {r}: epoch {epoch} over the two runs differs from a run never "
                           f"stopped ({len(got)} vs {len(want)} samples)")
    keys = collections.Counter(row[2] for rows in (first, second) for r in rows
                               for row in rows[r] if row[0] == epoch)
    check(len(keys) == len(exp["digests"]) and set(keys.values()) == {1},
          f"epoch {epoch}: {len(keys)} distinct samples, some more than once: "
          f"{[k for k, c in keys.items() if c > 1][:3]}")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    return base.run_cases(CASES, "shardyard-hardening-e2e")


if __name__ == "__main__":
    sys.exit(main())
