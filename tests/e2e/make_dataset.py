#!/usr/bin/env python3
"""Writes a small deterministic WebDataset with Python's tarfile (no third-party modules).

Each shard holds samples of three members: KEY.input.bin (pseudo-random bytes), KEY.cls
(a label in ascii) and KEY.json. Prints one JSON line describing what it wrote, including
per-sample sha256_16 (first 16 hex digits of SHA-256 over the sample's field payloads
concatenated in field-name order), which is what `shardyard run --dump-keys` writes.
"""
import argparse
import hashlib
import io
import json
import os
import random
import tarfile


def sample_fields(rng, shard, i, size):
    key = f"s{shard:04d}/x{i:05d}"
    label = rng.randrange(1000)
    payload = rng.randbytes(size)
    meta = json.dumps({"shard": shard, "index": i, "label": label}).encode()
    return key, {"input.bin": payload, "cls": str(label).encode(), "json": meta}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--samples", type=int, default=50, help="samples per shard")
    ap.add_argument("--uneven", action="store_true", help="shard k has samples + 7*k samples")
    ap.add_argument("--bytes", type=int, default=1024, help="mean payload bytes")
    ap.add_argument("--vary", action="store_true", help="payload sizes vary in [1, 2*bytes]")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--format", choices=["ustar", "gnu", "pax"], default="ustar")
    ap.add_argument("--gzip", action="store_true")
    ap.add_argument("--prefix", default="shard-")
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    fmt = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}[args.format]
    ext = ".tar.gz" if args.gzip else ".tar"
    digests = {}
    total = 0
    for s in range(args.shards):
        rng = random.Random(args.seed * 1_000_003 + s)
        n = args.samples + (7 * s if args.uneven else 0)
        path = os.path.join(args.out, f"{args.prefix}{s:06d}{ext}")
        with tarfile.open(path, "w:gz" if args.gzip else "w", format=fmt) as tar:
            for i in range(n):
                size = rng.randint(1, 2 * args.bytes) if args.vary else args.bytes
                key, fields = sample_fields(rng, s, i, size)
                h = hashlib.sha256()
                for name in sorted(fields):
                    h.update(fields[name])
                    info = tarfile.TarInfo(f"{key}.{name}")
                    info.size = len(fields[name])
                    info.mtime = 1700000000
                    info.uid = info.gid = 0
                    info.uname = info.gname = "root"
                    tar.addfile(info, io.BytesIO(fields[name]))
                digests[key] = [h.hexdigest()[:16], sum(len(v) for v in fields.values())]
                total += 1
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"samples": total, "digests": digests}, f)
    print(json.dumps({"out": args.out, "shards": args.shards, "samples": total}))


if __name__ == "__main__":
    main()
