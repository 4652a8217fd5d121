//! The request-smuggling checks on HTTP/1.1: a shadow reader of the raw
//! bytes a client sends, judging each request head before hyper hands the
//! request to us.
//!
//! Why a reader of our own: hyper accepts two shapes the contract refuses,
//! and normalises them away before the request reaches us, so they cannot
//! be seen afterwards: a request with both `Content-Length` and
//! `Transfer-Encoding` (hyper drops the length and reads chunks) and a
//! repeated identical `Content-Length`. A front end that frames such a
//! request differently from a back end is how requests are smuggled. So
//! every byte hyper reads first goes through a [`Scanner`], which follows
//! the message framing (heads, lengths, chunks, trailers) and queues one
//! [`Verdict`] per request head, in order; the service takes one per
//! request. A reader that can no longer follow the framing (a shape it
//! refuses, an upgrade, a chunk it cannot parse) stops queueing: every
//! later request then finds no verdict and is refused — fail closed.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use hyper::StatusCode;

use super::Charge;

/// The judgement of one request head: forward it, or refuse it with this
/// status and reason.
pub type Verdict = Result<(), (StatusCode, &'static str)>;

/// The verdicts queued for the service, oldest first.
pub type Verdicts = Arc<Mutex<VecDeque<Verdict>>>;

/// Takes the next request's verdict; none (the reader lost the framing):
/// refused.
pub fn next_verdict(v: &Verdicts) -> Verdict {
    let mut q = v.lock().unwrap_or_else(|e| e.into_inner());
    q.pop_front().unwrap_or(Err((
        StatusCode::BAD_REQUEST,
        "request framing not followed",
    )))
}

/// How a request's body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(u64),
    Chunked,
}

/// The framing rules: `Content-Length` and `Transfer-Encoding` together,
/// a repeated or listed `Content-Length`, one that is not a decimal
/// number, or a transfer coding not ending in `chunked` are refused.
/// `Upgrade` or `CONNECT` ends what this reader can follow (`Ok(None)`).
pub fn framing(
    method: &str,
    headers: &[httparse::Header<'_>],
) -> Result<Option<Framing>, &'static str> {
    let lengths: Vec<&[u8]> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(|h| h.value)
        .collect();
    let codings: Vec<&[u8]> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("transfer-encoding"))
        .map(|h| h.value)
        .collect();
    if !lengths.is_empty() && !codings.is_empty() {
        return Err("both Content-Length and Transfer-Encoding");
    }
    if lengths.len() > 1 {
        return Err("more than one Content-Length");
    }
    let upgrades = method.eq_ignore_ascii_case("CONNECT")
        || headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("upgrade"));
    let framing = if let Some(v) = lengths.first() {
        Framing::Length(content_length(v).ok_or("invalid Content-Length")?)
    } else if codings.is_empty() {
        Framing::Length(0)
    } else if ends_chunked(&codings) {
        Framing::Chunked
    } else {
        return Err("Transfer-Encoding does not end in chunked");
    };
    Ok((!upgrades).then_some(framing))
}

/// A `Content-Length` value: decimal digits only (so no list), at most
/// 19 of them (always fits).
fn content_length(v: &[u8]) -> Option<u64> {
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(v).ok()?.parse().ok()
}

/// True when the last transfer coding of all the lines is `chunked`.
fn ends_chunked(codings: &[&[u8]]) -> bool {
    let last = codings
        .iter()
        .flat_map(|v| v.split(|b| *b == b','))
        .map(<[u8]>::trim_ascii)
        .rfind(|t| !t.is_empty());
    last.is_some_and(|t| t.eq_ignore_ascii_case(b"chunked"))
}

/// A chunk-size line's size: 1 to 16 hex digits, then optional blanks and
/// an extension after `;`. Anything else is an invalid chunk size.
pub fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 || digits > 16 {
        return None;
    }
    let rest = line[digits..].trim_ascii_start();
    if !(rest.is_empty() || rest.starts_with(b";")) {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(&line[..digits]).ok()?, 16).ok()
}

/// True when `gathered` (which holds at most one line feed, at its end)
/// completes what `phase` reads: a head ends at its first empty line, its
/// lines ended by CRLF or a bare LF as hyper (httparse) accepts them; a
/// chunk-size or trailer line ends at CRLF only (hyper wants the CR).
fn line_complete(phase: Phase, gathered: &[u8]) -> bool {
    match phase {
        Phase::Head => gathered.ends_with(b"\n\n") || gathered.ends_with(b"\n\r\n"),
        _ => gathered.ends_with(b"\r\n"),
    }
}

/// Where the reader is in the byte stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Gathering a request head.
    Head,
    /// Skipping this many body bytes.
    Body(u64),
    /// Reading a chunk-size line.
    ChunkSize,
    /// Skipping this many chunk bytes, then CRLF.
    ChunkData(u64),
    /// The CRLF after a chunk's data: this many bytes of it seen.
    ChunkEnd(u8),
    /// Reading trailer lines until an empty one.
    Trailers,
    /// Lost or ended the framing: bytes pass unread, nothing is queued.
    Opaque,
}

/// The framing reader's state.
#[derive(Debug)]
pub struct Scanner {
    phase: Phase,
    /// The head or line being gathered.
    line: Vec<u8>,
    max_head: usize,
    max_headers: usize,
    verdicts: Verdicts,
    /// The route's pending-head budget, and what `line` holds of it.
    charge: Option<Charge>,
}

impl Scanner {
    pub fn new(max_head: usize, max_headers: usize, verdicts: Verdicts) -> Scanner {
        Scanner {
            phase: Phase::Head,
            line: Vec::new(),
            max_head,
            max_headers,
            verdicts,
            charge: None,
        }
    }

    /// The same reader charging what it gathers to a route's budget.
    pub fn charged(mut self, charge: Charge) -> Scanner {
        self.charge = Some(charge);
        self
    }

    /// Brings what this reader holds of the budget to `line`'s length;
    /// when the budget refuses the growth, drops the line and stops
    /// reading (the connection is then closed, see [`Self::refused`]).
    fn track(&mut self) {
        let Some(c) = &mut self.charge else {
            return;
        };
        if !c.hold(self.line.len()) {
            self.line = Vec::new();
            self.phase = Phase::Opaque;
        }
    }

    /// True once the route's budget refused this connection's head.
    pub fn refused(&self) -> bool {
        self.charge.as_ref().is_some_and(Charge::refused)
    }

    fn queue(&mut self, v: Verdict) {
        if v.is_err() {
            self.phase = Phase::Opaque;
        }
        self.verdicts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(v);
    }

    /// Follows `data`, the next bytes the client sent.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            let used = match self.phase {
                Phase::Opaque => return,
                Phase::Body(n) | Phase::ChunkData(n) => {
                    let k = usize::try_from(n).unwrap_or(usize::MAX).min(data.len());
                    let left = n - k as u64;
                    self.phase = match (self.phase, left) {
                        (Phase::Body(_), 0) => Phase::Head,
                        (Phase::Body(_), l) => Phase::Body(l),
                        (_, 0) => Phase::ChunkEnd(0),
                        (_, l) => Phase::ChunkData(l),
                    };
                    k
                }
                Phase::ChunkEnd(seen) => {
                    let want = if seen == 0 { b'\r' } else { b'\n' };
                    self.phase = match (data[0] == want, seen) {
                        (true, 0) => Phase::ChunkEnd(1),
                        (true, _) => Phase::ChunkSize,
                        (false, _) => Phase::Opaque,
                    };
                    1
                }
                Phase::Head | Phase::ChunkSize | Phase::Trailers => {
                    let used = self.gather(data);
                    self.track();
                    used
                }
            };
            data = &data[used..];
        }
    }

    /// Gathers bytes up to the end of a head or line; acts on it when
    /// complete. Returns how many bytes it took.
    fn gather(&mut self, data: &[u8]) -> usize {
        // Empty lines before a request line are allowed (RFC 9112 §2.2).
        if self.phase == Phase::Head && self.line.is_empty() {
            let skip = data
                .iter()
                .take_while(|b| matches!(b, b'\r' | b'\n'))
                .count();
            if skip > 0 {
                return skip;
            }
        }
        let take = match data.iter().position(|b| *b == b'\n') {
            Some(i) => i + 1,
            None => data.len(),
        };
        self.line.extend_from_slice(&data[..take]);
        if self.line.len() > self.max_head.saturating_add(4) {
            self.line = Vec::new();
            self.queue(Err((
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "request head too large",
            )));
            return take;
        }
        if line_complete(self.phase, &self.line) {
            let line = std::mem::take(&mut self.line);
            self.complete(&line);
        } else if self.phase != Phase::Head && self.line.ends_with(b"\n") {
            // A bare LF ends no chunk line.
            self.line = Vec::new();
            self.phase = Phase::Opaque;
        }
        take
    }

    /// Acts on a complete head or line.
    fn complete(&mut self, line: &[u8]) {
        match self.phase {
            Phase::Head => self.head(line),
            Phase::ChunkSize => {
                let body = &line[..line.len() - 2];
                self.phase = match chunk_size(body) {
                    Some(0) => Phase::Trailers,
                    Some(n) => Phase::ChunkData(n),
                    None => Phase::Opaque,
                };
            }
            Phase::Trailers if line == b"\r\n" => self.phase = Phase::Head,
            _ => {}
        }
    }

    /// Judges a complete request head and sets up its body.
    fn head(&mut self, head: &[u8]) {
        let mut slots = vec![httparse::EMPTY_HEADER; self.max_headers];
        let mut req = httparse::Request::new(&mut slots);
        let verdict = match req.parse(head) {
            // A head that ends before the gathered bytes do is one this
            // reader and hyper would cut differently: refused.
            Ok(httparse::Status::Complete(n)) if n != head.len() => {
                Err((StatusCode::BAD_REQUEST, "malformed request head"))
            }
            Ok(httparse::Status::Complete(_)) => framing(req.method.unwrap_or(""), req.headers)
                .map_err(|why| (StatusCode::BAD_REQUEST, why)),
            Ok(httparse::Status::Partial) => Err((StatusCode::BAD_REQUEST, "incomplete head")),
            Err(httparse::Error::TooManyHeaders) => Err((
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "too many header fields",
            )),
            Err(_) => Err((StatusCode::BAD_REQUEST, "malformed request head")),
        };
        match verdict {
            Ok(framing) => {
                self.phase = match framing {
                    Some(Framing::Length(0)) => Phase::Head,
                    Some(Framing::Length(n)) => Phase::Body(n),
                    Some(Framing::Chunked) => Phase::ChunkSize,
                    None => Phase::Opaque,
                };
                self.queue(Ok(()));
            }
            Err(e) => self.queue(Err(e)),
        }
    }
}

impl super::tap::Observe for Scanner {
    fn read(&mut self, bytes: &[u8]) {
        self.feed(bytes);
    }
    fn refused(&self) -> bool {
        Scanner::refused(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::http::{HeadBudget, FREE_HEAD_BYTES};
    use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};

    /// Two readers share a budget: each holds what its unfinished head
    /// holds, gives it back when the head completes or the reader goes,
    /// and the one whose head would pass the budget is refused (and
    /// gives back what it held).
    #[test]
    fn unfinished_heads_hold_the_routes_budget() {
        let budget = Arc::new(HeadBudget::new(100));
        let reader = || {
            let over = Arc::new(AtomicBool::new(false));
            let s = Scanner::new(1024, 16, Verdicts::default())
                .charged(Charge::new(budget.clone(), over.clone()).with_free(0));
            (s, over)
        };
        let (mut a, a_over) = reader();
        let (mut b, b_over) = reader();
        a.feed(b"GET / HTTP/1.1\r\nX: ");
        assert_eq!(budget.used(), 19);
        a.feed(&[b'a'; 50]);
        assert_eq!(budget.used(), 69);
        b.feed(b"GET / HTTP/1.1\r\n");
        assert_eq!(budget.used(), 85);
        b.feed(&[b'b'; 20]);
        assert!(b.refused() && b_over.load(AtomicOrdering::Acquire));
        assert_eq!(budget.used(), 69, "the refused reader gave back its part");
        assert!(!a.refused() && !a_over.load(AtomicOrdering::Acquire));
        a.feed(b"\r\n\r\n");
        assert_eq!(budget.used(), 0, "a complete head holds nothing");
        a.feed(b"GET /");
        assert_eq!(budget.used(), 5);
        drop(a);
        assert_eq!(budget.used(), 0, "a closed connection holds nothing");
    }

    /// A head within the free allowance is never refused, however full
    /// the budget: a flood of large unfinished heads cannot starve it.
    #[test]
    fn a_small_head_passes_a_full_budget() {
        let budget = Arc::new(HeadBudget::new(100));
        assert!(budget.take(100), "the budget is full");
        let over = Arc::new(AtomicBool::new(false));
        let mut s = Scanner::new(FREE_HEAD_BYTES * 2, 16, Verdicts::default())
            .charged(Charge::new(budget.clone(), over.clone()));
        s.feed(b"GET / HTTP/1.1\r\nHost: t\r\nX: ");
        s.feed(&[b'a'; 1000]);
        assert!(!s.refused(), "a small head was refused");
        s.feed(&[b'a'; FREE_HEAD_BYTES]);
        assert!(s.refused(), "past the allowance the full budget refuses");
        assert_eq!(budget.used(), 100, "the refused head gave back its part");
    }

    fn verdicts_of(chunks: &[&[u8]]) -> Vec<Verdict> {
        let v = Verdicts::default();
        let mut s = Scanner::new(1024, 16, v.clone());
        for c in chunks {
            s.feed(c);
        }
        let q = v.lock().unwrap();
        q.iter().copied().collect()
    }

    #[test]
    fn heads_are_found_after_bodies_and_chunks_however_the_bytes_are_split() {
        let stream: &[u8] = b"\r\nPOST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nGET /\r\n\
            POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nGET\r\n0\r\nT: v\r\n\r\n\
            GET /c HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n";
        let want = vec![
            Ok(()),
            Ok(()),
            Err((
                StatusCode::BAD_REQUEST,
                "both Content-Length and Transfer-Encoding",
            )),
        ];
        assert_eq!(verdicts_of(&[stream]), want);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(verdicts_of(&bytes), want, "one byte at a time");
    }

    #[test]
    fn what_the_reader_cannot_follow_queues_nothing_more() {
        // A bad chunk size: the next head is never judged (so refused).
        let v = verdicts_of(&[
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET / HTTP/1.1\r\n\r\n",
        ]);
        assert_eq!(v, vec![Ok(())]);
        // An upgrade ends what is followed.
        let v =
            verdicts_of(&[b"GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\nGET / HTTP/1.1\r\n\r\n"]);
        assert_eq!(v, vec![Ok(())]);
        // A head over the limit, and too many fields.
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(2000));
        assert_eq!(
            verdicts_of(&[big.as_bytes()])[0].unwrap_err().0,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
        let many: String = (0..17).map(|i| format!("X{i}: v\r\n")).collect();
        let many = format!("GET / HTTP/1.1\r\n{many}\r\n");
        assert_eq!(
            verdicts_of(&[many.as_bytes()])[0].unwrap_err().0,
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE
        );
    }

    #[test]
    fn chunk_sizes_and_lengths_parse_strictly() {
        assert_eq!(chunk_size(b"1a"), Some(26));
        assert_eq!(chunk_size(b"A ;ext"), Some(10));
        assert_eq!(chunk_size(b"ffffffffffffffff"), Some(u64::MAX));
        for bad in [&b""[..], b"x", b"1 2", b"+1", b"10000000000000000"] {
            assert_eq!(chunk_size(bad), None, "{bad:?}");
        }
        assert_eq!(content_length(b" 42 "), Some(42));
        for bad in [&b""[..], b"4 2", b"-1", b"1,1", b"99999999999999999999"] {
            assert_eq!(content_length(bad), None, "{bad:?}");
        }
        assert!(ends_chunked(&[b"gzip", b" chunked "]));
        assert!(!ends_chunked(&[b"chunked, gzip"]));
        assert!(!ends_chunked(&[b""]));
    }

    #[test]
    fn a_head_ends_at_an_empty_line_with_bare_line_feeds_as_hyper_reads_it() {
        // hyper (httparse) ends a head at a bare-LF empty line. A reader
        // waiting for CRLF CRLF took the first body's bytes as head and
        // skipped into the next request, whose forbidden framing then got
        // the verdict of a benign head hidden in its chunked body.
        let head2 = "POST /b HTTP/1.1\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n";
        let fake = "GET / HTTP/1.1\r\n\r\n";
        let size = format!("{:x}\r\n", fake.len());
        let body1_len = head2.len() + size.len();
        let body1 = format!("{}\r\n\r\n", "A".repeat(body1_len - 4));
        let stream = format!(
            "POST /a HTTP/1.1\nContent-Length: {body1_len}\n\n{body1}{head2}{size}{fake}\r\n0\r\n\r\n"
        );
        let want = vec![
            Ok(()),
            Err((
                StatusCode::BAD_REQUEST,
                "both Content-Length and Transfer-Encoding",
            )),
        ];
        assert_eq!(verdicts_of(&[stream.as_bytes()]), want);
    }
}
