#!/usr/bin/env python3
"""Derive the symbol-ordering list in the release build itself.

scripts/build-release.sh links the binary once with the committed list
(symbols.txt), then runs this on it: train.py's workload (a pod's life)
under callgrind gives every function each role executes, per phase, on this
very binary, so its names are this build's, whatever changed in the code or
its dependencies since the committed list was made; a second run of only
the connections tells the code that serves them from the rest (order.py).
Then the build links again with the result.

callgrind counts instructions on valgrind's CPU, so what it finds does not
depend on the machine's load or timing. What it cannot find is taken from
the committed list, carried over to this binary's names (order.carry), in
the part it was in: functions only native runs reach (generate.py's
page-fault passes): routines CPU dispatch picks for a CPU valgrind does
not emulate (aws-lc's AES-GCM and curve25519 AVX paths, glibc's string
functions; C names, which do not move) and paths reached only under
native timing.

    derive.py BINARY LIST OUT    # prints what it found, one line
"""

import sys
import tempfile
import time

import order


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    binary, src, dst = sys.argv[1:]
    began = time.monotonic()
    with tempfile.TemporaryDirectory() as work:
        found = order.callgrind(binary, f"{work}/all")
        conn = order.callgrind(binary, f"{work}/connections", connections=True)
    parts = order.split(found, conn)
    seen = set().union(*found.values(), *conn.values())
    committed, (kept, remapped, gone) = order.carry(order.read_parts(src), binary)
    moved = order.keep_serving(parts, committed)
    extra = 0
    for part in order.PARTS:
        more = [n for n in committed[part] if n not in seen]
        extra += len(more)
        parts[part] += more
    total = order.write_parts(dst, parts, f"Derived by scripts/link-order/derive.py from {binary} and {src}.")
    print(f"{total} functions: callgrind {len(seen)}, from the committed list {extra} more "
          f"(of its names: kept {kept}, remapped {remapped}, gone {gone}), kept serving {moved}; "
          f"{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
