//! Injection: a pod template that opted in by annotation gets the sidecar
//! (`inject`), and gives it back (`uninject`). One pure function behind
//! every front end: a template as JSON in, the injected template as JSON
//! out (a webhook's JSON Patch is the difference), or an error naming the
//! object and the annotation. The pod is edited as a `serde_json::Value`,
//! never through typed structs, so a field this build does not know
//! survives both ways. See docs/injection.md.

pub mod annotations;
pub mod manifest;
pub mod probes;
pub mod run;
pub mod sidecar;
pub mod yaml;

use serde_json::{json, Map, Value};

use annotations::{Refusal, Request, Routes};
use sidecar::{Context, CONTAINER, VOLUMES};

/// The version written in `mtls-sidecar.dev/injected`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The image injected when none is given: this version's.
pub fn default_image() -> String {
    format!("registry.example.com/mtls-sidecar:{VERSION}")
}

/// How to inject.
#[derive(Debug, Clone)]
pub struct Options {
    /// The sidecar image (a digest is recommended).
    pub image: String,
    /// The version recorded in the template (this build's, except in tests
    /// of an upgrade).
    pub version: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            image: default_image(),
            version: VERSION.to_string(),
        }
    }
}

/// The object a template belongs to, for messages and names.
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// How messages name it: `StatefulSet env-1/replica`.
    pub object: String,
    /// The pod's own DNS name under its headless Service, as the
    /// csi-driver writes it (see [`manifest::pod_dns_name`]).
    pub pod_dns_name: Option<String>,
}

/// Why a template was not injected: the object, the annotation (when one
/// is to blame) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectError {
    pub object: String,
    pub annotation: Option<String>,
    pub detail: String,
}

impl std::fmt::Display for InjectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.annotation {
            Some(a) => write!(f, "{}: annotation {a}: {}", self.object, self.detail),
            None => write!(f, "{}: {}", self.object, self.detail),
        }
    }
}

impl std::error::Error for InjectError {}

impl Target {
    fn refuse(&self, r: Refusal) -> InjectError {
        InjectError {
            object: self.object.clone(),
            annotation: r.annotation.map(str::to_string),
            detail: r.detail,
        }
    }
}

/// A pod template's annotations, when it has any.
pub fn annotations_of(template: &Value) -> Option<&Map<String, Value>> {
    template.get("metadata")?.get("annotations")?.as_object()
}

/// The version that injected the template, when one did.
pub fn injected_version(template: &Value) -> Option<&str> {
    annotations_of(template)?
        .get(annotations::INJECTED)?
        .as_str()
}

/// The template injected: unchanged when it did not opt in or was
/// injected by this version already; re-injected when another version
/// injected it (the upgrade path).
pub fn inject(template: &Value, target: &Target, opts: &Options) -> Result<Value, InjectError> {
    let Some(ann) = annotations_of(template) else {
        return Ok(template.clone());
    };
    if !annotations::opted_in(ann).map_err(|r| target.refuse(r))? {
        return Ok(template.clone());
    }
    match injected_version(template) {
        Some(v) if v == opts.version => Ok(template.clone()),
        Some(_) => inject_fresh(&uninject(template, target)?, target, opts),
        None => inject_fresh(template, target, opts),
    }
}

/// What `uninject` needs, kept in the `injected-undo` annotation.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Undo {
    /// Keys of the pod spec that injection created.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    added: Vec<String>,
    /// Whether `securityContext.fsGroup` was added.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    fs_group: bool,
    /// The application probes as they were.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    probes: Vec<OriginalProbe>,
    /// Whether `metadata.labels` was created to hold the injected label.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    labels: bool,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct OriginalProbe {
    container: String,
    probe: String,
    original: Value,
}

fn spec_refusal(detail: String) -> Refusal {
    Refusal::pod(detail)
}

/// The containers and init containers of a spec.
fn all_containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .filter_map(|k| spec.get(k).and_then(Value::as_array))
        .flatten()
}

/// Refuses what injection cannot make safe.
fn refuse_unsafe(spec: &Value, req: &Request) -> Result<(), Refusal> {
    if spec.get("hostNetwork") == Some(&Value::Bool(true)) {
        return Err(spec_refusal(
            "hostNetwork: true: the sidecar would serve on the node's network; inject into pods on their own network only".into(),
        ));
    }
    for c in all_containers(spec) {
        if c.get("name").and_then(Value::as_str) == Some(CONTAINER) {
            return Err(spec_refusal(format!(
                "holds a hand-written container named {CONTAINER}: remove it, its volumes and its ports, and keep the annotations (docs/injection.md, \"Migrating a hand-written sidecar\")"
            )));
        }
    }
    for v in spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = v.get("name").and_then(Value::as_str).unwrap_or_default();
        if VOLUMES.contains(&name) {
            return Err(spec_refusal(format!(
                "already has a volume named {name:?}, which injection adds"
            )));
        }
    }
    let ours = sidecar::ports(req);
    for c in all_containers(spec) {
        let cname = c.get("name").and_then(Value::as_str).unwrap_or_default();
        for p in c
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let number = p.get("containerPort").and_then(Value::as_u64);
            let name = p.get("name").and_then(Value::as_str);
            for (our_name, our_port) in &ours {
                let which = if *our_name == sidecar::PORT_MTLS {
                    annotations::SERVER
                } else {
                    annotations::ADMIN_PORT
                };
                if number == Some(u64::from(*our_port)) {
                    return Err(Refusal::of(
                        which,
                        format!("port {our_port} is already used by container {cname:?}"),
                    ));
                }
                if name == Some(*our_name) {
                    return Err(Refusal::of(
                        which,
                        format!("port name {our_name:?} is already used by container {cname:?}"),
                    ));
                }
            }
            if let Routes::Client { local, .. } = req.routes {
                if number == Some(u64::from(local)) {
                    return Err(Refusal::of(
                        annotations::CLIENT,
                        format!("local port {local} is already a port of container {cname:?}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

/// The group the sidecar runs as: the pod's `fsGroup`, or ours (added).
fn pod_group(spec: &Value) -> Result<(i64, bool), Refusal> {
    if spec.get("securityContext").is_some_and(|s| !s.is_object()) {
        return Err(spec_refusal("spec.securityContext is not an object".into()));
    }
    match spec.get("securityContext").and_then(|s| s.get("fsGroup")) {
        None | Some(Value::Null) => Ok((sidecar::USER, true)),
        Some(g) => match g.as_i64() {
            Some(g) if g > 0 => Ok((g, false)),
            _ => Err(spec_refusal(format!(
                "securityContext.fsGroup {g}: the sidecar runs with the pod's fsGroup as its group, and that must be a non-root group"
            ))),
        },
    }
}

fn inject_fresh(template: &Value, target: &Target, opts: &Options) -> Result<Value, InjectError> {
    let refuse = |r| target.refuse(r);
    let ann = annotations_of(template).cloned().unwrap_or_default();
    let req = annotations::read(&ann).map_err(refuse)?;
    let mut out = template.clone();
    if !out.get("spec").is_some_and(Value::is_object) {
        return Err(refuse(spec_refusal("the template has no spec".into())));
    }
    let spec = &mut out["spec"];
    refuse_unsafe(spec, &req).map_err(refuse)?;
    let (group, add_group) = pod_group(spec).map_err(refuse)?;
    let grace = sidecar::grace_seconds(spec);
    let rewritten = match req.routes {
        Routes::Server { target: port, .. } => {
            probes::rewrite(spec, port, req.admin_port).map_err(refuse)?
        }
        _ => Vec::new(),
    };
    let ctx = Context {
        image: &opts.image,
        group,
        drain_seconds: sidecar::drain_seconds(grace),
        app_probes: rewritten.iter().map(|r| r.app_probe.clone()).collect(),
        pod_dns_name: target.pod_dns_name.as_deref(),
    };
    let mut undo = Undo {
        probes: rewritten
            .into_iter()
            .map(|r| OriginalProbe {
                container: r.container,
                probe: r.kind,
                original: r.original,
            })
            .collect(),
        ..Undo::default()
    };
    let spec = spec.as_object_mut().expect("checked to be an object above");
    for key in ["initContainers", "volumes"] {
        if !spec.contains_key(key) {
            spec.insert(key.into(), json!([]));
            undo.added.push(key.into());
        }
    }
    if add_group {
        if !spec.contains_key("securityContext") {
            spec.insert("securityContext".into(), json!({}));
            undo.added.push("securityContext".into());
        }
        spec["securityContext"]["fsGroup"] = json!(group);
        undo.fs_group = true;
    }
    let container = sidecar::container(&req, &ctx);
    check_args(&sidecar::args(&req, &ctx)).map_err(refuse)?;
    match spec.get_mut("initContainers").and_then(Value::as_array_mut) {
        Some(list) => list.insert(0, container),
        None => {
            return Err(refuse(spec_refusal(
                "spec.initContainers is not a list".into(),
            )))
        }
    }
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(list) => list.extend(sidecar::volumes(&req, &ctx)),
        None => return Err(refuse(spec_refusal("spec.volumes is not a list".into()))),
    }
    undo.labels = add_injected_label(&mut out["metadata"]).map_err(refuse)?;
    let undo = serde_json::to_string(&undo).expect("plain JSON serializes");
    let ann = out["metadata"]["annotations"]
        .as_object_mut()
        .expect("read above as an object");
    ann.insert(annotations::INJECTED.into(), json!(opts.version));
    ann.insert(annotations::UNDO.into(), json!(undo));
    Ok(out)
}

/// Labels the template `mtls-sidecar.dev/injected: "true"`; true when
/// `metadata.labels` had to be created for it.
fn add_injected_label(metadata: &mut Value) -> Result<bool, Refusal> {
    let Some(meta) = metadata.as_object_mut() else {
        return Err(spec_refusal(
            "the template's metadata is not an object".into(),
        ));
    };
    let created = !meta.contains_key("labels");
    let labels = meta.entry("labels").or_insert_with(|| json!({}));
    match labels.as_object_mut() {
        Some(l) => {
            l.insert(annotations::INJECTED_LABEL.into(), json!("true"));
            Ok(created)
        }
        None => Err(spec_refusal("metadata.labels is not a map".into())),
    }
}

/// Takes out the label `add_injected_label` added, and the labels map if
/// it created it.
fn remove_injected_label(metadata: &mut Value, created: bool) {
    let Some(meta) = metadata.as_object_mut() else {
        return;
    };
    if let Some(l) = meta.get_mut("labels").and_then(Value::as_object_mut) {
        l.shift_remove(annotations::INJECTED_LABEL);
        if created && l.is_empty() {
            meta.shift_remove("labels");
        }
    }
}

/// The annotation a sidecar flag comes from.
fn annotation_of_flag(message: &str) -> Option<&'static str> {
    [
        ("allow-san", annotations::ALLOW_SAN),
        ("expect-san", annotations::EXPECT_SAN),
        ("--target", annotations::CLIENT),
        ("--listen", annotations::SERVER),
        ("--admin", annotations::ADMIN_PORT),
        ("--app-probe", annotations::SERVER),
    ]
    .into_iter()
    .find(|(flag, _)| message.contains(flag))
    .map(|(_, a)| a)
}

/// The arguments as the sidecar itself will read them: what it would
/// refuse at start-up is refused now, naming the annotation.
fn check_args(args: &[String]) -> Result<(), Refusal> {
    use crate::cli::{Cli, Command};
    use clap::Parser;
    let refusal = |message: String| Refusal {
        annotation: annotation_of_flag(&message),
        detail: format!("the sidecar would refuse its arguments: {message}"),
    };
    let cli = Cli::try_parse_from(
        std::iter::once("mtls-sidecar".to_string()).chain(args.iter().cloned()),
    )
    .map_err(|e| {
        refusal(e.kind().to_string() + ": " + e.to_string().lines().next().unwrap_or(""))
    })?;
    let settings = match cli.command {
        Command::Server(a) => a.to_spec().validate(),
        Command::Client(a) => a.to_spec().validate(),
        // A config file is read from its ConfigMap at start-up.
        _ => return Ok(()),
    };
    settings.map(|_| ()).map_err(|e| refusal(e.to_string()))
}

/// The template without what `inject` added: unchanged when it was not
/// injected.
pub fn uninject(template: &Value, target: &Target) -> Result<Value, InjectError> {
    if injected_version(template).is_none() {
        return Ok(template.clone());
    }
    let refuse = |d: String| InjectError {
        object: target.object.clone(),
        annotation: Some(annotations::UNDO.into()),
        detail: d,
    };
    let undo: Undo = match annotations_of(template).and_then(|a| a.get(annotations::UNDO)) {
        Some(Value::String(s)) => {
            serde_json::from_str(s).map_err(|e| refuse(format!("not what injection wrote: {e}")))?
        }
        _ => return Err(refuse("missing: cannot tell what injection added".into())),
    };
    let mut out = template.clone();
    if let Some(ann) = out["metadata"]["annotations"].as_object_mut() {
        ann.shift_remove(annotations::INJECTED);
        ann.shift_remove(annotations::UNDO);
    }
    remove_injected_label(&mut out["metadata"], undo.labels);
    let Some(spec) = out.get_mut("spec").filter(|s| s.is_object()) else {
        return Ok(out);
    };
    for p in undo.probes {
        probes::restore(spec, &p.container, &p.probe, p.original);
    }
    if let Some(list) = spec.get_mut("initContainers").and_then(Value::as_array_mut) {
        list.retain(|c| c.get("name").and_then(Value::as_str) != Some(CONTAINER));
    }
    if let Some(list) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        list.retain(|v| {
            !v.get("name")
                .and_then(Value::as_str)
                .is_some_and(|n| VOLUMES.contains(&n))
        });
    }
    let spec = spec.as_object_mut().expect("checked to be an object above");
    if undo.fs_group {
        if let Some(sc) = spec
            .get_mut("securityContext")
            .and_then(Value::as_object_mut)
        {
            sc.shift_remove("fsGroup");
        }
    }
    for key in &undo.added {
        let empty = match spec.get(key) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            _ => false,
        };
        if empty {
            spec.shift_remove(key);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Templates of the wrong shape anywhere are refused or passed, never
    /// a panic (the webhook will feed this function whatever it is sent).
    #[test]
    fn malformed_templates_never_panic() {
        let ann = json!({"mtls-sidecar.dev/inject": "enabled", "mtls-sidecar.dev/server": "6877:2100",
            "mtls-sidecar.dev/allow-san": "a.svc", "mtls-sidecar.dev/identity": "secret:s"});
        let specs = [
            json!(null),
            json!("x"),
            json!([]),
            json!({"securityContext": "x"}),
            json!({"securityContext": {"fsGroup": "x"}}),
            json!({"securityContext": {"fsGroup": 0}}),
            json!({"initContainers": {}, "containers": []}),
            json!({"volumes": "x"}),
            json!({"containers": "x"}),
            json!({"containers": [1, "x", null, {"ports": "x"}, {"ports": [1, {"containerPort": "x"}]}]}),
            json!({"containers": [{"name": "a", "livenessProbe": "x", "readinessProbe": {"httpGet": "x"}}]}),
            json!({"containers": [{"name": "a", "livenessProbe": {"tcpSocket": {"port": 2100}}}], "hostNetwork": "yes"}),
        ];
        let target = Target::default();
        for spec in specs {
            let t = json!({"metadata": {"annotations": ann}, "spec": spec});
            if let Ok(out) = inject(&t, &target, &Options::default()) {
                let back = uninject(&out, &target).expect("what inject wrote uninjects");
                assert_eq!(back, t);
            }
        }
        for t in [
            json!(null),
            json!([]),
            json!({"metadata": []}),
            json!({"metadata": {"annotations": "x"}}),
        ] {
            assert_eq!(inject(&t, &target, &Options::default()).unwrap(), t);
            assert_eq!(uninject(&t, &target).unwrap(), t);
        }
    }

    /// Monitoring selects injected pods by a label (selectors see no
    /// annotations): inject adds it, uninject takes it out, and a labels
    /// map inject had to create goes too.
    #[test]
    fn injected_templates_carry_the_label_monitoring_selects_and_lose_it_on_uninject() {
        let ann = json!({"mtls-sidecar.dev/inject": "enabled", "mtls-sidecar.dev/server": "6877:2100",
            "mtls-sidecar.dev/allow-san": "a.svc", "mtls-sidecar.dev/identity": "secret:s"});
        let spec = json!({"containers": [{"name": "app", "image": "app"}]});
        let target = Target::default();
        for labels in [None, Some(json!({"app": "x"}))] {
            let mut t = json!({"metadata": {"annotations": ann}, "spec": spec});
            if let Some(l) = &labels {
                t["metadata"]["labels"] = l.clone();
            }
            let out = inject(&t, &target, &Options::default()).unwrap();
            assert_eq!(
                out["metadata"]["labels"][annotations::INJECTED_LABEL],
                json!("true")
            );
            if labels.is_some() {
                assert_eq!(out["metadata"]["labels"]["app"], json!("x"));
            }
            assert_eq!(uninject(&out, &target).unwrap(), t);
        }
        let t = json!({"metadata": {"annotations": ann, "labels": "x"}, "spec": spec});
        assert!(inject(&t, &target, &Options::default()).is_err());
    }
}
