//! Mints a scenario's shape with rcgen: the CAs, the leaf, the CRLs (by
//! `der.rs`, which can leave out the CRL number and sign with another key),
//! the server identity of the handshake sample, and the reference CRLs
//! OpenSSL is given.

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, CrlDistributionPoint, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};

use super::der::{pem, Crl, Idp};
use super::gen::{
    issuer_has_crl, Broken, CrlShape, CrlTime, IdpKind, Shape, Validity, PEER_NAME, SERVER_NAME,
};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

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
    /// from every CA level that has no CRL in force (none, a broken one of
    /// an intermediate only the peer sends, which replaces it, or one not
    /// valid yet; a held CA's broken CRL is given as it is). The sidecar does not judge a
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

/// What every certificate of a scenario has: its name, validity, a fresh
/// serial and, when given, a CRL Distribution Point.
fn base_params(
    name: &str,
    (nb, na): (SystemTime, SystemTime),
    cdp: Option<String>,
) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.not_before = offset(nb);
    params.not_after = offset(na);
    params.serial_number = Some(fresh_serial());
    params.crl_distribution_points = cdp
        .into_iter()
        .map(|u| CrlDistributionPoint { uris: vec![u] })
        .collect();
    params
}

fn ca_params(
    name: &str,
    validity: (SystemTime, SystemTime),
    cdp: Option<String>,
) -> CertificateParams {
    let mut params = base_params(name, validity, cdp);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

/// The CA of level `level` may not sign CRLs when its CRL's shape says so.
fn without_crl_sign(
    mut params: CertificateParams,
    shape: &Shape,
    level: usize,
) -> CertificateParams {
    if shape.crls[level].is_some_and(|c| c.broken == Some(Broken::NoCrlSign)) {
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
    }
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
    let mut params = base_params(name, window(v, now), cdp);
    params.subject_alt_names = vec![SanType::DnsName(name.try_into().expect("a DNS name"))];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    params.use_authority_key_identifier_extension = true;
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
    let stranger = (shape.broken == Some(Broken::WrongKey))
        .then(|| KeyPair::generate().expect("stranger key"));
    let signer = stranger.as_ref().unwrap_or(&ca.key);
    let mut revoked = listed;
    // Other serials, so the list is never just the judged one.
    revoked.push(fresh_serial().to_bytes());
    let mut der = Crl {
        issuer: &ca.subject_der(),
        aki: ca.params.key_identifier(signer),
        number: shape.number.then_some(1 + level as u64),
        idp,
        this_update,
        next_update,
        revoked,
    }
    .sign(signer);
    if shape.broken == Some(Broken::Corrupted) {
        // The last byte is the signature's: the CRL still parses.
        if let Some(last) = der.last_mut() {
            *last ^= 0x01;
        }
    }
    der
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
        without_crl_sign(
            ca_params(&root_name, window(Validity::Valid, now), None),
            shape,
            below - 1,
        ),
        None,
    );
    let mut cas: Vec<Ca> = vec![root];
    // Intermediates from the top down: certificate index i (1..below) is
    // issued by level i.
    for i in (1..below).rev() {
        // int{i} is CA level i - 1 (it issues certificate i - 1).
        let params = without_crl_sign(
            ca_params(
                &format!("diff {tag} int{i}"),
                window(shape.validity[i], now),
                shape.cdp[i].then(|| dp_uri(tag, i)),
            ),
            shape,
            i - 1,
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
    let mut reference = String::new();
    for (level, crl) in shape.crls.iter().enumerate() {
        if let Some(c) = crl {
            let listed = if shape.revoked[level] {
                vec![serial_of(level)]
            } else {
                Vec::new()
            };
            let one = pem(
                "X509 CRL",
                &crl_for(&cas[level], c, tag, level, listed, now),
            );
            crls.push_str(&one);
            // A broken CRL of an intermediate only the peer sends is no CRL
            // in force for the sidecar: OpenSSL gets the filler instead
            // (below), as for any issuer without one.
            if c.broken.is_none() || shape.held(level) {
                reference.push_str(&one);
            }
        }
    }
    let filler = CrlShape {
        number: true,
        idp: IdpKind::None,
        time: CrlTime::Current,
        broken: None,
    };
    for (level, has) in issuer_has_crl(shape).into_iter().enumerate() {
        // A held CA's broken CRL is the one OpenSSL is given for its level
        // too: both judges see the same CRL.
        let held_broken =
            shape.crls[level].is_some_and(|c| c.broken.is_some()) && shape.held(level);
        if !has && !held_broken {
            reference.push_str(&pem(
                "X509 CRL",
                &crl_for(&cas[level], &filler, tag, level, Vec::new(), now),
            ));
        }
    }
    let mut ca_pem = cas[below - 1].pem.clone();
    if let (Some(t), Some(tw)) = (&shape.twin, &twin) {
        if t.trusted {
            ca_pem = if shape.seed.is_multiple_of(2) {
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
                broken: None,
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
