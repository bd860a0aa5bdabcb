#!/usr/bin/env python3
"""End-to-end tests of how `shardyard` reads the shards users bring, with the real binary.

Usage: run_sources_e2e.py --shardyard BIN CASE
Cases: shards as WebDataset reads them (a README, macOS metadata, a size field led by NULs;
--strict; members_skipped), damage that skips only what is damaged, a stale manifest cache
(a shard replaced by `cp -p`, `manifest build`, `--no-cache`), a FIFO given as a source,
names that are not UTF-8 in every JSON output, and the label of a cache warning. Each case
works in a fresh temporary folder with its own cache folder. Exit 0 = pass.
"""
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_e2e as base  # noqa: E402  (shared helpers: check, read_dump, run_cases)

check = base.check


def shardyard(*args, env=None, timeout=120):
    """Runs the binary; arguments may be str or bytes (paths that are not UTF-8)."""
    cmd = [os.fsencode(base.ARGS.shardyard)] + [os.fsencode(a) if isinstance(a, str) else
                                                  (a if isinstance(a, bytes) else str(a).encode())
                                                  for a in args]
    return subprocess.run(cmd, capture_output=True, timeout=timeout, env=env)


def summary(p):
    return json.loads(p.stdout.decode().strip().splitlines()[-1]) if p.returncode == 0 else None


def write_tar(path, members):
    """members: [(name, bytes)]; name may hold surrogate-escaped bytes."""
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT, encoding="utf-8",
                      errors="surrogateescape") as tf:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = 1700000000
            tf.addfile(info, io.BytesIO(data))


def samples(n, start=0):
    out = []
    for i in range(start, start + n):
        out += [(f"s{i:04d}.jpg", b"JPEG%d" % i * 50), (f"s{i:04d}.cls", b"%d" % i)]
    return out


def digest(fields):
    """The --dump-keys digest of a sample: SHA-256 of its fields in name order, 16 digits."""
    h = hashlib.sha256()
    for name in sorted(fields):
        h.update(fields[name])
    return h.hexdigest()[:16]


def dumped(folder):
    return {row[2]: row for row in base.read_dump(folder, 1)[0]}


def case_webdataset_shards(tmp):
    # The shard: 5 good samples and a README; and one with macOS metadata.
    write_tar(f"{tmp}/readme.tar", samples(5)[:4] + [("README", b"about")] + samples(5)[4:])
    write_tar(f"{tmp}/macos.tar", [("._s0100.jpg", b"\0\5\26\7")] + samples(3, 100))
    src = f"{tmp}/{{readme,macos}}.tar"
    for extra in ([], ["--on-corrupt", "skip"]):
        p = shardyard("run", "--source", src, "--json", "--workers", 1, *extra,
                      "--dump-keys", f"{tmp}/dump{len(extra)}")
        s = summary(p)
        check(s is not None and s["samples"] == 8 and s["members_skipped"] == 2 and
              s["corrupt_skipped"] == 0, f"run {extra}: {p.returncode} {s} {p.stderr[-300:]}")
        if s:
            rows = dumped(f"{tmp}/dump{len(extra)}")
            check(sorted(rows) == [f"s{i:04d}" for i in list(range(5)) + [100, 101, 102]],
                  f"keys {sorted(rows)}")
    p = shardyard("run", "--source", src, "--json", "--strict")
    err = p.stderr.decode()
    check(p.returncode == 1 and "README" in err and "readme.tar" in err and "--strict" in err,
          f"--strict: {p.returncode} {err}")
    p = shardyard("run", "--source", src, "--json", "--strict", "--on-corrupt", "skip")
    s = summary(p)
    check(s is not None and s["samples"] == 8 and s["corrupt_skipped"] == 2,
          f"--strict --on-corrupt skip: {s} {p.stderr[-300:]}")
    p = shardyard("manifest", "show", "--source", src, "--json")
    check(p.returncode == 0 and json.loads(p.stdout)["members_skipped"] == 2 and
          [x["members_skipped"] for x in json.loads(p.stdout)["sources"]] == [1, 1],
          f"manifest show --json: {p.stdout[-400:]} {p.stderr}")

    # A size field of NULs before the digits (libarchive's timestamp_overflow archive):
    # tarfile reads size 0, and so must the scan.
    write_tar(f"{tmp}/nul.tar", samples(2) + [("tmp/f.txt", b"")])
    data = bytearray(open(f"{tmp}/nul.tar", "rb").read())
    with tarfile.open(f"{tmp}/nul.tar") as tf:
        at = tf.getmember("tmp/f.txt").offset
    data[at + 124:at + 136] = b"\0" * 7 + b"0016\0"
    data[at + 148:at + 156] = b" " * 8
    data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + 512])
    open(f"{tmp}/nul.tar", "wb").write(bytes(data))
    with tarfile.open(f"{tmp}/nul.tar") as tf:
        check(tf.getmember("tmp/f.txt").size == 0, "the setup: tarfile reads size 0")
    p = shardyard("run", "--source", f"{tmp}/nul.tar", "--json", "--dump-keys", f"{tmp}/dnul")
    s = summary(p)
    check(s is not None and s["samples"] == 3, f"NUL-led size field: {p.stderr}")


def case_skip_keeps_whole_samples(tmp):
    write_tar(f"{tmp}/a.tar", samples(10))
    data = bytearray(open(f"{tmp}/a.tar", "rb").read())
    with tarfile.open(f"{tmp}/a.tar") as tf:
        at = tf.getmember("s0006.jpg").offset
    data[at + 5] ^= 0x20  # the header of sample 6's first member no longer sums up
    open(f"{tmp}/a.tar", "wb").write(bytes(data))
    # A repeated field spoils sample 2 of b.tar; the archive around it is whole.
    write_tar(f"{tmp}/b.tar", samples(2, 20) + [("s0022.cls", b"1"), ("s0022.CLS", b"2")] +
              samples(3, 23))
    p = shardyard("run", "--source", f"{tmp}/{{a,b}}.tar", "--json", "--on-corrupt", "skip",
                  "--dump-keys", f"{tmp}/dump")
    s = summary(p)
    check(s is not None and s["corrupt_skipped"] == 2, f"{p.returncode} {s} {p.stderr}")
    if s:
        keys = sorted(dumped(f"{tmp}/dump"))
        want = [f"s{i:04d}" for i in list(range(6)) + [20, 21, 23, 24, 25]]
        check(keys == want, f"kept {keys}, want every whole sample {want}")
        err = p.stderr.decode()
        check(err.count("warning: skipped:") == 2, f"warnings: {err}")


def case_stale_cache(tmp):
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    os.makedirs(f"{tmp}/d")
    shard = f"{tmp}/d/shard-000000.tar"
    write_tar(shard, samples(4))
    # The replacement has the same size and, after `cp -p`, the same mtime: one member's
    # field is renamed (cls -> txt) and its bytes differ.
    new = [(n.replace("s0001.cls", "s0001.txt"), d if n != "s0001.cls" else b"9")
           for n, d in samples(4)]
    write_tar(f"{tmp}/new.tar", new)
    check(os.path.getsize(shard) == os.path.getsize(f"{tmp}/new.tar"), "the setup: same size")
    os.utime(f"{tmp}/new.tar", ns=(os.stat(shard).st_atime_ns, os.stat(shard).st_mtime_ns))
    p = shardyard("run", "--source", shard, "--json", env=env)
    check(summary(p) is not None and not summary(p)["manifest_cached"], f"first run: {p.stderr}")
    subprocess.run(["cp", "-p", f"{tmp}/new.tar", shard], check=True)
    p = shardyard("run", "--source", shard, "--json", "--dump-keys", f"{tmp}/dump", env=env)
    s = summary(p)
    check(s is not None and not s["manifest_cached"], f"cp -p: the stale cache was used: {s}")
    if s:
        row = dumped(f"{tmp}/dump")["s0001"]
        check(row[4] == digest({"jpg": b"JPEG1" * 50, "txt": b"9"}),
              f"s0001 was read with its old manifest: {row}")

    # `manifest build` rebuilds a cache that looks fresh.
    cache = [f for f in os.listdir(f"{tmp}/cache") if f.endswith(".manifest")]
    check(len(cache) == 1, f"cache files {cache}")
    p = shardyard("manifest", "build", "--source", shard, env=env)
    out = p.stdout.decode()
    check(p.returncode == 0 and "scanned" in out and "from cache" not in out,
          f"manifest build reused the cache: {out}")
    # `--no-cache` removes a cached manifest the scan shows stale, and keeps a good one.
    p = shardyard("run", "--source", shard, "--json", "--no-cache", env=env)
    check(p.returncode == 0 and os.path.exists(f"{tmp}/cache/{cache[0]}"),
          "--no-cache removed a cached manifest that was right")
    write_tar(shard, samples(5))
    p = shardyard("run", "--source", shard, "--json", "--no-cache", env=env)
    check(p.returncode == 0 and not os.path.exists(f"{tmp}/cache/{cache[0]}"),
          f"--no-cache left a stale cached manifest in place: {p.stderr}")


def case_fifo(tmp):
    fifo = f"{tmp}/shard-000000.tar"
    os.mkfifo(fifo)
    try:
        p = shardyard("run", "--source", fifo, "--json", timeout=60)
        err = p.stderr.decode()
        check(p.returncode == 1 and "FIFO" in err and fifo in err, f"{p.returncode}: {err}")
        p = shardyard("manifest", "show", fifo, timeout=60)
        check(p.returncode == 1 and "FIFO" in p.stderr.decode(), f"manifest show: {p.stderr}")
    except subprocess.TimeoutExpired:  # subprocess.run killed it
        check(False, "shardyard waited on a FIFO source")


def case_non_utf8_names(tmp):
    folder = os.fsencode(tmp) + b"/d\xff"
    os.makedirs(folder)
    shard = folder + b"/shard\xe9.tar"
    name = "caf\udce9.jpg"  # the bytes caf\xe9.jpg
    write_tar(os.fsdecode(shard), [(name, b"x" * 10), ("caf\udce9.cls", b"1")] + samples(2))
    env = dict(os.environ, SHARDYARD_CACHE_DIR=f"{tmp}/cache")
    p = shardyard("manifest", "show", "--source", shard, "--json", "--samples", env=env)
    check(p.returncode == 0, f"manifest show --json: exit {p.returncode}: {p.stderr[-500:]}")
    if p.returncode == 0:
        j = json.loads(p.stdout)
        src = j["sources"][0]
        check(src["uri"].endswith("/d\\xff/shard\\xe9.tar"), f"uri {src['uri']!r}")
        check([x["key"] for x in src["sample_list"]] == ["caf\\xe9", "s0000", "s0001"],
              f"keys {src['sample_list']}")
    ck = os.fsencode(tmp) + b"/ck\xfe"
    p = shardyard("run", "--source", shard, "--json", "--checkpoint-dir", ck, env=env)
    s = summary(p) if p.returncode == 0 else None
    check(s is not None and s["checkpoint"]["dir"].endswith("/ck\\xfe"),
          f"run --json: exit {p.returncode}: {p.stderr[-500:]}")
    p = shardyard("checkpoint", "inspect", ck, "--json")
    check(p.returncode == 0 and "cursor" in json.loads(p.stdout),
          f"checkpoint inspect --json: {p.returncode} {p.stderr[-300:]}")


def case_cache_warning_label(tmp):
    write_tar(f"{tmp}/a.tar", samples(2))
    open(f"{tmp}/not-a-dir", "w").close()
    p = shardyard("run", "--source", f"{tmp}/a.tar", "--json", "--cache-dir",
                  f"{tmp}/not-a-dir/cache")
    err = p.stderr.decode()
    check(p.returncode == 0 and "warning: manifest cache not written" in err and
          "skipped" not in err, f"the cache warning is labelled: {err}")


def with_own_cache(case):
    """Runs a case with SHARDYARD_CACHE_DIR in its temporary folder (never ~/.cache)."""
    def run(tmp):
        os.environ["SHARDYARD_CACHE_DIR"] = os.path.join(tmp, "cache")
        case(tmp)
    return run


CASES = {n[len("case_"):]: with_own_cache(f) for n, f in globals().items()
         if n.startswith("case_")}


if __name__ == "__main__":
    sys.exit(base.run_cases(CASES, "shardyard-sources-e2e"))
