//! The data path: a route accepts ([`addr`]), bounds what an unauthenticated
//! peer may hold ([`pending`], [`preauth`]), hands the handshake to [`crate::tls`],
//! admits the authenticated peer into the registry of live connections
//! ([`conn`]), and copies bytes both ways ([`forward`]), optionally after a
//! PROXY protocol header ([`proxy_protocol`]) or to the original destination of
//! a diverted connection ([`transparent`]); or, for an HTTP target, carries
//! requests with the peer's identity in a header instead ([`http`]). Everything here reads the
//! credentials and settings below it; nothing below imports from it.

pub(crate) mod addr;
pub(crate) mod conn;
pub mod forward;
pub mod http;
pub(crate) mod mark;
pub(crate) mod pending;
pub mod preauth;
pub mod proxy_protocol;
pub(crate) mod route;
pub mod settings;
pub mod transparent;
