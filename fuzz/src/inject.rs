//! Injection as the webhook and `inject` meet arbitrary input: the
//! webhook's body (`tools::webhook::review::review`) and a manifest's
//! text (`tools::inject::run::transform`, the YAML or JSON loader and the
//! injection behind it). Never a panic; the webhook answers 400 or a
//! well-formed review whose patch, applied by `json_patch::patch`, makes
//! the pod `inject` makes; an accepted manifest injected twice equals
//! once, and an error names the input.

use base64::Engine;
use mtls_sidecar::tools::inject::manifest::{pod_dns_name, Action};
use mtls_sidecar::tools::inject::{self, run, Options, Target};
use mtls_sidecar::tools::webhook::review::{review, Namespace, Outcome};
use serde_json::{json, Value};

/// The input name `transform` is given.
pub const FROM: &str = "fuzz.yaml";

/// The webhook's answer to `body`, from each of its two entries.
pub fn check_review(body: &[u8]) {
    for namespace in [Namespace::Unknown, Namespace::Enabled] {
        check_one_review(body, namespace);
    }
}

fn check_one_review(body: &[u8], namespace: Namespace) {
    let opts = Options::default();
    let a = review(body, &opts, namespace);
    if a.status != 200 {
        assert!(matches!(a.status, 400 | 413), "status {}", a.status);
        assert_eq!(a.outcome, Outcome::Malformed);
        assert!(
            String::from_utf8_lossy(&a.body).starts_with("malformed AdmissionReview: "),
            "{}",
            String::from_utf8_lossy(&a.body)
        );
        return;
    }
    assert_ne!(
        a.outcome,
        Outcome::Malformed,
        "a 200 that reads as malformed"
    );
    let request: Value = serde_json::from_slice(body).expect("a 200 answers a JSON body");
    let request = &request["request"];
    let answer: Value = serde_json::from_slice(&a.body).expect("the answer is JSON");
    assert_eq!(answer["apiVersion"], json!("admission.k8s.io/v1"));
    assert_eq!(answer["kind"], json!("AdmissionReview"));
    let response = &answer["response"];
    assert_eq!(response["uid"], request["uid"], "the uid echoed");
    assert_eq!(
        response["allowed"],
        json!(a.outcome != Outcome::Refused),
        "{response}"
    );
    let pod = &request["object"];
    let read = as_namespace_reads(pod, namespace);
    let injected = || {
        let target = Target {
            object: "Pod".into(),
            pod_dns_name: pod_dns_name(&read),
        };
        inject::inject(&read, &target, &opts)
    };
    match a.outcome {
        Outcome::Injected => {
            assert_eq!(response["patchType"], json!("JSONPatch"));
            let patch = decode_patch(response);
            let mut patched = pod.clone();
            json_patch::patch(&mut patched, &patch).expect("the patch applies to the pod");
            let want = injected().expect("what the webhook injected, inject injects");
            assert_eq!(patched, want, "the patched pod is not inject's");
            assert_ne!(&patched, pod, "a patch that changes nothing");
        }
        Outcome::Refused => {
            assert!(response.get("patch").is_none());
            let message = response["status"]["message"].as_str().unwrap_or_default();
            assert!(!message.is_empty(), "a refusal without a reason");
            assert!(injected().is_err(), "refused what inject injects");
        }
        Outcome::Skipped => {
            assert!(response.get("patch").is_none() && response.get("patchType").is_none());
            if is_pod_create(request) {
                assert_eq!(
                    injected().expect("a skipped pod is not refused"),
                    read,
                    "skipped a pod inject changes"
                );
            }
        }
        Outcome::Malformed => unreachable!("checked above"),
    }
}

/// The pod as the entry for namespaces that opted in reads it: with
/// `mtls-sidecar.dev/inject: enabled` when it says nothing itself
/// (docs/injection.md, "Selection").
pub fn as_namespace_reads(pod: &Value, namespace: Namespace) -> Value {
    let mut pod = pod.clone();
    if namespace == Namespace::Enabled {
        if let Some(meta) = pod.get_mut("metadata").and_then(Value::as_object_mut) {
            let ann = meta.entry("annotations").or_insert_with(|| json!({}));
            if let Some(ann) = ann.as_object_mut() {
                ann.entry("mtls-sidecar.dev/inject")
                    .or_insert(json!("enabled"));
            }
        }
    }
    pod
}

/// A core Pod being created: the only request injected.
fn is_pod_create(request: &Value) -> bool {
    request["operation"] == json!("CREATE")
        && request["kind"]["kind"] == json!("Pod")
        && matches!(request["kind"].get("group"), None | Some(Value::String(_)))
        && request["kind"]["group"]
            .as_str()
            .unwrap_or_default()
            .is_empty()
}

fn decode_patch(response: &Value) -> json_patch::Patch {
    let b64 = response["patch"].as_str().expect("a patch");
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64)
        .expect("base64");
    serde_json::from_slice(&bytes).expect("a JSON Patch")
}

/// A manifest's text through `inject`: an error names the input; what is
/// accepted, injected again, is unchanged.
pub fn check_manifest(text: &str) {
    let opts = Options::default();
    let inputs = [(FROM.to_string(), text.to_string())];
    let once = match run::transform(&inputs, Action::Inject, &opts) {
        Ok(out) => out,
        Err(e) => {
            assert!(e.starts_with(&format!("{FROM}: ")), "{e}");
            return;
        }
    };
    let again = [(FROM.to_string(), once.clone())];
    let twice = run::transform(&again, Action::Inject, &opts)
        .unwrap_or_else(|e| panic!("inject's output refused: {e}\n{once}"));
    assert_eq!(twice, once, "injecting twice differs from once");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_that_opted_in_adds_the_annotation_only_when_absent() {
        let pod = json!({"metadata": {}});
        assert_eq!(as_namespace_reads(&pod, Namespace::Unknown), pod);
        assert_eq!(
            as_namespace_reads(&pod, Namespace::Enabled),
            json!({"metadata": {"annotations": {"mtls-sidecar.dev/inject": "enabled"}}})
        );
        let off = json!({"metadata": {"annotations": {"mtls-sidecar.dev/inject": "disabled"}}});
        assert_eq!(as_namespace_reads(&off, Namespace::Enabled), off);
        let odd = json!({"metadata": {"annotations": "x"}});
        assert_eq!(as_namespace_reads(&odd, Namespace::Enabled), odd);
    }

    #[test]
    fn the_checks_pass_on_a_well_formed_review_and_manifest() {
        let pod = json!({"metadata": {"name": "db-0", "annotations": {
            "mtls-sidecar.dev/inject": "enabled", "mtls-sidecar.dev/server": "8443:8080",
            "mtls-sidecar.dev/allow-san": "a.svc", "mtls-sidecar.dev/identity": "secret:s"}},
            "spec": {"hostname": "db-0", "subdomain": "db", "containers": [{"name": "app"}]}});
        let body = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "namespace": "ns", "operation": "CREATE", "object": pod}});
        check_review(&serde_json::to_vec(&body).unwrap());
        check_review(b"{");
        check_manifest("kind: Pod\nmetadata: {name: p}\n");
        check_manifest(&format!(
            "{}",
            json!({"kind": "Pod", "metadata": pod["metadata"], "spec": pod["spec"]})
        ));
        check_manifest("a: [1\n");
    }
}
