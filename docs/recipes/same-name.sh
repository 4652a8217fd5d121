#!/usr/bin/env bash
# Recipe: two CAs with one name, one CRL each
# (docs/rotation.md#recipes-intermediates-ca-rotation-same-name-cas).
#
# A CA re-keyed under the same subject (what a cert-manager CA Certificate
# with rotationPolicy: Always does, or a second `certs ca --name` with the
# same name) leaves two CAs that look alike. A CRL is matched to its CA by
# name AND key: each CA's CRL judges only the certificates that CA's key
# signed, so the old CA's CRL never refuses the new CA's peers, and both
# CRLs go in ca.crl side by side.
#
# Usage: same-name.sh WORKDIR [STEP]   (no STEP: every step, in order)
# Steps: pki, revoke-old, revoke-new. The sidecar's --tls-dir is
# WORKDIR/tls. Needs mtls-sidecar ($MTLS_SIDECAR). tests/repo/recipes.rs runs
# every step against a running sidecar.
set -euo pipefail
W=$(realpath "${1:?usage: same-name.sh WORKDIR [STEP]}")
STEP=${2:-all}
M=${MTLS_SIDECAR:-mtls-sidecar}
cd "$W"

step_pki() {
    # Two CAs named "CN=Recipe CA", different keys; ca.crt trusts both.
    "$M" certs ca --out old --name "Recipe CA"
    "$M" certs ca --out new --name "Recipe CA"
    for ca in old new; do
        for p in good leaked; do
            "$M" certs issue --ca "$ca" --out "peers/$ca-$p" --dns controller.env-1.svc \
                --role client --days 7
        done
    done
    "$M" certs issue --ca new --out replica --dns replica-0.env-1.svc --role server --days 7
    cat old/ca.crt new/ca.crt > both.crt
    "$M" publish --into tls tls.crt=replica/tls.crt tls.key=replica/tls.key ca.crt=both.crt
}

step_revoke-old() {
    # The old key's CRL: refuses old-leaked only, whatever serials the new
    # CA's certificates carry.
    "$M" certs revoke --ca old --cert peers/old-leaked/tls.crt --out old.crl
    "$M" publish --into tls ca.crl=old.crl
}

step_revoke-new() {
    # Both CRLs, one per key, in one ca.crl.
    "$M" certs revoke --ca new --cert peers/new-leaked/tls.crt --out new.crl
    cat old.crl new.crl > ca.crl
    "$M" publish --into tls ca.crl=ca.crl
}

for s in pki revoke-old revoke-new; do
    if [ "$STEP" = all ] || [ "$STEP" = "$s" ]; then
        echo "== $s"
        "step_$s"
    fi
done
