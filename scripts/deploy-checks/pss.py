"""Pod Security Standards, "baseline" and "restricted", as Kubernetes v1.29's
Pod Security Admission enforces them (k8s.io/pod-security-admission, policy
version v1.29), encoded here because no maintained evaluator is installable
without Go. A pod passes a level when no rule of that level reports it;
"restricted" is "baseline" plus its own rules; "privileged" checks nothing.

The rules, pinned to PSS_VERSION (a namespace must pin the same version in
its pod-security.kubernetes.io/*-version labels; admission.py checks that):

baseline
  baseline.host-process      windowsOptions.hostProcess unset or false
  baseline.host-namespaces   hostNetwork, hostPID, hostIPC unset or false
  baseline.privileged        securityContext.privileged unset or false
  baseline.capabilities      capabilities.add only from BASELINE_CAPABILITIES
  baseline.host-path         no hostPath volume
  baseline.host-ports        ports[].hostPort unset or 0
  baseline.apparmor          AppArmor annotations (and the appArmorProfile
                             field of later versions): runtime/default or
                             localhost/* only
  baseline.selinux           seLinuxOptions.type from SELINUX_TYPES; user
                             and role unset
  baseline.proc-mount        procMount unset or Default
  baseline.seccomp           seccompProfile.type never Unconfined
  baseline.sysctls           only SAFE_SYSCTLS
restricted (baseline, and)
  restricted.volume-types         only RESTRICTED_VOLUMES
  restricted.privilege-escalation allowPrivilegeEscalation: false, every container
  restricted.run-as-non-root      runAsNonRoot: true on the pod or every
                                  container, false nowhere
  restricted.run-as-user          runAsUser never 0
  restricted.seccomp              seccompProfile.type RuntimeDefault or
                                  Localhost on the pod or every container
  restricted.capabilities         drop ALL; add only NET_BIND_SERVICE

Containers are containers, initContainers (native sidecars included) and
ephemeralContainers. Windows pods (spec.os.name: windows), which v1.29
exempts from some restricted rules, are not special-cased: none ship.
"""

PSS_VERSION = "v1.29"
LEVELS = ("privileged", "baseline", "restricted")

BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t"}
# The safe set as of v1.29 (ip_local_reserved_ports came in 1.27, the
# tcp_keepalive and tcp_fin_timeout ones in 1.29).
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes",
}
RESTRICTED_VOLUMES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
    "persistentVolumeClaim", "projected", "secret",
}
RESTRICTED_ADD = {"NET_BIND_SERVICE"}
APPARMOR_PREFIX = "container.apparmor.security.beta.kubernetes.io/"

# Where each workload kind keeps its pod template.
TEMPLATE_PATHS = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def pod_template(obj):
    """(metadata, spec) of the pod an object creates, or None."""
    path = TEMPLATE_PATHS.get(obj.get("kind"))
    if path is None:
        return None
    node = obj
    for key in path:
        node = (node or {}).get(key) or {}
    return node.get("metadata") or {}, node.get("spec") or {}


def containers(spec):
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for c in spec.get(field) or []:
            yield c


def sc(node):
    return node.get("securityContext") or {}


def rules_for(level):
    """The rule functions a level enforces."""
    if level == "restricted":
        return BASELINE_RULES + RESTRICTED_RULES
    if level == "baseline":
        return BASELINE_RULES
    return []


def check_pod(meta, spec, level):
    """[(rule id, message)] for every rule of `level` the pod breaks."""
    out = []
    for rule in rules_for(level):
        out.extend(rule(meta, spec))
    return out


def _name(c):
    return f"container {c.get('name', '?')!r}"


def host_process(meta, spec):
    found = [
        what for what, node in [("pod", spec)] + [(_name(c), c) for c in containers(spec)]
        if (sc(node).get("windowsOptions") or {}).get("hostProcess") is True
    ]
    return [("baseline.host-process", f"{w} sets windowsOptions.hostProcess") for w in found]


def host_namespaces(meta, spec):
    return [
        ("baseline.host-namespaces", f"pod sets {f}: true")
        for f in ("hostNetwork", "hostPID", "hostIPC") if spec.get(f) is True
    ]


def privileged(meta, spec):
    return [
        ("baseline.privileged", f"{_name(c)} is privileged")
        for c in containers(spec) if sc(c).get("privileged") is True
    ]


def capabilities_baseline(meta, spec):
    out = []
    for c in containers(spec):
        for cap in (sc(c).get("capabilities") or {}).get("add") or []:
            if cap not in BASELINE_CAPABILITIES:
                out.append(("baseline.capabilities", f"{_name(c)} adds {cap}"))
    return out


def host_path(meta, spec):
    return [
        ("baseline.host-path", f"volume {v.get('name')!r} is a hostPath")
        for v in spec.get("volumes") or [] if "hostPath" in v
    ]


def host_ports(meta, spec):
    return [
        ("baseline.host-ports", f"{_name(c)} uses hostPort {p['hostPort']}")
        for c in containers(spec) for p in c.get("ports") or [] if p.get("hostPort")
    ]


def apparmor_ok(value):
    return value == "runtime/default" or str(value).startswith("localhost/")


def apparmor(meta, spec):
    out = [
        ("baseline.apparmor", f"annotation {k}: {v}")
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(APPARMOR_PREFIX) and not apparmor_ok(v)
    ]
    for what, node in [("pod", spec)] + [(_name(c), c) for c in containers(spec)]:
        kind = (sc(node).get("appArmorProfile") or {}).get("type")
        if kind is not None and kind not in ("RuntimeDefault", "Localhost"):
            out.append(("baseline.apparmor", f"{what} sets appArmorProfile {kind}"))
    return out


def selinux(meta, spec):
    out = []
    for what, node in [("pod", spec)] + [(_name(c), c) for c in containers(spec)]:
        opts = sc(node).get("seLinuxOptions") or {}
        if opts.get("type", "") not in SELINUX_TYPES:
            out.append(("baseline.selinux", f"{what} sets seLinuxOptions.type {opts['type']}"))
        for field in ("user", "role"):
            if opts.get(field):
                out.append(("baseline.selinux", f"{what} sets seLinuxOptions.{field}"))
    return out


def proc_mount(meta, spec):
    return [
        ("baseline.proc-mount", f"{_name(c)} sets procMount {sc(c)['procMount']}")
        for c in containers(spec) if sc(c).get("procMount", "Default") != "Default"
    ]


def seccomp_baseline(meta, spec):
    return [
        ("baseline.seccomp", f"{what} sets seccompProfile Unconfined")
        for what, node in [("pod", spec)] + [(_name(c), c) for c in containers(spec)]
        if (sc(node).get("seccompProfile") or {}).get("type") == "Unconfined"
    ]


def sysctls(meta, spec):
    return [
        ("baseline.sysctls", f"pod sets sysctl {s.get('name')}")
        for s in sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS
    ]


def volume_types(meta, spec):
    out = []
    for v in spec.get("volumes") or []:
        kinds = [k for k in v if k != "name"]
        bad = [k for k in kinds if k not in RESTRICTED_VOLUMES]
        if bad:
            out.append(("restricted.volume-types", f"volume {v.get('name')!r} is {bad[0]}"))
    return out


def privilege_escalation(meta, spec):
    return [
        ("restricted.privilege-escalation", f"{_name(c)} does not set allowPrivilegeEscalation: false")
        for c in containers(spec) if sc(c).get("allowPrivilegeEscalation") is not False
    ]


def run_as_non_root(meta, spec):
    pod = sc(spec).get("runAsNonRoot")
    out = []
    if pod is False:
        out.append(("restricted.run-as-non-root", "pod sets runAsNonRoot: false"))
    for c in containers(spec):
        own = sc(c).get("runAsNonRoot")
        if own is False:
            out.append(("restricted.run-as-non-root", f"{_name(c)} sets runAsNonRoot: false"))
        elif own is None and pod is not True:
            out.append(("restricted.run-as-non-root", f"{_name(c)} does not set runAsNonRoot: true (nor does the pod)"))
    return out


def run_as_user(meta, spec):
    return [
        ("restricted.run-as-user", f"{what} sets runAsUser: 0")
        for what, node in [("pod", spec)] + [(_name(c), c) for c in containers(spec)]
        if sc(node).get("runAsUser") == 0
    ]


def seccomp_restricted(meta, spec):
    pod = (sc(spec).get("seccompProfile") or {}).get("type")
    out = []
    for c in containers(spec):
        own = (sc(c).get("seccompProfile") or {}).get("type")
        effective = own if own is not None else pod
        if effective not in ("RuntimeDefault", "Localhost"):
            out.append(("restricted.seccomp", f"{_name(c)} runs with seccompProfile {effective or 'unset'}"))
    return out


def capabilities_restricted(meta, spec):
    out = []
    for c in containers(spec):
        caps = sc(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(("restricted.capabilities", f"{_name(c)} does not drop ALL"))
        for cap in caps.get("add") or []:
            if cap not in RESTRICTED_ADD:
                out.append(("restricted.capabilities", f"{_name(c)} adds {cap}"))
    return out


BASELINE_RULES = [
    host_process, host_namespaces, privileged, capabilities_baseline, host_path,
    host_ports, apparmor, selinux, proc_mount, seccomp_baseline, sysctls,
]
RESTRICTED_RULES = [
    volume_types, privilege_escalation, run_as_non_root, run_as_user,
    seccomp_restricted, capabilities_restricted,
]
