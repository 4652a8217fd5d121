#!/bin/sh
# Inbound capture for a server sidecar, with iptables and ip6tables: the same
# rules as ../nftables/inbound.nft.
#
# Peers keep dialing the application's native port (2100) on this host; the
# kernel diverts those connections to the server sidecar's TLS port, which
# authenticates the peer and forwards to the application on 127.0.0.1:2100.
# A plaintext peer meets the TLS listener and is refused (not_tls); it never
# reaches the application.
#
# Run as root (or with CAP_NET_ADMIN) in the application's network namespace:
#     APP_PORTS=2100 SIDECAR_PORT=6877 sh inbound.sh
#     sh inbound.sh delete         # removes everything it added
# Running it again is safe (its chain is flushed and refilled, the jump to it
# added once). See docs/transparent.md.
set -eu

# The application's ports that peers dial (comma-separated, at most 15).
APP_PORTS=${APP_PORTS-2100}
# The server route's listen port. REDIRECT rewrites the destination to the
# primary address of the interface the connection came in on (and this
# port), not the address the peer dialed: so listen on 0.0.0.0 / [::], or
# on that primary address.
SIDECAR_PORT=${SIDECAR_PORT-6877}

CHAIN=MTLS_SIDECAR_IN

# $1: iptables or ip6tables.
install() {
    # nat/PREROUTING sees each new connection arriving from another host; the
    # sidecar's own connection to 127.0.0.1:2100 is local (nat/OUTPUT) and
    # never passes here.
    $1 -t nat -N "$CHAIN" 2>/dev/null || $1 -t nat -F "$CHAIN"
    $1 -t nat -A "$CHAIN" -i lo -j RETURN
    $1 -t nat -A "$CHAIN" -p tcp -m multiport --dports "$APP_PORTS" \
        -j REDIRECT --to-ports "$SIDECAR_PORT"
    $1 -t nat -C PREROUTING -p tcp -j "$CHAIN" 2>/dev/null ||
        $1 -t nat -A PREROUTING -p tcp -j "$CHAIN"
    # The canary (IPv4): the sidecar connects from this host to
    # 127.255.255.254 on the application's port to learn that these rules
    # are loaded (this REJECT answers EHOSTUNREACH); see inbound.nft.
    if [ "$1" = iptables ]; then
        $1 -t filter -N "$CHAIN" 2>/dev/null || $1 -t filter -F "$CHAIN"
        $1 -t filter -A "$CHAIN" -d 127.255.255.254 -p tcp -m multiport \
            --dports "$APP_PORTS" -j REJECT --reject-with icmp-admin-prohibited
        $1 -t filter -C OUTPUT -p tcp -j "$CHAIN" 2>/dev/null ||
            $1 -t filter -A OUTPUT -p tcp -j "$CHAIN"
    fi
}

# $1: iptables or ip6tables.
remove() {
    while $1 -t nat -D PREROUTING -p tcp -j "$CHAIN" 2>/dev/null; do :; done
    $1 -t nat -F "$CHAIN" 2>/dev/null || true
    $1 -t nat -X "$CHAIN" 2>/dev/null || true
    while $1 -t filter -D OUTPUT -p tcp -j "$CHAIN" 2>/dev/null; do :; done
    $1 -t filter -F "$CHAIN" 2>/dev/null || true
    $1 -t filter -X "$CHAIN" 2>/dev/null || true
}

case "${1-}" in
delete)
    remove iptables
    remove ip6tables
    ;;
"")
    install iptables
    install ip6tables
    ;;
*)
    echo "usage: inbound.sh [delete]" >&2
    exit 2
    ;;
esac
