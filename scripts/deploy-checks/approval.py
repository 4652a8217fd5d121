"""approver-policy (policy.cert-manager.io/v1alpha1), evaluated offline for
the CertificateRequest cert-manager makes from each Certificate: with
cert-manager's built-in approver disabled (as the docs require), a request
is signed only if some CertificateRequestPolicy

  approval.unselected  SELECTS it: spec.selector.issuerRef (name, kind,
                       group; wildcards) and spec.selector.namespace
                       (matchNames with wildcards, matchLabels against the
                       namespace's labels), and
  approval.unusable    the requester may USE it in the request's
                       namespace: a RoleBinding there, or a
                       ClusterRoleBinding, binds cert-manager's service
                       account (CERT_MANAGER_SA) to a Role/ClusterRole
                       granting `use` on certificaterequestpolicies (that
                       name, or all), and
  approval.denied      PERMITS it: every commonName, dnsNames, uris,
                       ipAddresses and emailAddresses value of the request
                       matches `allowed` (and those marked required are
                       present), isCA only if allowed.isCA, every usage in
                       allowed.usages; and `constraints`: the key's
                       algorithm and size, the duration within min/max.

A request that no usable policy selects is never processed (pods wait in
ContainerCreating for a Secret that never comes); one that usable policies
select but none permits is denied.
"""

import fnmatch

CERT_MANAGER_SA = ("cert-manager", "cert-manager")  # namespace, name
GROUP = "policy.cert-manager.io"
RESOURCE = "certificaterequestpolicies"
# cert-manager's defaults for a Certificate that leaves these out.
DEFAULT_USAGES = ["digital signature", "key encipherment"]
DEFAULT_DURATION = "2160h"
DEFAULT_KEY = {"RSA": 2048, "ECDSA": 256, "Ed25519": None}
NAME_FIELDS = ("dnsNames", "uris", "ipAddresses", "emailAddresses")


def go_duration_seconds(text):
    """Seconds in a Go duration ("720h", "1h30m", "90s"); ValueError if not one."""
    units = {"h": 3600, "m": 60, "s": 1}
    total, num = 0.0, ""
    for ch in str(text):
        if ch.isdigit() or ch == ".":
            num += ch
        elif ch in units and num:
            total += float(num) * units[ch]
            num = ""
        else:
            raise ValueError(f"not a duration: {text!r}")
    if num:
        raise ValueError(f"not a duration (no unit): {text!r}")
    return total


def request_of(cert):
    """What cert-manager puts in the CertificateRequest of a Certificate."""
    spec = cert.get("spec") or {}
    key = spec.get("privateKey") or {}
    alg = key.get("algorithm", "RSA")
    ref = spec.get("issuerRef") or {}
    return {
        "namespace": (cert.get("metadata") or {}).get("namespace"),
        "issuer": (ref.get("name"), ref.get("kind", "Issuer"), ref.get("group", "cert-manager.io")),
        "commonName": spec.get("commonName"),
        **{f: list(spec.get(f) or []) for f in NAME_FIELDS},
        "isCA": spec.get("isCA") is True,
        "usages": list(spec.get("usages") or DEFAULT_USAGES),
        "duration": spec.get("duration", DEFAULT_DURATION),
        "algorithm": alg,
        "size": key.get("size", DEFAULT_KEY.get(alg)),
    }


def wild(pattern, value):
    return fnmatch.fnmatchcase(str(value), str(pattern))


def selection_problems(policy, req, ns_labels):
    """Why `policy` does not select `req` ([] if it does)."""
    sel = (policy.get("spec") or {}).get("selector") or {}
    out = []
    ref = sel.get("issuerRef")
    if ref is not None:
        for field, have in zip(("name", "kind", "group"), req["issuer"]):
            if field in ref and not wild(ref[field], have):
                out.append(f"selector.issuerRef.{field} {ref[field]!r} is not {have!r}")
    ns = sel.get("namespace")
    if ns is not None:
        names = ns.get("matchNames")
        if names is not None and not any(wild(n, req["namespace"]) for n in names):
            out.append(f"selector.namespace.matchNames {names} excludes {req['namespace']!r}")
        for k, v in (ns.get("matchLabels") or {}).items():
            if ns_labels.get(k) != v:
                out.append(f"namespace {req['namespace']!r} lacks label {k}={v}")
    if ref is None and ns is None:
        out.append("selector is empty")
    return out


def permit_problems(policy, req):
    """Why `policy` would deny `req` ([] if it permits it)."""
    spec = policy.get("spec") or {}
    allowed = spec.get("allowed") or {}
    out = []
    cn = allowed.get("commonName")
    if req["commonName"] is not None:
        if cn is None or not wild(cn.get("value", ""), req["commonName"]):
            out.append(f"commonName {req['commonName']!r} not allowed")
    elif cn and cn.get("required"):
        out.append("commonName required but absent")
    for field in NAME_FIELDS:
        rule = allowed.get(field)
        values = (rule or {}).get("values") or []
        for v in req[field]:
            if not any(wild(p, v) for p in values):
                out.append(f"{field} {v!r} not allowed")
        if not req[field] and rule and rule.get("required"):
            out.append(f"{field} required but absent")
    if req["isCA"] and allowed.get("isCA") is not True:
        out.append("isCA not allowed")
    for u in req["usages"]:
        if u not in (allowed.get("usages") or []):
            out.append(f"usage {u!r} not allowed")
    out.extend(constraint_problems(spec.get("constraints") or {}, req))
    return out


def constraint_problems(cons, req):
    out = []
    try:
        have = go_duration_seconds(req["duration"])
        for bound, too in (("minDuration", lambda lim: have < lim), ("maxDuration", lambda lim: have > lim)):
            if bound in cons and too(go_duration_seconds(cons[bound])):
                out.append(f"duration {req['duration']} outside {bound} {cons[bound]}")
    except ValueError as e:
        out.append(str(e))
    key = cons.get("privateKey") or {}
    if "algorithm" in key and key["algorithm"] != req["algorithm"]:
        out.append(f"key algorithm {req['algorithm']} is not {key['algorithm']}")
    size = req["size"] if isinstance(req["size"], int) else None
    if "minSize" in key and (size is None or size < key["minSize"]):
        out.append(f"key size {size} below minSize {key['minSize']}")
    if "maxSize" in key and (size is None or size > key["maxSize"]):
        out.append(f"key size {size} above maxSize {key['maxSize']}")
    return out


def grants_use(role, policy_name):
    for rule in role.get("rules") or []:
        if not ({GROUP, "*"} & set(rule.get("apiGroups") or [])):
            continue
        if not ({RESOURCE, "*"} & set(rule.get("resources") or [])):
            continue
        if not ({"use", "*"} & set(rule.get("verbs") or [])):
            continue
        names = rule.get("resourceNames") or []
        if not names or policy_name in names:
            return True
    return False


def binds_cert_manager(binding):
    return any(
        s.get("kind") == "ServiceAccount"
        and (s.get("namespace"), s.get("name")) == CERT_MANAGER_SA
        for s in binding.get("subjects") or []
    )


def may_use(objects, policy_name, namespace):
    """Whether cert-manager's service account may `use` the policy there."""
    def find(kind, name, ns=None):
        for o in objects:
            m = o.get("metadata") or {}
            if o.get("kind") == kind and m.get("name") == name and (ns is None or m.get("namespace") == ns):
                return o
        return None

    for b in objects:
        kind = b.get("kind")
        bns = (b.get("metadata") or {}).get("namespace")
        if kind == "RoleBinding" and bns != namespace:
            continue
        if kind not in ("RoleBinding", "ClusterRoleBinding") or not binds_cert_manager(b):
            continue
        ref = b.get("roleRef") or {}
        if ref.get("kind") == "Role" and kind == "RoleBinding":
            role = find("Role", ref.get("name"), bns)
        elif ref.get("kind") == "ClusterRole":
            role = find("ClusterRole", ref.get("name"))
        else:
            role = None
        if role is not None and grants_use(role, policy_name):
            return True
    return False


def name_of(obj):
    return (obj.get("metadata") or {}).get("name", "?")


def check_certificate(cert, objects, ns_labels):
    """[(rule id, message)]: empty when some policy approves the request."""
    req = request_of(cert)
    policies = [o for o in objects if o.get("kind") == "CertificateRequestPolicy"]
    selecting = [p for p in policies if not selection_problems(p, req, ns_labels)]
    usable = [p for p in selecting if may_use(objects, name_of(p), req["namespace"])]
    if not selecting:
        why = "; ".join(
            f"{name_of(p)}: {', '.join(selection_problems(p, req, ns_labels))}" for p in policies
        ) or "there are no policies"
        return [("approval.unselected", f"no CertificateRequestPolicy selects its request ({why})")]
    if not usable:
        names = [name_of(p) for p in selecting]
        return [("approval.unusable",
                 f"{names} select it, but no binding lets {'/'.join(CERT_MANAGER_SA)} use them in {req['namespace']!r}")]
    denials = {name_of(p): permit_problems(p, req) for p in usable}
    if all(denials.values()):
        why = "; ".join(f"{n}: {', '.join(d)}" for n, d in denials.items())
        return [("approval.denied", f"every policy that applies denies it ({why})")]
    return []
