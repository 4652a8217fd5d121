#!/usr/bin/env bash
# The fuzz targets in fuzz/ (CONTRIBUTING.md "Fuzzing", docs/fuzzing.md), on the stable toolchain
# without a sanitizer (-s none: a sanitizer needs nightly).
#
#   scripts/fuzz.sh build            build every target
#   scripts/fuzz.sh replay [TARGET]  run each committed corpus input once
#   scripts/fuzz.sh run SECS [TARGET...]
#                                    fuzz each target for SECS seconds, one
#                                    after the other, growing its corpus
#
# A finding stops the run and leaves its input in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

# Inputs up to 16 KiB: a credential revision with a CRL is about 3 KiB.
MAX_LEN=16384

targets() {
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; else cargo fuzz list; fi
}

case "${1:-}" in
build)
    cargo fuzz build -s none
    ;;
replay)
    shift
    for t in $(targets "$@"); do
        cargo fuzz run -s none "$t" "corpus/$t" -- -runs=0 -max_len=$MAX_LEN
    done
    ;;
run)
    secs=${2:?seconds}
    shift 2
    for t in $(targets "$@"); do
        mkdir -p "corpus/$t"
        cargo fuzz run -s none "$t" "corpus/$t" -- \
            -max_total_time="$secs" -max_len=$MAX_LEN -print_final_stats=1
    done
    ;;
*)
    sed -n '2,12p' "$0" >&2
    exit 2
    ;;
esac
