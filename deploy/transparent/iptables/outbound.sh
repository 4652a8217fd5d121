#!/bin/sh
# Outbound capture for a transparent client sidecar, with iptables and
# ip6tables: the same rules as ../nftables/outbound.nft, for hosts and images
# that have iptables (nft or legacy backend) rather than nft.
#
# The application keeps dialing replica-N:2100; the kernel diverts each such
# connection to the sidecar's listener, which reads the original destination
# and dials that host's server sidecar over mTLS.
#
# Run as root (or with CAP_NET_ADMIN) in the application's network namespace,
# with the values below set in the environment:
#     SIDECAR_PORT=15001 APP_NETS_V4=10.0.0.0/8 sh outbound.sh
#     sh outbound.sh delete        # removes everything it added
# Running it again is safe: its chain is flushed and refilled, and the jump
# to it is added only once. It touches nothing but its own chain and that
# one jump. See docs/transparent.md.
set -eu

# The sidecar's --mark: its own connections carry it and are never diverted
# (without this the sidecar's connection to a destination would be diverted
# back to itself; it detects and refuses such a loop, but no traffic flows).
# Empty: no mark rule (then set SIDECAR_UID).
SIDECAR_MARK=${SIDECAR_MARK-0x6d74}
# Alternative loop guard when the sidecar runs as its own UID and cannot have
# CAP_NET_ADMIN for --mark: connections of this UID are never diverted.
SIDECAR_UID=${SIDECAR_UID-}
# The transparent route's listen port.
SIDECAR_PORT=${SIDECAR_PORT-15001}
# The destination ports to capture (comma-separated, at most 15), and the
# networks they are captured for (comma-separated; empty: that family is
# left alone). Destinations outside these are not touched at all.
APP_PORTS=${APP_PORTS-2100}
APP_NETS_V4=${APP_NETS_V4-10.0.0.0/8}
APP_NETS_V6=${APP_NETS_V6-fd00::/8}

CHAIN=MTLS_SIDECAR_OUT

# $1: iptables or ip6tables; $2: the networks to capture; $3: loopback.
install() {
    ipt=$1 nets=$2 loopback=$3
    # nat/OUTPUT sees each new connection a local process opens.
    $ipt -t nat -N "$CHAIN" 2>/dev/null || $ipt -t nat -F "$CHAIN"
    # Loop guard: the sidecar's own connections.
    if [ -n "$SIDECAR_MARK" ]; then
        $ipt -t nat -A "$CHAIN" -m mark --mark "$SIDECAR_MARK" -j RETURN
    fi
    if [ -n "$SIDECAR_UID" ]; then
        $ipt -t nat -A "$CHAIN" -m owner --uid-owner "$SIDECAR_UID" -j RETURN
    fi
    # Local traffic is never captured.
    $ipt -t nat -A "$CHAIN" -d "$loopback" -j RETURN
    $ipt -t nat -A "$CHAIN" -p tcp -d "$nets" -m multiport --dports "$APP_PORTS" \
        -j REDIRECT --to-ports "$SIDECAR_PORT"
    $ipt -t nat -C OUTPUT -p tcp -j "$CHAIN" 2>/dev/null ||
        $ipt -t nat -A OUTPUT -p tcp -j "$CHAIN"
}

# $1: iptables or ip6tables.
remove() {
    while $1 -t nat -D OUTPUT -p tcp -j "$CHAIN" 2>/dev/null; do :; done
    $1 -t nat -F "$CHAIN" 2>/dev/null || true
    $1 -t nat -X "$CHAIN" 2>/dev/null || true
}

if [ -z "$SIDECAR_MARK$SIDECAR_UID" ] && [ "${1-}" != delete ]; then
    echo "outbound.sh: set SIDECAR_MARK or SIDECAR_UID, or the sidecar's own" \
        "connections are diverted back to it" >&2
    exit 2
fi
case "${1-}" in
delete)
    remove iptables
    remove ip6tables
    ;;
"")
    if [ -n "$APP_NETS_V4" ]; then install iptables "$APP_NETS_V4" 127.0.0.0/8; fi
    if [ -n "$APP_NETS_V6" ]; then install ip6tables "$APP_NETS_V6" ::1/128; fi
    ;;
*)
    echo "usage: outbound.sh [delete]" >&2
    exit 2
    ;;
esac
