#!/usr/bin/env bash
# The test command: the whole suite (unit, end-to-end, interop).
#
# Some tests run external tools (OpenSSL, Python and its grpcio module, HAProxy, nginx, iproute2,
# nftables, iptables, systemd-socket-activate, systemd-analyze, promtool) or need
# root (network namespaces, a packet tap on lo). Before building anything,
# this checks that every one is
# here and stops at once, printing the apt-get line that installs what is
# missing, unless MTLS_SIDECAR_SKIP names it (comma-separated, e.g.
# MTLS_SIDECAR_SKIP=haproxy,root): then the tests that need it pass as
# skipped, each saying so. A test whose tool is missing and not skipped
# fails. The names and packages are tests/common/tools.rs's KNOWN list.
set -euo pipefail
cd "$(dirname "$0")/.."

# name:package, in the order tests/common/tools.rs lists them.
known="openssl:openssl python3:python3 haproxy:haproxy nginx:nginx ip:iproute2 nft:nftables
iptables:iptables ip6tables:iptables systemd-socket-activate:systemd
systemd-analyze:systemd promtool:prometheus root: grpcio: kubernetes-validate:"

asked=${MTLS_SIDECAR_SKIP:-}
skip=",$asked,"
for name in ${asked//,/ }; do
    if ! grep -qE "(^|[[:space:]])$name:" <<<"$known"; then
        echo "MTLS_SIDECAR_SKIP names '$name', which no test needs; known:" \
            $(sed -E 's/:[^[:space:]]*//g' <<<"$known") >&2
        exit 2
    fi
done

found() {
    if [ "$1" = root ]; then
        [ "$(id -u)" = 0 ]
    elif [ "$1" = kubernetes-validate ]; then
        # A Python module: scripts/validate-deploy.sh installs it (tests/inject.rs).
        for py in target/deploy-tools/venv/bin/python python3; do
            "$py" -c 'import kubernetes_validate, yaml' >/dev/null 2>&1 && return 0
        done
        return 1
    elif [ "$1" = grpcio ]; then
        # A Python module: tests/spiffe/agent.py's gRPC server.
        python3 -c 'import grpc' >/dev/null 2>&1
    else
        PATH="$PATH:/usr/sbin:/sbin:/usr/local/sbin" command -v "$1" >/dev/null 2>&1
    fi
}

missing=() packages=() skipped=()
for entry in $known; do
    name=${entry%%:*} package=${entry#*:}
    if [[ $skip == *",$name,"* ]]; then
        skipped+=("$name")
    elif ! found "$name"; then
        missing+=("$name")
        if [ -n "$package" ] && [[ " ${packages[*]} " != *" $package "* ]]; then
            packages+=("$package")
        fi
    fi
done

if [ ${#missing[@]} -gt 0 ]; then
    {
        echo "scripts/test.sh: the tests need ${missing[*]}, missing here."
        if [ ${#packages[@]} -gt 0 ]; then
            sudo=""
            [ "$(id -u)" = 0 ] || sudo="sudo "
            echo "Install:"
            echo "    ${sudo}apt-get update && ${sudo}apt-get install -y --no-install-recommends ${packages[*]}"
        fi
        if [[ " ${missing[*]} " == *" grpcio "* ]]; then
            echo "Install the Workload API tests' gRPC module:"
            echo "    python3 -m pip install grpcio"
        fi
        if [[ " ${missing[*]} " == *" root "* ]]; then
            echo "Run as root: the transparent-mode tests build network namespaces."
        fi
        echo "Or skip the tests that need them (they say so):"
        echo "    MTLS_SIDECAR_SKIP=$(IFS=,; echo "${missing[*]}") bash scripts/test.sh"
    } >&2
    exit 2
fi

if [ ${#skipped[@]} -gt 0 ]; then
    echo "scripts/test.sh: SKIPPING the tests that need: ${skipped[*]} (MTLS_SIDECAR_SKIP)" >&2
fi
status=0
cargo test "$@" || status=$?
if [ ${#skipped[@]} -gt 0 ]; then
    echo "scripts/test.sh: tests needing ${skipped[*]} were SKIPPED (MTLS_SIDECAR_SKIP)" >&2
fi
exit $status
