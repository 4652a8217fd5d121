//! The figures of one run, as saved in `--out` files and read by `--table`.

use serde::{Deserialize, Serialize};

/// A figure through the system under test and the same figure direct.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Fig {
    pub sys: f64,
    pub direct: f64,
}

/// One system's results; one JSON line in an `--out` file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Row {
    pub system: String,
    pub quick: bool,
    /// Bulk one way, MB/s (10^6 bytes).
    pub bulk: Option<Fig>,
    /// Echo both ways: payload MB/s in each direction at once.
    pub echo: Option<Fig>,
    /// 64-byte ping-pong latency on one connection, µs.
    pub p50: Option<Fig>,
    pub p99: Option<Fig>,
    pub p999: Option<Fig>,
    /// 64-byte round trips/s over 16 connections.
    pub rt16: Option<Fig>,
    /// New connections/s, each with a full handshake and one round trip.
    pub newconn: Option<Fig>,
    /// The same through the system with session resumption on (the
    /// sidecar's `--resumption`; a peer's own), each connection after the
    /// first resuming.
    pub newconn_resumed: Option<Fig>,
    /// KiB of RSS (all proxy processes) per idle connection.
    pub idle_kib: Option<f64>,
    /// MB of RSS of all proxy processes after a few connections.
    pub baseline_mb: Option<f64>,
    /// CPU time of every process of the system (both proxies and their
    /// children) per unit of work, in the round whose figure was kept.
    #[serde(default)]
    pub cpu: Cpu,
    pub rotations: Option<u64>,
    pub rotation_requests: Option<u64>,
    pub rotation_failed: Option<u64>,
}

/// CPU cost per unit of work through the system (none: not measured, e.g.
/// no pids were given).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub struct Cpu {
    /// CPU seconds per GiB sent one way.
    pub bulk_s_per_gib: Option<f64>,
    /// CPU seconds per GiB of payload echoed (counted once, not per way).
    pub echo_s_per_gib: Option<f64>,
    /// CPU µs per 64-byte round trip over 16 connections.
    pub rt16_us: Option<f64>,
    /// CPU µs per new connection (full handshake + one round trip).
    pub newconn_us: Option<f64>,
    /// CPU µs per new connection through the resuming pair (its pids).
    #[serde(default)]
    pub resumed_us: Option<f64>,
}
