#!/usr/bin/env bash
# Validates the alert rules: syntax of both files, the promtool unit tests,
# that the Kubernetes PrometheusRule alerts use the same expressions as the
# plain rules file, and that every alert has a severity and a runbook_url
# whose anchor exists in docs/runbooks.md. Needs promtool (Debian's
# `prometheus` package) and python3 with PyYAML.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
crd="$here/../kubernetes/prometheusrule.yaml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

promtool check rules "$here/mtls-sidecar-rules.yaml"
(cd "$here" && promtool test rules mtls-sidecar-rules.test.yaml expiry.test.yaml)

python3 - "$crd" "$here/mtls-sidecar-rules.yaml" "$tmp/crd-rules.yaml" "$here/../../docs/runbooks.md" <<'PY'
import re, sys, yaml
crd, plain, out, runbooks = sys.argv[1:]
doc = yaml.safe_load(open(crd))
assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
assert doc["kind"] == "PrometheusRule", doc["kind"]
yaml.safe_dump(doc["spec"], open(out, "w"))
def alerts(groups):
    return {r["alert"]: r for g in groups for r in g["rules"]}
k8s, vm = alerts(doc["spec"]["groups"]), alerts(yaml.safe_load(open(plain))["groups"])
only_vm = set()
only_k8s = {"MtlsSidecarNotReady", "MtlsSidecarCredentialRevisionRejectedRestarting", "MtlsSidecarCrlResignFailing"}
# Same alert, another expression: Kubernetes counts per namespace the
# running sidecar pods (kube-state-metrics) that have no target; a plain
# Prometheus has nothing to compare with and keeps `absent()`.
own_expr = {"MtlsSidecarMetricsAbsent"}
assert set(vm) - only_vm == set(k8s) - only_k8s, (sorted(vm), sorted(k8s))
for name in set(vm) - only_vm:
    for key in ("expr", "for", "labels"):
        if key == "expr" and name in own_expr:
            continue
        a, b = vm[name].get(key), k8s[name].get(key)
        if key == "expr":
            a, b = " ".join(a.split()), " ".join(b.split())
        assert a == b, f"{name}: {key} differs:\n  plain: {a}\n  k8s:   {b}"
# GitHub-style anchors of the runbook's headings.
anchors = {
    re.sub(r"[^a-z0-9 _-]", "", line[3:].strip().lower()).replace(" ", "-")
    for line in open(runbooks) if line.startswith("## ")
}
for name, rule in list(vm.items()) + list(k8s.items()):
    sev = (rule.get("labels") or {}).get("severity")
    assert sev in ("warning", "critical"), f"{name}: severity {sev!r}"
    url = (rule.get("annotations") or {}).get("runbook_url", "")
    assert url.endswith("docs/runbooks.md#" + name.lower()), f"{name}: runbook_url {url!r}"
    assert name.lower() in anchors, f"{name}: no '## {name}' section in docs/runbooks.md"
print(f"PrometheusRule: {len(k8s)} alerts, shared ones match the plain rules; every alert has a severity and a runbook")
PY
promtool check rules "$tmp/crd-rules.yaml"
cp "$here/prometheusrule.test.yaml" "$tmp/"
(cd "$tmp" && promtool test rules prometheusrule.test.yaml)
