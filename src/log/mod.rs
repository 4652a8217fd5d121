//! What the process logs and how: the set-up (`setup`: text or JSON lines
//! on stderr, level from `RUST_LOG`), and text a peer controls made safe
//! to log (`escape`) with refusal lines kept from flooding the log
//! (`ratelimit`).
//!
//! An unauthenticated peer chooses its certificate's subject and SANs, and
//! parts of some TLS error strings. Logged raw, a newline in them forges a
//! log line, a bidi override or a line separator fools whoever reads the log
//! in a terminal, and 64 KB of subject per refusal fills the disk. So every
//! such string goes through [`clean`] (or [`clean_display`], [`clean_list`])
//! on its way into a log field: control characters, line and paragraph
//! separators, bidi controls and invisible format characters are escaped,
//! and the field is capped at [`MAX_FIELD_CHARS`] characters with a visible
//! count of what was cut. And every refusal line goes through a
//! [`RefusalLog`]: at most [`REFUSAL_BURST`] lines per route and reason per
//! [`REFUSAL_WINDOW`], then one "suppressed N" summary (the metrics still
//! count every refusal).
//!
//! The escaped text is the same in the text and the JSON log formats, so a
//! JSON consumer sees exactly what a reader of the text log sees.

mod escape;
mod ratelimit;
mod setup;

pub use escape::{
    clean, clean_display, clean_list, is_unsafe_char, parse_list, Clean, CleanDisplay, CleanList,
    MAX_FIELD_CHARS, MAX_LIST_ITEMS,
};
pub use ratelimit::{Admission, RateLimiter, RefusalLog, REFUSAL_BURST, REFUSAL_WINDOW};
pub use setup::{init, init_with_default, JsonLines, LogFormat, LIST_FIELDS};
