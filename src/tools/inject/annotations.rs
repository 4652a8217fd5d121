//! The pod template's `mtls-sidecar.dev/` annotations, read into a
//! [`Request`]: what the sidecar must do and where its credentials come
//! from. Every refusal names the annotation.

use serde_json::{Map, Value};

/// The prefix every annotation of ours carries.
pub const PREFIX: &str = "mtls-sidecar.dev/";
pub const INJECT: &str = "mtls-sidecar.dev/inject";
pub const SERVER: &str = "mtls-sidecar.dev/server";
pub const ALLOW_SAN: &str = "mtls-sidecar.dev/allow-san";
pub const CLIENT: &str = "mtls-sidecar.dev/client";
pub const EXPECT_SAN: &str = "mtls-sidecar.dev/expect-san";
pub const CONFIG: &str = "mtls-sidecar.dev/config";
pub const IDENTITY: &str = "mtls-sidecar.dev/identity";
pub const SAN: &str = "mtls-sidecar.dev/san";
pub const TRUST: &str = "mtls-sidecar.dev/trust";
pub const REVOCATION: &str = "mtls-sidecar.dev/revocation";
pub const ADMIN_PORT: &str = "mtls-sidecar.dev/admin-port";
pub const DURATION: &str = "mtls-sidecar.dev/duration";
pub const CPU_REQUEST: &str = "mtls-sidecar.dev/cpu-request";
pub const CPU_LIMIT: &str = "mtls-sidecar.dev/cpu-limit";
pub const MEMORY_REQUEST: &str = "mtls-sidecar.dev/memory-request";
pub const MEMORY_LIMIT: &str = "mtls-sidecar.dev/memory-limit";
pub const EXCLUSIVE: &str = "mtls-sidecar.dev/exclusive";
/// Written by injection: the version that injected the template.
pub const INJECTED: &str = "mtls-sidecar.dev/injected";
/// Written by injection: a pod label (value `true`) that monitoring selects
/// injected pods by (the shipped PodMonitor); labels, not annotations, are
/// what selectors see.
pub const INJECTED_LABEL: &str = "mtls-sidecar.dev/injected";
/// Written by injection: what `uninject` needs to restore (JSON).
pub const UNDO: &str = "mtls-sidecar.dev/injected-undo";

/// The annotations a user may write.
const KNOWN: &[&str] = &[
    INJECT,
    SERVER,
    ALLOW_SAN,
    CLIENT,
    EXPECT_SAN,
    CONFIG,
    IDENTITY,
    SAN,
    TRUST,
    REVOCATION,
    ADMIN_PORT,
    DURATION,
    CPU_REQUEST,
    CPU_LIMIT,
    MEMORY_REQUEST,
    MEMORY_LIMIT,
    EXCLUSIVE,
];

/// The default trust ConfigMap (trust-manager's bundle in the shipped PKI).
pub const DEFAULT_TRUST: &str = "mtls-ca";
/// The default ConfigMap of `ca.crl` and `deny`, mounted optionally.
pub const DEFAULT_REVOCATION: &str = "mtls-crl";
/// The default admin port.
pub const DEFAULT_ADMIN_PORT: u16 = 9901;
/// The csi-driver certificate's default lifetime.
pub const DEFAULT_DURATION: &str = "24h";

/// An annotation that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub annotation: Option<&'static str>,
    pub detail: String,
}

impl Refusal {
    pub fn of(annotation: &'static str, detail: impl Into<String>) -> Refusal {
        Refusal {
            annotation: Some(annotation),
            detail: detail.into(),
        }
    }

    pub fn pod(detail: impl Into<String>) -> Refusal {
        Refusal {
            annotation: None,
            detail: detail.into(),
        }
    }
}

/// What the sidecar does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routes {
    /// `server`: TLS on the pod's `listen` port to `127.0.0.1:target`.
    Server {
        listen: u16,
        target: u16,
        allow_san: Vec<String>,
        /// `exclusive: "true"`: one connection at a time, an authenticated
        /// newcomer displaces the incumbent (`--exclusive`).
        exclusive: bool,
    },
    /// `client`: plaintext on `127.0.0.1:local` to TLS at `host:port`.
    Client {
        local: u16,
        host: String,
        port: u16,
        expect_san: Vec<String>,
    },
    /// `config`: a whole `run --config` file from this ConfigMap.
    Config { configmap: String },
}

/// Which issuer signs a csi-driver certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssuerKind {
    Issuer,
    ClusterIssuer,
}

impl IssuerKind {
    pub fn as_str(self) -> &'static str {
        match self {
            IssuerKind::Issuer => "Issuer",
            IssuerKind::ClusterIssuer => "ClusterIssuer",
        }
    }
}

/// Where the identity comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    /// A `kubernetes.io/tls` Secret.
    Secret(String),
    /// cert-manager's csi-driver: a key per pod, signed by this issuer,
    /// carrying these role SANs.
    Csi {
        kind: IssuerKind,
        issuer: String,
        sans: Vec<String>,
        duration: String,
    },
    /// The SPIFFE CSI driver's Workload API socket.
    Spiffe,
}

/// Resource overrides, as Kubernetes quantities.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_request: Option<String>,
    pub cpu_limit: Option<String>,
    pub memory_request: Option<String>,
    pub memory_limit: Option<String>,
}

/// Everything the annotations ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub routes: Routes,
    pub identity: Identity,
    /// The trust ConfigMap (`ca.crt`); none with `spiffe`.
    pub trust: Option<String>,
    /// The optional ConfigMap of `ca.crl`/`deny`; none with `spiffe`.
    pub revocation: Option<String>,
    pub admin_port: u16,
    pub resources: Resources,
}

/// Whether the template opted in: `inject: enabled` (`disabled` or no
/// annotation: no; anything else is an error).
pub fn opted_in(annotations: &Map<String, Value>) -> Result<bool, Refusal> {
    match text(annotations, INJECT)? {
        None => Ok(false),
        Some("enabled") => Ok(true),
        Some("disabled") => Ok(false),
        Some(other) => Err(Refusal::of(
            INJECT,
            format!("{other:?}: expected enabled or disabled"),
        )),
    }
}

/// Reads the annotations of an opted-in template.
pub fn read(annotations: &Map<String, Value>) -> Result<Request, Refusal> {
    for key in annotations.keys() {
        let ours = key.starts_with(PREFIX);
        if ours && !KNOWN.contains(&key.as_str()) && key != INJECTED && key != UNDO {
            return Err(Refusal::pod(format!(
                "unknown annotation {key:?}; known: {}",
                KNOWN.join(", ")
            )));
        }
    }
    let routes = routes(annotations)?;
    let identity = identity(annotations)?;
    let spiffe = identity == Identity::Spiffe;
    let trust = configmap_or(annotations, TRUST, DEFAULT_TRUST, spiffe)?;
    let revocation = configmap_or(annotations, REVOCATION, DEFAULT_REVOCATION, spiffe)?;
    let admin_port = match text(annotations, ADMIN_PORT)? {
        None => DEFAULT_ADMIN_PORT,
        Some(p) => port(p).map_err(|e| Refusal::of(ADMIN_PORT, e))?,
    };
    let resources = Resources {
        cpu_request: quantity(annotations, CPU_REQUEST)?,
        cpu_limit: quantity(annotations, CPU_LIMIT)?,
        memory_request: quantity(annotations, MEMORY_REQUEST)?,
        memory_limit: quantity(annotations, MEMORY_LIMIT)?,
    };
    Ok(Request {
        routes,
        identity,
        trust,
        revocation,
        admin_port,
        resources,
    })
}

/// An annotation's value: absent, or a string (anything else is refused:
/// Kubernetes annotations are strings).
fn text<'a>(
    annotations: &'a Map<String, Value>,
    key: &'static str,
) -> Result<Option<&'a str>, Refusal> {
    match annotations.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim())),
        Some(other) => Err(Refusal::of(
            key,
            format!("{other}: an annotation value must be a string"),
        )),
    }
}

fn required<'a>(
    annotations: &'a Map<String, Value>,
    key: &'static str,
    with: &'static str,
) -> Result<&'a str, Refusal> {
    match text(annotations, key)? {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(Refusal::of(key, format!("required with {with}"))),
    }
}

fn routes(annotations: &Map<String, Value>) -> Result<Routes, Refusal> {
    let server = text(annotations, SERVER)?;
    let client = text(annotations, CLIENT)?;
    let config = text(annotations, CONFIG)?;
    let conflict = |a: &'static str, b: &'static str| {
        Refusal::of(
            a,
            format!("conflicts with {b}: one sidecar runs either a shorthand route or a config file; for several routes use {CONFIG}"),
        )
    };
    let only = |key: &'static str, with: &'static str| match text(annotations, key) {
        Ok(Some(_)) => Err(Refusal::of(key, format!("only valid with {with}"))),
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    match (server, client, config) {
        (Some(_), Some(_), _) => Err(conflict(CLIENT, SERVER)),
        (Some(_), _, Some(_)) => Err(conflict(CONFIG, SERVER)),
        (_, Some(_), Some(_)) => Err(conflict(CONFIG, CLIENT)),
        (Some(s), None, None) => {
            only(EXPECT_SAN, CLIENT)?;
            let (listen, target) = server_ports(s).map_err(|e| Refusal::of(SERVER, e))?;
            let allow_san = list(required(annotations, ALLOW_SAN, SERVER)?);
            let exclusive = exclusive(annotations)?;
            Ok(Routes::Server {
                listen,
                target,
                allow_san,
                exclusive,
            })
        }
        (None, Some(c), None) => {
            only(ALLOW_SAN, SERVER)?;
            only(EXCLUSIVE, SERVER)?;
            let (local, host, port) = client_route(c).map_err(|e| Refusal::of(CLIENT, e))?;
            let expect_san = list(required(annotations, EXPECT_SAN, CLIENT)?);
            Ok(Routes::Client {
                local,
                host,
                port,
                expect_san,
            })
        }
        (None, None, Some(c)) => {
            only(ALLOW_SAN, SERVER)?;
            only(EXCLUSIVE, SERVER)?;
            only(EXPECT_SAN, CLIENT)?;
            let configmap = configmap(c).map_err(|e| Refusal::of(CONFIG, e))?;
            Ok(Routes::Config { configmap })
        }
        (None, None, None) => Err(Refusal::of(
            SERVER,
            format!("the template opted in ({INJECT}: enabled) but names no route: give {SERVER}, {CLIENT} or {CONFIG}"),
        )),
    }
}

/// `exclusive`: `"true"` or `"false"` (absent: false). A config file says
/// it per route (`exclusive = true`).
fn exclusive(annotations: &Map<String, Value>) -> Result<bool, Refusal> {
    match text(annotations, EXCLUSIVE)? {
        None | Some("false") => Ok(false),
        Some("true") => Ok(true),
        Some(other) => Err(Refusal::of(
            EXCLUSIVE,
            format!("{other:?}: expected \"true\" or \"false\""),
        )),
    }
}

fn identity(annotations: &Map<String, Value>) -> Result<Identity, Refusal> {
    let value = required(annotations, IDENTITY, INJECT)?;
    let sans = text(annotations, SAN)?;
    let duration = text(annotations, DURATION)?;
    let identity = parse_identity(value, sans, duration)?;
    if !matches!(identity, Identity::Csi { .. }) {
        if sans.is_some() {
            return Err(Refusal::of(
                SAN,
                "only valid with identity csi: (a Secret's or an SVID's SANs are the issuer's)",
            ));
        }
        if duration.is_some() {
            return Err(Refusal::of(DURATION, "only valid with identity csi:"));
        }
    }
    Ok(identity)
}

fn parse_identity(
    value: &str,
    sans: Option<&str>,
    duration: Option<&str>,
) -> Result<Identity, Refusal> {
    if value == "spiffe" {
        return Ok(Identity::Spiffe);
    }
    if let Some(name) = value.strip_prefix("secret:") {
        dns_subdomain(name).map_err(|e| Refusal::of(IDENTITY, e))?;
        return Ok(Identity::Secret(name.to_string()));
    }
    let Some(rest) = value.strip_prefix("csi:") else {
        return Err(Refusal::of(
            IDENTITY,
            format!(
                "{value:?}: expected secret:<name>, csi:<Issuer|ClusterIssuer>/<name> or spiffe"
            ),
        ));
    };
    let (kind, issuer) = match rest.split_once('/') {
        Some(("Issuer", n)) => (IssuerKind::Issuer, n),
        Some(("ClusterIssuer", n)) => (IssuerKind::ClusterIssuer, n),
        _ => {
            return Err(Refusal::of(
                IDENTITY,
                format!("{value:?}: expected csi:Issuer/<name> or csi:ClusterIssuer/<name>"),
            ))
        }
    };
    dns_subdomain(issuer).map_err(|e| Refusal::of(IDENTITY, e))?;
    let sans = list(sans.filter(|s| !s.is_empty()).ok_or_else(|| {
        Refusal::of(
            SAN,
            "required with identity csi: the role SAN(s) peers pin (a per-pod name alone would make them allow the whole namespace)",
        )
    })?);
    for san in &sans {
        san_template(san).map_err(|e| Refusal::of(SAN, e))?;
    }
    let duration = duration.unwrap_or(DEFAULT_DURATION);
    check_duration(duration).map_err(|e| Refusal::of(DURATION, e))?;
    Ok(Identity::Csi {
        kind,
        issuer: issuer.to_string(),
        sans,
        duration: duration.to_string(),
    })
}

/// The variables the csi-driver expands in names, and nothing else.
const CSI_VARIABLES: &[&str] = &[
    "${POD_NAME}",
    "${POD_NAMESPACE}",
    "${POD_UID}",
    "${SERVICE_ACCOUNT_NAME}",
];

/// A SAN for the csi-driver: no wildcard (it names this pod's role), only
/// the variables the driver expands, no separator it would split on.
fn san_template(san: &str) -> Result<(), String> {
    if san.contains('*') {
        return Err(format!(
            "{san:?}: a certificate SAN names one role, not a wildcard"
        ));
    }
    let mut rest = san;
    while let Some(at) = rest.find("${") {
        let var = &rest[at..];
        match CSI_VARIABLES.iter().find(|v| var.starts_with(**v)) {
            Some(v) => rest = &var[v.len()..],
            None => {
                return Err(format!(
                    "{san:?}: the csi-driver expands only {}",
                    CSI_VARIABLES.join(", ")
                ))
            }
        }
    }
    if san.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{san:?}: no spaces or control characters"));
    }
    Ok(())
}

/// A Go duration as cert-manager takes it: digits and h/m/s units.
fn check_duration(d: &str) -> Result<(), String> {
    let ok = !d.is_empty()
        && d.chars().all(|c| c.is_ascii_digit() || "hms".contains(c))
        && d.starts_with(|c: char| c.is_ascii_digit())
        && d.ends_with(['h', 'm', 's']);
    if ok {
        Ok(())
    } else {
        Err(format!("{d:?}: expected a duration such as 24h or 90m"))
    }
}

/// `configmap:<name>`, the default when absent; refused with `spiffe`
/// (the agent sends the trust bundle).
fn configmap_or(
    annotations: &Map<String, Value>,
    key: &'static str,
    default: &str,
    spiffe: bool,
) -> Result<Option<String>, Refusal> {
    match (text(annotations, key)?, spiffe) {
        (Some(_), true) => Err(Refusal::of(
            key,
            "conflicts with identity spiffe: the agent sends the trust bundle",
        )),
        (None, true) => Ok(None),
        (None, false) => Ok(Some(default.to_string())),
        (Some(v), false) => configmap(v).map(Some).map_err(|e| Refusal::of(key, e)),
    }
}

fn configmap(value: &str) -> Result<String, String> {
    let name = value
        .strip_prefix("configmap:")
        .ok_or_else(|| format!("{value:?}: expected configmap:<name>"))?;
    dns_subdomain(name)?;
    Ok(name.to_string())
}

fn quantity(
    annotations: &Map<String, Value>,
    key: &'static str,
) -> Result<Option<String>, Refusal> {
    let Some(q) = text(annotations, key)? else {
        return Ok(None);
    };
    let digits = q.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &q[digits.len()..];
    let units = ["", "m", "k", "M", "G", "Ki", "Mi", "Gi"];
    let number = !digits.is_empty()
        && digits.chars().all(|c| c.is_ascii_digit() || c == '.')
        && digits.parse::<f64>().is_ok_and(|n| n > 0.0);
    if number && units.contains(&unit) {
        Ok(Some(q.to_string()))
    } else {
        Err(Refusal::of(
            key,
            format!("{q:?}: expected a Kubernetes quantity such as 20m, 64Mi"),
        ))
    }
}

/// A comma-separated list, blanks dropped.
fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

pub fn port(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{p:?}: expected a port number 1-65535")),
    }
}

/// `<listen-port>:<target-port>`.
fn server_ports(value: &str) -> Result<(u16, u16), String> {
    let (l, t) = value
        .split_once(':')
        .ok_or_else(|| format!("{value:?}: expected <listen-port>:<target-port>"))?;
    let (listen, target) = (port(l)?, port(t)?);
    if listen == target {
        return Err(format!(
            "{value:?}: the listen port and the target port must differ (the application binds the target on loopback)"
        ));
    }
    Ok((listen, target))
}

/// `<local-port>:<host>:<port>` (an IPv6 host in brackets).
fn client_route(value: &str) -> Result<(u16, String, u16), String> {
    let bad = || format!("{value:?}: expected <local-port>:<host>:<port>");
    let (local, rest) = value.split_once(':').ok_or_else(bad)?;
    let (host, remote) = rest.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = !host.is_empty()
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-.[]:".contains(c));
    if !host_ok {
        return Err(bad());
    }
    Ok((port(local)?, host.to_string(), port(remote)?))
}

/// A Kubernetes object name (RFC 1123 subdomain).
pub fn dns_subdomain(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!("{name:?}: not a valid Kubernetes object name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    fn refusal(v: Value) -> Refusal {
        read(&map(v)).unwrap_err()
    }

    #[test]
    fn a_server_route_with_a_secret() {
        let r = read(&map(json!({
            INJECT: "enabled", SERVER: "6877:2100", ALLOW_SAN: "a.svc, b.svc",
            IDENTITY: "secret:replica-mtls"
        })))
        .unwrap();
        assert_eq!(
            r.routes,
            Routes::Server {
                listen: 6877,
                target: 2100,
                allow_san: vec!["a.svc".into(), "b.svc".into()],
                exclusive: false,
            }
        );
        assert_eq!(r.identity, Identity::Secret("replica-mtls".into()));
        assert_eq!(r.trust.as_deref(), Some("mtls-ca"));
        assert_eq!(r.revocation.as_deref(), Some("mtls-crl"));
        assert_eq!(r.admin_port, 9901);
    }

    #[test]
    fn each_refusal_names_its_annotation() {
        let base =
            json!({INJECT: "enabled", SERVER: "6877:2100", ALLOW_SAN: "a", IDENTITY: "secret:s"});
        let with = |k: &str, v: &str| {
            let mut m = base.clone();
            m[k] = json!(v);
            m
        };
        let without = |k: &str| {
            let mut m = base.clone();
            m.as_object_mut().unwrap().remove(k);
            m
        };
        let cases = [
            (with(SERVER, "6877"), SERVER),
            (with(SERVER, "2100:2100"), SERVER),
            (with(SERVER, "0:1"), SERVER),
            (without(ALLOW_SAN), ALLOW_SAN),
            (with(CLIENT, "1:h:2"), CLIENT),
            (with(CONFIG, "configmap:c"), CONFIG),
            (with(EXPECT_SAN, "x"), EXPECT_SAN),
            (without(IDENTITY), IDENTITY),
            (with(IDENTITY, "vault:x"), IDENTITY),
            (with(IDENTITY, "csi:Foo/x"), IDENTITY),
            (with(IDENTITY, "csi:Issuer/x"), SAN),
            (with(SAN, "a.svc"), SAN),
            (with(TRUST, "secret:x"), TRUST),
            (with(REVOCATION, "configmap:Bad_Name"), REVOCATION),
            (with(ADMIN_PORT, "70000"), ADMIN_PORT),
            (with(MEMORY_LIMIT, "lots"), MEMORY_LIMIT),
            (with(DURATION, "1d"), DURATION),
            (with(EXCLUSIVE, "yes"), EXCLUSIVE),
        ];
        for (input, key) in cases {
            let r = refusal(input.clone());
            assert_eq!(r.annotation, Some(key), "{input}: {r:?}");
        }
        let mut spiffe = with(IDENTITY, "spiffe");
        spiffe[TRUST] = json!("configmap:x");
        assert_eq!(refusal(spiffe).annotation, Some(TRUST));
        let mut csi = with(IDENTITY, "csi:ClusterIssuer/ca");
        csi[SAN] = json!("${POD_IP}.svc");
        assert_eq!(refusal(csi.clone()).annotation, Some(SAN));
        csi[SAN] = json!("*.ns.svc");
        assert_eq!(refusal(csi).annotation, Some(SAN));
        let unknown = refusal(with("mtls-sidecar.dev/alow-san", "x"));
        assert!(unknown.detail.contains("alow-san"), "{unknown:?}");
        assert_eq!(
            opted_in(&map(json!({INJECT: "yes"})))
                .unwrap_err()
                .annotation,
            Some(INJECT)
        );
    }

    #[test]
    fn exclusive_is_a_server_route_flag() {
        let server = |v: &str| {
            read(&map(json!({
                SERVER: "6877:2100", ALLOW_SAN: "a", IDENTITY: "secret:s", EXCLUSIVE: v
            })))
        };
        let on = server("true").unwrap();
        assert!(matches!(
            on.routes,
            Routes::Server {
                exclusive: true,
                ..
            }
        ));
        let off = server("false").unwrap();
        assert!(matches!(
            off.routes,
            Routes::Server {
                exclusive: false,
                ..
            }
        ));
        assert_eq!(server("1").unwrap_err().annotation, Some(EXCLUSIVE));
        let client = refusal(json!({
            CLIENT: "1:h:2", EXPECT_SAN: "a", IDENTITY: "secret:s", EXCLUSIVE: "true"
        }));
        assert_eq!(client.annotation, Some(EXCLUSIVE), "{client:?}");
        let config = refusal(json!({
            CONFIG: "configmap:c", IDENTITY: "secret:s", EXCLUSIVE: "true"
        }));
        assert_eq!(config.annotation, Some(EXCLUSIVE), "{config:?}");
    }

    #[test]
    fn a_client_route_and_a_csi_identity() {
        let r = read(&map(json!({
            CLIENT: "2100:replica-0.replica.env-1.svc:6877", EXPECT_SAN: "replica.env-1.svc",
            IDENTITY: "csi:ClusterIssuer/mtls-ca", SAN: "controller.${POD_NAMESPACE}.svc",
            DURATION: "12h"
        })))
        .unwrap();
        assert_eq!(
            r.routes,
            Routes::Client {
                local: 2100,
                host: "replica-0.replica.env-1.svc".into(),
                port: 6877,
                expect_san: vec!["replica.env-1.svc".into()]
            }
        );
        assert_eq!(
            r.identity,
            Identity::Csi {
                kind: IssuerKind::ClusterIssuer,
                issuer: "mtls-ca".into(),
                sans: vec!["controller.${POD_NAMESPACE}.svc".into()],
                duration: "12h".into()
            }
        );
    }
}
