//! The validated configuration of a sidecar process: its routes and the
//! credential source they share. Built from the command line (`server`,
//! `client`) or a TOML file (`run --config`); everything downstream takes
//! these types, never raw flags.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::credentials::{CredentialSource, CrlScope};
use crate::identity::{SanPattern, SanPolicy};
use crate::proxy::addr::Addr;
use crate::proxy::settings::{Mode, RouteConfig};
use crate::sandbox::SandboxMode;
use crate::tls::TlsVersion;

use values::{
    alpn, bounded_count, bounded_duration, mark, opt_duration, patterns, spki_pins, NONZERO,
};

mod credentials;
mod values;

pub use credentials::CredentialSpec;
pub use values::{parse_duration, MAX_ALPN};

/// How long a connection half-closed by one side may stay quiet before it
/// is reaped (so it never lingers in CLOSE_WAIT).
pub const DEFAULT_HALF_CLOSE_LINGER: Duration = Duration::from_secs(60);

/// The longest `--trust-grace` accepted: a removed CA must not linger.
pub const MAX_TRUST_GRACE: Duration = Duration::from_secs(24 * 3600);

/// Upper bounds on every count and duration, checked when flags or a file
/// are read, so no value can make a later task panic or overflow (a
/// semaphore's permit limit, an `Instant` plus a duration). Each is far
/// beyond any sensible setting; README's configuration reference lists them.
pub mod bounds {
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);
    const DAY: Duration = Duration::from_secs(24 * 3600);

    /// `--max-connections`: authenticated, forwarded connections per route.
    pub const MAX_CONNECTIONS: usize = 1_000_000;
    /// `--max-handshakes`: unauthenticated handshakes in flight per route.
    pub const MAX_HANDSHAKES: usize = 1_000_000;
    /// `--worker-threads`.
    pub const WORKER_THREADS: usize = 1024;
    /// `--handshake-timeout`, `--connect-timeout`.
    pub const TIMEOUT: Duration = HOUR;
    /// `--reload-interval`.
    pub const RELOAD_INTERVAL: Duration = HOUR;
    /// `--drain-timeout`.
    pub const DRAIN_TIMEOUT: Duration = HOUR;
    /// `--max-connection-lifetime`.
    pub const CONNECTION_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
    /// The hidden `--half-close-linger`.
    pub const HALF_CLOSE_LINGER: Duration = DAY;
}

/// The default `--max-connections`.
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;
/// The default `--max-handshakes`.
pub const DEFAULT_MAX_HANDSHAKES: usize = 1024;

/// Process-wide settings plus the routes.
#[derive(Debug, Clone)]
pub struct Settings {
    pub routes: Vec<RouteConfig>,
    pub admin: Option<Addr>,
    pub reload_interval: Duration,
    pub trust_grace: Duration,
    /// Which certificates of a peer chain are checked against the CRLs.
    pub crl_scope: CrlScope,
    pub drain_timeout: Duration,
    /// Runtime worker threads; `None`: the CPUs the process may use.
    pub worker_threads: Option<usize>,
    /// `--sandbox` / `sandbox`: how Landlock restricts the process.
    pub sandbox: SandboxMode,
}

/// A configuration problem; the message names the flag, file or field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{field}: {why}")]
    Invalid { field: String, why: String },
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
}

fn invalid(field: impl Into<String>, why: impl std::fmt::Display) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        why: why.to_string(),
    }
}

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
    #[serde(flatten)]
    pub credentials: CredentialSpec,
}

/// Process-wide options as written by a user.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub admin: Option<String>,
    pub reload_interval: Option<String>,
    pub trust_grace: Option<String>,
    /// `leaf` (default) or `chain`.
    pub crl_scope: Option<String>,
    pub drain_timeout: Option<String>,
    pub worker_threads: Option<u64>,
    /// `SO_MARK` for every route's outbound sockets (`--mark`).
    pub mark: Option<u64>,
    /// `--sandbox` / `sandbox` (default `best-effort`).
    pub sandbox: Option<SandboxMode>,
    #[serde(flatten)]
    pub credentials: CredentialSpec,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSpec>,
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
        let alpn = alpn(&p("--alpn"), &self.alpn)?;
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
        })
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

impl FileSpec {
    /// Validates process-wide options and every route.
    pub fn validate(&self) -> Result<Settings, ConfigError> {
        let default_creds = self.credentials.to_source("")?;
        if self.routes.is_empty() {
            return Err(invalid("route", "at least one [[route]] is required"));
        }
        let mut routes = Vec::new();
        for (i, r) in self.routes.iter().enumerate() {
            let default_name = match r.mode {
                Some(m) if self.routes.len() == 1 => m.as_str().to_string(),
                _ => format!("route-{i}"),
            };
            let mut route = r.validate(&default_name, default_creds.as_ref())?;
            if route.mark.is_none() {
                route.mark = self.mark.map(|m| mark("--mark", m)).transpose()?;
            }
            if routes.iter().any(|x: &RouteConfig| x.name == route.name) {
                return Err(invalid(
                    format!("route {:?}", route.name),
                    "duplicate route name",
                ));
            }
            routes.push(route);
        }
        let trust_grace = opt_duration(
            "--trust-grace",
            &self.trust_grace,
            Duration::ZERO,
            Duration::ZERO,
            Duration::MAX,
        )?;
        if trust_grace > MAX_TRUST_GRACE {
            return Err(invalid(
                "--trust-grace",
                "at most 24h: a removed CA must not stay trusted longer",
            ));
        }
        let reload_interval = opt_duration(
            "--reload-interval",
            &self.reload_interval,
            Duration::from_secs(1),
            NONZERO,
            bounds::RELOAD_INTERVAL,
        )?;
        let worker_threads = match self.worker_threads {
            Some(n) => Some(bounded_count(
                "--worker-threads",
                Some(n),
                1,
                bounds::WORKER_THREADS,
            )?),
            None => None,
        };
        let admin = match &self.admin {
            Some(a) => Some(a.parse().map_err(|e| invalid("--admin", e))?),
            None => None,
        };
        let crl_scope = match self.crl_scope.as_deref() {
            None | Some("leaf") => CrlScope::Leaf,
            Some("chain") => CrlScope::Chain,
            Some(other) => return Err(invalid("--crl-scope", format!("{other:?}: leaf or chain"))),
        };
        Ok(Settings {
            routes,
            admin,
            reload_interval,
            trust_grace,
            crl_scope,
            drain_timeout: opt_duration(
                "--drain-timeout",
                &self.drain_timeout,
                Duration::from_secs(30),
                Duration::ZERO,
                bounds::DRAIN_TIMEOUT,
            )?,
            worker_threads,
            sandbox: self.sandbox.unwrap_or_default(),
        })
    }

    /// Reads and validates a TOML config file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let spec: FileSpec = toml::from_str(&text).map_err(|e| ConfigError::Parse {
            path: path.to_path_buf(),
            source: Box::new(e),
        })?;
        spec.validate().map_err(|e| match e {
            // Name the file's keys, not the flags they mirror.
            ConfigError::Invalid { field, why } => ConfigError::Invalid {
                field: format!("config file {}: {}", path.display(), flags_to_keys(&field)),
                why: flags_to_keys(&why),
            },
            other => other,
        })
    }
}

/// Rewrites `--allow-san` as `allow_san` wherever a flag is named.
fn flags_to_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("--") {
        out.push_str(&rest[..i]);
        let flag = &rest[i + 2..];
        let end = flag
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .unwrap_or(flag.len());
        out.push_str(&flag[..end].replace('-', "_"));
        rest = &flag[end..];
    }
    out.push_str(rest);
    out
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

    #[test]
    fn file_errors_name_keys_not_flags() {
        assert_eq!(
            flags_to_keys("route \"r\": --allow-san/--allow-any-san: conflicts with --allow-san"),
            "route \"r\": allow_san/allow_any_san: conflicts with allow_san"
        );
        let dir = std::env::temp_dir().join(format!("mtls-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("s.toml");
        std::fs::write(
            &file,
            "tls_dir = \"/x\"\n[[route]]\nmode = \"server\"\nlisten = \"127.0.0.1:1\"\ntarget = \"127.0.0.1:2\"\n",
        )
        .unwrap();
        let e = FileSpec::load(&file).unwrap_err().to_string();
        assert!(
            e.contains("s.toml") && e.contains("allow_san") && !e.contains("--"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn transparent_routes_are_client_routes_without_a_target() {
        let text = r#"
            tls_dir = "/etc/mtls"
            mark = 0x6d74
            [[route]]
            name = "out"
            mode = "client"
            listen = "127.0.0.1:15001"
            transparent = true
            [[route.destination]]
            match = "10.77.0.3:2100"
            expect_san = ["other.svc"]
            [[route.destination]]
            match = "10.0.0.0/8:2100"
            tls_port = 6877
            expect_san = ["*.replica.env-1.svc"]
            server_name = "replica.env-1.svc"
            [[route]]
            name = "in"
            mode = "server"
            listen = "0.0.0.0:6877"
            target = "127.0.0.1:2100"
            allow_san = ["controller.env-1.svc"]
            mark = 7
        "#;
        let s = toml::from_str::<FileSpec>(text)
            .unwrap()
            .validate()
            .unwrap();
        let out = &s.routes[0];
        let rules = out.transparent.as_ref().expect("transparent");
        assert_eq!(rules.rules.len(), 2);
        assert_eq!(rules.rules[1].tls_port, 6877);
        assert_eq!(out.mark, Some(0x6d74), "the top-level mark");
        assert_eq!(s.routes[1].mark, Some(7), "a route's own mark wins");
        assert!(s.routes[1].transparent.is_none());

        let bad = |from: &str, to: &str, needle: &str| {
            let spec: FileSpec = toml::from_str(&text.replacen(from, to, 1)).unwrap();
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.contains(needle), "{from} -> {to}: {e}");
        };
        bad(
            "transparent = true",
            "transparent = true\ntarget = \"h:1\"",
            "no target",
        );
        bad(
            "mode = \"client\"",
            "mode = \"server\"",
            "only valid for client",
        );
        bad(
            "transparent = true",
            "transparent = false",
            "only for transparent",
        );
        bad(
            "listen = \"127.0.0.1:15001\"",
            "listen = \"unix:/x\"",
            "TCP",
        );
        bad(
            "transparent = true",
            "transparent = true\nexpect_san = [\"a.svc\"]",
            "each",
        );
        bad("\"10.77.0.3:2100\"", "\"10.0.0.0/8:2100\"", "never match");
        bad(
            "\"10.77.0.3:2100\"",
            "\"10.77.0.3\"",
            "destination[0].match",
        );
        assert!(!out.tproxy, "REDIRECT unless tproxy = true");
        let tp: FileSpec = toml::from_str(&text.replacen(
            "transparent = true",
            "transparent = true\ntproxy = true",
            1,
        ))
        .unwrap();
        assert!(tp.validate().unwrap().routes[0].tproxy);
        bad(
            "mark = 7",
            "mark = 7\ntproxy = true",
            "only valid for transparent",
        );
        bad(
            "listen = \"127.0.0.1:15001\"\n            transparent = true",
            "listen = \"systemd:out\"\n            transparent = true\ntproxy = true",
            "IP_TRANSPARENT",
        );
        // Its listener is plaintext: loopback unless unsafe_listen says so.
        let wide = "listen = \"[::]:15001\"";
        bad(
            "listen = \"127.0.0.1:15001\"",
            wide,
            "reachable from other hosts",
        );
        let spec: FileSpec = toml::from_str(&text.replacen(
            "listen = \"127.0.0.1:15001\"",
            &format!("{wide}\nunsafe_listen = true"),
            1,
        ))
        .unwrap();
        assert!(spec.validate().is_ok());
        bad("mark = 0x6d74", "mark = 0", "--mark");
        bad("mark = 7", "mark = 4294967296", "--mark");
        assert!(toml::from_str::<FileSpec>(&text.replace("tls_port", "tls_prot")).is_err());
    }

    #[test]
    fn file_format_parses_and_limits_grace() {
        let text = r#"
            tls_dir = "/etc/mtls"
            trust_grace = "25h"
            [[route]]
            name = "replica"
            mode = "server"
            listen = "0.0.0.0:6877"
            target = "127.0.0.1:2100"
            allow_san = ["controller.env-1.svc"]
        "#;
        let spec: FileSpec = toml::from_str(text).unwrap();
        assert!(spec
            .validate()
            .unwrap_err()
            .to_string()
            .contains("--trust-grace"));
        let spec: FileSpec = toml::from_str(&text.replace("25h", "1h")).unwrap();
        let s = spec.validate().unwrap();
        assert_eq!(s.routes[0].name, "replica");
        assert!(toml::from_str::<FileSpec>("bogus = 1").is_err());
    }
}
