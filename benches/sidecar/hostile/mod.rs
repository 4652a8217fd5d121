//! Hostile load at full size (docs/sizing.md states the limits):
//! the figures behind the limits' claims, which `tests/e2e/hostile.rs` checks
//! at CI size.
//!
//! * `scale`: both sidecars started with a soft fd limit of 1024 (hard
//!   20,000) carry 4,000 concurrent connections, each with a round trip;
//!   RSS per idle connection; descriptors back to the baseline after.
//! * `flood`: 2,000 silent, garbage, or mixed sockets on the server route
//!   (one variant with `--max-connections 4`) while an established
//!   connection ping-pongs and a prober opens a new authenticated
//!   connection every 100 ms through the pair; both measured against a
//!   no-flood phase of the same run. Pending handshakes sampled from
//!   `/status`, overload refusals from `/metrics`, the server's RSS before,
//!   at the flood's peak, and after.
//! * `churn`: 3 rounds of 100,000 garbage handshakes, 16 at a time, on a
//!   server without `--admin`: RSS before and after each round (each
//!   handshake records a histogram sample, which only the exporter's
//!   upkeep frees).
//! * `preauth`: 1,000 peers each send most of a 64 KB ClientHello; then
//!   1,000 send just under the pre-authentication cap and stall (the most a
//!   peer can pin); RSS during and after, and how long it takes to come
//!   back.
//!
//! Only run when named: `BENCH_ONLY=hostile` (all four) or any of
//! `scale`, `flood`, `churn`, `preauth`. `BENCH_TRIM=off` starts the sidecars with
//! allocator trimming off (`MTLS_SIDECAR_MALLOC_TRIM=off`), to see what
//! glibc does alone.
//!
//! This file picks the scenarios, runs them and prints their figures; one
//! file per scenario (its load, figures and lines of output) above
//! `harness` (the pair, RSS and descriptors, the admin endpoint, many peers
//! at once), which they share.

mod churn;
mod flood;
mod harness;
mod preauth;
mod scale;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::options::Opts;
use churn::ChurnFigures;
use flood::FloodFigures;
use preauth::PreauthFigures;
use scale::ScaleFigures;

/// The scenario names this module answers to.
pub const NAMES: &[&str] = &["hostile", "scale", "flood", "churn", "preauth"];

/// Sizes of a run.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    pub scale_conns: usize,
    pub flood_sockets: usize,
    pub preauth_peers: usize,
    pub churn_handshakes: usize,
    /// Length of the no-flood phase and of the held flood.
    pub phase: Duration,
    /// (no flood, flood) rounds per flood variant.
    pub rounds: usize,
}

impl Sizes {
    pub fn new(quick: bool) -> Sizes {
        let env = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        if quick {
            Sizes {
                scale_conns: env("BENCH_SCALE_CONNS", 600),
                flood_sockets: env("BENCH_FLOOD_SOCKETS", 500),
                preauth_peers: env("BENCH_PREAUTH_PEERS", 300),
                churn_handshakes: env("BENCH_CHURN", 10_000),
                phase: Duration::from_secs(1),
                rounds: 1,
            }
        } else {
            Sizes {
                scale_conns: env("BENCH_SCALE_CONNS", 4_000),
                flood_sockets: env("BENCH_FLOOD_SOCKETS", 2_000),
                preauth_peers: env("BENCH_PREAUTH_PEERS", 1_000),
                churn_handshakes: env("BENCH_CHURN", 100_000),
                phase: Duration::from_secs(3),
                rounds: 5,
            }
        }
    }
}

/// True when the run names any hostile scenario (they are never part of a
/// default run: together they take a few minutes).
pub fn requested(opts: &Opts) -> bool {
    opts.only
        .as_ref()
        .is_some_and(|l| l.iter().any(|s| NAMES.contains(&s.as_str())))
}

fn named(opts: &Opts, name: &str) -> bool {
    opts.only
        .as_ref()
        .is_some_and(|l| l.iter().any(|s| s == name || s == "hostile"))
}

/// Everything a hostile run measured; one JSON line in an `--out` file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct HostileRow {
    pub hostile: bool,
    pub quick: bool,
    pub trim: bool,
    pub scale: Option<ScaleFigures>,
    pub flood: Vec<FloodFigures>,
    pub churn: Option<ChurnFigures>,
    pub preauth: Option<PreauthFigures>,
}

/// Runs the named hostile scenarios and prints their figures.
pub fn run(opts: &Opts) -> HostileRow {
    let sizes = Sizes::new(opts.quick);
    let trim = std::env::var("BENCH_TRIM").map_or(true, |v| v != "off" && v != "0");
    let mut row = HostileRow {
        hostile: true,
        quick: opts.quick,
        trim,
        ..HostileRow::default()
    };
    let env = if trim {
        Vec::new()
    } else {
        vec![("MTLS_SIDECAR_MALLOC_TRIM".to_string(), "off".to_string())]
    };
    eprintln!(
        "# hostile: {sizes:?}, allocator trimming {}",
        if trim { "on" } else { "off" }
    );
    if named(opts, "scale") {
        row.scale = Some(scale::scale(sizes.scale_conns, &env));
    }
    if named(opts, "flood") {
        row.flood = flood::variants(sizes.flood_sockets, (sizes.phase, sizes.rounds), &env);
    }
    if named(opts, "churn") {
        row.churn = Some(churn::churn(sizes.churn_handshakes, &env));
    }
    if named(opts, "preauth") {
        row.preauth = Some(preauth::preauth(sizes.preauth_peers, &env));
    }
    print(&row);
    row
}

fn print(row: &HostileRow) {
    println!(
        "\nhostile load ({}; allocator trimming {})",
        if row.quick {
            "quick sizes"
        } else {
            "full sizes"
        },
        if row.trim { "on" } else { "off" }
    );
    if let Some(s) = &row.scale {
        scale::print(s);
    }
    flood::print(&row.flood);
    if let Some(c) = &row.churn {
        churn::print(c);
    }
    if let Some(p) = &row.preauth {
        preauth::print(p);
    }
}
