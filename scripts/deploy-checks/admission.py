#!/usr/bin/env python3
"""Offline admission checks for the rendered Kubernetes manifests: what the
API server and its admission plugins would refuse, or leave waiting for
ever, when a platform team applies deploy/kubernetes as documented.
scripts/validate-deploy.sh (CI) runs it on `kubectl kustomize` output.

A SCENARIO is kustomizations applied one after the other, in the documented
order (PATH=RENDERED.yaml ...). The rules, each tripped by a fixture under
fixtures/ whose `# expect: RULE TEXT` lines name what it must report
(--fixtures DIR runs them all and fails if one passes):

  Pod Security (pss.py, pinned to Kubernetes PSS_VERSION)
    pss.<level>.<rule>     every pod template (Pod, Deployment, StatefulSet,
                           DaemonSet, ReplicaSet, Job, CronJob) passes the
                           `enforce` level of its namespace, as labelled by
                           the scenario at that step; a namespace the
                           scenario does not create (cert-manager's) is held
                           to "restricted", the strictest, since its labels
                           are not ours to know
    pss.labels             a namespace we create has an enforce level, and
                           every pod-security.kubernetes.io/*-version label
                           is PSS_VERSION (not "latest": the level must mean
                           what this checker encodes)
  approver-policy (approval.py)
    approval.unselected, approval.unusable, approval.denied
                           every Certificate's request is selected, usable
                           and permitted by some CertificateRequestPolicy,
                           and so is every request the csi-driver makes
                           for a pod's csi.cert-manager.io volume
  The injection webhook
    webhook.selection      a MutatingWebhookConfiguration calling /inject
                           sends the injector exactly the pods that opted
                           in (their annotation, or their namespace's label
                           mtls-sidecar.dev/inject=enabled, a pod's
                           "disabled" winning), each to one entry, the
                           namespace's at /inject/namespace-enabled; and
                           never a pod of kube-system, cert-manager or the
                           injector's own namespace. namespaceSelector and
                           matchConditions (CEL, with cel-python) are
                           evaluated on sample pods and namespaces.
  Namespaces
    namespace.missing      a namespaced object names its namespace
    namespace.not-created  ... and that namespace exists when it is applied:
                           created by the same kustomization (kubectl
                           applies Namespaces first) or an earlier one, or
                           by a prerequisite install (PREREQUISITE_NAMESPACES)
    docs.apply-order       every step is a documented `kubectl apply -k PATH`
                           (or `kubectl kustomize PATH | mtls-sidecar inject`)
                           (README.md, docs/*.md) and the docs give the
                           scenario's order (rendered overlays under target/
                           stand for a user's own and are exempt)

Exit 0 when nothing is reported, 1 otherwise. With --expect RULE..., exit 0
only if every expected rule is reported (a scenario that must fail).
"""

import argparse
import glob
import os
import re
import sys

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import approval  # noqa: E402
import celpy  # noqa: E402
import pss  # noqa: E402

PSS_VERSION = pss.PSS_VERSION
# Namespaces created by what the docs list as installed beforehand.
PREREQUISITE_NAMESPACES = {"cert-manager": "cert-manager's own install"}
# A namespace the scenario does not create is held to this level.
FOREIGN_LEVEL = "restricted"
CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "ClusterIssuer",
    "CertificateRequestPolicy", "Bundle", "CustomResourceDefinition",
    "PriorityClass", "StorageClass", "PersistentVolume", "IngressClass",
    "RuntimeClass", "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration", "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
}
PSA = "pod-security.kubernetes.io/"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(path):
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as e:
        sys.exit(f"error: {path}: {e}")


def ident(obj):
    m = obj.get("metadata") or {}
    ns = f"{m['namespace']}/" if m.get("namespace") else ""
    return f"{obj.get('kind')} {ns}{m.get('name', '?')}"


class Scenario:
    """Steps (path, objects) applied in order; problems found in them."""

    def __init__(self, name, steps):
        self.name = name
        self.steps = steps
        self.problems = []

    def report(self, rule, step, what, message):
        self.problems.append((rule, f"{self.name}: {step}: {what}: {message}"))

    def namespaces_until(self, index):
        """Namespace objects created by steps 0..index (later labels win)."""
        out = {}
        for _, objs in self.steps[: index + 1]:
            for o in objs:
                if o.get("kind") == "Namespace":
                    out[(o.get("metadata") or {}).get("name")] = o
        return out

    def all_objects(self):
        return [o for _, objs in self.steps for o in objs]


def namespace_labels(ns_objects, name):
    if name in ns_objects:
        return dict((ns_objects[name].get("metadata") or {}).get("labels") or {})
    return {"kubernetes.io/metadata.name": name}


def check_namespace_labels(sc):
    for i, (step, objs) in enumerate(sc.steps):
        for o in objs:
            if o.get("kind") != "Namespace":
                continue
            labels = (o.get("metadata") or {}).get("labels") or {}
            level = labels.get(PSA + "enforce")
            if level not in pss.LEVELS:
                sc.report("pss.labels", step, ident(o), f"enforce level {level!r} is not one of {pss.LEVELS}")
            for key, value in labels.items():
                if key.startswith(PSA) and key.endswith("-version") and value != PSS_VERSION:
                    sc.report("pss.labels", step, ident(o), f"{key}: {value!r}, want {PSS_VERSION} (what this checker encodes)")


def check_pods(sc):
    for i, (step, objs) in enumerate(sc.steps):
        created = sc.namespaces_until(i)
        for o in objs:
            tpl = pss.pod_template(o)
            if tpl is None:
                continue
            ns = (o.get("metadata") or {}).get("namespace")
            if ns in created:
                level = ((created[ns].get("metadata") or {}).get("labels") or {}).get(PSA + "enforce")
            else:
                level = FOREIGN_LEVEL
            if level not in pss.LEVELS:
                continue  # reported by check_namespace_labels
            for rule, message in pss.check_pod(*tpl, level):
                sc.report(f"pss.{rule}", step, ident(o), f"{message} (namespace {ns} enforces {level} {PSS_VERSION})")


def check_namespaces(sc):
    for i, (step, objs) in enumerate(sc.steps):
        created = sc.namespaces_until(i)
        for o in objs:
            if o.get("kind") in CLUSTER_SCOPED:
                continue
            ns = (o.get("metadata") or {}).get("namespace")
            if not ns:
                sc.report("namespace.missing", step, ident(o), "no metadata.namespace: it lands in whatever namespace kubectl's context names")
            elif ns not in created and ns not in PREREQUISITE_NAMESPACES:
                sc.report("namespace.not-created", step, ident(o),
                          f"namespace {ns!r} is created neither by this kustomization nor by one applied before it")


def check_certificates(sc):
    objects = sc.all_objects()
    for i, (step, objs) in enumerate(sc.steps):
        created = sc.namespaces_until(len(sc.steps) - 1)
        for o in objs:
            labels = namespace_labels(created, (o.get("metadata") or {}).get("namespace"))
            if o.get("kind") == "Certificate":
                problems = approval.check_certificate(o, objects, labels)
            else:
                problems = approval.check_pod_requests(o, objects, labels)
            for rule, message in problems:
                sc.report(rule, step, ident(o), message)


# `kubectl apply -k PATH`, or PATH rendered through inject and applied
# (`kubectl kustomize PATH | mtls-sidecar inject -f - | kubectl apply -f -`).
APPLY = re.compile(r"kubectl apply -k (\S+)|kubectl kustomize (\S+) \| mtls-sidecar inject")


def documented_orders():
    """{doc file: [kustomization paths in the order it applies them]}."""
    out = {}
    for doc in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md"))):
        with open(doc) as f:
            paths = [(a or b).rstrip("/`") for a, b in APPLY.findall(f.read())]
        if paths:
            out[os.path.relpath(doc, ROOT)] = paths
    return out


def check_docs_order(sc, docs):
    steps = [s for s, _ in sc.steps if not s.startswith("target/")]
    for s in steps:
        if not any(s in paths for paths in docs.values()):
            sc.report("docs.apply-order", s, "kustomization", "no doc says `kubectl apply -k " + s + "`")
    for doc, paths in docs.items():
        listed = [s for s in steps if s in paths]
        positions = [paths.index(s) for s in listed]
        if positions != sorted(positions):
            sc.report("docs.apply-order", ", ".join(listed), doc, "the docs apply these in another order")


INJECT = "mtls-sidecar.dev/inject"
SAMPLE_PODS = {
    "a pod without annotations": {"metadata": {}},
    "a pod with other annotations": {"metadata": {"annotations": {"a": "b"}}},
    "a pod annotated enabled": {"metadata": {"annotations": {INJECT: "enabled"}}},
    "a pod annotated disabled": {"metadata": {"annotations": {INJECT: "disabled"}}},
    # A misspelt opt-in must reach the webhook, which refuses it: matched
    # only on "enabled", it would be admitted uninjected, silently.
    "a pod annotated true": {"metadata": {"annotations": {INJECT: "true"}}},
    "a pod annotated Enabled": {"metadata": {"annotations": {INJECT: "Enabled"}}},
}
NEVER_INJECTED = ["kube-system", "cert-manager"]


def selector_matches(sel, labels):
    """A metav1.LabelSelector against a label map (nil matches everything)."""
    sel = sel or {}
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in sel.get("matchExpressions") or []:
        k, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        ok = {
            "In": k in labels and labels[k] in values,
            "NotIn": not (k in labels and labels[k] in values),
            "Exists": k in labels,
            "DoesNotExist": k not in labels,
        }.get(op)
        if not ok:
            return False
    return True


def conditions_hold(hook, pod):
    env = celpy.Environment()
    for c in hook.get("matchConditions") or []:
        out = env.program(env.compile(c["expression"])).evaluate(celpy.json_to_cel({"object": pod}))
        if not bool(out):
            return False
    return True


def check_webhook_selection(sc):
    for step, objs in sc.steps:
        for o in objs:
            if o.get("kind") != "MutatingWebhookConfiguration":
                continue
            hooks = o.get("webhooks") or []
            paths = [((h.get("clientConfig") or {}).get("service") or {}).get("path") or "" for h in hooks]
            if not any(p.startswith("/inject") for p in paths):
                continue
            own = {((h.get("clientConfig") or {}).get("service") or {}).get("namespace") for h in hooks}
            namespaces = {n: {"kubernetes.io/metadata.name": n} for n in NEVER_INJECTED + sorted(own - {None})}
            namespaces["shop"] = {"kubernetes.io/metadata.name": "shop"}
            namespaces["shop-enabled"] = {"kubernetes.io/metadata.name": "shop-enabled", INJECT: "enabled"}
            for ns, labels in namespaces.items():
                for what, pod in SAMPLE_PODS.items():
                    try:
                        chosen = [
                            (h.get("name"), p) for h, p in zip(hooks, paths)
                            if selector_matches(h.get("namespaceSelector"), labels) and conditions_hold(h, pod)
                        ]
                    except Exception as e:  # a condition that does not evaluate fails the pod
                        sc.report("webhook.selection", step, ident(o), f"{what} in namespace {ns}: a matchCondition fails: {e}")
                        continue
                    annotation = (pod["metadata"].get("annotations") or {}).get(INJECT)
                    enabled_ns = labels.get(INJECT) == "enabled"
                    if ns in namespaces and ns not in ("shop", "shop-enabled"):
                        want = []
                    elif enabled_ns and annotation != "disabled":
                        want = ["/inject/namespace-enabled"]
                    elif annotation is not None and annotation != "disabled":
                        want = ["/inject"]
                    else:
                        want = []
                    if [p for _, p in chosen] != want:
                        sc.report("webhook.selection", step, ident(o),
                                  f"{what} in namespace {ns} goes to {chosen or 'no entry'}, want {want or 'no entry'}")


CHECKS = [check_namespace_labels, check_pods, check_namespaces, check_certificates, check_webhook_selection]


def run(scenario, docs=None):
    for check in CHECKS:
        check(scenario)
    if docs is not None:
        check_docs_order(scenario, docs)
    return scenario.problems


def parse_scenario(words):
    name, steps = words[0], []
    for w in words[1:]:
        path, _, rendered = w.partition("=")
        steps.append((path, load(rendered or path)))
    return Scenario(name, steps)


def fixture_expectations(path):
    """A fixture's `# expect: RULE [text in the message, " ... " for a gap]` lines as
    [(rule, text)], and its `# clean: TEXT` lines (no message may contain
    TEXT: what a check must not report)."""
    expect, clean = [], []
    with open(path) as f:
        for line in f:
            if line.startswith("# expect:"):
                rule, _, text = line[len("# expect:"):].strip().partition(" ")
                expect.append((rule, text.strip()))
            elif line.startswith("# clean:"):
                clean.append(line[len("# clean:"):].strip())
    return expect, clean


def says(message, text):
    """Whether the message contains every " ... "-separated part of text, in order."""
    at = 0
    for part in text.split(" ... "):
        found = message.find(part, at)
        if found < 0:
            return False
        at = found + len(part)
    return True


def run_fixtures(directory):
    """Every fixture must report what its `# expect:` lines name."""
    bad = 0
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        name = os.path.basename(path)
        expect, clean = fixture_expectations(path)
        problems = run(Scenario(name, [(name, load(path))]))
        missing = [
            f"{rule} {text}".strip() for rule, text in expect
            if not any(r == rule and says(m, text) for r, m in problems)
        ]
        missing += [f"nothing about {t!r}" for t in clean if any(t in m for _, m in problems)]
        if not expect or missing:
            print(f"error: fixture {name}: expected {missing or 'an # expect: line'}, reported:", file=sys.stderr)
            for rule, message in problems:
                print(f"  [{rule}] {message}", file=sys.stderr)
            bad += 1
        else:
            print(f"ok    fixture {name} fails as it must ({len(expect)} expectations)")
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scenario", nargs="+", action="append", default=[], metavar="NAME PATH=RENDERED",
                    help="a scenario name, then its steps in apply order")
    ap.add_argument("--expect", nargs="+", default=[], help="rules that must be reported")
    ap.add_argument("--fixtures", help="run every fixture in this directory")
    ap.add_argument("--no-docs", action="store_true", help="skip docs.apply-order")
    args = ap.parse_args()
    bad = run_fixtures(args.fixtures) if args.fixtures else 0
    docs = None if args.no_docs else documented_orders()
    found = set()
    for words in args.scenario:
        sc = parse_scenario(words)
        problems = run(sc, docs)
        for rule, message in problems:
            found.add(rule)
            print(f"{'expected' if args.expect else 'error'}: [{rule}] {message}",
                  file=sys.stdout if args.expect else sys.stderr)
        if not problems:
            print(f"ok    {sc.name}: " + " then ".join(s for s, _ in sc.steps))
    if args.expect:
        missing = [r for r in args.expect if r not in found]
        if missing:
            print(f"error: expected {missing} to be reported, got {sorted(found)}", file=sys.stderr)
            return 1
        return 1 if bad else 0
    return 1 if bad or found else 0


if __name__ == "__main__":
    sys.exit(main())
