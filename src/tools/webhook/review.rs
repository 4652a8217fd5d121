//! One AdmissionReview judged: the request's bytes in, the HTTP status and
//! the response's bytes out. Pure (no I/O), so every path is a unit test.
//!
//! The envelope is read through small serde structs of our own rather than
//! kube-core's (5.0) `AdmissionReview<DynamicObject>`: its `DynamicObject`
//! reads `metadata` into k8s-openapi's typed `ObjectMeta`, which drops a
//! metadata field that version does not know, and its `AdmissionResponse`
//! writes `patch` as a JSON array of byte values where the contract (and
//! the AdmissionReview documentation) say base64. The pod stays a
//! `serde_json::Value`, so a field this build does not know survives into
//! the injected pod and the patch. The patch is `json_patch::diff`, at the
//! json-patch major kube-core uses.

use base64::Engine;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::tools::inject::{self, Options, Target};

/// The only version of the envelope served.
pub const API_VERSION: &str = "admission.k8s.io/v1";
const KIND: &str = "AdmissionReview";

/// How one review ended, the `result` label of the reviews counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Allowed with a patch that adds the sidecar.
    Injected,
    /// Allowed unchanged: not opted in, already injected, not a Pod CREATE.
    Skipped,
    /// `allowed: false`: the pod asked for injection in a way that cannot be
    /// honoured (a bad annotation, an unsafe spec).
    Refused,
    /// HTTP 400 or 413: no review could be read.
    Malformed,
}

impl Outcome {
    pub const ALL: [Outcome; 4] = [
        Outcome::Injected,
        Outcome::Skipped,
        Outcome::Refused,
        Outcome::Malformed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Injected => "injected",
            Outcome::Skipped => "skipped",
            Outcome::Refused => "refused",
            Outcome::Malformed => "malformed",
        }
    }
}

/// What to send back.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: u16,
    /// JSON (an AdmissionReview) when the status is 200, else plain text.
    pub body: Vec<u8>,
    pub outcome: Outcome,
}

impl Answer {
    /// A body that is no review: 400 with the reason.
    pub fn malformed(detail: impl std::fmt::Display) -> Answer {
        Answer {
            status: 400,
            body: format!("malformed AdmissionReview: {detail}\n").into_bytes(),
            outcome: Outcome::Malformed,
        }
    }

    /// A body over `limit` bytes: 413.
    pub fn too_large(limit: usize) -> Answer {
        Answer {
            status: 413,
            body: format!("AdmissionReview larger than {limit} bytes\n").into_bytes(),
            outcome: Outcome::Malformed,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Review {
    api_version: String,
    kind: String,
    request: Option<ReviewRequest>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReviewRequest {
    uid: String,
    kind: GroupVersionKind,
    #[serde(default)]
    namespace: Option<String>,
    operation: String,
    #[serde(default)]
    object: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct GroupVersionKind {
    #[serde(default)]
    group: String,
    kind: String,
}

/// What the webhook configuration's entry says of the pod's namespace: the
/// entry that selects namespaces labelled `mtls-sidecar.dev/inject=enabled`
/// calls [`NAMESPACE_ENABLED_PATH`] (the API server does not send the
/// namespace's labels, and a webhook Service path may hold no query).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Namespace {
    /// Only the pod's own annotation opts it in.
    Unknown,
    /// The namespace opted in: a pod without `mtls-sidecar.dev/inject` is
    /// injected; the pod's own value wins.
    Enabled,
}

/// The path of the entry for pods whose own annotation opts them in.
pub const INJECT_PATH: &str = "/inject";
/// The path of the entry for namespaces that opted in. Every segment of a
/// webhook's `clientConfig.service.path` must be a DNS-1123 subdomain, so
/// the namespace's word is a path segment, not a query.
pub const NAMESPACE_ENABLED_PATH: &str = "/inject/namespace-enabled";

/// A query is no review: the API server never sends one.
pub fn no_query(query: Option<&str>) -> Result<(), String> {
    match query {
        None | Some("") => Ok(()),
        Some(q) => Err(format!(
            "unknown query {q:?}: use {INJECT_PATH} or {NAMESPACE_ENABLED_PATH}, without a query"
        )),
    }
}

impl Namespace {
    /// The entry a request path belongs to; `None` for any other path.
    pub fn from_path(path: &str) -> Option<Namespace> {
        match path {
            INJECT_PATH => Some(Namespace::Unknown),
            NAMESPACE_ENABLED_PATH => Some(Namespace::Enabled),
            _ => None,
        }
    }
}

/// The pod as injection reads it: with `mtls-sidecar.dev/inject: enabled`
/// added when its namespace opted in and it says nothing itself.
fn opted_in_by_namespace(pod: &Value, namespace: Namespace) -> Value {
    let mut pod = pod.clone();
    if namespace == Namespace::Unknown {
        return pod;
    }
    let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) else {
        return pod;
    };
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if let Some(a) = annotations.as_object_mut() {
        if !a.contains_key(inject::annotations::INJECT) {
            a.insert(inject::annotations::INJECT.into(), json!("enabled"));
        }
    }
    pod
}

/// The envelope of a body that is JSON throughout: read whole as a
/// `Value` first, since reading straight into the structs skips the
/// fields they do not name without checking that those are JSON (a key
/// that is not UTF-8, say).
fn read_review(body: &[u8]) -> Result<Review, serde_json::Error> {
    serde_json::from_value(serde_json::from_slice::<Value>(body)?)
}

/// Judges one request body.
pub fn review(body: &[u8], opts: &Options, namespace: Namespace) -> Answer {
    let parsed = match read_review(body) {
        Ok(r) => r,
        Err(e) => return Answer::malformed(e),
    };
    if parsed.api_version != API_VERSION || parsed.kind != KIND {
        return Answer::malformed(format!(
            "{}/{}: expected {API_VERSION} {KIND}",
            parsed.api_version, parsed.kind
        ));
    }
    let Some(req) = parsed.request else {
        return Answer::malformed("no request");
    };
    if req.uid.is_empty() {
        return Answer::malformed("request.uid is empty");
    }
    if !is_pod_create(&req) {
        return respond(&req.uid, Outcome::Skipped, json!({}));
    }
    let pod = match req.object {
        Some(pod @ Value::Object(_)) => pod,
        _ => return Answer::malformed("a Pod CREATE without request.object"),
    };
    let target = Target {
        object: describe_pod(&pod, req.namespace.as_deref()),
        pod_dns_name: inject::manifest::pod_dns_name(&pod),
    };
    let read = opted_in_by_namespace(&pod, namespace);
    match inject::inject(&read, &target, opts) {
        Ok(injected) if injected == read => respond(&req.uid, Outcome::Skipped, json!({})),
        Ok(injected) => {
            let patch = json_patch::diff(&pod, &injected);
            let bytes = serde_json::to_vec(&patch).expect("a patch serializes");
            respond(
                &req.uid,
                Outcome::Injected,
                json!({
                    "patchType": "JSONPatch",
                    "patch": base64::engine::general_purpose::STANDARD.encode(bytes),
                }),
            )
        }
        Err(e) => respond(
            &req.uid,
            Outcome::Refused,
            json!({"status": {"code": 403, "reason": "Forbidden", "message": e.to_string()}}),
        ),
    }
}

/// Only a core-group Pod being created is injected; anything else the
/// webhook is sent (a configuration that selects too much) is allowed as is.
fn is_pod_create(req: &ReviewRequest) -> bool {
    req.operation == "CREATE" && req.kind.group.is_empty() && req.kind.kind == "Pod"
}

/// The 200 answer: `allowed` unless refused, with `extra` merged into the
/// response.
fn respond(uid: &str, outcome: Outcome, extra: Value) -> Answer {
    let mut response = json!({"uid": uid, "allowed": outcome != Outcome::Refused});
    if let (Some(r), Value::Object(extra)) = (response.as_object_mut(), extra) {
        r.extend(extra);
    }
    let review = json!({"apiVersion": API_VERSION, "kind": KIND, "response": response});
    Answer {
        status: 200,
        body: serde_json::to_vec(&review).expect("a review serializes"),
        outcome,
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// How messages name a pod: `Pod ns/name`, or for a pod a controller
/// creates (no name yet) `Pod ns/web-7d9f-* (of ReplicaSet web-7d9f)`.
/// The namespace is the request's (the object may not carry one yet).
pub fn describe_pod(pod: &Value, namespace: Option<&str>) -> String {
    let name = text(pod, &["metadata", "name"])
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .or_else(|| text(pod, &["metadata", "generateName"]).map(|g| format!("{g}*")))
        .unwrap_or_else(|| "(unnamed)".into());
    let namespace = namespace
        .filter(|n| !n.is_empty())
        .or_else(|| text(pod, &["metadata", "namespace"]));
    let mut out = match namespace {
        Some(ns) => format!("Pod {ns}/{name}"),
        None => format!("Pod {name}"),
    };
    if let Some(owner) = owner_of(pod) {
        out.push_str(&format!(" (of {owner})"));
    }
    out
}

/// The pod's controller (else its first owner), as `Kind name`.
fn owner_of(pod: &Value) -> Option<String> {
    let owners = pod.get("metadata")?.get("ownerReferences")?.as_array()?;
    let owner = owners
        .iter()
        .find(|o| o.get("controller") == Some(&Value::Bool(true)))
        .or_else(|| owners.first())?;
    let kind = text(owner, &["kind"]).unwrap_or("owner");
    let name = text(owner, &["name"]).unwrap_or("(unnamed)");
    Some(format!("{kind} {name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review_of(object: Value) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "apiVersion": API_VERSION,
            "kind": "AdmissionReview",
            "request": {
                "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": "shop",
                "operation": "CREATE",
                "object": object,
            }
        }))
        .unwrap()
    }

    fn response(a: &Answer) -> Value {
        let v: Value = serde_json::from_slice(&a.body).unwrap();
        v["response"].clone()
    }

    #[test]
    fn a_pod_not_opted_in_is_allowed_without_a_patch() {
        let a = review(
            &review_of(json!({"metadata": {"generateName": "web-"}, "spec": {"containers": []}})),
            &Options::default(),
            Namespace::Unknown,
        );
        assert_eq!((a.status, a.outcome), (200, Outcome::Skipped));
        let r = response(&a);
        assert_eq!(r["allowed"], json!(true));
        assert_eq!(r["uid"], json!("705ab4f5-6393-11e8-b7cc-42010a800002"));
        assert!(r.get("patch").is_none() && r.get("patchType").is_none());
    }

    #[test]
    fn a_bad_annotation_is_refused_naming_it_and_the_pod() {
        let pod = json!({"metadata": {"generateName": "web-7d9f-",
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web-7d9f", "controller": true}],
            "annotations": {"mtls-sidecar.dev/inject": "yes"}}, "spec": {"containers": []}});
        let a = review(&review_of(pod), &Options::default(), Namespace::Unknown);
        assert_eq!((a.status, a.outcome), (200, Outcome::Refused));
        let r = response(&a);
        assert_eq!(r["allowed"], json!(false));
        let msg = r["status"]["message"].as_str().unwrap();
        assert!(msg.contains("mtls-sidecar.dev/inject"), "{msg}");
        assert!(
            msg.contains("Pod shop/web-7d9f-* (of ReplicaSet web-7d9f)"),
            "{msg}"
        );
    }

    #[test]
    fn the_patch_leaves_fields_nobody_knows_alone() {
        let pod = json!({"metadata": {"generateName": "web-", "futureMeta": {"x": 1},
            "annotations": {"mtls-sidecar.dev/inject": "enabled",
                "mtls-sidecar.dev/server": "8443:8080", "mtls-sidecar.dev/allow-san": "a",
                "mtls-sidecar.dev/identity": "secret:s"}},
            "spec": {"futureSpec": [1], "containers": [{"name": "app", "futureC": true}]}});
        let a = review(&review_of(pod), &Options::default(), Namespace::Unknown);
        assert_eq!((a.status, a.outcome), (200, Outcome::Injected));
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(response(&a)["patch"].as_str().unwrap())
            .unwrap();
        let patch: Value = serde_json::from_slice(&bytes).unwrap();
        for op in patch.as_array().unwrap() {
            let path = op["path"].as_str().unwrap();
            assert!(!path.contains("future"), "{op}");
            assert_ne!(op["op"], json!("remove"), "{op}");
        }
    }

    #[test]
    fn a_namespace_that_opted_in_injects_pods_that_say_nothing() {
        let routes = json!({"mtls-sidecar.dev/server": "8443:8080",
            "mtls-sidecar.dev/allow-san": "a", "mtls-sidecar.dev/identity": "secret:s"});
        let pod = json!({"metadata": {"generateName": "web-", "annotations": routes},
            "spec": {"containers": [{"name": "app"}]}});
        let judge = |pod: &Value, ns| review(&review_of(pod.clone()), &Options::default(), ns);
        assert_eq!(judge(&pod, Namespace::Unknown).outcome, Outcome::Skipped);
        let a = judge(&pod, Namespace::Enabled);
        assert_eq!(a.outcome, Outcome::Injected);
        let patch = String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(response(&a)["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert!(patch.contains("mtls-sidecar.dev~1inject"), "{patch}");
        // The pod's own value wins.
        let mut disabled = pod.clone();
        disabled["metadata"]["annotations"]["mtls-sidecar.dev/inject"] = json!("disabled");
        assert_eq!(
            judge(&disabled, Namespace::Enabled).outcome,
            Outcome::Skipped
        );
        // A pod of such a namespace that cannot be injected is not admitted.
        let bare = json!({"metadata": {"generateName": "web-"}, "spec": {"containers": []}});
        assert_eq!(judge(&bare, Namespace::Enabled).outcome, Outcome::Refused);
        assert_eq!(judge(&bare, Namespace::Unknown).outcome, Outcome::Skipped);
    }

    #[test]
    fn the_namespace_is_read_from_the_path() {
        assert_eq!(Namespace::from_path("/inject"), Some(Namespace::Unknown));
        assert_eq!(
            Namespace::from_path("/inject/namespace-enabled"),
            Some(Namespace::Enabled)
        );
        for other in ["/", "/inject/", "/inject/namespace-on", "/injectx"] {
            assert_eq!(Namespace::from_path(other), None, "{other}");
        }
        assert_eq!(no_query(None), Ok(()));
        assert_eq!(no_query(Some("")), Ok(()));
        assert!(no_query(Some("namespace=enabled")).is_err());
    }

    #[test]
    fn what_is_no_review_is_malformed() {
        for body in [
            &b"not json"[..],
            br#"{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"","kind":{"kind":"Pod"},"operation":"CREATE"}}"#,
            br#"{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"u","kind":{"kind":"Pod"},"operation":"CREATE"}}"#,
        ] {
            let a = review(body, &Options::default(), Namespace::Unknown);
            assert_eq!((a.status, a.outcome), (400, Outcome::Malformed));
        }
    }

    /// A body that is not JSON is malformed even where the envelope names
    /// no field (found by the `webhook_review` fuzz target: a key of
    /// `request.resource` that is not UTF-8 was answered 200).
    #[test]
    fn a_body_that_is_not_json_anywhere_is_malformed() {
        let good = review_of(json!({"metadata": {"generateName": "web-"}}));
        assert_eq!(
            review(&good, &Options::default(), Namespace::Unknown).status,
            200
        );
        let text = String::from_utf8(good).unwrap();
        let odd_key = text.replacen("\"resource\"", "\"\u{fffd}\"", 1);
        assert_eq!(
            review(odd_key.as_bytes(), &Options::default(), Namespace::Unknown).status,
            200,
            "any UTF-8 key is JSON"
        );
        let lone_surrogate = text.replacen("\"pods\"", "\"\\ud800\"", 1);
        let mut not_utf8 = text.into_bytes();
        let at = not_utf8
            .windows(10)
            .position(|w| w == b"\"resource\"")
            .unwrap();
        not_utf8[at + 1..at + 9].fill(0xff);
        for bad in [lone_surrogate.into_bytes(), not_utf8] {
            let a = review(&bad, &Options::default(), Namespace::Unknown);
            assert_eq!((a.status, a.outcome), (400, Outcome::Malformed));
        }
    }

    #[test]
    fn only_a_pod_create_is_injected() {
        let mut body: Value = serde_json::from_slice(&review_of(json!({}))).unwrap();
        body["request"]["operation"] = json!("UPDATE");
        let a = review(
            &serde_json::to_vec(&body).unwrap(),
            &Options::default(),
            Namespace::Unknown,
        );
        assert_eq!((a.status, a.outcome), (200, Outcome::Skipped));
        body["request"]["operation"] = json!("CREATE");
        body["request"]["kind"] = json!({"group": "apps", "version": "v1", "kind": "Pod"});
        let a = review(
            &serde_json::to_vec(&body).unwrap(),
            &Options::default(),
            Namespace::Unknown,
        );
        assert_eq!((a.status, a.outcome), (200, Outcome::Skipped));
    }

    #[test]
    fn pods_are_named_by_name_then_generate_name() {
        let pod = json!({"metadata": {"name": "p", "namespace": "other"}});
        assert_eq!(describe_pod(&pod, Some("ns")), "Pod ns/p");
        assert_eq!(describe_pod(&pod, None), "Pod other/p");
        let pod = json!({"metadata": {"name": "", "generateName": "g-",
            "ownerReferences": [{"kind": "Job", "name": "j"}]}});
        assert_eq!(describe_pod(&pod, Some("ns")), "Pod ns/g-* (of Job j)");
    }
}
