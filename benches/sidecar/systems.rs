//! The systems under test: the sidecar pair (spawned here), the plaintext
//! `plain-rust` forwarder pair (this executable re-run) and any external
//! pair (`--external`, see `peers.sh`).

use std::collections::HashMap;

use mtls_sidecar::pki::{write_secret_dir, DevCa, LeafSpec, Role};
use mtls_sidecar::tools::atomic_writer::AtomicDir;

use crate::measure::{measure, System};
use crate::options::{usage, Opts, Scale};
use crate::plain_forward::PlainForwarder;
use crate::results::Row;
use crate::rotation::Rotator;
use crate::scenarios::wait_until_serving;
use crate::sidecar_process::{sidecar_bin, Sidecar, CONTROLLER, REPLICA};
use crate::target::Target;

pub fn run_external(opts: &Opts, scale: &Scale, kv: &HashMap<String, String>) -> Row {
    let get = |k: &str| {
        kv.get(k)
            .cloned()
            .unwrap_or_else(|| usage(&format!("--external needs {k}=")))
    };
    let target = Target::start(&get("target"));
    let sys = System {
        name: get("name"),
        listen: get("listen").parse().expect("listen=HOST:PORT"),
        pids: kv
            .get("pids")
            .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default(),
        memory: true,
        idle: kv
            .get("idle")
            .and_then(|v| v.parse().ok())
            .unwrap_or(scale.idle),
        resuming: kv
            .get("resumed")
            .map(|a| a.parse().expect("resumed=HOST:PORT")),
        resuming_pids: kv
            .get("rpids")
            .map(|p| p.split(',').filter_map(|x| x.trim().parse().ok()).collect())
            .unwrap_or_default(),
    };
    wait_until_serving(sys.listen);
    measure(opts, scale, &sys, &target, None)
}

pub fn run_sidecar(opts: &Opts, scale: &Scale) -> Row {
    let bin = sidecar_bin();
    let tmp = tempfile::tempdir().expect("tempdir");
    let ca = DevCa::new("bench CA", 30).expect("mint CA");
    let server_dir = AtomicDir::new(&tmp.path().join("server")).expect("server dir");
    let publish = |dir: &AtomicDir| {
        let leaf = ca
            .issue(&LeafSpec::dns(REPLICA, Role::Server, 30))
            .expect("issue server leaf");
        dir.publish(&[
            ("tls.crt", leaf.cert_pem.as_bytes()),
            ("tls.key", leaf.key_pem.as_bytes()),
            ("ca.crt", ca.cert_pem.as_bytes()),
        ])
        .expect("publish server revision");
    };
    publish(&server_dir);
    let client_leaf = ca
        .issue(&LeafSpec::dns(CONTROLLER, Role::Client, 30))
        .expect("issue client leaf");
    let client_dir = tmp.path().join("client");
    write_secret_dir(&client_dir, &client_leaf, &ca.cert_pem).expect("client dir");

    let target = Target::start("127.0.0.1:0");
    let max = (scale.idle * 2 + 1000).to_string();
    let target_addr = target.addr.to_string();
    let pair = |extra: &[&str]| {
        let mut args = vec![
            "server",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &target_addr,
            "--tls-dir",
            server_dir.path().to_str().unwrap(),
            "--allow-san",
            CONTROLLER,
            "--max-connections",
            &max,
            "--reload-interval",
            scale.reload_interval,
        ];
        args.extend_from_slice(extra);
        let server = Sidecar::start(&bin, &args);
        let server_listen = server.listen.to_string();
        let mut args = vec![
            "client",
            "--listen",
            "127.0.0.1:0",
            "--target",
            &server_listen,
            "--server-name",
            REPLICA,
            "--tls-dir",
            client_dir.to_str().unwrap(),
            "--max-connections",
            &max,
        ];
        args.extend_from_slice(extra);
        let client = Sidecar::start(&bin, &args);
        (server, client)
    };
    let (server, client) = pair(&[]);
    // The same pair with `--resumption`, for the `resumed` scenario only.
    let resuming = opts.wants("resumed").then(|| pair(&["--resumption"]));
    let sys = System {
        name: opts.name.clone().unwrap_or_else(|| "mtls-sidecar".into()),
        listen: client.listen,
        pids: vec![client.pid(), server.pid()],
        memory: true,
        idle: scale.idle,
        resuming: resuming.as_ref().map(|(_, c)| c.listen),
        resuming_pids: resuming
            .as_ref()
            .map(|(s, c)| vec![c.pid(), s.pid()])
            .unwrap_or_default(),
    };
    let rotate = Rotator {
        publish: &|| publish(&server_dir),
        applied: &|| server.count("applied credential revision"),
    };
    let row = measure(opts, scale, &sys, &target, Some(&rotate));
    drop(client);
    drop(server);
    row
}

/// The `plain-rust` ceiling: two plaintext forwarder processes (this
/// executable re-run, see `plain_forward`), client side → server side →
/// target. Their pids are given to `measure` for the CPU they spend per
/// unit of work (what the pair costs with no TLS at all, beside the
/// sidecar's), not for memory: the forwarder is the whole load generator's
/// binary, so its RSS would measure that; and there is no identity to
/// rotate.
pub fn run_plain_rust(opts: &Opts, scale: &Scale) -> Row {
    let target = Target::start("127.0.0.1:0");
    let server = PlainForwarder::start(target.addr);
    let client = PlainForwarder::start(server.listen);
    let sys = System {
        name: opts.name.clone().unwrap_or_else(|| "plain-rust".into()),
        listen: client.listen,
        pids: vec![client.pid(), server.pid()],
        memory: false,
        idle: 0,
        resuming: None,
        resuming_pids: Vec::new(),
    };
    wait_until_serving(sys.listen);
    let row = measure(opts, scale, &sys, &target, None);
    drop(client);
    drop(server);
    row
}
