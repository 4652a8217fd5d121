//! `/connections`: the live authenticated connections of every route, one
//! page at a time, for an operator and for `check --against`, which
//! re-judges each one against a candidate revision.
//!
//! What it shows is public material only: addresses, SANs, serials, the
//! SHA-256 of each peer's public key, byte counts, and the certificates the
//! peers presented and the trust anchors in force (certificates are public;
//! no private key is ever part of the document). The chains are there so
//! that `check --against` judges a connection with the very judgement a
//! handshake runs ([`crate::credentials::revocation::judge_chain`]) rather
//! than a second, lossier one from SANs and serials. Peer identities are
//! still sensitive, so the path is served only on a loopback or Unix-socket
//! admin listener, or with `--admin-connections on`
//! ([`ConnectionsAccess`]).
//!
//! Bounded: a page holds at most [`MAX_LIMIT`] connections; listing takes
//! each route's registry lock once, to clone the handles of its live
//! connections (bounded by `--max-connections` plus `--max-handshakes`),
//! and reads byte counts from the forwarders' own atomics. Pages are cut by
//! a cursor (route index and connection id, both increasing), so a
//! connection closing between two pages never shifts the next one.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::admin::shared::{ConnectionsAccess, Shared};
use crate::proxy::conn::LiveConn;
use crate::proxy::route::Route;
use crate::proxy::settings::Mode;

/// Connections per page when the request names no `limit`.
pub const DEFAULT_LIMIT: usize = 100;
/// The most connections one page holds.
pub const MAX_LIMIT: usize = 500;

/// The body of a refused `/connections`.
pub const REFUSED: &str = "/connections lists peer identities: it is served only when the admin \
listener is loopback or a Unix socket, or with --admin-connections on (config admin_connections = \"on\")\n";

/// One page of `/connections`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Page {
    /// Every route, with what judging its connections needs.
    pub routes: Vec<RouteView>,
    pub connections: Vec<ConnView>,
    /// The cursor of the next page (`?after=`), absent on the last one.
    pub next: Option<String>,
}

/// A route as `/connections` shows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RouteView {
    pub name: String,
    pub mode: Mode,
    /// What its peers' certificates are judged for: `client_auth` on a
    /// server route, `server_auth` on a client route.
    pub usage: String,
    /// `leaf` or `chain` (`--crl-scope`).
    pub crl_scope: String,
    /// `--trust-grace`, in seconds.
    pub trust_grace_seconds: u64,
    /// The trust anchors in force (those in their grace included), PEM.
    pub trust_anchors_pem: String,
    /// The known intermediate CAs (CRL signers, never anchors), PEM.
    pub intermediates_pem: String,
    /// The CRLs consulted at handshakes now, PEM (empty: none). Absent
    /// from an older sidecar's page: read as none.
    #[serde(default)]
    pub crls_pem: String,
    /// The deny-list in force, one entry a line as a deny file spells it
    /// (empty: none). Absent from an older sidecar's page: read as none.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Live authenticated connections now.
    pub live: usize,
}

/// One live authenticated connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnView {
    pub route: String,
    pub id: u64,
    pub peer: String,
    pub subject: String,
    pub sans: Vec<String>,
    pub serial: String,
    /// Base64 SHA-256 of the leaf's SubjectPublicKeyInfo (the pin format).
    pub spki_sha256: String,
    /// The leaf's notAfter, seconds since the Unix epoch.
    pub not_after: i64,
    pub age_seconds: f64,
    pub bytes_to_target: u64,
    pub bytes_from_target: u64,
    /// The chain the peer presented, leaf first, PEM.
    pub chain_pem: String,
}

/// Why a `/connections` query was refused (400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QueryError {
    #[error("limit: {0:?} is not a number from 1 to {MAX_LIMIT}")]
    Limit(String),
    #[error("after: {0:?} is not a cursor from a previous page's \"next\"")]
    Cursor(String),
    #[error("unknown parameter {0:?}: use limit and after")]
    Unknown(String),
}

/// Where a page starts: after this (route index, connection id).
type Cursor = (usize, u64);

/// A parsed query: the page size and where it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Query {
    pub limit: usize,
    pub after: Option<Cursor>,
}

impl Query {
    /// Parses `limit=N&after=CURSOR` (both optional).
    pub fn parse(query: Option<&str>) -> Result<Query, QueryError> {
        let mut q = Query {
            limit: DEFAULT_LIMIT,
            after: None,
        };
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "limit" => q.limit = parse_limit(v)?,
                "after" => q.after = Some(parse_cursor(v)?),
                other => return Err(QueryError::Unknown(cap(other))),
            }
        }
        Ok(q)
    }
}

/// A query value as an error quotes it: at most 64 characters.
fn cap(s: &str) -> String {
    s.chars().take(64).collect()
}

fn parse_limit(v: &str) -> Result<usize, QueryError> {
    match v.parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(QueryError::Limit(cap(v))),
    }
}

fn parse_cursor(v: &str) -> Result<Cursor, QueryError> {
    let bad = || QueryError::Cursor(cap(v));
    let (route, id) = v.split_once('.').ok_or_else(bad)?;
    Ok((
        route.parse().map_err(|_| bad())?,
        id.parse().map_err(|_| bad())?,
    ))
}

fn cursor_text((route, id): Cursor) -> String {
    format!("{route}.{id}")
}

/// The usage label of a route's peers.
fn usage(mode: Mode) -> &'static str {
    match mode {
        Mode::Server => "client_auth",
        Mode::Client => "server_auth",
    }
}

/// The CRLs of `set` consulted at handshakes (verified or unverified),
/// PEM: those a candidate that does not replace them is judged with.
fn enforced_crls_pem(set: &crate::credentials::CrlSet) -> String {
    let ders: Vec<&[u8]> = set
        .entries()
        .iter()
        .filter(|e| e.enforced())
        .map(|e| e.crl.der())
        .collect();
    crate::identity::pem::crls(&ders)
}

fn route_view(route: &Route) -> RouteView {
    let trust = route.store.current().trust.clone();
    let anchors: Vec<_> = trust.anchors.iter().map(|a| a.der.clone()).collect();
    RouteView {
        name: route.cfg.name.clone(),
        mode: route.cfg.mode,
        usage: usage(route.cfg.mode).to_string(),
        crl_scope: match trust.scope {
            crate::credentials::CrlScope::Leaf => "leaf",
            crate::credentials::CrlScope::Chain => "chain",
        }
        .to_string(),
        trust_grace_seconds: route.store.trust_grace().as_secs(),
        trust_anchors_pem: crate::identity::pem::certificates(&anchors),
        intermediates_pem: crate::identity::pem::certificates(&trust.intermediates),
        crls_pem: enforced_crls_pem(&trust.crls),
        deny: trust
            .deny
            .entries()
            .iter()
            .map(ToString::to_string)
            .collect(),
        live: route.registry.live(),
    }
}

fn conn_view(route: &str, c: &LiveConn) -> ConnView {
    let (subject, serial, sans) = c.peer_fields();
    ConnView {
        route: route.to_string(),
        id: c.id,
        peer: c.peer_addr.clone(),
        subject: subject.to_string(),
        sans,
        serial: serial.to_string(),
        spki_sha256: crate::proxy::route::leaf_spki(c),
        not_after: c.peer().map_or(0, |p| p.not_after),
        age_seconds: c.opened.elapsed().as_secs_f64(),
        bytes_to_target: c.totals.to_target.load(Relaxed),
        bytes_from_target: c.totals.from_target.load(Relaxed),
        chain_pem: crate::identity::pem::certificates(c.chain()),
    }
}

/// One page of the live connections of `routes`, in (route, id) order.
pub fn page(routes: &[Arc<Route>], q: Query) -> Page {
    let mut connections = Vec::new();
    let mut next = None;
    'routes: for (i, route) in routes.iter().enumerate() {
        if q.after.is_some_and(|(r, _)| i < r) {
            continue;
        }
        let mut live = route.registry.snapshot();
        live.sort_unstable_by_key(|c| c.id);
        for c in live {
            if q.after.is_some_and(|a| (i, c.id) <= a) {
                continue;
            }
            if connections.len() == q.limit {
                // One more exists: the page ends at the last one taken.
                next = connections
                    .last()
                    .map(|v: &(usize, ConnView)| cursor_text((v.0, v.1.id)));
                break 'routes;
            }
            connections.push((i, conn_view(&route.cfg.name, &c)));
        }
    }
    Page {
        routes: routes.iter().map(|r| route_view(r)).collect(),
        connections: connections.into_iter().map(|(_, v)| v).collect(),
        next,
    }
}

/// The `/connections` answer: the page as JSON, or why not (status, body).
pub fn respond(shared: &Shared, query: Option<&str>) -> Result<String, (u16, String)> {
    if shared.connections == ConnectionsAccess::Refused {
        return Err((403, REFUSED.to_string()));
    }
    let q = Query::parse(query).map_err(|e| (400, format!("/connections: {e}\n")))?;
    serde_json::to_string_pretty(&page(&shared.routes, q))
        .map(|s| s + "\n")
        .map_err(|e| (500, format!("cannot encode connections: {e}\n")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_parse_with_bounds() {
        assert_eq!(
            Query::parse(None),
            Ok(Query {
                limit: DEFAULT_LIMIT,
                after: None
            })
        );
        assert_eq!(
            Query::parse(Some("limit=2&after=1.7")),
            Ok(Query {
                limit: 2,
                after: Some((1, 7))
            })
        );
        assert_eq!(
            Query::parse(Some(&format!("limit={MAX_LIMIT}"))).map(|q| q.limit),
            Ok(MAX_LIMIT)
        );
        for bad in ["limit=0", "limit=501", "limit=-1", "limit=x", "limit="] {
            assert!(
                matches!(Query::parse(Some(bad)), Err(QueryError::Limit(_))),
                "{bad}"
            );
        }
        for bad in [
            "after=1",
            "after=a.b",
            "after=1.",
            "after=.2",
            "after=1.2.3",
        ] {
            assert!(
                matches!(Query::parse(Some(bad)), Err(QueryError::Cursor(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            Query::parse(Some("offset=3")),
            Err(QueryError::Unknown(_))
        ));
        let long = "x".repeat(10_000);
        let e = Query::parse(Some(&format!("limit={long}"))).unwrap_err();
        assert!(e.to_string().len() < 200, "quoted values are capped");
    }

    #[test]
    fn usage_follows_the_route_mode() {
        assert_eq!(usage(Mode::Server), "client_auth");
        assert_eq!(usage(Mode::Client), "server_auth");
    }
}
