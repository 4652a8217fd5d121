//! Escaping and capping a string a peer controls on its way into a log
//! field: [`clean`], [`clean_display`], [`clean_list`] (and [`parse_list`],
//! which reads a cleaned list back).

use std::fmt::{self, Write};

/// At most this many characters of one field are shown (escape sequences
/// count with their full length); the rest is replaced by a marker such as
/// `…[+44 chars]` naming how many characters of the original were cut.
pub const MAX_FIELD_CHARS: usize = 256;

/// At most this many items of a list field are shown; the rest is replaced
/// by one `+N more` entry.
pub const MAX_LIST_ITEMS: usize = 16;

/// True for characters never written raw into a log field: controls (C0,
/// DEL, C1, which includes NEL), line and paragraph separators, bidi
/// controls, and invisible format characters that make two different
/// strings look alike (zero-width, soft hyphen, BOM, Unicode tags).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{00ad}'
                | '\u{061c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{e0000}'..='\u{e007f}'
        )
}

/// How one character is written: as itself, or as an escape sequence.
enum Escaped {
    Raw,
    Short(&'static str),
    Unicode(u32),
}

impl Escaped {
    fn of(c: char) -> Escaped {
        match c {
            '\\' => Escaped::Short("\\\\"),
            '"' => Escaped::Short("\\\""),
            '\n' => Escaped::Short("\\n"),
            '\r' => Escaped::Short("\\r"),
            '\t' => Escaped::Short("\\t"),
            c if is_unsafe_char(c) => Escaped::Unicode(u32::from(c)),
            _ => Escaped::Raw,
        }
    }

    /// The length of the written form, in characters.
    fn len(&self) -> usize {
        match self {
            Escaped::Raw => 1,
            Escaped::Short(s) => s.len(),
            // `\u{` + hex digits + `}`
            Escaped::Unicode(u) => 4 + hex_digits(*u),
        }
    }
}

fn hex_digits(u: u32) -> usize {
    let bits = 32 - u.max(1).leading_zeros() as usize;
    bits.div_ceil(4)
}

/// A `fmt::Write` that escapes what passes through it and stops writing
/// after a budget of characters, counting what it drops.
struct Capped<'a, W: Write + ?Sized> {
    out: &'a mut W,
    left: usize,
    /// Characters of the input not written (counted, never stored).
    cut: usize,
}

impl<'a, W: Write + ?Sized> Capped<'a, W> {
    fn new(out: &'a mut W, budget: usize) -> Self {
        Capped {
            out,
            left: budget,
            cut: 0,
        }
    }

    /// Writes the cut marker, if anything was cut.
    fn finish(self) -> fmt::Result {
        match self.cut {
            0 => Ok(()),
            1 => self.out.write_str("…[+1 char]"),
            n => write!(self.out, "…[+{n} chars]"),
        }
    }
}

impl<W: Write + ?Sized> Write for Capped<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut > 0 {
            self.cut = self.cut.saturating_add(s.chars().count());
            return Ok(());
        }
        // Raw runs are written as one slice; only escapes go one by one.
        let mut run = 0;
        for (i, c) in s.char_indices() {
            let e = Escaped::of(c);
            let len = e.len();
            if len > self.left {
                self.out.write_str(&s[run..i])?;
                self.cut = s[i..].chars().count();
                return Ok(());
            }
            self.left -= len;
            match e {
                Escaped::Raw => continue,
                Escaped::Short(esc) => {
                    self.out.write_str(&s[run..i])?;
                    self.out.write_str(esc)?;
                }
                Escaped::Unicode(u) => {
                    self.out.write_str(&s[run..i])?;
                    write!(self.out, "\\u{{{u:x}}}")?;
                }
            }
            run = i + c.len_utf8();
        }
        self.out.write_str(&s[run..])
    }
}

/// A string escaped and capped as it is displayed; see [`clean`].
#[derive(Debug, Clone, Copy)]
pub struct Clean<'a>(&'a str);

/// Wraps peer-controlled text for a log field: displays it with `\` and `"`
/// backslash-escaped, `\n`, `\r`, `\t` as such, every other
/// [unsafe character](is_unsafe_char) as `\u{hex}`, and at most
/// [`MAX_FIELD_CHARS`] characters followed by `…[+N chars]` when longer.
/// Nothing is allocated: the text is escaped as it is written.
pub fn clean(s: &str) -> Clean<'_> {
    Clean(s)
}

impl fmt::Display for Clean<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = Capped::new(f, MAX_FIELD_CHARS);
        w.write_str(self.0)?;
        w.finish()
    }
}

/// Any `Display` (an error that may quote the peer) escaped and capped like
/// [`clean`]; see [`clean_display`].
#[derive(Debug, Clone, Copy)]
pub struct CleanDisplay<'a, T: ?Sized>(&'a T);

/// Like [`clean`] for a value that is formatted rather than a string (an
/// error whose message may embed peer data): the formatted text is escaped
/// and capped as it is produced, without an intermediate `String`.
pub fn clean_display<T: fmt::Display + ?Sized>(value: &T) -> CleanDisplay<'_, T> {
    CleanDisplay(value)
}

impl<T: fmt::Display + ?Sized> fmt::Display for CleanDisplay<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut w = Capped::new(f, MAX_FIELD_CHARS);
        write!(w, "{}", self.0)?;
        w.finish()
    }
}

/// A list of peer-controlled strings as displayed; see [`clean_list`].
#[derive(Debug, Clone, Copy)]
pub struct CleanList<'a, S>(&'a [S]);

/// Wraps a list of peer-controlled strings (SANs) for a log field: displays
/// `["a", "b"]`, each item as [`clean`] shows it (so no item holds a raw
/// `"`), at most [`MAX_LIST_ITEMS`] items, then `+N more` for the rest:
/// `["a", …, "p", +4 more]`. The JSON log format turns this into an array
/// (see [`parse_list`]).
pub fn clean_list<S: AsRef<str>>(items: &[S]) -> CleanList<'_, S> {
    CleanList(items)
}

impl<S: AsRef<str>> fmt::Display for CleanList<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('[')?;
        for (i, item) in self.0.iter().take(MAX_LIST_ITEMS).enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "\"{}\"", clean(item.as_ref()))?;
        }
        let more = self.0.len().saturating_sub(MAX_LIST_ITEMS);
        if more > 0 {
            write!(f, ", +{more} more")?;
        }
        f.write_char(']')
    }
}

/// Splits what [`CleanList`] displayed back into its items, each exactly as
/// displayed between its quotes (still escaped), and a final `+N more` as
/// an item of its own. `None` when `s` is not in that shape.
pub fn parse_list(s: &str) -> Option<Vec<&str>> {
    let mut rest = s.strip_prefix('[')?.strip_suffix(']')?;
    let mut items = Vec::new();
    if rest.is_empty() {
        return Some(items);
    }
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = closing_quote(quoted)?;
            items.push(&quoted[..end]);
            rest = &quoted[end + 1..];
        } else {
            let count = rest.strip_prefix('+')?.strip_suffix(" more")?;
            if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            items.push(rest);
            return Some(items);
        }
        if rest.is_empty() {
            return Some(items);
        }
        rest = rest.strip_prefix(", ")?;
    }
}

/// The byte index of the first `"` not escaped by a backslash.
fn closing_quote(s: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        match b {
            _ if escaped => escaped = false,
            b'\\' => escaped = true,
            b'"' => return Some(i),
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> String {
        clean(s).to_string()
    }

    /// Reverses the escaping (for the round-trip property only).
    fn unescape(s: &str) -> String {
        let mut out = String::new();
        let mut it = s.chars().peekable();
        while let Some(ch) = it.next() {
            if ch != '\\' {
                out.push(ch);
                continue;
            }
            match it.next() {
                Some('n') => out.push('\n'),
                Some('r') => out.push('\r'),
                Some('t') => out.push('\t'),
                Some('\\') => out.push('\\'),
                Some('"') => out.push('"'),
                Some('u') => {
                    assert_eq!(it.next(), Some('{'));
                    let hex: String = it.by_ref().take_while(|&c| c != '}').collect();
                    let u = u32::from_str_radix(&hex, 16).unwrap();
                    out.push(char::from_u32(u).unwrap());
                }
                other => panic!("bad escape {other:?} in {s:?}"),
            }
        }
        out
    }

    #[test]
    fn plain_text_passes_unchanged() {
        for s in ["", "CN=controller.env-1.svc", "O=Ünïcødé, CN=日本", "a b=c"] {
            assert_eq!(c(s), s);
        }
    }

    #[test]
    fn line_breaking_and_terminal_fooling_characters_are_escaped() {
        assert_eq!(c("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(c("q\"uote\\"), "q\\\"uote\\\\");
        assert_eq!(
            c("\u{1b}[2J\u{7}\u{7f}\u{85}"),
            "\\u{1b}[2J\\u{7}\\u{7f}\\u{85}"
        );
        assert_eq!(
            c("ls\u{2028}ps\u{2029}rlo\u{202e}lri\u{2066}zw\u{200b}bom\u{feff}"),
            "ls\\u{2028}ps\\u{2029}rlo\\u{202e}lri\\u{2066}zw\\u{200b}bom\\u{feff}"
        );
        assert_eq!(c("tag\u{e0041}"), "tag\\u{e0041}");
        assert_eq!(c("\0"), "\\u{0}");
    }

    #[test]
    fn every_character_comes_out_safe_and_the_escaping_reverses() {
        // The planes where every unsafe character lives, and the last one.
        let planes = (0..=0x2ffffu32)
            .chain(0xe0000..=0xe01ff)
            .chain(0x10ff00..=0x10ffff);
        for u in planes {
            let Some(ch) = char::from_u32(u) else {
                continue;
            };
            let s = format!("a{ch}b");
            let out = c(&s);
            assert!(!out.chars().any(is_unsafe_char), "{u:#x} -> {out:?}");
            assert!(
                out.match_indices('"')
                    .all(|(i, _)| out[..i].ends_with('\\')),
                "a raw quote in {out:?}"
            );
            assert_eq!(unescape(&out), s, "{u:#x}");
        }
    }

    #[test]
    fn long_text_is_capped_with_a_count_of_what_was_cut() {
        assert_eq!(c(&"a".repeat(256)), "a".repeat(256));
        assert_eq!(
            c(&"a".repeat(257)),
            format!("{}…[+1 char]", "a".repeat(256))
        );
        assert_eq!(
            c(&"a".repeat(300)),
            format!("{}…[+44 chars]", "a".repeat(256))
        );
        // An escape that does not fit whole is cut whole.
        let s = format!("{}\n{}", "a".repeat(255), "b".repeat(9));
        assert_eq!(c(&s), format!("{}…[+10 chars]", "a".repeat(255)));
        // Escapes count with their length: 128 newlines fill the budget.
        let s = "\n".repeat(130);
        assert_eq!(c(&s), format!("{}…[+2 chars]", "\\n".repeat(128)));
        // The cut is counted in characters, not bytes.
        let s = format!("{}{}", "a".repeat(256), "é".repeat(5));
        assert_eq!(c(&s), format!("{}…[+5 chars]", "a".repeat(256)));
        // 64 KB in, a bounded line out.
        let huge = "\u{202e}".repeat(65_536);
        assert!(c(&huge).chars().count() <= MAX_FIELD_CHARS + 20);
    }

    #[test]
    fn formatted_values_are_escaped_and_capped_as_they_are_written() {
        let e = std::io::Error::other(format!("peer said {}\nFORGED", "x".repeat(300)));
        let out = clean_display(&e).to_string();
        assert!(out.starts_with("peer said xxx"), "{out}");
        assert!(!out.contains('\n'));
        assert!(out.ends_with("…[+61 chars]"), "{out}");
        // Written in pieces by format_args: the budget spans the pieces.
        let out =
            clean_display(&format_args!("{}{}", "a".repeat(200), "b".repeat(100))).to_string();
        assert_eq!(
            out,
            format!("{}{}…[+44 chars]", "a".repeat(200), "b".repeat(56))
        );
    }

    #[test]
    fn lists_show_sixteen_clean_items_then_a_count() {
        let none: [&str; 0] = [];
        assert_eq!(clean_list(&none).to_string(), "[]");
        assert_eq!(
            clean_list(&["a.svc", "b\n\"c\""]).to_string(),
            r#"["a.svc", "b\n\"c\""]"#
        );
        let many: Vec<String> = (0..20).map(|i| format!("s{i}")).collect();
        let shown = clean_list(&many).to_string();
        assert!(shown.ends_with(r#""s14", "s15", +4 more]"#), "{shown}");
        assert!(!shown.contains("s16"));
        let items = parse_list(&shown).unwrap();
        assert_eq!(items.len(), 17);
        assert_eq!(items[16], "+4 more");
    }

    #[test]
    fn a_displayed_list_parses_back_into_its_clean_items() {
        let nasty = vec![
            "x\", \"forged".to_string(),
            "back\\slash\"".to_string(),
            "]".to_string(),
            "+1 more".to_string(),
            "\u{2028}".to_string(),
            "z".repeat(300),
        ];
        let shown = clean_list(&nasty).to_string();
        let items = parse_list(&shown).unwrap();
        let want: Vec<String> = nasty.iter().map(|s| c(s)).collect();
        assert_eq!(items, want);
        for (item, orig) in items.iter().zip(&nasty).take(5) {
            assert_eq!(&unescape(item), orig);
        }
    }

    #[test]
    fn text_not_shaped_like_a_list_does_not_parse() {
        for s in [
            "",
            "[",
            "x",
            "[a]",
            "[\"a]",
            "[\"a\" \"b\"]",
            "[\"a\",\"b\"]",
            "[+x more]",
            "[+ more]",
            "[+1 more, \"a\"]",
            "[\"a\", ]",
            "[\"a\"]x",
        ] {
            assert_eq!(parse_list(s), None, "{s}");
        }
        assert_eq!(parse_list("[]"), Some(vec![]));
        assert_eq!(parse_list("[+3 more]"), Some(vec!["+3 more"]));
    }
}
