#!/usr/bin/env python3
"""The installed package, as an outside project uses it.

Usage: run_install_test.py --build BUILD --source SRC [--cxx CXX] [--launcher CCACHE]
Installs BUILD into BUILD/install-test/prefix (cmake --install), configures and builds
tests/install/consumer (find_package(shardyard), examples/trainer.cc linked to
shardyard::shardyard) against it, and runs that trainer on a small dataset written by
tests/e2e/make_dataset.py. Exit 0 = pass.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-6000:])
        sys.stderr.write(p.stderr[-6000:])
        raise SystemExit(f"failed (exit {p.returncode}): {' '.join(cmd)}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--cxx")
    ap.add_argument("--launcher")
    a = ap.parse_args()
    work = os.path.join(a.build, "install-test")
    prefix = os.path.join(work, "prefix")
    consumer = os.path.join(work, "consumer")
    shutil.rmtree(work, ignore_errors=True)
    run(["cmake", "--install", a.build, "--prefix", prefix])
    for must in ["include/shardyard/loader.h", "bin/shardyard",
                 "lib/cmake/shardyard/shardyardConfig.cmake",
                 "lib/cmake/shardyard/shardyardConfigVersion.cmake"]:
        if not os.path.exists(os.path.join(prefix, must)):
            raise SystemExit(f"cmake --install did not install {must}")
    configure = ["cmake", "-S", os.path.join(a.source, "tests", "install", "consumer"),
                 "-B", consumer, f"-DCMAKE_PREFIX_PATH={prefix}",
                 f"-DTRAINER_SOURCE={os.path.join(a.source, 'examples', 'trainer.cc')}"]
    if a.cxx:
        configure.append(f"-DCMAKE_CXX_COMPILER={a.cxx}")
    if a.launcher:
        configure.append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={a.launcher}")
    run(configure)
    run(["cmake", "--build", consumer, "-j", "2"])
    tmp = tempfile.mkdtemp(prefix="shardyard-install-")
    try:
        run([sys.executable, os.path.join(a.source, "tests", "e2e", "make_dataset.py"),
             "--out", tmp, "--shards", "4", "--samples", "30", "--bytes", "64", "--seed", "3"])
        env = dict(os.environ, SHARDYARD_CACHE_DIR=os.path.join(tmp, "cache"))
        p = run([os.path.join(consumer, "trainer"), "--source",
                 os.path.join(tmp, "shard-{000000..000003}.tar"), "--workers", "2",
                 "--batch-size", "16", "--epochs", "2"], env=env)
        if not p.stdout.startswith("ok: 2 epochs, 240 samples"):
            raise SystemExit(f"unexpected trainer output: {p.stdout!r}")
        print(p.stdout.strip())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
