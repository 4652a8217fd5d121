//! A seeded generator of PKI scenarios: the shape drawn from the seed (how
//! many CA levels, which certificates carry a CRL Distribution Point, which
//! levels publish a CRL and what it says). `mint.rs` turns a shape into
//! certificates and CRLs (keys and serials are fresh each run; the shape is
//! what the seed reproduces).

use std::fmt::Write as _;

/// The allowed client name of the handshake sample (tests/common's CONTROLLER).
pub const PEER_NAME: &str = "controller.env-1.svc";
/// The server sidecar's own name in the handshake sample.
pub const SERVER_NAME: &str = "replica-0.env-1.svc";

/// splitmix64: a seed is all a scenario's shape needs.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// True with probability 1/n.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
    pub fn pick<T: Copy>(&mut self, of: &[T]) -> T {
        of[(self.next() % of.len() as u64) as usize]
    }
}

/// A certificate's validity relative to now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    Valid,
    Expired,
    NotYetValid,
}

/// What a CRL's Issuing Distribution Point says, relative to the judged
/// certificate's CRL Distribution Point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdpKind {
    None,
    /// The URI of the certificates' CDP.
    Matching,
    /// Another URI.
    Mismatched,
    /// The same URI but for the letter case of its path.
    CaseMismatched,
    /// The matching URI and onlyContainsUserCerts.
    OnlyUser,
    /// The matching URI and onlyContainsCACerts.
    OnlyCa,
    /// onlyContainsUserCerts and no distribution point name.
    FlagsOnly,
}

/// When a CRL is dated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrlTime {
    Current,
    /// Past its nextUpdate.
    Stale,
    /// thisUpdate a day ahead.
    Future,
}

/// How a CRL fails to verify with its issuer's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Broken {
    /// Signed by another key under the same issuer name (not trusted).
    WrongKey,
    /// Signed by the issuer's key, then its signature corrupted.
    Corrupted,
    /// Signed by the issuer's key, whose certificate's keyUsage lacks
    /// cRLSign.
    NoCrlSign,
}

/// The CRL one CA level publishes.
#[derive(Debug, Clone, Copy)]
pub struct CrlShape {
    pub number: bool,
    pub idp: IdpKind,
    pub time: CrlTime,
    /// Set when no trusted key verifies it.
    pub broken: Option<Broken>,
}

/// A second root with the same subject name and another key.
#[derive(Debug, Clone, Copy)]
pub struct Twin {
    /// In ca.crt beside the real root.
    pub trusted: bool,
    /// The twin publishes a CRL (only when trusted) ...
    pub crl: bool,
    /// ... that lists the serial of the leaf (issued by the other root).
    pub crl_lists_leaf: bool,
    /// The leaf is issued by the twin instead (only when untrusted).
    pub issues_leaf: bool,
}

/// The judged usage: a client certificate (server route) or a server
/// certificate (client route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Usage {
    Client,
    Server,
}

/// A scenario's shape. Index 0 is the leaf, 1.. the intermediates upward;
/// `crls[i]` is published by the issuer of certificate `i`.
#[derive(Debug, Clone)]
pub struct Shape {
    pub seed: u64,
    pub usage: Usage,
    /// Certificates below the anchor (1: the root issues the leaf).
    pub below: usize,
    pub cdp: Vec<bool>,
    pub validity: Vec<Validity>,
    pub revoked: Vec<bool>,
    pub crls: Vec<Option<CrlShape>>,
    pub twin: Option<Twin>,
    /// The intermediates are also given as the `intermediates` file.
    pub intermediates_file: bool,
}

impl Shape {
    /// Draws a shape from `seed`.
    pub fn draw(seed: u64) -> Shape {
        let mut r = Rng::new(seed);
        let below = r.pick(&[1, 1, 2, 2, 3]);
        let mut shape = Shape {
            seed,
            usage: r.pick(&[Usage::Client, Usage::Server]),
            below,
            cdp: Vec::new(),
            validity: Vec::new(),
            revoked: Vec::new(),
            crls: Vec::new(),
            twin: None,
            intermediates_file: r.one_in(2),
        };
        for i in 0..below {
            shape.cdp.push(!r.one_in(3));
            let bad_time = if i == 0 {
                r.pick(&[Validity::Expired, Validity::NotYetValid])
            } else {
                Validity::Expired
            };
            shape.validity.push(if r.one_in(12) {
                bad_time
            } else {
                Validity::Valid
            });
            shape.revoked.push(r.one_in(3));
            let crl = (!r.one_in(4)).then(|| CrlShape {
                number: !r.one_in(3),
                idp: if r.one_in(2) {
                    IdpKind::None
                } else {
                    r.pick(&[
                        IdpKind::Matching,
                        IdpKind::Mismatched,
                        IdpKind::CaseMismatched,
                        IdpKind::OnlyUser,
                        IdpKind::OnlyCa,
                        IdpKind::FlagsOnly,
                    ])
                },
                time: if r.one_in(8) {
                    r.pick(&[CrlTime::Stale, CrlTime::Future])
                } else {
                    CrlTime::Current
                },
                broken: r
                    .one_in(8)
                    .then(|| r.pick(&[Broken::WrongKey, Broken::Corrupted, Broken::NoCrlSign])),
            });
            shape.crls.push(crl);
        }
        if below == 1 && r.one_in(3) {
            let trusted = !r.one_in(3);
            shape.twin = Some(Twin {
                trusted,
                crl: trusted && !r.one_in(4),
                crl_lists_leaf: r.one_in(2),
                issues_leaf: !trusted && r.one_in(2),
            });
        }
        shape
    }

    /// The kinds this scenario exercises (for coverage and the sample).
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut k = vec![match self.below {
            1 => "one root",
            2 => "root and one intermediate",
            _ => "root and two intermediates",
        }];
        if let Some(t) = self.twin {
            k.push(match (t.trusted, t.issues_leaf) {
                (true, _) if t.crl => "two CAs one name, both with CRLs",
                (true, _) => "two CAs one name",
                (false, true) => "leaf from an untrusted CA of the same name",
                (false, false) => "an untrusted CA of the same name",
            });
        }
        for (i, c) in self.crls.iter().enumerate() {
            let level = if i + 1 == self.below {
                "root CRL"
            } else {
                "intermediate CRL"
            };
            match c {
                None => k.push("a level without CRL"),
                Some(c) => {
                    k.push(level);
                    k.push(if c.number {
                        "CRL number"
                    } else {
                        "no CRL number"
                    });
                    k.push(match c.idp {
                        IdpKind::None => "no IDP",
                        IdpKind::Matching => "IDP matching",
                        IdpKind::Mismatched => "IDP mismatched",
                        IdpKind::CaseMismatched => "IDP mismatched by case",
                        IdpKind::OnlyUser => "IDP onlyContainsUserCerts",
                        IdpKind::OnlyCa => "IDP onlyContainsCACerts",
                        IdpKind::FlagsOnly => "IDP without a name",
                    });
                    match c.time {
                        CrlTime::Current => {}
                        CrlTime::Stale => k.push("stale CRL"),
                        CrlTime::Future => k.push("CRL not yet valid"),
                    }
                    match c.broken {
                        None => {}
                        Some(Broken::WrongKey) => k.push("CRL signed by a same-name key"),
                        Some(Broken::Corrupted) => k.push("CRL with a corrupted signature"),
                        Some(Broken::NoCrlSign) => k.push("CRL from a CA without cRLSign"),
                    }
                    if c.broken.is_some() && self.held(i) {
                        k.push("broken CRL of a CA we hold");
                    }
                }
            }
        }
        for (i, v) in self.validity.iter().enumerate() {
            let what = match (i, v) {
                (_, Validity::Valid) => continue,
                (0, Validity::Expired) => "leaf expired",
                (0, Validity::NotYetValid) => "leaf not yet valid",
                _ => "intermediate expired",
            };
            k.push(what);
        }
        for (i, r) in self.revoked.iter().enumerate() {
            if *r && self.crls[i].is_some() {
                k.push(if i == 0 {
                    "leaf revoked"
                } else {
                    "intermediate revoked"
                });
            }
        }
        if self.cdp.iter().any(|c| *c) {
            k.push("CDP present");
        }
        if self.cdp.iter().any(|c| !*c) {
            k.push("CDP absent");
        }
        k.sort_unstable();
        k.dedup();
        k
    }

    /// True when the CA that issues certificate `i` is one the sidecar
    /// holds: the root (an anchor), or an intermediate given as the
    /// `intermediates` file.
    pub fn held(&self, i: usize) -> bool {
        i + 1 == self.below || self.intermediates_file
    }

    /// True when some CA level the sidecar holds publishes a CRL no trusted
    /// key verifies: the revision is rejected.
    pub fn held_broken(&self) -> bool {
        (0..self.below).any(|i| self.crls[i].is_some_and(|c| c.broken.is_some()) && self.held(i))
    }

    /// One line a person can read.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "seed {:#x}: {:?} certificate, {} below the root",
            self.seed, self.usage, self.below
        );
        for i in 0..self.below {
            let name = if i == 0 {
                "leaf".to_string()
            } else {
                format!("int{i}")
            };
            let _ = write!(
                s,
                "; {name}: cdp={} {:?} listed={}, its issuer's CRL: {}",
                self.cdp[i],
                self.validity[i],
                self.revoked[i],
                match &self.crls[i] {
                    None => "none".to_string(),
                    Some(c) => format!("{c:?}"),
                }
            );
        }
        if let Some(t) = self.twin {
            let _ = write!(s, "; twin root: {t:?}");
        }
        let _ = write!(s, "; intermediates file: {}", self.intermediates_file);
        s
    }
}

/// Facts the verdict table needs beyond OpenSSL's answer: for each
/// certificate below the anchor, whether its issuer (by name AND key) has
/// a CRL in force (present, signed by that key, already valid).
pub fn issuer_has_crl(shape: &Shape) -> Vec<bool> {
    shape
        .crls
        .iter()
        .map(|c| c.is_some_and(|c| c.broken.is_none() && c.time != CrlTime::Future))
        .collect()
}

/// Every kind `Shape::kinds` names: a default run draws each at least once.
pub const ALL_KINDS: &[&str] = &[
    "one root",
    "root and one intermediate",
    "root and two intermediates",
    "two CAs one name",
    "two CAs one name, both with CRLs",
    "leaf from an untrusted CA of the same name",
    "an untrusted CA of the same name",
    "a level without CRL",
    "root CRL",
    "intermediate CRL",
    "CRL number",
    "no CRL number",
    "no IDP",
    "IDP matching",
    "IDP mismatched",
    "IDP mismatched by case",
    "IDP onlyContainsUserCerts",
    "IDP onlyContainsCACerts",
    "IDP without a name",
    "stale CRL",
    "CRL not yet valid",
    "CRL signed by a same-name key",
    "CRL with a corrupted signature",
    "CRL from a CA without cRLSign",
    "broken CRL of a CA we hold",
    "leaf expired",
    "leaf not yet valid",
    "intermediate expired",
    "leaf revoked",
    "intermediate revoked",
    "CDP present",
    "CDP absent",
];
