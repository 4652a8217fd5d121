//! What a running process exposes to observers: its routes, its credential
//! stores, whether it is draining, and the metrics handle. The app builds it;
//! the admin endpoint and the status documents only read it, so neither
//! depends on the app that runs them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;

use crate::credentials::CredentialStore;
use crate::proxy::route::Route;
use crate::target_exposure::TargetExposure;

/// Whether `/connections` is served. Peer identities are sensitive, and
/// the shipped manifests bind the admin port on `0.0.0.0` for scraping:
/// only a listener nobody else can reach (loopback, a Unix socket) serves
/// them unless the operator says `--admin-connections on`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionsAccess {
    /// Served: the admin listener is local-only.
    Local,
    /// Served: `--admin-connections on`.
    Enabled,
    /// Refused with 403.
    Refused,
}

impl ConnectionsAccess {
    /// The access for an admin listener bound at `bound`.
    pub fn decide(bound: Option<crate::proxy::addr::Addr>, enabled: bool) -> Self {
        if enabled {
            ConnectionsAccess::Enabled
        } else if bound.is_some_and(|a| a.is_local_only()) {
            ConnectionsAccess::Local
        } else {
            ConnectionsAccess::Refused
        }
    }

    /// True when `/connections` is served.
    pub fn served(self) -> bool {
        self != ConnectionsAccess::Refused
    }
}

/// The observable state of a running sidecar.
#[derive(Debug)]
pub struct Shared {
    /// Whether `/connections` is served.
    pub connections: ConnectionsAccess,
    pub routes: Vec<Arc<Route>>,
    pub stores: Vec<Arc<CredentialStore>>,
    /// True from the first shutdown signal on: `/readyz` answers 503.
    pub draining: AtomicBool,
    pub metrics: PrometheusHandle,
    /// Whether the applications behind server routes listen outside loopback.
    pub exposure: Arc<TargetExposure>,
    /// What `/app-probe/NAME` performs.
    pub app_probes: crate::admin::app_probe::AppProbes,
    /// True for a process that serves no routes by design (the admission
    /// webhook): `/readyz` then does not wait for one.
    pub routeless: bool,
}

impl Shared {
    /// True while draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::ConnectionsAccess as A;
    use crate::proxy::addr::Addr;

    fn decide(addr: &str, enabled: bool) -> A {
        A::decide(Some(addr.parse::<Addr>().expect("address")), enabled)
    }

    #[test]
    fn only_a_local_listener_serves_connections_unless_enabled() {
        assert_eq!(decide("127.0.0.1:9901", false), A::Local);
        assert_eq!(decide("[::1]:9901", false), A::Local);
        assert_eq!(decide("unix:/run/admin.sock", false), A::Local);
        assert_eq!(decide("0.0.0.0:9901", false), A::Refused);
        assert_eq!(decide("[::]:9901", false), A::Refused);
        assert_eq!(decide("10.0.0.5:9901", false), A::Refused);
        assert_eq!(decide("0.0.0.0:9901", true), A::Enabled);
        assert_eq!(A::decide(None, false), A::Refused);
        assert!(A::Local.served() && A::Enabled.served() && !A::Refused.served());
    }
}
