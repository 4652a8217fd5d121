//! What the fuzz targets check beyond "no panic": the invariants of each
//! parser's output and the small, independent reference implementations
//! they are compared with. Kept out of the targets so the reference code
//! has unit tests of its own (`cargo test` in `fuzz/`).

pub mod admin;
pub mod config;
pub mod credentials;
pub mod deny;
pub mod frames;
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
