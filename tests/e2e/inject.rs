//! `inject` / `uninject` (docs/injection.md): the manifests they write,
//! judged as Kubernetes would (Pod Security "restricted" and
//! kubernetes-validate, offline), every refusal, and the injected
//! container's own arguments started for real against kubelet-style
//! credential directories: an mTLS client with an allowed and a foreign
//! SAN, its probes, and an application probe answered through the admin
//! endpoint; a client route and a `config:` file dialing an mTLS server
//! with the expected and a foreign SAN.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::{client_config, get, get_until, refused, tls_connect, Pki, CONTROLLER, DEADLINE};
use mtls_sidecar::pki::{Issued, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use mtls_sidecar::tools::inject::annotations::INJECTED_LABEL;
use mtls_sidecar::tools::inject::manifest::{apply, Action};
use mtls_sidecar::tools::inject::{yaml, Options, VERSION};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Runs the binary with `args`, `input` on stdin: (exit code, stdout, stderr).
fn run(args: &[&str], input: &str) -> (i32, String, String) {
    common::run_bin_stdin(args, input)
}

fn inject_cli(input: &str) -> String {
    let (code, out, err) = run(&["inject", "-f", "-"], input);
    assert_eq!(code, 0, "inject failed: {err}");
    out
}

fn uninject_cli(input: &str) -> String {
    let (code, out, err) = run(&["uninject", "-f", "-"], input);
    assert_eq!(code, 0, "uninject failed: {err}");
    out
}

/// An annotated replica: a server route in front of an application on
/// loopback, whose probes aim at its port.
fn replica(kind: &str, annotations: Value) -> Value {
    let mut ann = json!({
        "mtls-sidecar.dev/inject": "enabled",
        "mtls-sidecar.dev/server": "6877:2100",
        "mtls-sidecar.dev/allow-san": CONTROLLER,
        "mtls-sidecar.dev/identity": "secret:replica-mtls",
    });
    for (k, v) in annotations.as_object().expect("an object") {
        if v.is_null() {
            ann.as_object_mut().unwrap().shift_remove(k);
        } else {
            ann[k] = v.clone();
        }
    }
    let template = json!({
        "metadata": {"labels": {"app": "replica"}, "annotations": ann},
        "spec": {
            "futureField": {"kept": true},
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "replica",
                "image": "registry.example.com/replica:1.0.0",
                "args": ["--listen=127.0.0.1:2100"],
                "ports": [{"name": "http", "containerPort": 2100}],
                "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10},
                "readinessProbe": {"tcpSocket": {"port": 2100}},
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]},
                    "runAsUser": 1000
                },
                "futureContainerField": "kept"
            }]
        }
    });
    let meta = json!({"name": "replica", "namespace": "env-1"});
    let selector = json!({"matchLabels": {"app": "replica"}});
    match kind {
        "Pod" => {
            let mut pod = template;
            pod["metadata"]["name"] = json!("replica");
            pod["metadata"]["namespace"] = json!("env-1");
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"], "spec": pod["spec"]})
        }
        "Deployment" | "DaemonSet" | "ReplicaSet" => json!({"apiVersion": "apps/v1", "kind": kind,
            "metadata": meta, "spec": {"selector": selector, "template": template}}),
        "StatefulSet" => json!({"apiVersion": "apps/v1", "kind": kind, "metadata": meta,
            "spec": {"serviceName": "replica", "selector": selector, "template": template}}),
        "Job" => {
            let mut t = template;
            t["spec"]["restartPolicy"] = json!("Never");
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta, "spec": {"template": t}})
        }
        "CronJob" => {
            let mut t = template;
            t["spec"]["restartPolicy"] = json!("OnFailure");
            json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": meta,
                "spec": {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": t}}}})
        }
        other => panic!("no fixture for {other}"),
    }
}

/// Where a kind keeps its pod template.
fn template_of(obj: &Value) -> &Value {
    match obj["kind"].as_str() {
        Some("Pod") => obj,
        Some("CronJob") => &obj["spec"]["jobTemplate"]["spec"]["template"],
        _ => &obj["spec"]["template"],
    }
}

fn sidecar_of(obj: &Value) -> &Value {
    let c = &template_of(obj)["spec"]["initContainers"][0];
    assert_eq!(c["name"], "mtls-sidecar", "{obj:#}");
    c
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap() + "\n"
}

const KINDS: &[&str] = &[
    "Pod",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
    "Job",
    "CronJob",
];

#[test]
fn every_kind_is_injected_and_a_list_item_too_and_other_objects_pass() {
    for kind in KINDS {
        let out: Value =
            serde_json::from_str(&inject_cli(&pretty(&replica(kind, json!({}))))).unwrap();
        let c = sidecar_of(&out);
        assert_eq!(c["restartPolicy"], "Always", "{kind}");
        assert_eq!(
            template_of(&out)["metadata"]["annotations"]["mtls-sidecar.dev/injected"],
            VERSION
        );
    }
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x",
        "annotations": {"mtls-sidecar.dev/inject": "enabled"}}, "data": {"a": "0440"}});
    let list = json!({"apiVersion": "v1", "kind": "List", "items": [replica("Deployment", json!({})), cm.clone()]});
    let out: Value = serde_json::from_str(&inject_cli(&pretty(&list))).unwrap();
    sidecar_of(&out["items"][0]);
    assert_eq!(out["items"][1], cm, "a ConfigMap passes unchanged");
    // Not opted in: unchanged.
    let off = replica("Deployment", json!({"mtls-sidecar.dev/inject": "disabled"}));
    assert_eq!(inject_cli(&pretty(&off)), pretty(&off));
}

#[test]
fn injecting_twice_equals_once_and_uninject_gives_the_input_back_byte_for_byte() {
    for kind in KINDS {
        let input = pretty(&replica(kind, json!({})));
        let once = inject_cli(&input);
        assert_eq!(inject_cli(&once), once, "{kind}: idempotent");
        let back = uninject_cli(&once);
        assert_eq!(back, input, "{kind}: the round trip");
        let out: Value = serde_json::from_str(&once).unwrap();
        let spec = &template_of(&out)["spec"];
        assert_eq!(
            spec["futureField"],
            json!({"kept": true}),
            "an unknown field survives"
        );
        assert_eq!(spec["containers"][0]["futureContainerField"], "kept");
    }
    // YAML too, several documents, with a comment (lost) and an octal mode
    // (kept as the number Kubernetes reads).
    let text = "# a comment\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  mode: \"0440\"\n---\n"
        .to_string()
        + &yaml::emit(&[replica("StatefulSet", json!({}))]);
    let (code, once, err) = run(&["inject", "-f", "-"], &text);
    assert_eq!(code, 0, "{err}");
    assert_eq!(inject_cli(&once), once);
    let docs = yaml::load(&once).unwrap();
    assert_eq!(docs[0]["data"]["mode"], "0440");
    let back = yaml::load(&uninject_cli(&once)).unwrap();
    assert_eq!(back, yaml::load(&text).unwrap());
}

#[test]
fn another_versions_injection_is_replaced() {
    let input = replica("StatefulSet", json!({}));
    let old = Options {
        image: "registry.example.com/mtls-sidecar:0.0.9".into(),
        version: "0.0.9".into(),
    };
    let mut older = apply(&input, Action::Inject, &old).unwrap();
    // The older version's sidecar differs (an extra argument, say).
    let args = older["spec"]["template"]["spec"]["initContainers"][0]["args"]
        .as_array_mut()
        .unwrap();
    args.push(json!("--resumption"));
    let upgraded: Value = serde_json::from_str(&inject_cli(&pretty(&older))).unwrap();
    let fresh: Value = serde_json::from_str(&inject_cli(&pretty(&input))).unwrap();
    assert_eq!(upgraded, fresh);
    assert_eq!(
        sidecar_of(&upgraded)["image"],
        format!("registry.example.com/mtls-sidecar:{VERSION}")
    );
}

/// `inject -f a.yaml -f b.yaml` where only b's template has a bad
/// annotation: exit 2, nothing of a (or b) written, the error naming b,
/// its object and the annotation.
#[test]
fn a_bad_annotation_in_the_second_file_writes_nothing_of_the_first() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a.yaml"), tmp.path().join("b.yaml"));
    std::fs::write(&a, yaml::emit(&[replica("StatefulSet", json!({}))])).unwrap();
    let mut bad = replica("Deployment", json!({"mtls-sidecar.dev/server": "6877:x"}));
    bad["metadata"]["name"] = json!("web");
    std::fs::write(&b, yaml::emit(&[bad])).unwrap();
    let (a, b) = (a.to_str().unwrap(), b.to_str().unwrap());
    let (code, out, err) = run(&["inject", "-f", a, "-f", b], "");
    assert_eq!(code, 2, "{err}");
    assert!(out.is_empty(), "wrote {out}");
    let named = format!("{b}: Deployment env-1/web: annotation mtls-sidecar.dev/server");
    assert!(err.contains(&named), "{err}");
    assert!(!err.contains("a.yaml"), "{err}");
    // Each alone: a is injected, b refused the same way.
    assert_eq!(run(&["inject", "-f", a], "").0, 0);
    let (code, out, err) = run(&["inject", "-f", b], "");
    assert_eq!((code, out.is_empty()), (2, true), "{err}");
    assert!(err.contains(&named), "{err}");
}

/// What must be refused, and the annotation (or the fact) each names.
#[test]
fn every_refusal_exits_2_naming_the_object_and_the_annotation_and_writes_nothing() {
    let mut host_network = replica("Deployment", json!({}));
    host_network["spec"]["template"]["spec"]["hostNetwork"] = json!(true);
    let mut port_taken = replica("Deployment", json!({}));
    port_taken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] =
        json!(6877);
    let mut name_taken = replica("Deployment", json!({}));
    name_taken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"] =
        json!("mtls-admin");
    let mut hand_written = replica("Deployment", json!({}));
    hand_written["spec"]["template"]["spec"]["initContainers"] =
        json!([{"name": "mtls-sidecar", "image": "x"}]);
    let mut volume_taken = replica("Deployment", json!({}));
    volume_taken["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "mtls-sidecar-identity", "emptyDir": {}}]);
    let mut https_probe = replica("Deployment", json!({}));
    https_probe["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]
        ["scheme"] = json!("HTTPS");
    let mut bad_undo =
        serde_json::from_str::<Value>(&inject_cli(&pretty(&replica("Deployment", json!({})))))
            .unwrap();
    bad_undo["spec"]["template"]["metadata"]["annotations"]["mtls-sidecar.dev/injected-undo"] =
        json!("{");
    bad_undo["spec"]["template"]["metadata"]["annotations"]["mtls-sidecar.dev/injected"] =
        json!("0.0.1");
    let cases: Vec<(&str, Value, &str)> = vec![
        ("hostNetwork", host_network, "hostNetwork"),
        (
            "a port another container uses",
            port_taken,
            "mtls-sidecar.dev/server",
        ),
        (
            "a port name another container uses",
            name_taken,
            "mtls-sidecar.dev/admin-port",
        ),
        (
            "a hand-written sidecar",
            hand_written,
            "Migrating a hand-written sidecar",
        ),
        (
            "a volume name injection adds",
            volume_taken,
            "mtls-sidecar-identity",
        ),
        ("an HTTPS probe at the target", https_probe, "HTTPS"),
        (
            "server and client",
            replica(
                "Deployment",
                json!({"mtls-sidecar.dev/client": "1:h:2", "mtls-sidecar.dev/expect-san": "h"}),
            ),
            "mtls-sidecar.dev/client",
        ),
        (
            "server and config",
            replica(
                "Deployment",
                json!({"mtls-sidecar.dev/config": "configmap:c"}),
            ),
            "mtls-sidecar.dev/config",
        ),
        (
            "no allow-san",
            replica("Deployment", json!({"mtls-sidecar.dev/allow-san": null})),
            "mtls-sidecar.dev/allow-san",
        ),
        (
            "a bad port",
            replica("Deployment", json!({"mtls-sidecar.dev/server": "6877:x"})),
            "mtls-sidecar.dev/server",
        ),
        (
            "a bad identity",
            replica(
                "Deployment",
                json!({"mtls-sidecar.dev/identity": "vault:x"}),
            ),
            "mtls-sidecar.dev/identity",
        ),
        (
            "csi without san",
            replica(
                "Deployment",
                json!({"mtls-sidecar.dev/identity": "csi:Issuer/ca"}),
            ),
            "mtls-sidecar.dev/san",
        ),
        (
            "a bad SAN pattern",
            replica(
                "Deployment",
                json!({"mtls-sidecar.dev/allow-san": "*.*.svc"}),
            ),
            "mtls-sidecar.dev/allow-san",
        ),
        (
            "a typo",
            replica("Deployment", json!({"mtls-sidecar.dev/alow-san": "x"})),
            "mtls-sidecar.dev/alow-san",
        ),
        (
            "inject: yes",
            replica("Deployment", json!({"mtls-sidecar.dev/inject": "yes"})),
            "mtls-sidecar.dev/inject",
        ),
        (
            "a broken undo record",
            bad_undo,
            "mtls-sidecar.dev/injected-undo",
        ),
    ];
    for (what, obj, needle) in cases {
        // A good object first: nothing of it may be written either.
        let input = pretty(&replica("StatefulSet", json!({}))) + &pretty(&obj);
        let (code, out, err) = run(&["inject", "-f", "-"], &input);
        assert_eq!(code, 2, "{what}: {err}");
        assert!(out.is_empty(), "{what}: wrote {out}");
        assert!(err.contains("Deployment env-1/replica"), "{what}: {err}");
        assert!(err.contains(needle), "{what}: {err}");
    }
    let (code, out, err) = run(&["inject", "-f", "-"], "a: [1\n");
    assert_eq!((code, out.is_empty()), (2, true), "{err}");
    assert!(err.contains("stdin: YAML"), "{err}");
    let (code, _, err) = run(&["inject", "-f", "/nonexistent/x.yaml"], "");
    assert_eq!(code, 2, "{err}");
}

#[test]
fn a_statefulset_csi_certificate_carries_the_role_san_and_its_per_pod_name() {
    let ann = json!({
        "mtls-sidecar.dev/identity": "csi:ClusterIssuer/mtls-ca",
        "mtls-sidecar.dev/san": "replica.${POD_NAMESPACE}.svc,spiffe://example.org/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}",
    });
    let sts: Value =
        serde_json::from_str(&inject_cli(&pretty(&replica("StatefulSet", ann.clone())))).unwrap();
    let spec = &sts["spec"]["template"]["spec"];
    let vol = &spec["volumes"][0];
    assert_eq!(vol["name"], "mtls-sidecar-identity");
    let attrs = &vol["csi"]["volumeAttributes"];
    assert_eq!(vol["csi"]["driver"], "csi.cert-manager.io");
    assert_eq!(
        attrs["csi.cert-manager.io/dns-names"],
        "replica.${POD_NAMESPACE}.svc,${POD_NAME}.replica.${POD_NAMESPACE}.svc"
    );
    assert_eq!(
        attrs["csi.cert-manager.io/uri-sans"],
        "spiffe://example.org/ns/${POD_NAMESPACE}/sa/${SERVICE_ACCOUNT_NAME}"
    );
    assert_eq!(attrs["csi.cert-manager.io/key-algorithm"], "ECDSA");
    assert_eq!(
        attrs["csi.cert-manager.io/key-usages"],
        "digital signature,server auth"
    );
    assert_eq!(attrs["csi.cert-manager.io/issuer-kind"], "ClusterIssuer");
    assert_eq!(attrs["csi.cert-manager.io/fs-group"], "65532");
    assert_eq!(spec["securityContext"]["fsGroup"], 65532);
    assert_eq!(spec["volumes"][1]["name"], "mtls-sidecar-trust");
    let args = sidecar_of(&sts)["args"].as_array().unwrap().clone();
    assert!(
        args.contains(&json!("--trust-dir=/etc/mtls-trust")),
        "{args:?}"
    );
    // A Deployment's pods have no stable name: only the role SAN.
    let dep: Value =
        serde_json::from_str(&inject_cli(&pretty(&replica("Deployment", ann)))).unwrap();
    let attrs = &dep["spec"]["template"]["spec"]["volumes"][0]["csi"]["volumeAttributes"];
    assert_eq!(
        attrs["csi.cert-manager.io/dns-names"],
        "replica.${POD_NAMESPACE}.svc"
    );
    // The pod's own fsGroup is reused: the sidecar runs with that group.
    let mut own = replica(
        "Deployment",
        json!({"mtls-sidecar.dev/identity": "csi:Issuer/ca", "mtls-sidecar.dev/san": "r.svc"}),
    );
    own["spec"]["template"]["spec"]["securityContext"]["fsGroup"] = json!(2000);
    let input = pretty(&own);
    let out: Value = serde_json::from_str(&inject_cli(&input)).unwrap();
    assert_eq!(sidecar_of(&out)["securityContext"]["runAsGroup"], 2000);
    let attrs = &out["spec"]["template"]["spec"]["volumes"][0]["csi"]["volumeAttributes"];
    assert_eq!(attrs["csi.cert-manager.io/fs-group"], "2000");
    assert_eq!(uninject_cli(&pretty(&out)), input);
}

/// The injected pods (a Secret, a csi-driver and a SPIFFE identity; a
/// server, a client and a config-file sidecar) pass Pod Security
/// "restricted" and kubernetes-validate --strict at 1.29 and 1.37; a pod
/// whose sidecar lost its hardening does not (the judge judges).
#[test]
fn injected_pods_pass_pod_security_restricted_and_kubernetes_validate() {
    if common::tools::skip_unless(&["kubernetes-validate"]) {
        return;
    }
    let python = common::tools::kubernetes_validate_python().expect("checked above");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let objects = [
        replica("StatefulSet", json!({})),
        replica(
            "Deployment",
            json!({"mtls-sidecar.dev/identity": "csi:ClusterIssuer/mtls-ca", "mtls-sidecar.dev/san": "replica.${POD_NAMESPACE}.svc"}),
        ),
        replica("DaemonSet", json!({"mtls-sidecar.dev/identity": "spiffe"})),
        replica(
            "CronJob",
            json!({
            "mtls-sidecar.dev/server": null, "mtls-sidecar.dev/allow-san": null,
            "mtls-sidecar.dev/client": "2200:replica-0.replica.env-1.svc:6877",
            "mtls-sidecar.dev/expect-san": "replica.env-1.svc",
            "mtls-sidecar.dev/cpu-limit": "1", "mtls-sidecar.dev/memory-limit": "64Mi"}),
        ),
        replica(
            "Pod",
            json!({"mtls-sidecar.dev/server": null, "mtls-sidecar.dev/allow-san": null,
            "mtls-sidecar.dev/config": "configmap:controller-mtls-sidecar"}),
        ),
    ];
    // kubernetes-validate --strict refuses fields no schema knows.
    let known_only = |mut o: Value| {
        let t = match o["kind"].as_str() {
            Some("Pod") => &mut o,
            Some("CronJob") => &mut o["spec"]["jobTemplate"]["spec"]["template"],
            _ => &mut o["spec"]["template"],
        };
        t["spec"]
            .as_object_mut()
            .unwrap()
            .shift_remove("futureField");
        t["spec"]["containers"][0]
            .as_object_mut()
            .unwrap()
            .shift_remove("futureContainerField");
        o
    };
    let injected: Vec<Value> = objects
        .into_iter()
        .map(|o| apply(&known_only(o), Action::Inject, &Options::default()).unwrap())
        .collect();
    let judge = |docs: &[Value]| {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("injected.yaml");
        std::fs::write(&file, yaml::emit(docs)).unwrap();
        let out = Command::new(&python)
            .arg(root.join("tests/e2e/inject/judge.py"))
            .arg(root)
            .arg(&file)
            .output()
            .expect("run judge.py");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let (ok, said) = judge(&injected);
    assert!(ok, "{said}");
    let mut weakened = injected[0].clone();
    let sc = &mut weakened["spec"]["template"]["spec"]["initContainers"][0]["securityContext"];
    sc.as_object_mut()
        .unwrap()
        .shift_remove("allowPrivilegeEscalation");
    let (ok, said) = judge(&[weakened]);
    assert!(!ok && said.contains("privilege-escalation"), "{said}");
}

// ---- the injected container, started for real ----

/// A port free now on loopback (the annotations name it; the sidecar binds it).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The application: HTTP on loopback, 200 while `healthy`, else 500.
async fn application() -> (u16, Arc<AtomicBool>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let healthy = Arc::new(AtomicBool::new(true));
    let h = healthy.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            let h = h.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer: &[u8] = if h.load(Ordering::SeqCst) {
                    b"HTTP/1.1 200 OK\r\ncontent-length: 7\r\nconnection: close\r\n\r\nhealthy"
                } else {
                    b"HTTP/1.1 500 Oops\r\ncontent-length: 4\r\nconnection: close\r\n\r\nsick"
                };
                let _ = s.write_all(answer).await;
            });
        }
    });
    (port, healthy, task)
}

/// `path` inside the sidecar mapped to the temp directory standing for
/// the volume mounted there; `None` when no mount holds it.
fn mapped_path(sidecar: &Value, volumes: &[(&str, PathBuf)], path: &str) -> Option<String> {
    sidecar["volumeMounts"].as_array()?.iter().find_map(|m| {
        let (name, mount) = (m["name"].as_str()?, m["mountPath"].as_str()?);
        let rest = path
            .strip_prefix(mount)
            .filter(|r| r.is_empty() || r.starts_with('/'))?;
        let dir = &volumes
            .iter()
            .find(|(n, _)| *n == name)
            .expect("a volume for every mount")
            .1;
        Some(format!("{}{rest}", dir.display()))
    })
}

/// The injected sidecar's arguments, each mount path of its volumes
/// mapped to the temp directory standing for that volume.
fn mapped_args(sidecar: &Value, volumes: &[(&str, PathBuf)]) -> Vec<String> {
    let map = |a: &str| {
        let Some((flag, value)) = a.split_once('=') else {
            return a.to_string();
        };
        match mapped_path(sidecar, volumes, value) {
            Some(path) => format!("{flag}={path}"),
            None => a.to_string(),
        }
    };
    sidecar["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| map(a.as_str().unwrap()))
        .collect()
}

/// The sidecar's port named `name`.
fn port_named(sidecar: &Value, name: &str) -> u16 {
    let port = sidecar["ports"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == name))
        .unwrap_or_else(|| panic!("no port {name}: {sidecar:#}"));
    u16::try_from(port["containerPort"].as_u64().unwrap()).unwrap()
}

/// The injected sidecar started with its own arguments (mount paths
/// mapped to `volumes`), and its probes run as the kubelet runs them: the
/// startup probe until it passes, then readiness and liveness. Returns it
/// and its admin address (the port `mtls-admin`).
async fn start_injected(sidecar: &Value, volumes: &[(&str, PathBuf)]) -> (common::Sidecar, String) {
    let args = mapped_args(sidecar, volumes);
    let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let sc = common::Sidecar::spawn(&arg_refs);
    let admin = format!("127.0.0.1:{}", port_named(sidecar, "mtls-admin"));
    sc.wait_log(&["admin endpoint listening"]).await;
    let startup = &sidecar["startupProbe"];
    assert_eq!(startup["httpGet"]["port"], "mtls-admin");
    get_until(&admin, startup["httpGet"]["path"].as_str().unwrap(), 200).await;
    for p in ["readinessProbe", "livenessProbe"] {
        assert_eq!(sidecar[p]["httpGet"]["port"], "mtls-admin", "{p}");
        let a = run_probe(&admin, &sidecar[p]).await;
        assert_eq!(a.code, 200, "{p}: {}", a.body);
    }
    (sc, admin)
}

/// GETs what an httpGet probe of the sidecar would, on the admin port.
async fn run_probe(admin: &str, probe: &Value) -> common::http::Answer {
    get(
        admin,
        probe["httpGet"]["path"].as_str().expect("an httpGet probe"),
    )
    .await
}

async fn serves(addr: &str, ident: &Issued, ca: &str) -> bool {
    let mut tls = match tls_connect(addr, "replica.env-1.svc", client_config(Some(ident), ca)).await
    {
        Ok(t) => t,
        Err(_) => return false,
    };
    if tls
        .write_all(b"GET /x HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(DEADLINE, tls.read_to_end(&mut answer)).await;
    String::from_utf8_lossy(&answer).starts_with("HTTP/1.1 200")
}

/// The Secret-identity replica: started with exactly the injected
/// arguments (mount paths mapped), it admits the allowed SAN and refuses a
/// foreign one, its own probes pass, and the application's rewritten
/// probes are answered through `/app-probe/...`, following the
/// application's health.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_injected_sidecar_runs_as_injected_with_its_probes() {
    let (app_port, healthy, _app) = application().await;
    let (listen, admin_port) = (free_port(), free_port());
    let obj = replica(
        "Deployment",
        json!({
            "mtls-sidecar.dev/server": format!("{listen}:{app_port}"),
            "mtls-sidecar.dev/admin-port": admin_port.to_string(),
        }),
    );
    let mut obj = obj;
    let app = &mut obj["spec"]["template"]["spec"]["containers"][0];
    app["ports"][0]["containerPort"] = json!(app_port);
    app["readinessProbe"]["tcpSocket"]["port"] = json!(app_port);
    let injected: Value = serde_json::from_str(&inject_cli(&pretty(&obj))).unwrap();
    let sidecar = sidecar_of(&injected).clone();
    let spec = &injected["spec"]["template"]["spec"];

    // The projected volume, as the kubelet writes it.
    let pki = Pki::new("inject CA");
    let tmp = tempfile::tempdir().unwrap();
    let vol = AtomicDir::new(&tmp.path().join("identity")).unwrap();
    let server = pki.issue(&LeafSpec::dns("replica.env-1.svc", Role::Server, 30));
    common::publish_identity(&vol, &server, &pki.ca.cert_pem);
    let args = mapped_args(
        &sidecar,
        &[("mtls-sidecar-identity", vol.path().to_path_buf())],
    );
    assert!(
        args.contains(&format!("--tls-dir={}", vol.path().display())),
        "{args:?}"
    );
    assert_eq!(
        sidecar["ports"][1],
        json!({"name": "mtls-admin", "containerPort": admin_port, "protocol": "TCP"})
    );
    let (sc, admin) = start_injected(
        &sidecar,
        &[("mtls-sidecar-identity", vol.path().to_path_buf())],
    )
    .await;

    let addr = format!("127.0.0.1:{listen}");
    let controller = pki.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30));
    assert!(
        serves(&addr, &controller, &pki.ca.cert_pem).await,
        "the allowed SAN is served"
    );
    let intruder = pki.issue(&LeafSpec::dns("intruder.env-1.svc", Role::Client, 30));
    let mut tls = tls_connect(
        &addr,
        "replica.env-1.svc",
        client_config(Some(&intruder), &pki.ca.cert_pem),
    )
    .await
    .expect("the handshake completes before the refusal");
    assert!(refused(&mut tls).await, "a foreign SAN is refused");

    // The application's probes, rewritten: answered through the admin port.
    let app = &spec["containers"][0];
    let liveness = &app["livenessProbe"];
    assert_eq!(liveness["httpGet"]["port"], admin_port);
    assert_eq!(liveness["periodSeconds"], 10, "the timing is kept");
    let readiness = &app["readinessProbe"];
    assert_eq!(
        readiness["httpGet"]["path"],
        "/app-probe/replica/readinessProbe"
    );
    for probe in [liveness, readiness] {
        let a = run_probe(&admin, probe).await;
        assert_eq!(a.code, 200, "{probe}: {}", a.body);
    }
    assert!(!get(&admin, "/app-probe/replica/startupProbe")
        .await
        .body
        .contains("ok"));
    assert_eq!(get(&admin, "/app-probe/other").await.code, 404);
    healthy.store(false, Ordering::SeqCst);
    let a = run_probe(&admin, liveness).await;
    assert_eq!(
        a.code, 503,
        "an unhealthy application fails its liveness: {}",
        a.body
    );
    assert!(a.body.contains("HTTP 500"), "{}", a.body);
    assert_eq!(
        run_probe(&admin, readiness).await.code,
        200,
        "its port is still open"
    );
    drop(sc);
}

/// The csi-driver replica: the identity volume holds the key, the
/// certificate and only the issuing CA (here another CA: were trust read
/// from there, the controller would be refused), the trust ConfigMap's
/// volume holds the bundle; a renewal written through the kubelet's
/// atomic writer (the csi-driver's) is picked up by content-hash polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_csi_identity_takes_trust_from_the_configmap_and_rotates_by_the_data_swap() {
    let (app_port, _healthy, _app) = application().await;
    let (listen, admin_port) = (free_port(), free_port());
    let mut obj = replica(
        "StatefulSet",
        json!({
            "mtls-sidecar.dev/server": format!("{listen}:{app_port}"),
            "mtls-sidecar.dev/admin-port": admin_port.to_string(),
            "mtls-sidecar.dev/identity": "csi:ClusterIssuer/mtls-ca",
            "mtls-sidecar.dev/san": "replica.${POD_NAMESPACE}.svc",
        }),
    );
    obj["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(app_port);
    let injected: Value = serde_json::from_str(&inject_cli(&pretty(&obj))).unwrap();
    let sidecar = sidecar_of(&injected).clone();

    let pki = Pki::new("the trust bundle's CA");
    let issuing_only = Pki::new("an unrelated issuing CA");
    let tmp = tempfile::tempdir().unwrap();
    let identity = AtomicDir::new(&tmp.path().join("csi")).unwrap();
    let trust = AtomicDir::new(&tmp.path().join("trust")).unwrap();
    let first = pki.issue(&LeafSpec::dns("replica.env-1.svc", Role::Server, 30));
    common::publish_identity(&identity, &first, &issuing_only.ca.cert_pem);
    trust
        .publish(&[("ca.crt", pki.ca.cert_pem.as_bytes())])
        .unwrap();
    let (sc, _admin) = start_injected(
        &sidecar,
        &[
            ("mtls-sidecar-identity", identity.path().to_path_buf()),
            ("mtls-sidecar-trust", trust.path().to_path_buf()),
        ],
    )
    .await;

    let addr = format!("127.0.0.1:{listen}");
    let controller = pki.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30));
    assert!(
        serves(&addr, &controller, &pki.ca.cert_pem).await,
        "trusted through the trust directory"
    );
    let foreign = issuing_only.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30));
    let mut tls = tls_connect(
        &addr,
        "replica.env-1.svc",
        client_config(Some(&foreign), &pki.ca.cert_pem),
    )
    .await
    .expect("handshake");
    assert!(
        refused(&mut tls).await,
        "the identity volume's ca.crt is not trusted"
    );

    let serial = |leaf: &Issued| mtls_sidecar::pki::serial_of(&leaf.cert_der).unwrap();
    let presented = || async {
        let tls = tls_connect(
            &addr,
            "replica.env-1.svc",
            client_config(Some(&controller), &pki.ca.cert_pem),
        )
        .await
        .expect("handshake");
        let cert = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
        mtls_sidecar::pki::serial_of(&cert).unwrap()
    };
    assert_eq!(presented().await, serial(&first));
    let applied = sc.log_count("applied credential revision");
    let renewed = pki.issue(&LeafSpec::dns("replica.env-1.svc", Role::Server, 30));
    common::publish_identity(&identity, &renewed, &issuing_only.ca.cert_pem);
    common::eventually("the renewal applied", || {
        sc.log_count("applied credential revision") > applied
    })
    .await;
    assert_eq!(
        presented().await,
        serial(&renewed),
        "the renewed certificate is presented"
    );
    drop(sc);
}

/// The remote server sidecar a client route dials, standing in: mutual TLS
/// (client certificates from the test CA), presenting the config
/// `presents` holds when each connection arrives; it echoes what it is
/// sent and counts the bytes.
struct Remote {
    addr: String,
    presents: Arc<Mutex<Arc<rustls::ServerConfig>>>,
    received: Arc<AtomicUsize>,
}

impl Remote {
    async fn start(cfg: Arc<rustls::ServerConfig>) -> Remote {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let presents = Arc::new(Mutex::new(cfg));
        let received = Arc::new(AtomicUsize::new(0));
        let (p, r) = (presents.clone(), received.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let cfg = p.lock().unwrap().clone();
                let r = r.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = tokio_rustls::TlsAcceptor::from(cfg).accept(tcp).await else {
                        return;
                    };
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = tls.read(&mut buf).await {
                        r.fetch_add(n, Ordering::SeqCst);
                        if n == 0 || tls.write_all(&buf[..n]).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Remote {
            addr,
            presents,
            received,
        }
    }

    fn port(&self) -> u16 {
        self.addr.rsplit_once(':').unwrap().1.parse().unwrap()
    }
}

/// A server config presenting a certificate of `pki` for `san` and
/// requiring a client certificate of `pki`.
fn remote_config(pki: &Pki, san: &str) -> Arc<rustls::ServerConfig> {
    let leaf = pki.issue(&LeafSpec::dns(san, Role::Server, 30));
    common::server_config(&leaf, Some(&pki.ca.cert_pem))
}

/// The sidecar `inject` adds to `obj`.
fn injected_sidecar(obj: &Value) -> Value {
    let injected: Value = serde_json::from_str(&inject_cli(&pretty(obj))).unwrap();
    sidecar_of(&injected).clone()
}

/// A client-route template (the replica fixture with its server route
/// taken out) with `annotations` added.
fn client_template(annotations: Value) -> Value {
    let mut ann = json!({
        "mtls-sidecar.dev/server": null,
        "mtls-sidecar.dev/allow-san": null,
        "mtls-sidecar.dev/identity": "secret:controller-mtls",
    });
    for (k, v) in annotations.as_object().expect("an object") {
        ann[k] = v.clone();
    }
    replica("Deployment", ann)
}

/// The controller's client identity in a Secret-style volume, as the
/// kubelet writes it.
fn client_identity(pki: &Pki, tmp: &Path) -> AtomicDir {
    let vol = AtomicDir::new(&tmp.join("identity")).unwrap();
    let leaf = pki.issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30));
    common::publish_identity(&vol, &leaf, &pki.ca.cert_pem);
    vol
}

/// A client route: started with exactly the injected arguments (mount
/// paths mapped), its probes pass, the application's plaintext on the
/// loopback listener reaches the mTLS server whose certificate carries
/// the expected SAN, and nothing of it reaches one presenting a foreign
/// SAN.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_client_route_runs_as_injected_and_checks_the_server_san() {
    let pki = Pki::new("client route CA");
    let remote = Remote::start(remote_config(&pki, "replica.env-1.svc")).await;
    let (local, admin_port) = (free_port(), free_port());
    let obj = client_template(json!({
        "mtls-sidecar.dev/client": format!("{local}:127.0.0.1:{}", remote.port()),
        "mtls-sidecar.dev/expect-san": "replica.env-1.svc",
        "mtls-sidecar.dev/admin-port": admin_port.to_string(),
    }));
    let sidecar = injected_sidecar(&obj);
    assert_eq!(sidecar["args"][0], "client");
    let tmp = tempfile::tempdir().unwrap();
    let vol = client_identity(&pki, tmp.path());
    let (sc, _admin) = start_injected(
        &sidecar,
        &[("mtls-sidecar-identity", vol.path().to_path_buf())],
    )
    .await;

    let listener = format!("127.0.0.1:{local}");
    let mut app = tokio::net::TcpStream::connect(&listener).await.unwrap();
    let msg = b"plaintext from the application";
    assert_eq!(common::roundtrip(&mut app, msg).await, msg);
    assert_eq!(remote.received.load(Ordering::SeqCst), msg.len());
    drop(app);

    *remote.presents.lock().unwrap() = remote_config(&pki, "intruder.env-1.svc");
    let before = remote.received.load(Ordering::SeqCst);
    let mut app = tokio::net::TcpStream::connect(&listener).await.unwrap();
    let _ = app.write_all(b"not for an intruder").await;
    assert!(
        common::read_until_closed(&mut app).await.is_empty(),
        "a server with a foreign SAN is refused"
    );
    assert_eq!(remote.received.load(Ordering::SeqCst), before);
    drop(sc);
}

/// A `config:` sidecar: the ConfigMap's file (one client route; the paths
/// in it, as in its arguments, mapped to the temp directories standing
/// for the volumes) started with exactly the injected arguments answers
/// its probes on the annotated admin port and carries the route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_injected_config_file_sidecar_runs_its_route_and_answers_its_probes() {
    let pki = Pki::new("config route CA");
    let remote = Remote::start(remote_config(&pki, "replica.env-1.svc")).await;
    let (local, admin_port) = (free_port(), free_port());
    let obj = client_template(json!({
        "mtls-sidecar.dev/config": "configmap:controller-mtls-sidecar",
        "mtls-sidecar.dev/admin-port": admin_port.to_string(),
    }));
    let sidecar = injected_sidecar(&obj);
    assert_eq!(sidecar["args"][0], "run");
    let tmp = tempfile::tempdir().unwrap();
    let vol = client_identity(&pki, tmp.path());
    let config = AtomicDir::new(&tmp.path().join("config")).unwrap();
    let volumes = [
        ("mtls-sidecar-identity", vol.path().to_path_buf()),
        ("mtls-sidecar-config", config.path().to_path_buf()),
    ];
    let tls_dir = mapped_path(&sidecar, &volumes, "/etc/mtls").expect("the identity mount");
    let file = format!(
        "tls_dir = \"{tls_dir}\"\n\
         admin = \"127.0.0.1:{admin_port}\"\n\
         drain_timeout = \"5s\"\n\
         [[route]]\n\
         name = \"replica\"\n\
         mode = \"client\"\n\
         listen = \"127.0.0.1:{local}\"\n\
         target = \"{}\"\n\
         server_name = \"replica.env-1.svc\"\n",
        remote.addr
    );
    config
        .publish(&[("sidecar.toml", file.as_bytes())])
        .unwrap();
    let (sc, _admin) = start_injected(&sidecar, &volumes).await;
    let mut app = tokio::net::TcpStream::connect(format!("127.0.0.1:{local}"))
        .await
        .unwrap();
    let msg = b"through the config file's route";
    assert_eq!(common::roundtrip(&mut app, msg).await, msg);
    drop(sc);
}

/// `--app-probe` reaches only a server route's loopback target port: the
/// admin endpoint needs no client certificate, so a probe anywhere else
/// would be a way past the mTLS port.
#[test]
fn an_app_probe_anywhere_but_the_target_port_is_refused() {
    let pki = Pki::new("probe CA");
    let tmp = tempfile::tempdir().unwrap();
    let dir = pki.dir(
        tmp.path(),
        "tls",
        &pki.leaf("replica.env-1.svc", Role::Server),
    );
    let tls_dir = format!("--tls-dir={}", dir.display());
    let base = [
        "server",
        "--listen=127.0.0.1:0",
        "--target=127.0.0.1:2100",
        &tls_dir,
        "--allow-san=a.svc",
        "--admin=127.0.0.1:0",
    ];
    for (probe, needle) in [
        (
            r#"x={"tcpSocket":{"port":22}}"#,
            "not the loopback target port",
        ),
        (
            r#"x={"httpGet":{"port":2100,"host":"10.0.0.1"}}"#,
            "unknown field",
        ),
        (r#"x={"exec":{"command":["sh"]}}"#, "unknown field"),
    ] {
        let arg = format!("--app-probe={probe}");
        let args: Vec<&str> = base.iter().copied().chain([arg.as_str()]).collect();
        let (code, text) = common::run_bin_within(&args, DEADLINE)
            .unwrap_or_else(|| panic!("{probe}: the sidecar started with it"));
        assert_eq!(code, 2, "{probe}: {text}");
        assert!(text.contains(needle), "{probe}: {text}");
    }
    let no_admin: Vec<&str> = base[..5]
        .iter()
        .copied()
        .chain([r#"--app-probe=x={"tcpSocket":{"port":2100}}"#])
        .collect();
    let (code, text) = common::run_bin_within(&no_admin, DEADLINE).expect("it exits");
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("--admin"), "{text}");
}

/// The shipped annotated `file` (deploy/kubernetes/...), rendered by the
/// binary's `inject` (the kustomize var of the generated ConfigMap written
/// as the generator's name, as kustomize would with its hash), and the
/// hand-written manifest it replaced (tests/e2e/inject/`fixture`).
fn shipped_and_hand_written(file: &str, fixture: &str) -> (Vec<Value>, Vec<Value>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |rel: &str| std::fs::read_to_string(root.join(rel)).unwrap();
    let hand = yaml::load(&read(&format!("tests/e2e/inject/{fixture}"))).unwrap();
    let shipped = read(&format!("deploy/kubernetes/{file}"))
        .replace("$(CONTROLLER_MTLS_SIDECAR)", "controller-mtls-sidecar");
    assert!(
        !shipped.contains("initContainers"),
        "{file} holds a hand-written container again"
    );
    let rendered = yaml::load(&inject_cli(&shipped)).unwrap();
    assert_eq!(rendered.len(), hand.len());
    (rendered, hand)
}

/// Gives the injected workload of `kind` in `rendered` the hand-written
/// one's names, after checking injection's: the port `mtls-admin` (was
/// `admin`) and the probes on it, the volumes and mounts
/// (`mtls-sidecar-identity` was `mtls`, `mtls-sidecar-config` was
/// `config`), and the pod template's labels and annotations (checking the
/// label the PodMonitor selects).
fn named_as_hand_written(rendered: &mut [Value], hand: &[Value], kind: &str) {
    let w = rendered.iter_mut().find(|d| d["kind"] == kind).unwrap();
    let hand_w = hand.iter().find(|d| d["kind"] == kind).unwrap();
    let template = &mut w["spec"]["template"];
    assert_eq!(
        template["metadata"]["labels"][INJECTED_LABEL], "true",
        "{kind}: the label the PodMonitor selects"
    );
    template["metadata"] = hand_w["spec"]["template"]["metadata"].clone();
    let spec = &mut template["spec"];
    let sidecar = &mut spec["initContainers"][0];
    let admin = sidecar["ports"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|p| p["name"] == "mtls-admin")
        .expect("a port mtls-admin");
    admin["name"] = json!("admin");
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(sidecar[probe]["httpGet"]["port"], "mtls-admin", "{probe}");
        sidecar[probe]["httpGet"]["port"] = json!("admin");
    }
    let rename = |v: &mut Value| {
        let hand_name = match v["name"].as_str() {
            Some("mtls-sidecar-identity") => "mtls",
            Some("mtls-sidecar-config") => "config",
            other => panic!("{kind}: an unexpected volume {other:?}"),
        };
        v["name"] = json!(hand_name);
    };
    sidecar["volumeMounts"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .for_each(rename);
    spec["volumes"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .for_each(rename);
}

fn assert_same_documents(rendered: &[Value], hand: &[Value]) {
    for (ours, theirs) in rendered.iter().zip(hand) {
        assert_eq!(
            ours, theirs,
            "{} {}: rendered (left) against hand-written (right)",
            theirs["kind"], theirs["metadata"]["name"]
        );
    }
}

/// The shipped replica (deploy/kubernetes/replica.yaml) is an annotated
/// template; rendered by the binary's `inject`, it is the hand-written
/// replica it replaced (kept as tests/e2e/inject/replica-hand-written.yaml)
/// in every field but the names injection gives, the pod template's labels
/// and annotations, and a drain derived from the grace period: the same
/// arguments (`--exclusive` and `--allow-san` included), image,
/// securityContext of pod and sidecar, probes, resources (a 64Mi limit),
/// projected sources, mounts and application container. The other objects
/// of the file pass through unchanged.
#[test]
fn the_shipped_replica_migrated_injects_into_the_same_shape() {
    let (mut rendered, hand) =
        shipped_and_hand_written("replica.yaml", "replica-hand-written.yaml");
    named_as_hand_written(&mut rendered, &hand, "StatefulSet");
    let set = rendered
        .iter_mut()
        .find(|d| d["kind"] == "StatefulSet")
        .unwrap();
    let args = set["spec"]["template"]["spec"]["initContainers"][0]["args"]
        .as_array_mut()
        .unwrap();
    let drain = args
        .iter_mut()
        .find(|a| {
            a.as_str()
                .is_some_and(|a| a.starts_with("--drain-timeout="))
        })
        .expect("--drain-timeout");
    // A grace period of 60 s leaves a 55 s drain (the hand-written 30 s).
    assert_eq!(*drain, json!("--drain-timeout=55s"));
    *drain = json!("--drain-timeout=30s");
    assert_same_documents(&rendered, &hand);
}

/// The shipped controller (deploy/kubernetes/controller.yaml), rendered
/// by `inject`, is the hand-written controller it replaced
/// (tests/e2e/inject/controller-hand-written.yaml) but for the names
/// injection gives: `run --config` from the same ConfigMap mounted whole
/// at the same path, the same projected credentials, securityContext,
/// probes and resources (the 32Mi limit its annotation asks for).
#[test]
fn the_shipped_controller_migrated_injects_into_the_same_shape() {
    let (mut rendered, hand) =
        shipped_and_hand_written("controller.yaml", "controller-hand-written.yaml");
    named_as_hand_written(&mut rendered, &hand, "Deployment");
    assert_same_documents(&rendered, &hand);
}

/// A gRPC application (h2c on loopback) whose health service answers
/// SERVING while `serving`, NOT_SERVING otherwise.
async fn grpc_application() -> (u16, Arc<AtomicBool>) {
    use http_body_util::{BodyExt, StreamBody};
    use hyper::body::{Bytes, Frame};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let serving = Arc::new(AtomicBool::new(true));
    let s = serving.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let s = s.clone();
            let service =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let s = s.clone();
                    async move {
                        assert_eq!(req.uri().path(), "/grpc.health.v1.Health/Check");
                        let _ = req.into_body().collect().await;
                        let status = if s.load(Ordering::SeqCst) { 1u8 } else { 2 };
                        let mut trailers = hyper::HeaderMap::new();
                        trailers.insert("grpc-status", "0".parse().unwrap());
                        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
                            Ok(Frame::data(Bytes::from(vec![0, 0, 0, 0, 2, 0x08, status]))),
                            Ok(Frame::trailers(trailers)),
                        ];
                        let body = StreamBody::new(futures_util::stream::iter(frames));
                        Ok::<_, std::convert::Infallible>(
                            hyper::Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body)
                                .unwrap(),
                        )
                    }
                });
            tokio::spawn(
                hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tcp), service),
            );
        }
    });
    (port, serving)
}

/// A grpc liveness probe at the target port, rewritten, is performed by
/// the sidecar as the gRPC health check it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewritten_grpc_probe_is_a_grpc_health_check() {
    let (app_port, serving) = grpc_application().await;
    let (listen, admin_port) = (free_port(), free_port());
    let mut obj = replica(
        "Deployment",
        json!({
            "mtls-sidecar.dev/server": format!("{listen}:{app_port}"),
            "mtls-sidecar.dev/admin-port": admin_port.to_string(),
        }),
    );
    let app = &mut obj["spec"]["template"]["spec"]["containers"][0];
    app["ports"][0]["containerPort"] = json!(app_port);
    app["livenessProbe"] = json!({"grpc": {"port": app_port}, "timeoutSeconds": 2});
    let injected: Value = serde_json::from_str(&inject_cli(&pretty(&obj))).unwrap();
    let sidecar = sidecar_of(&injected).clone();
    let liveness = injected["spec"]["template"]["spec"]["containers"][0]["livenessProbe"].clone();
    assert_eq!(
        liveness,
        json!({"httpGet": {"path": "/app-probe/replica/livenessProbe", "port": admin_port}, "timeoutSeconds": 2})
    );

    let pki = Pki::new("grpc CA");
    let tmp = tempfile::tempdir().unwrap();
    let vol = AtomicDir::new(&tmp.path().join("identity")).unwrap();
    let server = pki.issue(&LeafSpec::dns("replica.env-1.svc", Role::Server, 30));
    common::publish_identity(&vol, &server, &pki.ca.cert_pem);
    let (sc, admin) = start_injected(
        &sidecar,
        &[("mtls-sidecar-identity", vol.path().to_path_buf())],
    )
    .await;
    let a = run_probe(&admin, &liveness).await;
    assert_eq!(a.code, 200, "{}", a.body);
    serving.store(false, Ordering::SeqCst);
    let a = run_probe(&admin, &liveness).await;
    assert_eq!(a.code, 503, "{}", a.body);
    assert!(a.body.contains("not SERVING"), "{}", a.body);
    drop(sc);
}
