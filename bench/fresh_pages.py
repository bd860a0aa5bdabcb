#!/usr/bin/python3
"""What a page of fresh memory costs on this machine: the first write of an anonymous
mapping of --mib MiB (every page faulted in, zeroed by the kernel, then written) against a
second write of the same bytes, and the same first write with the mapping populated up
front (MADV_POPULATE_WRITE) and with transparent huge pages asked for (MADV_HUGEPAGE, on a
2 MiB-aligned range). docs/performance.md, "Both collators build one batch", says why it
matters: a batch column of 64 samples of 512 KiB is 32 MiB of such pages the first time.

Each mode runs in a fresh process (a fresh address space, as a run of shardyard has),
--reps times, interleaved, with --pause seconds before each (this VM hands idle memory back
to the host, which the next first touch then pays for). Prints the median milliseconds.

Standard library only:
  /usr/bin/python3 bench/fresh_pages.py --mib 96 --reps 5 --pause 2
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

MADV_HUGEPAGE = 14
MADV_POPULATE_WRITE = 23
HUGE = 2 << 20


def child(mib, mode):
    import ctypes
    import mmap

    n = mib << 20
    m = mmap.mmap(-1, n + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    base = ctypes.addressof(ctypes.c_char.from_buffer(m))
    skip = (-base) % HUGE  # a 2 MiB-aligned start, so that huge pages can back the range
    view = memoryview(m)[skip:skip + n]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    zeros = b"\0" * n  # written, so that reading it takes no fault in the timed part
    t0 = time.perf_counter()
    if mode == "hugepage":
        libc.madvise(base + skip, n, MADV_HUGEPAGE)
    if mode == "populated":
        if libc.madvise(base + skip, n, MADV_POPULATE_WRITE) != 0:
            raise SystemExit("MADV_POPULATE_WRITE is not supported here")
    view[:] = zeros
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    view[:] = zeros
    again = time.perf_counter() - t0
    view.release()
    print(json.dumps({"first_ms": first * 1e3, "again_ms": again * 1e3}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=96)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--pause", type=float, default=2.0)
    ap.add_argument("--child", choices=("plain", "populated", "hugepage"))
    args = ap.parse_args()
    if args.child:
        return child(args.mib, args.child)
    modes = ("plain", "populated", "hugepage")
    got = {m: [] for m in modes}
    for _ in range(args.reps):
        for m in modes:
            time.sleep(args.pause)
            out = subprocess.run([sys.executable, __file__, "--mib", str(args.mib), "--child", m],
                                 capture_output=True, text=True, check=True, timeout=120).stdout
            got[m].append(json.loads(out))
    pages = (args.mib << 20) // 4096
    for m in modes:
        first = statistics.median(r["first_ms"] for r in got[m])
        again = statistics.median(r["again_ms"] for r in got[m])
        print(f"{m:9s} first write {first:7.1f} ms  again {again:6.1f} ms  "
              f"(first - again) per 4 KiB page {(first - again) * 1e3 / pages:5.2f} us")
    print(f"{args.mib} MiB, medians of {args.reps} fresh processes, {args.pause} s pause before each")


if __name__ == "__main__":
    main()
