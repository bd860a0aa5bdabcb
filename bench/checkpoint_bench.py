#!/usr/bin/env python3
"""Checkpoint cost end to end: save latency per rank and checkpoint size, against the size
of the dataset and the number of samples buffered ahead of the trainer.

    python3 bench/checkpoint_bench.py --shardyard build-release/tools/shardyard [--out DIR]

For each dataset (N and 4N samples) and each buffering setting (the default prefetch, and
32 batches + 64 packets per worker ahead), it runs `shardyard run --checkpoint-every K` over
one epoch with R ranks, and reports the median and slowest save of any rank (the whole
Loader::save() call after the ranks met: the barrier in the coordinator, the rank file's
write and fsync, and the commit of CHECKPOINT) and the bytes on disk. Then it times a
resume.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make(out, shards, samples, nbytes):
    subprocess.run([sys.executable, os.path.join(ROOT, "tests/e2e/make_dataset.py"), "--out",
                    out, "--shards", str(shards), "--samples", str(samples), "--bytes",
                    str(nbytes)], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(out, "shard-{000000..%06d}.tar" % (shards - 1))


def run(bin_, src, *extra):
    cmd = [bin_, "run", "--source", src, "--json", *map(str, extra)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(p.stdout.strip().splitlines()[-1])


def dir_bytes(d):
    return {n: os.path.getsize(os.path.join(d, n)) for n in sorted(os.listdir(d))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardyard", required=True)
    ap.add_argument("--out", help="write results.json here")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--samples", type=int, default=2000, help="samples per shard")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shardyard-ckpt-bench-")
    rows = []
    try:
        datasets = [("N", make(os.path.join(tmp, "n"), 16, args.samples, 4096)),
                    ("4N", make(os.path.join(tmp, "n4"), 64, args.samples, 4096))]
        for name, src in datasets:
            for label, buffering in [("default prefetch", []),
                                     ("32 batches + 64 packets ahead",
                                      ["--prefetch-batches", 32, "--prefetch-packets", 64])]:
                for lflag in ([], ["--logical-shards", 256]):
                    ck = os.path.join(tmp, "ck")
                    shutil.rmtree(ck, ignore_errors=True)
                    s = run(args.shardyard, src, "--ranks", args.ranks, "--workers",
                            args.workers, "--batch-size", 64, "--shuffle", "--seed", 1,
                            "--checkpoint-dir", ck, "--checkpoint-every", 20, *buffering,
                            *lflag)
                    sizes = dir_bytes(ck)
                    t = time.perf_counter()
                    r = run(args.shardyard, src, "--ranks", args.ranks, "--workers",
                            args.workers, "--batch-size", 64, "--shuffle", "--seed", 1,
                            "--resume", ck, *lflag)
                    resume_s = time.perf_counter() - t
                    rows.append({
                        "dataset": name, "samples": s["samples"], "buffering": label,
                        "logical_shards": s["logical_shards"], "ranks": args.ranks,
                        "saves": s["checkpoint"]["saves"],
                        "median_save_ms": round(s["checkpoint"]["median_save_ms"], 2),
                        "max_save_ms": round(s["checkpoint"]["max_save_ms"], 2),
                        "rank_file_bytes": max(v for k, v in sizes.items() if k != "CHECKPOINT"),
                        "manifest_bytes": sizes["CHECKPOINT"],
                        "resume_run_s": round(resume_s, 3),
                        "resumed": r.get("resumed"),
                    })
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| dataset | samples | buffering | L | saves x ranks | save median / max (ms) "
          "| rank file (B) | CHECKPOINT (B) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['dataset']} | {r['samples']} | {r['buffering']} | {r['logical_shards']} "
              f"| {r['saves']} x {r['ranks']} | {r['median_save_ms']} / {r['max_save_ms']} "
              f"| {r['rank_file_bytes']} | {r['manifest_bytes']} |")
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "checkpoint_bench.json"), "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
