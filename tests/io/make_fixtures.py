#!/usr/bin/env python3
"""Writes the tar fixtures of tests/io into a directory.

Usage: make_fixtures.py OUT_DIR

Every archive is made by a real tar writer (Python's tarfile in USTAR, GNU and PAX formats,
GNU tar in gnu, posix and ustar formats, gzip-compressed variants of both) from one set of
samples, so the C++ tests check the reader against independent producers. Next to each
archive NAME the script writes NAME.members, read back from the archive with tarfile, one
line per member in archive order:

    type<TAB>size<TAB>offset<TAB>offset_data<TAB>key<TAB>field<TAB>path

type is f (regular file), d (directory) or o (other); offset is the first header block of
the member (extension headers included), offset_data its first payload byte (both in the
uncompressed stream); key and field follow the WebDataset rule (both empty for a member
WebDataset skips). A member's payload is payload(path, size) below; tar_test.cc has the same
function.
"""

import gzip
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile

MTIME = 1700000000


def payload(path, size):
    # Byte i is (h + 131 * i) % 251: periodic in i with period 251.
    h = sum(path.encode()) % 251
    period = bytes((h + i * 131) % 251 for i in range(251))
    return (period * (size // 251 + 1))[:size]


def key_field(path):
    """WebDataset's rule, as webdataset/tariterators.py applies it: metadata names
    (tar_file_iterator's filters) and names base_plus_ext does not match have no key; the
    field is lowercased (group_by_keys)."""
    if ("/" not in path and path.startswith("__") and path.endswith("__")) or \
            re.match(r"__[^/]*__($|/)", path):
        return "", ""
    match = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)
    if not match:
        return "", ""
    return match.group(1), match.group(2).lower()


LONG_DIR = "d" * 60 + "/" + "e" * 50  # 111 characters: beyond the 100 of a ustar name
VERY_LONG_DIR = "p" * 120 + "/" + "q" * 100 + "/" + "r" * 50  # 272: beyond ustar's 255

# (key, [(field, size), ...]) in archive order. Fields are not always in name order, sizes
# hit the block boundaries, one payload is larger than the reader's 64 KiB window.
SAMPLES = [
    ("s0000", [("cls", 1), ("jpg", 700)]),
    ("s0001", [("jpg", 0), ("cls", 2)]),
    ("a/b/x", [("input.seq.bin", 513), ("target.seq.bin", 512)]),
    ("dir.with.dots/s0003", [("json", 511)]),
    (LONG_DIR + "/s0004", [("cls", 3), ("txt", 1024)]),
    ("big", [("bin", 70000), ("cls", 4)]),
    (VERY_LONG_DIR + "/s0006", [("cls", 5)]),
    ("s0007", [("a.b.c", 17)]),
]
DIRECTORIES = ["a", "a/b", "dir.with.dots"]  # archived as directory members


def members(max_name):
    """[(path, size)] of regular files, in order, keeping names of at most max_name."""
    out = []
    for key, fields in SAMPLES:
        for field, size in fields:
            path = key + "." + field
            if len(path) <= max_name:
                out.append((path, size))
    return out


def with_dirs(files):
    """Inserts directory members before the first file below them."""
    out, done = [], set()
    for path, size in files:
        for d in DIRECTORIES:
            if path.startswith(d + "/") and d not in done:
                out.append((d, None))
                done.add(d)
        out.append((path, size))
    return out


def add_file(tf, path, size, mtime=MTIME, pax=None):
    ti = tarfile.TarInfo(path)
    ti.size = size
    ti.mtime = mtime
    ti.mode = 0o644
    if pax:
        ti.pax_headers = dict(pax)
    tf.addfile(ti, io.BytesIO(payload(path, size)))


def add_dir(tf, path):
    ti = tarfile.TarInfo(path)
    ti.type = tarfile.DIRTYPE
    ti.mode = 0o755
    ti.mtime = MTIME
    tf.addfile(ti)


def write_python(path, fmt, entries, mode="w", **kw):
    with tarfile.open(path, mode, format=fmt, **kw) as tf:
        for p, size in entries:
            if size is None:
                add_dir(tf, p)
            else:
                add_file(tf, p, size)


def write_listing(archive):
    mode = "r:gz" if archive.endswith(".gz") else "r:"
    lines = []
    with tarfile.open(archive, mode) as tf:
        for ti in tf.getmembers():
            kind = "f" if ti.isreg() else ("d" if ti.isdir() else "o")
            if kind == "f":
                with tf.extractfile(ti) as f:
                    data = f.read()
                if data != payload(ti.name, ti.size):
                    sys.exit(f"{archive}: {ti.name} does not hold its payload")
            key, field = key_field(ti.name)
            lines.append("\t".join(
                [kind, str(ti.size), str(ti.offset), str(ti.offset_data), key, field, ti.name]))
    with open(archive + ".members", "w") as out:
        out.write("\n".join(lines) + "\n")


def patch_size_field(archive, member, value):
    """Overwrites a member's ustar size field (and checksum) in place."""
    with tarfile.open(archive) as tf:
        ti = tf.getmember(member)
    header = ti.offset_data - 512
    with open(archive, "r+b") as f:
        f.seek(header)
        block = bytearray(f.read(512))
        block[124:136] = b"%011o\0" % value
        block[148:156] = b" " * 8
        block[148:156] = b"%06o\0 " % sum(block)
        f.seek(header)
        f.write(block)


def gnu_tar(out_dir, tree, name, fmt, entries, gz=False):
    listing = os.path.join(out_dir, name + ".list")
    with open(listing, "w") as f:
        f.write("\n".join(p for p, _ in entries) + "\n")
    cmd = ["tar", "--format=" + fmt, "--no-recursion", "--owner=0", "--group=0",
           "--numeric-owner", "--mtime=@%d" % MTIME, "-C", tree, "-T", listing,
           "-czf" if gz else "-cf", os.path.join(out_dir, name)]
    subprocess.run(cmd, check=True)
    os.unlink(listing)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    tree = os.path.join(out, "tree")
    everything = members(10 ** 6)
    for p, size in everything:
        os.makedirs(os.path.join(tree, os.path.dirname(p)), exist_ok=True)
        with open(os.path.join(tree, p), "wb") as f:
            f.write(payload(p, size))
        os.utime(os.path.join(tree, p), (MTIME, MTIME))

    ustar_safe = with_dirs(members(255))
    full = with_dirs(everything)
    archives = {}
    archives["py_ustar.tar"] = lambda p: write_python(p, tarfile.USTAR_FORMAT, ustar_safe)
    archives["py_gnu.tar"] = lambda p: write_python(p, tarfile.GNU_FORMAT, full)
    archives["py_pax.tar"] = lambda p: write_python(p, tarfile.PAX_FORMAT, full)
    archives["py_pax_global.tar"] = lambda p: write_python(
        p, tarfile.PAX_FORMAT, full, pax_headers={"comment": "shardyard fixture"})
    archives["py_pax.tar.gz"] = lambda p: write_python(p, tarfile.PAX_FORMAT, full, mode="w:gz")
    archives["gnu_gnu.tar"] = lambda p: gnu_tar(out, tree, "gnu_gnu.tar", "gnu", full)
    archives["gnu_posix.tar"] = lambda p: gnu_tar(out, tree, "gnu_posix.tar", "posix", full)
    archives["gnu_ustar.tar"] = lambda p: gnu_tar(out, tree, "gnu_ustar.tar", "ustar", ustar_safe)
    archives["gnu_gnu.tar.gz"] = lambda p: gnu_tar(out, tree, "gnu_gnu.tar.gz", "gnu", full, True)
    for name, make in archives.items():
        make(os.path.join(out, name))

    # Two gzip members, split in the middle of a member: read as one stream.
    with open(os.path.join(out, "py_pax.tar"), "rb") as f:
        raw = f.read()
    with open(os.path.join(out, "py_concat.tar.gz"), "wb") as f:
        f.write(gzip.compress(raw[:5000], mtime=MTIME) + gzip.compress(raw[5000:], mtime=MTIME))
    archives["py_concat.tar.gz"] = None

    # A PAX 'size' record that differs from the ustar size field, which is set to 0: only a
    # reader that applies the record finds the payload (and the next member).
    pax_size = os.path.join(out, "py_pax_size.tar")
    with tarfile.open(pax_size, "w", format=tarfile.PAX_FORMAT) as tf:
        add_file(tf, "s0000.cls", 1)
        add_file(tf, "s0000.jpg", 700, mtime=MTIME + 0.5, pax={"size": "700"})
        add_file(tf, "s0001.cls", 2)
    patch_size_field(pax_size, "s0000.jpg", 0)
    archives["py_pax_size.tar"] = None

    # Names WebDataset's rule treats specially, after two good samples: a dot file in a
    # folder (its key is the folder, "s0002/"), a name without a dot (skipped).
    for name, bad in (("py_hidden.tar", "s0002/.hidden"), ("py_nodot.tar", "README")):
        with tarfile.open(os.path.join(out, name), "w", format=tarfile.GNU_FORMAT) as tf:
            add_file(tf, "s0000.cls", 1)
            add_file(tf, "s0000.jpg", 700)
            add_file(tf, "s0001.cls", 2)
            add_file(tf, bad, 10)
            add_file(tf, "s0003.cls", 3)
        archives[name] = None

    for name in archives:
        write_listing(os.path.join(out, name))


if __name__ == "__main__":
    main()
