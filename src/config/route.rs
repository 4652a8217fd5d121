//! One route as written by a user (flags or a `[[route]]` table) and its
//! validation into a `RouteConfig`: the mode's required and forbidden
//! options, peer identities, limits and transparent-destination rules.

use std::time::Duration;

use serde::Deserialize;

use crate::credentials::CredentialSource;
use crate::identity::{SanPattern, SanPolicy};
use crate::proxy::addr::Addr;
use crate::proxy::settings::{Mode, RouteConfig};
use crate::tls::TlsVersion;

use super::credentials::CredentialSpec;
use super::values::{
    alpn, bounded_count, bounded_duration, mark, opt_duration, patterns, spki_pins, NONZERO,
};
use super::{
    bounds, invalid, ConfigError, DEFAULT_HALF_CLOSE_LINGER, DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_HANDSHAKES,
};

/// Per-route options as written by a user, before validation. The command
/// line and the TOML file both produce this.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "snake_case")]
pub struct RouteSpec {
    pub name: Option<String>,
    pub mode: Option<Mode>,
    pub listen: Option<String>,
    pub target: Option<String>,
    #[serde(default)]
    pub allow_san: Vec<String>,
    #[serde(default)]
    pub allow_any_san: bool,
    #[serde(default)]
    pub exclusive: bool,
    pub server_name: Option<String>,
    #[serde(default)]
    pub expect_san: Vec<String>,
    #[serde(default)]
    pub unsafe_listen: bool,
    pub handshake_timeout: Option<String>,
    pub connect_timeout: Option<String>,
    pub max_connections: Option<u64>,
    pub max_handshakes: Option<u64>,
    pub max_connection_lifetime: Option<String>,
    pub tls_min_version: Option<String>,
    /// Hidden `--half-close-linger` (tests); not a config file field.
    #[serde(skip)]
    pub half_close_linger: Option<String>,
    #[serde(default)]
    pub alpn: Vec<String>,
    #[serde(default)]
    pub allow_spki_sha256: Vec<String>,
    #[serde(default)]
    pub expect_spki_sha256: Vec<String>,
    pub proxy_protocol: Option<String>,
    /// Client only: accept redirected connections and dial their original
    /// destinations by the `destination` rules.
    #[serde(default)]
    pub transparent: bool,
    #[serde(default)]
    pub destination: Vec<crate::proxy::transparent::DestinationSpec>,
    /// `SO_MARK` for the route's outbound sockets (else the top-level one).
    pub mark: Option<u64>,
    /// Transparent routes only: the connections are diverted by TPROXY, not
    /// REDIRECT (`--tproxy`).
    #[serde(default)]
    pub tproxy: bool,
    /// Server only: `xfcc` puts the peer's identity in every HTTP request.
    pub http_identity: Option<String>,
    pub http_max_header_bytes: Option<u64>,
    pub http_max_headers: Option<u64>,
    /// With `http_identity`: the wait for a complete request head, idle
    /// time between requests included (`--http-header-timeout`).
    pub http_header_timeout: Option<String>,
    /// With `http_identity`: how long each read of a request body may wait
    /// (`--http-body-timeout`).
    pub http_body_timeout: Option<String>,
    /// With `http_identity`: the bytes all unfinished HTTP/1.1 request
    /// heads and h2 header blocks of the route may hold
    /// (`--http-max-pending-head-bytes`).
    pub http_max_pending_head_bytes: Option<u64>,
    /// `on`/`off`: one INFO line per authenticated connection at close
    /// (default: on for server routes, off for client routes).
    pub access_log: Option<String>,
    /// TLS 1.3 session resumption between sidecars (`--resumption`).
    #[serde(default)]
    pub resumption: bool,
    #[serde(flatten)]
    pub credentials: CredentialSpec,
}

impl RouteSpec {
    /// Validates one route. `default_creds` is the process-wide source.
    pub fn validate(
        &self,
        default_name: &str,
        default_creds: Option<&CredentialSource>,
    ) -> Result<RouteConfig, ConfigError> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| default_name.to_string());
        let label = name.clone();
        let p = |f: &str| format!("route {label:?}: {f}");
        let mode = self
            .mode
            .ok_or_else(|| invalid(p("mode"), "required (server or client)"))?;
        let listen: Addr = self
            .listen
            .as_deref()
            .ok_or_else(|| invalid(p("--listen"), "required"))?
            .parse()
            .map_err(|e| invalid(p("--listen"), e))?;
        let transparent = self.transparent_rules(mode, &listen, &p)?;
        let target: Addr = match (&transparent, self.target.as_deref()) {
            (Some(_), Some(_)) => {
                return Err(invalid(
                    p("--target"),
                    "a transparent route has no target: each connection goes to its \
                     original destination, by the destination rules",
                ))
            }
            (Some(_), None) => Addr::Tcp(crate::proxy::transparent::TARGET_LABEL.to_string()),
            (None, t) => t
                .ok_or_else(|| invalid(p("--target"), "required"))?
                .parse()
                .map_err(|e| invalid(p("--target"), e))?,
        };
        if let Addr::Systemd(_) = target {
            return Err(invalid(
                p("--target"),
                "a systemd: socket can only be listened on",
            ));
        }
        let credentials = match self.credentials.to_source(&p("--"))? {
            Some(c) => c,
            None => default_creds
                .cloned()
                .ok_or_else(|| invalid(p("--tls-dir"), "required (or --cert, --key and --ca)"))?,
        };
        let mut server_name = None;
        let peer_sans = match mode {
            Mode::Server => {
                if !self.expect_san.is_empty()
                    || self.server_name.is_some()
                    || self.unsafe_listen
                    || !self.expect_spki_sha256.is_empty()
                {
                    return Err(invalid(
                        p("--expect-san/--server-name/--unsafe-listen/--expect-spki-sha256"),
                        "only valid for client routes",
                    ));
                }
                match (self.allow_any_san, self.allow_san.is_empty()) {
                    (true, true) => SanPolicy::Any,
                    (false, false) => {
                        SanPolicy::OneOf(patterns(&p("--allow-san"), &self.allow_san)?)
                    }
                    (true, false) => {
                        return Err(invalid(p("--allow-any-san"), "conflicts with --allow-san"))
                    }
                    (false, true) => {
                        return Err(invalid(
                            p("--allow-san"),
                            "required: name the client identities to accept (or --allow-any-san)",
                        ))
                    }
                }
            }
            Mode::Client => {
                if !self.allow_san.is_empty()
                    || self.allow_any_san
                    || self.exclusive
                    || self.proxy_protocol.is_some()
                    || !self.allow_spki_sha256.is_empty()
                {
                    return Err(invalid(
                        p("--allow-san/--allow-any-san/--exclusive/--proxy-protocol/--allow-spki-sha256"),
                        "only valid for server routes",
                    ));
                }
                // A transparent route's listener is plaintext too.
                if !listen.is_local_only() && !self.unsafe_listen {
                    return Err(invalid(
                        p("--listen"),
                        format!(
                            "{listen} is reachable from other hosts and the client side is \
                             plaintext; listen on loopback or unix:, or pass --unsafe-listen"
                        ),
                    ));
                }
                if let Some(rules) = &transparent {
                    // Each rule carries its own; see transparent_rules.
                    if let CredentialSource::WorkloadApi { .. } = &credentials {
                        for rule in &rules.rules {
                            let sans: Vec<String> =
                                rule.expect_san.iter().map(|s| s.to_string()).collect();
                            super::credentials::spiffe_expectation(&sans).map_err(|e| {
                                invalid(
                                    p("destination.expect_san"),
                                    format!("rule {}: {e}", rule.matches),
                                )
                            })?;
                        }
                    }
                    server_name = None;
                    SanPolicy::OneOf(rules.all_sans())
                } else {
                    let sni = match &self.server_name {
                        Some(n) => n.clone(),
                        None => target
                            .host()
                            .ok_or_else(|| {
                                invalid(
                                    p("--server-name"),
                                    "required when --target is a unix socket",
                                )
                            })?
                            .to_string(),
                    };
                    rustls_pki_types::ServerName::try_from(sni.clone()).map_err(|_| {
                        invalid(
                            p("--server-name"),
                            format!("{sni:?} is not a valid server name"),
                        )
                    })?;
                    if let CredentialSource::WorkloadApi { .. } = &credentials {
                        super::credentials::spiffe_expectation(&self.expect_san)
                            .map_err(|e| invalid(p("--expect-san"), e))?;
                    }
                    let expected = if self.expect_san.is_empty() {
                        vec![sni
                            .parse::<SanPattern>()
                            .map_err(|e| invalid(p("--server-name"), e))?]
                    } else {
                        patterns(&p("--expect-san"), &self.expect_san)?
                    };
                    server_name = Some(sni);
                    SanPolicy::OneOf(expected)
                }
            }
        };
        let max_connections = bounded_count(
            &p("--max-connections"),
            self.max_connections,
            DEFAULT_MAX_CONNECTIONS,
            bounds::MAX_CONNECTIONS,
        )?;
        let max_handshakes = bounded_count(
            &p("--max-handshakes"),
            self.max_handshakes,
            DEFAULT_MAX_HANDSHAKES,
            bounds::MAX_HANDSHAKES,
        )?;
        let tls_min_version = match &self.tls_min_version {
            Some(v) => v.parse().map_err(|e| invalid(p("--tls-min-version"), e))?,
            None => TlsVersion::Tls13,
        };
        let spki_pins = match mode {
            Mode::Server => spki_pins(&p("--allow-spki-sha256"), &self.allow_spki_sha256)?,
            Mode::Client => spki_pins(&p("--expect-spki-sha256"), &self.expect_spki_sha256)?,
        };
        let proxy_protocol = match self.proxy_protocol.as_deref() {
            None => false,
            Some("v2") => true,
            Some(other) => {
                return Err(invalid(
                    p("--proxy-protocol"),
                    format!("{other:?}: the only version is v2"),
                ))
            }
        };
        let mut alpn = alpn(&p("--alpn"), &self.alpn)?;
        let http = super::http::validate(&self.http_spec(), mode, &mut alpn, &p)?;
        let max_connection_lifetime = match &self.max_connection_lifetime {
            Some(s) => Some(bounded_duration(
                &p("--max-connection-lifetime"),
                s,
                NONZERO,
                bounds::CONNECTION_LIFETIME,
            )?),
            None => None,
        };
        Ok(RouteConfig {
            name,
            mode,
            listen,
            target,
            peer_sans,
            server_name,
            exclusive: self.exclusive,
            handshake_timeout: opt_duration(
                &p("--handshake-timeout"),
                &self.handshake_timeout,
                Duration::from_secs(10),
                NONZERO,
                bounds::TIMEOUT,
            )?,
            connect_timeout: opt_duration(
                &p("--connect-timeout"),
                &self.connect_timeout,
                Duration::from_secs(5),
                NONZERO,
                bounds::TIMEOUT,
            )?,
            max_connections,
            max_handshakes,
            max_connection_lifetime,
            tls_min_version,
            half_close_linger: opt_duration(
                &p("--half-close-linger"),
                &self.half_close_linger,
                DEFAULT_HALF_CLOSE_LINGER,
                NONZERO,
                bounds::HALF_CLOSE_LINGER,
            )?,
            alpn,
            spki_pins,
            proxy_protocol,
            credentials,
            transparent,
            mark: self.mark.map(|m| mark(&p("--mark"), m)).transpose()?,
            tproxy: self.tproxy,
            http,
            access_log: super::values::on_off(
                &p("--access-log"),
                self.access_log.as_deref(),
                mode == Mode::Server,
            )?,
            resumption: self.resumption,
        })
    }

    fn http_spec(&self) -> super::http::HttpSpec<'_> {
        super::http::HttpSpec {
            identity: self.http_identity.as_deref(),
            max_header_bytes: self.http_max_header_bytes,
            max_headers: self.http_max_headers,
            header_timeout: self.http_header_timeout.clone(),
            body_timeout: self.http_body_timeout.clone(),
            max_pending_head_bytes: self.http_max_pending_head_bytes,
        }
    }

    /// A transparent route's validated rules (`None` for other routes):
    /// a client route, listening on TCP, whose SANs and SNI are set per rule.
    fn transparent_rules(
        &self,
        mode: Mode,
        listen: &Addr,
        p: &dyn Fn(&str) -> String,
    ) -> Result<Option<std::sync::Arc<crate::proxy::transparent::Destinations>>, ConfigError> {
        if !self.transparent {
            if self.tproxy {
                return Err(invalid(
                    p("--tproxy"),
                    "only valid for transparent routes (transparent = true)",
                ));
            }
            if !self.destination.is_empty() {
                return Err(invalid(
                    p("destination"),
                    "destination rules are only for transparent routes (transparent = true)",
                ));
            }
            return Ok(None);
        }
        if mode != Mode::Client {
            return Err(invalid(
                p("--transparent"),
                "only valid for client routes (a server is made transparent by the \
                 inbound redirect rules alone)",
            ));
        }
        if matches!(listen, Addr::Unix(_)) {
            return Err(invalid(
                p("--listen"),
                "a transparent route listens on TCP: redirected connections cannot \
                 arrive on a unix socket",
            ));
        }
        if self.tproxy && !matches!(listen, Addr::Tcp(_)) {
            return Err(invalid(
                p("--listen"),
                "a tproxy route binds its own host:port listener (IP_TRANSPARENT \
                 is set before bind)",
            ));
        }
        if !self.expect_san.is_empty() || self.server_name.is_some() {
            return Err(invalid(
                p("--expect-san/--server-name"),
                "a transparent route sets expect_san and server_name in each \
                 [[route.destination]] rule",
            ));
        }
        let rules = crate::proxy::transparent::Destinations::validate(&p(""), &self.destination)
            .map_err(|e| invalid(e.field, e.why))?;
        Ok(Some(std::sync::Arc::new(rules)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> RouteSpec {
        RouteSpec {
            mode: Some(Mode::Server),
            listen: Some("127.0.0.1:0".into()),
            target: Some("127.0.0.1:1".into()),
            allow_san: vec!["controller.svc".into()],
            credentials: CredentialSpec {
                tls_dir: Some("/x".into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn server_needs_an_allow_list() {
        let mut r = server();
        r.allow_san.clear();
        let e = r.validate("server", None).unwrap_err().to_string();
        assert!(e.contains("--allow-san"), "{e}");
        r.allow_any_san = true;
        assert_eq!(
            r.validate("server", None).unwrap().peer_sans,
            SanPolicy::Any
        );
    }

    #[test]
    fn client_refuses_public_plaintext_listener() {
        let r = RouteSpec {
            mode: Some(Mode::Client),
            listen: Some("0.0.0.0:2100".into()),
            target: Some("replica.svc:6877".into()),
            credentials: CredentialSpec {
                tls_dir: Some("/x".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(r
            .validate("client", None)
            .unwrap_err()
            .to_string()
            .contains("--unsafe-listen"));
        let ok = RouteSpec {
            unsafe_listen: true,
            ..r
        }
        .validate("client", None)
        .unwrap();
        assert_eq!(ok.server_name.as_deref(), Some("replica.svc"));
        assert_eq!(
            ok.peer_sans,
            SanPolicy::OneOf(vec!["replica.svc".parse().unwrap()])
        );
    }
}
