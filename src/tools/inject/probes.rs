//! The application's probes aimed at a server route's target port: once
//! the application binds loopback the kubelet cannot reach it there (and
//! the mTLS port wants a client certificate), so such a probe is pointed
//! at the sidecar's admin endpoint, `/app-probe/<container>/<probe>`,
//! which performs the original against `127.0.0.1` (`--app-probe`).

use serde_json::{json, Map, Value};

use super::annotations::{Refusal, SERVER};

/// The probes of a container, in the order they are looked at.
pub const KINDS: &[&str] = &["startupProbe", "readinessProbe", "livenessProbe"];
/// The handlers the sidecar can perform.
const HANDLERS: &[&str] = &["httpGet", "tcpSocket", "grpc"];

/// One rewritten probe: where it was, what it was, and the sidecar's
/// `--app-probe` value that performs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Rewritten {
    pub container: String,
    pub kind: String,
    pub original: Value,
    pub app_probe: String,
}

/// The admin path that performs `container`'s `kind` probe.
pub fn path(container: &str, kind: &str) -> String {
    format!("/app-probe/{container}/{kind}")
}

/// The port a handler aims at, a named port resolved through the
/// container's own ports (as the kubelet does).
fn handler_port(handler: &Value, container: &Value) -> Option<u16> {
    match handler.get("port")? {
        Value::Number(n) => n.as_u64().and_then(|p| u16::try_from(p).ok()),
        Value::String(name) => container
            .get("ports")?
            .as_array()?
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))?
            .get("containerPort")?
            .as_u64()
            .and_then(|p| u16::try_from(p).ok()),
        _ => None,
    }
}

/// Rewrites, in place, every probe of `spec.containers` aimed at `target`
/// to the admin endpoint on `admin_port`; returns what was rewritten.
pub fn rewrite(spec: &mut Value, target: u16, admin_port: u16) -> Result<Vec<Rewritten>, Refusal> {
    let mut done = Vec::new();
    let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut) else {
        return Ok(done);
    };
    for container in containers.iter_mut() {
        let name = container
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for kind in KINDS {
            let Some(probe) = container.get(*kind) else {
                continue;
            };
            let Some((handler_name, handler)) =
                HANDLERS.iter().find_map(|h| probe.get(*h).map(|v| (*h, v)))
            else {
                continue;
            };
            let Some(port) = handler_port(handler, container) else {
                continue;
            };
            if port != target {
                continue;
            }
            let original = probe.clone();
            let app_probe = app_probe_arg(&name, kind, handler_name, handler, port, probe)?;
            let rewritten = rewritten_probe(&original, handler_name, &name, kind, admin_port);
            container[*kind] = rewritten;
            done.push(Rewritten {
                container: name.clone(),
                kind: kind.to_string(),
                original,
                app_probe,
            });
        }
    }
    Ok(done)
}

/// The probe the kubelet runs instead: the same timing, an httpGet on the
/// admin port (by number: a named port resolves in the probed container
/// only).
fn rewritten_probe(
    original: &Value,
    handler: &str,
    container: &str,
    kind: &str,
    admin: u16,
) -> Value {
    let mut probe = Map::new();
    for (k, v) in original.as_object().into_iter().flatten() {
        if k == handler {
            probe.insert(
                "httpGet".into(),
                json!({"path": path(container, kind), "port": admin}),
            );
        } else {
            probe.insert(k.clone(), v.clone());
        }
    }
    Value::Object(probe)
}

/// `--app-probe <container>/<kind>=<handler JSON>`: the original handler
/// with its port as a number, and the probe's timeout.
fn app_probe_arg(
    container: &str,
    kind: &str,
    handler_name: &str,
    handler: &Value,
    port: u16,
    probe: &Value,
) -> Result<String, Refusal> {
    let mut h = handler.clone();
    h["port"] = json!(port);
    if handler_name == "httpGet" {
        let scheme = h.get("scheme").and_then(Value::as_str).unwrap_or("HTTP");
        if scheme != "HTTP" {
            return Err(Refusal::of(
                SERVER,
                format!("container {container:?} {kind}: scheme {scheme} at the target port; the sidecar performs plain HTTP probes only (behind a TLS sidecar the application speaks plaintext)"),
            ));
        }
        if let Some(o) = h.as_object_mut() {
            o.remove("host");
            o.remove("scheme");
        }
    }
    let timeout = probe
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .unwrap_or(1);
    let spec = json!({handler_name: h, "timeoutSeconds": timeout});
    Ok(format!("{container}/{kind}={spec}"))
}

/// Puts `original` back where it was rewritten (the container by name).
/// Only a probe field, and only where the probe is still the one `rewrite`
/// wrote: the undo record is an annotation anyone editing the manifest can
/// change, so it must not be able to rewrite a container's `command`,
/// `image` or `securityContext` on `uninject`.
pub fn restore(spec: &mut Value, container: &str, kind: &str, original: Value) {
    if !KINDS.contains(&kind) {
        return;
    }
    let found = spec
        .get_mut("containers")
        .and_then(Value::as_array_mut)
        .and_then(|cs| {
            cs.iter_mut()
                .find(|c| c.get("name").and_then(Value::as_str) == Some(container))
        });
    if let Some(c) = found {
        if is_rewritten(&c[kind], container, kind) {
            c[kind] = original;
        }
    }
}

/// Whether `probe` is the admin-endpoint probe `rewrite` puts in place of
/// `container`'s `kind`.
fn is_rewritten(probe: &Value, container: &str, kind: &str) -> bool {
    probe
        .pointer("/httpGet/path")
        .and_then(Value::as_str)
        .is_some_and(|p| p == format!("/app-probe/{container}/{kind}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_probes_at_the_target_port_are_rewritten() {
        let mut spec = json!({"containers": [{
            "name": "app",
            "ports": [{"name": "http", "containerPort": 2100}],
            "livenessProbe": {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 7},
            "readinessProbe": {"tcpSocket": {"port": 2100}},
            "startupProbe": {"httpGet": {"path": "/other", "port": 8080}}
        }]});
        let done = rewrite(&mut spec, 2100, 9901).unwrap();
        assert_eq!(done.len(), 2);
        let c = &spec["containers"][0];
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"path": "/app-probe/app/livenessProbe", "port": 9901}, "periodSeconds": 7})
        );
        assert_eq!(
            c["startupProbe"]["httpGet"]["port"], 8080,
            "another port is left"
        );
        assert_eq!(
            done[1].app_probe,
            r#"app/livenessProbe={"httpGet":{"path":"/healthz","port":2100},"timeoutSeconds":1}"#
        );
        for r in done {
            restore(&mut spec, &r.container, &r.kind, r.original);
        }
        assert_eq!(
            spec["containers"][0]["livenessProbe"]["httpGet"]["port"],
            "http"
        );
    }

    #[test]
    fn an_https_probe_at_the_target_port_is_refused() {
        let mut spec = json!({"containers": [{"name": "app",
            "livenessProbe": {"httpGet": {"path": "/", "port": 2100, "scheme": "HTTPS"}}}]});
        let r = rewrite(&mut spec, 2100, 9901).unwrap_err();
        assert_eq!(r.annotation, Some(SERVER));
        assert!(r.detail.contains("HTTPS"), "{r:?}");
    }

    #[test]
    fn restore_touches_only_a_probe_it_rewrote() {
        let mut spec = json!({"containers": [{
            "name": "app",
            "command": ["app"],
            "livenessProbe": {"httpGet": {"path": "/app-probe/app/livenessProbe", "port": 9901}},
            "readinessProbe": {"exec": {"command": ["true"]}}
        }]});
        restore(&mut spec, "app", "command", json!(["sh", "-c", "evil"]));
        assert_eq!(spec["containers"][0]["command"], json!(["app"]));
        restore(
            &mut spec,
            "app",
            "readinessProbe",
            json!({"tcpSocket": {"port": 1}}),
        );
        assert_eq!(
            spec["containers"][0]["readinessProbe"]["exec"]["command"],
            json!(["true"])
        );
        restore(
            &mut spec,
            "app",
            "livenessProbe",
            json!({"tcpSocket": {"port": 2100}}),
        );
        assert_eq!(
            spec["containers"][0]["livenessProbe"],
            json!({"tcpSocket": {"port": 2100}})
        );
    }
}
