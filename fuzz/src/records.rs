//! ring's TLS 1.3 record opener (`tls::provider::with_ring_records`) on
//! arbitrary records under a fixed key, judged against aws-lc's opener of
//! the same suite (rustls's own): the same plaintext and content type, or
//! the same error; and a record ring sealed, altered in one bit, is
//! refused by both while the unaltered one opens to what was sealed.

use mtls_sidecar::tls::provider::with_ring_records;
use rustls::crypto::cipher::{
    AeadKey, InboundOpaqueMessage, Iv, OutboundChunks, OutboundPlainMessage, Tls13AeadAlgorithm,
};
use rustls::{ContentType, Error, ProtocolVersion, SupportedCipherSuite};

/// The two TLS 1.3 AES-GCM suites: (ring's, aws-lc's) record protection.
fn algs(
    aes256: bool,
) -> (
    &'static dyn Tls13AeadAlgorithm,
    &'static dyn Tls13AeadAlgorithm,
) {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    let base = if aes256 {
        cs::TLS13_AES_256_GCM_SHA384
    } else {
        cs::TLS13_AES_128_GCM_SHA256
    };
    let (SupportedCipherSuite::Tls13(r), SupportedCipherSuite::Tls13(a)) =
        (with_ring_records(base), base)
    else {
        unreachable!("TLS 1.3 suites")
    };
    assert!(
        !std::ptr::eq(
            r.aead_alg as *const _ as *const u8,
            a.aead_alg as *const _ as *const u8
        ),
        "ring's records were not substituted"
    );
    (r.aead_alg, a.aead_alg)
}

/// A fixed traffic key of `alg`'s length, as the key schedule makes one.
fn key(alg: &dyn Tls13AeadAlgorithm) -> AeadKey {
    let SupportedCipherSuite::Tls13(s) =
        rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_256_GCM_SHA384
    else {
        unreachable!("a TLS 1.3 suite")
    };
    let expander = s
        .hkdf_provider
        .extract_from_secret(None, b"fuzz record key");
    rustls::internal::derive_traffic_key(expander.as_ref(), alg)
}

fn iv() -> Iv {
    Iv::new([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8])
}

/// Opens `payload` as record `seq`: its content type and plaintext.
fn open(
    alg: &dyn Tls13AeadAlgorithm,
    payload: &[u8],
    seq: u64,
) -> Result<(ContentType, Vec<u8>), Error> {
    let mut wire = payload.to_vec();
    let opaque = InboundOpaqueMessage::new(
        ContentType::ApplicationData,
        ProtocolVersion::TLSv1_2,
        &mut wire,
    );
    let plain = alg.decrypter(key(alg), iv()).decrypt(opaque, seq)?;
    Ok((plain.typ, plain.payload.to_vec()))
}

/// Seals `plain` as record `seq` of type `typ`: the payload after the
/// 5-byte header.
fn seal(alg: &dyn Tls13AeadAlgorithm, typ: ContentType, plain: &[u8], seq: u64) -> Vec<u8> {
    let msg = OutboundPlainMessage {
        typ,
        version: ProtocolVersion::TLSv1_3,
        payload: OutboundChunks::Single(plain),
    };
    let wire = alg
        .encrypter(key(alg), iv())
        .encrypt(msg, seq)
        .expect("a record of at most 16 KiB seals")
        .encode();
    assert_eq!(wire[0], 23, "TLS 1.3 records go out as application data");
    assert_eq!(
        usize::from(u16::from_be_bytes([wire[3], wire[4]])),
        wire.len() - 5
    );
    wire[5..].to_vec()
}

/// Byte 0: bit 0 the suite (AES-256), bit 1 the mode (seal and tamper),
/// bit 2 the mode (an authentic record of any inner plaintext); bytes
/// 1..9 the sequence number; then the record payload (open mode), a
/// 2-byte bit position, a content type and the plaintext (tamper mode),
/// or the TLSInnerPlaintext (inner mode). Bit 3: the record driver
/// instead (`src/stream.rs`), fed the rest after the sequence number.
pub fn check(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((seq, rest)) = rest.split_first_chunk::<8>() else {
        return;
    };
    let seq = u64::from_be_bytes(*seq);
    if mode & 8 != 0 {
        return crate::stream::check(rest);
    }
    let (ring, aws) = algs(mode & 1 == 1);
    if mode & 4 != 0 {
        return check_inner(ring, aws, mode & 1 == 1, rest, seq);
    }
    if mode & 2 == 0 {
        let (r, a) = (open(ring, rest, seq), open(aws, rest, seq));
        assert_eq!(r, a, "ring and aws-lc disagree on a record");
        return;
    }
    let Some((at, rest)) = rest.split_first_chunk::<2>() else {
        return;
    };
    let Some((&typ, plain)) = rest.split_first() else {
        return;
    };
    let typ = match typ % 3 {
        0 => ContentType::ApplicationData,
        1 => ContentType::Handshake,
        _ => ContentType::Alert,
    };
    let plain = &plain[..plain.len().min(16_384)];
    let sealed = seal(ring, typ, plain, seq);
    for alg in [ring, aws] {
        assert_eq!(open(alg, &sealed, seq), Ok((typ, plain.to_vec())));
    }
    let bit = usize::from(u16::from_be_bytes(*at)) % (sealed.len() * 8);
    let mut tampered = sealed.clone();
    tampered[bit / 8] ^= 1 << (bit % 8);
    for alg in [ring, aws] {
        assert_eq!(open(alg, &tampered, seq), Err(Error::DecryptError));
    }
    // The same record at another sequence number is refused too.
    assert_eq!(open(ring, &sealed, seq ^ 1), Err(Error::DecryptError));
}

/// Seals `inner` as it stands (content, type and padding, or anything
/// else) with ring's AEAD under the same key: an authentic record whose
/// TLSInnerPlaintext the peer chose. Both openers agree, and what they
/// accept is what RFC 8446 5.4 reads: padding zeros stripped, the last
/// non-zero byte the type, the bytes before it the content.
fn check_inner(
    ring_alg: &dyn Tls13AeadAlgorithm,
    aws: &dyn Tls13AeadAlgorithm,
    aes256: bool,
    inner: &[u8],
    seq: u64,
) {
    use ring::aead;
    let inner = &inner[..inner.len().min(16_384 + 256)];
    let alg = if aes256 {
        &aead::AES_256_GCM
    } else {
        &aead::AES_128_GCM
    };
    let k = key(ring_alg);
    let sealing = aead::LessSafeKey::new(
        aead::UnboundKey::new(alg, k.as_ref()).expect("a key of the suite's length"),
    );
    let mut record = inner.to_vec();
    let nonce =
        aead::Nonce::assume_unique_for_key(rustls::crypto::cipher::Nonce::new(&iv(), seq).0);
    let aad = rustls::crypto::cipher::make_tls13_aad(inner.len() + 16);
    sealing
        .seal_in_place_append_tag(nonce, aead::Aad::from(aad), &mut record)
        .expect("sealed");
    let (r, a) = (open(ring_alg, &record, seq), open(aws, &record, seq));
    assert_eq!(r, a, "ring and aws-lc disagree on an authentic record");
    match (reference(inner), r) {
        (Some((typ, content)), Ok(got)) => {
            assert_eq!(got, (ContentType::from(typ), content.to_vec()))
        }
        (None, Ok(got)) => panic!("a record RFC 8446 refuses opened: {got:?}"),
        (Some(_), Err(e)) => panic!("an authentic, well-formed record was refused: {e}"),
        (None, Err(_)) => {}
    }
}

/// RFC 8446 5.2 and 5.4: the inner plaintext at most 2^14 + 1 bytes,
/// trailing zeros padding, the last non-zero byte the type (none: refused),
/// a protected change_cipher_spec refused (5).
fn reference(inner: &[u8]) -> Option<(u8, &[u8])> {
    if inner.len() > 16_385 {
        return None;
    }
    let at = inner.iter().rposition(|&b| b != 0)?;
    (inner[at] != 20).then(|| (inner[at], &inner[..at]))
}
