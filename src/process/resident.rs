//! Letting go of start-up code once the sidecar serves. A sidecar executes
//! about a megabyte of machine code only while it starts (argument and
//! config parsing, certificate validation, the sandbox, the crypto library's
//! self-tests) and reads tables only then (clap's and the config parser's
//! strings). The kernel keeps every page a process has touched mapped into
//! it, and 64 KiB around each, so that code stays in the process's resident
//! set (what `VmRSS` and the kubelet's working set count) for its whole
//! life, though it never runs again.
//!
//! Once serving, [`release_startup_pages`] tells the kernel the process no
//! longer needs its read-only, file-backed pages (`MADV_DONTNEED` on the
//! executable's code and read-only data segments). That only unmaps them:
//! the page cache keeps the file's pages (shared with every other sidecar
//! running the same binary, and reclaimable), and the next instruction
//! fetched from an unmapped page maps it back from the cache, so the code
//! that serves connections returns to the resident set as soon as it runs
//! and start-up code stays out. Nothing is lost: these pages were never
//! written (the binary has no text relocations; the relocated
//! `.data.rel.ro` lives in the writable segment, under `PT_GNU_RELRO`, and is
//! left alone, as is every writable page).
//!
//! `MTLS_SIDECAR_RELEASE_STARTUP=off` keeps the pages mapped, to compare.

/// What was released: the number of segments and bytes advised.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Released {
    pub segments: usize,
    pub bytes: usize,
}

/// Whether the environment allows releasing (see [`super::switch`]).
pub fn enabled(setting: Option<&str>) -> bool {
    !super::switch::is_off(setting)
}

/// One loadable segment of the running executable: its address range and
/// whether it may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Segment {
    start: usize,
    end: usize,
    writable: bool,
}

/// The page-aligned ranges that may be released: every read-only segment
/// (code included) minus the RELRO range, shrunk inwards to whole pages so
/// no writable byte sharing a page with them is touched.
fn releasable(
    segments: &[Segment],
    relro: Option<(usize, usize)>,
    page: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    if page == 0 || !page.is_power_of_two() {
        return out;
    }
    // Every page that holds a writable byte (or a RELRO one) is kept.
    let keep: Vec<(usize, usize)> = segments
        .iter()
        .filter(|s| s.writable)
        .map(|s| (s.start, s.end))
        .chain(relro)
        .map(|(a, b)| (a & !(page - 1), b.saturating_add(page - 1) & !(page - 1)))
        .collect();
    for s in segments.iter().filter(|s| !s.writable) {
        let start = s.start.saturating_add(page - 1) & !(page - 1);
        let end = s.end & !(page - 1);
        let mut pieces = vec![(start, end)];
        for &(ka, kb) in &keep {
            pieces = pieces
                .into_iter()
                .flat_map(|(a, b)| {
                    if kb <= a || ka >= b {
                        vec![(a, b)]
                    } else {
                        [(a, ka), (kb, b)]
                            .into_iter()
                            .filter(|(x, y)| x < y)
                            .collect()
                    }
                })
                .collect();
        }
        out.extend(pieces.into_iter().filter(|(a, b)| a < b));
    }
    out
}

/// Unmaps the executable's read-only pages from the process (they come
/// back from the page cache when used). Does nothing when
/// `MTLS_SIDECAR_RELEASE_STARTUP=off` or off Linux. Never inlined:
/// `scripts/link-order/` (derive.py in every release build, generate.py)
/// tells start-up code from the code that serves by what runs before and
/// after this function.
#[inline(never)]
pub fn release_startup_pages() -> Released {
    if !enabled(
        std::env::var("MTLS_SIDECAR_RELEASE_STARTUP")
            .ok()
            .as_deref(),
    ) {
        return Released::default();
    }
    imp::release()
}

#[cfg(target_os = "linux")]
mod imp {
    use super::{releasable, Released, Segment};

    /// The executable's segments and RELRO range, as the dynamic loader
    /// (or a static binary's own start-up code) recorded them.
    #[derive(Default)]
    struct Found {
        done: bool,
        segments: Vec<Segment>,
        relro: Option<(usize, usize)>,
    }

    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: libc::size_t,
        data: *mut libc::c_void,
    ) -> libc::c_int {
        // SAFETY: `data` is the `Found` passed to dl_iterate_phdr below,
        // alive and exclusively ours for the call.
        let found = unsafe { &mut *(data as *mut Found) };
        if found.done || info.is_null() {
            return 1;
        }
        // The first object listed is the executable itself.
        found.done = true;
        // SAFETY: the loader hands a valid `dl_phdr_info` whose `dlpi_phdr`
        // points at `dlpi_phnum` program headers for the call's duration.
        let info = unsafe { &*info };
        if info.dlpi_phdr.is_null() {
            return 1;
        }
        // SAFETY: checked non-null above; the loader guarantees `dlpi_phnum`
        // headers at `dlpi_phdr`, alive for the callback's duration.
        let headers =
            unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) };
        let base = info.dlpi_addr as usize;
        for h in headers {
            let (Ok(vaddr), Ok(size)) = (usize::try_from(h.p_vaddr), usize::try_from(h.p_memsz))
            else {
                continue;
            };
            let start = base.wrapping_add(vaddr);
            let end = start.saturating_add(size);
            match h.p_type {
                libc::PT_LOAD => found.segments.push(Segment {
                    start,
                    end,
                    writable: h.p_flags & libc::PF_W != 0,
                }),
                libc::PT_GNU_RELRO => found.relro = Some((start, end)),
                _ => {}
            }
        }
        1
    }

    pub fn release() -> Released {
        let mut found = Found::default();
        // SAFETY: `each` only reads the headers the loader passes and
        // writes to `found`, which outlives the call.
        unsafe {
            libc::dl_iterate_phdr(Some(each), &mut found as *mut Found as *mut libc::c_void);
        }
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(0);
        let mut released = Released::default();
        for (a, b) in releasable(&found.segments, found.relro, page) {
            // SAFETY: the range is whole pages of the executable's own
            // read-only, file-backed mappings: after MADV_DONTNEED they read
            // back the same bytes from the file on the next access.
            let rc = unsafe { libc::madvise(a as *mut libc::c_void, b - a, libc::MADV_DONTNEED) };
            if rc == 0 {
                released.segments += 1;
                released.bytes = released.bytes.saturating_add(b - a);
            }
        }
        released
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    pub fn release() -> super::Released {
        super::Released::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: usize = 4096;

    fn seg(start: usize, end: usize, writable: bool) -> Segment {
        Segment {
            start,
            end,
            writable,
        }
    }

    #[test]
    fn read_only_segments_are_released_in_whole_pages() {
        let segs = [
            seg(0x1000, 0x5800, false),
            seg(0x5800, 0x9000, false),
            seg(0x9000, 0xa000, true),
        ];
        assert_eq!(
            releasable(&segs, None, P),
            vec![(0x1000, 0x5000), (0x6000, 0x9000)]
        );
    }

    #[test]
    fn pages_shared_with_writable_or_relro_bytes_are_kept() {
        // A read-only segment ending mid-page next to a writable one, and a
        // RELRO range inside a read-only-looking span.
        let segs = [seg(0x0, 0x8800, false), seg(0x8800, 0xc000, true)];
        assert_eq!(
            releasable(&segs, Some((0x2100, 0x3000)), P),
            vec![(0x0, 0x2000), (0x3000, 0x8000)]
        );
    }

    #[test]
    fn writable_segments_are_never_released() {
        let segs = [seg(0x0, 0x4000, true)];
        assert!(releasable(&segs, None, P).is_empty());
    }

    #[test]
    fn a_bad_page_size_releases_nothing() {
        let segs = [seg(0x0, 0x4000, false)];
        assert!(releasable(&segs, None, 0).is_empty());
        assert!(releasable(&segs, None, 3000).is_empty());
    }

    #[test]
    fn off_switch() {
        assert!(enabled(None));
        assert!(enabled(Some("on")));
        assert!(!enabled(Some("off")));
        assert!(!enabled(Some(" OFF ")));
        assert!(!enabled(Some("0")));
        assert!(!enabled(Some("false")));
    }

    /// Releasing this test binary's own code and read-only data, then
    /// running code and reading constants from it, works: the pages come
    /// back from the file with the same bytes.
    #[cfg(target_os = "linux")]
    #[test]
    fn released_pages_come_back_intact() {
        static TABLE: [u64; 4096] = {
            let mut t = [0u64; 4096];
            let mut i = 0;
            while i < t.len() {
                t[i] = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                i += 1;
            }
            t
        };
        let before: u64 = TABLE.iter().fold(0, |a, &x| a ^ x);
        let released = imp::release();
        assert!(released.segments >= 1, "{released:?}");
        assert!(released.bytes > 0, "{released:?}");
        let after: u64 = std::hint::black_box(&TABLE).iter().fold(0, |a, &x| a ^ x);
        assert_eq!(before, after);
    }
}
