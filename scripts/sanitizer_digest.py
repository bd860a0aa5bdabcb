#!/usr/bin/env python3
"""Prints ThreadSanitizer reports short enough to read at the end of a failed test run.

scripts/test.sh runs the ThreadSanitizer part with log_path=FOLDER/report, so every process
that reports writes FOLDER/report.PID instead of its stderr (where a test's harness would keep
only the last lines of it, and a CI log only the last lines of the run). After a failed run
this prints, for each report of a race (or a lock inversion, ...): the report's header
lines whole and, of each stack, the first frames demangled with file:line, so the two
racing accesses and the threads involved fit on one screen; then the summary line of each
other report (a deadly signal, as in the tests that crash a stage on purpose).

Usage: scripts/sanitizer_digest.py FOLDER [--frames N] [--max-lines N]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

FRAME = re.compile(r"^\s+#(\d+) (\S+) (.*)$")


def demangle(names):
    """c++filt over the mangled names (TSan runs with demangle=0); the names as they are
    without it."""
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         timeout=30).stdout.splitlines()
    return dict(zip(names, out)) if len(out) == len(names) else {n: n for n in names}


def short(name, limit):
    return name if len(name) <= limit else name[:limit - 3] + "..."


def digest(text, frames, names):
    """The lines of one report: headers whole, the first `frames` frames of each stack."""
    lines = []
    shown = 0
    for raw in text.splitlines():
        line = re.sub(r" \(BuildId: [0-9a-f]+\)", "", raw)
        m = FRAME.match(line)
        if m is None:
            shown = 0
            if line.strip() and not line.startswith("=="):
                lines.append(short(line, 200))
            continue
        shown += 1
        if shown > frames:
            continue
        where = m.group(3)
        # "/path/to/file.cc:12:3 (module+0x1)": keep the file's name and the module's.
        where = re.sub(r"(\S*/)([^/\s]+:\d+)(:\d+)?", r"\2", where)
        where = re.sub(r"\((?:\S*/)?([^/\s]+?)\+0x[0-9a-f]+\)", r"(\1)", where)
        lines.append(f"    #{m.group(1)} {short(names.get(m.group(2), m.group(2)), 110)} "
                     f"{where}")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder")
    ap.add_argument("--frames", type=int, default=5, help="frames shown of each stack")
    ap.add_argument("--max-lines", type=int, default=60,
                    help="lines printed at most (a CI log keeps the last 80 or so)")
    args = ap.parse_args()
    if not os.path.isdir(args.folder):
        return 0
    files = sorted(os.path.join(args.folder, f) for f in os.listdir(args.folder))
    if not files:
        print(f"== no sanitizer report in {args.folder}")
        return 0
    reports = []
    for path in files:
        with open(path, errors="replace") as f:
            reports.append((path, f.read()))
    names = demangle(sorted({m.group(2) for _, text in reports
                             for m in map(FRAME.match, text.splitlines()) if m}))
    # Race reports first, in full; the others (a deadly signal, as in the tests that crash a
    # stage on purpose) by their summary line.
    races = [(p, t) for p, t in reports if "WARNING: ThreadSanitizer" in t]
    others = [(p, t) for p, t in reports if "WARNING: ThreadSanitizer" not in t]
    out = [f"== {len(files)} sanitizer report file(s) in {args.folder}:"]
    for path, text in races:
        out.append(f"-- {os.path.basename(path)}")
        out.extend(digest(text, args.frames, names))
    for path, text in others:
        summary = [line for line in text.splitlines() if line.startswith("SUMMARY:")]
        out.append(f"-- {os.path.basename(path)}: " +
                   short(summary[-1] if summary else "no summary line", 200))
    if len(out) > args.max_lines:
        out = out[:args.max_lines] + [f"... ({len(out) - args.max_lines} more lines in the files)"]
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
