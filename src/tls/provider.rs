//! The crypto provider every TLS config and verifier of the process uses
//! ([`crypto_provider`]): aws-lc-rs, with TLS 1.3 record protection by
//! AES-GCM from ring where ring's is the faster one: on x86-64 CPUs with VAES and VPCLMULQDQ but without
//! AVX-512 (AMD Zen 3, Intel's recent client cores).
//!
//! Why: forwarding bulk data, a quarter of a sidecar's CPU is AES-GCM
//! (`perf` of the bulk scenario,
//! benches/reports/2026-12-03-aes-gcm-ring-idle-link-order.md). aws-lc's AES-GCM
//! uses those instructions only through its AVX-512 code; without AVX-512
//! it runs its 128-bit AES-NI code. ring has a 256-bit VAES/AVX2 version:
//! 1.7-1.8× aws-lc's speed on the benchmark box (AMD EPYC, Zen 3), 16 KiB
//! records sealed in a loop. Everything else (the key exchange, the
//! signatures, the key schedule's hash and HKDF, ChaCha20-Poly1305, TLS
//! 1.2) stays aws-lc: only the record cipher of the two TLS 1.3 AES-GCM
//! suites changes implementation. The suites, their order and what a peer
//! sees on the wire are the same.
//!
//! [`records_with_ring`] decides once per process; tests below judge each
//! implementation's records with the other's.

use std::sync::OnceLock;

use ring::aead;
use rustls::crypto::cipher::{
    make_tls13_aad, AeadKey, InboundOpaqueMessage, InboundPlainMessage, Iv, MessageDecrypter,
    MessageEncrypter, Nonce, OutboundOpaqueMessage, OutboundPlainMessage, PrefixedPayload,
    Tls13AeadAlgorithm, UnsupportedOperationError,
};
use rustls::{
    CipherSuite, ConnectionTrafficSecrets, ContentType, Error, ProtocolVersion,
    SupportedCipherSuite, Tls13CipherSuite,
};

use crate::tls::stream::copy;

/// The crypto provider every TLS config and verifier in the process uses:
/// aws-lc-rs, key exchange preferring the post-quantum hybrid X25519MLKEM768,
/// then X25519, P-256 and P-384.
///
/// The order is our preference; a client sends key shares for the first
/// group only (plus X25519, which the hybrid contains), so the later groups
/// grow `supported_groups` by two bytes each, never the key shares: a peer
/// that takes only P-256 or P-384 costs one HelloRetryRequest. P-384 is
/// there for CNSA/FIPS-restricted peers that offer nothing else, and
/// because OpenSSL serves an ECDSA P-384 certificate over TLS 1.2 only to a
/// client listing that curve (RFC 8422 §5.1). P-521 is not offered:
/// rustls' aws-lc-rs provider has no P-521 group (we would have to write
/// one), and CNSA asks for P-384, not P-521.
///
/// The TLS 1.3 AES-GCM suites protect records with ring's AES-GCM on CPUs
/// where that is the faster one ([`records_with_ring`]); the suites are
/// the same.
pub fn crypto_provider() -> std::sync::Arc<rustls::crypto::CryptoProvider> {
    std::sync::Arc::new(provider(records_with_ring()))
}

/// The provider, its TLS 1.3 AES-GCM records protected by ring or not.
fn provider(ring: bool) -> rustls::crypto::CryptoProvider {
    use rustls::crypto::aws_lc_rs::{self, kx_group};
    let base = aws_lc_rs::default_provider();
    rustls::crypto::CryptoProvider {
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        cipher_suites: suites_for(&base.cipher_suites, ring),
        ..base
    }
}

/// Which implementation protects TLS 1.3 AES-GCM records here: `ring`
/// or `aws-lc` (the build-info metric's `aes_gcm` label).
pub fn aes_gcm() -> &'static str {
    if records_with_ring() {
        "ring"
    } else {
        "aws-lc"
    }
}

/// Whether this CPU has 256-bit AES (VAES) and carry-less multiply
/// (VPCLMULQDQ) with AVX2, but not AVX-512 (where aws-lc has its own
/// VAES code, as fast).
pub fn records_with_ring() -> bool {
    static DECIDED: OnceLock<bool> = OnceLock::new();
    *DECIDED.get_or_init(cpu_prefers_ring)
}

#[cfg(target_arch = "x86_64")]
fn cpu_prefers_ring() -> bool {
    prefers_ring(
        std::arch::is_x86_feature_detected!("vaes")
            && std::arch::is_x86_feature_detected!("vpclmulqdq")
            && std::arch::is_x86_feature_detected!("avx2"),
        std::arch::is_x86_feature_detected!("avx512f"),
    )
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_prefers_ring() -> bool {
    false
}

/// The rule, apart from the CPU it reads.
fn prefers_ring(vaes_avx2: bool, avx512: bool) -> bool {
    vaes_avx2 && !avx512
}

/// `suites`, their TLS 1.3 AES-GCM records protected by ring when `ring`.
fn suites_for(suites: &[SupportedCipherSuite], ring: bool) -> Vec<SupportedCipherSuite> {
    suites
        .iter()
        .map(|s| if ring { with_ring_records(*s) } else { *s })
        .collect()
}

/// `suite` with ring's AES-GCM for its records, if it is a TLS 1.3
/// AES-GCM suite; else `suite`. Public for the `tls_records` fuzz target,
/// which opens records with it on any CPU.
pub fn with_ring_records(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    static AES_128: OnceLock<Tls13CipherSuite> = OnceLock::new();
    static AES_256: OnceLock<Tls13CipherSuite> = OnceLock::new();
    let SupportedCipherSuite::Tls13(base) = suite else {
        return suite;
    };
    let (slot, alg): (&'static OnceLock<Tls13CipherSuite>, &'static RingGcm) =
        match base.common.suite {
            CipherSuite::TLS13_AES_128_GCM_SHA256 => (&AES_128, &RING_AES_128_GCM),
            CipherSuite::TLS13_AES_256_GCM_SHA384 => (&AES_256, &RING_AES_256_GCM),
            _ => return suite,
        };
    SupportedCipherSuite::Tls13(slot.get_or_init(|| Tls13CipherSuite {
        common: rustls::CipherSuiteCommon {
            suite: base.common.suite,
            hash_provider: base.common.hash_provider,
            confidentiality_limit: base.common.confidentiality_limit,
        },
        hkdf_provider: base.hkdf_provider,
        aead_alg: alg,
        quic: base.quic,
    }))
}

/// AES-GCM record protection for TLS 1.3, by ring.
struct RingGcm {
    alg: &'static aead::Algorithm,
    /// What `extract_keys` calls the key (for kernel TLS, which we do not
    /// use; rustls asks all the same).
    secrets: fn(AeadKey, Iv) -> ConnectionTrafficSecrets,
}

static RING_AES_128_GCM: RingGcm = RingGcm {
    alg: &aead::AES_128_GCM,
    secrets: |key, iv| ConnectionTrafficSecrets::Aes128Gcm { key, iv },
};

static RING_AES_256_GCM: RingGcm = RingGcm {
    alg: &aead::AES_256_GCM,
    secrets: |key, iv| ConnectionTrafficSecrets::Aes256Gcm { key, iv },
};

impl RingGcm {
    /// The key for `key`: `None` only if its length is not the cipher's,
    /// which rustls never asks for (it sizes keys by `key_len`).
    fn key(&self, key: &AeadKey) -> Option<aead::LessSafeKey> {
        aead::UnboundKey::new(self.alg, key.as_ref())
            .ok()
            .map(aead::LessSafeKey::new)
    }
}

impl Tls13AeadAlgorithm for RingGcm {
    fn encrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageEncrypter> {
        Box::new(Sealer {
            key: self.key(&key),
            iv,
        })
    }

    fn decrypter(&self, key: AeadKey, iv: Iv) -> Box<dyn MessageDecrypter> {
        Box::new(Opener {
            key: self.key(&key),
            iv,
        })
    }

    fn key_len(&self) -> usize {
        self.alg.key_len()
    }

    fn extract_keys(
        &self,
        key: AeadKey,
        iv: Iv,
    ) -> Result<ConnectionTrafficSecrets, UnsupportedOperationError> {
        Ok((self.secrets)(key, iv))
    }

    fn fips(&self) -> bool {
        false
    }
}

/// Seals outgoing records. A key that could not be made (never, see
/// [`RingGcm::key`]) fails every record rather than panicking.
struct Sealer {
    key: Option<aead::LessSafeKey>,
    iv: Iv,
}

/// Opens incoming records; see [`Sealer`].
struct Opener {
    key: Option<aead::LessSafeKey>,
    iv: Iv,
}

/// The GCM tag's length, 16 bytes for both key sizes.
const TAG_LEN: usize = 16;

impl MessageEncrypter for Sealer {
    fn encrypt(
        &mut self,
        msg: OutboundPlainMessage<'_>,
        seq: u64,
    ) -> Result<OutboundOpaqueMessage, Error> {
        let key = self.key.as_ref().ok_or(Error::EncryptError)?;
        let total = self.encrypted_payload_len(msg.payload.len());
        let mut payload = PrefixedPayload::with_capacity(total);
        // Where the record starts: its 5-byte header precedes the payload.
        copy::note_sealed(payload.as_ref().as_ptr().wrapping_sub(5));
        // In pieces: the payload lands 5 bytes past the buffer's start
        // (after the header), where one large memcpy is slow ([`copy`]).
        let mut rest = msg.payload;
        while !rest.is_empty() {
            let (piece, after) = rest.split_at(copy::PIECE);
            payload.extend_from_chunks(&piece);
            rest = after;
        }
        // TLSInnerPlaintext: the content, then its real type (RFC 8446 5.2).
        payload.extend_from_slice(&msg.typ.to_array());
        let nonce = aead::Nonce::assume_unique_for_key(Nonce::new(&self.iv, seq).0);
        key.seal_in_place_append_tag(nonce, aead::Aad::from(make_tls13_aad(total)), &mut payload)
            .map_err(|_| Error::EncryptError)?;
        // Every TLS 1.3 record goes out as application data, with TLS
        // 1.2's version number (RFC 8446 5.1).
        Ok(OutboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            payload,
        ))
    }

    fn encrypted_payload_len(&self, payload_len: usize) -> usize {
        payload_len.saturating_add(1 + TAG_LEN)
    }
}

impl MessageDecrypter for Opener {
    fn decrypt<'a>(
        &mut self,
        mut msg: InboundOpaqueMessage<'a>,
        seq: u64,
    ) -> Result<InboundPlainMessage<'a>, Error> {
        let key = self.key.as_ref().ok_or(Error::DecryptError)?;
        let payload = &mut msg.payload;
        if payload.len() < TAG_LEN {
            return Err(Error::DecryptError);
        }
        let nonce = aead::Nonce::assume_unique_for_key(Nonce::new(&self.iv, seq).0);
        let aad = aead::Aad::from(make_tls13_aad(payload.len()));
        let plain = key
            .open_in_place(nonce, aad, payload)
            .map_err(|_| Error::DecryptError)?
            .len();
        payload.truncate(plain);
        msg.into_tls13_unpadded_message()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::crypto::cipher::{OutboundChunks, Tls13AeadAlgorithm};

    /// The same suite, by address (the ring ones are statics of ours).
    fn same_suite(a: &SupportedCipherSuite, b: &SupportedCipherSuite) -> bool {
        match (a, b) {
            (SupportedCipherSuite::Tls13(a), SupportedCipherSuite::Tls13(b)) => {
                std::ptr::eq(*a, *b)
            }
            (SupportedCipherSuite::Tls12(a), SupportedCipherSuite::Tls12(b)) => {
                std::ptr::eq(*a, *b)
            }
            _ => false,
        }
    }

    /// The provider carries the suites chosen for the CPU, so records are
    /// protected by what the `aes_gcm` label says: with ring chosen,
    /// aws-lc's own suites would make the label lie.
    #[test]
    fn the_provider_protects_records_as_the_label_says() {
        let base = rustls::crypto::aws_lc_rs::default_provider();
        for ring in [true, false] {
            let want = suites_for(&base.cipher_suites, ring);
            let got = provider(ring).cipher_suites;
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!(same_suite(g, w), "{:?} is not the suite chosen", g.suite());
            }
        }
        let ring = suites_for(&base.cipher_suites, true);
        let differ = ring
            .iter()
            .zip(&base.cipher_suites)
            .filter(|(r, b)| !same_suite(r, b));
        assert_eq!(
            differ.count(),
            2,
            "ring protects both TLS 1.3 AES-GCM suites"
        );
    }

    fn aws_lc(suite: CipherSuite) -> &'static dyn Tls13AeadAlgorithm {
        rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES
            .iter()
            .find_map(|s| match s {
                SupportedCipherSuite::Tls13(t) if t.common.suite == suite => Some(t.aead_alg),
                _ => None,
            })
            .expect("aws-lc has the suite")
    }

    /// A traffic key of `alg`'s length, as the key schedule makes one
    /// (HKDF-Expand-Label over a fixed secret).
    fn key(alg: &dyn Tls13AeadAlgorithm) -> AeadKey {
        let SupportedCipherSuite::Tls13(s) =
            rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_256_GCM_SHA384
        else {
            unreachable!("a TLS 1.3 suite")
        };
        let expander = s
            .hkdf_provider
            .extract_from_secret(None, b"a fixed test secret");
        rustls::internal::derive_traffic_key(expander.as_ref(), alg)
    }

    fn iv() -> Iv {
        Iv::new([9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2])
    }

    /// Seals `plain` as record `seq` with `by`, then opens it with `with`.
    fn round_trip(
        by: &dyn Tls13AeadAlgorithm,
        with: &dyn Tls13AeadAlgorithm,
        plain: &[u8],
        seq: u64,
        tamper: bool,
    ) -> Result<Vec<u8>, Error> {
        let mut enc = by.encrypter(key(by), iv());
        let mut dec = with.decrypter(key(with), iv());
        let msg = OutboundPlainMessage {
            typ: ContentType::ApplicationData,
            version: ProtocolVersion::TLSv1_3,
            payload: OutboundChunks::Single(plain),
        };
        let sealed = enc.encrypt(msg, seq)?;
        let mut wire = sealed.encode();
        if tamper {
            let last = wire.len() - 1;
            wire[last] ^= 1;
        }
        let mut deframer = wire[5..].to_vec();
        let opaque = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut deframer,
        );
        let opened = dec.decrypt(opaque, seq)?;
        assert_eq!(opened.typ, ContentType::ApplicationData);
        Ok(opened.payload.to_vec())
    }

    #[test]
    fn each_implementation_opens_the_others_records() {
        let plain: Vec<u8> = (0..16_384u32).map(|i| (i * 7) as u8).collect();
        for (suite, ring) in [
            (CipherSuite::TLS13_AES_128_GCM_SHA256, &RING_AES_128_GCM),
            (CipherSuite::TLS13_AES_256_GCM_SHA384, &RING_AES_256_GCM),
        ] {
            let aws = aws_lc(suite);
            for (len, seq) in [(0, 0), (1, 1), (64, 7), (16_384, u64::MAX - 1)] {
                let p = &plain[..len];
                assert_eq!(round_trip(ring, aws, p, seq, false).unwrap(), p);
                assert_eq!(round_trip(aws, ring, p, seq, false).unwrap(), p);
                assert_eq!(round_trip(ring, ring, p, seq, false).unwrap(), p);
            }
        }
    }

    #[test]
    fn a_record_altered_on_the_way_or_opened_at_another_sequence_is_refused() {
        let ring = &RING_AES_256_GCM;
        let aws = aws_lc(CipherSuite::TLS13_AES_256_GCM_SHA384);
        assert!(matches!(
            round_trip(aws, ring, b"hello", 3, true),
            Err(Error::DecryptError)
        ));
        assert!(matches!(
            round_trip(ring, aws, b"hello", 3, true),
            Err(Error::DecryptError)
        ));
        // Sealed as record 3, opened as record 4.
        let mut enc = ring.encrypter(key(ring), iv());
        let mut dec = ring.decrypter(key(ring), iv());
        let msg = OutboundPlainMessage {
            typ: ContentType::ApplicationData,
            version: ProtocolVersion::TLSv1_3,
            payload: OutboundChunks::Single(b"hello"),
        };
        let mut wire = enc.encrypt(msg, 3).unwrap().encode();
        let opaque = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut wire[5..],
        );
        assert!(matches!(dec.decrypt(opaque, 4), Err(Error::DecryptError)));
    }

    #[test]
    fn a_record_shorter_than_a_tag_is_refused() {
        let mut dec = RING_AES_128_GCM.decrypter(key(&RING_AES_128_GCM), iv());
        let mut short = [0u8; TAG_LEN - 1];
        let opaque = InboundOpaqueMessage::new(
            ContentType::ApplicationData,
            ProtocolVersion::TLSv1_2,
            &mut short,
        );
        assert!(matches!(dec.decrypt(opaque, 0), Err(Error::DecryptError)));
    }

    /// A record that is only a tag (an empty TLSInnerPlaintext: no content
    /// type) authenticates, and is then refused as the reference refuses
    /// it: the same error from ring's opener as from aws-lc's.
    #[test]
    fn a_tag_only_record_is_refused_as_aws_lc_refuses_it() {
        for (suite, ring) in [
            (CipherSuite::TLS13_AES_128_GCM_SHA256, &RING_AES_128_GCM),
            (CipherSuite::TLS13_AES_256_GCM_SHA384, &RING_AES_256_GCM),
        ] {
            let aws = aws_lc(suite);
            let sealing = ring.key(&key(ring)).expect("a key of the suite's length");
            let mut tag_only = Vec::new();
            sealing
                .seal_in_place_append_tag(
                    aead::Nonce::assume_unique_for_key(Nonce::new(&iv(), 5).0),
                    aead::Aad::from(make_tls13_aad(TAG_LEN)),
                    &mut tag_only,
                )
                .expect("sealed");
            assert_eq!(tag_only.len(), TAG_LEN);
            let mut errors = Vec::new();
            for alg in [ring as &dyn Tls13AeadAlgorithm, aws] {
                let mut wire = tag_only.clone();
                let opaque = InboundOpaqueMessage::new(
                    ContentType::ApplicationData,
                    ProtocolVersion::TLSv1_2,
                    &mut wire,
                );
                let Err(e) = alg.decrypter(key(alg), iv()).decrypt(opaque, 5) else {
                    panic!("{suite:?}: a record with no content type was accepted");
                };
                errors.push(e);
            }
            assert_eq!(errors[0], errors[1], "{suite:?}");
            assert_ne!(
                errors[0],
                Error::DecryptError,
                "{suite:?}: it did authenticate"
            );
        }
    }

    #[test]
    fn ring_only_with_vaes_and_avx2_and_no_avx512() {
        assert!(prefers_ring(true, false));
        assert!(!prefers_ring(true, true));
        assert!(!prefers_ring(false, false));
        assert!(!prefers_ring(false, true));
    }

    /// The build-info label names the implementation chosen here.
    #[test]
    fn aes_gcm_names_the_record_implementation() {
        let want = if records_with_ring() {
            "ring"
        } else {
            "aws-lc"
        };
        assert_eq!(aes_gcm(), want);
    }

    /// `credentials::revocation::judge` verifies with aws-lc's default
    /// provider (it sits below this layer): its signature algorithms must
    /// be this provider's.
    #[test]
    fn signatures_are_verified_as_aws_lc_default_verifies_them() {
        let ours = crypto_provider().signature_verification_algorithms;
        let base = rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms;
        assert_eq!(ours.supported_schemes(), base.supported_schemes());
        assert_eq!(format!("{:?}", ours.all), format!("{:?}", base.all));
    }

    #[test]
    fn only_the_tls13_aes_gcm_suites_change_and_the_order_is_kept() {
        // Not FIPS-validated code: the provider must never say otherwise.
        assert!(!RING_AES_128_GCM.fips() && !RING_AES_256_GCM.fips());
        let base = rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES;
        let mixed: Vec<_> = base.iter().map(|s| with_ring_records(*s)).collect();
        assert_eq!(
            mixed.iter().map(|s| s.suite()).collect::<Vec<_>>(),
            base.iter().map(|s| s.suite()).collect::<Vec<_>>()
        );
        for (m, b) in mixed.iter().zip(base) {
            let ring = matches!(
                b.suite(),
                CipherSuite::TLS13_AES_128_GCM_SHA256 | CipherSuite::TLS13_AES_256_GCM_SHA384
            );
            let (SupportedCipherSuite::Tls13(m), SupportedCipherSuite::Tls13(b)) = (m, b) else {
                assert_eq!(m.suite(), b.suite());
                continue;
            };
            assert_eq!(
                std::ptr::eq(
                    m.aead_alg as *const _ as *const u8,
                    b.aead_alg as *const _ as *const u8
                ),
                !ring,
                "{:?}",
                b.common.suite
            );
        }
    }
}
