#!/usr/bin/env python3
"""Carry the symbol-ordering list over to a binary whose symbol names moved.

Why: symbols.txt names functions by their mangled names, and Rust's mangled
names end in a hash that changes whenever a dependency is added or updated
(the crate's own functions included: Cargo mixes the dependencies into each
crate's metadata). ThinLTO's promoted locals also carry a `.llvm.N` suffix
that moves with the code around them. A stale name is skipped by the linker:
nothing breaks, but the functions it named land anywhere in the text again
and the resident code grows back by megabytes (570 of 2,687 names had gone
stale after one dependency was added, +1.4 MB for the pair).

This maps each name the binary no longer has to the binary's function with
the same name once the hash and the `.llvm.N` suffix are dropped, keeping
the list's parts and order. A generic function's instances all share that
name (legacy mangling does not spell the type arguments): when a name has
up to AMBIGUOUS instances they all go at the end of its part, so the
functions known to run stay packed; beyond that the name is dropped. scripts/build-release.sh runs it on the binary it just
linked and links again with the result when names had moved. Regenerating
the list (generate.py) is still what finds functions that are new.

    refresh.py BINARY IN OUT    # prints "kept K, remapped R, gone G"
"""

import re
import subprocess
import sys

HASH = re.compile(r"17h[0-9a-f]{16}E")
LLVM = re.compile(r"\.llvm\.\d+$")


def key(name):
    return LLVM.sub("", HASH.sub("", name))


def functions(binary):
    out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return [p[2] for p in map(str.split, out.splitlines()) if len(p) == 3 and p[1] in "tTwW"]


AMBIGUOUS = 3


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    binary, src, dst = sys.argv[1:]
    names = functions(binary)
    present = set(names)
    by_key = {}
    for n in names:
        by_key.setdefault(key(n), []).append(n)
    kept = remapped = gone = 0
    listed = set()
    out, tail = [], []

    def add(names, to):
        fresh = [n for n in names if n not in listed]
        listed.update(fresh)
        to.extend(fresh)

    for line in open(src):
        name = line.rstrip("\n")
        if not name or name.startswith("#"):
            add(tail, out)  # the previous part's ambiguous instances
            tail = []
            out.append(name)
        elif name in present:
            kept += 1
            add([name], out)
        elif 1 <= len(found := by_key.get(key(name), [])) <= AMBIGUOUS:
            remapped += 1
            add(found, out if len(found) == 1 else tail)
        else:
            gone += 1
    add(tail, out)
    with open(dst, "w") as f:
        f.writelines(f"{line}\n" for line in out)
    print(f"kept {kept}, remapped {remapped}, gone {gone}")


if __name__ == "__main__":
    main()
