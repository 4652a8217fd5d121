//! How many fields an h2 header block carries, counted from its HPACK
//! bytes (RFC 7541 §6) without decoding them.
//!
//! Why count them: hyper (h2) decodes a block as it arrives and keeps
//! each field it decoded, at a cost of its own (a header map entry) that
//! the block's wire bytes do not show: a one-byte reference to an HPACK
//! table entry is a whole field. So the frame follower charges a block
//! its wire bytes plus a cost per field. Only the shape of each
//! representation is read (its first byte, integer lengths, string
//! lengths); no table is kept, no string decoded, and hyper still judges
//! every byte.

/// What the next byte of a field block is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum Next {
    /// The first byte of a representation.
    #[default]
    Rep,
    /// A continuation byte of an index or a table size; `value` when a
    /// value string follows the integer (a literal's indexed name).
    Int { value: bool },
    /// A string's length: its first byte (`len` none) or a continuation
    /// byte; `name` when a value string follows the string.
    Len {
        name: bool,
        len: Option<(usize, u32)>,
    },
    /// This many string bytes to pass over; `name` as above.
    Str { left: usize, name: bool },
}

/// The fields begun so far in one header block.
#[derive(Debug, Default)]
pub struct FieldCount {
    next: Next,
    fields: usize,
}

impl FieldCount {
    /// The fields begun so far (one counts from its first byte).
    pub fn fields(&self) -> usize {
        self.fields
    }

    /// Starts over, for the next block.
    pub fn reset(&mut self) {
        *self = FieldCount::default();
    }

    /// Follows `bytes`, the next bytes of the block's field block (its
    /// frames' payloads without padding and priority).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        while let Some((&b, rest)) = bytes.split_first() {
            if let Next::Str { left, name } = self.next {
                let n = left.min(bytes.len());
                bytes = &bytes[n..];
                self.next = match left - n {
                    0 => after_string(name),
                    more => Next::Str { left: more, name },
                };
                continue;
            }
            bytes = rest;
            self.next = self.step(b);
        }
    }

    /// What follows byte `b`, read where `self.next` says.
    fn step(&mut self, b: u8) -> Next {
        match self.next {
            Next::Rep => self.representation(b),
            Next::Int { value } if b & 0x80 == 0 => after_int(value),
            Next::Int { value } => Next::Int { value },
            Next::Len { name, len: None } => match usize::from(b & 0x7f) {
                0x7f => Next::Len {
                    name,
                    len: Some((0x7f, 0)),
                },
                len => string(len, name),
            },
            Next::Len {
                name,
                len: Some((len, shift)),
            } => {
                let len = len.saturating_add(int_part(b, shift));
                if b & 0x80 == 0 {
                    string(len, name)
                } else {
                    Next::Len {
                        name,
                        len: Some((len, shift.saturating_add(7))),
                    }
                }
            }
            // `feed` passes over string bytes itself.
            Next::Str { .. } => self.next,
        }
    }

    /// The first byte of a representation (RFC 7541 §6): an indexed field
    /// (`1xxxxxxx`), a literal with incremental indexing (`01xxxxxx`), a
    /// table size update (`001xxxxx`, no field) or a literal without or
    /// never indexing (`000xxxxx`).
    fn representation(&mut self, b: u8) -> Next {
        if b & 0x80 != 0 {
            self.fields += 1;
            return index(b & 0x7f, 0x7f, false);
        }
        if b & 0xe0 == 0x20 {
            return index(b & 0x1f, 0x1f, false);
        }
        self.fields += 1;
        let (idx, max) = if b & 0x40 != 0 {
            (b & 0x3f, 0x3f)
        } else {
            (b & 0x0f, 0x0f)
        };
        match idx {
            0 => Next::Len {
                name: true,
                len: None,
            },
            _ => index(idx, max, true),
        }
    }
}

/// After an integer whose prefix holds `prefix` (all ones, `max`, when
/// continuation bytes follow); `value` when a value string follows it.
fn index(prefix: u8, max: u8, value: bool) -> Next {
    if prefix == max {
        Next::Int { value }
    } else {
        after_int(value)
    }
}

/// After an integer's last byte.
fn after_int(value: bool) -> Next {
    if value {
        Next::Len {
            name: false,
            len: None,
        }
    } else {
        Next::Rep
    }
}

/// A string of `len` bytes, then what follows it.
fn string(len: usize, name: bool) -> Next {
    match len {
        0 => after_string(name),
        left => Next::Str { left, name },
    }
}

/// After a string: a name's value string, or the next representation.
fn after_string(name: bool) -> Next {
    after_int(name)
}

/// What continuation byte `b` adds to an integer at bit `shift`
/// (saturating: a length that large is refused by hyper anyway).
fn int_part(b: u8, shift: u32) -> usize {
    usize::from(b & 0x7f)
        .checked_mul(1usize.checked_shl(shift).unwrap_or(0))
        .filter(|_| shift < usize::BITS - 7)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(chunks: &[&[u8]]) -> (usize, Next) {
        let mut c = FieldCount::default();
        for chunk in chunks {
            c.feed(chunk);
        }
        (c.fields, c.next)
    }

    /// Every representation of RFC 7541 §6, with multi-byte integers and
    /// strings (Huffman or not), counts one field, a table size update
    /// none, however the bytes are split.
    #[test]
    fn each_representation_is_one_field_whatever_the_split() {
        let mut block = vec![
            0x82, // indexed, static 2
            0xff, 0x80, 0x01, // indexed, index 127 + 128
            0x3f, 0xe1, 0x1f, // table size update 4096
            0x41, 0x01, b't', // incremental, indexed name, value "t"
            0x40, 0x02, b'x', b'y', 0x81, 0xff, // incremental, new name, Huffman value
            0x0f, 0x2f, 0x00, // without indexing, name index 15 + 47, empty value
            0x10, 0x00, 0x00, // never indexed, empty name and value
            0x00, 0x01, b'a', 0x7f, 0x03, // without indexing, new name, value of 130
        ];
        block.extend_from_slice(&[b'v'; 130]);
        block.push(0x84);
        assert_eq!(count(&[&block]), (8, Next::Rep));
        let bytes: Vec<&[u8]> = block.chunks(1).collect();
        assert_eq!(count(&bytes), (8, Next::Rep), "one byte at a time");
        let halves = block.split_at(block.len() / 2);
        assert_eq!(count(&[halves.0, halves.1]), (8, Next::Rep));
    }

    /// A field counts from its first byte; what it waits for is kept.
    #[test]
    fn an_unfinished_field_counts_and_waits_for_the_rest() {
        assert_eq!(
            count(&[&[0x10, 0x00, 0x00]]),
            (1, Next::Rep),
            "empty strings"
        );
        assert_eq!(
            count(&[&[0x00, 0x03, b'a']]),
            (
                1,
                Next::Str {
                    left: 2,
                    name: true
                }
            )
        );
        assert_eq!(
            count(&[&[0x40, 0x00, 0x7f, 0x80]]),
            (
                1,
                Next::Len {
                    name: false,
                    len: Some((0x7f, 7))
                }
            )
        );
        let mut c = FieldCount::default();
        c.feed(&[0x00, 0x7f]);
        c.feed(&[0xff; 10_000]);
        assert_eq!(c.fields(), 1, "an endless length is still one field");
        c.reset();
        c.feed(&[0x82; 1000]);
        assert_eq!(c.fields(), 1000, "one-byte references are each a field");
        c.reset();
        assert_eq!((c.fields(), c.next), (0, Next::Rep));
    }

    #[test]
    fn integer_parts_saturate() {
        assert_eq!(int_part(0x81, 0), 1);
        assert_eq!(int_part(0x7f, 7), 0x7f << 7);
        assert_eq!(int_part(0x01, 63), usize::MAX);
        assert_eq!(int_part(0x7f, 56), 0x7f << 56);
        assert_eq!(int_part(0x01, 57), usize::MAX);
    }
}
