//! DER certificates and CRLs written back as PEM: how `/connections` hands a
//! live peer's chain and the trust in force (CRLs included) to `check --against`, which reads
//! them with the same PEM loader as every credential file.

use base64::Engine;

/// The certificates as concatenated PEM blocks (64-column base64).
pub fn certificates<D: AsRef<[u8]>>(ders: &[D]) -> String {
    blocks("CERTIFICATE", ders)
}

/// The CRLs as concatenated `X509 CRL` PEM blocks.
pub fn crls<D: AsRef<[u8]>>(ders: &[D]) -> String {
    blocks("X509 CRL", ders)
}

/// DER objects as concatenated PEM blocks of this label.
fn blocks<D: AsRef<[u8]>>(label: &str, ders: &[D]) -> String {
    let mut out = String::new();
    for der in ders {
        out.push_str(&format!("-----BEGIN {label}-----\n"));
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        for line in b64.as_bytes().chunks(64) {
            // Base64 output is ASCII: every chunk is valid UTF-8.
            out.push_str(&String::from_utf8_lossy(line));
            out.push('\n');
        }
        out.push_str(&format!("-----END {label}-----\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::CertificateDer;

    #[test]
    fn round_trips_through_the_credential_pem_loader() {
        let ders: Vec<Vec<u8>> = vec![vec![0x30, 0x03, 1, 2, 3], (0..200u8).collect()];
        let pem = super::certificates(&ders);
        let back: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.map(|c| c.as_ref().to_vec()))
            .collect::<Result<_, _>>()
            .expect("parses");
        assert_eq!(back, ders);
        assert!(pem.lines().all(|l| l.len() <= 64));
    }

    /// CRLs go out as `X509 CRL` blocks, which the CRL loader reads back.
    #[test]
    fn crls_round_trip_as_x509_crl_blocks() {
        use rustls_pki_types::CertificateRevocationListDer;
        let ders: Vec<Vec<u8>> = vec![vec![0x30, 0x03, 4, 5, 6], (0..100u8).collect()];
        let pem = super::crls(&ders);
        assert!(pem.starts_with("-----BEGIN X509 CRL-----\n"), "{pem}");
        let back: Vec<Vec<u8>> = CertificateRevocationListDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.map(|c| c.as_ref().to_vec()))
            .collect::<Result<_, _>>()
            .expect("parses");
        assert_eq!(back, ders);
    }
}
