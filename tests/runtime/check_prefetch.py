#!/usr/bin/env python3
"""Checks that each probe of tests/runtime/prefetch_probe.cc reaches a prefetch instruction
in the object file the build made of it: in the probe's own code or in a function of that
object it calls (at -O0 prefetch_lines stays a function of its own).

  check_prefetch.py OBJDUMP OBJECT
"""
import re
import subprocess
import sys

PROBES = ["sy_prefetch_probe_header", "sy_prefetch_probe_any"]


def functions(objdump, obj):
    """name -> [whether it has a prefetch instruction, the names it calls], from `objdump -dr`."""
    text = subprocess.run([objdump, "-dr", obj], check=True, capture_output=True, text=True,
                          timeout=60).stdout
    found = {}
    name = None
    for line in text.splitlines():
        m = re.match(r"^[0-9a-f]+ <([^>]+)>:$", line)
        if m:
            name = m.group(1)
            found[name] = [False, set()]
            continue
        if name is None:
            continue
        if re.search(r"\tprefetch", line):
            found[name][0] = True
        # A call (or a tail jump) in an object file names its target by relocation; a
        # resolved one by name.
        m = re.search(r"R_X86_64_(?:PLT32|PC32)\s+([^\s+-]+)", line)
        if m:
            found[name][1].add(m.group(1))
        m = re.search(r"\t(?:callq?|jmpq?)\s+(?:0x)?[0-9a-f]+ <([^>+]+)>", line)
        if m:
            found[name][1].add(m.group(1))
    return found


def reaches_prefetch(found, start):
    seen, todo = set(), [start]
    while todo:
        f = todo.pop()
        if f in seen or f not in found:
            continue
        seen.add(f)
        if found[f][0]:
            return True
        todo.extend(found[f][1])
    return False


def main():
    objdump, obj = sys.argv[1], sys.argv[2]
    found = functions(objdump, obj)
    failed = False
    for probe in PROBES:
        entry = [n for n in found if n.startswith("_Z") and re.search(r"\d" + probe + r"P", n)]
        if len(entry) != 1:
            print(f"{probe}: {len(entry)} functions of that name in {obj}")
            failed = True
            continue
        ok = reaches_prefetch(found, entry[0])
        print(f"{probe}: {'reaches' if ok else 'does not reach'} a prefetch instruction")
        failed = failed or not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
