//! What the fuzz targets check beyond "no panic": the invariants of each
//! parser's output and the small, independent reference implementations
//! they are compared with. Kept out of the targets so the reference code
//! has unit tests of its own (`cargo test` in `fuzz/`).

pub mod admin;
pub mod config;
pub mod credentials;
pub mod deny;
pub mod frames;
pub mod h2_blocks;
pub mod inject;
pub mod proxy_check;
pub mod proxy_v2;
pub mod publish;
pub mod records;
#[path = "../../tests/common/rfc9110.rs"]
pub mod rfc9110;
pub mod san;
pub mod secret;
pub mod stream;
pub mod workload;
pub mod xfcc;
pub mod xfcc_check;

/// `bytes` in pseudo-random pieces of 0 to 16 bytes (xorshift from
/// `seed`), for checks that a result does not depend on how input is split.
pub fn pieces(seed: u8, bytes: &[u8]) -> Vec<&[u8]> {
    let mut state = u32::from(seed) | 1;
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state as usize % 17).min(rest.len());
        let (a, b) = rest.split_at(n);
        out.push(a);
        rest = b;
    }
    out
}
