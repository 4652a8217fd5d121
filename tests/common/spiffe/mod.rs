//! Drives tests/common/spiffe/agent.py, an independent Workload API server in
//! Python (grpcio, protobuf encoded by hand from the spec's field numbers),
//! from the Rust tests: start it, push X.509 contexts, drop its streams,
//! stop and restart it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine;
use mtls_sidecar::identity::Role;
use mtls_sidecar::pki::{DevCa, Issued, LeafSpec};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::PrivateKeyDer;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::common::DEADLINE;

pub mod sidecar;

const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/common/spiffe/agent.py");

/// One running agent (killed on drop).
pub struct Agent {
    child: Child,
    pub socket: PathBuf,
    control: PathBuf,
}

impl Agent {
    /// Starts the agent in `dir`; with `serving` false only its control
    /// socket listens (the Workload API socket does not exist yet).
    pub fn start(dir: &Path, serving: bool) -> Agent {
        let socket = dir.join("agent.sock");
        let control = dir.join("control.sock");
        let mut cmd = Command::new("python3");
        cmd.arg(AGENT)
            .arg("--socket")
            .arg(&socket)
            .arg("--control")
            .arg(&control)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !serving {
            cmd.arg("--no-start");
        }
        let mut child = cmd
            .spawn()
            .expect("spawn python3 tests/common/spiffe/agent.py");
        let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
        let mut line = String::new();
        std::io::BufRead::read_line(&mut out, &mut line).expect("agent stdout");
        assert_eq!(line.trim(), "ready", "agent did not start");
        Agent {
            child,
            socket,
            control,
        }
    }

    /// The endpoint to give `--workload-api`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// Sends one control command; panics unless the agent says ok.
    pub async fn control(&self, cmd: Value) -> Value {
        let stream = tokio::net::UnixStream::connect(&self.control)
            .await
            .expect("control socket");
        let (r, mut w) = stream.into_split();
        w.write_all(format!("{cmd}\n").as_bytes()).await.unwrap();
        let mut line = String::new();
        tokio::time::timeout(DEADLINE, BufReader::new(r).read_line(&mut line))
            .await
            .expect("control answer in time")
            .unwrap();
        let answer: Value = serde_json::from_str(&line).expect("control answer");
        assert_eq!(answer["ok"], true, "control {cmd}: {answer}");
        answer
    }

    /// Streams one context of these SVIDs (and federated bundles).
    pub async fn push(&self, svids: &[&Svid], federated: &[(&str, &DevCa)]) {
        let fed: serde_json::Map<String, Value> = federated
            .iter()
            .map(|(td, ca)| (td.to_string(), json!([b64(&ca_der(ca))])))
            .collect();
        let svids: Vec<Value> = svids.iter().map(|s| s.json()).collect();
        self.control(json!({"op": "push", "svids": svids, "federated": fed}))
            .await;
    }

    /// Freezes the agent (SIGSTOP): its sockets stay open, nothing answers.
    pub fn pause(&self) {
        assert_eq!(self.signal(libc::SIGSTOP), 0, "SIGSTOP the agent");
    }

    /// Thaws a [`Agent::pause`]d agent (SIGCONT).
    pub fn resume(&self) {
        assert_eq!(self.signal(libc::SIGCONT), 0, "SIGCONT the agent");
    }

    /// `kill(2)`'s result.
    fn signal(&self, sig: i32) -> i32 {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return -1;
        };
        // SAFETY: a signal to our own child, which we have not waited for
        // (its pid cannot have been reused).
        unsafe { libc::kill(pid, sig) }
    }

    pub async fn op(&self, op: &str) -> Value {
        self.control(json!({ "op": op })).await
    }

    /// Waits until the agent has at least `n` open streams.
    pub async fn wait_streams(&self, n: u64) {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let s = self.op("stats").await;
            if s["streams"].as_u64().unwrap_or(0) >= n {
                return;
            }
            assert!(Instant::now() < deadline, "agent streams: {s}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One X.509-SVID: its leaf and key, and the bundle sent with it.
pub struct Svid {
    pub id: String,
    pub leaf: Issued,
    pub bundle: Vec<Vec<u8>>,
}

impl Svid {
    /// An SVID for `id` issued by `ca` (client and server usage), sent with
    /// `ca` as its trust domain's bundle.
    pub fn new(ca: &DevCa, id: &str) -> Svid {
        let leaf = svid_leaf(ca, &[id]);
        Svid {
            id: id.to_string(),
            leaf,
            bundle: vec![ca_der(ca)],
        }
    }

    pub fn json(&self) -> Value {
        let key = PrivateKeyDer::from_pem_slice(self.leaf.key_pem.as_bytes()).unwrap();
        json!({
            "id": self.id,
            "chain": [b64(self.leaf.cert_der.as_ref())],
            "key": b64(key.secret_der()),
            "bundle": self.bundle.iter().map(|b| b64(b)).collect::<Vec<_>>(),
        })
    }
}

/// An X.509-SVID leaf from `ca` with these URI SANs (the first is its
/// SPIFFE ID), as the X.509-SVID spec shapes it: basicConstraints CA
/// false, digitalSignature, client and server usage; valid a day.
pub fn svid_leaf(ca: &DevCa, uris: &[&str]) -> Issued {
    svid_leaf_for(ca, uris, time::Duration::DAY)
}

/// Like [`svid_leaf`], valid for `lifetime` from now.
pub fn svid_leaf_for(ca: &DevCa, uris: &[&str], lifetime: time::Duration) -> Issued {
    svid_leaf_with(ca, uris, &[], lifetime)
}

/// Like [`svid_leaf`], also carrying these DNS SANs.
pub fn svid_leaf_dns(ca: &DevCa, uris: &[&str], dns: &[&str]) -> Issued {
    svid_leaf_with(ca, uris, dns, time::Duration::DAY)
}

fn svid_leaf_with(ca: &DevCa, uris: &[&str], dns: &[&str], lifetime: time::Duration) -> Issued {
    use rcgen::{
        CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
        SanType,
    };
    let ca_key = KeyPair::from_pem(&ca.key_pem).unwrap();
    let issuer = Issuer::from_ca_cert_pem(&ca.cert_pem, ca_key).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, "svid");
    params.subject_alt_names = uris
        .iter()
        .map(|u| SanType::URI((*u).try_into().unwrap()))
        .chain(
            dns.iter()
                .map(|d| SanType::DnsName((*d).try_into().unwrap())),
        )
        .collect();
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::MINUTE;
    params.not_after = now + lifetime;
    let mut serial = [0u8; 16];
    aws_lc_rs::rand::fill(&mut serial).unwrap();
    serial[0] = (serial[0] & 0x7f) | 1;
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    Issued {
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().clone(),
    }
}

/// A DNS-only leaf of `ca` (no SPIFFE ID).
pub fn dns_leaf(ca: &DevCa, name: &str) -> Issued {
    ca.issue(&LeafSpec::dns(name, Role::Both, 1)).unwrap()
}

pub fn ca_der(ca: &DevCa) -> Vec<u8> {
    rustls::pki_types::CertificateDer::from_pem_slice(ca.cert_pem.as_bytes())
        .unwrap()
        .to_vec()
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
