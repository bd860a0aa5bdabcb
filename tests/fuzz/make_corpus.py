#!/usr/bin/env python3
"""Writes the seed corpus of tar_fuzz into tests/fuzz/corpus (or the directory given).

Small archives, each a few blocks, that reach every branch of the header decoder: ustar
with a prefix, GNU long names, PAX path and size records, a global header, a directory,
a base-256 size, an end-of-archive marker and a cut payload; numeric fields led by NULs or
spaces, a Solaris 'X' header, an old GNU sparse header with a map block after it, PAX
GNU.sparse records, a v7 directory, and names WebDataset's rule skips.
"""

import io
import os
import sys
import tarfile


def archive(fmt, members, end=True, **kw):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt, **kw) as tf:
        for name, data, pax in members:
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            if data is None:
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
                continue
            ti.size = len(data)
            if pax:
                ti.pax_headers = pax
            tf.addfile(ti, io.BytesIO(data))
    raw = buf.getvalue()
    if not end:  # drop the end-of-archive blocks and the record padding
        raw = raw.rstrip(b"\0")
        raw += b"\0" * (-len(raw) % 512)
    return raw


def resum(block_bytes, at):
    """Rewrites the checksum of the header at `at` after an edit."""
    block_bytes[at + 148:at + 156] = b" " * 8
    block_bytes[at + 148:at + 156] = b"%06o\0 " % sum(block_bytes[at:at + 512])
    return block_bytes


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "ustar_two_fields": archive(tarfile.USTAR_FORMAT,
                                    [("s0.cls", b"1", None), ("s0.jpg", b"JPEG", None)], end=False),
        "ustar_prefix": archive(tarfile.USTAR_FORMAT,
                                [("d" * 60 + "/" + "e" * 50 + "/k.cls", b"7", None)], end=False),
        "gnu_long_name": archive(tarfile.GNU_FORMAT,
                                 [("p" * 120 + "/x.input.seq.bin", b"ab", None)], end=False),
        "pax_path_size": archive(tarfile.PAX_FORMAT,
                                 [("q" * 130 + ".txt", b"hello", {"size": "5"})], end=False),
        "pax_global_dir": archive(tarfile.PAX_FORMAT, [("dir", None, None), ("dir/a.b", b"", None)],
                                  end=False, pax_headers={"comment": "x"}),
        "end_marker": archive(tarfile.USTAR_FORMAT, [("a.x", b"", None)])[:1536],
    }
    # A base-256 size field (GNU extension) and a payload cut short.
    big = bytearray(archive(tarfile.GNU_FORMAT, [("b.bin", b"z" * 10, None)], end=False))
    big[124:136] = b"\x80" + (10).to_bytes(11, "big")
    seeds["base256_size"] = bytes(resum(big, 0))
    seeds["cut_payload"] = archive(tarfile.USTAR_FORMAT, [("c.bin", b"y" * 700, None)],
                                   end=False)[:900]
    # Numeric fields as other writers write them: a size led by NULs (0, as for tarfile),
    # a size led by spaces with no terminator.
    for label, field in (("nul_led_size", b"\0" * 7 + b"0016\0"), ("space_led_size", b"  0000000012")):
        raw = bytearray(archive(tarfile.USTAR_FORMAT, [("n.txt", b"z" * 10, None)], end=False))
        raw[124:136] = field
        seeds[label] = bytes(resum(raw, 0))
    # Solaris tar's extended header type 'X', read as PAX 'x'.
    solaris = bytearray(archive(tarfile.PAX_FORMAT,
                                [("s" * 120 + ".cls", b"1", {"comment": "x"})], end=False))
    solaris[156:157] = b"X"
    seeds["solaris_x"] = bytes(resum(solaris, 0))
    # An old GNU sparse header ('S') whose map goes on in one extra block, then its data.
    sparse = bytearray(archive(tarfile.GNU_FORMAT, [("sp.bin", b"d" * 10, None)], end=False))
    sparse[156:157] = b"S"
    sparse[482] = 1
    sparse = resum(sparse, 0)
    seeds["gnu_sparse_map"] = bytes(sparse[:512]) + bytes(512) + bytes(sparse[512:])
    seeds["pax_sparse"] = archive(tarfile.PAX_FORMAT, [("GNUSparseFile.0/sp.bin", b"1\n0\n4\n",
                                                        {"GNU.sparse.major": "1",
                                                         "GNU.sparse.minor": "0",
                                                         "GNU.sparse.name": "sp.bin"})], end=False)
    # A v7 directory (a NUL-type member named with a '/') and names WebDataset skips.
    v7 = bytearray(archive(tarfile.USTAR_FORMAT, [("d/", b"", None)], end=False))
    v7[156:157] = b"\0"
    v7[257:265] = bytes(8)
    seeds["v7_directory"] = bytes(resum(v7, 0))
    seeds["skipped_names"] = archive(tarfile.GNU_FORMAT, [("README", b"r", None),
                                                          ("._s0.jpg", b"m", None),
                                                          ("a/.hidden", b"h", None),
                                                          ("__meta__", b"{}", None),
                                                          ("s0.JPG", b"j", None)], end=False)
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".tar"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
