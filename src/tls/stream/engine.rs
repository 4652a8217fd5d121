//! One turn of rustls's unbuffered state machine: feeds it the bytes
//! received so far and acts on each state it reports (plaintext to hand
//! over, handshake records or alerts to queue for sending, plaintext to
//! encrypt, a close_notify to send) until it needs something only the
//! caller can give: more bytes from the peer, or a turn of the socket.

use rustls::unbuffered::{
    ConnectionState, EncodeError, EncodeTlsData, EncryptError, UnbufferedStatus, WriteTraffic,
};
use rustls::Error;
use tokio::io::ReadBuf;

use super::buf::Buf;
use super::copy;
use super::{Side, TlsStream};

/// What the caller of [`TlsStream::step`] wants done.
#[derive(Clone, Copy)]
pub(super) enum Intent<'a> {
    /// Plaintext from the peer.
    Read,
    /// This plaintext encrypted and queued for sending.
    Write(&'a [u8]),
    /// A close_notify queued for sending.
    Close,
    /// The handshake carried as far as the bytes received allow.
    Handshake,
}

/// Where a turn stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Progress {
    /// Nothing more can happen without more bytes from the peer.
    NeedRead,
    /// The reader's buffer is full.
    Delivered,
    /// The handshake is complete (and, for [`Intent::Write`] and
    /// [`Intent::Close`], what was asked is queued in the outgoing buffer).
    Done,
    /// Both sides have sent their close_notify: nothing more can be sent.
    Closed,
}

/// Hands one decrypted record to the reader, the part that does not fit
/// kept for the next read (so are whole records decrypted on the write
/// path, where no reader is waiting).
fn deliver(payload: &[u8], dst: Option<&mut ReadBuf<'_>>, stash: &mut Buf) {
    let n = match dst {
        Some(d) if stash.is_empty() => {
            let n = payload.len().min(d.remaining());
            // In pieces, as every bulk copy ([`copy`]).
            for piece in payload[..n].chunks(copy::PIECE) {
                d.put_slice(piece);
            }
            n
        }
        _ => 0,
    };
    if n < payload.len() {
        stash.push(&payload[n..]);
    }
}

/// Copies one handshake record (or alert) into the outgoing buffer.
fn encode<D>(e: &mut EncodeTlsData<'_, D>, out: &mut Buf) -> Result<(), Error> {
    let mut want = 1;
    loop {
        match e.encode(out.spare(want)) {
            Ok(n) => {
                out.filled(n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(s)) if s.required_size > want => {
                want = s.required_size
            }
            Err(EncodeError::AlreadyEncoded) => return Ok(()),
            Err(e) => return Err(Error::General(e.to_string())),
        }
    }
}

/// Room for `data` sealed as TLS 1.3 records of at most 16 KiB of
/// plaintext each: a 5-byte header, the content type and a 16-byte tag per
/// record (TLS 1.2's explicit nonce fits in the slack), so one
/// `encrypt` call is enough; rustls says so if it needs more.
fn sealed_len(data: &[u8]) -> usize {
    let records = data.len().div_ceil(16 * 1024).max(1);
    data.len()
        .saturating_add(records.saturating_mul(5 + 1 + 16 + 8))
        .saturating_add(64)
}

/// Encrypts `data` (or a close_notify when `None`) into the outgoing buffer.
fn encrypt<D>(
    w: &mut WriteTraffic<'_, D>,
    data: Option<&[u8]>,
    out: &mut Buf,
) -> Result<(), Error> {
    let mut want = data.map_or(64, sealed_len);
    loop {
        let room = out.spare_for_records(want);
        let done = match data {
            Some(d) => w.encrypt(d, room),
            None => w.queue_close_notify(room),
        };
        match done {
            Ok(n) => {
                out.filled(n);
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) if s.required_size > want => {
                want = s.required_size
            }
            Err(EncryptError::EncryptExhausted) => return Err(Error::EncryptError),
            Err(e) => return Err(Error::General(e.to_string())),
        }
    }
}

impl<IO, C: Side> TlsStream<IO, C> {
    /// Runs the state machine until it needs more input or has done what
    /// `intent` asks. Plaintext goes into `dst` while it has room (the
    /// rest, and anything decrypted without a reader, into the stash);
    /// records to send go into the outgoing buffer, sent by the caller.
    pub(super) fn step(
        &mut self,
        mut dst: Option<&mut ReadBuf<'_>>,
        intent: Intent<'_>,
    ) -> Result<Progress, Error> {
        if self.failed {
            return Err(Error::General("the TLS connection failed earlier".into()));
        }
        loop {
            let UnbufferedStatus { discard, state } = self.conn.process(self.incoming.data_mut());
            let mut stop = None;
            match state {
                Err(e) => {
                    self.incoming.consume(discard);
                    self.failed = true;
                    return Err(e);
                }
                Ok(ConnectionState::ReadTraffic(mut t)) => {
                    while let Some(record) = t.next_record() {
                        deliver(record?.payload, dst.as_deref_mut(), &mut self.plain);
                    }
                    if dst.as_ref().is_some_and(|d| d.remaining() == 0) {
                        stop = Some(Progress::Delivered);
                    }
                }
                Ok(ConnectionState::EncodeTlsData(mut e)) => encode(&mut e, &mut self.out)?,
                // Queued in `out`, in order, which the caller sends.
                Ok(ConnectionState::TransmitTlsData(t)) => t.done(),
                Ok(ConnectionState::BlockedHandshake) => stop = Some(Progress::NeedRead),
                Ok(ConnectionState::PeerClosed) => self.read_closed = true,
                Ok(ConnectionState::Closed) => {
                    self.read_closed = true;
                    stop = Some(Progress::Closed);
                }
                Ok(ConnectionState::WriteTraffic(mut w)) => {
                    stop = Some(match intent {
                        Intent::Write(data) => {
                            encrypt(&mut w, Some(data), &mut self.out)?;
                            Progress::Done
                        }
                        Intent::Close => {
                            encrypt(&mut w, None, &mut self.out)?;
                            Progress::Done
                        }
                        Intent::Read => Progress::NeedRead,
                        Intent::Handshake => Progress::Done,
                    })
                }
                // Early data is never accepted (no 0-RTT); nothing else
                // exists in this rustls version.
                Ok(_) => {
                    self.incoming.consume(discard);
                    self.failed = true;
                    return Err(Error::General("unexpected TLS state".into()));
                }
            }
            self.incoming.consume(discard);
            match stop {
                // A TLS 1.3 server may send before the client's Finished:
                // its handshake is done only when rustls says so.
                Some(Progress::Done)
                    if matches!(intent, Intent::Handshake) && self.conn.is_handshaking() =>
                {
                    return Ok(Progress::NeedRead)
                }
                Some(p) => return Ok(p),
                None => {}
            }
        }
    }

    /// After rustls failed the connection: queues the records it still
    /// has for the peer, its alert last (sent best-effort by the caller,
    /// as a buffered connection does). rustls hands out what it queued
    /// before it looks at the input, one record a turn, so the driver
    /// turns it only while it says it has something to send
    /// ([`wants_write`](rustls::CommonState::wants_write)): a turn with
    /// nothing queued would read the input past the offending record and
    /// raise a second alert (its debug builds assert on it; found by the
    /// `tls_records` fuzz target). The input itself is still given:
    /// rustls may hold a handshake message joined across records in it.
    pub(super) fn queue_alert(&mut self) {
        if std::mem::replace(&mut self.alerted, true) {
            return;
        }
        while self.conn.wants_write() {
            let UnbufferedStatus { discard, state } = self.conn.process(self.incoming.data_mut());
            let encoded = match state {
                Ok(ConnectionState::EncodeTlsData(mut record)) => {
                    encode(&mut record, &mut self.out).is_ok()
                }
                _ => false,
            };
            self.incoming.consume(discard);
            if !encoded {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The room asked for holds `data` sealed in one go: per record of at
    /// most 16 KiB, TLS 1.3's header, content type and tag (22 bytes) and
    /// TLS 1.2's header, explicit nonce and tag (29).
    #[test]
    fn the_room_for_sealed_records_holds_either_version() {
        for n in [
            0usize,
            1,
            16 * 1024,
            16 * 1024 + 1,
            1024 * 1024,
            4 * 1024 * 1024 + 7,
        ] {
            let records = n.div_ceil(16 * 1024).max(1);
            let room = sealed_len(&vec![0; n]);
            assert!(room >= n + records * 29, "{n} bytes: {room}");
        }
    }
}
