#!/usr/bin/env bash
# Regenerate scripts/link-order/symbols.txt: the functions a sidecar executes
# in its life (the workload in scripts/link-order/train.py), which
# scripts/build-release.sh hands to the linker so they sit together in the
# binary. Why: the kernel maps code in 64 KiB blocks around each page a
# process touches; with the executed ~1.5 MB spread over 7 MB of text, nearly
# all of it ends up resident in every pod. Packed, only the executed part is.
#
# Two sources, because neither sees everything:
#   1. callgrind: every function executed, but on valgrind's CPU, which has no
#      AVX-512 or ADX, so the crypto and libc routines chosen by CPU dispatch
#      on real hardware are missed;
#   2. native runs under `perf record -e page-faults`: the functions whose
#      code faults in on this machine. Fault-around hides all but the first
#      page per 64 KiB block, so it is repeated, each time on a binary linked
#      with what was found so far, until nothing new faults outside.
# Needs valgrind and perf (Debian: valgrind, linux-perf). Run it after
# dependency or toolchain updates; stale names are skipped by the linker, so
# a stale list costs memory, never correctness:
#   bash scripts/link-order/generate.sh && bash scripts/build-release.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
for tool in valgrind perf; do
    command -v $tool >/dev/null || { echo "generate.sh: needs $tool" >&2; exit 1; }
done
order=scripts/link-order/symbols.txt
bin=${CARGO_TARGET_DIR:-target}/dist/mtls-sidecar
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

train() { # dir wrap
    mkdir -p "$1"
    WRAP=$2 python3 scripts/link-order/train.py "$bin" "$1" >/dev/null
}

bash scripts/build-release.sh
train "$work/cg" "valgrind --tool=callgrind --demangle=no --callgrind-out-file=$work/cg/callgrind.%p"
python3 - "$bin" "$work"/cg/callgrind.* >"$work/executed" <<'PY'
import re, subprocess, sys
binary, profiles = sys.argv[1], sys.argv[2:]
out = subprocess.run(["nm", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
defined = {p[2] for p in map(str.split, out.splitlines()) if len(p) == 3 and p[1] in "tTwW"}
executed = {m.group(1) for path in profiles for line in open(path)
            if (m := re.match(r"^c?fn=\(\d+\) (.+)$", line)) and m.group(1) in defined}
if len(executed) < 500:
    sys.exit(f"generate.sh: only {len(executed)} functions executed; did the training run work?")
print("\n".join(sorted(executed)))
PY
echo "generate.sh: callgrind: $(wc -l <"$work/executed") functions executed" >&2
sort -u "$work/executed" >"$order"

for pass in $(seq 1 "${PASSES:-12}"); do
    bash scripts/build-release.sh 2>/dev/null
    rm -rf "$work/pf"
    train "$work/pf" "sh -c 'exec perf record -q -e page-faults -c 1 -d -o $work/pf/perf.\$\$ \"\$0\" \"\$@\"'"
    for data in "$work"/pf/perf.*; do
        # fields: address, its symbol, instruction pointer, its symbol; an
        # instruction fetch is a fault whose address is the instruction
        perf script -i "$data" -F addr,ip,sym --no-demangle 2>/dev/null |
            awk '$1 == $3 && $4 != "[unknown]" { print $4 }'
    done | sort -u | comm -23 - "$order" >"$work/new"
    echo "generate.sh: native pass $pass: $(wc -l <"$work/new") functions faulted outside the list" >&2
    [ -s "$work/new" ] || break
    sort -u "$order" "$work/new" -o "$order"
done
echo "generate.sh: $order: $(wc -l <"$order") functions; now run scripts/build-release.sh" >&2
