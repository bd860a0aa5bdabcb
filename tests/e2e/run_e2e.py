#!/usr/bin/env python3
"""End-to-end tests of `shardyard run` on real tar files (Python's tarfile and GNU tar).

Usage: run_e2e.py --shardyard BIN [--trainer BIN] CASE
Each case builds its own data in a fresh temporary folder, runs the real binary, and checks
the --dump-keys output against what the generator wrote. Exit 0 = pass.
"""
import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = None
FAILS = []


def check(cond, what):
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, file=sys.stderr)


def excerpt(text, tail=1500, errors=12):
    """The end of a process's output, preceded by its earlier lines that say "error" or
    "failed" (at most `errors` of them): under a launcher such as torchrun, a rank's own
    error comes long before the launcher's traceback that fills the end."""
    if len(text) <= tail:
        return text
    head, end = text[:-tail], text[-tail:]
    said = [line for line in head.splitlines()
            if "error" in line.lower() or "failed" in line.lower()][:errors]
    return ("[earlier lines that report an error]\n" + "\n".join(said) + "\n[...]\n"
            if said else "[...]\n") + end


def make(out, **kw):
    cmd = [sys.executable, os.path.join(HERE, "make_dataset.py"), "--out", out]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            cmd.append(flag)
        elif v is not False:
            cmd += [flag, str(v)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "expected.json")) as f:
        return json.load(f)


def run(source, *extra, expect_ok=True, dump=None):
    cmd = [ARGS.shardyard, "run", "--source", source, "--json", *map(str, extra)]
    if dump:
        cmd += ["--dump-keys", dump]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if expect_ok and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr}")
    summary = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    return p, summary


def read_dump(folder, ranks):
    rows = {}
    for r in range(ranks):
        rows[r] = []
        with open(os.path.join(folder, f"rank-{r}.tsv")) as f:
            for line in f:
                e, s, key, nbytes, sha = line.rstrip("\n").split("\t")
                rows[r].append((int(e), int(s), key, int(nbytes), sha))
    return rows


def check_exactly_once(rows, expected, epochs, batch, what, drop_last=False):
    digests = expected["digests"]
    for e in range(epochs):
        keys = [row[2] for r in rows for row in rows[r] if row[0] == e]
        counts = collections.Counter(keys)
        dup = [k for k, c in counts.items() if c > 1]
        check(not dup, f"{what}: epoch {e}: {len(dup)} keys delivered twice, e.g. {dup[:3]}")
        if not drop_last:
            check(len(counts) == len(digests),
                  f"{what}: epoch {e}: {len(counts)} distinct keys, expected {len(digests)}")
        steps = {r: len({row[1] for row in rows[r] if row[0] == e}) for r in rows}
        check(len(set(steps.values())) == 1, f"{what}: epoch {e}: unequal steps per rank {steps}")
        for r in rows:
            per_step = collections.Counter(row[1] for row in rows[r] if row[0] == e)
            check(all(c <= batch for c in per_step.values()), f"{what}: batch over {batch}")
            if drop_last:
                check(all(c == batch for c in per_step.values()), f"{what}: short batch with --drop-last")
    for r in rows:
        for row in rows[r]:
            want = digests.get(row[2])
            check(want is not None and want[0] == row[4] and want[1] == row[3],
                  f"{what}: key {row[2]} bytes/digest {row[3]}/{row[4]} != {want}")
            if want is None or want[0] != row[4]:
                return


def case_exactly_once(tmp):
    exp = make(f"{tmp}/d", shards=7, samples=23, uneven=True, vary=True, bytes=700, seed=4)
    src = f"{tmp}/d/shard-{{000000..000006}}.tar"
    for ranks, workers, batch in [(1, 1, 16), (1, 3, 7), (2, 2, 10), (3, 2, 5), (4, 3, 2)]:
        dump = f"{tmp}/dump-{ranks}-{workers}"
        _, s = run(src, "--ranks", ranks, "--workers", workers, "--batch-size", batch,
                   "--epochs", 2, "--shuffle", "--seed", 11, dump=dump)
        check(s["samples"] == 2 * exp["samples"], f"R{ranks}W{workers}: samples {s['samples']}")
        check(0 < s["manifest_seconds"] <= s["first_batch_seconds"] <= s["total_seconds"],
              f"R{ranks}W{workers}: times out of order: manifest {s['manifest_seconds']}, first "
              f"batch {s['first_batch_seconds']}, total {s['total_seconds']}")
        check_exactly_once(read_dump(dump, ranks), exp, 2, batch, f"R={ranks} W={workers} B={batch}")
    # B = 1 with unequal rank shares: the smaller ranks end the epoch with empty batches
    # (documented in docs/sharding.md), but every rank still takes the same number of steps.
    _, s = run(src, "--ranks", 4, "--workers", 2, "--batch-size", 1, "--shuffle")
    check(s["batches"] == 4 * s["steps_per_epoch"], f"B=1: {s['batches']} batches, "
          f"{s['steps_per_epoch']} steps per rank")
    check(s["samples"] == exp["samples"], f"B=1: {s['samples']} samples")


def case_read_into_batch(tmp):
    """Large members read straight into the batch (the default) deliver the very rows, bytes
    and digests of the mapped read path (--read-into-batch 0), with more members unread
    (--read-into-batch 1K), and with worker processes."""
    exp = make(f"{tmp}/d", shards=4, samples=25, vary=True, bytes=120000, seed=9)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    common = ("--ranks", 2, "--workers", 3, "--batch-size", 6, "--epochs", 2, "--shuffle",
              "--seed", 3)
    dumps = {}
    for name, extra in [("default", ()), ("mapped", ("--read-into-batch", "0")),
                        ("1K", ("--read-into-batch", "1K")),
                        ("local", ("--placement", "local")),
                        ("stage", ("--map", "sleep:us=1"))]:
        d = f"{tmp}/dump-{name}"
        _, s = run(src, *common, *extra, dump=d)
        check(s["samples"] == 2 * exp["samples"], f"{name}: samples {s['samples']}")
        dumps[name] = read_dump(d, 2)
    check_exactly_once(dumps["default"], exp, 2, 6, "read into batch")
    for name in ("mapped", "1K", "local", "stage"):
        check(dumps[name] == dumps["default"], f"{name}: other rows than the default read path")
    # A byte count the option cannot take.
    p = subprocess.run([ARGS.shardyard, "run", "--source", src, "--read-into-batch", "lots"],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode == 2 and "--read-into-batch" in p.stderr,
          f"--read-into-batch lots: exit {p.returncode}: {p.stderr[-300:]}")


def case_determinism(tmp):
    make(f"{tmp}/d", shards=5, samples=30, seed=2)
    src = f"{tmp}/d/shard-{{000000..000004}}.tar"
    dumps = []
    for i, (workers, seed) in enumerate([(2, 7), (2, 7), (4, 7), (1, 7), (2, 8)]):
        d = f"{tmp}/dump{i}"
        run(src, "--ranks", 2, "--workers", workers, "--batch-size", 8, "--epochs", 2,
            "--shuffle", "--seed", seed, dump=d)
        dumps.append(read_dump(d, 2))
    check(dumps[0] == dumps[1], "same seed twice gives another run")
    check(dumps[0] == dumps[2] and dumps[0] == dumps[3],
          "exact order depends on the number of workers")
    check(dumps[0] != dumps[4], "another seed gives the same order")
    e0 = [row[2] for row in dumps[0][0] if row[0] == 0]
    e1 = [row[2] for row in dumps[0][0] if row[0] == 1]
    check(e0 != e1, "epoch 1 repeats the order of epoch 0")
    # Without --shuffle, one rank and one worker read the dataset in order.
    d = f"{tmp}/plain"
    run(src, "--workers", 1, "--batch-size", 4, "--logical-shards", 1, dump=d)
    keys = [row[2] for row in read_dump(d, 1)[0]]
    check(keys == sorted(keys), "unshuffled single-shard run is not in dataset order")


def case_drop_last_and_as_completed(tmp):
    exp = make(f"{tmp}/d", shards=4, samples=37, seed=5)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    d = f"{tmp}/dl"
    _, s = run(src, "--ranks", 3, "--workers", 2, "--batch-size", 8, "--drop-last",
               "--shuffle", dump=d)
    check_exactly_once(read_dump(d, 3), exp, 1, 8, "drop_last", drop_last=True)
    check(s["samples"] % 24 == 0 and s["samples"] > 0, f"drop_last delivered {s['samples']}")
    d = f"{tmp}/ac"
    run(src, "--ranks", 2, "--workers", 3, "--batch-size", 8, "--order", "as_completed",
        "--shuffle", "--epochs", 2, dump=d)
    check_exactly_once(read_dump(d, 2), exp, 2, 8, "as_completed")


def case_elastic(tmp):
    # 8 logical shards of equal size: the global batch of every step holds the same items
    # for R = 1, 2, 4 at the same global batch R x B.
    make(f"{tmp}/d", shards=4, samples=40, seed=6)
    src = f"{tmp}/d/shard-{{000000..000003}}.tar"
    sets = {}
    for ranks in (1, 2, 4):
        d = f"{tmp}/r{ranks}"
        run(src, "--ranks", ranks, "--workers", 2, "--batch-size", 16 // ranks,
            "--logical-shards", 8, "--shuffle", "--seed", 3, dump=d)
        steps = collections.defaultdict(set)
        for r, rows in read_dump(d, ranks).items():
            for e, s, key, _, _ in rows:
                steps[s].add(key)
        sets[ranks] = dict(steps)
    check(sets[1] == sets[2] == sets[4], "global batches differ across R at equal R x B")


def case_formats(tmp):
    for fmt, gz in [("gnu", False), ("pax", False), ("ustar", True)]:
        sub = f"{tmp}/{fmt}{'gz' if gz else ''}"
        exp = make(sub, shards=3, samples=11, vary=True, format=fmt, gzip=gz, seed=8)
        ext = ".tar.gz" if gz else ".tar"
        d = f"{sub}/dump"
        run(f"{sub}/shard-{{000000..000002}}{ext}", "--workers", 2, "--batch-size", 4,
            "--shuffle", dump=d)
        check_exactly_once(read_dump(d, 1), exp, 1, 4, f"format {fmt} gzip={gz}")
        # The same shards given as a directory.
        d2 = f"{sub}/dump2"
        run(sub, "--workers", 2, "--batch-size", 4, "--shuffle", dump=d2)
        check(read_dump(d, 1) == read_dump(d2, 1), f"{fmt}: directory source differs from pattern")
    # GNU tar with long names (> 100 characters) in posix and gnu formats.
    src = f"{tmp}/loose"
    long_dir = "deep/" + "d" * 120
    os.makedirs(f"{src}/{long_dir}")
    for i in range(6):
        for field, data in (("txt", f"hello {i}".encode()), ("cls", str(i).encode())):
            with open(f"{src}/{long_dir}/sample{i:03d}.{field}", "wb") as f:
                f.write(data)
    for fmt in ("posix", "gnu"):
        tar = f"{tmp}/gnutar-{fmt}.tar"
        subprocess.run(["tar", f"--format={fmt}", "--sort=name", "-cf", tar, "-C", src, "deep"],
                       check=True)
        d = f"{tmp}/dump-{fmt}"
        _, s = run(tar, "--workers", 1, "--batch-size", 3, dump=d)
        keys = [row[2] for row in read_dump(d, 1)[0]]
        check(s["samples"] == 6 and keys[0] == f"{long_dir}/sample000",
              f"GNU tar --format={fmt}: got {s['samples']} samples, first key {keys[:1]}")
    # A directory of loose sample files is one source.
    d = f"{tmp}/dump-loose"
    _, s = run(f"{src}/{long_dir}", "--workers", 2, "--batch-size", 2, dump=d)
    check(s["samples"] == 6, f"loose directory: {s['samples']} samples")


def case_bad_input(tmp):
    exp = make(f"{tmp}/d", shards=3, samples=20, seed=9)
    good = f"{tmp}/d/shard-000000.tar"
    size = os.path.getsize(good)

    def variant(name, mutate):
        os.makedirs(f"{tmp}/{name}")
        for s in range(3):
            shutil.copy(f"{tmp}/d/shard-{s:06d}.tar", f"{tmp}/{name}/shard-{s:06d}.tar")
        path = f"{tmp}/{name}/shard-000001.tar"
        mutate(path)
        return f"{tmp}/{name}/shard-{{000000..000002}}.tar", path

    def truncate(p):
        with open(p, "r+b") as f:
            f.truncate(size // 2 + 100)

    def bad_checksum(p):
        with open(p, "r+b") as f:
            f.seek(512 * 7 + 10)  # inside a later member's header name field
            b = f.read(1)
            f.seek(512 * 7 + 10)
            f.write(bytes([b[0] ^ 0x55]))

    def missing(p):
        os.remove(p)

    def empty(p):
        open(p, "wb").close()

    def not_tar(p):
        with open(p, "wb") as f:
            f.write(b"this is not a tar file\n" * 200)

    def repeated_field(p):
        import io
        import tarfile
        with tarfile.open(p, "w") as t:
            for name in ("dir/x.cls", "dir/x.CLS"):  # one field twice (fields are lowercased)
                info = tarfile.TarInfo(name)
                info.size = 10
                t.addfile(info, io.BytesIO(b"x" * 10))

    cases = {"truncated": truncate, "checksum": bad_checksum, "missing": missing,
             "empty": empty, "nottar": not_tar, "repeated": repeated_field}
    for name, mutate in cases.items():
        src, path = variant(name, mutate)
        p, _ = run(src, "--workers", 2, expect_ok=False)
        check(p.returncode not in (0,) and p.returncode < 128,
              f"{name}: exit {p.returncode} (expected a clean failure)")
        check(os.path.basename(path) in p.stderr, f"{name}: error does not name the file: {p.stderr!r}")
        if name in ("truncated", "checksum", "nottar", "repeated"):
            check("byte" in p.stderr, f"{name}: error has no byte offset: {p.stderr!r}")
        d = f"{tmp}/{name}-skip"
        p2, s = run(src, "--workers", 2, "--batch-size", 5, "--on-corrupt", "skip", dump=d,
                    expect_ok=False)
        check(p2.returncode == 0, f"{name}: --on-corrupt skip failed: {p2.stderr}")
        if p2.returncode == 0:
            check(s["corrupt_skipped"] == 1, f"{name}: corrupt_skipped={s['corrupt_skipped']}")
            check("warning" in p2.stderr, f"{name}: no warning printed")
            keys = [row[2] for row in read_dump(d, 1)[0]]
            check(len(keys) == len(set(keys)) and len(keys) >= 40,
                  f"{name}: skip mode delivered {len(keys)} samples")
            check(all(exp["digests"][row[2]][0] == row[4] for row in read_dump(d, 1)[0]),
                  f"{name}: skip mode delivered damaged bytes")


def case_trainer(tmp):
    make(f"{tmp}/d", shards=6, samples=25, bytes=512, seed=10)
    p = subprocess.run([ARGS.trainer, "--source", f"{tmp}/d/shard-{{000000..000005}}.tar",
                        "--workers", "3", "--batch-size", "16", "--epochs", "2"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"trainer failed ({p.returncode}): {p.stderr}")
    check("ok: 2 epochs" in p.stdout, f"trainer output: {p.stdout!r}")
    check("monitor:" not in p.stderr, "no monitoring endpoint unless asked")
    # A launcher asks for the monitoring endpoint through the environment.
    env = dict(os.environ, SHARDYARD_METRICS_PORT="0")
    p = subprocess.run([ARGS.trainer, "--source", f"{tmp}/d/shard-{{000000..000005}}.tar",
                        "--workers", "2", "--epochs", "1"],
                       capture_output=True, text=True, timeout=300, env=env)
    check(p.returncode == 0 and "ok: 1 epochs" in p.stdout, f"trainer with a port: {p.stderr}")
    check(re.search(r"monitor: http://127\.0\.0\.1:\d+/status", p.stderr),
          f"the trainer served its status: {p.stderr!r}")
    # Save every 4 steps (150 samples, 10 steps of 16: the last save is after step 8), then
    # resume with another worker count and finish a second epoch: 22 + 150 samples.
    src = f"{tmp}/d/shard-{{000000..000005}}.tar"
    p = subprocess.run([ARGS.trainer, "--source", src, "--workers", "3", "--batch-size", "16",
                        "--checkpoint-dir", f"{tmp}/ck", "--save-every", "4"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and "2 checkpoints" in p.stdout,
          f"trainer with checkpoints: {p.stdout!r} {p.stderr}")
    p = subprocess.run([ARGS.trainer, "--source", src, "--workers", "2", "--batch-size", "16",
                        "--epochs", "2", "--resume", f"{tmp}/ck"],
                       capture_output=True, text=True, timeout=300)
    check(p.returncode == 0 and "ok: 2 epochs, 172 samples" in p.stdout,
          f"resumed trainer: {p.stdout!r} {p.stderr}")


def case_manifest_cli(tmp):
    make(f"{tmp}/d", shards=2, samples=9, seed=12)
    src = f"{tmp}/d/shard-{{000000..000001}}.tar"
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    b = subprocess.run([ARGS.shardyard, "manifest", "build", "--source", src, "--output",
                        f"{tmp}/m.manifest"], capture_output=True, text=True, env=env)
    check(b.returncode == 0 and "18 samples" in b.stdout, f"manifest build: {b.stdout} {b.stderr}")
    s = subprocess.run([ARGS.shardyard, "manifest", "show", f"{tmp}/m.manifest"],
                       capture_output=True, text=True)
    check(s.returncode == 0 and "samples      18" in s.stdout, f"manifest show: {s.stdout}")
    p = subprocess.run([ARGS.shardyard, "run", "--source", src, "--json"], capture_output=True,
                       text=True, env=env)
    check(p.returncode == 0 and json.loads(p.stdout.splitlines()[-1])["manifest_cached"],
          "run after manifest build did not use the cached manifest")
    with open(f"{tmp}/m.manifest", "r+b") as f:
        f.seek(40)
        f.write(b"\xff")
    s = subprocess.run([ARGS.shardyard, "manifest", "show", f"{tmp}/m.manifest"],
                       capture_output=True, text=True)
    check(s.returncode == 1 and "checksum" in s.stderr, f"corrupt manifest accepted: {s.stderr}")


def remote_servers():
    """The servers module of tests/servers, or None (with a message) when its tools are absent."""
    sys.path.insert(0, os.path.join(HERE, "..", "servers"))
    import servers
    missing = servers.missing_tools()
    if missing:
        print("SKIPPED: remote cases need " + ", ".join(missing), file=sys.stderr)
        sys.exit(77)
    return servers


def run_env(source, env, *extra, dump=None):
    cmd = [ARGS.shardyard, "run", "--source", source, "--json", *map(str, extra)]
    if dump:
        cmd += ["--dump-keys", dump]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    summary = json.loads(p.stdout.strip().splitlines()[-1]) if p.returncode == 0 else None
    return p, summary


def same_dump(a, b, ranks):
    return all(open(f"{a}/rank-{r}.tsv").read() == open(f"{b}/rank-{r}.tsv").read()
               for r in range(ranks))


def case_remote_http(tmp):
    servers = remote_servers()
    make(f"{tmp}/root/d", shards=10, samples=25, uneven=True, vary=True, bytes=3000, seed=21)
    local = f"{tmp}/root/d/shard-{{000000..000009}}.tar"
    with servers.Nginx(f"{tmp}/root") as ng:
        url = f"{ng.url}/d/shard-{{000000..000009}}.tar"
        for i, extra in enumerate([("--workers", 2), ("--ranks", 2, "--workers", 3, "--shuffle",
                                                      "--seed", 5, "--epochs", 2)]):
            ranks = 2 if "--ranks" in extra else 1
            run(local, *extra, "--no-cache", dump=f"{tmp}/local{i}")
            _, s = run(url, *extra, "--no-cache", dump=f"{tmp}/http{i}")
            check(s["manifest_cached"] is False, "http run used a cache it was told not to")
            check(same_dump(f"{tmp}/local{i}", f"{tmp}/http{i}", ranks),
                  f"http --dump-keys differs from local disk ({extra})")
        # The manifest of remote shards is cached like a local one (keyed by size + ETag).
        run(url, "--workers", 2)
        _, s = run(url, "--workers", 2, dump=f"{tmp}/cached")
        check(s["manifest_cached"], "second http run did not use the cached manifest")
        check(same_dump(f"{tmp}/local0", f"{tmp}/cached", 1), "cached http run differs")
        # libcurl is loaded at the first remote request that needs it, not at process start:
        # glibc's loader names every library it maps under LD_DEBUG=files, each line after
        # the pid of the process that maps it (a sanitizer's symbolizer may load a libcurl of
        # its own). HEADs and ranged GETs of plain http:// URLs go without it (the scan's
        # too); SHARDYARD_HTTP_DIRECT=0 sends them through it.
        curl_env = dict(os.environ, SHARDYARD_HTTP_DIRECT="0")
        for source, env, loads in ((local, os.environ, False), (url, os.environ, False),
                                   (url, curl_env, True)):
            cmd = [ARGS.shardyard, "run", "--source", source, "--json", "--no-cache"]
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    text=True, env=dict(env, LD_DEBUG="files"))
            try:
                _, err = proc.communicate(timeout=300)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            mine = [ln for ln in err.splitlines() if ln.strip().startswith(f"{proc.pid}:")]
            loaded = any("file=libcurl" in ln for ln in mine)
            direct = env.get("SHARDYARD_HTTP_DIRECT", "1")
            check(proc.returncode == 0 and mine and loaded == loads,
                  f"{source} (SHARDYARD_HTTP_DIRECT={direct}): exit {proc.returncode}, "
                  f"libcurl loaded: {loaded}, want {loads}")
        # Without a usable libcurl, a run that needs it fails at once and says what to
        # install; one that does not (plain http://) runs.
        missing = f"{tmp}/no-such-libcurl.so.4"
        p, _ = run_env(url, dict(curl_env, SHARDYARD_LIBCURL=missing), "--no-cache")
        check(p.returncode == 1 and "libcurl" in p.stderr and "SHARDYARD_LIBCURL" in p.stderr
              and "no-such-libcurl.so.4" in p.stderr,
              f"missing libcurl: exit {p.returncode}: {p.stderr[-600:]!r}")
        p, _ = run_env(url, dict(os.environ, SHARDYARD_LIBCURL=missing), "--no-cache",
                       dump=f"{tmp}/nocurl")
        check(p.returncode == 0 and same_dump(f"{tmp}/local0", f"{tmp}/nocurl", 1),
              f"plain http without libcurl: exit {p.returncode}: {p.stderr[-600:]!r}")


def case_remote_s3(tmp):
    servers = remote_servers()
    make(f"{tmp}/root/d", shards=10, samples=25, uneven=True, vary=True, bytes=3000, seed=22)
    run(f"{tmp}/root/d/shard-{{000000..000009}}.tar", "--workers", 3, "--no-cache",
        dump=f"{tmp}/local")
    with servers.S3rver("bucket") as s3:
        s3.upload(f"{tmp}/root")
        env = dict(os.environ, AWS_ENDPOINT_URL=s3.endpoint, AWS_ACCESS_KEY_ID="S3RVER",
                   AWS_SECRET_ACCESS_KEY="S3RVER", AWS_REGION="us-east-1")
        for name, src in [("pattern", "s3://bucket/d/shard-{000000..000009}.tar"),
                          ("prefix", "s3://bucket/d/")]:
            p, s = run_env(src, env, "--workers", 3, "--no-cache", dump=f"{tmp}/{name}")
            check(p.returncode == 0, f"s3 {name}: exit {p.returncode}: {p.stderr}")
            if p.returncode == 0:
                check(s["sources"] == 10, f"s3 {name}: {s['sources']} sources")
                check(same_dump(f"{tmp}/local", f"{tmp}/{name}", 1),
                      f"s3 {name}: --dump-keys differs from local disk")
        p, _ = run_env("s3://bucket/d/shard-{000000..000010}.tar", env, "--no-cache")
        check(p.returncode == 1 and "shard-000010.tar" in p.stderr and "S3RVER" not in p.stderr,
              f"s3 missing shard: exit {p.returncode}: {p.stderr!r}")


def case_remote_faults(tmp):
    servers = remote_servers()
    make(f"{tmp}/root/d", shards=6, samples=40, vary=True, bytes=6000, seed=23)
    run(f"{tmp}/root/d/shard-{{000000..000005}}.tar", "--workers", 2, "--no-cache",
        dump=f"{tmp}/local")
    env = dict(os.environ, SHARDYARD_HTTP_BACKOFF_MS="10", SHARDYARD_HTTP_BACKOFF_MAX_MS="50",
               SHARDYARD_HTTP_TIMEOUT_S="1")
    with servers.Nginx(f"{tmp}/root") as ng, servers.FaultProxy(ng.port) as px:
        # Cut bodies, 503s and a stall on every shard: the same bytes, nothing lost or twice.
        src = f"{px.url}/_f/drop:30000x2,503x2,stall:70000x1/d/shard-{{000000..000005}}.tar"
        p, s = run_env(src, env, "--workers", 2, "--no-cache", dump=f"{tmp}/faults")
        check(p.returncode == 0, f"faults: exit {p.returncode}: {p.stderr}")
        if p.returncode == 0:
            check(same_dump(f"{tmp}/local", f"{tmp}/faults", 1), "faults: dump differs")
        resumed = [r for r in px.requests() if r[1] == "GET" and r[2] and not r[2].startswith("bytes=0-")]
        check(any("drop" in r[0] for r in resumed), "faults: no ranged GET resumed a body")
        # A missing shard fails the run naming its URL; --on-corrupt skip counts it.
        bad = f"{ng.url}/d/shard-{{000000..000006}}.tar"
        p, _ = run_env(bad, env, "--no-cache")
        check(p.returncode == 1 and "shard-000006.tar" in p.stderr,
              f"missing: exit {p.returncode}: {p.stderr!r}")
        p, s = run_env(bad, env, "--no-cache", "--on-corrupt", "skip", dump=f"{tmp}/skip")
        check(p.returncode == 0 and s["corrupt_skipped"] == 1 and s["samples"] == 240,
              f"skip missing: exit {p.returncode}: {p.stderr} {s}")
        # A shard that stays unreachable after the retries: fail, or skip and count.
        env1 = dict(env, SHARDYARD_HTTP_RETRIES="2")
        dead = f"{px.url}/_f/503/d/shard-000001.tar"
        src = f"{ng.url}/d/shard-000000.tar"
        p = subprocess.run([ARGS.shardyard, "run", "--source", src, "--source", dead, "--json",
                            "--no-cache"], capture_output=True, text=True, env=env1, timeout=120)
        check(p.returncode == 1 and "shard-000001.tar" in p.stderr and "503" in p.stderr,
              f"unreachable: exit {p.returncode}: {p.stderr!r}")
        p = subprocess.run([ARGS.shardyard, "run", "--source", src, "--source", dead, "--json",
                            "--no-cache", "--on-corrupt", "skip"], capture_output=True, text=True,
                           env=env1, timeout=120)
        s = json.loads(p.stdout.splitlines()[-1]) if p.returncode == 0 else {}
        check(p.returncode == 0 and s.get("corrupt_skipped") == 1 and s.get("samples") == 40,
              f"unreachable skip: exit {p.returncode}: {p.stderr!r} {s}")


CASES = {n[len("case_"):]: f for n, f in globals().items() if n.startswith("case_")}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    ap.add_argument("--trainer")
    ap.add_argument("case", choices=sorted(CASES))
    ARGS = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix=f"shardyard-e2e-{ARGS.case}-")
    os.environ["SHARDYARD_CACHE_DIR"] = os.path.join(tmp, "cache")
    try:
        CASES[ARGS.case](tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print(f"{ARGS.case}: {len(FAILS)} checks failed", file=sys.stderr)
        return 1
    print(f"{ARGS.case}: passed")
    return 0


def run_cases(cases, prefix, cleanup=None):
    """The main() of the e2e scripts: runs the case named on the command line in a fresh
    temporary directory (then `cleanup(tmp)`, if given, before it goes); exit status 0 when
    every check passed."""
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    # shardyard over a fault-injecting file system (tests/e2e/fault_shardyard.cc)
    ap.add_argument("--fault-shardyard")
    ap.add_argument("--trainer")  # examples/trainer
    ap.add_argument("case", choices=sorted(cases))
    ARGS = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix=f"{prefix}-")
    try:
        cases[ARGS.case](tmp)
    finally:
        if cleanup is not None:
            cleanup(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed", file=sys.stderr)
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
