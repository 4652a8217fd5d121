//! Copies of forwarded bytes, made in pieces of at most 2 KiB.
//!
//! Why: the libc memcpy this binary links (glibc 2.36, static) copies 4 KiB
//! and more with `rep movsb`, and on the bench box's CPU (AMD EPYC, Zen 3)
//! that instruction runs about 30× slower (2.4-2.9 GB/s against 58-87)
//! when the destination starts 1 to 31 bytes past the source modulo 4 KiB
//! (`benches/memcpy_distance.c`). A sealed record's plaintext sits 5 bytes
//! past its header, and where the allocator puts that buffer against the
//! forwarding buffer differs from run to run: in some runs every record's
//! copy was slow, and the copies took more of the sidecar's CPU than
//! AES-GCM (benches/reports/2026-12-04-memcpy-page-offset-trap.md). Below 4 KiB
//! memcpy uses vector loads and stores, which ran at 58-97 GB/s at every
//! distance measured.

use std::cell::Cell;

/// The most one `memcpy` call moves.
pub const PIECE: usize = 2048;

/// A page's size, the period of the slow case.
const PAGE: usize = 4096;

/// Where a destination is placed past its source, modulo a page, when we
/// choose: clear of the slow 1-31 bytes for four records in a row (a
/// sealed TLS 1.3 record of 16 KiB of plaintext is 16,406 bytes, 22 past a
/// page multiple, so four of them sit at 64, 86, 108 and 130).
const CLEAR: usize = 64;

thread_local! {
    /// The page offset of the buffer the last record sealed on this thread
    /// was built in ([`note_sealed`]).
    static SEALED: Cell<Option<u16>> = const { Cell::new(None) };
}

/// Notes where a record being sealed on this thread is built. rustls seals
/// into a buffer of its own type and then copies the record, in one
/// memcpy we cannot split, to where the caller asked; the allocator hands
/// the same memory back record after record, so the next one is most
/// likely built at the same page offset.
pub fn note_sealed(record: *const u8) {
    let offset = (record as usize % PAGE) as u16;
    let _ = SEALED.try_with(|s| s.set(Some(offset)));
}

/// How far past `at` (less than a page) records should start so that
/// rustls's copies of them from the buffer noted by [`note_sealed`] stay
/// clear of the slow case; 0 when nothing was noted on this thread.
pub fn sealed_placement(at: *const u8) -> usize {
    match SEALED.try_with(Cell::get).ok().flatten() {
        Some(src) => placement(at as usize, usize::from(src)),
        None => 0,
    }
}

/// The shift in `0..PAGE` after `dst` that puts it [`CLEAR`] bytes past
/// `src` modulo a page.
fn placement(dst: usize, src: usize) -> usize {
    (src % PAGE + CLEAR + PAGE - dst % PAGE) % PAGE
}

/// Appends `src` to `dst`.
pub fn extend(dst: &mut Vec<u8>, src: &[u8]) {
    dst.reserve(src.len());
    for piece in src.chunks(PIECE) {
        dst.extend_from_slice(piece);
    }
}

/// Copies `src` into `dst`, which has the same length.
pub fn copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of unequal length"
    );
    for (d, s) in dst.chunks_mut(PIECE).zip(src.chunks(PIECE)) {
        d.copy_from_slice(s);
    }
}

/// Moves `buf[from..]` to the front of `buf` (an overlapping move towards
/// lower addresses: piece by piece from the front, each piece read before
/// anything after it is written).
pub fn to_front(buf: &mut [u8], from: usize) {
    let len = buf.len().saturating_sub(from);
    let mut done = 0;
    while done < len {
        let n = PIECE.min(len - done);
        buf.copy_within(from + done..from + done + n, done);
        done += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    #[test]
    fn extend_appends_every_byte_in_order() {
        for n in [0, 1, PIECE - 1, PIECE, PIECE + 1, 3 * PIECE + 17, 70_000] {
            let src = pattern(n);
            let mut dst = b"head".to_vec();
            extend(&mut dst, &src);
            assert_eq!(&dst[..4], b"head");
            assert_eq!(&dst[4..], &src[..], "{n}");
        }
    }

    #[test]
    fn copy_fills_the_destination_exactly() {
        for n in [0, 5, PIECE, 2 * PIECE + 3, 16 * 1024 + 22] {
            let src = pattern(n);
            let mut dst = vec![0xAA; n];
            copy(&mut dst, &src);
            assert_eq!(dst, src, "{n}");
        }
    }

    #[test]
    #[should_panic(expected = "unequal length")]
    fn copy_refuses_slices_of_unequal_length() {
        copy(&mut [0; 3], &[1; 4]);
    }

    #[test]
    fn placement_puts_the_destination_clear_of_the_source() {
        for (dst, src) in [
            (0, 0),
            (16, 16),
            (4095, 0),
            (0, 4095),
            (123_456, 7),
            (5, 4091),
        ] {
            let shift = placement(dst, src);
            assert!(shift < PAGE);
            assert_eq!(
                (dst + shift + PAGE - src % PAGE) % PAGE,
                CLEAR,
                "{dst} {src}"
            );
            for k in 0..4 {
                let d = (dst + shift + k * 16_406 + PAGE - src % PAGE) % PAGE;
                assert!(d >= 32, "{dst} {src} record {k}: {d}");
            }
        }
    }

    #[test]
    fn placement_follows_what_was_noted_on_this_thread() {
        std::thread::spawn(|| {
            assert_eq!(
                sealed_placement(std::ptr::null::<u8>().wrapping_add(100)),
                0
            );
            note_sealed(std::ptr::null::<u8>().wrapping_add(8192 + 10));
            assert_eq!(
                sealed_placement(std::ptr::null::<u8>().wrapping_add(4096 * 3 + 20)),
                10 + CLEAR - 20
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn to_front_moves_overlapping_bytes_intact() {
        for (len, from) in [
            (10, 3),
            (5000, 1),
            (5000, 4095),
            (70_000, 16_406),
            (9, 9),
            (4, 0),
        ] {
            let orig = pattern(len);
            let mut buf = orig.clone();
            to_front(&mut buf, from);
            assert_eq!(&buf[..len - from], &orig[from..], "{len} {from}");
        }
    }
}
