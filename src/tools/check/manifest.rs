//! `check --manifest FILE...`: rendered workloads preflighted offline.
//! For each opted-in (or injected) pod template: the Secrets and
//! ConfigMaps its annotations reference are among the manifests (a
//! cert-manager `Certificate` counts as the Secret it writes, its
//! `dnsNames` and `uris` as that Secret's SANs; a trust-manager `Bundle`
//! writing `ca.crt` as the trust ConfigMap); its
//! certificate's SANs satisfy the patterns of the workloads it dials or
//! that dial it (a client route's `<host>:<port>` → Service → selector →
//! the server workload); and Services reach the `mtls` port, not the
//! application's loopback port. The annotations are read by `inject`'s
//! own parser, and SANs matched by the sidecar's own [`SanPattern`].

use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value};

use crate::identity::{normal_dns, CertInfo, SanNames, SanPattern};
use crate::tools::inject::annotations::{self, Identity, IssuerKind, Request, Routes};
use crate::tools::inject::{
    annotations_of, injected_version, manifest, run as inject_run, sidecar,
};

/// The namespace of an object that names none.
const DEFAULT_NAMESPACE: &str = "default";

/// One workload's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Verdict {
    Pass,
    Warn,
    Fail,
}

impl Verdict {
    fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Warn => "WARN",
            Verdict::Fail => "FAIL",
        }
    }
}

/// What was found about one workload.
#[derive(Debug, Clone)]
pub struct Line {
    pub object: String,
    pub fails: Vec<String>,
    pub warns: Vec<String>,
    pub passes: Vec<String>,
}

impl Line {
    pub fn verdict(&self) -> Verdict {
        if !self.fails.is_empty() {
            Verdict::Fail
        } else if !self.warns.is_empty() {
            Verdict::Warn
        } else {
            Verdict::Pass
        }
    }

    /// `FAIL  Kind ns/name: reason; reason`.
    pub fn to_text(&self) -> String {
        let reasons: Vec<&str> = self
            .fails
            .iter()
            .chain(&self.warns)
            .chain(&self.passes)
            .map(String::as_str)
            .collect();
        let reasons = if reasons.is_empty() {
            "nothing to check".to_string()
        } else {
            reasons.join("; ")
        };
        format!("{}  {}: {}", self.verdict().label(), self.object, reasons)
    }
}

/// An opted-in pod template and what its annotations ask for.
struct Workload {
    object: String,
    namespace: String,
    labels: Map<String, Value>,
    template: Value,
    request: Result<Request, String>,
}

/// Every object of the inputs, `List`s flattened.
struct Objects {
    all: Vec<Value>,
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

fn kind(v: &Value) -> &str {
    text(v, &["kind"]).unwrap_or_default()
}

/// The group of an object's `apiVersion` (`cert-manager.io/v1` ->
/// `cert-manager.io`; empty for the core group).
fn api_group(v: &Value) -> &str {
    text(v, &["apiVersion"])
        .and_then(|a| a.rsplit_once('/'))
        .map_or("", |(group, _)| group)
}

fn name(v: &Value) -> &str {
    text(v, &["metadata", "name"]).unwrap_or_default()
}

fn namespace(v: &Value) -> &str {
    text(v, &["metadata", "namespace"]).unwrap_or(DEFAULT_NAMESPACE)
}

fn flatten(doc: Value, out: &mut Vec<Value>) {
    let is_list = kind(&doc).ends_with("List") && doc.get("items").is_some_and(Value::is_array);
    if !is_list {
        out.push(doc);
        return;
    }
    if let Some(Value::Array(items)) = doc.get("items").cloned() {
        for item in items {
            flatten(item, out);
        }
    }
}

impl Objects {
    fn find(&self, kind_: &str, ns: Option<&str>, name_: &str) -> Option<&Value> {
        self.all.iter().find(|o| {
            kind(o) == kind_ && name(o) == name_ && ns.is_none_or(|ns| namespace(o) == ns)
        })
    }

    /// The cert-manager `Certificate` in `ns` that writes Secret `secret`.
    fn certificate_for(&self, ns: &str, secret: &str) -> Option<&Value> {
        self.all.iter().find(|o| {
            kind(o) == "Certificate"
                && api_group(o) == "cert-manager.io"
                && namespace(o) == ns
                && text(o, &["spec", "secretName"]) == Some(secret)
        })
    }

    /// Whether Secret `name` in `ns` is among the manifests, or a
    /// cert-manager `Certificate` there writes it.
    fn has_secret(&self, ns: &str, name_: &str) -> bool {
        self.find("Secret", Some(ns), name_).is_some() || self.certificate_for(ns, name_).is_some()
    }

    /// Whether ConfigMap `name` in `ns` is among the manifests, or (when
    /// `bundle_key` is given) a trust-manager `Bundle` of that name writes
    /// one holding that key (cluster-scoped: it writes its ConfigMap in
    /// the namespaces its `namespaceSelector` picks, which is not judged
    /// here).
    fn has_configmap(&self, ns: &str, name_: &str, bundle_key: Option<&str>) -> bool {
        self.find("ConfigMap", Some(ns), name_).is_some()
            || bundle_key.is_some_and(|key| {
                self.all.iter().any(|o| {
                    kind(o) == "Bundle"
                        && api_group(o) == "trust.cert-manager.io"
                        && name(o) == name_
                        && text(o, &["spec", "target", "configMap", "key"]) == Some(key)
                })
            })
    }

    fn services(&self) -> impl Iterator<Item = &Value> {
        self.all.iter().filter(|o| kind(o) == "Service")
    }
}

/// The workload of `object`, when it holds a pod template that opted in or
/// was injected.
fn workload(object: &Value) -> Option<Workload> {
    let path = manifest::template_path(kind(object))?;
    let template = path.iter().try_fold(object, |v, k| v.get(*k))?;
    let ann = annotations_of(template)?;
    let opted = annotations::opted_in(ann);
    if opted == Ok(false) && injected_version(template).is_none() {
        return None;
    }
    let request = opted
        .and_then(|_| annotations::read(ann))
        .map_err(|r| match r.annotation {
            Some(a) => format!("annotation {a}: {}", r.detail),
            None => r.detail,
        });
    let labels = template
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    Some(Workload {
        object: manifest::describe(object),
        namespace: namespace(object).to_string(),
        labels,
        template: template.clone(),
        request,
    })
}

/// The certificate SANs a workload presents, split DNS/URI; `Err` when
/// they cannot be known (the reason, or `None` when already reported).
struct Sans {
    dns: Vec<String>,
    uris: Vec<String>,
}

impl Sans {
    fn matched_by(&self, patterns: &[String]) -> bool {
        let names = SanNames::new(&self.dns, &self.uris);
        patterns
            .iter()
            .filter_map(|p| p.parse::<SanPattern>().ok())
            .any(|p| p.matches_names(&names))
    }

    fn show(&self) -> String {
        let all: Vec<&str> = self
            .dns
            .iter()
            .chain(&self.uris)
            .map(String::as_str)
            .collect();
        format!("[{}]", all.join(", "))
    }
}

/// A csi `san` annotation expanded as the csi-driver would for this
/// workload; per-pod variables (`${POD_NAME}`, `${POD_UID}`) cannot be
/// known offline, so such SANs are left out.
fn expand_csi(sans: &[String], ns: &str, service_account: &str) -> Sans {
    let mut out = Sans {
        dns: Vec::new(),
        uris: Vec::new(),
    };
    for san in sans {
        if san.contains("${POD_NAME}") || san.contains("${POD_UID}") {
            continue;
        }
        let s = san
            .replace("${POD_NAMESPACE}", ns)
            .replace("${SERVICE_ACCOUNT_NAME}", service_account);
        if s.contains("://") {
            out.uris.push(s);
        } else {
            out.dns.push(normal_dns(&s));
        }
    }
    out
}

/// The SANs of a `kubernetes.io/tls` Secret's `tls.crt` (`data` base64,
/// or `stringData`).
fn secret_sans(secret: &Value) -> Result<Sans, String> {
    let pem = match text(secret, &["data", "tls.crt"]) {
        Some(b64) => {
            let compact: String = b64.chars().filter(|c| !c.is_whitespace()).collect();
            base64::engine::general_purpose::STANDARD
                .decode(compact)
                .map_err(|e| format!("data.tls.crt is not base64: {e}"))?
        }
        None => text(secret, &["stringData", "tls.crt"])
            .ok_or("has no tls.crt")?
            .as_bytes()
            .to_vec(),
    };
    use rustls_pki_types::pem::PemObject;
    let der = rustls_pki_types::CertificateDer::pem_slice_iter(&pem)
        .next()
        .ok_or("tls.crt holds no PEM certificate")?
        .map_err(|e| format!("tls.crt: {e:?}"))?;
    let info = CertInfo::parse(&der).map_err(|e| format!("tls.crt: {e}"))?;
    Ok(Sans {
        dns: info.dns_sans,
        uris: info.uri_sans,
    })
}

/// The SANs a cert-manager `Certificate` asks for (`dnsNames`, `uris`):
/// those of the Secret it writes.
fn certificate_sans(cert: &Value) -> Sans {
    let list = |key: &str| -> Vec<String> {
        cert.pointer(&format!("/spec/{key}"))
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    };
    Sans {
        dns: list("dnsNames").iter().map(|d| normal_dns(d)).collect(),
        uris: list("uris"),
    }
}

/// The SANs `w` presents, or why they are unknown (`None`: reported
/// elsewhere, e.g. a missing Secret).
fn sans_of(w: &Workload, req: &Request, objects: &Objects) -> Result<Sans, Option<String>> {
    match &req.identity {
        Identity::Secret(s) => match objects.find("Secret", Some(&w.namespace), s) {
            Some(secret) => {
                secret_sans(secret).map_err(|e| Some(format!("Secret {}/{s} {e}", w.namespace)))
            }
            None => objects
                .certificate_for(&w.namespace, s)
                .map(certificate_sans)
                .ok_or(None),
        },
        Identity::Csi { sans, .. } => {
            let sa = text(&w.template, &["spec", "serviceAccountName"]).unwrap_or("default");
            Ok(expand_csi(sans, &w.namespace, sa))
        }
        Identity::Spiffe => Err(Some(
            "identity spiffe: its SVID's SANs are the SPIFFE agent's, not checked offline".into(),
        )),
    }
}

/// The route's SAN patterns that the sidecar would refuse at start-up.
fn check_patterns(req: &Request, line: &mut Line) {
    let (key, patterns) = match &req.routes {
        Routes::Server { allow_san, .. } => ("allow-san", allow_san),
        Routes::Client { expect_san, .. } => ("expect-san", expect_san),
        Routes::Config { .. } => return,
    };
    for p in patterns {
        if let Err(e) = p.parse::<SanPattern>() {
            line.fails.push(format!("{key} {p:?}: {e}"));
        }
    }
}

/// The config ConfigMap's file, validated as `run --config` validates it
/// at start-up: its `drain_timeout`.
fn config_file_drain(cm: &Value) -> Result<Duration, String> {
    let file = sidecar::CONFIG_FILE;
    let text = text(cm, &["data", file]).ok_or_else(|| format!("has no data.{file}"))?;
    let path = std::path::Path::new(sidecar::CONFIG_DIR).join(file);
    crate::config::FileSpec::parse(text, &path)
        .map(|settings| settings.drain_timeout)
        .map_err(|e| e.to_string())
}

/// A config file's `drain_timeout` against the pod's grace period: the
/// sidecar drains after the application has exited, within the same grace
/// period, so it must leave the margin the drain injection derives leaves
/// (`sidecar::drain_seconds`), or the kubelet kills it mid-drain.
fn drain_fits(template: &Value, drain: Duration) -> Result<(), String> {
    let grace = sidecar::grace_seconds(template.get("spec").unwrap_or(&Value::Null));
    let most = sidecar::drain_seconds(grace);
    if drain <= Duration::from_secs(u64::try_from(most).unwrap_or(0)) {
        return Ok(());
    }
    Err(format!(
        "drain_timeout {drain:?} is longer than the {most}s that terminationGracePeriodSeconds {grace} leaves the sidecar (5 s to close and exit; half the grace under 10 s): the kubelet would kill it mid-drain; lower drain_timeout or raise the grace period"
    ))
}

/// Check 1: the objects the annotations reference.
fn check_references(w: &Workload, req: &Request, objects: &Objects, line: &mut Line) {
    let ns = w.namespace.as_str();
    let mut need = |kind_: &str, name_: &str, what: &str| {
        let present = match kind_ {
            "Secret" => objects.has_secret(ns, name_),
            // The trust ConfigMap may be a Bundle's, holding `ca.crt`.
            "ConfigMap" => objects.has_configmap(ns, name_, (what == "trust").then_some("ca.crt")),
            _ => objects.find(kind_, Some(ns), name_).is_some(),
        };
        if !present {
            line.fails.push(format!(
                "{kind_} {ns}/{name_} ({what}) is not among the manifests"
            ));
        }
    };
    if let Identity::Secret(s) = &req.identity {
        need("Secret", s, "identity");
    }
    if let Some(t) = &req.trust {
        need("ConfigMap", t, "trust");
    }
    if let Routes::Config { configmap } = &req.routes {
        match objects.find("ConfigMap", Some(ns), configmap) {
            None => need("ConfigMap", configmap, "config"),
            Some(cm) => {
                if let Err(e) =
                    config_file_drain(cm).and_then(|drain| drain_fits(&w.template, drain))
                {
                    line.fails
                        .push(format!("ConfigMap {ns}/{configmap} (config): {e}"));
                }
            }
        }
    }
    let explicit_revocation =
        annotations_of(&w.template).is_some_and(|a| a.contains_key(annotations::REVOCATION));
    if let Some(r) = &req.revocation {
        if !objects.has_configmap(ns, r, None) {
            let msg = format!("ConfigMap {ns}/{r} (revocation) is not among the manifests");
            if explicit_revocation {
                line.fails.push(msg);
            } else {
                line.warns
                    .push(format!("{msg} (the default, mounted optionally)"));
            }
        }
    }
    if let Identity::Csi {
        kind: k, issuer, ..
    } = &req.identity
    {
        let found = match k {
            IssuerKind::Issuer => objects.find("Issuer", Some(ns), issuer),
            IssuerKind::ClusterIssuer => objects.find("ClusterIssuer", None, issuer),
        };
        if found.is_none() {
            line.warns.push(format!(
                "{} {issuer} (csi identity) is not among the manifests",
                k.as_str()
            ));
        }
    }
}

/// A client route's host as `(service, namespace)`: `svc`, `svc.ns`,
/// `svc.ns.svc[.cluster.local]`, or a StatefulSet pod's
/// `pod.svc.ns.svc[.cluster.local]`.
pub fn service_of_host(host: &str, client_ns: &str) -> Option<(String, String)> {
    let h = host.trim_end_matches('.').to_ascii_lowercase();
    let h = h.strip_suffix(".cluster.local").unwrap_or(&h);
    let h = h.strip_suffix(".svc").unwrap_or(h);
    let parts: Vec<&str> = h.split('.').collect();
    match parts.as_slice() {
        [svc] => Some((svc.to_string(), client_ns.to_string())),
        [svc, ns] | [_, svc, ns] => Some((svc.to_string(), ns.to_string())),
        _ => None,
    }
}

/// Whether `labels` hold every entry of a Service's `selector` (an empty
/// or missing selector selects nothing here: its endpoints are manual).
fn selects(service: &Value, labels: &Map<String, Value>) -> bool {
    match service
        .get("spec")
        .and_then(|s| s.get("selector"))
        .and_then(Value::as_object)
    {
        Some(sel) if !sel.is_empty() => sel.iter().all(|(k, v)| labels.get(k) == Some(v)),
        _ => false,
    }
}

/// A Service port's `targetPort` as a number on `w`'s pod: a number, or a
/// name looked up among its containers' ports (`mtls` is the server
/// route's listen port once injected).
fn target_port(port: &Value, w: &Workload, listen: u16) -> Result<u16, String> {
    let target = port.get("targetPort").or_else(|| port.get("port"));
    match target {
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .ok_or_else(|| format!("targetPort {n} is not a port")),
        Some(Value::String(s)) => {
            if let Ok(n) = s.parse::<u16>() {
                return Ok(n);
            }
            if s == "mtls" {
                return Ok(listen);
            }
            named_port(&w.template, s)
                .ok_or_else(|| format!("targetPort {s:?} names no port of the pod"))
        }
        _ => Err("a port with no port number".into()),
    }
}

fn named_port(template: &Value, wanted: &str) -> Option<u16> {
    let spec = template.get("spec")?;
    ["initContainers", "containers"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten()
        .filter_map(|c| c.get("ports").and_then(Value::as_array))
        .flatten()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(wanted))
        .and_then(|p| p.get("containerPort")?.as_u64())
        .and_then(|n| u16::try_from(n).ok())
}

fn service_name(s: &Value) -> String {
    format!("Service {}/{}", namespace(s), name(s))
}

fn ports(service: &Value) -> impl Iterator<Item = &Value> {
    service
        .get("spec")
        .and_then(|s| s.get("ports"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Check 3: every Service selecting a server workload reaches its `mtls`
/// port, never the application's loopback target port.
fn check_service_ports(w: &Workload, objects: &Objects, line: &mut Line) {
    let Ok(Request {
        routes: Routes::Server { listen, target, .. },
        ..
    }) = &w.request
    else {
        return;
    };
    for s in objects.services() {
        if namespace(s) != w.namespace || !selects(s, &w.labels) {
            continue;
        }
        for p in ports(s) {
            match target_port(p, w, *listen) {
                Ok(t) if t == *target => line.fails.push(format!(
                    "{} targetPort {t} reaches the application's loopback port, not mtls {listen}",
                    service_name(s)
                )),
                Ok(_) => {}
                Err(e) => line.fails.push(format!("{}: {e}", service_name(s))),
            }
        }
    }
}

/// A dialed workload with no shorthand server route: its routes live in a
/// config file (not matched offline: WARN), or it has none (FAIL).
fn unchecked_peer(dial: &str, server: &Workload, routes: &Routes, line: &mut Line) {
    if matches!(routes, Routes::Config { .. }) {
        line.warns.push(format!(
            "dials {dial} → {}, whose routes come from its config file: SANs and ports not checked",
            server.object
        ));
    } else {
        line.fails.push(format!(
            "dials {dial} → {}, which has no server route",
            server.object
        ));
    }
}

/// Check 2: a client route's peer, found through its Service, accepts this
/// workload's SANs and presents SANs the route expects.
fn check_dial(
    w: &Workload,
    req: &Request,
    workloads: &[Workload],
    objects: &Objects,
    line: &mut Line,
) {
    let Routes::Client {
        host,
        port,
        expect_san,
        ..
    } = &req.routes
    else {
        return;
    };
    let dial = format!("{host}:{port}");
    let service = service_of_host(host, &w.namespace)
        .and_then(|(svc, ns)| objects.find("Service", Some(&ns), &svc));
    let Some(service) = service else {
        line.warns.push(format!(
            "dials {dial}, which is no Service among the manifests: its SANs are not checked"
        ));
        return;
    };
    let Some(sport) =
        ports(service).find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(*port)))
    else {
        line.fails.push(format!(
            "dials {dial}, but {} has no port {port}",
            service_name(service)
        ));
        return;
    };
    let servers: Vec<&Workload> = workloads
        .iter()
        .filter(|s| s.namespace == namespace(service) && selects(service, &s.labels))
        .collect();
    if servers.is_empty() {
        line.warns.push(format!(
            "dials {dial}: {} selects no injected workload among the manifests",
            service_name(service)
        ));
        return;
    }
    let mine = sans_of(w, req, objects);
    for server in servers {
        let Ok(sreq) = &server.request else { continue };
        let Routes::Server {
            listen, allow_san, ..
        } = &sreq.routes
        else {
            unchecked_peer(&dial, server, &sreq.routes, line);
            continue;
        };
        match target_port(sport, server, *listen) {
            Ok(t) if t == *listen => {}
            Ok(t) => line.fails.push(format!(
                "dials {dial} → {} targetPort {t}, not {}'s mtls port {listen}",
                service_name(service),
                server.object
            )),
            Err(e) => line
                .fails
                .push(format!("dials {dial} → {}: {e}", service_name(service))),
        }
        match sans_of(server, sreq, objects) {
            Ok(theirs) if theirs.matched_by(expect_san) => line.passes.push(format!(
                "{}'s SANs {} match expect-san",
                server.object,
                theirs.show()
            )),
            Ok(theirs) => line.fails.push(format!(
                "expect-san {} does not match {}'s SANs {}",
                expect_san.join(","),
                server.object,
                theirs.show()
            )),
            Err(Some(why)) => line.warns.push(format!("{}: {why}", server.object)),
            Err(None) => line.warns.push(format!(
                "{}'s SANs are unknown (its identity is missing)",
                server.object
            )),
        }
        match &mine {
            Ok(ours) if ours.matched_by(allow_san) => line.passes.push(format!(
                "{}'s allow-san accepts SANs {}",
                server.object,
                ours.show()
            )),
            Ok(ours) => line.fails.push(format!(
                "{}'s allow-san {} refuses this workload's SANs {}",
                server.object,
                allow_san.join(","),
                ours.show()
            )),
            Err(_) => {}
        }
    }
}

/// Every check for every workload of `docs`.
pub fn judge(docs: Vec<Value>) -> Vec<Line> {
    let mut all = Vec::new();
    for d in docs {
        flatten(d, &mut all);
    }
    let objects = Objects { all };
    let workloads: Vec<Workload> = objects.all.iter().filter_map(workload).collect();
    let mut lines = Vec::new();
    for w in &workloads {
        let mut line = Line {
            object: w.object.clone(),
            fails: Vec::new(),
            warns: Vec::new(),
            passes: Vec::new(),
        };
        match &w.request {
            Err(e) => line.fails.push(e.clone()),
            Ok(req) => {
                check_patterns(req, &mut line);
                check_references(w, req, &objects, &mut line);
                check_dial(w, req, &workloads, &objects, &mut line);
                check_service_ports(w, &objects, &mut line);
                if let Err(Some(why)) = sans_of(w, req, &objects) {
                    if !matches!(req.identity, Identity::Spiffe) {
                        line.fails.push(why);
                    }
                }
            }
        }
        if line.fails.is_empty() && line.passes.is_empty() {
            line.passes.push("references present".into());
        }
        lines.push(line);
    }
    lines
}

/// `check --manifest FILE...`: 0 all pass (or warn), 1 a FAIL, 2 an input
/// that cannot be read or parsed.
pub fn run(files: &[String]) -> u8 {
    let mut docs = Vec::new();
    for f in files {
        let parsed = inject_run::read_input(f)
            .and_then(|t| inject_run::parse(&t).map_err(|e| format!("{f}: {e}")));
        match parsed {
            Ok((_, d)) => docs.extend(d),
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        }
    }
    let lines = judge(docs);
    if lines.is_empty() {
        println!("WARN  no opted-in or injected pod template in the manifests");
    }
    for l in &lines {
        println!("{}", l.to_text());
    }
    exit_code(&lines)
}

fn exit_code(lines: &[Line]) -> u8 {
    if lines.iter().any(|l| l.verdict() == Verdict::Fail) {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_drain_must_leave_the_margin_injection_leaves() {
        let pod = |grace: Option<i64>| match grace {
            Some(g) => serde_json::json!({"spec": {"terminationGracePeriodSeconds": g}}),
            None => serde_json::json!({}),
        };
        let s = Duration::from_secs;
        assert!(drain_fits(&pod(None), s(25)).is_ok());
        assert!(drain_fits(&pod(None), s(26)).is_err());
        assert!(drain_fits(&pod(Some(60)), s(55)).is_ok());
        assert!(drain_fits(&pod(Some(60)), Duration::from_millis(55_001)).is_err());
        assert!(drain_fits(&pod(Some(8)), s(4)).is_ok());
        assert!(drain_fits(&pod(Some(8)), s(5)).is_err());
        assert!(drain_fits(&pod(Some(-1)), Duration::ZERO).is_ok());
        assert!(drain_fits(&pod(Some(-1)), Duration::from_millis(1)).is_err());
        let e = drain_fits(&pod(Some(30)), s(30)).unwrap_err();
        assert!(
            e.starts_with("drain_timeout 30s is longer than the 25s"),
            "{e}"
        );
    }

    #[test]
    fn hosts_name_their_service() {
        let s = |h: &str| service_of_host(h, "here");
        assert_eq!(s("replica"), Some(("replica".into(), "here".into())));
        assert_eq!(s("replica.env-1"), Some(("replica".into(), "env-1".into())));
        assert_eq!(
            s("replica-0.replica.env-1.svc.cluster.local"),
            Some(("replica".into(), "env-1".into()))
        );
        assert_eq!(s("a.b.c.d.e"), None);
    }

    #[test]
    fn csi_sans_expand_namespace_and_service_account() {
        let sans = expand_csi(
            &[
                "Replica.${POD_NAMESPACE}.svc".into(),
                "spiffe://td/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}".into(),
                "${POD_NAME}.replica.${POD_NAMESPACE}.svc".into(),
            ],
            "env-1",
            "r",
        );
        assert_eq!(sans.dns, vec!["replica.env-1.svc".to_string()]);
        assert_eq!(sans.uris, vec!["spiffe://td/ns/env-1/sa/r".to_string()]);
        assert!(sans.matched_by(&["spiffe://td/ns/env-1/sa/*".into()]));
        assert!(!sans.matched_by(&["replica.env-2.svc".into()]));
    }
}
