#!/usr/bin/env python3
"""Judges injected manifests as Kubernetes would, offline (tests/e2e/inject.rs):
Pod Security "restricted" with scripts/deploy-checks/pss.py, then
kubernetes-validate --strict at the versions scripts/validate-deploy.sh
pins. Usage: judge.py REPO_ROOT MANIFEST.yaml. Exit 0 when nothing is
reported; each problem on its own line otherwise."""

import os
import subprocess
import sys

import yaml

root, manifest = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(root, "scripts", "deploy-checks"))
import pss  # noqa: E402

bad = False
with open(manifest) as f:
    docs = [d for d in yaml.safe_load_all(f) if d]
for d in docs:
    t = pss.pod_template(d)
    if t is None:
        continue
    for rule, msg in pss.check_pod(t[0], t[1], "restricted"):
        print(f"PSS {d['kind']} {d['metadata'].get('name')}: {rule}: {msg}")
        bad = True

out = subprocess.run(
    [sys.executable, "-m", "kubernetes_validate", "--strict", "-k", "1.29.0", "-k", "1.37.0", manifest],
    capture_output=True,
    text=True,
)
for line in (out.stdout + out.stderr).splitlines():
    if line.startswith(("WARN", "ERROR", "FATAL")):
        print(line)
        bad = True
if out.returncode != 0 and not bad:
    print(f"kubernetes-validate exited {out.returncode}: {out.stdout}{out.stderr}")
    bad = True
sys.exit(1 if bad else 0)
