#!/usr/bin/env bash
# The test command: the whole suite (unit, end-to-end, interop).
#
# Some tests run external tools (scripts/tools.list: OpenSSL, HAProxy,
# nginx, iproute2, nftables, iptables, systemd's tools, promtool, Python
# modules) or need root (network namespaces, a packet tap on lo). Before
# building anything, this checks that every one is here. As root on a
# Debian machine it installs what is missing (scripts/tools.sh install), so
# this script is the only command a newcomer types; otherwise it stops at
# once, printing the line that installs what is missing, unless
# MTLS_SIDECAR_SKIP names it (comma-separated, e.g.
# MTLS_SIDECAR_SKIP=haproxy,root): then the tests that need it pass as
# skipped, each saying so. A test whose tool is missing and not skipped
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."

known=$(grep -vE '^[[:space:]]*(#|$)' scripts/tools.list | awk '{ print $1 }')
asked=${MTLS_SIDECAR_SKIP:-}
skip=",$asked,"
for name in ${asked//,/ }; do
    if ! grep -qxF "$name" <<<"$known"; then
        echo "MTLS_SIDECAR_SKIP names '$name', which no test needs; known:" $known >&2
        exit 2
    fi
done

wanted=()
for name in $known; do
    [[ $skip == *",$name,"* ]] || wanted+=("$name")
done
mapfile -t missing < <(bash scripts/tools.sh missing "${wanted[@]}")
if [ ${#missing[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "scripts/test.sh: installing ${missing[*]} (scripts/tools.sh install)" >&2
    bash scripts/tools.sh install "${missing[@]}"
    mapfile -t missing < <(bash scripts/tools.sh missing "${wanted[@]}")
fi

if [ ${#missing[@]} -gt 0 ]; then
    {
        echo "scripts/test.sh: the tests need ${missing[*]}, missing here."
        sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo "
        echo "Install them (root, Debian):"
        echo "    ${sudo}bash scripts/tools.sh install ${missing[*]}"
        if [[ " ${missing[*]} " == *" root "* ]]; then
            echo "Run as root: the transparent-mode tests build network namespaces."
        fi
        echo "Or skip the tests that need them (they say so):"
        echo "    MTLS_SIDECAR_SKIP=$(IFS=,; echo "${missing[*]}") bash scripts/test.sh"
    } >&2
    exit 2
fi

skipped=()
for name in ${asked//,/ }; do skipped+=("$name"); done
if [ ${#skipped[@]} -gt 0 ]; then
    echo "scripts/test.sh: SKIPPING the tests that need: ${skipped[*]} (MTLS_SIDECAR_SKIP)" >&2
fi
status=0
cargo test "$@" || status=$?
if [ ${#skipped[@]} -gt 0 ]; then
    echo "scripts/test.sh: tests needing ${skipped[*]} were SKIPPED (MTLS_SIDECAR_SKIP)" >&2
fi
exit $status
