//! What one route was configured with, validated: the proxy's own settings.
//! [`crate::config`] builds them from flags and files; the data path only
//! reads them, so it needs nothing from the layers that parse.

use std::time::Duration;

use serde::Deserialize;

use super::addr::Addr;
use crate::credentials::CredentialSource;
use crate::identity::SanPolicy;
use crate::tls::TlsVersion;

/// Which side of the mutual TLS a route plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Terminates mTLS and forwards plaintext to a local target.
    Server,
    /// Accepts plaintext locally and originates mTLS to a remote sidecar.
    Client,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Server => "server",
            Mode::Client => "client",
        }
    }
}

/// Everything one route needs, validated.
#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub name: String,
    pub mode: Mode,
    pub listen: Addr,
    pub target: Addr,
    /// Server: which client identities are allowed. Client: which server
    /// identities are expected.
    pub peer_sans: SanPolicy,
    /// Client only: the SNI sent to the remote sidecar.
    pub server_name: Option<String>,
    /// Server only: one forwarded connection at a time.
    pub exclusive: bool,
    pub handshake_timeout: Duration,
    pub connect_timeout: Duration,
    /// Authenticated, forwarded connections at once; more wait for a slot.
    pub max_connections: usize,
    /// Unauthenticated handshakes in flight; when full the oldest is closed.
    pub max_handshakes: usize,
    pub max_connection_lifetime: Option<Duration>,
    pub tls_min_version: TlsVersion,
    /// How long a half-closed connection may stay quiet before it is reaped.
    pub half_close_linger: Duration,
    /// ALPN protocols: a server accepts only these (a peer offering none is
    /// still accepted); a client offers them.
    pub alpn: Vec<Vec<u8>>,
    /// SHA-256 pins of the peer's SubjectPublicKeyInfo, checked in addition
    /// to the chain and the SAN; empty: no pinning.
    pub spki_pins: Vec<[u8; 32]>,
    /// Server only: write a PROXY protocol v2 header to the target first.
    pub proxy_protocol: bool,
    /// The credentials this route uses; routes naming the same source share
    /// one store.
    pub credentials: CredentialSource,
    /// Client only: a transparent route's destination rules (it has no
    /// target of its own; `target` then only labels it).
    pub transparent: Option<std::sync::Arc<super::transparent::Destinations>>,
    /// `SO_MARK` on every outbound socket of the route (`--mark`).
    pub mark: Option<u32>,
    /// TLS 1.3 session resumption (`--resumption`, config `resumption`).
    pub resumption: bool,
    /// A transparent route diverted by TPROXY (`--tproxy`): the listener
    /// has `IP_TRANSPARENT` and each connection's local address is its
    /// original destination.
    pub tproxy: bool,
    /// `--access-log`: one INFO line per authenticated connection at close.
    pub access_log: bool,
}
