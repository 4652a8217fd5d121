//! The TOML config file (`run --config`): its process-wide options and
//! `[[route]]` tables, validated into `Settings`, with errors that name the
//! file's keys rather than the flags they mirror.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use crate::credentials::CrlScope;
use crate::proxy::settings::RouteConfig;
use crate::sandbox::SandboxMode;

use super::credentials::CredentialSpec;
use super::route::RouteSpec;
use super::values::{bounded_count, mark, opt_duration, NONZERO};
use super::{bounds, invalid, ConfigError, Settings, MAX_TRUST_GRACE};

/// Process-wide options as written by a user.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpec {
    pub admin: Option<String>,
    /// `on`/`off`: serve `/connections` on a non-loopback admin listener.
    pub admin_connections: Option<String>,
    pub reload_interval: Option<String>,
    pub trust_grace: Option<String>,
    /// `--workload-api-keepalive`: the ping interval on a quiet agent connection.
    pub workload_api_keepalive: Option<String>,
    /// `leaf` (default) or `chain`.
    pub crl_scope: Option<String>,
    /// `--crl-prune-age`: how long ago a serial a higher CRL number omits
    /// must have been revoked to count as pruned.
    pub crl_prune_age: Option<String>,
    pub drain_timeout: Option<String>,
    pub worker_threads: Option<u64>,
    /// `multi` or `per-core` (`--runtime`).
    pub runtime: Option<String>,
    /// `SO_MARK` for every route's outbound sockets (`--mark`).
    pub mark: Option<u64>,
    /// `--sandbox` / `sandbox` (default `best-effort`).
    pub sandbox: Option<SandboxMode>,
    /// `--app-probe NAME=HANDLER` (see [`super::app_probe`]).
    #[serde(default)]
    pub app_probe: Vec<String>,
    #[serde(flatten)]
    pub credentials: CredentialSpec,
    #[serde(default, rename = "route")]
    pub routes: Vec<RouteSpec>,
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
        let app_probes = super::app_probe::validate(&self.app_probe, &routes)?;
        if !app_probes.is_empty() && admin.is_none() {
            return Err(invalid(
                "--app-probe",
                "is served on the admin endpoint: give --admin",
            ));
        }
        Ok(Settings {
            app_probes,
            routes,
            admin,
            admin_connections: super::values::on_off(
                "--admin-connections",
                self.admin_connections.as_deref(),
                false,
            )?,
            reload_interval,
            trust_grace,
            workload_api_keepalive: opt_duration(
                "--workload-api-keepalive",
                &self.workload_api_keepalive,
                crate::credentials::workload::KEEPALIVE_DEFAULT,
                Duration::from_secs(5),
                bounds::WORKLOAD_API_KEEPALIVE,
            )?,
            crl_scope,
            crl_prune_age: super::crl_prune_age(self.crl_prune_age.as_deref())?,
            drain_timeout: opt_duration(
                "--drain-timeout",
                &self.drain_timeout,
                Duration::from_secs(30),
                Duration::ZERO,
                bounds::DRAIN_TIMEOUT,
            )?,
            worker_threads,
            runtime: super::RuntimeModel::parse(self.runtime.as_deref())?,
            sandbox: self.sandbox.unwrap_or_default(),
        })
    }

    /// Reads and validates a TOML config file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        FileSpec::parse(&text, path)
    }

    /// Parses and validates the text of a config file read from `path`
    /// (named in errors only): what [`FileSpec::load`] does after reading.
    pub fn parse(text: &str, path: &Path) -> Result<Settings, ConfigError> {
        let spec: FileSpec = toml::from_str(text).map_err(|e| ConfigError::Parse {
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

/// Rewrites `--allow-san` as `allow_san` wherever a flag is named, outside
/// the double-quoted (`{:?}`) values the message quotes from the file: those
/// are shown as written (`"xn--bcher-kva.example"` stays as it is).
fn flags_to_keys(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !quoted && rest.starts_with("--") {
            let flag = &rest[2..];
            let end = flag
                .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
                .unwrap_or(flag.len());
            out.push_str(&flag[..end].replace('-', "_"));
            rest = &flag[end..];
            continue;
        }
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_errors_name_keys_not_flags() {
        assert_eq!(
            flags_to_keys("route \"r\": --allow-san/--allow-any-san: conflicts with --allow-san"),
            "route \"r\": allow_san/allow_any_san: conflicts with allow_san"
        );
        // Quoted values are the file's own text. Found by the config fuzz
        // target: a target "…`run --config`)7" was shown as "…`run config`)7".
        assert_eq!(
            flags_to_keys(r#"route "a--b": --target: invalid "x--y\"--z" --mark"#),
            r#"route "a--b": target: invalid "x--y\"--z" mark"#
        );
        let e = FileSpec::parse(
            "[[route]]\nname = \"replica-2\"\nmode = \"client\"\nlisten = \"127.0.0.1:1\"\n\
             target = \"replica-2.replica.env-1.svc.cl`run --config`)7\"\n",
            Path::new("f.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("\"replica-2.replica.env-1.svc.cl`run --config`)7\""),
            "{e}"
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

    /// What a route's own keys become: the access log is on by default
    /// for a server route only, and `http_identity` reaches its settings.
    #[test]
    fn route_keys_reach_the_route_settings() {
        let server = r#"
            tls_dir = "/etc/mtls"
            [[route]]
            name = "replica"
            mode = "server"
            listen = "127.0.0.1:6877"
            target = "127.0.0.1:2100"
            allow_san = ["controller.env-1.svc"]
        "#;
        let s = toml::from_str::<FileSpec>(server)
            .unwrap()
            .validate()
            .unwrap();
        assert!(s.routes[0].access_log);
        assert!(s.routes[0].http.is_none());
        let with_http = format!("{server}http_identity = \"xfcc\"\n");
        let s = toml::from_str::<FileSpec>(&with_http)
            .unwrap()
            .validate()
            .unwrap();
        assert!(s.routes[0].http.is_some());
        let client = r#"
            tls_dir = "/etc/mtls"
            [[route]]
            name = "to-replica"
            mode = "client"
            listen = "127.0.0.1:16877"
            target = "replica.env-1.svc:6877"
        "#;
        let s = toml::from_str::<FileSpec>(client)
            .unwrap()
            .validate()
            .unwrap();
        assert!(!s.routes[0].access_log);
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

    /// `crl_prune_age`: 720h by default, any non-zero duration up to the
    /// bound, 0 refused naming the key.
    #[test]
    fn crl_prune_age_defaults_to_the_crl_jobs_and_refuses_zero() {
        let text = r#"
            tls_dir = "/etc/mtls"
            [[route]]
            mode = "server"
            listen = "0.0.0.0:6877"
            target = "127.0.0.1:2100"
            allow_any_san = true
        "#;
        let with = |extra: &str| {
            toml::from_str::<FileSpec>(&format!("{extra}\n{text}"))
                .unwrap()
                .validate()
        };
        let age = |extra: &str| with(extra).unwrap().crl_prune_age;
        assert_eq!(age(""), Duration::from_secs(720 * 3600));
        assert_eq!(
            age("crl_prune_age = \"90d\""),
            Duration::from_secs(90 * 86_400)
        );
        for bad in ["0s", "36501d", "soon"] {
            let e = with(&format!("crl_prune_age = \"{bad}\"")).unwrap_err();
            assert!(e.to_string().contains("--crl-prune-age"), "{bad}: {e}");
        }
    }
}
