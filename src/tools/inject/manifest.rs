//! Kubernetes objects: where each kind keeps its pod template, and how
//! messages name it. Every kind not listed passes through unchanged.

use serde_json::Value;

use super::{InjectError, Options, Target};

/// What to do to each pod template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Inject,
    Uninject,
}

/// Where a kind keeps its pod template (`None`: the object is the pod).
pub fn template_path(kind: &str) -> Option<&'static [&'static str]> {
    match kind {
        "Pod" => Some(&[]),
        "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job" => {
            Some(&["spec", "template"])
        }
        "CronJob" => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

fn text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k))?.as_str()
}

/// `Kind namespace/name` (a controller-created pod has only a
/// `generateName`).
pub fn describe(object: &Value) -> String {
    let kind = text(object, &["kind"]).unwrap_or("object");
    let name = text(object, &["metadata", "name"])
        .map(str::to_string)
        .or_else(|| text(object, &["metadata", "generateName"]).map(|g| format!("{g}*")))
        .unwrap_or_else(|| "(unnamed)".into());
    match text(object, &["metadata", "namespace"]) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Whether `s` is a DNS-1123 label, as Kubernetes requires of a pod's
/// `hostname` and `subdomain`: nothing else is written into a SAN (a comma
/// would split the csi-driver's list).
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The DNS name of each pod of a StatefulSet whose `serviceName` is
/// `service`: the controller names each pod, sets its `hostname` to that
/// name and its `subdomain` to the Service.
pub fn statefulset_pod_dns_name(service: &str) -> Option<String> {
    is_dns_label(service).then(|| format!("${{POD_NAME}}.{service}.${{POD_NAMESPACE}}.svc"))
}

/// A pod's (or pod template's) own DNS name under a headless Service,
/// `<hostname>.<subdomain>.<namespace>.svc`: only with both
/// `spec.hostname` and `spec.subdomain` (the endpoints controller publishes
/// a hostname only then). When the hostname is the pod's name, as the
/// StatefulSet controller makes it, `${POD_NAME}` (the name injection of
/// the set writes); else the hostname itself, never `${POD_NAME}`.
pub fn pod_dns_name(pod: &Value) -> Option<String> {
    let spec = pod.get("spec")?;
    let subdomain = text(spec, &["subdomain"]).filter(|s| is_dns_label(s))?;
    let hostname = text(spec, &["hostname"]).filter(|s| is_dns_label(s))?;
    let host = if text(pod, &["metadata", "name"]) == Some(hostname) {
        "${POD_NAME}"
    } else {
        hostname
    };
    Some(format!("{host}.{subdomain}.${{POD_NAMESPACE}}.svc"))
}

/// The DNS name the pods of `object` (of `kind`) answer to: a
/// StatefulSet's by its `serviceName` (the controller overrides the
/// template's hostname and subdomain), any other's by its template.
fn dns_name_of(object: &Value, kind: &str, template: &Value) -> Option<String> {
    if kind == "StatefulSet" {
        return text(object, &["spec", "serviceName"]).and_then(statefulset_pod_dns_name);
    }
    pod_dns_name(template)
}

/// The object with its pod template(s) injected or uninjected; `List`
/// items each in turn; any other kind unchanged.
pub fn apply(object: &Value, action: Action, opts: &Options) -> Result<Value, InjectError> {
    let kind = text(object, &["kind"]).unwrap_or_default();
    if kind == "List" || kind.ends_with("List") && object.get("items").is_some_and(Value::is_array)
    {
        let mut out = object.clone();
        if let Some(items) = out.get_mut("items").and_then(Value::as_array_mut) {
            for item in items.iter_mut() {
                *item = apply(item, action, opts)?;
            }
        }
        return Ok(out);
    }
    let Some(path) = template_path(kind) else {
        return Ok(object.clone());
    };
    let mut out = object.clone();
    let Some(template) = path.iter().try_fold(&mut out, |v, k| v.get_mut(*k)) else {
        return Ok(object.clone());
    };
    let target = Target {
        object: describe(object),
        pod_dns_name: dns_name_of(object, kind, template),
    };
    *template = match action {
        Action::Inject => super::inject(template, &target, opts)?,
        Action::Uninject => super::uninject(template, &target)?,
    };
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn objects_are_named_by_kind_namespace_and_name() {
        assert_eq!(
            describe(
                &json!({"kind": "Pod", "metadata": {"namespace": "n", "generateName": "web-"}})
            ),
            "Pod n/web-*"
        );
        assert_eq!(
            describe(&json!({"kind": "Deployment", "metadata": {"name": "d"}})),
            "Deployment d"
        );
    }

    #[test]
    fn a_pod_has_a_dns_name_only_with_a_hostname_and_a_subdomain() {
        let pod = |name: Option<&str>, spec: Value| {
            let mut p = json!({"metadata": {}, "spec": spec});
            if let Some(n) = name {
                p["metadata"]["name"] = json!(n);
            }
            pod_dns_name(&p)
        };
        let sts = json!({"hostname": "web-0", "subdomain": "web"});
        assert_eq!(
            pod(Some("web-0"), sts.clone()).as_deref(),
            Some("${POD_NAME}.web.${POD_NAMESPACE}.svc")
        );
        // A hostname that is not the pod's name is written as it is.
        assert_eq!(
            pod(Some("other"), sts.clone()).as_deref(),
            Some("web-0.web.${POD_NAMESPACE}.svc")
        );
        assert_eq!(
            pod(None, sts).as_deref(),
            Some("web-0.web.${POD_NAMESPACE}.svc")
        );
        for spec in [
            json!({"subdomain": "web"}),
            json!({"hostname": "web-0"}),
            json!({"hostname": "web-0", "subdomain": ""}),
            json!({"hostname": "a,b.example.com", "subdomain": "web"}),
            json!({"hostname": "web-0", "subdomain": "Web"}),
            json!({"hostname": "web-0", "subdomain": "-web"}),
            json!({"hostname": "web-0", "subdomain": 1}),
        ] {
            assert_eq!(pod(Some("web-0"), spec.clone()), None, "{spec}");
        }
        assert_eq!(statefulset_pod_dns_name(""), None);
        assert_eq!(statefulset_pod_dns_name(&"a".repeat(64)), None);
        assert_eq!(
            statefulset_pod_dns_name(&"a".repeat(63)),
            Some(format!(
                "${{POD_NAME}}.{}.${{POD_NAMESPACE}}.svc",
                "a".repeat(63)
            ))
        );
    }

    #[test]
    fn other_kinds_pass_through() {
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "x",
            "annotations": {"mtls-sidecar.dev/inject": "enabled"}}});
        assert_eq!(apply(&cm, Action::Inject, &Options::default()).unwrap(), cm);
    }
}
