//! `check … --against ADMIN_URL`: what a candidate revision would cut on a
//! running sidecar, before it is published. The candidate is loaded and
//! validated by the sidecar's own loader (an invalid one is exit 2 and
//! nothing is fetched), then every page of the sidecar's `/connections` is
//! fetched and each live connection re-judged ([`super::preview`]).
//! Nothing is changed anywhere: the sidecar is only read.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::preview::{self, Candidate, Cut, RevisionFiles, When};
use super::restart::{ConfigCandidate, Gone};
use super::{Input, Request};
use crate::admin::connections::{ConnView, Page, RouteView, MAX_LIMIT};
use crate::cli::CheckArgs;
use crate::credentials::{fmt_time, read_deny, read_file, CredError, RawRevision};
use crate::identity::time_to_epoch;
use crate::proxy::addr::Addr;

/// Bound on fetching one page.
const PAGE_TIMEOUT: Duration = Duration::from_secs(10);
/// The most pages fetched: a sidecar (or something posing as one) that
/// keeps answering "next" cannot keep `check` running forever.
const MAX_PAGES: usize = 10_000;

/// Why nothing could be previewed (exit 2).
#[derive(Debug, thiserror::Error)]
pub enum AgainstError {
    #[error("the candidate is invalid: {0}")]
    Candidate(String),
    #[error("--against {0:?}: give http://HOST:PORT, HOST:PORT or unix:/PATH")]
    Url(String),
    #[error("{0}")]
    Fetch(String),
    #[error("{0}")]
    Usage(String),
}

/// The admin address of `--against`: `http://host:port[/]`, `host:port`
/// or `unix:/path`.
pub fn admin_addr(url: &str) -> Result<Addr, AgainstError> {
    let bare = url.strip_prefix("http://").unwrap_or(url);
    let bare = match bare.strip_prefix("unix:") {
        Some(_) => bare,
        None => bare.trim_end_matches('/'),
    };
    if bare.contains('/') && !bare.starts_with("unix:") {
        return Err(AgainstError::Url(url.to_string()));
    }
    match bare.parse::<Addr>() {
        Ok(a @ (Addr::Tcp(_) | Addr::Unix(_))) => Ok(a),
        _ => Err(AgainstError::Url(url.to_string())),
    }
}

/// What `--against` previews: credentials (a revision, a CRL or a deny
/// file), cut within a reload interval or at the end of the grace, or a
/// configuration, cut at restart.
#[derive(Debug, Clone)]
pub enum Loaded {
    Trust(Candidate),
    Config(ConfigCandidate),
}

/// Loads and validates the candidate: a configuration with `--config`
/// (its credentials come from the file: no credential flag with it), else
/// the trust candidate the credential flags name.
pub fn candidate(args: &CheckArgs, now: SystemTime) -> Result<(Loaded, String), AgainstError> {
    let Some(path) = &args.config else {
        let (c, shown) = trust_candidate(args, now)?;
        return Ok((Loaded::Trust(c), shown));
    };
    let c = &args.credentials;
    let flags = [
        c.tls_dir.is_some(),
        c.cert.is_some(),
        c.key.is_some(),
        c.ca.is_some(),
        c.crl.is_some(),
        c.deny_file.is_some(),
        c.workload_api.is_some(),
        c.svid.is_some(),
        args.trust_grace.is_some(),
    ];
    if flags.contains(&true) {
        return Err(AgainstError::Usage(
            "--config takes the credentials from the file: give no credential flag or --trust-grace with it"
                .to_string(),
        ));
    }
    let cfg = super::restart::load(path, now).map_err(AgainstError::Candidate)?;
    Ok((
        Loaded::Config(cfg),
        format!("configuration {}", path.display()),
    ))
}

/// Loads and validates a credentials candidate. A `--crl FILE` given alone
/// is a CRL candidate, a `--deny-file FILE` alone a deny-list candidate;
/// anything else is a whole revision (its `deny` file included).
fn trust_candidate(args: &CheckArgs, now: SystemTime) -> Result<(Candidate, String), AgainstError> {
    let c = &args.credentials;
    let bad = |e: &dyn std::fmt::Display| AgainstError::Candidate(e.to_string());
    let crl_alone = c.tls_dir.is_none()
        && c.cert.is_none()
        && c.key.is_none()
        && c.ca.is_none()
        && c.workload_api.is_none()
        && args.secret.is_none();
    if let (Some(path), true, None) = (&c.deny_file, crl_alone, &c.crl) {
        // Read as the sidecar reads it: an empty file denies nothing.
        let raw = read_deny(path).map_err(|e| bad(&e))?;
        let deny = crate::credentials::parse_deny_file(&raw).map_err(|e| bad(&e))?;
        return Ok((
            Candidate::Deny(Arc::new(deny)),
            format!("deny file {}", path.display()),
        ));
    }
    if let (Some(path), true, None) = (&c.crl, crl_alone, &c.deny_file) {
        let raw = read_file(path).map_err(|e| bad(&e))?;
        crate::credentials::revocation::parse_file(&raw).map_err(|e| bad(&e))?;
        return Ok((
            Candidate::Crl(raw.bytes),
            format!("CRL file {}", path.display()),
        ));
    }
    let req = Request::from_args(args).map_err(|e| bad(&e))?;
    let (raw, shown) = match &req.input {
        Input::Source(source) => (
            super::fetch::read(source).map_err(|e| bad(&e))?,
            source.to_string(),
        ),
        Input::Fetched(raw) => (raw.clone(), raw.cert.path.display().to_string()),
        Input::Secret { from, ca } => {
            let (report, files) = super::secret::files(from, ca.as_deref());
            let [Some(cert), Some(key), Some(ca)] = files.got else {
                return Err(AgainstError::Candidate(report.to_text()));
            };
            (RawRevision::new(cert, key, ca), report.source.clone())
        }
    };
    let files = RevisionFiles::of(&raw, now).map_err(|e| bad(&e))?;
    let short: String = raw.hash.chars().take(12).collect();
    Ok((
        Candidate::Revision(files),
        format!("{shown} (revision {short})"),
    ))
}

/// Fetches one page of `/connections`.
async fn fetch(addr: &Addr, after: Option<&str>) -> Result<Page, AgainstError> {
    let path = match after {
        Some(c) => format!("/connections?limit={MAX_LIMIT}&after={c}"),
        None => format!("/connections?limit={MAX_LIMIT}"),
    };
    let a = crate::tools::health::probe(addr, &path, PAGE_TIMEOUT)
        .await
        .map_err(|e| AgainstError::Fetch(e.to_string()))?;
    if a.code != 200 {
        let body = String::from_utf8_lossy(&a.body);
        return Err(AgainstError::Fetch(format!(
            "{addr}{path}: {} {}",
            a.code,
            crate::log::clean(body.trim_end())
        )));
    }
    serde_json::from_slice(&a.body)
        .map_err(|e| AgainstError::Fetch(format!("{addr}{path}: not a /connections page: {e}")))
}

/// What the preview found.
#[derive(Debug, Default)]
pub struct Preview {
    /// Per route: its name and live connections seen.
    pub routes: Vec<(String, usize)>,
    pub cuts: Vec<Cut>,
    /// Running routes a candidate configuration has no counterpart for.
    pub gone: Vec<(String, Gone)>,
}

impl Preview {
    /// Whether the candidate would cut anything: a connection, or a route
    /// with live connections that it drops.
    pub fn cuts_anything(&self) -> bool {
        !self.cuts.is_empty()
            || self
                .gone
                .iter()
                .any(|(g, _)| self.routes.iter().any(|(r, n)| r == g && *n > 0))
    }
}

/// Judges one route's connections of a page against the candidate.
fn judge_route(
    out: &mut Preview,
    route: &RouteView,
    conns: &[ConnView],
    loaded: &Loaded,
    grace: Option<Duration>,
    now: SystemTime,
) -> Result<Vec<Cut>, CredError> {
    match loaded {
        Loaded::Trust(candidate) => {
            let grace = grace.unwrap_or(Duration::from_secs(route.trust_grace_seconds));
            preview::judge(route, conns, candidate, grace, now)
        }
        Loaded::Config(cfg) => match super::restart::matching(cfg, route) {
            Ok(c) => super::restart::judge(route, c, cfg.crl_scope, conns, now),
            Err(gone) => {
                if !out.gone.iter().any(|(n, _)| *n == route.name) {
                    out.gone.push((route.name.clone(), gone));
                }
                Ok(Vec::new())
            }
        },
    }
}

/// Fetches every page and judges each connection on it.
async fn preview(
    addr: &Addr,
    loaded: &Loaded,
    grace: Option<Duration>,
    now: SystemTime,
) -> Result<Preview, AgainstError> {
    let mut out = Preview::default();
    let mut after: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let page = fetch(addr, after.as_deref()).await?;
        for route in &page.routes {
            let seen = page.connections.iter().filter(|c| c.route == route.name);
            let n = seen.count();
            match out.routes.iter_mut().find(|(name, _)| *name == route.name) {
                Some((_, total)) => *total = total.saturating_add(n),
                None => out.routes.push((route.name.clone(), n)),
            }
            let cuts = judge_route(&mut out, route, &page.connections, loaded, grace, now)
                .map_err(|e| AgainstError::Candidate(format!("route {}: {e}", route.name)))?;
            out.cuts.extend(cuts.into_iter().map(|mut c| {
                c.conn.chain_pem = String::new();
                c
            }));
        }
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(out),
        }
    }
    Err(AgainstError::Fetch(format!(
        "{addr}: more than {MAX_PAGES} pages of /connections; stopped"
    )))
}

fn when_text(w: When) -> String {
    match w {
        When::Now => "now".to_string(),
        When::GraceEnd(t) => format!(
            "at the end of --trust-grace ({})",
            fmt_time(time_to_epoch(t))
        ),
        When::Restart => "at restart".to_string(),
        When::Expires(t) => format!("at {} (notAfter)", fmt_time(time_to_epoch(t))),
    }
}

fn gone_text(g: &Gone) -> String {
    match g {
        Gone::Dropped => "the candidate has no route of this name".to_string(),
        Gone::OtherMode(m) => format!(
            "the candidate's route of this name is a {} route",
            m.as_str()
        ),
        Gone::PerDestination => "the candidate's route of this name is transparent".to_string(),
    }
}

/// The report, one line per route and one per connection cut.
pub fn render(candidate: &str, addr: &Addr, p: &Preview) -> String {
    use crate::log::{clean, clean_list};
    let mut s = format!("candidate: {candidate}\nagainst:   {addr}\n");
    for (route, live) in &p.routes {
        if let Some((_, Gone::PerDestination)) = p.gone.iter().find(|(n, _)| n == route) {
            s.push_str(&format!(
                "route {route}: {}: its peers are held to each destination rule's own SANs, which this preview cannot tell apart; its {live} live connection(s) are NOT judged (counted as possibly cut)\n",
                gone_text(&Gone::PerDestination)
            ));
            continue;
        }
        if let Some((_, g)) = p.gone.iter().find(|(n, _)| n == route) {
            s.push_str(&format!(
                "route {route}: {}: its {live} live connection(s) keep their process, and none of its peers can connect after a restart\n",
                gone_text(g)
            ));
            continue;
        }
        let cuts: Vec<&Cut> = p.cuts.iter().filter(|c| c.conn.route == *route).collect();
        s.push_str(&format!(
            "route {route}: {} of {live} live connection(s) would be closed\n",
            cuts.len()
        ));
        for c in cuts {
            s.push_str(&format!(
                "  CLOSE {} {}: conn {} peer {} subject {:?} sans [{}] serial {} spki_sha256 {} ({})\n",
                c.reason,
                when_text(c.when),
                c.conn.id,
                c.conn.peer,
                clean(&c.conn.subject).to_string(),
                clean_list(&c.conn.sans),
                clean(&c.conn.serial),
                c.conn.spki_sha256,
                clean(&c.detail),
            ));
        }
    }
    s
}

/// `check --against`: exit 2 when the candidate is invalid (before
/// anything is fetched) or nothing could be previewed, 1 when a live
/// connection would be closed, else 0.
pub fn run(args: &CheckArgs, url: &str) -> u8 {
    let now = SystemTime::now();
    let fail = |e: AgainstError| {
        eprintln!("error: {e}");
        2
    };
    let (loaded, shown) = match candidate(args, now) {
        Ok(c) => c,
        Err(e) => return fail(e),
    };
    let addr = match admin_addr(url) {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let grace = match args.trust_grace.as_deref() {
        Some(g) => match crate::config::parse_duration("--trust-grace", g) {
            Ok(d) => Some(d),
            Err(e) => return fail(AgainstError::Usage(e.to_string())),
        },
        None => None,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(AgainstError::Fetch(format!("cannot start a runtime: {e}"))),
    };
    match rt.block_on(preview(&addr, &loaded, grace, now)) {
        Ok(p) => {
            print!("{}", render(&shown, &addr, &p));
            u8::from(p.cuts_anything())
        }
        Err(e) => fail(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_urls() {
        for ok in [
            "http://127.0.0.1:9901",
            "127.0.0.1:9901/",
            "http://[::1]:9901/",
        ] {
            assert!(matches!(admin_addr(ok), Ok(Addr::Tcp(_))), "{ok}");
        }
        assert!(matches!(admin_addr("unix:/run/a.sock"), Ok(Addr::Unix(_))));
        for bad in ["http://h:1/status", "systemd:admin", "", "https://h:1"] {
            assert!(admin_addr(bad).is_err(), "{bad}");
        }
    }
}
