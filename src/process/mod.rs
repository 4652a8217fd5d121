//! The process as the operating system sees it: what the sidecar asks of,
//! tells and reads from its own process rather than from a connection.
//! These are leaves (they import nothing above them) with one concern in
//! common, the process's footprint and its supervisor:
//!
//! - [`fdlimit`]: the file-descriptor budget, raised at start-up;
//! - [`memtrim`]: giving heap back to the kernel after a burst;
//! - [`resident`]: dropping start-up code from the resident set once serving;
//! - [`process_metrics`]: the standard `process_*` gauges from `/proc/self`;
//! - [`systemd`]: socket activation and the service watchdog;
//! - [`switch`]: the `MTLS_SIDECAR_*` off switches `memtrim` and `resident`
//!   read.

pub mod fdlimit;
pub mod memtrim;
pub mod process_metrics;
pub mod resident;
pub mod switch;
pub mod systemd;
