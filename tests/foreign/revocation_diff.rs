//! The sidecar's revocation verdicts against OpenSSL's, scenario by
//! scenario. A seeded generator draws PKIs (one root, or one or two
//! intermediates; two CAs with one name; CDP present or absent; IDP absent,
//! matching, mismatched, mismatched by letter case, only user / only CA
//! certificates, without a name; CRLs at each level with and without a CRL
//! number, stale, not yet valid, signed by another key of the same name,
//! with a corrupted signature, from a CA whose keyUsage lacks cRLSign;
//! revoked, expired and not-yet-valid certificates), each is judged by
//! `openssl verify -crl_check` and `-crl_check_all` and by the sidecar's
//! judgement in process, and the two answers must agree through the table
//! of `revocation_diff/table.rs` (docs/revocation.md): the two deliberate
//! looser divergences, the listed stricter ones, nothing else.
//!
//! `MTLS_SIDECAR_DIFF_SCENARIOS=N` runs N scenarios (default 240),
//! `MTLS_SIDECAR_DIFF_SEED=S` starts from another seed,
//! `MTLS_SIDECAR_DIFF_VERBOSE=1` prints every judgement. A failing scenario
//! prints its seed, its shape, both verdicts and the directory its files
//! were kept in. A sample of the scenarios, every kind at least once, is
//! confirmed through real handshakes against one running sidecar whose
//! revisions are swapped kubelet-style.

use crate::common;

mod der;
mod gen;
mod judge;
mod mint;
mod openssl;
mod sample;
mod table;

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Instant;

use mtls_sidecar::credentials::CrlScope;

use gen::Shape;
use mint::Minted;
use table::Comparison;

const DEFAULT_SCENARIOS: usize = 240;
const DEFAULT_SEED: u64 = 0x5eed_2024;
/// Worker threads: openssl runs as a child process, so a few overlap well
/// even on two cores.
const THREADS: usize = 4;

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    let v = v.trim();
    let parsed = match v.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => v.parse(),
    };
    Some(parsed.unwrap_or_else(|e| panic!("{name}={v}: {e}")))
}

/// The seed of scenario `i` of a run starting at `seed`.
pub fn scenario_seed(seed: u64, i: usize) -> u64 {
    let mut r = gen::Rng::new(seed ^ (i as u64).wrapping_mul(0xa076_1d64_78bd_642f));
    r.next()
}

/// One scenario judged in one scope.
struct Row {
    describe: String,
    kinds: Vec<&'static str>,
    scope: CrlScope,
    openssl: openssl::Outcome,
    expected: Result<table::Expected, String>,
    actual: String,
    comparison: Comparison,
}

/// The in-process verdict of a minted scenario.
pub fn sidecar_verdict(m: &Minted, scope: CrlScope) -> String {
    judge::judge(
        m.ca_pem.as_bytes(),
        // The file holds the intermediates; a one-level PKI has none to
        // write, and an empty file is an error like any empty file.
        (m.shape.intermediates_file && !m.intermediates_pem.is_empty())
            .then_some(m.intermediates_pem.as_bytes()),
        m.crl_pem.as_deref().map(str::as_bytes),
        m.chain_pem().as_bytes(),
        scope,
        m.shape.usage,
        m.at,
    )
}

/// Judges one scenario both ways, in both scopes. Keeps its files (and says
/// where) when a comparison fails.
fn run_scenario(i: usize, seed: u64) -> Vec<Row> {
    let shape = Shape::draw(seed);
    let minted = mint::mint(&shape, &format!("s{i}"));
    let dir = tempfile::tempdir().expect("tempdir");
    openssl::write_files(&minted, dir.path());
    let has_crl = gen::issuer_has_crl(&shape);
    let held_broken: Vec<bool> = (0..shape.below)
        .map(|d| shape.crls[d].is_some_and(|c| c.broken.is_some()) && shape.held(d))
        .collect();
    let rows: Vec<Row> = [CrlScope::Leaf, CrlScope::Chain]
        .into_iter()
        .map(|scope| {
            let openssl = openssl::verify(&minted, dir.path(), scope);
            let expected = table::expected(&openssl, scope, shape.below, &has_crl, &held_broken);
            let actual = sidecar_verdict(&minted, scope);
            let comparison = table::compare(&shape, scope, &expected, &actual, judge::PATH_AWARE);
            Row {
                describe: shape.describe(),
                kinds: shape.kinds(),
                scope,
                openssl,
                expected,
                actual,
                comparison,
            }
        })
        .collect();
    if std::env::var_os("MTLS_SIDECAR_DIFF_VERBOSE").is_some() {
        for r in &rows {
            eprintln!(
                "scenario {i}, {}\n  scope {:?}: openssl {:?}, table {:?}, sidecar {}: {:?}",
                r.describe, r.scope, r.openssl.errors, r.expected, r.actual, r.comparison
            );
        }
    }
    if rows
        .iter()
        .any(|r| matches!(r.comparison, Comparison::Fail(_)))
    {
        let kept = dir.keep();
        for r in rows
            .iter()
            .filter(|r| matches!(r.comparison, Comparison::Fail(_)))
        {
            eprintln!(
                "DISAGREEMENT scenario {i}, {}\n  scope {:?}: openssl {:?} ({}), table {:?}, sidecar {}\n  {:?}\n  files kept in {}",
                r.describe,
                r.scope,
                r.openssl.errors,
                r.openssl.summary,
                r.expected,
                r.actual,
                r.comparison,
                kept.display()
            );
        }
    }
    rows
}

#[test]
fn sidecar_verdicts_match_openssl_through_the_table() {
    let n = env_number("MTLS_SIDECAR_DIFF_SCENARIOS").map_or(DEFAULT_SCENARIOS, |n| n as usize);
    let seed = env_number("MTLS_SIDECAR_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let started = Instant::now();
    let next = Mutex::new(0usize);
    let rows = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| loop {
                let i = {
                    let mut n_ = next.lock().unwrap();
                    let i = *n_;
                    *n_ += 1;
                    i
                };
                if i >= n {
                    return;
                }
                let out = run_scenario(i, scenario_seed(seed, i));
                rows.lock().unwrap().extend(out);
            });
        }
    });
    let rows = rows.into_inner().unwrap();
    let took = started.elapsed();

    let mut by_class: BTreeMap<String, usize> = BTreeMap::new();
    let mut today: BTreeMap<(&str, &str, String), usize> = BTreeMap::new();
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &rows {
        let key = match &r.comparison {
            Comparison::Agree => "agree".to_string(),
            Comparison::Looser(l) => format!("agree, deliberately looser: {l}"),
            Comparison::Stricter(d) => format!("stricter (listed): {d}"),
            Comparison::Today(d) => {
                let exp = r.expected.as_ref().map(|e| e.verdict).unwrap_or("?");
                *today.entry((d, exp, r.actual.clone())).or_default() += 1;
                format!("expected today: {d}")
            }
            Comparison::Fail(_) => "FAIL".to_string(),
        };
        *by_class.entry(key).or_default() += 1;
        if r.scope == CrlScope::Leaf {
            for k in &r.kinds {
                *kinds.entry(k).or_default() += 1;
            }
        }
    }
    eprintln!(
        "{n} scenarios (seed {seed:#x}), {} judgements, {THREADS} threads, {:.1} s",
        rows.len(),
        took.as_secs_f64()
    );
    for (k, v) in &by_class {
        eprintln!("  {v:5}  {k}");
    }
    for d in table::STRICTER {
        eprintln!("stricter by design, {}: {}", d.name, d.reason);
    }
    if !judge::PATH_AWARE {
        for d in table::TODAY {
            eprintln!("known today, {}: {}", d.name, d.reason);
        }
    }
    eprintln!("today's disagreements (name, table verdict, today's verdict):");
    for ((d, e, a), v) in &today {
        eprintln!("  {v:5}  {d}: table {e}, today {a}");
    }
    eprintln!("kinds:");
    for (k, v) in &kinds {
        eprintln!("  {v:5}  {k}");
    }
    if n >= DEFAULT_SCENARIOS {
        let missing: Vec<_> = gen::ALL_KINDS
            .iter()
            .filter(|k| !kinds.contains_key(*k))
            .collect();
        assert!(missing.is_empty(), "kinds never drawn: {missing:?}");
        // A listed divergence nothing exercises any more is stale: drop it.
        for d in table::STRICTER {
            let key = format!("stricter (listed): {}", d.name);
            assert!(by_class.contains_key(&key), "never seen: {key}");
        }
    }
    let failed = by_class.get("FAIL").copied().unwrap_or(0);
    assert_eq!(
        failed, 0,
        "{failed} judgements disagree with the table (above)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_is_confirmed_through_real_handshakes_against_one_sidecar() {
    let seed = env_number("MTLS_SIDECAR_DIFF_SEED").unwrap_or(DEFAULT_SEED);
    let shapes = sample::pick(seed);
    assert!(shapes.len() >= sample::MIN_SAMPLE);
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = mtls_sidecar::tools::atomic_writer::AtomicDir::new(&tmp.path().join("tls"))
        .expect("credential directory");
    // A first revision every sample scenario replaces: a root, the server's
    // identity, no CRL.
    let baseline = mint::mint(&Shape::draw(seed), "baseline");
    dir.publish(&[
        ("tls.crt", baseline.server_pem.as_bytes()),
        ("tls.key", baseline.server_key_pem.as_bytes()),
        ("ca.crt", baseline.ca_pem.as_bytes()),
    ])
    .expect("publish baseline");
    let echo = common::echo_target().await;
    let target = echo.addr.to_string();
    // The sample's leaves carry the name tests/common's server admits.
    assert_eq!(gen::PEER_NAME, common::CONTROLLER);
    let sc = common::start_server(
        dir.path(),
        &target,
        &["--crl-scope", "chain", "--admin", "127.0.0.1:0"],
    )
    .await;
    let started = Instant::now();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    let mut kinds = std::collections::BTreeSet::new();
    for (i, shape) in shapes.iter().enumerate() {
        let minted = mint::mint(shape, &format!("h{i}"));
        let expected = sidecar_verdict(&minted, sample::SCOPE);
        let got = sample::confirm(&sc, &dir, &minted, &expected).await;
        *outcomes.entry(got).or_default() += 1;
        kinds.extend(shape.kinds());
    }
    eprintln!(
        "{} scenarios through real handshakes in {:.1} s: {outcomes:?}",
        shapes.len(),
        started.elapsed().as_secs_f64()
    );
    let missing: Vec<_> = gen::ALL_KINDS
        .iter()
        .filter(|k| !kinds.contains(*k))
        .collect();
    assert!(missing.is_empty(), "kinds not sampled: {missing:?}");
}
