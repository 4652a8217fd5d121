//! `check --manifest` (docs/injection.md, "Preflight: check --manifest"):
//! rendered workloads judged offline through the binary. A replica and a
//! controller that fit pass; each broken fact (a missing Secret, SANs
//! refused in either direction, a Service aimed at the application's port)
//! is a FAIL naming it, exit 1; unreadable input is exit 2. A cert-manager
//! `Certificate` and a trust-manager `Bundle` count as the Secret and the
//! ConfigMap they write.

use crate::common;

use common::{run_bin, Pki};
use mtls_sidecar::pki::{LeafSpec, Role};
use serde_json::{json, Value};

const NS: &str = "env-1";
/// The replica's role SAN, which the controller expects.
const REPLICA_SAN: &str = "replica.env-1.svc";
const CONTROLLER_SAN: &str = "controller.env-1.svc";

/// A `kubernetes.io/tls` Secret holding a leaf with these DNS SANs.
fn tls_secret(pki: &Pki, name: &str, sans: &[&str]) -> Value {
    use base64::Engine;
    let mut spec = LeafSpec::dns(sans[0], Role::Both, 30);
    spec.dns = sans.iter().map(|s| s.to_string()).collect();
    let leaf = pki.issue(&spec);
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NS},
        "data": {"tls.crt": b64(&leaf.cert_pem), "tls.key": b64(&leaf.key_pem)}})
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS}, "data": {"ca.crt": "-"}})
}

fn service(target_port: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "replica", "namespace": NS},
        "spec": {"clusterIP": "None", "selector": {"app": "replica"},
            "ports": [{"name": "mtls", "port": 6877, "targetPort": target_port}]}})
}

fn replica(allow_san: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "replica", "namespace": NS},
        "spec": {"serviceName": "replica", "selector": {"matchLabels": {"app": "replica"}},
            "template": {"metadata": {"labels": {"app": "replica"}, "annotations": {
                "mtls-sidecar.dev/inject": "enabled",
                "mtls-sidecar.dev/server": "6877:2100",
                "mtls-sidecar.dev/allow-san": allow_san,
                "mtls-sidecar.dev/identity": "secret:replica-mtls"}},
            "spec": {"containers": [{"name": "replica", "image": "r",
                "ports": [{"name": "app", "containerPort": 2100}]}]}}}})
}

fn controller(expect_san: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "controller", "namespace": NS},
        "spec": {"selector": {"matchLabels": {"app": "controller"}},
            "template": {"metadata": {"labels": {"app": "controller"}, "annotations": {
                "mtls-sidecar.dev/inject": "enabled",
                "mtls-sidecar.dev/client": "2100:replica-0.replica.env-1.svc:6877",
                "mtls-sidecar.dev/expect-san": expect_san,
                "mtls-sidecar.dev/identity": "secret:controller-mtls"}},
            "spec": {"containers": [{"name": "controller", "image": "c"}]}}}})
}

/// The pair that fits, as a list of objects to break one at a time.
fn good(pki: &Pki) -> Vec<Value> {
    vec![
        configmap("mtls-ca"),
        configmap("mtls-crl"),
        tls_secret(pki, "replica-mtls", &[REPLICA_SAN]),
        tls_secret(pki, "controller-mtls", &[CONTROLLER_SAN]),
        service(json!("mtls")),
        replica(CONTROLLER_SAN),
        controller(REPLICA_SAN),
    ]
}

/// The objects as one multi-document YAML file; the binary's exit code and
/// output.
fn check(docs: &[Value]) -> (i32, String) {
    run_on_file("check", &mtls_sidecar::tools::inject::yaml::emit(docs))
}

/// `mtls-sidecar check --manifest FILE` or `inject -f FILE` on `text`.
fn run_on_file(command: &str, text: &str) -> (i32, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rendered.yaml");
    std::fs::write(&path, text).expect("write");
    let flag = if command == "check" {
        "--manifest"
    } else {
        "-f"
    };
    run_bin(&[command, flag, path.to_str().expect("utf-8 path")])
}

/// The output line of `object` (`Kind ns/name`).
fn line_of<'a>(out: &'a str, object: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(&format!(" {object}: ")))
        .unwrap_or_else(|| panic!("no line for {object} in:\n{out}"))
}

fn replace(mut docs: Vec<Value>, kind: &str, name: &str, with: Option<Value>) -> Vec<Value> {
    let at = docs
        .iter()
        .position(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .expect("object present");
    match with {
        Some(v) => docs[at] = v,
        None => {
            docs.remove(at);
        }
    }
    docs
}

#[test]
fn a_replica_and_controller_that_fit_pass() {
    let pki = Pki::new("manifest-ca");
    let (code, out) = check(&good(&pki));
    assert_eq!(code, 0, "{out}");
    let c = line_of(&out, "Deployment env-1/controller");
    assert!(c.starts_with("PASS"), "{c}");
    assert!(
        c.contains("match expect-san") && c.contains("allow-san accepts"),
        "{c}"
    );
    assert!(
        line_of(&out, "StatefulSet env-1/replica").starts_with("PASS"),
        "{out}"
    );
    // A numeric targetPort at the mtls port fits too.
    let numeric = replace(good(&pki), "Service", "replica", Some(service(json!(6877))));
    assert_eq!(check(&numeric).0, 0);
}

#[test]
fn injected_manifests_are_judged_the_same() {
    let pki = Pki::new("manifest-ca");
    let rendered = mtls_sidecar::tools::inject::yaml::emit(&good(&pki));
    let (code, injected) = run_on_file("inject", &rendered);
    assert_eq!(code, 0, "{injected}");
    let (code, out) = run_on_file("check", &injected);
    assert_eq!(code, 0, "{out}");
    assert!(
        line_of(&out, "Deployment env-1/controller").starts_with("PASS"),
        "{out}"
    );
    // Injected, the pod's `mtls` port is a container port like any other.
    let broken = injected.replace("targetPort: mtls", "targetPort: 2100");
    assert_ne!(broken, injected);
    let (code, out) = run_on_file("check", &broken);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn a_missing_secret_fails_naming_it() {
    let pki = Pki::new("manifest-ca");
    let docs = replace(good(&pki), "Secret", "replica-mtls", None);
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    let r = line_of(&out, "StatefulSet env-1/replica");
    assert!(r.starts_with("FAIL"), "{r}");
    assert!(r.contains("Secret env-1/replica-mtls (identity)"), "{r}");
    let docs = replace(good(&pki), "ConfigMap", "mtls-ca", None);
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "Deployment env-1/controller").contains("ConfigMap env-1/mtls-ca (trust)")
    );
}

/// A cert-manager `Certificate` with this `secretName` and `dnsNames`.
fn certificate(secret: &str, namespace: &str, dns: &[&str]) -> Value {
    json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
        "metadata": {"name": secret, "namespace": namespace},
        "spec": {"secretName": secret, "dnsNames": dns,
            "issuerRef": {"name": "mtls-ca", "kind": "ClusterIssuer"}}})
}

/// The shipped way: cert-manager writes the Secrets and trust-manager the
/// trust ConfigMap, so the manifests hold a `Certificate` and a `Bundle`,
/// not the objects they write. Their SANs are the Certificate's.
#[test]
fn a_certificate_and_a_bundle_provide_what_they_write() {
    let pki = Pki::new("manifest-ca");
    let bundle = json!({"apiVersion": "trust.cert-manager.io/v1alpha1", "kind": "Bundle",
        "metadata": {"name": "mtls-ca"},
        "spec": {"sources": [{"secret": {"name": "mtls-ca", "key": "tls.crt"}}],
            "target": {"configMap": {"key": "ca.crt"}}}});
    let written = |replica_dns: &[&str], replica_ns: &str| {
        let docs = replace(good(&pki), "ConfigMap", "mtls-ca", Some(bundle.clone()));
        let docs = replace(
            docs,
            "Secret",
            "controller-mtls",
            Some(certificate("controller-mtls", NS, &[CONTROLLER_SAN])),
        );
        replace(
            docs,
            "Secret",
            "replica-mtls",
            Some(certificate("replica-mtls", replica_ns, replica_dns)),
        )
    };
    let (code, out) = check(&written(&[REPLICA_SAN], NS));
    assert_eq!(code, 0, "{out}");
    let c = line_of(&out, "Deployment env-1/controller");
    assert!(
        c.starts_with("PASS") && c.contains("match expect-san"),
        "{c}"
    );
    // The Certificate's dnsNames are the SANs judged.
    let (code, out) = check(&written(&["other.env-1.svc"], NS));
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "Deployment env-1/controller").starts_with("FAIL"),
        "{out}"
    );
    // A Certificate in another namespace writes no Secret here.
    let (code, out) = check(&written(&[REPLICA_SAN], "elsewhere"));
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "StatefulSet env-1/replica").contains("Secret env-1/replica-mtls (identity)"),
        "{out}"
    );
    // A Bundle writing another key is no trust ConfigMap: the sidecar
    // reads `ca.crt`.
    let mut other_key = written(&[REPLICA_SAN], NS);
    for d in other_key.iter_mut().filter(|d| d["kind"] == "Bundle") {
        d["spec"]["target"]["configMap"]["key"] = json!("bundle.pem");
    }
    let (code, out) = check(&other_key);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "StatefulSet env-1/replica").contains("ConfigMap env-1/mtls-ca (trust)"),
        "{out}"
    );
    // Another group's `Certificate` is not cert-manager's.
    let mut foreign = certificate("replica-mtls", NS, &[REPLICA_SAN]);
    foreign["apiVersion"] = json!("example.com/v1");
    let docs = replace(good(&pki), "Secret", "replica-mtls", Some(foreign));
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
}

#[test]
fn the_clients_expect_san_must_match_the_servers_certificate() {
    let pki = Pki::new("manifest-ca");
    let docs = replace(
        good(&pki),
        "Deployment",
        "controller",
        Some(controller("replica.env-2.svc")),
    );
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    let c = line_of(&out, "Deployment env-1/controller");
    assert!(c.starts_with("FAIL"), "{c}");
    assert!(c.contains("expect-san replica.env-2.svc does not match StatefulSet env-1/replica's SANs [replica.env-1.svc]"), "{c}");
}

#[test]
fn the_servers_allow_san_must_match_the_clients_certificate() {
    let pki = Pki::new("manifest-ca");
    let docs = replace(
        good(&pki),
        "StatefulSet",
        "replica",
        Some(replica("*.env-2.svc")),
    );
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    let c = line_of(&out, "Deployment env-1/controller");
    assert!(c.starts_with("FAIL"), "{c}");
    assert!(
        c.contains("allow-san *.env-2.svc refuses this workload's SANs [controller.env-1.svc]"),
        "{c}"
    );
    // The wildcard is matched as the sidecar matches it: one label.
    let docs = replace(
        good(&pki),
        "StatefulSet",
        "replica",
        Some(replica("*.env-1.svc")),
    );
    assert_eq!(check(&docs).0, 0);
}

#[test]
fn a_service_aimed_at_the_application_port_fails() {
    let pki = Pki::new("manifest-ca");
    for target in [json!(2100), json!("app")] {
        let docs = replace(
            good(&pki),
            "Service",
            "replica",
            Some(service(target.clone())),
        );
        let (code, out) = check(&docs);
        assert_eq!(code, 1, "{target}: {out}");
        let r = line_of(&out, "StatefulSet env-1/replica");
        assert!(
            r.starts_with("FAIL") && r.contains("Service env-1/replica targetPort 2100 reaches the application's loopback port, not mtls 6877"),
            "{r}"
        );
        let c = line_of(&out, "Deployment env-1/controller");
        assert!(
            c.contains("targetPort 2100, not StatefulSet env-1/replica's mtls port 6877"),
            "{c}"
        );
    }
}

#[test]
fn csi_identities_expand_their_san_and_warn_on_an_absent_issuer() {
    let pki = Pki::new("manifest-ca");
    let mut ctl = controller(REPLICA_SAN);
    let ann = &mut ctl["spec"]["template"]["metadata"]["annotations"];
    ann["mtls-sidecar.dev/identity"] = json!("csi:ClusterIssuer/mtls-ca");
    ann["mtls-sidecar.dev/san"] =
        json!("spiffe://td/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}");
    ctl["spec"]["template"]["spec"]["serviceAccountName"] = json!("controller");
    let docs = replace(
        replace(good(&pki), "Deployment", "controller", Some(ctl)),
        "StatefulSet",
        "replica",
        Some(replica("spiffe://td/ns/env-1/sa/*")),
    );
    let (code, out) = check(&docs);
    assert_eq!(code, 0, "{out}");
    let c = line_of(&out, "Deployment env-1/controller");
    assert!(
        c.starts_with("WARN") && c.contains("ClusterIssuer mtls-ca"),
        "{c}"
    );
    assert!(
        c.contains("accepts SANs [spiffe://td/ns/env-1/sa/controller]"),
        "{c}"
    );
    let docs = replace(
        docs,
        "StatefulSet",
        "replica",
        Some(replica("spiffe://td/ns/env-1/sa/other")),
    );
    assert_eq!(check(&docs).0, 1);
}

#[test]
fn annotations_inject_refuses_and_bad_patterns_fail() {
    let pki = Pki::new("manifest-ca");
    let mut bad = replica(CONTROLLER_SAN);
    bad["spec"]["template"]["metadata"]["annotations"]["mtls-sidecar.dev/server"] = json!("6877");
    let (code, out) = check(&replace(good(&pki), "StatefulSet", "replica", Some(bad)));
    assert_eq!(code, 1, "{out}");
    let r = line_of(&out, "StatefulSet env-1/replica");
    assert!(
        r.starts_with("FAIL") && r.contains("annotation mtls-sidecar.dev/server"),
        "{r}"
    );
    let docs = replace(
        good(&pki),
        "StatefulSet",
        "replica",
        Some(replica("*.*.svc")),
    );
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    let r = line_of(&out, "StatefulSet env-1/replica");
    assert!(
        r.starts_with("FAIL") && r.contains("allow-san \"*.*.svc\""),
        "{r}"
    );
}

#[test]
fn a_config_configmap_is_present_and_valid() {
    let pki = Pki::new("manifest-ca");
    let mut rep = replica(CONTROLLER_SAN);
    let ann = rep["spec"]["template"]["metadata"]["annotations"]
        .as_object_mut()
        .expect("annotations");
    ann.remove("mtls-sidecar.dev/server");
    ann.remove("mtls-sidecar.dev/allow-san");
    ann.insert(
        "mtls-sidecar.dev/config".into(),
        json!("configmap:replica-sidecar"),
    );
    let base = replace(good(&pki), "StatefulSet", "replica", Some(rep));
    let (code, out) = check(&base);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "StatefulSet env-1/replica")
            .contains("ConfigMap env-1/replica-sidecar (config) is not among"),
        "{out}"
    );
    let toml = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/sidecar.toml"),
    )
    .expect("deploy/sidecar.toml");
    let cm = |toml: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "replica-sidecar", "namespace": NS},
            "data": {"sidecar.toml": toml}})
    };
    // deploy/sidecar.toml drains for 30 s: more than the default grace
    // period of 30 s leaves after the 5 s margin.
    let mut docs = base.clone();
    docs.push(cm(&toml));
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "StatefulSet env-1/replica").contains(
            "ConfigMap env-1/replica-sidecar (config): drain_timeout 30s is longer than the 25s that terminationGracePeriodSeconds 30 leaves"
        ),
        "{out}"
    );
    let with_grace = |grace: u64| {
        let mut docs = docs.clone();
        let set = docs
            .iter_mut()
            .find(|d| d["kind"] == "StatefulSet")
            .unwrap();
        set["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = json!(grace);
        check(&docs)
    };
    assert_eq!(with_grace(34).0, 1, "a 4 s margin is short");
    let (code, out) = with_grace(35);
    assert!(
        line_of(&out, "StatefulSet env-1/replica").starts_with("PASS"),
        "{out}"
    );
    assert_eq!(code, 0, "{out}");
    let mut docs = base;
    docs.push(cm(&toml.replace("mode = \"server\"", "mode = \"sever\"")));
    let (code, out) = check(&docs);
    assert_eq!(code, 1, "{out}");
    assert!(
        line_of(&out, "StatefulSet env-1/replica")
            .contains("ConfigMap env-1/replica-sidecar (config): "),
        "{out}"
    );
}

/// `check --manifest -` with `input` on stdin: the exit code and stdout.
fn check_stdin(input: &str) -> (Option<i32>, String) {
    let (code, out, _) = common::run_bin_stdin(&["check", "--manifest", "-"], input);
    (Some(code).filter(|c| *c >= 0), out)
}

#[test]
fn unreadable_input_is_exit_2_and_stdin_is_read() {
    let (code, out) = run_bin(&["check", "--manifest", "/nonexistent/rendered.yaml"]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(check_stdin("{\"kind\": [unclosed").0, Some(2));
    let pki = Pki::new("manifest-ca");
    let json: String = good(&pki).iter().map(|d| d.to_string() + "\n").collect();
    let (code, out) = check_stdin(&json);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        line_of(&out, "Deployment env-1/controller").starts_with("PASS"),
        "{out}"
    );
}
