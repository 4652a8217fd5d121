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
    let target = Target {
        object: describe(object),
        service_name: (kind == "StatefulSet")
            .then(|| text(object, &["spec", "serviceName"]).map(str::to_string))
            .flatten(),
    };
    let mut out = object.clone();
    let Some(template) = path.iter().try_fold(&mut out, |v, k| v.get_mut(*k)) else {
        return Ok(object.clone());
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
    fn other_kinds_pass_through() {
        let cm = json!({"kind": "ConfigMap", "metadata": {"name": "x",
            "annotations": {"mtls-sidecar.dev/inject": "enabled"}}});
        assert_eq!(apply(&cm, Action::Inject, &Options::default()).unwrap(), cm);
    }
}
