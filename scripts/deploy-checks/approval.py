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

                       Names' CEL `validations` (self: the value, cr: the
                       request's namespace and name) are evaluated with
                       cel-python.

Two requesters: cert-manager's service account (CERT_MANAGER_SA) for the
CertificateRequest of a Certificate, and the csi-driver's own
(CSI_DRIVER_SA) for each pod with a csi.cert-manager.io volume (made in
the pod's namespace, from the volume's attributes, with the csi-driver's
variables expanded as they would be for one pod).

A request that no usable policy selects is never processed (pods wait in
ContainerCreating for a Secret that never comes); one that usable policies
select but none permits is denied.
"""

import fnmatch

import celpy
import pss

CERT_MANAGER_SA = ("cert-manager", "cert-manager")  # namespace, name
# The csi-driver Helm chart's ServiceAccount, in the namespace it is
# installed in: it creates the requests of csi.cert-manager.io volumes.
CSI_DRIVER_SA = ("cert-manager", "cert-manager-csi-driver")
CSI_DRIVER = "csi.cert-manager.io"
# The csi-driver's defaults for attributes a volume leaves out.
CSI_DEFAULT_USAGES = "digital signature,key encipherment"
CSI_DEFAULT_DURATION = "2160h"
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
            out.extend(cel_problems(field, (rule or {}).get("validations") or [], v, req))
        if not req[field] and rule and rule.get("required"):
            out.append(f"{field} required but absent")
    if req["isCA"] and allowed.get("isCA") is not True:
        out.append("isCA not allowed")
    for u in req["usages"]:
        if u not in (allowed.get("usages") or []):
            out.append(f"usage {u!r} not allowed")
    out.extend(constraint_problems(spec.get("constraints") or {}, req))
    return out


def cel_problems(field, validations, value, req):
    """Why a value fails its CEL validations ([] if every rule holds)."""
    out = []
    env = celpy.Environment()
    for v in validations:
        act = celpy.json_to_cel({"self": value, "cr": {"namespace": req["namespace"], "name": req.get("name", "")}})
        try:
            ok = env.program(env.compile(v["rule"])).evaluate(act)
        except Exception as e:  # a rule that does not compile or evaluate denies
            out.append(f"{field} {value!r}: CEL {v['rule']!r} failed: {e}")
            continue
        if ok is not True and not (isinstance(ok, celpy.celtypes.BoolType) and bool(ok)):
            out.append(f"{field} {value!r}: {v.get('message') or v['rule']}")
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


def binds(binding, requester):
    return any(
        s.get("kind") == "ServiceAccount"
        and (s.get("namespace"), s.get("name")) == requester
        for s in binding.get("subjects") or []
    )


def may_use(objects, policy_name, namespace, requester=CERT_MANAGER_SA):
    """Whether the requester's service account may `use` the policy there."""
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
        if kind not in ("RoleBinding", "ClusterRoleBinding") or not binds(b, requester):
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
    return check_request(request_of(cert), objects, ns_labels, CERT_MANAGER_SA)


def csi_requests_of(obj):
    """The requests the csi-driver makes for one pod of `obj` (a workload
    or Pod), one per csi.cert-manager.io volume."""
    tpl = pss.pod_template(obj)
    if tpl is None:
        return []
    meta, spec = tpl
    ns = (obj.get("metadata") or {}).get("namespace") or meta.get("namespace")
    pod = ((obj.get("metadata") or {}).get("name") or "pod") + "-0"
    subst = {
        "${POD_NAMESPACE}": ns or "",
        "${POD_NAME}": pod,
        "${POD_UID}": "00000000-0000-0000-0000-000000000000",
        "${SERVICE_ACCOUNT_NAME}": spec.get("serviceAccountName") or "default",
    }

    def expand(text):
        for k, v in subst.items():
            text = text.replace(k, v)
        return text

    def listed(a, key, default=""):
        return [expand(x.strip()) for x in str(a.get(f"{CSI_DRIVER}/{key}", default)).split(",") if x.strip()]

    out = []
    for vol in spec.get("volumes") or []:
        csi = vol.get("csi") or {}
        if csi.get("driver") != CSI_DRIVER:
            continue
        a = csi.get("volumeAttributes") or {}
        alg = a.get(f"{CSI_DRIVER}/key-algorithm", "RSA")
        size = a.get(f"{CSI_DRIVER}/key-size")
        cn = a.get(f"{CSI_DRIVER}/common-name")
        out.append({
            "namespace": ns,
            "name": f"{pod}/{vol.get('name')}",
            "issuer": (a.get(f"{CSI_DRIVER}/issuer-name"), a.get(f"{CSI_DRIVER}/issuer-kind", "Issuer"),
                       a.get(f"{CSI_DRIVER}/issuer-group", "cert-manager.io")),
            "commonName": expand(cn) if cn else None,
            "dnsNames": listed(a, "dns-names"),
            "uris": listed(a, "uri-sans"),
            "ipAddresses": listed(a, "ip-sans"),
            "emailAddresses": [],
            "isCA": str(a.get(f"{CSI_DRIVER}/is-ca", "false")).lower() == "true",
            "usages": listed(a, "key-usages", CSI_DEFAULT_USAGES),
            "duration": a.get(f"{CSI_DRIVER}/duration", CSI_DEFAULT_DURATION),
            "algorithm": alg,
            "size": int(size) if size else DEFAULT_KEY.get(alg),
        })
    return out


def check_pod_requests(obj, objects, ns_labels):
    """[(rule id, message)] for each csi-driver request of `obj`'s pods."""
    out = []
    for req in csi_requests_of(obj):
        for rule, message in check_request(req, objects, ns_labels, CSI_DRIVER_SA):
            out.append((rule, f"csi volume {req['name'].split('/')[-1]}: {message}"))
    return out


def check_request(req, objects, ns_labels, requester):
    policies = [o for o in objects if o.get("kind") == "CertificateRequestPolicy"]
    selecting = [p for p in policies if not selection_problems(p, req, ns_labels)]
    usable = [p for p in selecting if may_use(objects, name_of(p), req["namespace"], requester)]
    if not selecting:
        why = "; ".join(
            f"{name_of(p)}: {', '.join(selection_problems(p, req, ns_labels))}" for p in policies
        ) or "there are no policies"
        return [("approval.unselected", f"no CertificateRequestPolicy selects its request ({why})")]
    if not usable:
        names = [name_of(p) for p in selecting]
        return [("approval.unusable",
                 f"{names} select it, but no binding lets {'/'.join(requester)} use them in {req['namespace']!r}")]
    denials = {name_of(p): permit_problems(p, req) for p in usable}
    if all(denials.values()):
        why = "; ".join(f"{n}: {', '.join(d)}" for n, d in denials.items())
        return [("approval.denied", f"every policy that applies denies it ({why})")]
    return []
