#!/usr/bin/env python3
"""Writes the seed corpus of worker_frame_fuzz (tests/fuzz/worker_frame_corpus): one valid
body of each control frame between a rank and its worker processes, in the layout of
actors/state/worker_frames.cc, prefixed by the byte that picks the decoder.

Usage: make_worker_frames.py OUT_DIR
"""
import os
import struct
import sys


def u8(v):
    return struct.pack("<B", v)


def u32(v):
    return struct.pack("<I", v)


def u64(v):
    return struct.pack("<Q", v)


def s(text):
    b = text.encode()
    return u32(len(b)) + b


def job():
    return (u32(1) + u64(0x1234) + u32(64) + u32(32) + u64(17) + u8(1) + u8(0) + s("strided") +
            s("strided") + s("map/count:field=seq") + u32(2) + u32(4) + u32(64) + u8(1) +
            s("none") + u32(1) + s("") + u64(256 << 20) + u32(128) + u64(4 << 20) +
            u64(64) + u64(168) + u64(24) + u64(24) + u8(0) + u32(2) + u32(2) +
            s("/data/a.bin") + s("/data/b.bin") + u64(0) + u32(1) + u32(3))


def unit():
    shards = b"".join(u32(sh) + u64(100) + u64(7) for sh in (3, 9))
    return (u32(1) + u32(3) + u32(0) + u64(99) + u32(2) + shards + s("r1/e0/w3") + u32(1) +
            s("state") + u8(0) + s("r1/e0/route") + u64(1024) + u32(3072))


def status(code, message):
    return u32(code) + s(message)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    seeds = {
        "job": b"\x00" + job(),
        "unit": b"\x01" + unit(),
        "done_ok": b"\x02" + u64(512) + u64(2 << 20) + status(0, ""),
        "done_error": b"\x02" + u64(0) + u64(0) + status(2, "stage failed on item 'k'"),
        "status": b"\x03" + status(5, "the route was reset"),
    }
    for name, data in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
