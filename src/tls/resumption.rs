//! Session resumption (`--resumption`, off by default): TLS 1.3 tickets
//! only, never TLS 1.2 resumption, never 0-RTT.
//!
//! rustls calls no verifier on a resumed session: the peer is whoever held
//! the ticket, judged when the ticket was issued. Two lines keep that
//! judgement from outliving what it was made against.
//!
//! 1. Tickets belong to one credential revision. The server's
//!    [`RevisionTicketer`] encrypts with keys made for the revision in force
//!    and drops them when any other revision (credentials, trust, CRLs, a
//!    trust grace ending) is swapped in, so earlier tickets no longer
//!    decrypt and the peer falls back to a full, verified handshake. Keys
//!    are random, per route and per process: a restart (changed pins or
//!    SANs included) forgets them too. A ticket carries, inside its
//!    encryption, the moment it stops being accepted: the earliest of the
//!    peer chain's expiry, our own certificate's, and
//!    [`MAX_TICKET_LIFETIME`] after the full handshake that judged the
//!    peer. The client's session cache ([`ClientTls`]) is per route (per
//!    rule on a transparent route), keyed by server name, bounded, and
//!    made anew with a new config whenever its own store swaps revisions:
//!    rustls resumes only with the verifier that stored a session, and
//!    each revision's config has its own.
//! 2. A resumed session is admitted only after the chain rustls stored
//!    with it is judged again by the route's admission (the same check
//!    as a full handshake and as live re-verification). A refusal there
//!    comes after the handshake: the connection is closed without an alert
//!    and counted as a refused handshake with its reason.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rustls::client::{ClientSessionMemoryCache, Resumption, Tls12Resumption};
use rustls::server::ProducesTickets;
use rustls::ClientConfig;
use rustls_pki_types::CertificateDer;

use super::verify::{with_current_report, PeerReport};
use crate::credentials::{CredentialStore, Credentials};
use crate::identity::CertInfo;

/// Tickets a server sends after each handshake (full or resumed): a client
/// uses each once, so two keep its supply growing under parallel
/// reconnects without filling its cache at once.
pub const TICKETS_PER_HANDSHAKE: usize = 2;

/// The longest a ticket is accepted after the full handshake that judged
/// the peer. A sidecar's peers reconnect within seconds when they churn;
/// an hour covers any such pattern while keeping what a ticket can be
/// worth, if stolen, short. Expiry and revision changes end it sooner.
pub const MAX_TICKET_LIFETIME: Duration = Duration::from_secs(3600);

/// Destinations (server names) a client cache holds sessions for; rustls
/// keeps at most 8 tickets each. One route usually has one destination.
pub const CLIENT_CACHE_DESTINATIONS: usize = 64;

/// Bytes in front of the rustls session inside each ticket: the epoch
/// second from which the ticket is refused.
const EXPIRY_BYTES: usize = 8;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn epoch(secs: i64) -> u64 {
    u64::try_from(secs).unwrap_or(0)
}

/// True when rustls's encoded server session is a TLS 1.3 one: a TLS 1.2
/// session must never get a ticket. The encoding starts with an SNI flag
/// (and the name, length-prefixed), then the version; anything else, such
/// as a layout this code does not know, is no TLS 1.3 session, so a
/// change in rustls turns resumption off rather than on for TLS 1.2.
pub fn is_tls13_session(plain: &[u8]) -> bool {
    let version_at = match plain.first() {
        Some(0) => 1,
        Some(1) => match plain.get(1) {
            Some(&len) => 2 + usize::from(len),
            None => return false,
        },
        _ => return false,
    };
    plain.get(version_at..version_at + 2) == Some(&[0x03, 0x04][..])
}

/// The earliest expiry (epoch seconds) of a peer chain's certificates;
/// `None` when one does not parse.
fn chain_until(chain: &[CertificateDer<'_>]) -> Option<u64> {
    chain
        .iter()
        .map(|c| CertInfo::parse(c).ok().map(|i| epoch(i.not_after)))
        .try_fold(u64::MAX, |min, t| t.map(|t| min.min(t)))
        .filter(|_| !chain.is_empty())
}

/// Until when a ticket issued now in this handshake may be accepted, or
/// `None` when it must not be issued: the peer was judged (full handshake)
/// against the trust still in force, or resumed from a ticket of the
/// revision still in force; the end is the earliest of that judgement's
/// bound, our own certificate's expiry and `now + MAX_TICKET_LIFETIME`.
pub fn issuable_until(report: &PeerReport, current: &Arc<Credentials>, now: u64) -> Option<u64> {
    let peer_until = match (&report.verified_with, &report.ticket.resumed_under) {
        (Some(trust), _) if Arc::ptr_eq(trust, &current.trust) => chain_until(&report.chain)?,
        (Some(_), _) => return None,
        (None, Some(rev)) if Arc::ptr_eq(rev, current) => report.ticket.resumed_until?,
        (None, _) => return None,
    };
    let until = peer_until
        .min(epoch(current.leaf.not_after))
        .min(now.saturating_add(MAX_TICKET_LIFETIME.as_secs()));
    (until > now).then_some(until)
}

/// Splits a decrypted ticket into its end and the rustls session; `None`
/// when it is too short or past its end at `now`.
pub fn open_ticket(plain: &[u8], now: u64) -> Option<(u64, &[u8])> {
    let (head, session) = plain.split_at_checked(EXPIRY_BYTES)?;
    let until = u64::from_be_bytes(head.try_into().ok()?);
    (now < until).then_some((until, session))
}

/// Ticket keys and the revision they belong to.
type RevisionKeys = (Arc<Credentials>, Arc<dyn ProducesTickets>);

/// A server route's ticketer: keys of the revision in force only.
#[derive(Debug)]
pub struct RevisionTicketer {
    store: Arc<CredentialStore>,
    keys: Mutex<Option<RevisionKeys>>,
}

impl RevisionTicketer {
    pub fn new(store: Arc<CredentialStore>) -> RevisionTicketer {
        RevisionTicketer {
            store,
            keys: Mutex::new(None),
        }
    }

    /// The keys of `current`, made (and any earlier ones dropped) when the
    /// revision changed. The revision is held, so its allocation cannot be
    /// reused by a later one and compare equal.
    fn keys_for(&self, current: &Arc<Credentials>) -> Option<Arc<dyn ProducesTickets>> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        match &*keys {
            Some((rev, k)) if Arc::ptr_eq(rev, current) => Some(k.clone()),
            _ => {
                let k = rustls::crypto::aws_lc_rs::Ticketer::new().ok()?;
                *keys = Some((current.clone(), k.clone()));
                Some(k)
            }
        }
    }
}

impl ProducesTickets for RevisionTicketer {
    fn enabled(&self) -> bool {
        true
    }

    /// What rustls advertises in the ticket: the time left until the end
    /// [`encrypt`](Self::encrypt) just gave it (rustls asks right after).
    fn lifetime(&self) -> u32 {
        let now = now_secs();
        with_current_report(|r| r.ticket.issued_until)
            .flatten()
            .map(|until| u32::try_from(until.saturating_sub(now)).unwrap_or(u32::MAX))
            .unwrap_or(0)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        if !is_tls13_session(plain) {
            return None;
        }
        let current = self.store.current();
        let now = now_secs();
        let until = with_current_report(|r| {
            let until = issuable_until(r, &current, now);
            r.ticket.issued_until = until;
            until
        })??;
        let keys = self.keys_for(&current)?;
        let mut sealed = Vec::with_capacity(EXPIRY_BYTES + plain.len());
        sealed.extend_from_slice(&until.to_be_bytes());
        sealed.extend_from_slice(plain);
        keys.encrypt(&sealed)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let current = self.store.current();
        let plain = self.keys_for(&current)?.decrypt(ticket)?;
        let (until, session) = open_ticket(&plain, now_secs())?;
        let session = session.to_vec();
        with_current_report(|r| {
            r.ticket.resumed_under = Some(current);
            r.ticket.resumed_until = Some(until);
        });
        Some(session)
    }
}

/// How a client route (or one transparent rule) gets the config of each
/// handshake.
pub enum ClientTls {
    /// Resumption off: one config, no session cache.
    Fixed(Arc<ClientConfig>),
    /// `--resumption`: a config, and so a session cache, per revision.
    Resuming(Box<ResumingClient>),
}

impl ClientTls {
    /// The config of one handshake.
    pub fn config(&self) -> Arc<ClientConfig> {
        match self {
            ClientTls::Fixed(c) => c.clone(),
            ClientTls::Resuming(r) => r.config(),
        }
    }
}

/// Builds a client config for the revision in force (its own verifier,
/// resolver and session cache).
pub type BuildClient = Box<dyn Fn() -> Result<Arc<ClientConfig>, rustls::Error> + Send + Sync>;

/// The per-revision configs of a resuming client.
pub struct ResumingClient {
    store: Arc<CredentialStore>,
    build: BuildClient,
    current: Mutex<(Arc<Credentials>, Arc<ClientConfig>)>,
}

impl ResumingClient {
    pub fn new(store: Arc<CredentialStore>, build: BuildClient) -> Result<Self, rustls::Error> {
        let first = (store.current(), build()?);
        Ok(ResumingClient {
            store,
            build,
            current: Mutex::new(first),
        })
    }

    /// The config of the revision in force: a new one (with an empty
    /// cache) once the store swapped revisions. Should building fail, the
    /// previous config goes on serving, its cache emptied.
    fn config(&self) -> Arc<ClientConfig> {
        let now = self.store.current();
        let mut cur = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if !Arc::ptr_eq(&cur.0, &now) {
            let cfg = match (self.build)() {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot rebuild the TLS client config; resumption stays off until the next revision");
                    let mut c = (*cur.1).clone();
                    c.resumption = Resumption::disabled();
                    Arc::new(c)
                }
            };
            *cur = (now, cfg);
        }
        cur.1.clone()
    }
}

/// The client-side resumption setting of one config: TLS 1.3 tickets in a
/// fresh bounded cache, no TLS 1.2 resumption; rustls offers no early data
/// unless asked (`enable_early_data` stays off).
pub fn client_resumption(on: bool) -> Resumption {
    if on {
        Resumption::store(Arc::new(ClientSessionMemoryCache::new(
            CLIENT_CACHE_DESTINATIONS,
        )))
        .tls12_resumption(Tls12Resumption::Disabled)
    } else {
        Resumption::disabled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_tls13_session_is_recognised() {
        assert!(is_tls13_session(&[0, 0x03, 0x04, 0x13, 0x01]));
        assert!(is_tls13_session(&[1, 2, b'a', b'b', 0x03, 0x04]));
        assert!(!is_tls13_session(&[0, 0x03, 0x03, 0xc0, 0x2f]));
        assert!(!is_tls13_session(&[1, 2, b'a', b'b', 0x03, 0x03]));
        assert!(!is_tls13_session(&[1, 5, b'a']));
        assert!(!is_tls13_session(&[2, 0x03, 0x04]));
        assert!(!is_tls13_session(&[]));
        assert!(!is_tls13_session(&[1]));
    }

    /// The credentials in force of a fresh store over a directory holding
    /// `leaf` and its CA (each call: another revision, another trust).
    fn credentials(ca: &crate::pki::DevCa, leaf: &crate::pki::Issued) -> Arc<Credentials> {
        let dir = tempfile::tempdir().expect("tempdir");
        CredentialStore::for_test(dir.path(), leaf, ca).current()
    }

    /// A ticket is issued only for a peer judged against the trust in
    /// force (a full handshake) or resumed from a ticket of the revision in
    /// force, and never with an end that is already now: kills the two
    /// match guards of `issuable_until` replaced by `true` and its `>` to
    /// `>=`.
    #[test]
    fn a_ticket_is_issued_only_under_the_revision_in_force() {
        use crate::pki::{DevCa, LeafSpec, Role};
        let ca = DevCa::new("CA", 30).expect("CA");
        let leaf = ca
            .issue(&LeafSpec::dns("a.svc", Role::Both, 10))
            .expect("leaf");
        let (current, other) = (credentials(&ca, &leaf), credentials(&ca, &leaf));
        let now = epoch(
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64),
        );

        let mut full = PeerReport {
            chain: vec![leaf.cert_der.clone()],
            verified_with: Some(current.trust.clone()),
            ..PeerReport::default()
        };
        assert_eq!(
            issuable_until(&full, &current, now),
            Some(now + MAX_TICKET_LIFETIME.as_secs())
        );
        full.verified_with = Some(other.trust.clone());
        assert_eq!(
            issuable_until(&full, &current, now),
            None,
            "judged against another trust"
        );

        let mut resumed = PeerReport::default();
        resumed.ticket.resumed_under = Some(current.clone());
        resumed.ticket.resumed_until = Some(now + 60);
        assert_eq!(issuable_until(&resumed, &current, now), Some(now + 60));
        resumed.ticket.resumed_until = Some(now);
        assert_eq!(
            issuable_until(&resumed, &current, now),
            None,
            "an end of now"
        );
        resumed.ticket.resumed_until = Some(now + 60);
        resumed.ticket.resumed_under = Some(other.clone());
        assert_eq!(
            issuable_until(&resumed, &current, now),
            None,
            "another revision's ticket"
        );
    }

    #[test]
    fn a_ticket_opens_only_before_its_end() {
        let mut t = 100u64.to_be_bytes().to_vec();
        t.extend_from_slice(b"session");
        assert_eq!(open_ticket(&t, 99), Some((100, &b"session"[..])));
        assert_eq!(open_ticket(&t, 100), None);
        assert_eq!(open_ticket(&t[..7], 0), None);
    }
}
