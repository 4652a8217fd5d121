//! Giving memory back after a burst. A flood of handshakes makes the
//! allocator grow its heaps (one arena per worker thread in glibc); when the
//! handshakes end the memory is free but glibc keeps it mapped, so the
//! process's RSS stays at its flood peak for good, which is what a pod's
//! memory limit counts. After a burst, once the load has fallen to half its
//! peak or less, the sidecar asks the allocator to return free pages to the
//! kernel (`malloc_trim`). It never trims under steady load, so a busy
//! sidecar does not keep faulting memory back in. The peak is a high-water
//! mark kept as handshakes start ([`Live`]), not a sample: a burst that
//! comes and goes between two looks (a flood of 400 sockets took less than
//! a second) grows the heap all the same.
//!
//! `MTLS_SIDECAR_MALLOC_TRIM=off` turns trimming off, to see what the
//! allocator does alone (the hostile-load benches compare both).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Handshakes and connections ended since the last trim.
static ENDED: AtomicU64 = AtomicU64::new(0);
/// Handshakes and connections in flight.
static LIVE: AtomicU64 = AtomicU64::new(0);
/// The most in flight at once since the last look.
static HIGH: AtomicU64 = AtomicU64::new(0);

/// How often the load is looked at.
const PERIOD: Duration = Duration::from_secs(1);
/// Endings since the last trim that make a trim worth its cost.
const BURST: u64 = 128;
/// A peak below this cannot have grown the heap by much.
const PEAK: usize = 64;
/// Trims are at least this far apart.
const GAP: Duration = Duration::from_secs(5);

/// One handshake (and the connection it becomes) in flight, from accept
/// until dropped.
#[derive(Debug)]
pub struct Live(());

impl Live {
    /// Counts one more in flight, raising the high-water mark.
    pub fn start() -> Live {
        let n = LIVE.fetch_add(1, Ordering::Relaxed).saturating_add(1);
        HIGH.fetch_max(n, Ordering::Relaxed);
        Live(())
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        ENDED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The most in flight at once since the last call (then restarted from
/// what is in flight now).
fn take_high() -> usize {
    let high = HIGH.swap(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    usize::try_from(high).unwrap_or(usize::MAX)
}

/// Watches `load` (handshakes plus connections in flight) and trims the
/// allocator after a burst. Runs until dropped.
pub async fn run(load: impl Fn() -> usize) {
    if !enabled(std::env::var("MTLS_SIDECAR_MALLOC_TRIM").ok().as_deref()) {
        return;
    }
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut peak = 0usize;
    let mut last = tokio::time::Instant::now();
    loop {
        tick.tick().await;
        let now = load();
        peak = peak.max(now).max(take_high());
        let ended = ENDED.load(Ordering::Relaxed);
        if last.elapsed() >= GAP && should_trim(ended, now, peak) {
            tracing::debug!(
                ended,
                peak,
                load = now,
                "a burst ended: returning free heap pages to the kernel"
            );
            ENDED.store(0, Ordering::Relaxed);
            peak = now;
            take_high();
            last = tokio::time::Instant::now();
            tokio::task::spawn_blocking(trim);
        }
    }
}

/// Trimming is on unless the switch says it is off (see [`super::switch`]).
fn enabled(switch: Option<&str>) -> bool {
    !super::switch::is_off(switch)
}

/// A burst has ended: many endings, a high peak, and the load is down to
/// half of it.
fn should_trim(ended: u64, now: usize, peak: usize) -> bool {
    ended >= BURST && peak >= PEAK && now.saturating_mul(2) <= peak
}

/// Returns free heap pages to the kernel.
pub fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks the allocator's own free lists; it
    // takes no pointer and is safe to call from any thread at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_only_after_a_burst_has_ended() {
        assert!(!should_trim(BURST - 1, 0, 1000), "too few endings");
        assert!(!should_trim(BURST, 600, 1000), "load still high");
        assert!(should_trim(BURST, 500, 1000));
        assert!(should_trim(BURST, 0, PEAK));
        assert!(!should_trim(BURST, 0, PEAK - 1), "a small peak");
    }

    #[test]
    fn the_high_water_mark_sees_a_burst_between_two_looks() {
        take_high();
        let burst: Vec<Live> = (0..100).map(|_| Live::start()).collect();
        drop(burst);
        // Other tests of this binary may hold a few at the same time.
        assert!(take_high() >= 100);
        assert!(take_high() < 100, "restarted from what is in flight now");
    }

    #[test]
    fn the_switch_turns_trimming_off_only_when_it_says_so() {
        assert!(enabled(None));
        assert!(enabled(Some("on")));
        assert!(!enabled(Some("off")));
        assert!(!enabled(Some("0")));
        // The same words as MTLS_SIDECAR_RELEASE_STARTUP's.
        assert!(!enabled(Some("false")));
        assert!(!enabled(Some(" OFF ")));
    }
}
