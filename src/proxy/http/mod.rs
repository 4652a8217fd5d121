//! `--http-identity xfcc`: a server route whose target speaks HTTP hands it
//! the verified peer's identity in every request, as Envoy does, instead
//! of copying bytes.
//!
//! Why here, below the route: the HTTP path replaces only the byte copy of
//! a forwarded connection. Admission, the slot, the PROXY v2 header, the
//! close signal (revocation, expiry, drain, displacement) and the deadline
//! stay the route's, so one client connection still maps to one target
//! connection, never pooled or shared between peers, and closing it closes
//! both mid-keep-alive. The protocol the client negotiated by ALPN is the
//! one the target gets in cleartext: `h2` → h2c with prior knowledge,
//! `http/1.1` or none → HTTP/1.1.
//!
//! The parts: [`xfcc`] (the header's value and name predicate), [`body`]
//! (`--http-body-timeout`), [`blocks`] (the h2 header-block clock and charge, with
//! [`fields`] counting a block's fields), [`dn`]
//! (the subject as OpenSSL's RFC 2253 line, with [`dn_names`] its names), [`headers`] (what is removed before ours is
//! added), [`smuggle`] (framing checks on the raw HTTP/1.1 bytes), [`tap`] (what
//! sees those bytes: the framing reader and the byte counters),
//! [`service`] (one request's way to the target) and [`serve`](mod@serve) (the
//! connection's drivers).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::header::HeaderValue;
use metrics::Counter;

pub mod blocks;
pub mod body;
pub mod dn;
pub mod dn_names;
pub mod fields;
pub mod headers;
pub mod serve;
pub mod service;
pub mod smuggle;
pub mod tap;
pub mod xfcc;

pub use serve::serve;
pub use xfcc::{is_xfcc_name, xfcc_value, XfccParts};

/// The default `--http-max-header-bytes`: a request head (HTTP/1.1) or
/// header list (h2) larger than this gets 431.
pub const DEFAULT_MAX_HEADER_BYTES: usize = 64 * 1024;
/// The default `--http-max-headers`: more header fields get 431.
pub const DEFAULT_MAX_HEADERS: usize = 100;
/// The smallest `--http-max-header-bytes` (hyper reads HTTP/1.1 heads into
/// a buffer of at least this much).
pub const MIN_HEADER_BYTES: usize = 8 * 1024;
/// The largest `--http-max-header-bytes`.
pub const MAX_HEADER_BYTES: usize = 1024 * 1024;
/// The largest `--http-max-headers`.
pub const MAX_HEADERS: usize = 10_000;
/// The default `--http-header-timeout`: how long a connection may wait for
/// a complete request head (the first, and the next one on an idle
/// keep-alive or h2 connection). nginx's `client_header_timeout` is 60 s;
/// hyper's own default 30 s.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// The shortest `--http-header-timeout`.
pub const MIN_HEADER_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest `--http-header-timeout`.
pub const MAX_HEADER_TIMEOUT: Duration = Duration::from_secs(3600);
/// The default `--http-body-timeout`: how long one read of a request body
/// may wait for the client (nginx's `client_body_timeout`, 60 s).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(60);
/// The shortest `--http-body-timeout`.
pub const MIN_BODY_TIMEOUT: Duration = Duration::from_millis(100);
/// The longest `--http-body-timeout`.
pub const MAX_BODY_TIMEOUT: Duration = Duration::from_secs(3600);
/// The default `--http-max-pending-head-bytes`: what the unfinished
/// request heads (HTTP/1.1) and header blocks (h2) of all a route's
/// connections may hold together (64 maximal heads).
pub const DEFAULT_PENDING_HEAD_BYTES: usize = 64 * DEFAULT_MAX_HEADER_BYTES;
/// The largest `--http-max-pending-head-bytes`.
pub const MAX_PENDING_HEAD_BYTES: usize = 1024 * 1024 * 1024;

/// A route's HTTP settings (`--http-identity` and its limits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpSettings {
    /// Bound on one request's header section, in bytes.
    pub max_header_bytes: usize,
    /// Bound on one request's header fields.
    pub max_headers: usize,
    /// Bound on the wait for a complete request head, idle time between
    /// requests included; on h2 also on each header block.
    pub header_timeout: Duration,
    /// Bound on each wait for the next part of a request body.
    pub body_timeout: Duration,
    /// Bound on the bytes of the route's unfinished request heads and h2
    /// header blocks, all connections together.
    pub max_pending_head_bytes: usize,
}

impl Default for HttpSettings {
    fn default() -> Self {
        HttpSettings {
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_headers: DEFAULT_MAX_HEADERS,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_pending_head_bytes: DEFAULT_PENDING_HEAD_BYTES,
        }
    }
}

/// The bytes a route's unfinished request heads hold, against its
/// `--http-max-pending-head-bytes`: one per route, shared by its
/// connections' readers (HTTP/1.1's framing reader, h2's frame follower),
/// which take what a head's bytes grow by and give it back when the head
/// completes or the connection ends.
#[derive(Debug)]
pub struct HeadBudget {
    limit: usize,
    used: AtomicUsize,
}

impl HeadBudget {
    /// A budget of `limit` bytes, none in use.
    pub fn new(limit: usize) -> HeadBudget {
        HeadBudget {
            limit,
            used: AtomicUsize::new(0),
        }
    }

    /// Takes `n` bytes; false (and nothing taken) when that would pass
    /// the limit.
    pub fn take(&self, n: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|&after| after <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `n` bytes taken before.
    pub fn give(&self, n: usize) {
        self.used.fetch_sub(n, Ordering::AcqRel);
    }

    /// The bytes in use now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// What an unfinished request head (HTTP/1.1) or header block (h2) of
/// each connection holds without charging the route's budget: an
/// ordinary head fits, so peers filling the budget with large unfinished
/// heads cannot starve everyone else's small ones. What this leaves
/// uncharged is bounded by `--max-connections` times this.
pub const FREE_HEAD_BYTES: usize = 8 * 1024;

/// What one connection holds of its route's [`HeadBudget`]: what the
/// head (or line, or h2 header block) it is receiving costs beyond
/// [`FREE_HEAD_BYTES`]: its bytes as the client sent them (an h2 block's
/// also a cost per field, see [`blocks`]). Everything held is given back
/// when it is dropped (the connection ended).
#[derive(Debug)]
pub struct Charge {
    budget: Arc<HeadBudget>,
    held: usize,
    /// The bytes of a head held without charge.
    free: usize,
    /// Set once the budget refused this connection's head: the connection
    /// is closed (`overload`).
    over: Arc<AtomicBool>,
}

impl Charge {
    /// Nothing held yet of `budget`; `over` is set if it refuses.
    pub fn new(budget: Arc<HeadBudget>, over: Arc<AtomicBool>) -> Charge {
        Charge {
            budget,
            held: 0,
            free: FREE_HEAD_BYTES,
            over,
        }
    }

    /// The same charge with another free allowance.
    pub fn with_free(mut self, free: usize) -> Charge {
        self.free = free;
        self
    }

    /// Brings what this connection holds to what a head costing `bytes`
    /// costs beyond the free allowance, taking or giving back the
    /// difference. When the budget refuses the
    /// growth, gives back everything held, flags the connection over
    /// budget and returns false.
    pub fn hold(&mut self, bytes: usize) -> bool {
        let now = bytes.saturating_sub(self.free);
        if now <= self.held {
            self.budget.give(self.held - now);
        } else if !self.budget.take(now - self.held) {
            self.release();
            self.over.store(true, Ordering::Release);
            return false;
        }
        self.held = now;
        true
    }

    /// True once the budget refused this connection's head.
    pub fn refused(&self) -> bool {
        self.over.load(Ordering::Acquire)
    }

    fn release(&mut self) {
        self.budget.give(std::mem::take(&mut self.held));
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.release();
    }
}

/// The ALPN protocols a route with `--http-identity` offers when none are
/// configured: both it can carry, h2 preferred.
pub fn default_alpn() -> Vec<Vec<u8>> {
    vec![b"h2".to_vec(), b"http/1.1".to_vec()]
}

/// True when `proto` is an ALPN protocol the HTTP path can carry.
pub fn carries_alpn(proto: &[u8]) -> bool {
    proto == b"h2" || proto == b"http/1.1"
}

/// What one connection's requests are forwarded with: the header value
/// built once at the handshake (the identity is fixed there), the
/// route's limits, its pending-head budget and its count of request
/// bodies that stalled.
#[derive(Debug, Clone)]
pub struct Identity {
    pub xfcc: HeaderValue,
    pub settings: HttpSettings,
    pub heads: Arc<HeadBudget>,
    pub body_timeouts: Counter,
}

impl Identity {
    /// The identity of the peer whose leaf is `peer` (DER), seen by a
    /// sidecar whose own leaf is `ours`; `None` if either the leaf does
    /// not parse or the value is not a header value (neither happens to a
    /// certificate that passed verification).
    pub fn new(
        peer: &[u8],
        ours: Option<&[u8]>,
        settings: HttpSettings,
        heads: Arc<HeadBudget>,
        body_timeouts: Counter,
    ) -> Option<Identity> {
        let parts = XfccParts::from_certs(peer, ours)?;
        let xfcc = HeaderValue::from_str(&xfcc_value(&parts)).ok()?;
        Some(Identity {
            xfcc,
            settings,
            heads,
            body_timeouts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_budget_takes_up_to_its_limit_and_gets_back_what_it_gave() {
        let b = HeadBudget::new(10);
        assert!(b.take(6));
        assert!(!b.take(5), "over the limit");
        assert_eq!(b.used(), 6);
        assert!(b.take(4), "exactly the limit");
        assert!(!b.take(1));
        b.give(10);
        assert_eq!(b.used(), 0);
        assert!(!b.take(usize::MAX), "no overflow");
    }

    /// A connection's charge follows its head up and down, holding only
    /// what passes the free allowance, and gives everything back at the
    /// end; a refused growth gives back what it held and flags it.
    #[test]
    fn a_charge_holds_what_its_head_costs_past_the_free_bytes() {
        let budget = Arc::new(HeadBudget::new(1000));
        let over = Arc::new(AtomicBool::new(false));
        let mut c = Charge::new(budget.clone(), over.clone()).with_free(100);
        assert!(c.hold(60));
        assert_eq!(budget.used(), 0, "within the free bytes");
        assert!(c.hold(400));
        assert_eq!(budget.used(), 300);
        assert!(c.hold(250), "a smaller head");
        assert_eq!(budget.used(), 150);
        let mut other = Charge::new(budget.clone(), over.clone()).with_free(0);
        assert!(other.hold(850));
        assert!(!c.hold(300), "past the budget");
        assert!(over.load(Ordering::Acquire));
        assert_eq!(budget.used(), 850, "the refused charge holds nothing");
        drop(other);
        assert_eq!(budget.used(), 0);
    }
}
