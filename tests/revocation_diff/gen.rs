//! A seeded generator of PKI scenarios: a shape drawn from the seed (how
//! many CA levels, which certificates carry a CRL Distribution Point, which
//! levels publish a CRL and what it says), then minted with rcgen (keys and
//! serials are fresh each run; the shape is what the seed reproduces).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CrlDistributionPoint, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

use super::der::{pem, Crl, Idp};

/// The allowed client name of the handshake sample (tests/common's CONTROLLER).
pub const PEER_NAME: &str = "controller.env-1.svc";
/// The server sidecar's own name in the handshake sample.
pub const SERVER_NAME: &str = "replica-0.env-1.svc";

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

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
        self.next() % n == 0
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

/// The CRL one CA level publishes.
#[derive(Debug, Clone, Copy)]
pub struct CrlShape {
    pub number: bool,
    pub idp: IdpKind,
    pub time: CrlTime,
    /// Signed by another key under the same issuer name (not trusted).
    pub wrong_key: bool,
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
                wrong_key: r.one_in(12),
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
                    if c.wrong_key {
                        k.push("CRL signed by a same-name key");
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

/// A minted CA: what it needs to sign certificates and CRLs.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
    pem: String,
}

impl Ca {
    fn issuer(&self) -> Issuer<'_, &KeyPair> {
        Issuer::from_params(&self.params, &self.key)
    }
    fn subject_der(&self) -> Vec<u8> {
        use x509_parser::prelude::FromDer;
        let (_, c) = x509_parser::certificate::X509Certificate::from_der(&self.der)
            .expect("our own CA parses");
        c.subject().as_raw().to_vec()
    }
}

/// A minted scenario: the files both judges read.
pub struct Minted {
    pub shape: Shape,
    /// ca.crt: the anchors.
    pub ca_pem: String,
    /// The intermediates, leaf's issuer first (the chain the peer sends
    /// after its leaf).
    pub intermediates_pem: String,
    /// ca.crl, when any level publishes one.
    pub crl_pem: Option<String>,
    /// What OpenSSL is given instead: `crl_pem` plus an empty, current CRL
    /// from every CA level that has no CRL in force (none, one signed by
    /// another key, or one not valid yet). The sidecar does not judge a
    /// certificate whose issuer has no CRL (the first deliberate
    /// divergence); OpenSSL's `-crl_check` stops at error 3 there and
    /// judges nothing after it. The empty CRL says "not revoked" in
    /// OpenSSL's terms and lets it judge the rest.
    pub reference_crl_pem: String,
    pub leaf_pem: String,
    pub leaf_key_pem: String,
    /// A server identity from the (real) root, for the handshake sample.
    pub server_pem: String,
    pub server_key_pem: String,
    pub at: SystemTime,
}

impl Minted {
    /// The peer's chain: leaf then intermediates.
    pub fn chain_pem(&self) -> String {
        format!("{}{}", self.leaf_pem, self.intermediates_pem)
    }
}

fn serial(bytes: &[u8; 16]) -> SerialNumber {
    let mut b = *bytes;
    b[0] = (b[0] & 0x7f) | 0x01;
    SerialNumber::from_slice(&b)
}

fn fresh_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes).expect("system RNG");
    serial(&bytes)
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(t)
}

fn window(v: Validity, now: SystemTime) -> (SystemTime, SystemTime) {
    match v {
        Validity::Valid => (now - HOUR, now + 30 * DAY),
        Validity::Expired => (now - 30 * DAY, now - HOUR),
        Validity::NotYetValid => (now + DAY, now + 30 * DAY),
    }
}

fn ca_params(
    name: &str,
    (nb, na): (SystemTime, SystemTime),
    cdp: Option<String>,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.not_before = offset(nb);
    params.not_after = offset(na);
    params.serial_number = Some(fresh_serial());
    params.crl_distribution_points = cdp
        .into_iter()
        .map(|u| CrlDistributionPoint { uris: vec![u] })
        .collect();
    params
}

fn mint_ca(params: CertificateParams, signer: Option<&Ca>) -> Ca {
    let key = KeyPair::generate().expect("CA key");
    let cert = match signer {
        None => params.self_signed(&key),
        Some(s) => {
            let mut params = params.clone();
            params.use_authority_key_identifier_extension = true;
            params.signed_by(&key, &s.issuer())
        }
    }
    .expect("mint CA");
    Ca {
        der: cert.der().to_vec(),
        pem: cert.pem(),
        params,
        key,
    }
}

fn leaf_params(name: &str, v: Validity, cdp: Option<String>, now: SystemTime) -> CertificateParams {
    let (nb, na) = window(v, now);
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("a DNS name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
    params.not_before = offset(nb);
    params.not_after = offset(na);
    params.serial_number = Some(fresh_serial());
    params.crl_distribution_points = cdp
        .into_iter()
        .map(|u| CrlDistributionPoint { uris: vec![u] })
        .collect();
    params
}

/// The CDP URI of the certificates issued by CA level `level` (0 = the
/// leaf's issuer) in scenario `tag`.
fn dp_uri(tag: &str, level: usize) -> String {
    format!("http://crl.test/{tag}/ca{level}.crl")
}

fn raw_serial(params: &CertificateParams) -> Vec<u8> {
    params
        .serial_number
        .as_ref()
        .map(|s| s.to_bytes())
        .unwrap_or_default()
}

/// The CRL CA `ca` publishes for level `level`.
fn crl_for(
    ca: &Ca,
    shape: &CrlShape,
    tag: &str,
    level: usize,
    listed: Vec<Vec<u8>>,
    now: SystemTime,
) -> Vec<u8> {
    let uri = dp_uri(tag, level);
    let idp = match shape.idp {
        IdpKind::None => None,
        IdpKind::Matching => Some(Idp {
            uris: vec![uri],
            ..Idp::default()
        }),
        IdpKind::Mismatched => Some(Idp {
            uris: vec![format!("http://crl.test/{tag}/other.crl")],
            ..Idp::default()
        }),
        IdpKind::CaseMismatched => Some(Idp {
            uris: vec![uri.replace("/ca", "/CA")],
            ..Idp::default()
        }),
        IdpKind::OnlyUser => Some(Idp {
            uris: vec![uri],
            only_user: true,
            ..Idp::default()
        }),
        IdpKind::OnlyCa => Some(Idp {
            uris: vec![uri],
            only_ca: true,
            ..Idp::default()
        }),
        IdpKind::FlagsOnly => Some(Idp {
            only_user: true,
            ..Idp::default()
        }),
    };
    let (this_update, next_update) = match shape.time {
        CrlTime::Current => (now - HOUR, now + 7 * DAY),
        CrlTime::Stale => (now - 8 * DAY, now - DAY),
        CrlTime::Future => (now + DAY, now + 8 * DAY),
    };
    let stranger = shape
        .wrong_key
        .then(|| KeyPair::generate().expect("stranger key"));
    let signer = stranger.as_ref().unwrap_or(&ca.key);
    let mut revoked = listed;
    // Other serials, so the list is never just the judged one.
    revoked.push(fresh_serial().to_bytes());
    Crl {
        issuer: &ca.subject_der(),
        aki: ca.params.key_identifier(signer),
        number: shape.number.then_some(1 + level as u64),
        idp,
        this_update,
        next_update,
        revoked,
    }
    .sign(signer)
}

/// Mints the scenario. `tag` makes every CA name unique to it (CRLs of
/// one name would otherwise be compared across scenarios by a sidecar whose
/// revisions are swapped).
pub fn mint(shape: &Shape, tag: &str) -> Minted {
    let now = SystemTime::now();
    let below = shape.below;
    // cas[0] issues the leaf; cas[below - 1] is the root.
    let root_name = format!("diff {tag} root");
    let root = mint_ca(
        ca_params(&root_name, window(Validity::Valid, now), None),
        None,
    );
    let mut cas: Vec<Ca> = vec![root];
    // Intermediates from the top down: certificate index i (1..below) is
    // issued by level i.
    for i in (1..below).rev() {
        let params = ca_params(
            &format!("diff {tag} int{i}"),
            window(shape.validity[i], now),
            shape.cdp[i].then(|| dp_uri(tag, i)),
        );
        let ca = mint_ca(params, cas.last());
        cas.push(ca);
    }
    cas.reverse(); // cas[level]: level 0 issues the leaf
    let twin = shape.twin.map(|_| {
        mint_ca(
            ca_params(&root_name, window(Validity::Valid, now), None),
            None,
        )
    });
    let leaf_issuer = match (&shape.twin, &twin) {
        (Some(t), Some(tw)) if t.issues_leaf => tw,
        _ => &cas[0],
    };
    let leaf_key = KeyPair::generate().expect("leaf key");
    let lp = leaf_params(
        PEER_NAME,
        shape.validity[0],
        shape.cdp[0].then(|| dp_uri(tag, 0)),
        now,
    );
    let leaf = lp
        .signed_by(&leaf_key, &leaf_issuer.issuer())
        .expect("mint leaf");
    // cert serials per index: 0 the leaf, i the intermediate cas[i - 1]
    let serial_of = |i: usize| {
        if i == 0 {
            raw_serial(&lp)
        } else {
            raw_serial(&cas[i - 1].params)
        }
    };
    let mut crls = String::new();
    for (level, crl) in shape.crls.iter().enumerate() {
        if let Some(c) = crl {
            let listed = if shape.revoked[level] {
                vec![serial_of(level)]
            } else {
                Vec::new()
            };
            crls.push_str(&pem(
                "X509 CRL",
                &crl_for(&cas[level], c, tag, level, listed, now),
            ));
        }
    }
    let mut reference = crls.clone();
    let filler = CrlShape {
        number: true,
        idp: IdpKind::None,
        time: CrlTime::Current,
        wrong_key: false,
    };
    for (level, has) in issuer_has_crl(shape).into_iter().enumerate() {
        if !has {
            reference.push_str(&pem(
                "X509 CRL",
                &crl_for(&cas[level], &filler, tag, level, Vec::new(), now),
            ));
        }
    }
    let mut ca_pem = cas[below - 1].pem.clone();
    if let (Some(t), Some(tw)) = (&shape.twin, &twin) {
        if t.trusted {
            ca_pem = if shape.seed % 2 == 0 {
                format!("{ca_pem}{}", tw.pem)
            } else {
                format!("{}{ca_pem}", tw.pem)
            };
        }
        if t.crl {
            let listed = if t.crl_lists_leaf {
                vec![raw_serial(&lp)]
            } else {
                Vec::new()
            };
            let c = CrlShape {
                number: true,
                idp: IdpKind::None,
                time: CrlTime::Current,
                wrong_key: false,
            };
            let twin_crl = pem("X509 CRL", &crl_for(tw, &c, tag, 0, listed, now));
            crls.push_str(&twin_crl);
            reference.push_str(&twin_crl);
        }
    }
    let intermediates_pem: String = cas[..below - 1].iter().map(|c| c.pem.clone()).collect();
    let server_key = KeyPair::generate().expect("server key");
    let server = leaf_params(SERVER_NAME, Validity::Valid, None, now)
        .signed_by(&server_key, &cas[below - 1].issuer())
        .expect("mint server");
    Minted {
        shape: shape.clone(),
        ca_pem,
        intermediates_pem,
        crl_pem: (!crls.is_empty()).then_some(crls),
        reference_crl_pem: reference,
        leaf_pem: leaf.pem(),
        leaf_key_pem: leaf_key.serialize_pem(),
        server_pem: server.pem(),
        server_key_pem: server_key.serialize_pem(),
        at: now,
    }
}

/// Facts the verdict table needs beyond OpenSSL's answer: for each
/// certificate below the anchor, whether its issuer (by name AND key) has
/// a CRL in force (present, signed by that key, already valid).
pub fn issuer_has_crl(shape: &Shape) -> Vec<bool> {
    shape
        .crls
        .iter()
        .map(|c| c.is_some_and(|c| !c.wrong_key && c.time != CrlTime::Future))
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
    "leaf expired",
    "leaf not yet valid",
    "intermediate expired",
    "leaf revoked",
    "intermediate revoked",
    "CDP present",
    "CDP absent",
];
