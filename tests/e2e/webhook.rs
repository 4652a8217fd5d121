//! `mtls-sidecar webhook`, judged as the API server would meet it: the
//! real binary over real TLS on loopback, real-shaped AdmissionReview v1
//! requests (a controller-created pod: `generateName`, an owner reference,
//! the service-account token's projected volume, no namespace in its
//! metadata), and the returned JSON Patch applied by an independent
//! implementation (Python's `jsonpatch`) and compared with what
//! `mtls-sidecar inject` makes of the same pod.

use crate::common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use base64::Engine;
use common::tools::skip_unless;
use common::{Pki, Sidecar, DEADLINE};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::{TokioExecutor, TokioIo};
use mtls_sidecar::identity::Role;
use mtls_sidecar::pki::{Issued, LeafSpec};
use mtls_sidecar::tools::atomic_writer::AtomicDir;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::{json, Value};

/// The webhook Service's name, as the API server dials it.
const SERVICE: &str = "mtls-injector.mtls-system.svc";
const IMAGE: &str = "registry.example.com/mtls-sidecar@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const UID: &str = "0df28fbd-5f5f-11e8-b7cc-42010a800002";

struct Webhook {
    sc: Sidecar,
    addr: String,
    admin: String,
    pki: Pki,
    dir: AtomicDir,
    _tmp: tempfile::TempDir,
}

impl Webhook {
    async fn start() -> Webhook {
        let tmp = tempfile::tempdir().unwrap();
        let pki = Pki::new("injector-ca");
        let dir = AtomicDir::new(&tmp.path().join("tls")).unwrap();
        common::publish_identity(&dir, &Webhook::leaf(&pki), &pki.ca.cert_pem);
        let tls_dir = dir.path().to_str().unwrap().to_string();
        let sc = Sidecar::start(
            &[
                "webhook",
                "--listen",
                "127.0.0.1:0",
                "--tls-dir",
                &tls_dir,
                "--admin",
                "127.0.0.1:0",
                "--image",
                IMAGE,
            ],
            1,
        )
        .await;
        let line = sc.wait_log(&["listening", "route=", "listen="]).await;
        let addr = common::field(&line, "listen");
        let admin = sc.admin();
        Webhook {
            sc,
            addr,
            admin,
            pki,
            dir,
            _tmp: tmp,
        }
    }

    /// A serving certificate as cert-manager's `Certificate` issues it.
    fn leaf(pki: &Pki) -> Issued {
        pki.issue(&LeafSpec::dns(SERVICE, Role::Server, 30))
    }

    /// A client that trusts the webhook's CA and presents no certificate,
    /// as the API server (the `caBundle`).
    fn client(&self, h2: bool) -> Arc<rustls::ClientConfig> {
        let cfg = common::client_config(None, &self.pki.ca.cert_pem);
        let mut cfg = Arc::unwrap_or_clone(cfg);
        cfg.alpn_protocols = if h2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Arc::new(cfg)
    }

    /// The status answered to a request head that declares `length`
    /// bytes of body and sends none (a limit must not wait for them).
    async fn declare_body(&self, length: usize) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let exchange = async {
            let tcp = tokio::net::TcpStream::connect(&self.addr).await.unwrap();
            let name = ServerName::try_from(SERVICE).unwrap();
            let mut tls = tokio_rustls::TlsConnector::from(self.client(false))
                .connect(name, tcp)
                .await
                .unwrap();
            let head = format!(
                "POST /inject HTTP/1.1\r\nHost: {SERVICE}\r\nContent-Type: application/json\r\n\
                 Content-Length: {length}\r\n\r\n"
            );
            tls.write_all(head.as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = tls.read(&mut buf).await.unwrap();
                assert!(n > 0, "closed without an answer");
                answer.extend_from_slice(&buf[..n]);
            }
            let text = String::from_utf8_lossy(&answer).to_string();
            text.split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or_else(|| panic!("no status line: {text}"))
        };
        tokio::time::timeout(DEADLINE, exchange)
            .await
            .expect("an answer in time")
    }

    async fn post(&self, body: Vec<u8>) -> Posted {
        post(&self.addr, self.client(false), false, body)
            .await
            .unwrap_or_else(|e| panic!("POST /inject: {e}"))
    }
}

/// One answer, and the certificate the webhook served for it.
struct Posted {
    code: u16,
    body: Vec<u8>,
    served: CertificateDer<'static>,
}

impl Posted {
    fn response(&self) -> Value {
        assert_eq!(self.code, 200, "{}", String::from_utf8_lossy(&self.body));
        let v: Value = serde_json::from_slice(&self.body).unwrap();
        assert_eq!(v["apiVersion"], json!("admission.k8s.io/v1"));
        assert_eq!(v["kind"], json!("AdmissionReview"));
        v["response"].clone()
    }
}

/// `POST /inject` on a new TLS connection (HTTP/2 or HTTP/1.1).
async fn post(
    addr: &str,
    cfg: Arc<rustls::ClientConfig>,
    h2: bool,
    body: Vec<u8>,
) -> Result<Posted, String> {
    post_to(addr, "/inject", cfg, h2, body).await
}

/// `POST path` on a new TLS connection (HTTP/2 or HTTP/1.1).
async fn post_to(
    addr: &str,
    path: &str,
    cfg: Arc<rustls::ClientConfig>,
    h2: bool,
    body: Vec<u8>,
) -> Result<Posted, String> {
    let exchange = async {
        let tcp = tokio::net::TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let name = ServerName::try_from(SERVICE).unwrap();
        let tls = tokio_rustls::TlsConnector::from(cfg)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        let served = tls
            .get_ref()
            .1
            .peer_certificates()
            .ok_or("no certificate")?[0]
            .clone();
        let req = hyper::Request::post(path)
            .header("host", SERVICE)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let io = TokioIo::new(tls);
        let resp = if h2 {
            let (mut send, conn) = hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                .await
                .map_err(|e| format!("h2: {e}"))?;
            tokio::spawn(conn);
            send.send_request(req).await
        } else {
            let (mut send, conn) = hyper::client::conn::http1::handshake(io)
                .await
                .map_err(|e| format!("http/1.1: {e}"))?;
            tokio::spawn(conn);
            send.send_request(req).await
        }
        .map_err(|e| format!("request: {e}"))?;
        let code = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("body: {e}"))?
            .to_bytes()
            .to_vec();
        Ok(Posted { code, body, served })
    };
    tokio::time::timeout(DEADLINE, exchange)
        .await
        .map_err(|_| "no answer in time".to_string())?
}

/// A pod as the ReplicaSet controller creates it (and the API server's
/// admission chain hands it on): no name yet, no namespace in its
/// metadata, the token volume the ServiceAccount admission added, and
/// fields no Kubernetes version knows (they must survive).
fn controller_pod(annotations: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-7d9f8b6c5d-",
            "futureMetadataField": {"kept": true},
            "labels": {"app": "web", "pod-template-hash": "7d9f8b6c5d"},
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web-7d9f8b6c5d",
                "uid": "5c6b8f0e-2f8a-4c4b-9a59-2f0d8e1c7b11",
                "controller": true,
                "blockOwnerDeletion": true
            }]
        },
        "spec": {
            "containers": [{
                "name": "web",
                "image": "registry.example.com/web:1.4.2",
                "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                "readinessProbe": {"httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                    "periodSeconds": 10},
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "imagePullPolicy": "IfNotPresent",
                "volumeMounts": [{
                    "name": "kube-api-access-x7k2p",
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                    "readOnly": true
                }],
                "futureContainerField": {"enabled": true}
            }],
            "volumes": [{
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}
                    ]
                }
            }],
            "serviceAccountName": "web",
            "serviceAccount": "web",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": true,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "schedulerName": "default-scheduler",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}
            ],
            "futurePodField": {"kept": [1, 2, 3]}
        },
        "status": {}
    })
}

fn opted_in() -> Value {
    json!({
        "mtls-sidecar.dev/inject": "enabled",
        "mtls-sidecar.dev/server": "8443:8080",
        "mtls-sidecar.dev/allow-san": "client.shop.svc",
        "mtls-sidecar.dev/identity": "secret:web-tls"
    })
}

/// The AdmissionReview v1 the API server sends for `pod`'s CREATE in
/// namespace `shop`.
fn review_of(pod: &Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": UID,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "shop",
            "operation": "CREATE",
            "userInfo": {
                "username": "system:serviceaccount:kube-system:replicaset-controller",
                "uid": "3a1f3c5e-0b5c-4d4e-8f8e-9c3b1f2e4d5a",
                "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system",
                    "system:authenticated"]
            },
            "object": pod,
            "oldObject": null,
            "dryRun": false,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    }))
    .unwrap()
}

/// `patch` applied to `pod` by Python's `jsonpatch`.
fn apply_with_python(dir: &std::path::Path, pod: &Value, patch: &Value) -> Value {
    let (pod_file, patch_file) = (dir.join("pod.json"), dir.join("patch.json"));
    std::fs::write(&pod_file, serde_json::to_vec(pod).unwrap()).unwrap();
    std::fs::write(&patch_file, serde_json::to_vec(patch).unwrap()).unwrap();
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import json, sys, jsonpatch\n\
             pod = json.load(open(sys.argv[1]))\n\
             patch = jsonpatch.JsonPatch(json.load(open(sys.argv[2])))\n\
             print(json.dumps(patch.apply(pod)))",
        ])
        .arg(&pod_file)
        .arg(&patch_file)
        .output();
    json_output("jsonpatch", out)
}

/// The JSON a command wrote on stdout; panics with its stderr if it failed.
fn json_output(what: &str, out: std::io::Result<std::process::Output>) -> Value {
    let out = out.unwrap_or_else(|e| panic!("run {what}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what}: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// What `mtls-sidecar inject` makes of `pod` (as a JSON manifest).
fn inject_cli(dir: &std::path::Path, pod: &Value) -> Value {
    let file = dir.join("manifest.json");
    std::fs::write(&file, serde_json::to_vec_pretty(pod).unwrap()).unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["inject", "--image", IMAGE, "-f"])
        .arg(&file)
        .output();
    json_output("inject", out)
}

fn decoded_patch(response: &Value) -> Value {
    assert_eq!(response["patchType"], json!("JSONPatch"), "{response}");
    let b64 = response["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    serde_json::from_slice(&bytes).expect("a JSON Patch")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_patch_applied_independently_equals_what_inject_makes() {
    if skip_unless(&["python3", "jsonpatch"]) {
        return;
    }
    let wh = Webhook::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let pod = controller_pod(opted_in());
    let posted = wh.post(review_of(&pod)).await;
    let r = posted.response();
    assert_eq!(r["uid"], json!(UID));
    assert_eq!(r["allowed"], json!(true));
    let patch = decoded_patch(&r);
    let patched = apply_with_python(tmp.path(), &pod, &patch);
    let injected = inject_cli(tmp.path(), &pod);
    assert_eq!(patched, injected, "the patched pod differs from inject's");
    // It is injected, and what no Kubernetes version knows survived.
    assert_eq!(
        patched["spec"]["initContainers"][0]["name"],
        json!("mtls-sidecar")
    );
    assert_eq!(patched["spec"]["initContainers"][0]["image"], json!(IMAGE));
    assert_eq!(
        patched["spec"]["futurePodField"],
        json!({"kept": [1, 2, 3]})
    );
    assert_eq!(
        patched["metadata"]["futureMetadataField"],
        json!({"kept": true})
    );
    assert_eq!(
        patched["spec"]["containers"][0]["futureContainerField"],
        json!({"enabled": true})
    );
    // The token volume is untouched.
    assert_eq!(patched["spec"]["volumes"][0], pod["spec"]["volumes"][0]);
    // The API server speaks HTTP/2 when offered: the same answer there.
    let over_h2 = post(&wh.addr, wh.client(true), true, review_of(&pod))
        .await
        .unwrap();
    assert_eq!(over_h2.code, 200);
    assert_eq!(over_h2.body, posted.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_skips_and_bad_bodies_are_answered_and_counted() {
    let wh = Webhook::start().await;

    // Not opted in: allowed, no patch.
    let r = wh
        .post(review_of(&controller_pod(json!({}))))
        .await
        .response();
    assert_eq!((&r["uid"], &r["allowed"]), (&json!(UID), &json!(true)));
    assert!(
        r.get("patch").is_none() && r.get("patchType").is_none(),
        "{r}"
    );
    let disabled = json!({"mtls-sidecar.dev/inject": "disabled"});
    let r = wh
        .post(review_of(&controller_pod(disabled)))
        .await
        .response();
    assert_eq!(r["allowed"], json!(true));
    assert!(r.get("patch").is_none(), "{r}");

    // A bad annotation: refused, naming the annotation and the pod by its
    // generateName, owner and the request's namespace.
    let mut bad = opted_in();
    bad["mtls-sidecar.dev/server"] = json!("8443");
    let r = wh.post(review_of(&controller_pod(bad))).await.response();
    assert_eq!((&r["uid"], &r["allowed"]), (&json!(UID), &json!(false)));
    assert!(r.get("patch").is_none(), "{r}");
    let msg = r["status"]["message"].as_str().expect("a message");
    assert!(msg.contains("mtls-sidecar.dev/server"), "{msg}");
    assert!(
        msg.contains("Pod shop/web-7d9f8b6c5d-* (of ReplicaSet web-7d9f8b6c5d)"),
        "{msg}"
    );

    // Not a review: 400.
    let a = wh
        .post(b"{\"apiVersion\": \"admission.k8s.io/v1\", ".to_vec())
        .await;
    assert_eq!(a.code, 400, "{}", String::from_utf8_lossy(&a.body));
    let a = wh.post(b"{\"kind\": \"Pod\"}".to_vec()).await;
    assert_eq!(a.code, 400, "{}", String::from_utf8_lossy(&a.body));

    // A pod of 3 MiB (the API server's own request limit) is read; one
    // beyond the webhook's limit is 413.
    let mut big = controller_pod(opted_in());
    big["metadata"]["labels"]["filler"] = json!("x".repeat(3 * 1024 * 1024 - 8 * 1024));
    let body = review_of(&big);
    assert!(body.len() < 3 * 1024 * 1024 && body.len() > 3 * 1024 * 1024 - 16 * 1024);
    let r = wh.post(body).await.response();
    assert_eq!(r["allowed"], json!(true));
    assert!(r.get("patch").is_some(), "{r}");
    assert_eq!(wh.declare_body(5 * 1024 * 1024).await, 413);

    // The admin endpoint: ready, alive, and the reviews by result.
    assert_eq!(common::get(&wh.admin, "/readyz").await.code, 200);
    assert_eq!(common::get(&wh.admin, "/livez").await.code, 200);
    let m = common::scrape(&wh.admin).await;
    let reviews = "mtls_sidecar_webhook_reviews_total";
    assert_eq!(m.get(reviews, &[("result", "skipped")]), 2.0);
    assert_eq!(m.get(reviews, &[("result", "refused")]), 1.0);
    assert_eq!(m.get(reviews, &[("result", "injected")]), 1.0);
    assert_eq!(m.get(reviews, &[("result", "malformed")]), 3.0);
    assert_eq!(
        m.get("mtls_sidecar_webhook_review_duration_seconds_count", &[]),
        7.0
    );
    assert_eq!(
        m.family_type("mtls_sidecar_webhook_review_duration_seconds_bucket"),
        Some("histogram")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_reviews_all_succeed() {
    let wh = Webhook::start().await;
    let pod = controller_pod(opted_in());
    let reviews = (0..50).map(|i| {
        let (addr, cfg, body) = (wh.addr.clone(), wh.client(i % 2 == 0), review_of(&pod));
        tokio::spawn(async move { post(&addr, cfg, i % 2 == 0, body).await })
    });
    let mut bodies = Vec::new();
    for r in futures_util::future::join_all(reviews).await {
        let posted = r
            .unwrap()
            .unwrap_or_else(|e| panic!("a review failed: {e}"));
        assert_eq!(posted.response()["allowed"], json!(true));
        bodies.push(posted.body);
    }
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "answers differ");
    let m = common::scrape(&wh.admin).await;
    assert_eq!(
        m.get(
            "mtls_sidecar_webhook_reviews_total",
            &[("result", "injected")]
        ),
        50.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_of_its_certificate_fails_no_review() {
    let wh = Arc::new(Webhook::start().await);
    let old = wh.post(review_of(&controller_pod(opted_in()))).await.served;
    let renewed = Webhook::leaf(&wh.pki);
    let new = renewed.cert_der.clone();
    assert_ne!(old, new);

    // A client loops reviews, each on a new connection, until it has been
    // served the renewed certificate (and a few reviews after it).
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let looping = {
        let (wh, stop, ok, failed, new) = (
            wh.clone(),
            stop.clone(),
            ok.clone(),
            failed.clone(),
            new.clone(),
        );
        tokio::spawn(async move {
            let body = review_of(&controller_pod(opted_in()));
            let mut served_new = 0;
            let mut errors = Vec::new();
            while served_new < 5 && !stop.load(Ordering::SeqCst) {
                match post(&wh.addr, wh.client(false), false, body.clone()).await {
                    Ok(p) if p.code == 200 && p.response()["allowed"] == json!(true) => {
                        ok.fetch_add(1, Ordering::SeqCst);
                        served_new += usize::from(p.served == new);
                    }
                    Ok(p) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        errors.push(format!("{}: {}", p.code, String::from_utf8_lossy(&p.body)));
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        errors.push(e);
                    }
                }
            }
            (served_new, errors)
        })
    };
    common::eventually("reviews before the renewal", || {
        ok.load(Ordering::SeqCst) >= 3
    })
    .await;
    common::publish_identity(&wh.dir, &renewed, &wh.pki.ca.cert_pem);
    let (served_new, errors) = match tokio::time::timeout(DEADLINE, looping).await {
        Ok(r) => r.unwrap(),
        Err(_) => {
            stop.store(true, Ordering::SeqCst);
            panic!(
                "the renewed certificate was never served:\n{}",
                wh.sc.logs().join("\n")
            );
        }
    };
    assert_eq!(served_new, 5);
    assert!(
        errors.is_empty(),
        "failed reviews during the renewal: {errors:?}"
    );
    assert_eq!(failed.load(Ordering::SeqCst), 0);
    // Nothing serves the old certificate any more.
    let after = wh.post(review_of(&controller_pod(opted_in()))).await;
    assert_eq!(after.served, new);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_that_opted_in_gets_its_silent_pods_injected() {
    if skip_unless(&["python3", "jsonpatch"]) {
        return;
    }
    let wh = Webhook::start().await;
    let tmp = tempfile::tempdir().unwrap();
    // The pod says how to route but not whether: its namespace's label
    // decided, and the configuration's entry for such namespaces says so.
    let mut routes = opted_in();
    routes
        .as_object_mut()
        .unwrap()
        .shift_remove("mtls-sidecar.dev/inject");
    let pod = controller_pod(routes);
    let ns_path = "/inject/namespace-enabled";
    let posted = post_to(&wh.addr, ns_path, wh.client(false), false, review_of(&pod))
        .await
        .unwrap();
    let patched = apply_with_python(tmp.path(), &pod, &decoded_patch(&posted.response()));
    let mut asked = pod.clone();
    asked["metadata"]["annotations"]["mtls-sidecar.dev/inject"] = json!("enabled");
    assert_eq!(patched, inject_cli(tmp.path(), &asked));
    // Without the namespace's word it is left alone; the pod's own
    // `disabled` wins over the namespace's.
    let r = wh.post(review_of(&pod)).await.response();
    assert!(
        r["allowed"] == json!(true) && r.get("patch").is_none(),
        "{r}"
    );
    let mut disabled = pod.clone();
    disabled["metadata"]["annotations"]["mtls-sidecar.dev/inject"] = json!("disabled");
    let posted = post_to(
        &wh.addr,
        ns_path,
        wh.client(false),
        false,
        review_of(&disabled),
    )
    .await
    .unwrap();
    let r = posted.response();
    assert!(
        r["allowed"] == json!(true) && r.get("patch").is_none(),
        "{r}"
    );
    // Another path is not found; a query (which the API server never
    // sends: a webhook Service path holds none) is no review.
    let posted = post_to(
        &wh.addr,
        "/inject/namespace-on",
        wh.client(false),
        false,
        review_of(&pod),
    )
    .await
    .unwrap();
    assert_eq!(posted.code, 404);
    let posted = post_to(
        &wh.addr,
        "/inject?namespace=enabled",
        wh.client(false),
        false,
        review_of(&pod),
    )
    .await
    .unwrap();
    assert_eq!(posted.code, 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_stops_on_sigterm_and_will_not_start_without_a_serving_certificate() {
    let Webhook { sc, .. } = Webhook::start().await;
    sc.signal(libc::SIGTERM);
    let (code, logs) = sc.wait_exit().await;
    assert_eq!(code, Some(0), "{}", logs.join("\n"));

    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("missing");
    let start = |dir: &std::path::Path| {
        let args = [
            "webhook",
            "--listen",
            "127.0.0.1:0",
            "--tls-dir",
            dir.to_str().unwrap(),
        ];
        common::run_bin_within(&args, DEADLINE).expect("it exits, refusing to start")
    };
    let (code, out) = start(&missing);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains(missing.to_str().unwrap()), "{out}");
    // A certificate that may not serve (client-only) is refused too.
    let pki = Pki::new("injector-ca");
    let client_only = pki.dir(tmp.path(), "client", &pki.leaf(SERVICE, Role::Client));
    let (code, out) = start(&client_only);
    assert_eq!(code, 2, "{out}");
    assert!(out.contains("server"), "{out}");
}

/// An HTTP/2 connection left idle after a review is closed by the webhook
/// (a GOAWAY, then the end of the connection) once it has had no request
/// open for 10 s, so idle connections cannot hold its connection slots.
/// (Without the bound it stays open, and this fails at its deadline.)
#[tokio::test]
async fn an_idle_http2_connection_is_closed() {
    use std::time::{Duration, Instant};
    let wh = Webhook::start().await;
    let tcp = tokio::net::TcpStream::connect(&wh.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(wh.client(true))
        .connect(ServerName::try_from(SERVICE).unwrap(), tcp)
        .await
        .unwrap();
    let (mut send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .unwrap();
    let conn = tokio::spawn(conn);
    let req = hyper::Request::post("/inject")
        .header("host", SERVICE)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(review_of(&controller_pod(
            opted_in(),
        )))))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.unwrap();
    let idle = Instant::now();
    // The sender stays alive: the client side never closes the connection.
    let ended = tokio::time::timeout(Duration::from_secs(30), conn).await;
    assert!(
        ended.is_ok(),
        "the idle HTTP/2 connection was still open after 30 s"
    );
    assert!(
        idle.elapsed() >= Duration::from_secs(8),
        "closed after {:?}, before the 10 s idle bound",
        idle.elapsed()
    );
    drop(send);
}

/// The webhook runs sandboxed, as a sidecar does: Landlock lets it read
/// only its `--tls-dir` and `/proc/self`, bind only its two listeners and
/// connect nowhere, and `/status` says so; the other tests here (a
/// certificate renewal among them) run under the same sandbox. (Were it
/// never applied, `/status` would say so and this would fail.)
#[tokio::test]
async fn it_runs_sandboxed_reading_only_its_certificate_and_connecting_nowhere() {
    let wh = Webhook::start().await;
    let line = wh.sc.wait_log(&["sandbox applied"]).await;
    assert!(line.contains(" INFO "), "{line}");
    let a = common::http::request(&wh.admin, "GET", "/status").await;
    assert_eq!(a.code, 200, "{}", a.body);
    let st: Value = serde_json::from_str(&a.body).unwrap();
    let sandbox = &st["sandbox"];
    assert_eq!(sandbox["filesystem"], "enforced", "{sandbox}");
    assert_eq!(sandbox["network"], "enforced", "{sandbox}");
    assert_eq!(sandbox["seccomp"], "enforced", "{sandbox}");
    assert_eq!(sandbox["connect_ports"], json!([]), "{sandbox}");
    let port = |addr: &str| -> u16 { addr.rsplit(':').next().unwrap().parse().unwrap() };
    let mut bound = vec![port(&wh.addr), port(&wh.admin)];
    bound.sort_unstable();
    assert_eq!(sandbox["bind_ports"], json!(bound), "{sandbox}");
    let tls_dir = wh.dir.path().to_str().unwrap().to_string();
    let mut readable = vec![tls_dir.as_str(), "/proc/self"];
    readable.sort_unstable();
    assert_eq!(sandbox["read_only"], json!(readable), "{sandbox}");
    // And it still answers a review.
    assert_eq!(
        wh.post(review_of(&controller_pod(opted_in()))).await.code,
        200
    );
}

/// A StatefulSet `db` of namespace `shop` (Service `db`) whose pods take
/// a csi-driver identity, and its pod `db-0` as the StatefulSet controller
/// creates it: named, `hostname` its name, `subdomain` the Service, owned
/// by the set, with the token volume admission added.
fn statefulset_and_its_pod() -> (Value, Value) {
    let annotations = json!({
        "mtls-sidecar.dev/inject": "enabled",
        "mtls-sidecar.dev/server": "8443:8080",
        "mtls-sidecar.dev/allow-san": "client.shop.svc",
        "mtls-sidecar.dev/identity": "csi:ClusterIssuer/mtls-ca",
        "mtls-sidecar.dev/san": "db.${POD_NAMESPACE}.svc"
    });
    let mut pod = controller_pod(annotations.clone());
    pod["spec"]["containers"][0]["name"] = json!("db");
    // The template's container is the pod's, before admission mounted
    // the token.
    let mut container = pod["spec"]["containers"][0].clone();
    container
        .as_object_mut()
        .unwrap()
        .shift_remove("volumeMounts");
    let template = json!({
        "metadata": {"labels": {"app": "db"}, "annotations": annotations},
        "spec": {"containers": [container]}
    });
    let set = json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "shop"},
        "spec": {"serviceName": "db", "replicas": 3,
            "selector": {"matchLabels": {"app": "db"}}, "template": template}});
    let meta = pod["metadata"].as_object_mut().unwrap();
    meta.shift_remove("generateName");
    meta.insert("name".into(), json!("db-0"));
    meta.insert(
        "labels".into(),
        json!({"app": "db", "controller-revision-hash": "db-5d8c7f9b4",
            "statefulset.kubernetes.io/pod-name": "db-0", "apps.kubernetes.io/pod-index": "0"}),
    );
    meta.insert(
        "ownerReferences".into(),
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
            "uid": "9a0e2c1d-7b3f-4e5a-8c6d-1f2e3a4b5c6d",
            "controller": true, "blockOwnerDeletion": true}]),
    );
    let spec = &mut pod["spec"];
    spec["hostname"] = json!("db-0");
    spec["subdomain"] = json!("db");
    (set, pod)
}

/// The injected volume named `name` of a pod spec.
fn volume<'a>(spec: &'a Value, name: &str) -> &'a Value {
    spec["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == json!(name)))
        .unwrap_or_else(|| panic!("no volume {name}: {spec:#}"))
}

/// A StatefulSet's pod reviewed gets the sidecar and csi volume that
/// `inject` writes into the set's template: the certificate carries the
/// pod's own name under the set's Service, read from the pod's
/// `hostname` and `subdomain`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_pod_gets_the_per_pod_san_inject_gives_its_set() {
    if skip_unless(&["python3", "jsonpatch"]) {
        return;
    }
    let wh = Webhook::start().await;
    let tmp = tempfile::tempdir().unwrap();
    let (set, pod) = statefulset_and_its_pod();
    let patch = decoded_patch(&wh.post(review_of(&pod)).await.response());
    let patched = apply_with_python(tmp.path(), &pod, &patch);
    let injected_set = inject_cli(tmp.path(), &set);
    let (from_pod, from_set) = (&patched["spec"], &injected_set["spec"]["template"]["spec"]);
    assert_eq!(from_pod["initContainers"][0], from_set["initContainers"][0]);
    assert_eq!(from_pod["securityContext"], from_set["securityContext"]);
    for name in ["mtls-sidecar-identity", "mtls-sidecar-trust"] {
        assert_eq!(volume(from_pod, name), volume(from_set, name));
    }
    let attrs = &volume(from_pod, "mtls-sidecar-identity")["csi"]["volumeAttributes"];
    assert_eq!(
        attrs["csi.cert-manager.io/dns-names"],
        json!("db.${POD_NAMESPACE}.svc,${POD_NAME}.db.${POD_NAMESPACE}.svc")
    );
    // The pod's own `inject` agrees with its review.
    assert_eq!(patched, inject_cli(tmp.path(), &pod));
}
