#!/usr/bin/env bash
# Recipe: revoking leaves issued by an intermediate CA, and the intermediate
# itself (docs/rotation.md#recipes-intermediates-ca-rotation-same-name-cas).
#
#   root CA ──> intermediate CA ──> controller leaves (peers)
#      └──────> the replica's own identity (tls.crt)
#
# ca.crt holds the root only: the intermediate is never a trust anchor (as
# an anchor it would be beyond the root's CRL). The sidecar learns it from
# the `intermediates` file (or from its own tls.crt chain), so the
# intermediate's CRL is verified when it is loaded.
#
# Usage: intermediate.sh WORKDIR [STEP]   (no STEP: every step, in order)
# Steps: pki, revoke-leaf, revoke-intermediate. The sidecar's --tls-dir is
# WORKDIR/tls; run it with --crl-scope chain to have the root's CRL judge
# the intermediate too. Needs mtls-sidecar ($MTLS_SIDECAR) and openssl.
# tests/repo/recipes.rs runs every step against running sidecars.
set -euo pipefail
W=$(realpath "${1:?usage: intermediate.sh WORKDIR [STEP]}")
STEP=${2:-all}
M=${MTLS_SIDECAR:-mtls-sidecar}
cd "$W"

step_pki() {
    "$M" certs ca --out root --name "Recipe Root CA"
    # The intermediate: a CA certificate signed by the root, allowed to sign
    # certificates and CRLs, no deeper CAs below it.
    mkdir -p inter
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout inter/ca.key -subj "/CN=Recipe Intermediate CA" -out inter/csr.pem 2>/dev/null
    printf '%s\n' 'basicConstraints=critical,CA:TRUE,pathlen:0' \
        'keyUsage=critical,keyCertSign,cRLSign' \
        'subjectKeyIdentifier=hash' 'authorityKeyIdentifier=keyid' > inter/ext.cnf
    openssl x509 -req -in inter/csr.pem -CA root/ca.crt -CAkey root/ca.key \
        -set_serial "0x$(openssl rand -hex 8)" -days 30 -extfile inter/ext.cnf \
        -out inter/ca.crt 2>/dev/null
    # Peers: leaves of the intermediate, each tls.crt the leaf then the
    # intermediate (the chain a peer presents).
    for peer in good leaked; do
        "$M" certs issue --ca inter --out "peers/$peer" --dns controller.env-1.svc --role client --days 7
        cat inter/ca.crt >> "peers/$peer/tls.crt"
    done
    # Our own identity, from the root; ca.crt is the root alone.
    "$M" certs issue --ca root --out replica --dns replica-0.env-1.svc --role server --days 7
    "$M" publish --into tls tls.crt=replica/tls.crt tls.key=replica/tls.key \
        ca.crt=root/ca.crt intermediates=inter/ca.crt
}

step_revoke-leaf() {
    # The intermediate signs the CRL of its own leaves.
    "$M" certs revoke --ca inter --cert peers/leaked/tls.crt --out inter.crl
    cp inter.crl ca.crl
    # Only the CRL is given: tls.crt, tls.key, ca.crt and intermediates are
    # kept. publish says the CRL is verified, signed by the intermediate.
    "$M" publish --into tls ca.crl=ca.crl
    # Judge the leaked leaf as a peer holding this CRL would: refused.
    refused peers/leaked
}

step_revoke-intermediate() {
    # The root's CRL revokes the intermediate; ca.crl holds one CRL per
    # issuing CA (the intermediate's, then the root's).
    "$M" certs revoke --ca root --cert inter/ca.crt --out root.crl
    cat inter.crl root.crl > ca.crl
    "$M" publish --into tls ca.crl=ca.crl
    # With --crl-scope chain every leaf of the intermediate is now refused
    # (with leaf, the default, only the leaked one). `check` judges a chain
    # as --crl-scope chain does.
    refused peers/good
}

# `check` on a peer's files against the sidecar's ca.crt and ca.crl: its
# "crl" line is the verdict the sidecar's judgement reaches; FAIL expected.
refused() {
    local out
    out=$("$M" check --cert "$1/tls.crt" --key "$1/tls.key" --ca tls/ca.crt --crl tls/ca.crl || true)
    grep '^.... *crl ' <<<"$out"
    grep -q '^FAIL  crl ' <<<"$out" || { echo "$1 is not refused" >&2; exit 1; }
}

for s in pki revoke-leaf revoke-intermediate; do
    if [ "$STEP" = all ] || [ "$STEP" = "$s" ]; then
        echo "== $s"
        "step_$s"
    fi
done
