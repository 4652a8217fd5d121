//! The bounds every accepted config file must respect.

use std::time::Duration;

use mtls_sidecar::config::{bounds, Settings, MAX_ALPN, MAX_TRUST_GRACE};

/// Panics (a finding) when accepted settings break a promised bound.
pub fn check_settings(s: &Settings) {
    assert!(!s.routes.is_empty(), "accepted without a route");
    assert!(s.trust_grace <= MAX_TRUST_GRACE, "{:?}", s.trust_grace);
    assert!(
        s.reload_interval > Duration::ZERO && s.reload_interval <= bounds::RELOAD_INTERVAL,
        "{:?}",
        s.reload_interval
    );
    assert!(
        s.drain_timeout <= bounds::DRAIN_TIMEOUT,
        "{:?}",
        s.drain_timeout
    );
    if let Some(n) = s.worker_threads {
        assert!((1..=bounds::WORKER_THREADS).contains(&n), "{n}");
    }
    for (i, r) in s.routes.iter().enumerate() {
        assert!(
            s.routes[..i].iter().all(|o| o.name != r.name),
            "duplicate route name {:?}",
            r.name
        );
        assert!((1..=bounds::MAX_CONNECTIONS).contains(&r.max_connections));
        assert!((1..=bounds::MAX_HANDSHAKES).contains(&r.max_handshakes));
        for t in [r.handshake_timeout, r.connect_timeout] {
            assert!(t > Duration::ZERO && t <= bounds::TIMEOUT, "{t:?}");
        }
        if let Some(l) = r.max_connection_lifetime {
            assert!(
                l > Duration::ZERO && l <= bounds::CONNECTION_LIFETIME,
                "{l:?}"
            );
        }
        assert!(r.half_close_linger <= bounds::HALF_CLOSE_LINGER);
        assert!(r.alpn.len() <= MAX_ALPN);
        assert!(r.alpn.iter().all(|p| (1..=255).contains(&p.len())));
        assert!(r.mark != Some(0), "mark 0 accepted");
    }
}

/// The double-quoted (Rust `{:?}`) strings in a message, quotes included.
pub fn quoted(msg: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = msg.char_indices();
    while let Some((start, c)) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut escaped = false;
        for (i, c) in chars.by_ref() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    out.push(msg[start..=i].to_string());
                    break;
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn quoted_strings_are_found_with_their_escapes() {
        assert_eq!(
            super::quoted(r#"a "x\"y" b "" c "open"#),
            [r#""x\"y""#.to_string(), r#""""#.to_string()]
        );
    }
}
