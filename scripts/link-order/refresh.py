#!/usr/bin/env python3
"""Carry the symbol-ordering list over to a binary whose symbol names moved.

Why: symbols.txt names functions by their mangled names, and Rust's mangled
names carry hashes that change whenever a dependency is added or updated
(the crate's own functions included: Cargo mixes the dependencies into each
crate's metadata). ThinLTO's promoted locals also carry a `.llvm.N` suffix
that moves with the code around them. A stale name is skipped by the linker:
nothing breaks, but the functions it named land anywhere in the text again
and the resident code grows back by megabytes.

This maps each name the binary no longer has to the binary's functions with
the same demangled name, hashes and aws-lc's version prefix left out
(order.carry); a name that matches several functions (a generic's
instances: legacy mangling does not spell type arguments; `.llvm.N`
copies) goes at the end of its part when there are up to order.AMBIGUOUS
of them, else is dropped. Regenerating is still what finds functions that
are new: scripts/build-release.sh does that in every build (derive.py) and
uses this only when it cannot (no valgrind, or LINK_ORDER=committed).

    refresh.py BINARY IN OUT    # prints "kept K, remapped R, gone G"
"""

import sys

import order


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    binary, src, dst = sys.argv[1:]
    parts, (kept, remapped, gone) = order.carry(order.read_parts(src), binary)
    order.write_parts(dst, parts, f"{src} carried over to {binary} by scripts/link-order/refresh.py")
    print(f"kept {kept}, remapped {remapped}, gone {gone}")


if __name__ == "__main__":
    main()
