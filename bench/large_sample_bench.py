#!/usr/bin/env python3
"""Large-sample throughput of one or more `shardyard` binaries, same data, interleaved.

Made to compare read paths of large samples (memory-mapped, guarded, or read with pread):
generates two datasets with tests/e2e/make_dataset.py if they are missing (4 x 64 x 4 MiB
and 8 x 200 x 512 KiB), builds each binary's manifest into a private cache, warms the page
cache, then runs `shardyard run --workers 2 --batch-size 16 --json` REPS times per binary
and dataset, interleaved (rep 1 of every binary, then rep 2, ...), and prints per binary and
dataset the median and best loop seconds, the median cpu_seconds and peak RSS.

  python3 bench/large_sample_bench.py --reps 7 build/tools/shardyard /tmp/old-shardyard
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE = os.path.join(HERE, "..", "tests", "e2e", "make_dataset.py")
DATASETS = {  # name: make_dataset.py arguments
    "4MiB": ["--shards", "4", "--samples", "64", "--bytes", str(4 << 20), "--seed", "3"],
    "512KiB": ["--shards", "8", "--samples", "200", "--bytes", str(512 << 10), "--seed", "2"],
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binaries", nargs="+")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--data", default="/tmp/shardyard-large-sample-bench")
    args = ap.parse_args()
    cache = os.path.join(args.data, "cache")
    env = dict(os.environ, SHARDYARD_CACHE_DIR=cache)
    for name, flags in DATASETS.items():
        folder = os.path.join(args.data, name)
        if not os.path.exists(os.path.join(folder, "expected.json")):
            subprocess.run([sys.executable, MAKE, "--out", folder, *flags], check=True,
                           stdout=subprocess.DEVNULL)
        for b in args.binaries:
            subprocess.run([b, "manifest", "build", "--source", folder], env=env, check=True,
                           stdout=subprocess.DEVNULL)
    runs = {}
    for _ in range(args.reps):
        for name in DATASETS:
            folder = os.path.join(args.data, name)
            subprocess.run(f"cat {folder}/*.tar > /dev/null", shell=True, check=True)
            for b in args.binaries:
                p = subprocess.run([b, "run", "--source", folder, "--workers", "2",
                                    "--batch-size", "16", "--json"], env=env, check=True,
                                   capture_output=True, text=True)
                j = json.loads(p.stdout.strip().splitlines()[-1])
                runs.setdefault((name, b), []).append(j)
    print(f"{'samples':8} {'binary':40} {'median s':>9} {'best s':>7} {'cpu s':>6} {'RSS MiB':>8}")
    for (name, b), js in runs.items():
        s = [j["seconds"] for j in js]
        print(f"{name:8} {b[-40:]:40} {statistics.median(s):9.3f} {min(s):7.3f} "
              f"{statistics.median(j['cpu_seconds'] for j in js):6.2f} "
              f"{statistics.median(j['peak_rss_kb'] for j in js) // 1024:8}")


if __name__ == "__main__":
    main()
