#!/usr/bin/env python3
"""Writes archives made by three tar writers and what WebDataset yields for each.

Usage: webdataset_reference.py OUT_DIR

One tree of sample files, with the names WebDataset treats specially among them (a README,
a LICENSE, macOS "._" files, dot files, metadata names, upper-case extensions, an empty
extension, folders, a symbolic and a hard link, a key that comes back, non-UTF-8 bytes), is
archived by GNU tar (gnu, oldgnu, ustar, posix, v7), Python's tarfile (GNU, PAX, USTAR) and
bsdtar from libarchive (ustar, pax, restricted pax, gnutar, v7tar), plus gzip-compressed
ones and headers whose numeric fields are written the ways other writers write them.
WebDataset itself is not packaged for Debian, so each archive is read the way
webdataset/tariterators.py reads it: Python's tarfile in stream mode, tar_file_iterator's
filters (regular files only, metadata names skipped), base_plus_ext's regular expression,
and group_by_keys (consecutive members with one key make a sample, the extension is
lowercased). For each archive NAME it writes NAME.expected, one line per field:

    sample_index<TAB>key_hex<TAB>field_hex<TAB>size<TAB>crc32

(key and field as hex of their bytes; fields of a sample sorted by name) and a last line
"skipped<TAB>N": the members WebDataset yields in no sample. OUT_DIR/archives lists the
archive names, one a line.
"""

import gzip
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zlib

MTIME = 1700000000
LATIN1 = "caf\udce9"  # the bytes "caf\xe9" as Python holds a non-UTF-8 name


def payload(path, size):
    h = sum(path.encode("utf-8", "surrogateescape")) % 251
    period = bytes((h + i * 131) % 251 for i in range(251))
    return (period * (size // 251 + 1))[:size]


# (path, size) of the regular files, in archive order; links are added after them.
FILES = [
    ("README", 40),
    ("s0000.jpg", 700),
    ("s0000.cls", 1),
    ("LICENSE", 30),
    ("._s0001.jpg", 82),            # macOS metadata at the top: skipped
    ("s0001.JPG", 512),             # the field is lowercased: "jpg"
    ("s0001.Cls", 2),
    ("s0002.jpg", 513),
    ("NOTES", 5),                   # between two members of one sample: skipped
    ("s0002.cls", 0),
    (".hidden", 3),                 # skipped
    ("__meta__", 9),                # metadata: skipped
    ("a/b/x.input.seq.bin", 511),
    ("a/b/x.target.seq.bin", 70000),
    ("a/b/._x.jpg", 82),            # macOS metadata in a folder: key "a/b/"
    ("dir.with.dots/s0003.json", 17),
    ("dir.with.dots/.keep", 0),     # a dot file in a dotted folder: skipped
    ("k.a.b.c", 4),
    ("x.", 6),                      # empty extension: field ""
    ("__key__.txt", 7),             # not a metadata name: key "__key__"
    ("s0005.cls", 1),
    ("s0006.cls", 1),
    ("s0005.txt", 8),               # the key comes back: a second sample "s0005"
    ("d" * 60 + "/" + "e" * 50 + "/s0007.cls", 3),   # over 100 bytes
    ("p" * 120 + "/" + "q" * 100 + "/s0008.cls", 5),  # over 255 bytes
    (LATIN1 + ".jpg", 9),           # a name that is not UTF-8
    ("meta/__m__/x.json", 2),       # "__m__" below the top: not metadata
]
SYMLINK = ("link.jpg", "s0000.jpg")
HARDLINK = ("hard.cls", "s0000.cls")


def fits(name, fmt):
    """Whether a format's header holds the name: v7 99 bytes, ustar 100 or a 155-byte
    prefix and a 100-byte name split at a '/', the others any length."""
    b = name.encode("utf-8", "surrogateescape")
    if fmt == "v7":
        return len(b) <= 99
    if fmt != "ustar" or len(b) <= 100:
        return True
    return any(b[i:i + 1] == b"/" and i <= 155 and 0 < len(b) - i - 1 <= 100
               for i in range(len(b)))


def make_tree(tree):
    for path, size in FILES:
        full = os.path.join(tree, path).encode("utf-8", "surrogateescape")
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(payload(path, size))
    os.symlink(SYMLINK[1], os.path.join(tree, SYMLINK[0]))
    os.link(os.path.join(tree, HARDLINK[1]), os.path.join(tree, HARDLINK[0]))
    for root, dirs, files in os.walk(tree.encode()):
        for n in dirs + files:
            os.utime(os.path.join(root, n), (MTIME, MTIME), follow_symlinks=False)


def entries(fmt, raw_bytes):
    """Paths in archive order, folders before their first file, links at the end; only
    names the format holds (and, unless raw_bytes, only UTF-8 ones)."""
    out, seen = [], set()
    for path, _ in FILES:
        if not fits(path, fmt) or (not raw_bytes and LATIN1 in path):
            continue
        parts = path.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in seen and fits(d + "/", fmt):
                seen.add(d)
                out.append(d)
        out.append(path)
    return out + [SYMLINK[0], HARDLINK[0]]


def gnu_tar(tree, out, fmt, gz=False):
    listing = out + ".list"
    with open(listing, "wb") as f:
        f.write(b"\n".join(p.encode("utf-8", "surrogateescape") for p in entries(fmt, True)))
    subprocess.run(["tar", "--format=" + fmt, "--no-recursion", "--owner=0", "--group=0",
                    "--numeric-owner", "-C", tree, "-T", listing, "-czf" if gz else "-cf", out],
                   check=True)
    os.unlink(listing)


def bsdtar(tree, out, fmt):
    kind = {"ustar": "ustar", "v7tar": "v7"}.get(fmt, "any")
    names = [p.encode("utf-8", "surrogateescape") for p in entries(kind, False)]
    subprocess.run([b"bsdtar", b"--format", fmt.encode(), b"-n", b"--uid", b"0", b"--gid", b"0",
                    b"-C", tree.encode(), b"-cf", out.encode()] + names, check=True)


def python_tar(tree, out, fmt):
    kind = "ustar" if fmt == tarfile.USTAR_FORMAT else "any"
    with tarfile.open(out, "w", format=fmt, encoding="utf-8", errors="surrogateescape") as tf:
        for p in entries(kind, True):
            tf.add(os.path.join(tree, p), arcname=p, recursive=False)


def patched(src, out, edits):
    """A copy of src with header fields rewritten (checksum fixed): edits maps a member name
    to [(offset in header, bytes)]."""
    with tarfile.open(src) as tf:
        headers = {m.name: m.offset_data - 512 for m in tf.getmembers() if m.isreg()}
    data = bytearray(open(src, "rb").read())
    for name, changes in edits.items():
        at = headers[name]
        for off, value in changes:
            data[at + off:at + off + len(value)] = value
        if not any(off == 148 for off, _ in changes):
            data[at + 148:at + 156] = b" " * 8
            data[at + 148:at + 156] = b"%06o\0 " % sum(data[at:at + 512])
    with open(out, "wb") as f:
        f.write(data)


def checksum_as(fmt):
    def edit(block):
        block[148:156] = b" " * 8
        block[148:156] = (fmt % sum(block))[:8]
    return edit


# ---- WebDataset's reading (webdataset/tariterators.py) ---------------------------------

def base_plus_ext(path):
    match = re.match(r"^((?:.*/|)[^.]+)[.]([^/]*)$", path)
    if not match:
        return None, None
    return match.group(1), match.group(2)


def webdataset_samples(path):
    """(samples, skipped): samples as [(key, {field: bytes})], in order."""
    samples, current, members, yielded = [], None, 0, 0
    with open(path, "rb") as raw:
        stream = tarfile.open(fileobj=raw, mode="r|*", encoding="utf-8", errors="surrogateescape")
        for info in stream:
            members += 1
            name = info.name
            if not info.isreg():
                continue
            if "/" not in name and name.startswith("__") and name.endswith("__"):
                continue
            if re.match(r"__[^/]*__($|/)", name):
                continue
            data = stream.extractfile(info).read()
            prefix, suffix = base_plus_ext(name)
            if prefix is None:
                continue
            suffix = suffix.lower()
            if current is None or prefix != current[0]:
                current = (prefix, {})
                samples.append(current)
            if suffix in current[1]:
                sys.exit(f"{path}: {name}: duplicate field (WebDataset raises)")
            current[1][suffix] = data
            yielded += 1
    return samples, members - yielded


def write_expected(archive):
    samples, skipped = webdataset_samples(archive)
    lines = []
    for i, (key, fields) in enumerate(samples):
        for field in sorted(fields, key=lambda f: f.encode("utf-8", "surrogateescape")):
            data = fields[field]
            lines.append("\t".join([str(i), key.encode("utf-8", "surrogateescape").hex(),
                                    field.encode("utf-8", "surrogateescape").hex(),
                                    str(len(data)), "%08x" % zlib.crc32(data)]))
    lines.append(f"skipped\t{skipped}")
    with open(archive + ".expected", "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    out = sys.argv[1]
    if shutil.which("bsdtar") is None:
        sys.exit("bsdtar not found: install Debian's libarchive-tools (scripts/common.sh does)")
    os.makedirs(out, exist_ok=True)
    tree = os.path.join(out, "tree")
    make_tree(tree)
    names = []

    def add(name, make):
        make(os.path.join(out, name))
        names.append(name)

    for fmt in ("gnu", "oldgnu", "ustar", "posix", "v7"):
        add(f"gnutar-{fmt}.tar", lambda p, f=fmt: gnu_tar(tree, p, f))
    add("gnutar-gnu.tar.gz", lambda p: gnu_tar(tree, p, "gnu", gz=True))
    for fmt in ("ustar", "pax", "paxr", "gnutar", "v7tar"):
        add(f"bsdtar-{fmt}.tar", lambda p, f=fmt: bsdtar(tree, p, f))
    for fmt, label in ((tarfile.GNU_FORMAT, "gnu"), (tarfile.PAX_FORMAT, "pax"),
                       (tarfile.USTAR_FORMAT, "ustar")):
        add(f"python-{label}.tar", lambda p, f=fmt: python_tar(tree, p, f))
    with open(os.path.join(out, "python-pax.tar"), "rb") as f:
        raw = f.read()
    add("python-pax.tar.gz", lambda p: open(p, "wb").write(gzip.compress(raw, mtime=MTIME)))

    # Numeric fields as other writers write them, all read by tarfile: spaces before the
    # digits, a space for the NUL, text after the NUL, a size led by NULs (libarchive's
    # test_read_format_tar_timestamp_overflow.tar: size 0), base-256, checksums formatted
    # four ways.
    base = os.path.join(out, "python-ustar.tar")
    add("numbers.tar", lambda p: patched(base, p, {
        "s0000.jpg": [(124, b"     0001274")],
        "s0000.cls": [(124, b"00000000001 ")],
        "s0001.JPG": [(124, b"0001000\0junk")],
        "s0002.cls": [(124, b"\0\0\0\0\0\0\0" + b"0016\0")],
        "a/b/x.target.seq.bin": [(124, b"\x80" + (70000).to_bytes(11, "big"))],
    }))
    with open(base, "rb") as f:
        data = bytearray(f.read())
    with tarfile.open(base) as tf:
        regs = [m.offset_data - 512 for m in tf.getmembers() if m.isreg()]
    for at, fmt in zip(regs, (b"%06o\0 ", b"%07o\0", b"  %06o", b"%o\0      ")):
        block = data[at:at + 512]
        checksum_as(fmt)(block)
        data[at:at + 512] = block
    add("checksums.tar", lambda p: open(p, "wb").write(bytes(data)))

    for name in names:
        write_expected(os.path.join(out, name))
    with open(os.path.join(out, "archives"), "w") as f:
        f.write("\n".join(names) + "\n")


if __name__ == "__main__":
    main()
