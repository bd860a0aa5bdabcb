#!/usr/bin/python3
"""Opening many remote shards: shardyard binaries (or argument sets) against each other on
1,000 small shards served by nginx on loopback, interleaved, with the manifest cached and
without it (`--no-cache`: the header scan inside the run).

Per configuration it prints the medians of `first_batch_seconds`, `total_seconds` and
`cpu_seconds` of the JSON summary, and, where `strace` is installed, the HEADs and GETs
one run of each mode sends (counted in its `sendto` calls). The dataset is the one
bench/remote_bench.py times its first batch on (tests/e2e/make_dataset.py --shards 1000
--samples 8 --bytes 1024 --seed 7), made in a temporary folder unless --data names one.

  /usr/bin/python3 bench/remote_open_bench.py --reps 7 old=/path/to/old/shardyard \\
      new=build/tools/shardyard 'new2=build/tools/shardyard:--workers 4'
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "servers"))
import servers  # noqa: E402

MODES = {"cached": [], "no-cache": ["--no-cache"]}


def run(cmd, env):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return json.loads(p.stdout)


def requests(cmd, env, work):
    """(HEADs, GETs) that one run sends, from strace's record of its sendto calls."""
    log = os.path.join(work, "strace.log")
    subprocess.run(["strace", "-f", "-e", "trace=sendto", "-s", "8", "-o", log] + cmd, env=env,
                   capture_output=True, check=True, timeout=300)
    text = open(log).read()
    return text.count('"HEAD '), text.count('"GET ')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", help="LABEL=BINARY[:EXTRA ARGS]")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--data", help="folder holding d/shard-000000.tar ... (made if missing)")
    args = ap.parse_args()
    configs = {}
    for c in args.configs:
        label, _, rest = c.partition("=")
        binary, _, extra = rest.partition(":")
        configs[label] = (os.path.abspath(binary), extra.split())
    work = tempfile.mkdtemp(prefix="sy-remote-open-")
    try:
        root = args.data or os.path.join(work, "data")
        if not os.path.exists(os.path.join(root, "d", "shard-000999.tar")):
            subprocess.run([sys.executable, os.path.join(REPO, "tests", "e2e", "make_dataset.py"),
                            "--out", os.path.join(root, "d"), "--shards", "1000", "--samples", "8",
                            "--bytes", "1024", "--seed", "7"], check=True, capture_output=True)
        with servers.Nginx(root) as ng:
            src = ng.url + "/d/shard-{000000..000999}.tar"
            cmds, envs = {}, {}
            for label, (binary, extra) in configs.items():
                envs[label] = dict(os.environ, SHARDYARD_CACHE_DIR=os.path.join(work, "cache-" + label))
                for mode, flags in MODES.items():
                    cmds[label, mode] = [binary, "run", "--source", src, "--json"] + flags + extra
                run(cmds[label, "cached"], envs[label])  # writes the manifest cache
            got = {key: [] for key in cmds}
            for _ in range(args.reps):
                for key, cmd in cmds.items():
                    d = run(cmd, envs[key[0]])
                    got[key].append((d["first_batch_seconds"], d["total_seconds"], d["cpu_seconds"]))
            have_strace = shutil.which("strace") is not None
            print(f"{args.reps} interleaved runs of each, medians; `shardyard run --source "
                  f"'URL/d/shard-{{000000..000999}}.tar' --json [--no-cache]` over nginx")
            for key, rows in got.items():
                med = [statistics.median(r[i] for r in rows) for i in range(3)]
                line = (f"{key[0]:10s} {key[1]:8s}  first batch {med[0]:.3f} s  total {med[1]:.3f} s"
                        f"  CPU {med[2]:.3f} s")
                if have_strace:
                    heads, gets = requests(cmds[key], envs[key[0]], work)
                    line += f"  HEADs {heads}  GETs {gets}"
                print(line, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
