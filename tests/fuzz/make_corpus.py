#!/usr/bin/env python3
"""Writes the seed corpus of tar_fuzz into tests/fuzz/corpus (or the directory given).

Small archives, each a few blocks, that reach every branch of the header decoder: ustar
with a prefix, GNU long names, PAX path and size records, a global header, a directory,
a base-256 size, an end-of-archive marker and a cut payload.
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
    big[148:156] = b" " * 8
    big[148:156] = b"%06o\0 " % sum(big[:512])
    seeds["base256_size"] = bytes(big)
    seeds["cut_payload"] = archive(tarfile.USTAR_FORMAT, [("c.bin", b"y" * 700, None)],
                                   end=False)[:900]
    for name, data in seeds.items():
        with open(os.path.join(out, name + ".tar"), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
