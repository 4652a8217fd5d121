//! Why a handshake failed or a connection closed, as the fixed label values
//! dashboards and alerts key on. Classification of TLS and I/O errors lives
//! here and nowhere else.

use std::io;

use rustls::{CertificateError, Error as TlsError};

/// The error a handshake's read returns once the peer has sent more than
/// [`crate::proxy::preauth`] allows before authenticating; classified as
/// a `protocol` failure. Defined here so classifying needs nothing above.
#[derive(Debug, thiserror::Error)]
#[error("the peer sent more than {limit} bytes before completing its handshake")]
pub struct HandshakeTooLarge {
    pub limit: usize,
}

/// The error the peer judgement raises when a deny-list entry matches the
/// peer's path (classified as `denied`, both as a handshake failure and as
/// a live connection's close). Defined here so classifying needs nothing
/// above; `entry` is the entry as written in a deny file.
#[derive(Debug, thiserror::Error)]
#[error("denied by deny entry {entry}")]
pub struct Denied {
    pub entry: String,
}

/// The deny-list entry a peer judgement's error names, when the peer was
/// denied.
pub fn denied_entry(err: &TlsError) -> Option<&str> {
    match err {
        TlsError::InvalidCertificate(CertificateError::Other(o)) => {
            o.0.downcast_ref::<Denied>().map(|d| d.entry.as_str())
        }
        _ => None,
    }
}

/// A handshake or peer-judgement error as a log line or a report shows it.
/// rustls displays a certificate error of its own kind by name (`Revoked`,
/// `UnknownIssuer`) but one raised outside it (a deny-list entry, a pin, a
/// path-building error it has no variant for) as a debug dump
/// (`Other(OtherError(Denied { .. }))`); this shows those by their own
/// message instead: `invalid peer certificate: denied by deny entry
/// san:a.svc`. Any other error displays as it always does.
#[derive(Debug, Clone, Copy)]
pub enum Plain<'a> {
    Tls(&'a TlsError),
    Io(&'a io::Error),
}

/// [`Plain`] of a rustls error.
pub fn plain_tls(err: &TlsError) -> Plain<'_> {
    Plain::Tls(err)
}

/// [`Plain`] of an I/O error (a handshake's, which may carry a rustls one).
pub fn plain_io(err: &io::Error) -> Plain<'_> {
    Plain::Io(err)
}

impl std::fmt::Display for Plain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tls = match self {
            Plain::Tls(t) => Some(*t),
            Plain::Io(e) => e.get_ref().and_then(|i| i.downcast_ref::<TlsError>()),
        };
        match tls {
            Some(TlsError::InvalidCertificate(CertificateError::Other(o))) => {
                write!(f, "invalid peer certificate: {}", o.0)
            }
            Some(t) => write!(f, "{t}"),
            None => match self {
                Plain::Io(e) => write!(f, "{e}"),
                Plain::Tls(t) => write!(f, "{t}"),
            },
        }
    }
}

/// True when a peer judgement's error is a chain breaking a CA's
/// constraint (webpki's error, carried as rustls's `Other`).
fn breaks_a_constraint(o: &rustls::OtherError) -> bool {
    use webpki::Error as E;
    matches!(
        o.0.downcast_ref::<webpki::Error>(),
        Some(
            E::NameConstraintViolation
                | E::MalformedNameConstraint
                | E::InvalidNetworkMaskConstraint
                | E::MaximumNameConstraintComparisonsExceeded
                | E::PathLenConstraintViolated
                | E::MaximumPathDepthExceeded
                | E::CaUsedAsEndEntity
                | E::EndEntityUsedAsCa
        )
    )
}

/// The `reason` label of `mtls_sidecar_tls_handshake_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// The client sent no certificate.
    NoClientCert,
    /// The peer's chain does not lead to a trusted CA (or a bad signature).
    UnknownCa,
    /// The peer's certificate is not for this role: no allowed SAN, or the
    /// wrong extended key usage.
    BadSan,
    /// The peer's chain breaks a constraint a CA of it sets: name
    /// constraints, a path length, a CA certificate used as the end entity
    /// or an end entity as a CA, or a path too deep.
    BadChain,
    /// The peer's certificate is expired or not yet valid.
    Expired,
    /// The peer did not speak TLS (a plaintext probe, garbage).
    NotTls,
    /// The handshake did not finish within `--handshake-timeout`.
    Timeout,
    /// Any other TLS failure: an alert, no common version or cipher.
    Protocol,
    /// The peer went away mid-handshake.
    Io,
    /// Closed to protect capacity: the oldest pending handshake when
    /// `--max-handshakes` is reached.
    Overload,
    /// The peer's certificate is revoked.
    Revoked,
    /// The peer's public key matches none of the pinned keys.
    PinMismatch,
    /// The peer's certificate's issuer has a CRL in force that does not
    /// cover it (Issuing Distribution Point scope): its status is unknown.
    RevokedStatusUnknown,
    /// A deny-list entry matches the peer's path or name.
    Denied,
}

impl FailureReason {
    /// Every value, for pre-registering metric series at zero.
    pub const ALL: [FailureReason; 14] = [
        FailureReason::NoClientCert,
        FailureReason::UnknownCa,
        FailureReason::BadSan,
        FailureReason::BadChain,
        FailureReason::Expired,
        FailureReason::NotTls,
        FailureReason::Timeout,
        FailureReason::Protocol,
        FailureReason::Io,
        FailureReason::Overload,
        FailureReason::Revoked,
        FailureReason::PinMismatch,
        FailureReason::RevokedStatusUnknown,
        FailureReason::Denied,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::NoClientCert => "no_client_cert",
            FailureReason::UnknownCa => "unknown_ca",
            FailureReason::BadSan => "bad_san",
            FailureReason::BadChain => "bad_chain",
            FailureReason::Expired => "expired",
            FailureReason::NotTls => "not_tls",
            FailureReason::Timeout => "timeout",
            FailureReason::Protocol => "protocol",
            FailureReason::Io => "io",
            FailureReason::Overload => "overload",
            FailureReason::Revoked => "revoked",
            FailureReason::PinMismatch => "pin_mismatch",
            FailureReason::RevokedStatusUnknown => "revoked_status_unknown",
            FailureReason::Denied => "denied",
        }
    }

    /// Classifies a handshake error as the TLS driver returns it
    /// ([`crate::tls::stream`]; the shapes tokio-rustls used).
    pub fn from_io(err: &io::Error) -> FailureReason {
        if let Some(inner) = err.get_ref() {
            if let Some(tls) = inner.downcast_ref::<TlsError>() {
                return FailureReason::from_tls(tls);
            }
            if inner.is::<HandshakeTooLarge>() {
                return FailureReason::Protocol;
            }
        }
        match err.kind() {
            io::ErrorKind::TimedOut => FailureReason::Timeout,
            io::ErrorKind::InvalidData => FailureReason::NotTls,
            _ => FailureReason::Io,
        }
    }

    /// Classifies a rustls error.
    pub fn from_tls(err: &TlsError) -> FailureReason {
        match err {
            TlsError::NoCertificatesPresented => FailureReason::NoClientCert,
            TlsError::InvalidCertificate(c) => match c {
                CertificateError::UnknownIssuer
                | CertificateError::BadSignature
                | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
                | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
                    FailureReason::UnknownCa
                }
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. } => FailureReason::Expired,
                CertificateError::Revoked => FailureReason::Revoked,
                CertificateError::UnknownRevocationStatus => FailureReason::RevokedStatusUnknown,
                CertificateError::Other(o) if o.0.is::<crate::identity::pin::PinMismatch>() => {
                    FailureReason::PinMismatch
                }
                CertificateError::Other(o) if o.0.is::<Denied>() => FailureReason::Denied,
                CertificateError::Other(o) if breaks_a_constraint(o) => FailureReason::BadChain,
                CertificateError::NotValidForName
                | CertificateError::NotValidForNameContext { .. }
                | CertificateError::InvalidPurpose
                | CertificateError::InvalidPurposeContext { .. } => FailureReason::BadSan,
                _ => FailureReason::Protocol,
            },
            TlsError::InvalidMessage(_) => FailureReason::NotTls,
            _ => FailureReason::Protocol,
        }
    }
}

/// The `reason` label of `mtls_sidecar_connections_closed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// Both directions ended with EOF.
    Completed,
    /// The mTLS/plaintext peer side failed (reset, broken pipe).
    PeerError,
    /// The target could not be reached or failed mid-stream.
    TargetError,
    /// Half-closed and quiet for longer than the linger.
    Linger,
    /// Replaced by an authenticated newcomer (`--exclusive`).
    Displaced,
    /// The trust that authenticated the peer was removed.
    Revoked,
    /// The peer's certificate expired.
    Expired,
    /// Older than `--max-connection-lifetime`.
    Lifetime,
    /// Still open when the drain timeout ran out at shutdown.
    Drain,
    /// Authenticated but closed while waiting for a `--max-connections`
    /// slot, to keep that queue within `--max-handshakes`.
    Overload,
    /// Transparent routes: the original destination matches no rule, or
    /// the connection was not redirected; never forwarded.
    NoDestination,
    /// A deny-list entry now matches the peer.
    Denied,
    /// HTTP routes: no complete request head within
    /// `--http-header-timeout` (none yet, or none after the last answer;
    /// on h2 also one header block taking that long), or an HTTP/1.1
    /// request body waited on for `--http-body-timeout`.
    HttpTimeout,
}

impl CloseReason {
    /// Why a live connection whose peer no longer passes the peer
    /// judgement is closed: `denied` when a deny-list entry matches it,
    /// else `revoked` (its trust went away or a CRL revoked it).
    pub fn of_lost_trust(err: &TlsError) -> CloseReason {
        match denied_entry(err) {
            Some(_) => CloseReason::Denied,
            None => CloseReason::Revoked,
        }
    }

    /// Every value, for pre-registering metric series at zero.
    pub const ALL: [CloseReason; 13] = [
        CloseReason::Completed,
        CloseReason::PeerError,
        CloseReason::TargetError,
        CloseReason::Linger,
        CloseReason::Displaced,
        CloseReason::Revoked,
        CloseReason::Expired,
        CloseReason::Lifetime,
        CloseReason::Drain,
        CloseReason::NoDestination,
        CloseReason::Overload,
        CloseReason::Denied,
        CloseReason::HttpTimeout,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseReason::Completed => "completed",
            CloseReason::PeerError => "peer_error",
            CloseReason::TargetError => "target_error",
            CloseReason::Linger => "linger",
            CloseReason::Displaced => "displaced",
            CloseReason::Revoked => "revoked",
            CloseReason::Expired => "expired",
            CloseReason::Lifetime => "lifetime",
            CloseReason::Drain => "drain",
            CloseReason::NoDestination => "no_destination",
            CloseReason::Overload => "overload",
            CloseReason::Denied => "denied",
            CloseReason::HttpTimeout => "http_timeout",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription, InvalidMessage, PeerIncompatible};

    fn wrapped(e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }

    #[test]
    fn tls_errors_map_to_reasons() {
        use FailureReason::*;
        let cases = [
            (TlsError::NoCertificatesPresented, NoClientCert),
            (
                TlsError::InvalidCertificate(CertificateError::UnknownIssuer),
                UnknownCa,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::BadSignature),
                UnknownCa,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::Expired),
                Expired,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::NotValidYet),
                Expired,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::NotValidForName),
                BadSan,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::InvalidPurpose),
                BadSan,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                    std::sync::Arc::new(webpki::Error::NameConstraintViolation),
                ))),
                BadChain,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                    std::sync::Arc::new(webpki::Error::PathLenConstraintViolated),
                ))),
                BadChain,
            ),
            (
                TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(
                    std::sync::Arc::new(webpki::Error::UnsupportedCertVersion),
                ))),
                Protocol,
            ),
            (
                TlsError::InvalidMessage(InvalidMessage::InvalidContentType),
                NotTls,
            ),
            (
                TlsError::AlertReceived(AlertDescription::HandshakeFailure),
                Protocol,
            ),
            (
                TlsError::PeerIncompatible(PeerIncompatible::Tls13RequiredForQuic),
                Protocol,
            ),
        ];
        for (err, want) in cases {
            assert_eq!(
                FailureReason::from_io(&wrapped(err.clone())),
                want,
                "{err:?}"
            );
            assert_eq!(FailureReason::from_tls(&err), want);
        }
    }

    #[test]
    fn a_denied_peer_has_its_own_reasons_and_names_the_entry() {
        let denied = TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(
            std::sync::Arc::new(Denied {
                entry: "san:a.svc".into(),
            }),
        )));
        assert_eq!(FailureReason::from_tls(&denied), FailureReason::Denied);
        assert_eq!(denied_entry(&denied), Some("san:a.svc"));
        assert_eq!(CloseReason::of_lost_trust(&denied), CloseReason::Denied);
        let revoked = TlsError::InvalidCertificate(CertificateError::Revoked);
        assert_eq!(denied_entry(&revoked), None);
        assert_eq!(CloseReason::of_lost_trust(&revoked), CloseReason::Revoked);
        assert_eq!(CloseReason::Denied.as_str(), "denied");
    }

    #[test]
    fn errors_of_our_own_read_plainly() {
        let denied = TlsError::InvalidCertificate(CertificateError::Other(rustls::OtherError(
            std::sync::Arc::new(Denied {
                entry: "san:a.svc".into(),
            }),
        )));
        let want = "invalid peer certificate: denied by deny entry san:a.svc";
        assert_eq!(plain_tls(&denied).to_string(), want);
        assert_eq!(plain_io(&wrapped(denied)).to_string(), want);
        let pin = crate::identity::pin::check(&[[0; 32]], b"not a certificate").unwrap_err();
        assert_eq!(
            plain_tls(&pin).to_string(),
            "invalid peer certificate: the peer's public key (SPKI sha256 unparseable) matches no pinned key"
        );
        let revoked = TlsError::InvalidCertificate(CertificateError::Revoked);
        assert_eq!(plain_tls(&revoked).to_string(), revoked.to_string());
        let eof = io::Error::new(io::ErrorKind::UnexpectedEof, "early eof");
        assert_eq!(plain_io(&eof).to_string(), "early eof");
    }

    #[test]
    fn io_errors_map_to_reasons() {
        let e = |k| io::Error::new(k, "x");
        assert_eq!(
            FailureReason::from_io(&e(io::ErrorKind::UnexpectedEof)),
            FailureReason::Io
        );
        assert_eq!(
            FailureReason::from_io(&e(io::ErrorKind::ConnectionReset)),
            FailureReason::Io
        );
        assert_eq!(
            FailureReason::from_io(&e(io::ErrorKind::TimedOut)),
            FailureReason::Timeout
        );
    }

    #[test]
    fn label_values_are_the_contract() {
        let all: Vec<_> = FailureReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(
            all,
            [
                "no_client_cert",
                "unknown_ca",
                "bad_san",
                "bad_chain",
                "expired",
                "not_tls",
                "timeout",
                "protocol",
                "io",
                "overload",
                "revoked",
                "pin_mismatch",
                "revoked_status_unknown",
                "denied"
            ]
        );
    }
}
