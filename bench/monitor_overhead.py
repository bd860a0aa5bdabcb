#!/usr/bin/python3
"""What the monitor costs: `shardyard run` before and after the instrumentation, and with
its endpoints served and scraped, on the same data, interleaved.

  /usr/bin/python3 bench/monitor_overhead.py --base OLD/shardyard --new build/tools/shardyard

Configurations (rep 1 of each, then rep 2, ...):
  base      OLD binary (without the monitor's instrumentation)
  new       NEW binary, no endpoint (every role still reports to its StatusBoard)
  scraped   NEW binary with --metrics-port 0, GET /metrics and GET /status every 100 ms
The data are many small samples (default 32 shards x 2000 samples x 256 B: 64,000 items a
run), the worst case for a per-item cost. Prints the median of each configuration's
seconds, samples/s and CPU seconds from the run's JSON summary. Standard library only.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def run(binary, source, cache, scrape, workers, ranks):
    cmd = [binary, "run", "--source", source, "--workers", str(workers), "--ranks", str(ranks),
           "--batch-size", "64", "--json", "--cache-dir", cache]
    if scrape:
        cmd += ["--metrics-port", "0"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    scrapes = 0
    stop = threading.Event()

    def scraper():
        nonlocal scrapes
        port = None
        while not stop.is_set() and port is None:
            line = p.stderr.readline()
            if not line:
                return
            m = re.search(r"monitor: http://127\.0\.0\.1:(\d+)/", line)
            port = m and m.group(1)
        while not stop.is_set():
            for path in ("/metrics", "/status"):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read()
                    scrapes += 1
                except OSError:
                    return
            stop.wait(0.1)

    t = threading.Thread(target=scraper)
    if scrape:
        t.start()
    out, _ = p.communicate(timeout=600)
    stop.set()
    if scrape:
        t.join(timeout=30)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode})")
    summary = json.loads(out.strip().splitlines()[-1])
    summary["scrapes"] = scrapes
    return summary


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="shardyard binary without the monitor")
    ap.add_argument("--new", required=True, help="shardyard binary with it")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--shards", type=int, default=32)
    ap.add_argument("--samples", type=int, default=2000)
    ap.add_argument("--bytes", type=int, default=256)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ranks", type=int, default=1)
    args = ap.parse_args()
    data = f"/tmp/sy-monitor-bench-{args.shards}x{args.samples}x{args.bytes}"
    if not os.path.isdir(data):
        subprocess.run([sys.executable, os.path.join(HERE, "..", "tests", "e2e", "make_dataset.py"),
                        "--out", data, "--shards", str(args.shards), "--samples",
                        str(args.samples), "--bytes", str(args.bytes), "--seed", "7"],
                       check=True, stdout=subprocess.DEVNULL)
    source = f"{data}/shard-{{000000..{args.shards - 1:06d}}}.tar"
    with tempfile.TemporaryDirectory() as cache:
        configs = [("base", args.base, False), ("new", args.new, False),
                   ("scraped", args.new, True)]
        for name, binary, scrape in configs:  # warm the page cache and the manifest cache
            run(binary, source, cache, scrape, args.workers, args.ranks)
        results = {name: [] for name, _, _ in configs}
        for _ in range(args.reps):
            for name, binary, scrape in configs:
                results[name].append(run(binary, source, cache, scrape, args.workers, args.ranks))
    print(f"{args.shards} shards x {args.samples} samples x {args.bytes} B, ranks {args.ranks}, "
          f"workers {args.workers}, {args.reps} reps, medians:")
    print(f"{'config':<8} {'seconds':>8} {'samples/s':>10} {'cpu s':>7} {'scrapes':>8}")
    for name, runs in results.items():
        med = lambda k: statistics.median(r[k] for r in runs)
        print(f"{name:<8} {med('seconds'):8.3f} {med('samples_per_s'):10.0f} "
              f"{med('cpu_seconds'):7.3f} {med('scrapes'):8.0f}")


if __name__ == "__main__":
    main()
