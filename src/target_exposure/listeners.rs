//! The listening TCP sockets of this process's network namespace. Asked of
//! the kernel over netlink first ([`super::sockdiag`]); read from
//! `/proc/self/net/tcp` and `/proc/self/net/tcp6` when that fails: readable
//! by any user, with no capability (reading the firewall's rules would need
//! `CAP_NET_ADMIN`), and inside the sandbox, which allows `/proc/self`.
//! Not `/proc/net`: systemd's `ProcSubset=pid`, which the shipped unit
//! sets, hides it, while `/proc/self/net` stays.
//!
//! Only the listening sockets are wanted, and the kernel lists those first
//! (its listening table before its established one), so reading stops at
//! the first line in another state. That bounds what is parsed, not what
//! the kernel does: it walks its whole established hash table to make the
//! first page (milliseconds on a large machine; see [`super::sockdiag`]),
//! which is why `/proc` is only the fallback (said once, at INFO, when it
//! is first taken; `/status` shows which was used). A line that does not
//! parse is skipped, and at most [`MAX_LINES`] lines are read, so a strange
//! file costs a bounded amount and never panics; a table with more
//! listeners than that, or one that cannot be read to its end, is an
//! error, never a shorter list (a listener past the cut must not read as
//! "not exposed").

use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Once;

/// The files read, and whether each holds IPv6 addresses.
pub const FILES: [(&str, bool); 2] = [("/proc/self/net/tcp", false), ("/proc/self/net/tcp6", true)];

/// At most this many lines are read from one file.
pub const MAX_LINES: usize = 65_536;

/// The kernel's code for `TCP_LISTEN` in the `st` column.
const LISTEN: &str = "0A";

/// Where the listening sockets were read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Source {
    Netlink = 1,
    Proc = 2,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Netlink => "netlink",
            Source::Proc => "proc",
        }
    }

    /// The source stored as `n`; `None` for any other value.
    pub fn from_u8(n: u8) -> Option<Source> {
        match n {
            1 => Some(Source::Netlink),
            2 => Some(Source::Proc),
            _ => None,
        }
    }
}

/// Every listening TCP socket's local address, IPv4 and IPv6: asked of the
/// kernel over netlink ([`super::sockdiag`], cheap), else read from `/proc`
/// (a kernel without `inet_diag`, or netlink sockets not allowed).
pub fn listening() -> std::io::Result<(Vec<SocketAddr>, Source)> {
    match super::sockdiag::listening() {
        Ok(list) => Ok((list, Source::Netlink)),
        Err(e) => {
            static SAID: Once = Once::new();
            SAID.call_once(|| {
                tracing::info!(
                    target: "mtls_sidecar::exposure",
                    error = %e,
                    "cannot list listening sockets over netlink (NETLINK_SOCK_DIAG); reading \
                     /proc/self/net/tcp and tcp6 instead, which costs milliseconds of kernel \
                     time per check on a large host (allow AF_NETLINK; see docs/transparent.md)"
                )
            });
            from_proc().map(|list| (list, Source::Proc))
        }
    }
}

/// Every listening TCP socket's local address, read from `/proc`. A missing
/// `tcp6` (IPv6 disabled) is no error; a missing `tcp` is.
pub fn from_proc() -> std::io::Result<Vec<SocketAddr>> {
    let mut all = Vec::new();
    for (path, v6) in FILES {
        match std::fs::File::open(path) {
            Ok(f) => {
                all.extend(parse(f, v6).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("cannot read {path}: {e}"))
                })?)
            }
            Err(e) if v6 && e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("cannot read {path}: {e}"),
                ))
            }
        }
    }
    Ok(all)
}

/// The listening sockets in one `/proc/net/tcp{,6}` table, up to its first
/// socket in another state; an error when the table cannot be read that
/// far, or holds more than [`MAX_LINES`] lines before it.
pub fn parse(table: impl Read, v6: bool) -> std::io::Result<Vec<SocketAddr>> {
    let mut out = Vec::new();
    // The first line is the header.
    for (n, line) in BufReader::new(table).lines().skip(1).enumerate() {
        if n >= MAX_LINES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("more than {MAX_LINES} listening sockets"),
            ));
        }
        match parse_line(&line?, v6) {
            Some((addr, true)) => out.push(addr),
            Some((_, false)) => break,
            None => {}
        }
    }
    Ok(out)
}

/// One line: the local address, and whether the socket listens. `None`
/// when the line does not have that shape.
fn parse_line(line: &str, v6: bool) -> Option<(SocketAddr, bool)> {
    let mut fields = line.split_whitespace();
    let _slot = fields.next()?;
    let local = fields.next()?;
    let _remote = fields.next()?;
    let state = fields.next()?;
    let (ip, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let ip = if v6 { parse_v6(ip)? } else { parse_v4(ip)? };
    Some((SocketAddr::new(ip, port), state == LISTEN))
}

/// An IPv4 address as the kernel prints it: the four bytes in memory
/// order, read as one native-endian 32-bit word in hex.
fn parse_v4(hex: &str) -> Option<IpAddr> {
    if hex.len() != 8 {
        return None;
    }
    let word = u32::from_str_radix(hex, 16).ok()?;
    Some(IpAddr::V4(Ipv4Addr::from(word.to_ne_bytes())))
}

/// An IPv6 address as the kernel prints it: four such words.
fn parse_v6(hex: &str) -> Option<IpAddr> {
    if hex.len() != 32 || !hex.is_ascii() {
        return None;
    }
    let mut bytes = [0u8; 16];
    for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
        let word = u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok()?;
        chunk.copy_from_slice(&word.to_ne_bytes());
    }
    Some(IpAddr::V6(Ipv6Addr::from(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's hex for an IPv4 address, as `parse_v4` reads it.
    fn v4_hex(ip: Ipv4Addr) -> String {
        format!("{:08X}", u32::from_ne_bytes(ip.octets()))
    }

    fn v6_hex(ip: Ipv6Addr) -> String {
        ip.octets()
            .chunks_exact(4)
            .map(|c| format!("{:08X}", u32::from_ne_bytes([c[0], c[1], c[2], c[3]])))
            .collect()
    }

    fn line(local: &str, port: u16, state: &str) -> String {
        format!(
            "   0: {local}:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 \
             00000000     0        0 12345 1 0000000000000000 100 0 0 10 0"
        )
    }

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when \
                          retrnsmt   uid  timeout inode";

    /// `parse` of a table with these lines under the header.
    fn parsed(lines: &[String], v6: bool) -> Vec<SocketAddr> {
        let table = std::iter::once(HEADER.to_string())
            .chain(lines.iter().cloned())
            .collect::<Vec<_>>()
            .join("\n");
        parse(table.as_bytes(), v6).unwrap()
    }

    fn addrs(list: &[&str]) -> Vec<SocketAddr> {
        list.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn reads_listeners_up_to_the_first_other_state() {
        let lo = Ipv4Addr::LOCALHOST;
        let lines = [
            line(&v4_hex(Ipv4Addr::UNSPECIFIED), 2100, "0A"),
            line(&v4_hex(lo), 9901, "0A"),
            line(&v4_hex(lo), 40000, "01"),
            // Past the listening table: not read.
            line(&v4_hex(lo), 7000, "0A"),
        ];
        assert_eq!(
            parsed(&lines, false),
            addrs(&["0.0.0.0:2100", "127.0.0.1:9901"])
        );
    }

    #[test]
    fn reads_ipv6_and_mapped_addresses() {
        let mapped = "::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap();
        let lines = [
            line(&v6_hex(Ipv6Addr::UNSPECIFIED), 2100, "0A"),
            line(&v6_hex(mapped), 2101, "0A"),
            line(&v6_hex("fd00:77::2".parse().unwrap()), 2102, "0A"),
        ];
        assert_eq!(
            parsed(&lines, true),
            addrs(&["[::]:2100", "[::ffff:127.0.0.1]:2101", "[fd00:77::2]:2102"])
        );
    }

    #[test]
    fn hostile_lines_are_skipped_never_a_panic() {
        let table = [
            HEADER,
            "",
            "garbage",
            "   0: ZZZZZZZZ:0834 00000000:0000 0A",
            "   0: 0100007F:FFFFF 00000000:0000 0A",
            "   0: 0100007F 00000000:0000 0A",
            "   0: 0100007F00:0834 00000000:0000 0A",
            "   0: é1000000000000000000000000000000:0834 0:0 0A",
            "   0: 0100007F:0834",
        ]
        .join("\n");
        assert!(parse(table.as_bytes(), false).unwrap().is_empty());
        assert!(parse(table.as_bytes(), true).unwrap().is_empty());
        // A table that cannot be read to its end is an error, not a
        // shorter list.
        assert!(parse(&[b'h', b'\n', 0xff, b'\n', 0xfe][..], false).is_err());
    }

    /// At most `MAX_LINES` listeners are read; more is an error, since a
    /// listener past the cut could be the one that exposes the target.
    #[test]
    fn more_than_max_lines_of_listeners_is_an_error() {
        let one = line(&v4_hex(Ipv4Addr::LOCALHOST), 1, "0A");
        assert_eq!(
            parsed(&vec![one.clone(); MAX_LINES], false).len(),
            MAX_LINES
        );
        let table = std::iter::once(HEADER.to_string())
            .chain(std::iter::repeat_n(one, MAX_LINES + 1))
            .collect::<Vec<_>>()
            .join("\n");
        assert!(parse(table.as_bytes(), false).is_err());
    }

    #[test]
    fn this_process_sees_its_own_listener() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let (list, source) = listening().unwrap();
        assert!(list.contains(&addr), "{addr}");
        assert_eq!(source, Source::Netlink, "this kernel answers sock_diag");
    }
}
