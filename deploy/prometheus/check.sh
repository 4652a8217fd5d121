#!/usr/bin/env bash
# Validates the alert rules: syntax of both files, the promtool unit tests,
# and that the Kubernetes PrometheusRule alerts use the same expressions as
# the plain rules file. Needs promtool and python3 with PyYAML.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
crd="$here/../kubernetes/prometheusrule.yaml"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

promtool check rules "$here/mtls-sidecar-rules.yaml"
(cd "$here" && promtool test rules mtls-sidecar-rules.test.yaml)

python3 - "$crd" "$here/mtls-sidecar-rules.yaml" "$tmp/crd-rules.yaml" <<'PY'
import sys, yaml
crd, plain, out = sys.argv[1:]
doc = yaml.safe_load(open(crd))
assert doc["apiVersion"] == "monitoring.coreos.com/v1", doc["apiVersion"]
assert doc["kind"] == "PrometheusRule", doc["kind"]
yaml.safe_dump(doc["spec"], open(out, "w"))
def alerts(groups):
    return {r["alert"]: r for g in groups for r in g["rules"]}
k8s, vm = alerts(doc["spec"]["groups"]), alerts(yaml.safe_load(open(plain))["groups"])
only_vm, only_k8s = {"MtlsSidecarDown"}, {"MtlsSidecarNotReady"}
assert set(vm) - only_vm == set(k8s) - only_k8s, (sorted(vm), sorted(k8s))
for name in set(vm) - only_vm:
    for key in ("expr", "for", "labels"):
        a, b = vm[name].get(key), k8s[name].get(key)
        if key == "expr":
            a, b = " ".join(a.split()), " ".join(b.split())
        assert a == b, f"{name}: {key} differs:\n  plain: {a}\n  k8s:   {b}"
print(f"PrometheusRule: {len(k8s)} alerts, shared ones match the plain rules")
PY
promtool check rules "$tmp/crd-rules.yaml"
cp "$here/prometheusrule.test.yaml" "$tmp/"
(cd "$tmp" && promtool test rules prometheusrule.test.yaml)
