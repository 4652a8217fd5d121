//! The deny-list: an incident responder's way to refuse a key, a
//! certificate or a name at once, without the CA key a CRL needs. The
//! optional `deny` file of a revision (or `--deny-file`) holds one entry a
//! line:
//!
//! - `spki-sha256:<base64>`: the SHA-256 of a DER SubjectPublicKeyInfo;
//!   matches the peer's leaf or ANY certificate of its verified path (the
//!   intermediates it sent and the anchor it chains to), since a leaked
//!   intermediate key is the common incident;
//! - `serial:<issuer spki-sha256 base64>:<hex serial>`: a certificate of
//!   the path below the anchor, by serial AND its issuer's key (names
//!   collide, keys do not);
//! - `san:<pattern>`: the leaf's SANs, read and matched exactly as
//!   `--allow-san` reads and matches them ([`SanPattern`]): a DNS name
//!   (ASCII case-insensitive), `*.suffix`, a URI (scheme and authority
//!   case-insensitive, the path exact) with `*` segments and a final
//!   `/**`. One normalisation ([`crate::identity::normal_dns`],
//!   [`crate::identity::normal_uri`]) serves both lists, so no spelling
//!   of an identity is admitted by one and missed by the other.
//!
//! The list belongs to the trust ([`crate::credentials::Trust`]): the one
//! peer judgement ([`Trust::verify_peer`](crate::credentials::Trust::verify_peer))
//! looks it up on the path webpki built, so handshakes, live
//! re-verification, `check` and `/status` all decide "denied" through the
//! same code. `parse` reads the file (bounded), `path` turns a built path
//! into the facts an entry is matched against.

mod parse;
mod path;

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;

use crate::identity::{normal_dns, normal_uri, SanNames, SanPattern};

pub use parse::{
    parse_deny, parse_entry, DenyError, MAX_DENY_BYTES, MAX_DENY_ENTRIES, MAX_DENY_LINE,
    MAX_SERIAL_OCTETS,
};
pub(crate) use path::path_facts;

/// One deny-list entry, normalised (a DNS name lowercased, a URI's scheme
/// and authority lowercased, a serial without leading zero octets).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DenyEntry {
    /// The SHA-256 of a certificate's DER SubjectPublicKeyInfo.
    Spki([u8; 32]),
    /// A serial number under the issuer key with this SPKI SHA-256.
    Serial { issuer: [u8; 32], serial: Vec<u8> },
    /// A DNS SAN, in its normal form (lowercase).
    Dns(String),
    /// A URI SAN, in its normal form ([`normal_uri`]).
    Uri(String),
    /// A SAN pattern with a wildcard (`*.suffix`, a URI's `*` or `/**`).
    Pattern(SanPattern),
}

impl fmt::Display for DenyEntry {
    /// The entry as a deny file line (canonical spelling).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use crate::identity::pin::encode;
        match self {
            DenyEntry::Spki(k) => write!(f, "spki-sha256:{}", encode(k)),
            DenyEntry::Serial { issuer, serial } => {
                write!(f, "serial:{}:{}", encode(issuer), hex_serial(serial))
            }
            DenyEntry::Dns(n) | DenyEntry::Uri(n) => write!(f, "san:{n}"),
            DenyEntry::Pattern(p) => write!(f, "san:{p}"),
        }
    }
}

/// A serial's octets as lowercase hex without leading zeros (`0` for
/// zero).
pub fn hex_serial(serial: &[u8]) -> String {
    let hex: String = serial.iter().map(|b| format!("{b:02x}")).collect();
    match hex.trim_start_matches('0') {
        "" => "0".to_string(),
        s => s.to_string(),
    }
}

/// How many entries of each kind a list holds (`/status`, the metric,
/// `check`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DenyCounts {
    pub spki: usize,
    pub serial: usize,
    pub san: usize,
}

impl DenyCounts {
    /// Every entry.
    pub fn total(&self) -> usize {
        self.spki + self.serial + self.san
    }
}

/// One certificate of a peer's path, as entries see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFacts {
    /// SHA-256 of its DER SubjectPublicKeyInfo.
    pub spki: [u8; 32],
    /// Its serial without leading zero octets; `None` for a trust anchor
    /// (matched by key only).
    pub serial: Option<Vec<u8>>,
    /// Its issuer's SPKI SHA-256, when the path shows the issuer.
    pub issuer_spki: Option<[u8; 32]>,
}

/// What the deny-list is matched against: every certificate of the path,
/// leaf first (the anchor last when known), and the leaf's SANs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerFacts {
    pub certs: Vec<CertFacts>,
    /// DNS SANs of the leaf (any case: compared in their normal form).
    pub dns: Vec<String>,
    /// URI SANs of the leaf (compared in their normal form).
    pub uris: Vec<String>,
    /// The leaf's SANs were asked for but could not be read (a leaf webpki
    /// accepted that the X.509 parser refuses): a list naming a SAN then
    /// denies the peer, since it cannot tell whether one matches.
    pub sans_unreadable: bool,
}

impl PeerFacts {
    /// The facts of a path that ends at this anchor and shows nothing
    /// else: the anchor's key alone, matched as a handshake matches an
    /// anchor (by key, never by serial or SAN). `check`'s question "is
    /// every peer chaining to it denied?". `None` when the certificate's
    /// key does not parse.
    pub fn of_anchor(anchor: &rustls_pki_types::CertificateDer<'_>) -> Option<PeerFacts> {
        let spki = crate::identity::pin::spki_sha256(anchor.as_ref())?;
        Some(PeerFacts {
            certs: vec![CertFacts {
                spki,
                serial: None,
                issuer_spki: None,
            }],
            ..PeerFacts::default()
        })
    }
}

/// A parsed deny file: its entries in file order, and an index for the
/// per-handshake lookup (a hash probe per fact, whatever the list's size).
#[derive(Debug, Clone, Default)]
pub struct DenyList {
    entries: Vec<DenyEntry>,
    /// Each distinct entry's first line in `entries`.
    index: HashMap<DenyEntry, usize>,
    /// The wildcard entries with their line in `entries`, matched one by
    /// one (an exact entry is a hash probe).
    patterns: Vec<(usize, SanPattern)>,
}

impl PartialEq for DenyList {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl DenyList {
    /// A list of these entries.
    pub fn new(entries: Vec<DenyEntry>) -> DenyList {
        let mut index = HashMap::with_capacity(entries.len());
        let mut patterns = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            if let DenyEntry::Pattern(p) = e {
                patterns.push((i, p.clone()));
            }
            index.entry(e.clone()).or_insert(i);
        }
        DenyList {
            entries,
            index,
            patterns,
        }
    }

    /// No entry: nothing is denied.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in file order.
    pub fn entries(&self) -> &[DenyEntry] {
        &self.entries
    }

    /// True when the list holds this entry.
    pub fn contains(&self, entry: &DenyEntry) -> bool {
        self.index.contains_key(entry)
    }

    /// Entries by kind.
    pub fn counts(&self) -> DenyCounts {
        let mut c = DenyCounts::default();
        for e in &self.entries {
            match e {
                DenyEntry::Spki(_) => c.spki += 1,
                DenyEntry::Serial { .. } => c.serial += 1,
                DenyEntry::Dns(_) | DenyEntry::Uri(_) | DenyEntry::Pattern(_) => c.san += 1,
            }
        }
        c
    }

    /// True when an entry names a SAN (only then are the leaf's SANs
    /// read at a handshake).
    pub(crate) fn has_sans(&self) -> bool {
        self.first_san_entry().is_some()
    }

    /// THE deny decision: the first entry (in file order) that denies a
    /// peer with these facts, or `None`. `conns`, `check` and the
    /// handshake ask this.
    pub fn first_match(&self, peer: &PeerFacts) -> Option<&DenyEntry> {
        if self.is_empty() {
            return None;
        }
        if peer.sans_unreadable {
            if let Some(e) = self.first_san_entry() {
                return Some(e);
            }
        }
        let mut best: Option<usize> = None;
        let mut probe = |key: DenyEntry| {
            if let Some(&i) = self.index.get(&key) {
                best = Some(best.map_or(i, |b| b.min(i)));
            }
        };
        for cert in &peer.certs {
            probe(DenyEntry::Spki(cert.spki));
            if let (Some(serial), Some(issuer)) = (&cert.serial, cert.issuer_spki) {
                probe(DenyEntry::Serial {
                    issuer,
                    serial: serial.clone(),
                });
            }
        }
        for name in &peer.dns {
            probe(DenyEntry::Dns(normal_dns(name)));
        }
        for uri in &peer.uris {
            probe(DenyEntry::Uri(normal_uri(uri)));
        }
        if let Some(i) = self.first_pattern(peer) {
            best = Some(best.map_or(i, |b| b.min(i)));
        }
        best.and_then(|i| self.entries.get(i))
    }

    /// The first entry (in file order) that names a SAN: what denies a peer
    /// whose SANs cannot be read (fail closed).
    fn first_san_entry(&self) -> Option<&DenyEntry> {
        self.entries.iter().find(|e| {
            matches!(
                e,
                DenyEntry::Dns(_) | DenyEntry::Uri(_) | DenyEntry::Pattern(_)
            )
        })
    }

    /// The line of the first wildcard entry one of the peer's SANs
    /// matches, as `--allow-san` matches it.
    fn first_pattern(&self, peer: &PeerFacts) -> Option<usize> {
        if self.patterns.is_empty() {
            return None;
        }
        let dns: Vec<String> = peer.dns.iter().map(|d| normal_dns(d)).collect();
        let names = SanNames::new(&dns, &peer.uris);
        self.patterns
            .iter()
            .find(|(_, p)| p.matches_names(&names))
            .map(|(i, _)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cert(spki: u8, serial: &[u8], issuer: Option<u8>) -> CertFacts {
        CertFacts {
            spki: [spki; 32],
            serial: Some(serial.to_vec()),
            issuer_spki: issuer.map(|i| [i; 32]),
        }
    }

    fn list(entries: &[DenyEntry]) -> DenyList {
        DenyList::new(entries.to_vec())
    }

    #[test]
    fn a_key_anywhere_in_the_path_is_denied() {
        let peer = PeerFacts {
            certs: vec![
                cert(1, &[5], Some(2)),
                cert(2, &[6], Some(3)),
                CertFacts {
                    spki: [3; 32],
                    serial: None,
                    issuer_spki: None,
                },
            ],
            ..Default::default()
        };
        for k in 1..=3 {
            let l = list(&[DenyEntry::Spki([9; 32]), DenyEntry::Spki([k; 32])]);
            assert_eq!(l.first_match(&peer), Some(&DenyEntry::Spki([k; 32])));
        }
        assert_eq!(list(&[DenyEntry::Spki([4; 32])]).first_match(&peer), None);
        assert_eq!(DenyList::default().first_match(&peer), None);
    }

    #[test]
    fn a_serial_needs_its_issuers_key() {
        let peer = PeerFacts {
            certs: vec![cert(1, &[0x0a, 0xbc], Some(2))],
            ..Default::default()
        };
        let hit = DenyEntry::Serial {
            issuer: [2; 32],
            serial: vec![0x0a, 0xbc],
        };
        let other_issuer = DenyEntry::Serial {
            issuer: [7; 32],
            serial: vec![0x0a, 0xbc],
        };
        assert_eq!(
            list(std::slice::from_ref(&hit)).first_match(&peer),
            Some(&hit)
        );
        assert_eq!(list(&[other_issuer]).first_match(&peer), None);
    }

    /// One normalisation with `--allow-san`: DNS names ignore case, a
    /// URI's scheme and authority ignore case, its path does not.
    #[test]
    fn names_compare_as_allow_san_compares_them() {
        let peer = PeerFacts {
            dns: vec!["Controller.Svc".into()],
            uris: vec!["SPIFFE://TD/ns/a".into()],
            ..Default::default()
        };
        for hit in [
            "san:CONTROLLER.svc",
            "san:spiffe://td/ns/a",
            "san:spiffe://TD/ns/a",
            "san:Spiffe://td/ns/a",
        ] {
            assert!(
                parse_deny(hit).unwrap().first_match(&peer).is_some(),
                "{hit}"
            );
        }
        for miss in ["san:spiffe://td/ns/A", "san:spiffe://td/ns/a/b"] {
            assert!(
                parse_deny(miss).unwrap().first_match(&peer).is_none(),
                "{miss}"
            );
        }
    }

    /// The wildcards `--allow-san` has deny too, in file order with the
    /// exact entries.
    #[test]
    fn wildcards_match_as_allow_san_does() {
        let peer = PeerFacts {
            dns: vec!["Controller-7.ENV-1.svc".into()],
            uris: vec!["spiffe://td/ns/prod/sa/controller-7".into()],
            ..Default::default()
        };
        for hit in [
            "san:*.env-1.svc",
            "san:spiffe://td/ns/prod/sa/*",
            "san:spiffe://td/ns/prod/**",
            "san:spiffe://TD/ns/*/sa/controller-7",
        ] {
            let l = parse_deny(&format!("san:other.svc\n{hit}")).unwrap();
            assert_eq!(l.first_match(&peer), l.entries().get(1), "{hit}");
        }
        for miss in [
            "san:*.env-1.svc.cluster",
            "san:*.env-2.svc",
            "san:spiffe://td/ns/prod/*",
            "san:spiffe://td/ns/prod/sa/controller-7/**",
            "san:spiffe://td/ns/dev/**",
        ] {
            assert!(
                parse_deny(miss).unwrap().first_match(&peer).is_none(),
                "{miss}"
            );
        }
        let l = parse_deny("san:*.env-1.svc\nsan:controller-7.env-1.svc").unwrap();
        assert_eq!(l.first_match(&peer), l.entries().first());
        let l = parse_deny("san:controller-7.env-1.svc\nsan:*.env-1.svc").unwrap();
        assert_eq!(l.first_match(&peer), l.entries().first());
        assert_eq!(l.counts().san, 2);
        assert!(parse_deny("san:*.env-1.svc").unwrap().has_sans());
    }

    #[test]
    fn the_first_entry_in_file_order_is_named() {
        let peer = PeerFacts {
            certs: vec![cert(1, &[1], Some(2))],
            dns: vec!["a.svc".into()],
            ..Default::default()
        };
        let l = list(&[DenyEntry::Dns("a.svc".into()), DenyEntry::Spki([1; 32])]);
        assert_eq!(l.first_match(&peer), Some(&DenyEntry::Dns("a.svc".into())));
    }

    /// Only a list naming a SAN makes a handshake parse the leaf for its
    /// SANs (an X.509 parse per handshake otherwise saved).
    #[test]
    fn only_a_san_entry_asks_for_the_sans() {
        assert!(!list(&[]).has_sans());
        assert!(
            !parse_deny("spki-sha256:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=")
                .unwrap()
                .has_sans()
        );
        assert!(parse_deny("san:a.svc").unwrap().has_sans());
        assert!(parse_deny("san:spiffe://td/x").unwrap().has_sans());
    }

    #[test]
    fn serials_print_without_leading_zeros() {
        assert_eq!(hex_serial(&[0, 0x0a, 0xbc]), "abc");
        assert_eq!(hex_serial(&[]), "0");
    }

    #[test]
    fn unreadable_sans_are_denied_by_a_list_naming_a_san() {
        let keyed = list(&[DenyEntry::Spki([9; 32])]);
        let named = list(&[DenyEntry::Spki([9; 32]), DenyEntry::Dns("x.svc".into())]);
        let peer = PeerFacts {
            certs: vec![cert(1, &[1], Some(2))],
            sans_unreadable: true,
            ..PeerFacts::default()
        };
        assert_eq!(
            keyed.first_match(&peer),
            None,
            "no SAN entry: nothing to fail closed on"
        );
        assert_eq!(
            named.first_match(&peer),
            Some(&DenyEntry::Dns("x.svc".into()))
        );
    }
}
