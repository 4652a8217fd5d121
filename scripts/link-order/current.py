#!/usr/bin/env python3
"""Whether the committed link order is still current for this code.

scripts/build-release.sh links with the committed list (symbols.txt)
carried over to the binary's names, so two builds of one commit are
identical. The list decays as the code changes: a function the sidecar now
runs that the list does not name lands anywhere in the text, and the
resident code grows. This runs the same pod's life as derive.py under
callgrind on the shipped binary and counts the serving functions (the code
a sidecar keeps resident once started) that the list the build used lacks.
Above the limit it fails, saying how to refresh the list
(CONTRIBUTING.md "Link order").

A derived list is itself not reproducible (what one run executes varies
with thread interleaving), so a fresh list still misses a few functions
that another run reaches: the limit leaves room for that.

    current.py BINARY USED_LIST [LIMIT_PERCENT]   # default 2
"""

import sys
import tempfile

import order


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    binary, used = sys.argv[1:3]
    limit = float(sys.argv[3]) if len(sys.argv) == 4 else 2.0
    parts = order.read_parts(used)
    listed = {n for p in order.PARTS for n in parts[p]}
    with tempfile.TemporaryDirectory() as work:
        found = order.callgrind(binary, f"{work}/all")
    serving = set().union(*(found[r, "serve"] for r in order.ROLES))
    missing = sorted(serving - listed)
    share = 100.0 * len(missing) / max(1, len(serving))
    print(f"current.py: the list names {len(serving) - len(missing)} of the {len(serving)} "
          f"serving functions callgrind saw; {len(missing)} missing ({share:.1f}%, limit {limit}%)")
    if share > limit:
        for n in missing[:20]:
            print(f"  missing: {n}")
        sys.exit("current.py: the committed link order has fallen behind the code: refresh it "
                 "(LINK_ORDER=derive bash scripts/build-release.sh, then copy "
                 "target/link-order/derived.txt to scripts/link-order/symbols.txt)")


if __name__ == "__main__":
    main()
