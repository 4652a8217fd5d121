//! The sidecar container and its volumes, built from a [`Request`]: the
//! same shape as the hand-written specs in `deploy/` (a native sidecar,
//! whole-volume mounts, probes on the admin endpoint, a restricted
//! securityContext), as JSON.

use serde_json::{json, Value};

use super::annotations::{Identity, Request, Resources, Routes};

/// The sidecar container's name.
pub const CONTAINER: &str = "mtls-sidecar";
/// The volumes injection adds (a template holding one of these names
/// already is refused).
pub const IDENTITY_VOLUME: &str = "mtls-sidecar-identity";
pub const TRUST_VOLUME: &str = "mtls-sidecar-trust";
pub const CONFIG_VOLUME: &str = "mtls-sidecar-config";
pub const SPIFFE_VOLUME: &str = "mtls-sidecar-spiffe";
pub const VOLUMES: &[&str] = &[IDENTITY_VOLUME, TRUST_VOLUME, CONFIG_VOLUME, SPIFFE_VOLUME];
/// Where they are mounted.
pub const IDENTITY_DIR: &str = "/etc/mtls";
pub const TRUST_DIR: &str = "/etc/mtls-trust";
pub const CONFIG_DIR: &str = "/etc/mtls-sidecar";
pub const CONFIG_FILE: &str = "sidecar.toml";
pub const SPIFFE_DIR: &str = "/spiffe-workload-api";
pub const SPIFFE_SOCKET: &str = "unix:///spiffe-workload-api/spire-agent.sock";
/// The port names.
pub const PORT_MTLS: &str = "mtls";
pub const PORT_ADMIN: &str = "mtls-admin";
/// The user and group the sidecar runs as (the image's `nonroot`).
pub const USER: i64 = 65532;
/// Where the csi-driver's key and certificate are read from (0440,
/// group-owned by `fs-group`).
pub const CSI_DRIVER: &str = "csi.cert-manager.io";
pub const SPIFFE_DRIVER: &str = "csi.spiffe.io";

/// What the sidecar needs to know about its pod beyond the annotations.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    pub image: &'a str,
    /// The group the sidecar runs as: the pod's `fsGroup`.
    pub group: i64,
    /// `--drain-timeout`, in seconds.
    pub drain_seconds: i64,
    /// `--app-probe` arguments (name=JSON handler).
    pub app_probes: Vec<String>,
    /// The pod's own DNS name under its headless Service (a StatefulSet's
    /// `${POD_NAME}.<serviceName>.${POD_NAMESPACE}.svc`): it goes in the
    /// csi-driver certificate.
    pub pod_dns_name: Option<&'a str>,
}

/// The sidecar's arguments.
pub fn args(req: &Request, ctx: &Context) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    match &req.routes {
        Routes::Server {
            listen,
            target,
            allow_san,
            exclusive,
        } => {
            a.push("server".into());
            a.push(format!("--listen=0.0.0.0:{listen}"));
            a.push(format!("--target=127.0.0.1:{target}"));
            a.extend(credential_args(&req.identity));
            a.extend(allow_san.iter().map(|s| format!("--allow-san={s}")));
            if *exclusive {
                a.push("--exclusive".into());
            }
        }
        Routes::Client {
            local,
            host,
            port,
            expect_san,
        } => {
            a.push("client".into());
            a.push(format!("--listen=127.0.0.1:{local}"));
            a.push(format!("--target={host}:{port}"));
            a.extend(credential_args(&req.identity));
            a.extend(expect_san.iter().map(|s| format!("--expect-san={s}")));
        }
        Routes::Config { .. } => {
            a.push("run".into());
            a.push(format!("--config={CONFIG_DIR}/{CONFIG_FILE}"));
        }
    }
    if !matches!(req.routes, Routes::Config { .. }) {
        a.push(format!("--admin=0.0.0.0:{}", req.admin_port));
        a.push(format!("--drain-timeout={}s", ctx.drain_seconds));
    }
    a.extend(ctx.app_probes.iter().map(|p| format!("--app-probe={p}")));
    a.push("--log-format=json".into());
    a
}

fn credential_args(identity: &Identity) -> Vec<String> {
    match identity {
        Identity::Secret(_) => vec![format!("--tls-dir={IDENTITY_DIR}")],
        Identity::Csi { .. } => vec![
            format!("--tls-dir={IDENTITY_DIR}"),
            format!("--trust-dir={TRUST_DIR}"),
        ],
        Identity::Spiffe => vec![format!("--workload-api={SPIFFE_SOCKET}")],
    }
}

/// The sidecar's listening ports, with their names: `mtls` for a server
/// route, `mtls-admin` always.
pub fn ports(req: &Request) -> Vec<(&'static str, u16)> {
    let mut p = Vec::new();
    if let Routes::Server { listen, .. } = req.routes {
        p.push((PORT_MTLS, listen));
    }
    p.push((PORT_ADMIN, req.admin_port));
    p
}

/// The native sidecar container.
pub fn container(req: &Request, ctx: &Context) -> Value {
    let ports: Vec<Value> = ports(req)
        .into_iter()
        .map(|(name, port)| json!({"name": name, "containerPort": port, "protocol": "TCP"}))
        .collect();
    // The csi-driver waits for the certificate before the container starts;
    // a SPIFFE agent attests the pod after it starts, which can take longer.
    let startup_failures = if req.identity == Identity::Spiffe {
        120
    } else {
        30
    };
    let probe = |path: &str| json!({"httpGet": {"path": path, "port": PORT_ADMIN}});
    let mut startup = probe("/readyz");
    startup["periodSeconds"] = json!(1);
    startup["failureThreshold"] = json!(startup_failures);
    let mut readiness = probe("/readyz");
    readiness["periodSeconds"] = json!(5);
    readiness["failureThreshold"] = json!(2);
    let mut liveness = probe("/livez");
    liveness["periodSeconds"] = json!(10);
    liveness["timeoutSeconds"] = json!(2);
    liveness["failureThreshold"] = json!(3);
    json!({
        "name": CONTAINER,
        "image": ctx.image,
        "imagePullPolicy": "IfNotPresent",
        "restartPolicy": "Always",
        "args": args(req, ctx),
        "env": [{"name": "RUST_LOG", "value": "info"}],
        "ports": ports,
        "startupProbe": startup,
        "readinessProbe": readiness,
        "livenessProbe": liveness,
        "resources": resources(req),
        "securityContext": {
            "runAsNonRoot": true,
            "runAsUser": USER,
            "runAsGroup": ctx.group,
            "readOnlyRootFilesystem": true,
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"}
        },
        "volumeMounts": mounts(req),
    })
}

fn mounts(req: &Request) -> Vec<Value> {
    // Whole volumes, never subPath: a subPath mount never sees the
    // kubelet's ..data swap, so a rotation would never arrive.
    let mount = |name: &str, path: &str| json!({"name": name, "mountPath": path, "readOnly": true});
    let mut m = Vec::new();
    match req.identity {
        Identity::Secret(_) => m.push(mount(IDENTITY_VOLUME, IDENTITY_DIR)),
        Identity::Csi { .. } => {
            m.push(mount(IDENTITY_VOLUME, IDENTITY_DIR));
            m.push(mount(TRUST_VOLUME, TRUST_DIR));
        }
        Identity::Spiffe => m.push(mount(SPIFFE_VOLUME, SPIFFE_DIR)),
    }
    if let Routes::Config { .. } = req.routes {
        m.push(mount(CONFIG_VOLUME, CONFIG_DIR));
    }
    m
}

/// The trust sources: the trust ConfigMap's `ca.crt`, and the optional
/// revocation ConfigMap's `ca.crl` and `deny`.
fn trust_sources(req: &Request) -> Vec<Value> {
    let mut s = Vec::new();
    if let Some(trust) = &req.trust {
        s.push(
            json!({"configMap": {"name": trust, "items": [{"key": "ca.crt", "path": "ca.crt"}]}}),
        );
    }
    if let Some(rev) = &req.revocation {
        s.push(
            json!({"configMap": {"name": rev, "optional": true, "items": [
                {"key": "ca.crl", "path": "ca.crl"},
                {"key": "deny", "path": "deny"}
            ]}}),
        );
    }
    s
}

/// The volumes, in the order they are added.
pub fn volumes(req: &Request, ctx: &Context) -> Vec<Value> {
    let mut v = Vec::new();
    match &req.identity {
        Identity::Secret(secret) => {
            let mut sources = vec![json!({"secret": {"name": secret, "items": [
                {"key": "tls.crt", "path": "tls.crt"},
                {"key": "tls.key", "path": "tls.key"}
            ]}})];
            sources.extend(trust_sources(req));
            v.push(json!({"name": IDENTITY_VOLUME, "projected": {"defaultMode": 0o440, "sources": sources}}));
        }
        Identity::Csi { .. } => {
            v.push(json!({"name": IDENTITY_VOLUME, "csi": {
                "driver": CSI_DRIVER,
                "readOnly": true,
                "volumeAttributes": csi_attributes(req, ctx),
            }}));
            v.push(json!({"name": TRUST_VOLUME, "projected": {"defaultMode": 0o440, "sources": trust_sources(req)}}));
        }
        Identity::Spiffe => {
            v.push(
                json!({"name": SPIFFE_VOLUME, "csi": {"driver": SPIFFE_DRIVER, "readOnly": true}}),
            );
        }
    }
    if let Routes::Config { configmap } = &req.routes {
        v.push(json!({"name": CONFIG_VOLUME, "configMap": {"name": configmap}}));
    }
    v
}

/// The key usages the certificate needs: a server route presents it as a
/// server, a client route as a client, a config file may do both.
pub fn key_usages(routes: &Routes) -> &'static str {
    match routes {
        Routes::Server { .. } => "digital signature,server auth",
        Routes::Client { .. } => "digital signature,client auth",
        Routes::Config { .. } => "digital signature,server auth,client auth",
    }
}

/// The csi-driver's volume attributes (`csi.cert-manager.io/...`).
pub fn csi_attributes(req: &Request, ctx: &Context) -> Value {
    let Identity::Csi {
        kind,
        issuer,
        sans,
        duration,
    } = &req.identity
    else {
        return json!({});
    };
    let mut dns: Vec<String> = sans
        .iter()
        .filter(|s| !s.contains("://"))
        .cloned()
        .collect();
    let uris: Vec<String> = sans.iter().filter(|s| s.contains("://")).cloned().collect();
    if let Some(name) = ctx.pod_dns_name {
        dns.push(name.to_string());
    }
    let mut a = serde_json::Map::new();
    let mut put = |k: &str, v: String| {
        a.insert(format!("{CSI_DRIVER}/{k}"), Value::String(v));
    };
    put("issuer-name", issuer.clone());
    put("issuer-kind", kind.as_str().into());
    put("issuer-group", "cert-manager.io".into());
    put("key-algorithm", "ECDSA".into());
    put("key-usages", key_usages(&req.routes).into());
    put("duration", duration.clone());
    put("fs-group", ctx.group.to_string());
    if !dns.is_empty() {
        put("dns-names", dns.join(","));
    }
    if !uris.is_empty() {
        put("uri-sans", uris.join(","));
    }
    Value::Object(a)
}

/// Memory the sizing formula asks for, in MiB (docs/injection.md):
/// baseline 6 + allocator slack 4, plus per route what hostile peers can
/// pin (1,024 pending handshakes x 45 KiB on a TLS listener) and what
/// authenticated ones can (4,096 idle connections x 9 KiB; one with
/// `exclusive`, which keeps one connection at a time).
pub fn memory_limit_mib(routes: &Routes) -> u64 {
    const BASELINE: u64 = 6 + 4;
    const HANDSHAKES_KIB: u64 = 1024 * 45;
    const CONNECTIONS_KIB: u64 = 4096 * 9;
    let kib = match routes {
        Routes::Server {
            exclusive: true, ..
        } => HANDSHAKES_KIB + 9,
        Routes::Server { .. } => HANDSHAKES_KIB + CONNECTIONS_KIB,
        // The listener is loopback: only the application connects.
        Routes::Client { .. } => CONNECTIONS_KIB,
        // Unknown routes: one server route's worth; override it.
        Routes::Config { .. } => HANDSHAKES_KIB + CONNECTIONS_KIB,
    };
    let mib = BASELINE + kib.div_ceil(1024);
    // Rounded up to a multiple of 16 MiB.
    mib.div_ceil(16) * 16
}

fn resources(req: &Request) -> Value {
    let Resources {
        cpu_request,
        cpu_limit,
        memory_request,
        memory_limit,
    } = &req.resources;
    let mut limits = serde_json::Map::new();
    if let Some(cpu) = cpu_limit {
        limits.insert("cpu".into(), json!(cpu));
    }
    let memory = memory_limit
        .clone()
        .unwrap_or_else(|| format!("{}Mi", memory_limit_mib(&req.routes)));
    limits.insert("memory".into(), json!(memory));
    json!({
        "requests": {
            "cpu": cpu_request.as_deref().unwrap_or("20m"),
            "memory": memory_request.as_deref().unwrap_or("16Mi"),
        },
        "limits": limits,
    })
}

/// A pod spec's `terminationGracePeriodSeconds` (Kubernetes' default, 30,
/// when it names none).
pub fn grace_seconds(spec: &Value) -> i64 {
    spec.get("terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(30)
}

/// `--drain-timeout` for a pod with this grace period: the sidecar gets
/// its SIGTERM only after the application has exited, within the same
/// grace period; it drains for the grace less a 5 s margin to close and
/// exit before the kubelet's SIGKILL (half the grace when that is under
/// 10 s).
pub fn drain_seconds(grace: i64) -> i64 {
    if grace >= 10 {
        grace - 5
    } else {
        grace.max(0) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_limit_follows_the_sizing_formula() {
        let server = |exclusive| Routes::Server {
            listen: 1,
            target: 2,
            allow_san: vec![],
            exclusive,
        };
        // 6 + 4 + 45 + 36 = 91 MiB, rounded up to 96.
        assert_eq!(memory_limit_mib(&server(false)), 96);
        // One connection at a time: 6 + 4 + 45 + 1 = 56 MiB, rounded up to 64.
        assert_eq!(memory_limit_mib(&server(true)), 64);
        let client = Routes::Client {
            local: 1,
            host: "h".into(),
            port: 2,
            expect_san: vec![],
        };
        // 6 + 4 + 36 = 46, rounded up to 48.
        assert_eq!(memory_limit_mib(&client), 48);
    }

    #[test]
    fn the_drain_fits_in_the_grace_period() {
        assert_eq!(drain_seconds(30), 25);
        assert_eq!(drain_seconds(60), 55);
        assert_eq!(drain_seconds(10), 5);
        assert_eq!(drain_seconds(6), 3);
        assert_eq!(drain_seconds(0), 0);
        assert_eq!(drain_seconds(-1), 0);
    }
}
