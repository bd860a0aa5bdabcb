#!/usr/bin/python3
"""Two or more shardyard binaries (or argument sets) against each other and `cat`, on one
set of /tmp/peerbench, interleaved: per rep, `cat` of the shards, then each configuration,
each run after an untimed `cat` that warms the page cache (and, with --pause, a sleep
before it: this VM hands memory left idle back to the host, which a short run then pays
for; docs/performance.md, "Large samples read into the batch").

Timed: the wall time of the whole process; CPU = user + system of it and of the worker
processes it waited for. Prints the median wall, the median and range of cat / wall, the
median CPU, the highest peak RSS, the median `seconds` of the JSON summary (the loop,
from the loader's start to its last batch: what bench/run_bench.py's table reports) and
the median `first_batch_seconds` (from the command's start) of each configuration.

A run that read more than --redo-disk-mb from the disk (the children's block input,
getrusage ru_inblock) although the page cache was warmed right before it (this VM's DAMON
pageout scheme drops pages it deems idle, docs/performance.md "Measuring on this machine")
is warmed and run again, at most --redo-disk times; each line says how many were.

With --http the set is served by nginx on loopback (tests/servers/servers.py) and read by
URL; the reference is then `curl -s -Z` of the same URLs instead of `cat`. Each
configuration runs once untimed first, so that its manifest is cached.

  /usr/bin/python3 bench/ab_wall.py --set large16 --reps 7 --pause 3 \\
      old=/path/to/old/shardyard new=build/tools/shardyard \\
      'newL=build/tools/shardyard:--placement local'
"""
import argparse
import contextlib
import glob
import json
import os
import resource
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", required=True,
                    help="a folder of --data-dir: large16, small, ... (a set of "
                         "bench/run_bench.py's SHAPES is generated when missing)")
    ap.add_argument("--data-dir", default="/tmp/peerbench")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--pause", type=float, default=0.0, help="seconds slept before each run")
    ap.add_argument("--redo-disk", type=int, default=2,
                    help="times a run that read from the disk is run again (0: never)")
    ap.add_argument("--redo-disk-mb", type=float, default=1.0,
                    help="disk bytes (MB) above which a run counts as having read from disk")
    ap.add_argument("--http", action="store_true",
                    help="serve --data-dir with nginx on loopback and read the set by URL")
    ap.add_argument("configs", nargs="+", help="LABEL=BINARY[:EXTRA ARGS]")
    args = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_bench
    if args.set in run_bench.SHAPES:  # made with ../shared/bench/gen_dataset.py when missing
        run_bench.ensure_dataset(args.data_dir, args.set)
    files = sorted(glob.glob(f"{args.data_dir}/{args.set}/train-*.tar"))
    if not files:
        raise SystemExit(f"no train-*.tar in {args.data_dir}/{args.set}")
    with contextlib.ExitStack() as stack:
        base, reference = args.data_dir, ["cat"] + files
        if args.http:
            sys.path.insert(0, os.path.join(REPO, "tests", "servers"))
            import servers
            base = stack.enter_context(servers.Nginx(args.data_dir)).url
            urls = [f"{base}/{args.set}/{os.path.basename(f)}" for f in files]
            reference = ["curl", "-s", "-Z"] + sum([[u, "-o", "/dev/null"] for u in urls], [])
        measure(args, files, f"{base}/{args.set}/train-{{000000..{len(files) - 1:06d}}}.tar",
                reference)


def measure(args, files, source, reference):
    configs = []
    for c in args.configs:
        label, rest = c.split("=", 1)
        binary, _, extra = rest.partition(":")
        configs.append((label, binary, extra.split()))
    res = {reference[0]: []}
    res.update({label: [] for label, _, _ in configs})

    def warm():
        time.sleep(args.pause)
        subprocess.run(["cat"] + files, stdout=subprocess.DEVNULL, check=True)

    def command(binary, extra):
        return [binary, "run", "--source", source, "--workers", "2", "--batch-size", "64",
                "--json"] + extra

    def from_disk(blocks):  # 512-byte blocks of input over --redo-disk-mb
        return blocks * 512 > args.redo_disk_mb * 1e6

    # A timed run after a warm-up: wall, CPU, peak RSS, loop seconds, and the 512-byte
    # blocks its processes read from the disk. Run again while it read more than allowed.
    def timed(label, cmd, json_out):
        for attempt in range(args.redo_disk + 1):
            warm()
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            p = subprocess.run(cmd, stdout=subprocess.PIPE if json_out else subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, errors="replace", timeout=600)
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode != 0:
                raise SystemExit(f"{label}: exit {p.returncode}: {p.stderr[-2000:]}")
            cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
            blocks = after.ru_inblock - before.ru_inblock
            if not from_disk(blocks) or attempt == args.redo_disk:
                break
            redone[label] += 1
        if not json_out:
            return (wall, cpu, 0, None, blocks, None)
        summary = json.loads(p.stdout.strip().splitlines()[-1])
        return (wall, cpu, summary["peak_rss_kb"], summary["seconds"], blocks,
                summary["first_batch_seconds"])

    redone = {label: 0 for label in res}
    for label, binary, extra in configs:  # untimed: the manifest cached
        subprocess.run(command(binary, extra), capture_output=True, timeout=600)
    for _ in range(args.reps):
        res[reference[0]].append(timed(reference[0], reference, False))
        for label, binary, extra in configs:
            res[label].append(timed(label, command(binary, extra), True))
    cat = [r[0] for r in res[reference[0]]]
    for label, runs in res.items():
        disk = [r[4] for r in runs if from_disk(r[4])]
        disk_note = (f"  read from disk: {len(disk)} runs kept (up to "
                     f"{max(disk) * 512 / 1e6:.1f} MB)" if disk else "")
        redo_note = f"  {redone[label]} runs again after reading from disk" if redone[label] else ""
        ratios = [c / r[0] for c, r in zip(cat, runs)]
        loops = [r[3] for r in runs if r[3] is not None]
        loop = f"  loop {statistics.median(loops):.3f} s" if loops else ""
        firsts = [r[5] for r in runs if r[5] is not None]
        if firsts:
            loop += f"  first batch {statistics.median(firsts):.3f} s"
        print(f"{label:10s} wall {statistics.median(r[0] for r in runs):.3f} s  "
              f"{reference[0]}/wall {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f})  CPU "
              f"{statistics.median(r[1] for r in runs):.3f} s  peak RSS "
              f"{max(r[2] for r in runs) // 1024} MiB{loop}{redo_note}{disk_note}")


if __name__ == "__main__":
    main()
