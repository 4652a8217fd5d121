//! The listening TCP sockets of this network namespace, asked of the kernel
//! over `NETLINK_SOCK_DIAG` (what `ss -ltn` does) with only the listening
//! state requested.
//!
//! Why not only `/proc/self/net/tcp{,6}` ([`super::listeners`]): the kernel
//! makes those files by walking its whole established-connection hash table
//! to find the sockets it prints, empty buckets included, however early the
//! reader stops. With 262,144 buckets (a 24 GiB machine) one first-page read
//! cost 2.3 ms for `tcp` and 5.5 ms for `tcp6`: ~8 ms of kernel CPU on every
//! check, once per poll interval, on a thread that also forwards bytes, so
//! the connections on it stalled that long every second (the ping-pong
//! bench's p99.9 went from ~1 ms to 4-6 ms). A dump that asks for
//! `TCP_LISTEN` only walks the listening table and stops. Needs no
//! capability; the in-process sandbox allows a `NETLINK_SOCK_DIAG` socket
//! (`crate::sandbox`'s seccomp filter), and the shipped systemd unit allows
//! `AF_NETLINK`. Which way the last check went is in `/status`
//! (`target_exposure[].source`).
//!
//! The reply is parsed from bytes, never cast: every length is checked
//! against what was received, at most [`MAX_SOCKETS`] sockets and
//! [`MAX_DATAGRAMS`] datagrams are read per family, and the socket has a
//! receive timeout, so a strange reply costs a bounded amount and is an
//! error (the caller then reads `/proc`), never a panic or a hang. Every
//! failure is an error, never a shorter list: a dump the kernel ends with
//! an error (`NLMSG_DONE` carrying one, as a missing `tcp_diag` module
//! gives), marks as interrupted (`NLM_F_DUMP_INTR`) or overran, and either
//! family's, IPv6 included (the kernel's diag answers an empty IPv6 dump
//! when IPv6 is off), so a missed listener never reads as "not exposed".

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `SOCK_DIAG_BY_FAMILY`: the request and reply message type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLMSG_OVERRUN: u16 = 4;
/// The dump changed while it was read: its answer may miss sockets.
const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_DUMP: u16 = 0x300;
/// The kernel's `TCP_LISTEN` state.
const TCP_LISTEN: u8 = 10;
/// `struct nlmsghdr`.
const HEADER: usize = 16;
/// `struct inet_diag_req_v2`.
const REQUEST: usize = 56;
/// `struct inet_diag_msg` (the fields read are in its first 24 bytes).
const MESSAGE: usize = 72;

/// At most this many sockets are taken from one family's dump.
pub const MAX_SOCKETS: usize = 65_536;
/// At most this many datagrams are read for one family's dump.
pub const MAX_DATAGRAMS: usize = 4_096;
/// The receive buffer: larger than any datagram of a dump (the kernel
/// fills at most 32 KiB per datagram); a longer one is refused.
const DATAGRAM: usize = 64 * 1024;

/// How long one receive may wait: a dump of the listening table takes
/// microseconds, and the check runs on a thread that also forwards bytes.
const RECEIVE_TIMEOUT_US: libc::suseconds_t = 100_000;

/// Every listening TCP socket's local address, IPv4 and IPv6. Any failure
/// of either family's dump is an error (see the module's doc).
pub fn listening() -> io::Result<Vec<SocketAddr>> {
    let fd = open()?;
    let mut all = Vec::new();
    dump(&fd, libc::AF_INET as u8, 1, &mut all)?;
    dump(&fd, libc::AF_INET6 as u8, 2, &mut all)?;
    Ok(all)
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2); the descriptor is owned from here on.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a descriptor just returned to us and not owned yet.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let timeout = libc::timeval {
        tv_sec: 0,
        tv_usec: RECEIVE_TIMEOUT_US,
    };
    // SAFETY: a valid timeval of the size passed.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&timeout as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The dump request for `family`'s listening TCP sockets.
pub fn request(family: u8, seq: u32) -> [u8; HEADER + REQUEST] {
    let mut r = [0u8; HEADER + REQUEST];
    r[0..4].copy_from_slice(&((HEADER + REQUEST) as u32).to_ne_bytes());
    r[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    r[6..8].copy_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    r[8..12].copy_from_slice(&seq.to_ne_bytes());
    // The port id (12..16) is 0: the kernel fills in ours.
    r[HEADER] = family;
    r[HEADER + 1] = libc::IPPROTO_TCP as u8;
    // idiag_ext and pad stay 0; the states wanted: listening only.
    r[HEADER + 4..HEADER + 8].copy_from_slice(&(1u32 << TCP_LISTEN).to_ne_bytes());
    r
}

/// Sends the request for `family` and reads its whole dump into `out`.
fn dump(fd: &OwnedFd, family: u8, seq: u32, out: &mut Vec<SocketAddr>) -> io::Result<()> {
    let req = request(family, seq);
    // SAFETY: a zeroed sockaddr_nl is valid; the kernel is port 0.
    let mut kernel: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    kernel.nl_family = libc::AF_NETLINK as libc::sa_family_t;
    // SAFETY: `req` and `kernel` are valid for the lengths passed.
    let sent = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&kernel as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = vec![0u8; DATAGRAM];
    let start = out.len();
    for _ in 0..MAX_DATAGRAMS {
        // SAFETY: `buf` is valid for `buf.len()` bytes. MSG_TRUNC makes the
        // call return the datagram's real length, so a cut one is seen.
        let n = unsafe {
            libc::recv(
                fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        let n = match usize::try_from(n) {
            Ok(n) => n,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
        };
        if n > buf.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sock_diag: a datagram larger than the receive buffer",
            ));
        }
        let Some(got) = buf.get(..n) else {
            return Err(io::Error::other("sock_diag: short buffer"));
        };
        match parse(got, seq, out) {
            Ok(Part::Done) => return Ok(()),
            Ok(Part::More) => {}
            Err(Malformed::Errno(errno)) => return Err(io::Error::from_raw_os_error(errno)),
            Err(Malformed::Bytes(what)) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("sock_diag: {what}"),
                ))
            }
        }
        if out.len().saturating_sub(start) > MAX_SOCKETS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "sock_diag: more listening sockets than are read",
            ));
        }
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        "sock_diag: the dump did not end",
    ))
}

/// Where a dump stands after one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// More datagrams follow.
    More,
    /// The dump ended (`NLMSG_DONE`).
    Done,
}

/// Why a datagram was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// The kernel answered with this error number.
    Errno(i32),
    /// The bytes do not have a netlink message's shape.
    Bytes(&'static str),
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

/// Reads one datagram of a dump answering request `seq`: each listening
/// socket's local address goes into `out`; messages of another sequence
/// number are skipped.
pub fn parse(datagram: &[u8], seq: u32, out: &mut Vec<SocketAddr>) -> Result<Part, Malformed> {
    let mut rest = datagram;
    while !rest.is_empty() {
        let len = u32_at(rest, 0).ok_or(Malformed::Bytes("a truncated message header"))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len < HEADER || len > rest.len() {
            return Err(Malformed::Bytes("a message length out of bounds"));
        }
        let kind = u16_at(rest, 4).ok_or(Malformed::Bytes("a truncated message header"))?;
        let flags = u16_at(rest, 6).ok_or(Malformed::Bytes("a truncated message header"))?;
        let this_seq = u32_at(rest, 8).ok_or(Malformed::Bytes("a truncated message header"))?;
        let body = rest.get(HEADER..len).unwrap_or_default();
        if this_seq == seq {
            if flags & NLM_F_DUMP_INTR != 0 {
                return Err(Malformed::Bytes("the dump was interrupted"));
            }
            match kind {
                NLMSG_DONE => return done(body),
                NLMSG_ERROR => return Err(kernel_error(body)),
                NLMSG_OVERRUN => return Err(Malformed::Bytes("the dump overran")),
                SOCK_DIAG_BY_FAMILY => {
                    if let Some(addr) = listener(body)? {
                        out.push(addr);
                    }
                }
                _ => {}
            }
        }
        // Messages are aligned to 4 bytes; the last may end unpadded.
        let next = len.saturating_add(3) & !3;
        rest = rest.get(next..).unwrap_or_default();
    }
    Ok(Part::More)
}

/// The end of a dump: the kernel puts the dump's own error (negative) in
/// the `NLMSG_DONE` message, 0 (or, from older kernels, a length) when it
/// completed.
fn done(body: &[u8]) -> Result<Part, Malformed> {
    let code = u32_at(body, 0).ok_or(Malformed::Bytes("a truncated end of dump"))? as i32;
    if code < 0 {
        return Err(Malformed::Errno(code.checked_neg().unwrap_or(libc::EINVAL)));
    }
    Ok(Part::Done)
}

/// An `NLMSG_ERROR` answer: the kernel's error number, or, for 0 (an
/// acknowledgement, which a dump never sends), a malformed answer.
fn kernel_error(body: &[u8]) -> Malformed {
    match u32_at(body, 0).map(|c| c as i32) {
        None => Malformed::Bytes("a truncated error message"),
        Some(0) => Malformed::Bytes("an acknowledgement where a dump was expected"),
        Some(code) => Malformed::Errno(code.checked_neg().unwrap_or(libc::EINVAL).abs()),
    }
}

/// The local address of one `inet_diag_msg`, when its socket listens.
fn listener(body: &[u8]) -> Result<Option<SocketAddr>, Malformed> {
    if body.len() < MESSAGE {
        return Err(Malformed::Bytes("a truncated socket message"));
    }
    let (family, state) = (body[0], body[1]);
    if state != TCP_LISTEN {
        return Ok(None);
    }
    // inet_diag_sockid at offset 4: sport, dport (network order), src[16].
    let port = u16::from_be_bytes([body[4], body[5]]);
    let mut src = [0u8; 16];
    src.copy_from_slice(&body[8..24]);
    let ip = match i32::from(family) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(src[0], src[1], src[2], src[3])),
        libc::AF_INET6 => IpAddr::V6(Ipv6Addr::from(src)),
        _ => return Ok(None),
    };
    Ok(Some(SocketAddr::new(ip, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One netlink message of `kind` and `seq` around `body`, padded.
    fn message(kind: u16, seq: u32, body: &[u8]) -> Vec<u8> {
        let len = HEADER + body.len();
        let mut m = Vec::new();
        m.extend_from_slice(&(len as u32).to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&0x2u16.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        m.extend_from_slice(body);
        while m.len() % 4 != 0 {
            m.push(0);
        }
        m
    }

    fn socket(family: u8, state: u8, addr: SocketAddr) -> Vec<u8> {
        let mut b = vec![0u8; MESSAGE];
        b[0] = family;
        b[1] = state;
        b[4..6].copy_from_slice(&addr.port().to_be_bytes());
        match addr.ip() {
            IpAddr::V4(v4) => b[8..12].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => b[8..24].copy_from_slice(&v6.octets()),
        }
        b
    }

    #[test]
    fn reads_listeners_of_both_families_and_skips_other_states() {
        let a: SocketAddr = "0.0.0.0:2100".parse().unwrap();
        let b: SocketAddr = "[::1]:443".parse().unwrap();
        let c: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let mut d = message(SOCK_DIAG_BY_FAMILY, 7, &socket(2, TCP_LISTEN, a));
        d.extend(message(SOCK_DIAG_BY_FAMILY, 7, &socket(10, TCP_LISTEN, b)));
        // Established: not a listener.
        d.extend(message(SOCK_DIAG_BY_FAMILY, 7, &socket(2, 1, c)));
        // Another request's answer.
        d.extend(message(SOCK_DIAG_BY_FAMILY, 8, &socket(2, TCP_LISTEN, c)));
        let mut out = Vec::new();
        assert_eq!(parse(&d, 7, &mut out), Ok(Part::More));
        assert_eq!(out, vec![a, b]);
        let mut out = Vec::new();
        assert_eq!(
            parse(&message(NLMSG_DONE, 7, &[0; 4]), 7, &mut out),
            Ok(Part::Done)
        );
        assert!(out.is_empty());
    }

    #[test]
    fn kernel_errors_and_malformed_bytes_are_errors() {
        let mut out = Vec::new();
        let err = message(NLMSG_ERROR, 1, &(-libc::ENOENT).to_ne_bytes());
        assert_eq!(
            parse(&err, 1, &mut out),
            Err(Malformed::Errno(libc::ENOENT))
        );
        // A length past the datagram, below a header, a cut socket message.
        let mut long = message(SOCK_DIAG_BY_FAMILY, 1, &[0; MESSAGE]);
        long[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(matches!(
            parse(&long, 1, &mut out),
            Err(Malformed::Bytes(_))
        ));
        let mut short = message(SOCK_DIAG_BY_FAMILY, 1, &[0; MESSAGE]);
        short[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(matches!(
            parse(&short, 1, &mut out),
            Err(Malformed::Bytes(_))
        ));
        let cut = message(SOCK_DIAG_BY_FAMILY, 1, &[0; 20]);
        assert!(matches!(parse(&cut, 1, &mut out), Err(Malformed::Bytes(_))));
        assert!(matches!(
            parse(&[1, 2], 1, &mut out),
            Err(Malformed::Bytes(_))
        ));
        assert!(out.is_empty());
    }

    /// Arbitrary bytes, and valid messages with one byte changed, are an
    /// answer or an error, never a panic, and never more sockets than
    /// messages.
    #[test]
    fn hostile_datagrams_never_panic() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let valid = message(
            SOCK_DIAG_BY_FAMILY,
            3,
            &socket(2, TCP_LISTEN, "0.0.0.0:1".parse().unwrap()),
        );
        for round in 0..20_000 {
            let mut d = if round % 2 == 0 {
                (0..next() % 200).map(|_| next() as u8).collect::<Vec<_>>()
            } else {
                valid.clone()
            };
            if !d.is_empty() {
                let at = (next() as usize) % d.len();
                d[at] = next() as u8;
            }
            let mut out = Vec::new();
            let _ = parse(&d, 3, &mut out);
            assert!(out.len() <= d.len() / (HEADER + MESSAGE) + 1);
        }
    }

    /// What the kernel says about its dump is an error whatever message
    /// carries it: an end of dump with an error (a missing `tcp_diag`), an
    /// interrupted or overrun dump, an acknowledgement where a dump was
    /// expected, and a message whose length is 0. An end of dump without a
    /// code is refused; with 0 or a length, the dump completed.
    #[test]
    fn a_dump_the_kernel_ends_badly_is_an_error() {
        let mut out = Vec::new();
        let enoent = message(NLMSG_DONE, 7, &(-libc::ENOENT).to_ne_bytes());
        assert_eq!(
            parse(&enoent, 7, &mut out),
            Err(Malformed::Errno(libc::ENOENT))
        );
        let old_kernel = message(NLMSG_DONE, 7, &20i32.to_ne_bytes());
        assert_eq!(parse(&old_kernel, 7, &mut out), Ok(Part::Done));
        assert!(matches!(
            parse(&message(NLMSG_DONE, 7, &[]), 7, &mut out),
            Err(Malformed::Bytes(_))
        ));
        let mut intr = message(
            SOCK_DIAG_BY_FAMILY,
            7,
            &socket(2, TCP_LISTEN, "0.0.0.0:1".parse().unwrap()),
        );
        intr[6..8].copy_from_slice(&(0x2 | NLM_F_DUMP_INTR).to_ne_bytes());
        assert!(matches!(
            parse(&intr, 7, &mut out),
            Err(Malformed::Bytes(_))
        ));
        assert!(matches!(
            parse(&message(NLMSG_OVERRUN, 7, &[0; 4]), 7, &mut out),
            Err(Malformed::Bytes(_))
        ));
        assert!(matches!(
            parse(&message(NLMSG_ERROR, 7, &[0; 4]), 7, &mut out),
            Err(Malformed::Bytes(_))
        ));
        // Another request's message, its length 0: refused, not looped on.
        let mut zero = message(SOCK_DIAG_BY_FAMILY, 8, &[0; MESSAGE]);
        zero[0..4].copy_from_slice(&0u32.to_ne_bytes());
        assert!(matches!(
            parse(&zero, 7, &mut out),
            Err(Malformed::Bytes(_))
        ));
        assert!(out.is_empty());
    }

    #[test]
    fn the_request_asks_for_listening_tcp_sockets_only() {
        let r = request(10, 5);
        assert_eq!(u32_at(&r, 0), Some(72));
        assert_eq!(u16_at(&r, 4), Some(SOCK_DIAG_BY_FAMILY));
        assert_eq!(u16_at(&r, 6), Some(NLM_F_REQUEST | NLM_F_DUMP));
        assert_eq!(u32_at(&r, 8), Some(5));
        assert_eq!((r[HEADER], r[HEADER + 1]), (10, libc::IPPROTO_TCP as u8));
        assert_eq!(u32_at(&r, HEADER + 4), Some(1 << 10));
    }

    /// The kernel's answer agrees with `/proc` about sockets this test
    /// binds: a listener is found on either path, a connected socket on
    /// neither.
    #[test]
    fn agrees_with_proc_about_real_sockets() {
        let v4 = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let v4 = v4.local_addr().unwrap();
        let v6 = std::net::TcpListener::bind("[::1]:0")
            .ok()
            .map(|l| (l.local_addr().unwrap(), l));
        // The addresses the verdict turns on: every IPv4 and IPv6 address.
        let any4 = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
        let any4 = any4.local_addr().unwrap();
        let any6 = std::net::TcpListener::bind("[::]:0")
            .ok()
            .map(|l| (l.local_addr().unwrap(), l));
        let diag = listening().unwrap();
        let proc_ = super::super::listeners::from_proc().unwrap();
        for a in [v4, any4] {
            assert!(diag.contains(&a), "{a} not in {diag:?}");
            assert!(proc_.contains(&a), "{a} not in {proc_:?}");
        }
        for (a, _keep) in v6.iter().chain(any6.iter()) {
            assert!(diag.contains(a), "{a} not in {diag:?}");
            assert!(proc_.contains(a), "{a} not in {proc_:?}");
        }
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let gone = closed.local_addr().unwrap();
        drop(closed);
        assert!(!listening().unwrap().contains(&gone));
    }
}
