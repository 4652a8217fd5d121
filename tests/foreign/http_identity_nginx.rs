//! `--http-identity xfcc` with nginx as the HTTP/1.1 target: a second,
//! independent HTTP parser behind the server route (the Python target of
//! tests/e2e/http_identity.rs is the first). nginx runs as a foreground,
//! unprivileged process with its whole state in a temp dir and answers
//! each request with the x-forwarded-client-cert value it parsed, so the
//! test sees what an nginx-hosted application would read.
//!
//! `underscores_in_headers on` makes nginx accept `X_Forwarded_Client_Cert`
//! (by default it silently drops such names, which would hide a forgery
//! the sidecar let through), and nginx's `$http_x_forwarded_client_cert`
//! matches that spelling too. nginx 1.22 gives the first such header of a
//! request; the sidecar adds ours after every client header, so a forged
//! one that got through is the one nginx reports.

use crate::common;
use crate::common::http_identity as support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use support::*;

/// The config: one server on `port`, every path answering with the header
/// nginx parsed (body) and which of its connections and which request on
/// it carried it (headers).
fn config(dir: &Path, port: u16) -> String {
    let d = dir.display();
    format!(
        "daemon off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    underscores_in_headers on;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            add_header X-Connection $connection always;
            add_header X-Request-On-Connection $connection_requests always;
            return 200 \"$http_x_forwarded_client_cert\";
        }}
    }}
}}
"
    )
}

/// nginx, stopped (and waited for) when dropped: its master and worker
/// run in a process group of their own, killed whole (killing the master
/// alone would leave its worker running).
struct Nginx {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Nginx {
    /// Starts nginx on a free loopback port. The port is found by binding
    /// port 0 and releasing it, so another test may take it first: then
    /// nginx exits saying so and another port is tried.
    async fn start() -> Nginx {
        for _ in 0..5 {
            if let Some(n) = Nginx::try_start().await {
                return n;
            }
        }
        panic!("nginx found no free port in 5 tries");
    }

    async fn try_start() -> Option<Nginx> {
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config(dir.path(), port)).unwrap();
        let mut cmd = Command::new(tools::installed("nginx").expect("nginx"));
        cmd.arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        unprivileged(&mut cmd, dir.path());
        let child = cmd.spawn().expect("start nginx");
        let mut n = Nginx {
            child,
            addr: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        n.ready().await.then_some(n)
    }

    /// Waits until nginx wrote its pid file (it does so once its socket is
    /// bound) and accepts on its port; false if nginx exited because the
    /// port was taken; panics on any other exit.
    async fn ready(&mut self) -> bool {
        let dir = self._dir.path();
        let pid = self.child.id().to_string();
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
                if log.contains("Address already in use") {
                    return false;
                }
                panic!("nginx exited ({status}):\n{log}");
            }
            let written = std::fs::read_to_string(dir.join("nginx.pid")).unwrap_or_default();
            if written.trim() == pid && tokio::net::TcpStream::connect(&self.addr).await.is_ok() {
                return true;
            }
            assert!(Instant::now() < deadline, "nginx not ready in {DEADLINE:?}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        // The group's id is the master's pid (`process_group(0)`).
        if let Ok(pgid) = libc::pid_t::try_from(self.child.id()) {
            // SAFETY: kill(2) on the process group this test started; no memory is touched.
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Run as root (CI, containers), nginx is started as `nobody`, owning its
/// temp dir: a test target needs no privilege.
fn unprivileged(cmd: &mut Command, dir: &Path) {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    const NOBODY: u32 = 65534;
    std::os::unix::fs::chown(dir, Some(NOBODY), Some(NOBODY)).unwrap();
    cmd.uid(NOBODY).gid(NOBODY);
}

#[tokio::test]
async fn nginx_sees_only_our_identity_on_every_request_of_a_keep_alive_connection() {
    if tools::skip_unless(&["nginx"]) {
        return;
    }
    let ids = Ids::new();
    let nginx = Nginx::start().await;
    let sc = start_server(&ids.server_dir, &nginx.addr, &["--http-identity", "xfcc"]).await;
    let want = ids.expected();
    let mut c = Raw::connect(&sc.addr("server"), ids.tls(&["http/1.1"])).await;
    // The shared variants, then the mixed spelling alone (so it is the
    // first nginx would report).
    let mixed = [("mixed underscore", "x_forwarded-client_cert: Hash=01\r\n")];
    let mut requests = Vec::new();
    for (what, extra) in FORGED.iter().chain(&mixed) {
        let path = what.replace(' ', "-");
        requests.push((
            what.to_string(),
            format!("GET /{path} HTTP/1.1\r\nHost: t\r\n{extra}\r\n"),
        ));
    }
    // Two pipelined in one write, each forging a spelling.
    let pipelined = "GET /p1 HTTP/1.1\r\nHost: t\r\nX_Forwarded_Client_Cert: a\r\n\r\n\
                     GET /p2 HTTP/1.1\r\nHost: t\r\nx-forwarded-client-cert: b\r\n\r\n";
    let mut seen = Vec::new();
    for (what, req) in &requests {
        c.send(req.as_bytes()).await;
        seen.push((what.clone(), c.response().await));
    }
    c.send(pipelined.as_bytes()).await;
    for p in ["pipelined 1", "pipelined 2"] {
        seen.push((p.to_string(), c.response().await));
    }
    // Every variant is checked before the test fails, so a broken build
    // shows all it lets through.
    let mut wrong = Vec::new();
    let mut connections = Vec::new();
    for (i, (what, r)) in seen.iter().enumerate() {
        assert_eq!(r.status, 200, "{what}: {r:?}");
        let got = String::from_utf8_lossy(&r.body);
        if got != want {
            wrong.push(format!("{what}: nginx read {got:?}"));
        }
        connections.push(r.header("x-connection").map(str::to_string));
        assert_eq!(
            r.header("x-request-on-connection"),
            Some((i + 1).to_string().as_str()),
            "{what}: every request rides one nginx keep-alive connection"
        );
    }
    assert!(
        wrong.is_empty(),
        "forged identities reached nginx (want {want:?}): {wrong:#?}"
    );
    connections.dedup();
    assert_eq!(
        connections.len(),
        1,
        "one target connection: {connections:?}"
    );
}
