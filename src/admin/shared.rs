//! What a running process exposes to observers: its routes, its credential
//! stores, whether it is draining, and the metrics handle. The app builds it;
//! the admin endpoint and the status documents only read it, so neither
//! depends on the app that runs them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::credentials::CredentialStore;
use crate::proxy::exposure::TargetExposure;
use crate::proxy::route::Route;

/// The observable state of a running sidecar.
#[derive(Debug)]
pub struct Shared {
    pub routes: Vec<Arc<Route>>,
    pub stores: Vec<Arc<CredentialStore>>,
    /// True from the first shutdown signal on: `/readyz` answers 503.
    pub draining: AtomicBool,
    pub metrics: PrometheusHandle,
    /// Whether the applications behind server routes listen outside loopback.
    pub exposure: Arc<TargetExposure>,
}

impl Shared {
    /// True while draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}
