//! Turning fuzz input into structured values: a byte reader that never
//! fails (a short input reads as zeros and empty strings), and the framing
//! of the credentials target, whose records carry DER that the target wraps
//! in PEM itself, so a mutation lands in the DER rather than in base64.

/// Reads values off the front of the input; past its end, everything
/// reads as zero or empty.
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { rest: data }
    }

    pub fn u8(&mut self) -> u8 {
        match self.rest.split_first() {
            Some((b, rest)) => {
                self.rest = rest;
                *b
            }
            None => 0,
        }
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    /// Up to `n` bytes.
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let (b, rest) = self.rest.split_at(n.min(self.rest.len()));
        self.rest = rest;
        b
    }

    /// Bytes prefixed by a one-byte length.
    pub fn short(&mut self) -> &'a [u8] {
        let n = usize::from(self.u8());
        self.bytes(n)
    }

    /// Bytes prefixed by a two-byte length.
    pub fn long(&mut self) -> &'a [u8] {
        let n = usize::from(self.u16());
        self.bytes(n)
    }

    /// A one-byte-length string (invalid UTF-8 replaced).
    pub fn string(&mut self) -> String {
        String::from_utf8_lossy(self.short()).into_owned()
    }

    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }
}

/// The PEM labels a credentials record can be wrapped in.
pub const LABELS: [&str; 6] = [
    "CERTIFICATE",
    "PRIVATE KEY",
    "EC PRIVATE KEY",
    "RSA PRIVATE KEY",
    "X509 CRL",
    "TRUSTED CERTIFICATE",
];

/// Raw record flag: the bytes go into the file as they are.
pub const RAW: u8 = 0x80;
/// Intermediates flag: the record goes into the `intermediates` file
/// (file 4), whatever the low two bits say.
pub const INTERMEDIATES: u8 = 0x40;
/// How many files a credentials input describes.
pub const FILES: usize = 5;

/// One record of the credentials input: `[tag][len: u16 BE][bytes]`. The
/// tag's low two bits pick the file (cert, key, CA, CRL), [`INTERMEDIATES`]
/// overrides them (the intermediates file); with [`RAW`] set
/// the bytes are appended as they are, otherwise as a PEM block labelled
/// `LABELS[(tag >> 2) & 7]` (modulo the table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub file: usize,
    pub raw: bool,
    pub label: &'static str,
    pub bytes: &'a [u8],
}

/// Splits the credentials input into records.
pub fn records(data: &[u8]) -> Vec<Record<'_>> {
    let mut r = Reader::new(data);
    let mut out = Vec::new();
    while !r.is_empty() {
        let tag = r.u8();
        let bytes = r.long();
        out.push(Record {
            file: match tag & INTERMEDIATES {
                0 => usize::from(tag & 3),
                _ => 4,
            },
            raw: tag & RAW != 0,
            label: LABELS[usize::from((tag >> 2) & 7) % LABELS.len()],
            bytes,
        });
    }
    out
}

/// Encodes one record (for building seeds).
pub fn record(file: usize, raw: bool, label: usize, bytes: &[u8]) -> Vec<u8> {
    let tag = match file {
        4 => INTERMEDIATES,
        f => f as u8 & 3,
    } | ((label as u8 & 7) << 2)
        | if raw { RAW } else { 0 };
    let len = u16::try_from(bytes.len()).expect("a record holds at most 65535 bytes");
    let mut out = vec![tag];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    out
}

/// A PEM block with 64-character base64 lines: written here from RFC 7468
/// so the loader's PEM reader is not checked against itself.
pub fn pem(label: &str, der: &[u8]) -> Vec<u8> {
    let b64 = base64(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out.into_bytes()
}

/// Standard padded base64 (RFC 4648), the targets' own encoder.
pub fn base64(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ABC[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (plain, coded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), coded);
        }
    }

    #[test]
    fn records_round_trip() {
        let mut data = record(2, false, 0, b"abc");
        data.extend(record(3, true, 4, b""));
        data.extend(record(4, false, 0, b"i"));
        let r = records(&data);
        assert_eq!(r.len(), 3);
        assert_eq!((r[2].file, r[2].raw), (4, false));
        assert_eq!(
            (r[0].file, r[0].raw, r[0].label, r[0].bytes),
            (2, false, "CERTIFICATE", &b"abc"[..])
        );
        assert_eq!((r[1].file, r[1].raw, r[1].label), (3, true, "X509 CRL"));
    }
}
