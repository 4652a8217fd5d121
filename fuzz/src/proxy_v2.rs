//! A strict PROXY protocol v2 decoder, a Rust mirror of
//! `tests/common/parse_proxy_v2.py` (written from the spec, not from the
//! `ppp` crate that encodes the header): a length that does not add up, a
//! TLV or sub-TLV overrunning its container, or a repeated TLV type is an
//! error.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The 12-byte signature.
pub const SIG: &[u8; 12] = b"\r\n\r\n\x00\r\nQUIT\n";

/// A decoded header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    pub version: u8,
    /// 0 LOCAL, 1 PROXY.
    pub command: u8,
    /// The family and transport byte: 0x11 TCP/IPv4, 0x21 TCP/IPv6, 0x00.
    pub family: u8,
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// The TLVs in order.
    pub tlvs: Vec<(u8, Vec<u8>)>,
    /// The header's whole length, fixed part included.
    pub len: usize,
}

/// The `PP2_TYPE_SSL` value, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ssl {
    pub client: u8,
    pub verify: u32,
    pub subs: Vec<(u8, Vec<u8>)>,
}

/// Splits `buf` into TLVs; every byte must belong to one, no type twice.
pub fn tlvs(buf: &[u8], what: &str) -> Result<Vec<(u8, Vec<u8>)>, String> {
    let mut out: Vec<(u8, Vec<u8>)> = Vec::new();
    let mut off = 0;
    while off < buf.len() {
        if buf.len() - off < 3 {
            return Err(format!(
                "{what}: {} trailing bytes, short of a TLV header",
                buf.len() - off
            ));
        }
        let kind = buf[off];
        let len = usize::from(u16::from_be_bytes([buf[off + 1], buf[off + 2]]));
        let end = off + 3 + len;
        if end > buf.len() {
            return Err(format!(
                "{what}: TLV 0x{kind:02x} of {len} bytes overruns its container"
            ));
        }
        if out.iter().any(|(k, _)| *k == kind) {
            return Err(format!("{what}: repeated TLV type 0x{kind:02x}"));
        }
        out.push((kind, buf[off + 3..end].to_vec()));
        off = end;
    }
    Ok(out)
}

/// Decodes a header at the start of `data`.
pub fn decode(data: &[u8]) -> Result<Header, String> {
    if data.len() < 16 {
        return Err(format!("{} bytes: shorter than the fixed part", data.len()));
    }
    if &data[..12] != SIG {
        return Err("bad signature".into());
    }
    let (ver_cmd, family) = (data[12], data[13]);
    let len = usize::from(u16::from_be_bytes([data[14], data[15]]));
    if 16 + len > data.len() {
        return Err(format!(
            "header length {len} overruns the {} bytes",
            data.len()
        ));
    }
    let body = &data[16..16 + len];
    let (addresses, rest) = match family {
        0x11 | 0x21 => {
            let size = if family == 0x11 { 4 } else { 16 };
            if len < 2 * size + 4 {
                return Err(format!("address block of family 0x{family:02x} truncated"));
            }
            let ip = |b: &[u8]| -> IpAddr {
                if size == 4 {
                    Ipv4Addr::from(<[u8; 4]>::try_from(b).unwrap_or_default()).into()
                } else {
                    Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap_or_default()).into()
                }
            };
            let port = |at: usize| u16::from_be_bytes([body[at], body[at + 1]]);
            let src = SocketAddr::new(ip(&body[..size]), port(2 * size));
            let dst = SocketAddr::new(ip(&body[size..2 * size]), port(2 * size + 2));
            (Some((src, dst)), &body[2 * size + 4..])
        }
        0x00 => (None, body),
        other => return Err(format!("unexpected family/transport 0x{other:02x}")),
    };
    Ok(Header {
        version: ver_cmd >> 4,
        command: ver_cmd & 0x0F,
        family,
        addresses,
        tlvs: tlvs(rest, "header")?,
        len: 16 + len,
    })
}

/// Splits a `PP2_TYPE_SSL` value.
pub fn ssl(value: &[u8]) -> Result<Ssl, String> {
    if value.len() < 5 {
        return Err("PP2_TYPE_SSL shorter than client + verify".into());
    }
    Ok(Ssl {
        client: value[0],
        verify: u32::from_be_bytes([value[1], value[2], value[3], value[4]]),
        subs: tlvs(&value[5..], "PP2_TYPE_SSL")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_specs_shapes_and_refuses_overruns() {
        let mut h = SIG.to_vec();
        h.extend([0x21, 0x11, 0, 12 + 4, 10, 0, 0, 1, 10, 0, 0, 2, 0, 1, 0, 2]);
        h.extend([0x05, 0, 1, b'7']);
        let d = decode(&h).unwrap();
        assert_eq!((d.version, d.command, d.family), (2, 1, 0x11));
        assert_eq!(d.addresses.unwrap().0, "10.0.0.1:1".parse().unwrap());
        assert_eq!(d.tlvs, [(5, b"7".to_vec())]);
        let mut short = h.clone();
        short[15] -= 1;
        assert!(decode(&short).unwrap_err().contains("overruns"));
        assert!(tlvs(&[1, 0, 0, 1, 0, 0], "x")
            .unwrap_err()
            .contains("repeated"));
        assert!(ssl(&[7, 0, 0, 0, 0, 0x21, 0, 9]).is_err());
    }
}
