//! `--http-identity` and its limits, as written by a user, validated into
//! the route's [`HttpSettings`] — and the ALPN list such a route offers,
//! which must name only protocols the HTTP path can carry.

use crate::proxy::http::{self as http, HttpSettings};
use crate::proxy::settings::Mode;

use super::values::{bounded_count, opt_duration};
use super::{invalid, ConfigError};

/// A route's HTTP options as written: `http_identity`,
/// `http_max_header_bytes`, `http_max_headers`, `http_header_timeout`,
/// `http_body_timeout`, `http_max_pending_head_bytes`.
#[derive(Debug, Clone, Default)]
pub struct HttpSpec<'a> {
    pub identity: Option<&'a str>,
    pub max_header_bytes: Option<u64>,
    pub max_headers: Option<u64>,
    pub header_timeout: Option<String>,
    pub body_timeout: Option<String>,
    pub max_pending_head_bytes: Option<u64>,
}

impl HttpSpec<'_> {
    /// True when a limit is given (valid only with an identity format).
    fn has_limits(&self) -> bool {
        self.max_header_bytes.is_some()
            || self.max_headers.is_some()
            || self.header_timeout.is_some()
            || self.body_timeout.is_some()
            || self.max_pending_head_bytes.is_some()
    }
}

/// Validates a route's HTTP options; with `--http-identity` an empty
/// `alpn` becomes `h2, http/1.1` and any other protocol is refused.
pub(super) fn validate(
    spec: &HttpSpec<'_>,
    mode: Mode,
    alpn: &mut Vec<Vec<u8>>,
    p: &dyn Fn(&str) -> String,
) -> Result<Option<HttpSettings>, ConfigError> {
    let Some(kind) = spec.identity else {
        if spec.has_limits() {
            return Err(invalid(
                p(
                    "--http-max-header-bytes/--http-max-headers/--http-header-timeout/\
                   --http-body-timeout/--http-max-pending-head-bytes",
                ),
                "only valid with --http-identity",
            ));
        }
        return Ok(None);
    };
    if kind != "xfcc" {
        return Err(invalid(
            p("--http-identity"),
            format!("{kind:?}: the only format is xfcc"),
        ));
    }
    if mode != Mode::Server {
        return Err(invalid(
            p("--http-identity"),
            "only valid for server routes",
        ));
    }
    let max_header_bytes = bounded_count(
        &p("--http-max-header-bytes"),
        spec.max_header_bytes,
        http::DEFAULT_MAX_HEADER_BYTES,
        http::MAX_HEADER_BYTES,
    )?;
    if max_header_bytes < http::MIN_HEADER_BYTES {
        return Err(invalid(
            p("--http-max-header-bytes"),
            format!("{max_header_bytes}: at least {}", http::MIN_HEADER_BYTES),
        ));
    }
    let max_headers = bounded_count(
        &p("--http-max-headers"),
        spec.max_headers,
        http::DEFAULT_MAX_HEADERS,
        http::MAX_HEADERS,
    )?;
    let header_timeout = opt_duration(
        &p("--http-header-timeout"),
        &spec.header_timeout,
        http::DEFAULT_HEADER_TIMEOUT,
        http::MIN_HEADER_TIMEOUT,
        http::MAX_HEADER_TIMEOUT,
    )?;
    let body_timeout = opt_duration(
        &p("--http-body-timeout"),
        &spec.body_timeout,
        http::DEFAULT_BODY_TIMEOUT,
        http::MIN_BODY_TIMEOUT,
        http::MAX_BODY_TIMEOUT,
    )?;
    let max_pending_head_bytes = bounded_count(
        &p("--http-max-pending-head-bytes"),
        spec.max_pending_head_bytes,
        http::DEFAULT_PENDING_HEAD_BYTES.max(max_header_bytes),
        http::MAX_PENDING_HEAD_BYTES,
    )?;
    if max_pending_head_bytes < max_header_bytes {
        return Err(invalid(
            p("--http-max-pending-head-bytes"),
            format!(
                "{max_pending_head_bytes}: at least --http-max-header-bytes \
                 ({max_header_bytes}), so one whole head always fits"
            ),
        ));
    }
    if alpn.is_empty() {
        *alpn = http::default_alpn();
    } else if let Some(other) = alpn.iter().find(|a| !http::carries_alpn(a)) {
        return Err(invalid(
            p("--alpn"),
            format!(
                "{:?}: with --http-identity a route carries only h2 and http/1.1",
                String::from_utf8_lossy(other)
            ),
        ));
    }
    Ok(Some(HttpSettings {
        max_header_bytes,
        max_headers,
        header_timeout,
        body_timeout,
        max_pending_head_bytes,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(f: &str) -> String {
        f.to_string()
    }

    fn spec(identity: Option<&str>) -> HttpSpec<'_> {
        HttpSpec {
            identity,
            ..Default::default()
        }
    }

    #[test]
    fn http_identity_offers_h2_and_http11_and_only_those() {
        let mut alpn = Vec::new();
        let s = validate(&spec(Some("xfcc")), Mode::Server, &mut alpn, &p).unwrap();
        assert_eq!(s, Some(HttpSettings::default()));
        assert_eq!(alpn, http::default_alpn());
        let mut custom = vec![b"foo".to_vec()];
        let e = validate(&spec(Some("xfcc")), Mode::Server, &mut custom, &p).unwrap_err();
        assert!(e.to_string().contains("only h2 and http/1.1"), "{e}");
        let timed = HttpSpec {
            header_timeout: Some("250ms".into()),
            body_timeout: Some("2s".into()),
            max_pending_head_bytes: Some(65536),
            ..spec(Some("xfcc"))
        };
        let s = validate(&timed, Mode::Server, &mut Vec::new(), &p)
            .unwrap()
            .unwrap();
        assert_eq!(s.header_timeout, std::time::Duration::from_millis(250));
        assert_eq!(s.body_timeout, std::time::Duration::from_secs(2));
        assert_eq!(s.max_pending_head_bytes, 65536);
        let mut h11 = vec![b"http/1.1".to_vec()];
        validate(&spec(Some("xfcc")), Mode::Server, &mut h11, &p).unwrap();
        assert_eq!(h11, [b"http/1.1".to_vec()]);
    }

    /// The limits table of docs/http-identity.md is what `validate` does:
    /// each row's default is the setting a route gets without the flag,
    /// and its bounds are the first and last values taken (one past either
    /// is refused).
    #[test]
    fn the_documented_limits_are_the_enforced_ones() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/http-identity.md"
        ))
        .unwrap();
        let table = doc.split("## Limits").nth(1).unwrap();
        let cell = |c: &str| c.trim().split('`').nth(1).unwrap().to_string();
        let mut rows = 0;
        for line in table.lines().filter(|l| l.starts_with("| `--http-")) {
            let cells: Vec<&str> = line.split(" | ").collect();
            let flag = cell(cells[0]);
            let default = cell(cells[2]);
            let (lo, hi) = cells[3].trim_end_matches(" |").split_once("..").unwrap();
            let (lo, hi) = (cell(lo), cell(hi));
            let judged = |v: &str| {
                let mut s = spec(Some("xfcc"));
                let n = || v.parse::<u64>().ok();
                match flag.as_str() {
                    "--http-max-header-bytes" => s.max_header_bytes = n(),
                    "--http-max-headers" => s.max_headers = n(),
                    "--http-max-pending-head-bytes" => s.max_pending_head_bytes = n(),
                    "--http-header-timeout" => s.header_timeout = Some(v.into()),
                    "--http-body-timeout" => s.body_timeout = Some(v.into()),
                    other => panic!("a row for {other}: add it here"),
                }
                validate(&s, Mode::Server, &mut Vec::new(), &p).map(Option::unwrap)
            };
            let field = |h: &HttpSettings| match flag.as_str() {
                "--http-max-header-bytes" => h.max_header_bytes.to_string(),
                "--http-max-headers" => h.max_headers.to_string(),
                "--http-max-pending-head-bytes" => h.max_pending_head_bytes.to_string(),
                "--http-header-timeout" => format!("{}ms", h.header_timeout.as_millis()),
                _ => format!("{}ms", h.body_timeout.as_millis()),
            };
            let defaults = validate(&spec(Some("xfcc")), Mode::Server, &mut Vec::new(), &p)
                .unwrap()
                .unwrap();
            assert_eq!(field(&defaults), norm(&default), "{flag}'s default");
            // A bound named by another flag is that flag's default.
            let lo = match lo.as_str() {
                "--http-max-header-bytes" => http::DEFAULT_MAX_HEADER_BYTES.to_string(),
                _ => lo,
            };
            for (v, past) in [(&lo, step(&lo, -1)), (&hi, step(&hi, 1))] {
                assert_eq!(field(&judged(v).unwrap()), norm(v), "{flag} {v}");
                assert!(judged(&past).is_err(), "{flag} {past} is taken");
            }
            rows += 1;
        }
        assert_eq!(rows, 5, "the table's rows");

        /// A count as it is, a duration in milliseconds.
        fn norm(v: &str) -> String {
            match v.parse::<u64>() {
                Ok(n) => n.to_string(),
                Err(_) => format!("{}ms", humantime::parse_duration(v).unwrap().as_millis()),
            }
        }
        /// One past a bound: a count ±1, a duration ±1 ms.
        fn step(v: &str, by: i64) -> String {
            match v.parse::<i64>() {
                Ok(n) => (n + by).to_string(),
                Err(_) => {
                    let d = humantime::parse_duration(v).unwrap().as_millis() as i64;
                    format!("{}ms", d + by)
                }
            }
        }
    }

    #[test]
    fn bad_http_options_are_refused() {
        let mut alpn = Vec::new();
        for (s, mode, why) in [
            (
                spec(Some("xfcc")),
                Mode::Client,
                "only valid for server routes",
            ),
            (spec(Some("l5d")), Mode::Server, "the only format is xfcc"),
            (
                HttpSpec {
                    max_headers: Some(5),
                    ..spec(None)
                },
                Mode::Server,
                "only valid with --http-identity",
            ),
            (
                HttpSpec {
                    max_header_bytes: Some(100),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at least 8192",
            ),
            (
                HttpSpec {
                    max_headers: Some(0),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at least 1",
            ),
            (
                HttpSpec {
                    header_timeout: Some("10s".into()),
                    ..spec(None)
                },
                Mode::Server,
                "only valid with --http-identity",
            ),
            (
                HttpSpec {
                    header_timeout: Some("10ms".into()),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at least 100ms",
            ),
            (
                HttpSpec {
                    header_timeout: Some("2h".into()),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at most 1h",
            ),
            (
                HttpSpec {
                    body_timeout: Some("10s".into()),
                    ..spec(None)
                },
                Mode::Server,
                "only valid with --http-identity",
            ),
            (
                HttpSpec {
                    body_timeout: Some("50ms".into()),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at least 100ms",
            ),
            (
                HttpSpec {
                    body_timeout: Some("61m".into()),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at most 1h",
            ),
            (
                HttpSpec {
                    max_pending_head_bytes: Some(10_000),
                    ..spec(Some("xfcc"))
                },
                Mode::Server,
                "at least --http-max-header-bytes (65536)",
            ),
        ] {
            let e = validate(&s, mode, &mut alpn, &p).unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }
}
