#!/usr/bin/env bash
# The fuzz targets in fuzz/ (docs/fuzzing.md, CONTRIBUTING.md "Fuzzing"), on the stable toolchain
# without a sanitizer (-s none: a sanitizer needs nightly).
#
#   scripts/fuzz.sh build            build every target
#   scripts/fuzz.sh replay [TARGET]  run each seed and regression input once,
#                                    and the grown corpus when there is one
#   scripts/fuzz.sh run SECS [TARGET...]
#                                    fuzz each target for SECS seconds, one
#                                    after the other, growing its corpus
#   scripts/fuzz.sh merge [TARGET]   minimise the grown corpus in place
#
# The repository holds only curated inputs: fuzz/seeds/TARGET/seed-* (written
# by fuzz/seeds.py) and every input that once found a bug
# (fuzz/seeds/TARGET/regression-*). The corpus a run grows lives outside the
# clone, in $MTLS_FUZZ_CORPUS/TARGET (default ~/.cache/mtls-sidecar/fuzz),
# so machine-named inputs never reach git. A finding stops the run and leaves
# its input in fuzz/artifacts/TARGET/: copy it to
# fuzz/seeds/TARGET/regression-<what> with the fix.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

# Inputs up to 16 KiB: a credential revision with a CRL is about 3 KiB.
MAX_LEN=16384
CACHE=${MTLS_FUZZ_CORPUS:-${XDG_CACHE_HOME:-$HOME/.cache}/mtls-sidecar/fuzz}

targets() {
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cargo fuzz list; fi
}

# The corpus directories of a target: the grown one first (libFuzzer writes
# new inputs into the first directory), then the committed seeds.
dirs() {
    mkdir -p "$CACHE/$1"
    printf '%s\n' "$CACHE/$1" "seeds/$1"
}

case "${1:-}" in
build)
    cargo fuzz build -s none
    ;;
replay)
    shift
    for t in $(targets "$@"); do
        # shellcheck disable=SC2046
        cargo fuzz run -s none "$t" $(dirs "$t") -- -runs=0 -max_len=$MAX_LEN
    done
    ;;
run)
    secs=${2:?seconds}
    shift 2
    for t in $(targets "$@"); do
        # shellcheck disable=SC2046
        cargo fuzz run -s none "$t" $(dirs "$t") -- \
            -max_total_time="$secs" -max_len=$MAX_LEN -print_final_stats=1
    done
    ;;
merge)
    shift
    for t in $(targets "$@"); do
        mkdir -p "$CACHE/$t.min"
        cargo fuzz run -s none "$t" "$CACHE/$t.min" "$CACHE/$t" "seeds/$t" -- \
            -merge=1 -max_len=$MAX_LEN
        rm -rf "$CACHE/$t" && mv "$CACHE/$t.min" "$CACHE/$t"
    done
    ;;
*)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
