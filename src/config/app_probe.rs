//! `--app-probe NAME=HANDLER`: an application probe the admin endpoint
//! performs at `/app-probe/NAME` (see [`crate::admin`]), for a kubelet
//! that cannot reach an application bound to loopback. HANDLER is the
//! pod's own probe handler as JSON (`{"httpGet":{"path":..,"port":N}}`,
//! `{"tcpSocket":{"port":N}}` or `{"grpc":{"port":N,"service":..}}`, with
//! `timeoutSeconds`), written by `inject`. Only a server route's loopback
//! target port may be probed: the endpoint is reachable without a client
//! certificate, so it must not become a way to reach anything else.

use std::time::Duration;

use serde::Deserialize;

use crate::proxy::addr::Addr;
use crate::proxy::settings::{Mode, RouteConfig};

use super::{invalid, ConfigError};

/// The longest a probe may take, whatever its `timeoutSeconds`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);

/// What a probe does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeCheck {
    /// An HTTP GET of `path` (2xx or 3xx passes) with these headers.
    Http {
        path: String,
        headers: Vec<(String, String)>,
    },
    /// A TCP connection.
    Tcp,
    /// The gRPC health check (`SERVING` passes) of `service`.
    Grpc { service: String },
}

/// One application probe: `/app-probe/<name>` performs `check` against
/// `<host>:<port>` (the server route's loopback target) within `timeout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppProbe {
    pub name: String,
    /// The loopback host the route forwards to (`127.0.0.1`, `[::1]` or
    /// `localhost`), so the probe reaches the application where the
    /// route does.
    pub host: String,
    pub port: u16,
    pub check: ProbeCheck,
    pub timeout: Duration,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Handler {
    http_get: Option<HttpGet>,
    tcp_socket: Option<Port>,
    grpc: Option<Grpc>,
    timeout_seconds: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HttpGet {
    path: Option<String>,
    port: u16,
    #[serde(default)]
    http_headers: Vec<Header>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    name: String,
    value: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Port {
    port: u16,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Grpc {
    port: u16,
    service: Option<String>,
}

/// A probe name: what follows `/app-probe/` (letters, digits, `-`, `.`,
/// `_`, and `/` between parts).
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        })
}

/// A header the probe may send: a token name, a value without controls.
fn valid_header(h: &Header) -> bool {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    !h.name.is_empty()
        && h.name.chars().all(token)
        && !h.name.eq_ignore_ascii_case("host")
        && !h.name.eq_ignore_ascii_case("connection")
        && !h.name.eq_ignore_ascii_case("content-length")
        && !h.name.eq_ignore_ascii_case("transfer-encoding")
        && h.value.chars().all(|c| c == '\t' || !c.is_control())
}

/// Parses one `--app-probe` value.
pub fn parse(arg: &str) -> Result<AppProbe, String> {
    let (name, json) = arg
        .split_once('=')
        .ok_or_else(|| format!("{arg:?}: expected NAME=HANDLER (JSON)"))?;
    if !valid_name(name) {
        return Err(format!(
            "{name:?}: a probe name is letters, digits, -._ and / between parts"
        ));
    }
    let h: Handler =
        serde_json::from_str(json).map_err(|e| format!("{name}: not a probe handler: {e}"))?;
    let timeout = Duration::from_secs(h.timeout_seconds.unwrap_or(1).max(1)).min(MAX_TIMEOUT);
    let (port, check) = match (h.http_get, h.tcp_socket, h.grpc) {
        (Some(g), None, None) => {
            let path = g.path.unwrap_or_else(|| "/".into());
            if !path.starts_with('/') || path.chars().any(|c| c.is_control() || c == ' ') {
                return Err(format!(
                    "{name}: path {path:?}: an absolute path without spaces"
                ));
            }
            if let Some(h) = g.http_headers.iter().find(|h| !valid_header(h)) {
                return Err(format!(
                    "{name}: header {:?}: not one a probe may send",
                    h.name
                ));
            }
            let headers = g
                .http_headers
                .into_iter()
                .map(|h| (h.name, h.value))
                .collect();
            (g.port, ProbeCheck::Http { path, headers })
        }
        (None, Some(t), None) => (t.port, ProbeCheck::Tcp),
        (None, None, Some(g)) => (
            g.port,
            ProbeCheck::Grpc {
                service: g.service.unwrap_or_default(),
            },
        ),
        _ => return Err(format!("{name}: exactly one of httpGet, tcpSocket, grpc")),
    };
    Ok(AppProbe {
        name: name.to_string(),
        host: "127.0.0.1".into(),
        port,
        check,
        timeout,
    })
}

/// The loopback host and port a server route forwards to, if it does.
fn loopback_target(route: &RouteConfig) -> Option<(String, u16)> {
    if route.mode != Mode::Server {
        return None;
    }
    let Addr::Tcp(t) = &route.target else {
        return None;
    };
    let (host, port) = t.rsplit_once(':')?;
    let loopback = matches!(host, "127.0.0.1" | "localhost" | "[::1]");
    let port = port.parse().ok()?;
    loopback.then(|| (host.to_string(), port))
}

/// Parses every `--app-probe` and checks each probes a server route's
/// loopback target port.
pub fn validate(args: &[String], routes: &[RouteConfig]) -> Result<Vec<AppProbe>, ConfigError> {
    let targets: Vec<(String, u16)> = routes.iter().filter_map(loopback_target).collect();
    let mut probes: Vec<AppProbe> = Vec::new();
    for arg in args {
        let mut p = parse(arg).map_err(|e| invalid("--app-probe", e))?;
        let Some((host, _)) = targets.iter().find(|(_, port)| *port == p.port) else {
            return Err(invalid(
                "--app-probe",
                format!(
                    "{}: port {} is not the loopback target port of a server route; only those can be probed",
                    p.name, p.port
                ),
            ));
        };
        p.host = host.clone();
        if probes.iter().any(|q| q.name == p.name) {
            return Err(invalid("--app-probe", format!("{}: given twice", p.name)));
        }
        probes.push(p);
    }
    Ok(probes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handler_is_parsed_as_the_pod_wrote_it() {
        let p = parse(r#"app/livenessProbe={"httpGet":{"path":"/healthz","port":2100,"httpHeaders":[{"name":"X-A","value":"b"}]},"timeoutSeconds":3}"#).unwrap();
        assert_eq!(p.name, "app/livenessProbe");
        assert_eq!(p.port, 2100);
        assert_eq!(p.timeout, Duration::from_secs(3));
        assert_eq!(
            p.check,
            ProbeCheck::Http {
                path: "/healthz".into(),
                headers: vec![("X-A".into(), "b".into())]
            }
        );
        assert_eq!(
            parse(r#"a={"tcpSocket":{"port":1}}"#).unwrap().check,
            ProbeCheck::Tcp
        );
        assert_eq!(
            parse(r#"a={"grpc":{"port":1}}"#).unwrap().check,
            ProbeCheck::Grpc {
                service: String::new()
            }
        );
    }

    #[test]
    fn what_a_probe_could_abuse_is_refused() {
        for bad in [
            "noequals",
            "../x={\"tcpSocket\":{\"port\":1}}",
            "a={\"tcpSocket\":{\"port\":1},\"httpGet\":{\"port\":1}}",
            "a={\"httpGet\":{\"port\":1,\"host\":\"10.0.0.1\"}}",
            "a={\"httpGet\":{\"port\":1,\"path\":\"x\"}}",
            "a={\"httpGet\":{\"port\":1,\"httpHeaders\":[{\"name\":\"Host\",\"value\":\"x\"}]}}",
            "a={\"httpGet\":{\"port\":1,\"httpHeaders\":[{\"name\":\"X\",\"value\":\"a\\r\\nB: c\"}]}}",
            "a={\"exec\":{\"command\":[\"sh\"]}}",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
