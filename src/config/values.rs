//! The field parsers: one flag or key's text (a duration, a count, a pin,
//! an ALPN list, SAN patterns, a mark) to its typed value, refused with a
//! message naming the field when out of its bounds. Routes and the file's
//! process-wide options both use them.

use std::time::Duration;

use crate::identity::SanPattern;

use super::{invalid, ConfigError};

/// Parses a duration like `500ms`, `30s`, `1h`.
pub fn parse_duration(field: &str, s: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(s).map_err(|e| invalid(field, format!("{s:?}: {e}")))
}

/// `--crl-prune-age` (`run` and `publish`): default 720h, the shipped CRL
/// job's `--prune-expired`.
pub fn crl_prune_age(s: Option<&str>) -> Result<Duration, ConfigError> {
    opt_duration(
        "--crl-prune-age",
        &s.map(str::to_string),
        crate::credentials::revocation::DEFAULT_CRL_PRUNE_AGE,
        NONZERO,
        super::bounds::CRL_PRUNE_AGE,
    )
}

/// Parses an optional duration that must lie in `min..=max`.
pub(super) fn opt_duration(
    field: &str,
    s: &Option<String>,
    default: Duration,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    match s {
        Some(s) => bounded_duration(field, s, min, max),
        None => Ok(default),
    }
}

/// Parses a duration that must lie in `min..=max`.
pub(super) fn bounded_duration(
    field: &str,
    s: &str,
    min: Duration,
    max: Duration,
) -> Result<Duration, ConfigError> {
    let d = parse_duration(field, s)?;
    if d < min {
        return Err(invalid(
            field,
            if min == Duration::from_millis(1) {
                format!("{s:?}: must be greater than zero")
            } else {
                format!(
                    "{s:?}: must be at least {}",
                    humantime::format_duration(min)
                )
            },
        ));
    }
    if d > max {
        return Err(invalid(
            field,
            format!("{s:?}: at most {}", humantime::format_duration(max)),
        ));
    }
    Ok(d)
}

/// A count that must lie in `1..=max`.
pub(super) fn bounded_count(
    field: &str,
    n: Option<u64>,
    default: usize,
    max: usize,
) -> Result<usize, ConfigError> {
    let Some(n) = n else {
        return Ok(default);
    };
    if n == 0 {
        return Err(invalid(field, "must be at least 1"));
    }
    match usize::try_from(n) {
        Ok(n) if n <= max => Ok(n),
        _ => Err(invalid(field, format!("{n}: at most {max}"))),
    }
}

pub(super) const NONZERO: Duration = Duration::from_millis(1);

/// Parses base64 SHA-256 SPKI pins (standard or URL-safe alphabet, padding
/// optional).
pub(super) fn spki_pins(field: &str, list: &[String]) -> Result<Vec<[u8; 32]>, ConfigError> {
    list.iter()
        .map(|s| {
            crate::identity::pin::parse(s).ok_or_else(|| {
                invalid(
                    field,
                    format!("{s:?} is not a base64 SHA-256 pin (44 characters)"),
                )
            })
        })
        .collect()
}

/// At most this many ALPN protocols, each 1..=255 bytes.
pub const MAX_ALPN: usize = 32;

pub(super) fn alpn(field: &str, list: &[String]) -> Result<Vec<Vec<u8>>, ConfigError> {
    if list.len() > MAX_ALPN {
        return Err(invalid(field, format!("at most {MAX_ALPN} protocols")));
    }
    list.iter()
        .map(|p| {
            if p.is_empty() || p.len() > 255 {
                Err(invalid(
                    field,
                    format!("{p:?}: a protocol name is 1 to 255 bytes"),
                ))
            } else {
                Ok(p.as_bytes().to_vec())
            }
        })
        .collect()
}

pub(super) fn patterns(field: &str, list: &[String]) -> Result<Vec<SanPattern>, ConfigError> {
    list.iter()
        .map(|s| s.parse::<SanPattern>().map_err(|e| invalid(field, e)))
        .collect()
}

/// Checks a `--mark` value: 1 to 2^32-1.
pub(super) fn mark(field: &str, m: u64) -> Result<u32, ConfigError> {
    match u32::try_from(m) {
        Ok(m) if m > 0 => Ok(m),
        _ => Err(invalid(
            field,
            format!("{m}: a mark is 1 to 4294967295 (0 cannot be told from unmarked traffic)"),
        )),
    }
}

/// Parses an optional `on`/`off` switch (`--access-log`,
/// `--admin-connections`), `default` when absent.
pub fn on_off(field: &str, s: Option<&str>, default: bool) -> Result<bool, ConfigError> {
    match s {
        None => Ok(default),
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(invalid(field, format!("{other:?}: on or off"))),
    }
}
