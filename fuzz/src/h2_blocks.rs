//! The h2 header-block follower (`proxy::http::blocks::Blocks`) and the
//! HPACK field counter (`proxy::http::fields::FieldCount`), fed what an
//! authenticated h2 client sends (frames built from the input, so most
//! inputs reach several frames): never a panic; the count of fields does
//! not depend on how the bytes are split and never passes their number;
//! what the follower holds of its route's budget, and whether it is
//! refused, do not depend on how the bytes arrive; a refusal stands and
//! holds nothing; everything is given back when the connection ends.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use mtls_sidecar::proxy::http::blocks::{BlockClock, Blocks};
use mtls_sidecar::proxy::http::fields::FieldCount;
use mtls_sidecar::proxy::http::tap::Observe;
use mtls_sidecar::proxy::http::{Charge, HeadBudget};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn fields<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> usize {
    let mut count = FieldCount::default();
    for p in pieces {
        count.feed(p);
    }
    count.fields()
}

/// An h2 client's bytes made from `bytes`: the preface, then frames on
/// stream 1, each taking a type (of the ten RFC 9113 defines), flags and
/// a length byte (at most what is left), then its payload.
fn client_bytes(bytes: &[u8]) -> Vec<u8> {
    let mut out = PREFACE.to_vec();
    let mut rest = bytes;
    while let [ty, flags, len, more @ ..] = rest {
        let n = usize::from(*len).min(more.len());
        out.extend_from_slice(&u32::try_from(n).unwrap_or(0).to_be_bytes()[1..]);
        out.extend_from_slice(&[*ty % 10, *flags, 0, 0, 0, 1]);
        out.extend_from_slice(&more[..n]);
        rest = &more[n..];
    }
    out
}

/// Follows `pieces` alone on a budget of `limit` with `free` bytes free:
/// what it holds at the end and whether it was refused. Checked on the
/// way: a refusal stands and leaves nothing held; at the end, dropping the
/// follower (the connection ends) gives everything back.
fn follow<'a>(pieces: impl IntoIterator<Item = &'a [u8]>, limit: usize, free: usize) -> (usize, bool) {
    let budget = Arc::new(HeadBudget::new(limit));
    let charge = Charge::new(budget.clone(), Arc::new(AtomicBool::new(false))).with_free(free);
    let mut blocks = Blocks::new(Arc::new(BlockClock::default())).charged(charge);
    let mut refused = false;
    for p in pieces {
        blocks.read(p);
        assert!(!refused || blocks.refused(), "a refusal stands");
        refused = blocks.refused();
        if refused {
            assert_eq!(budget.used(), 0, "a refused connection holds nothing");
        }
    }
    let end = (budget.used(), refused);
    drop(blocks);
    assert_eq!(budget.used(), 0, "all given back when the connection ends");
    end
}

/// The first byte seeds the splits and the free allowance, the second
/// sizes the budget; the rest is read as a field block (the counter) and
/// made into an h2 client's frames (the follower).
pub fn check(data: &[u8]) {
    let [seed, size, rest @ ..] = data else {
        return;
    };
    let whole = fields([rest]);
    assert!(whole <= rest.len(), "a field is at least one byte");
    assert_eq!(whole, fields(rest.chunks(1)), "one byte at a time");
    assert_eq!(whole, fields(crate::pieces(*seed, rest)), "random pieces");

    // With the budget its own, a connection's charge and refusal are
    // those of its blocks' bytes and fields, however they arrive.
    let limit = usize::from(*size) * 64;
    let free = usize::from(*seed % 4) * 256;
    let client = client_bytes(rest);
    let at_once = follow([client.as_slice()], limit, free);
    assert_eq!(at_once, follow(client.chunks(1), limit, free), "one byte at a time");
    assert_eq!(at_once, follow(crate::pieces(*seed, &client), limit, free), "random pieces");
}
