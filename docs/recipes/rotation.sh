#!/usr/bin/env bash
# Recipe: rotating the CA while a CRL is in force
# (docs/rotation.md#recipes-intermediates-ca-rotation-same-name-cas).
#
# ca.crt goes A -> A+B -> B. A's CRL is published once and never given
# again: every `publish` keeps the ca.crl in force. While the sidecar's
# --trust-grace keeps A trusted after the last step, A's CRL stays
# enforced (the grace never re-admits a revoked peer); once A retires, its
# CRL is ignored (one WARN; /status shows it "ignored") and never rejects a
# revision, so dropping it afterwards un-revokes nothing.
#
# Usage: rotation.sh WORKDIR [STEP]   (no STEP: every step, in order)
# Steps: start, overlap, reissue, drop-a, cleanup. The sidecar's --tls-dir
# is WORKDIR/tls (run it with e.g. --trust-grace 10m). Needs mtls-sidecar
# ($MTLS_SIDECAR). tests/repo/recipes.rs runs every step against a sidecar.
set -euo pipefail
W=$(realpath "${1:?usage: rotation.sh WORKDIR [STEP]}")
STEP=${2:-all}
M=${MTLS_SIDECAR:-mtls-sidecar}
cd "$W"

peer() { # CA NAME: a controller identity from CA
    "$M" certs issue --ca "$1" --out "peers/$2" --dns controller.env-1.svc --role client --days 7
}

step_start() {
    # CA A, our identity from A, and a CRL of A revoking one leaked peer.
    "$M" certs ca --out a --name "Recipe CA A"
    "$M" certs issue --ca a --out replica-a --dns replica-0.env-1.svc --role server --days 7
    peer a a-good
    peer a a-leaked
    "$M" certs revoke --ca a --cert peers/a-leaked/tls.crt --out a.crl
    "$M" publish --into tls tls.crt=replica-a/tls.crt tls.key=replica-a/tls.key \
        ca.crt=a/ca.crt ca.crl=a.crl
}

step_overlap() {
    # 1. Overlap: CA B next to A. Only ca.crt is given; ca.crl is kept.
    "$M" certs ca --out b --name "Recipe CA B"
    peer b b-good
    cat a/ca.crt b/ca.crt > a+b.crt
    "$M" publish --into tls ca.crt=a+b.crt
}

step_reissue() {
    # 2. Re-issue our identity from B (every sidecar does the same).
    "$M" certs issue --ca b --out replica-b --dns replica-0.env-1.svc --role server --days 7
    "$M" publish --into tls tls.crt=replica-b/tls.crt tls.key=replica-b/tls.key
}

step_drop-a() {
    # 3. Drop A from ca.crt. A's CRL is still in the revision: publish says
    # it is ignored once A is no longer trusted; the sidecar keeps enforcing
    # it for as long as --trust-grace keeps A trusted.
    "$M" publish --into tls ca.crt=b/ca.crt
}

step_cleanup() {
    # 4. Once A has retired on every sidecar, its CRL can go: it is
    # ignored, so dropping it un-revokes nothing (no warning here, no
    # mtls_sidecar_crl_removals_total on the sidecar).
    "$M" publish --into tls --drop ca.crl
}

for s in start overlap reissue drop-a cleanup; do
    if [ "$STEP" = all ] || [ "$STEP" = "$s" ]; then
        echo "== $s"
        "step_$s"
    fi
done
