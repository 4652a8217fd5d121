//! Hostile load at CI scale, against the real binary: the limits of
//! docs/sizing.md and docs/security.md hold with more connections than a
//! soft fd limit of 1024 allows, under a flood of silent and garbage
//! sockets, and against peers that pin pre-authentication memory. The
//! full-size runs (4,000 connections, 2,000 flood sockets, 1,000 64 KB
//! ClientHellos) and their figures are in `benches/` (`BENCH_ONLY=hostile`);
//! these are sized to stay well under a minute on two loaded cores.

use crate::common;

use common::http;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::expo::Exposition;
use common::*;
use mtls_sidecar::pki::Role;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinSet;

/// The soft `RLIMIT_NOFILE` a container under containerd 2.x, or a systemd
/// service without `LimitNOFILE=`, starts with.
const SOFT_NOFILE: u64 = 1024;
/// The hard limit the scale case needs above the soft one (what such a
/// container gets).
const HARD_NOFILE: u64 = 20_000;

/// Starts the binary with a soft descriptor limit of 1024 under a hard one
/// of at least [`HARD_NOFILE`] (raised when this process may, as root can;
/// else the hard limit it has), and waits until its route listens.
async fn start_low_fd(args: &[&str]) -> Sidecar {
    let own_hard = common::raise_nofile();
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    use std::os::unix::process::CommandExt;
    // SAFETY: only setrlimit, which is async-signal-safe, runs in the child
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: SOFT_NOFILE,
                rlim_max: HARD_NOFILE.max(own_hard),
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                return Ok(());
            }
            let lim = libc::rlimit {
                rlim_cur: SOFT_NOFILE,
                rlim_max: own_hard,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let sc = Sidecar::from_command(cmd);
    sc.wait_log(&[" listening ", "route="]).await;
    sc
}

/// The child's descriptor limits as it started (`/proc/PID/limits` shows
/// the current ones, which the sidecar raises; its log says what it found).
fn started_with_soft_limit(sc: &Sidecar) -> String {
    let line = sc
        .logs()
        .into_iter()
        .find(|l| l.contains("file descriptor limit"));
    line.map(|l| field(&l, "was")).unwrap_or_default()
}

/// The pid of this process's child whose command line has `arg` (each
/// sidecar here gets its own temporary `--tls-dir`, which names it).
fn pid_of(arg: &std::path::Path) -> u32 {
    let me = std::process::id();
    let arg = arg.to_str().unwrap().as_bytes();
    let found = std::fs::read_dir("/proc").ok().and_then(|dir| {
        dir.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (ppid == me && cmdline.split(|b| *b == 0).any(|a| a == arg)).then_some(pid)
        })
    });
    found.expect("the sidecar's pid")
}

/// A `/proc/PID/status` figure in KiB (`VmRSS:`, `RssAnon:`); 0 when
/// unreadable.
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

/// VmRSS of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// Anonymous resident memory of a process (heap, arenas, stacks: what a
/// leak grows), KiB. Unlike VmRSS it leaves out the binary's code pages,
/// which a flood faults in the first time it runs the refusal paths (~2 MB
/// of a debug build's text, varying with fault-around and page cache):
/// shared, clean and reclaimable, not memory the flood kept.
fn anon_kib(pid: u32) -> u64 {
    status_kib(pid, "RssAnon:")
}

/// Open descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(usize::MAX)
}

fn failures(m: &Exposition, reason: &str) -> f64 {
    m.value(
        "mtls_sidecar_tls_handshake_failures_total",
        &[("route", "server"), ("reason", reason)],
    )
    .unwrap_or(0.0)
}

async fn pending_handshakes(admin: &str) -> u64 {
    let s = http::request(admin, "GET", "/status").await;
    let doc: serde_json::Value = serde_json::from_str(&s.body).expect("status json");
    doc["routes"][0]["pending_handshakes"]
        .as_u64()
        .expect("pending_handshakes")
}

/// One authenticated connection with a round trip, closed, and the server
/// done with it (its first connection builds state lazily; its sockets
/// must be gone before descriptors are counted).
async fn warm_up(s: &ServerSide) {
    let mut tls = s.connect_good().await;
    assert_eq!(roundtrip(&mut tls, b"warm").await, b"warm");
    tls.shutdown().await.expect("close_notify");
    drop(tls);
    s.sidecar.wait_log(&["connection closed"]).await;
}

/// Connects to `addr` and does one round trip of a message naming `i`;
/// returns the connection, still open.
async fn open_with_roundtrip(addr: String, i: usize) -> Result<TcpStream, String> {
    let attempt = async {
        let mut s = TcpStream::connect(&addr).await.map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let msg = format!("connection {i:06}");
        s.write_all(msg.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut back = vec![0u8; msg.len()];
        s.read_exact(&mut back).await.map_err(|e| e.to_string())?;
        if back != msg.as_bytes() {
            return Err(format!("echo mismatch: {back:?}"));
        }
        Ok(s)
    };
    tokio::time::timeout(DEADLINE, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("no round trip within {DEADLINE:?}")))
}

/// Opens `n` connections, `parallel` at a time, each with a round trip.
async fn open_many(addr: &str, n: usize, parallel: usize) -> Vec<TcpStream> {
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(n);
    let mut launched = 0;
    while out.len() < n {
        while launched < n && set.len() < parallel {
            set.spawn(open_with_roundtrip(addr.to_string(), launched));
            launched += 1;
        }
        match set.join_next().await {
            Some(Ok(Ok(s))) => out.push(s),
            Some(Ok(Err(e))) => panic!("connection {} of {n} failed: {e}", out.len()),
            Some(Err(e)) => panic!("connector task: {e}"),
            None => break,
        }
    }
    out
}

/// Scale: a pair whose sidecars both start with a soft fd limit of 1024
/// carries 1,200 concurrent connections (2,400+ descriptors in each
/// sidecar), each with a round trip, and gives every descriptor back once
/// they close. Before the limits landed (12ed94e) the soft limit was never
/// raised and the client sidecar failed with EMFILE after ~500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pair_started_with_1024_fds_carries_1200_connections() {
    const N: usize = 1_200;
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::new("scale CA");
    let server_dir = pki.dir(tmp.path(), "replica", &pki.leaf(REPLICA, Role::Server));
    let client_dir = pki.dir(
        tmp.path(),
        "controller",
        &pki.leaf(CONTROLLER, Role::Client),
    );
    let echo = echo_target().await;
    let d = server_dir.to_str().unwrap();
    let echo_addr = echo.addr.to_string();
    let server = start_low_fd(&[
        "server",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &echo_addr,
        "--tls-dir",
        d,
        "--allow-san",
        CONTROLLER,
    ])
    .await;
    let server_addr = server.addr("server");
    let client = start_low_fd(&[
        "client",
        "--listen",
        "127.0.0.1:0",
        "--target",
        &server_addr,
        "--server-name",
        REPLICA,
        "--tls-dir",
        client_dir.to_str().unwrap(),
    ])
    .await;
    let addr = client.addr("client");
    let pids = [pid_of(&client_dir), pid_of(&server_dir)];

    // Warm up (first handshakes, lazily built state), then the baseline.
    drop(open_many(&addr, 5, 5).await);
    eventually("warm-up connections closed", || {
        echo.accepted() == 5
            && client.log_count("connection closed") >= 5
            && server.log_count("connection closed") >= 5
    })
    .await;
    // The baseline once both sides hold still: a warm-up connection's
    // descriptor closes just after its "closed" line, and a baseline read
    // before that is one too high (seen: 2415 against 2416 needed).
    let mut last = pids.map(fds);
    eventually("descriptors settled after the warm-up", || {
        let now = pids.map(fds);
        std::mem::replace(&mut last, now) == now
    })
    .await;
    let fds_before = last;
    let rss_before: u64 = pids.iter().map(|p| rss_kib(*p)).sum();

    let started = Instant::now();
    let conns = open_many(&addr, N, 64).await;
    let took = started.elapsed();
    assert_eq!(conns.len(), N);
    assert_eq!(echo.accepted(), N + 5);
    // Every connection's descriptors, awaited: the last ones open while
    // the replies are already on their way.
    eventually("two descriptors per connection on each side", || {
        pids.map(fds)
            .iter()
            .zip(fds_before)
            .all(|(during, before)| *during >= before + 2 * N)
    })
    .await;
    let fds_during = pids.map(fds);
    for (during, before) in fds_during.iter().zip(fds_before) {
        assert!(
            *during >= before + 2 * N,
            "each sidecar holds two descriptors per connection: {during} vs {before}"
        );
    }
    let rss_during: u64 = pids.iter().map(|p| rss_kib(*p)).sum();
    let per_conn = rss_during.saturating_sub(rss_before) as f64 / N as f64;
    eprintln!(
        "{N} connections in {took:?}; fds {fds_before:?} -> {fds_during:?}; \
         RSS (both) {rss_before} -> {rss_during} KiB, {per_conn:.1} KiB per connection"
    );
    // A regression guard only (~24 KiB here, debug build): the precise
    // figure is the bench's, on the release build (<= 24 KiB). 32 KiB is
    // what two idle copy buffers held per connection used to cost.
    assert!(
        per_conn <= 32.0,
        "{per_conn:.1} KiB per idle connection (both sidecars)"
    );

    drop(conns);
    for (pid, before) in pids.iter().zip(fds_before) {
        let pid = *pid;
        eventually("descriptors back to the baseline", || fds(pid) <= before).await;
    }
    // The set-up was what it claims: both started with a soft limit of 1024.
    assert_eq!(started_with_soft_limit(&server), SOFT_NOFILE.to_string());
    assert_eq!(started_with_soft_limit(&client), SOFT_NOFILE.to_string());
}

/// Bytes that are not TLS at all (an HTTP request to the TLS port) or a TLS
/// record header followed by nonsense: refused at once, `not_tls` or
/// `protocol`, but each still costs an accept and a handshake task.
fn garbage(i: usize) -> Vec<u8> {
    if i.is_multiple_of(2) {
        format!("GET /{i} HTTP/1.1\r\nHost: replica\r\n\r\n").into_bytes()
    } else {
        let mut v = vec![0x16, 0x03, 0x01, 0x00, 0x40, 0x01, 0x00, 0x00, 0x3c];
        v.extend((0..60).map(|k| (i.wrapping_mul(31).wrapping_add(k) % 251) as u8));
        v
    }
}

/// Flood, sized for CI: 300 silent and 300 garbage sockets on a server
/// route with `--max-handshakes 64` and `--max-connections 4` (silent ones
/// would hold their handshakes for the whole 60 s timeout). An
/// authenticated peer still completes a handshake and a round trip within
/// 5 s (generous: it takes milliseconds; before the limits, the first four
/// silent sockets held all four connection slots and it waited out the
/// 60 s timeout), the pending set never passes 64, the oldest were closed
/// as `overload`, and once the flood ends the process gives back every
/// descriptor and its memory: anonymous memory (heap, arenas, stacks)
/// within 2 MB of before. The flood's own
/// peak is small (~1.5 MB: only 64 handshakes are ever pending, which is
/// the point), so this is a leak guard, 3.5 KiB per flood socket, with
/// room for what the allocator keeps; giving back a large peak is
/// `memory_held_by_pending_handshakes_is_given_back`'s case.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_and_garbage_sockets_does_not_lock_out_the_controller() {
    const SILENT: usize = 300;
    const GARBAGE: usize = 300;
    const MAX_HANDSHAKES: usize = 64;
    common::raise_nofile();
    let s = ServerSide::start(&[
        "--max-handshakes",
        &MAX_HANDSHAKES.to_string(),
        "--max-connections",
        "4",
        "--handshake-timeout",
        "60s",
        "--admin",
        "127.0.0.1:0",
    ])
    .await;
    let admin = s.sidecar.admin();
    let pid = pid_of(&s.server_dir);
    // Warm up, then the baseline.
    warm_up(&s).await;
    let fds_before = fds(pid);
    let anon_before = anon_kib(pid);
    // 0 would be an unreadable RssAnon, and make the leak guard vacuous.
    assert!(anon_before > 0, "no RssAnon for pid {pid}");

    // The pending set is sampled throughout the flood, not once after it.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (admin, sampling) = (admin.clone(), sampling.clone());
        async move {
            let mut samples = Vec::new();
            while sampling.load(Ordering::Relaxed) {
                samples.push(pending_handshakes(&admin).await);
            }
            samples
        }
    });
    // Bounded: a route that stops accepting (as the old one did once its
    // four slots were taken) leaves connects hanging in SYN retries.
    // Silent sockets first: once they are all accepted the pending set
    // stands full (each silent one past the 64th evicted the oldest, and
    // none ends for 60 s), which the test awaits instead of hoping a
    // sample lands inside the flood; then the garbage, each refused.
    let open_flood = async |from: usize, to: usize, flood: &mut Vec<TcpStream>| {
        for i in from..to {
            let mut sock = TcpStream::connect(&s.addr).await.expect("flood connect");
            if i >= SILENT {
                // The sidecar may already have closed it: that is its answer.
                let _ = sock.write_all(&garbage(i)).await;
            }
            flood.push(sock);
        }
    };
    let mut flood = Vec::with_capacity(SILENT + GARBAGE);
    tokio::time::timeout(DEADLINE, open_flood(0, SILENT, &mut flood))
        .await
        .expect("the route kept accepting the flood's silent sockets");
    // The full set, seen: it holds until the garbage arrives.
    let full = tokio::time::timeout(DEADLINE, async {
        while pending_handshakes(&admin).await != MAX_HANDSHAKES as u64 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    full.await.unwrap_or_else(|_| {
        panic!("the pending set never stood full at {MAX_HANDSHAKES} after {SILENT} silent sockets")
    });
    tokio::time::timeout(DEADLINE, open_flood(SILENT, SILENT + GARBAGE, &mut flood))
        .await
        .expect("the route kept accepting the flood's garbage sockets");

    let started = Instant::now();
    let through = async {
        let mut tls = s.connect_good().await;
        assert_eq!(roundtrip(&mut tls, b"through").await, b"through");
        tls
    };
    let tls = tokio::time::timeout(Duration::from_secs(5), through)
        .await
        .expect("the controller got through the flood within 5 s");
    eprintln!("controller through the flood in {:?}", started.elapsed());
    drop(tls);

    // The sidecar may still be accepting the flood's tail: wait for the
    // counts rather than read them once.
    let m = scrape_until(
        &admin,
        "the oldest closed as overload, and garbage refused",
        |m| {
            failures(m, "overload") >= (SILENT - MAX_HANDSHAKES) as f64
                && failures(m, "not_tls") + failures(m, "protocol") >= 1.0
        },
    )
    .await;
    let overload = failures(&m, "overload");
    // Every silent socket past the first 64 evicted one: the set stood
    // full, and no sample saw it past full.
    sampling.store(false, Ordering::Relaxed);
    let samples = sampler.await.unwrap();
    let peak = samples.iter().copied().max().unwrap_or(0);
    eprintln!("pending handshakes: {} samples, peak {peak}", samples.len());
    assert!(
        peak <= MAX_HANDSHAKES as u64,
        "{peak} pending handshakes (of at most {MAX_HANDSHAKES}): {samples:?}"
    );
    let anon_flood = anon_kib(pid);

    drop(flood);
    let deadline = Instant::now() + DEADLINE;
    while pending_handshakes(&admin).await > 0 {
        assert!(Instant::now() < deadline, "pending handshakes never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eventually("descriptors back to the baseline", || {
        fds(pid) <= fds_before
    })
    .await;
    let margin = 2 * 1024;
    let start_wait = Instant::now();
    eventually("anonymous memory back near its pre-flood figure", || {
        anon_kib(pid) <= anon_before + margin
    })
    .await;
    eprintln!(
        "anonymous memory {anon_before} -> {anon_flood} (flood) -> {} KiB after {:?}; overload {overload}",
        anon_kib(pid),
        start_wait.elapsed()
    );
}

/// A ClientHello that announces a 65,000-byte handshake message and sends
/// `body` bytes of it in 16 KiB records, never the end.
fn partial_client_hello(body: usize) -> Vec<u8> {
    let mut msg = vec![0x01, 0x00, 0xfd, 0xe8]; // ClientHello, 65,000 bytes
    msg.extend((0..body).map(|k| (k % 251) as u8));
    let mut out = Vec::with_capacity(msg.len() + msg.len() / 16384 * 5 + 5);
    for chunk in msg.chunks(16384) {
        out.extend_from_slice(&[0x16, 0x03, 0x01]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Opens `n` sockets that each send `hello` and then stay silent; returns
/// them (some may already be closed by the sidecar).
async fn partial_hellos(addr: &str, n: usize, hello: &[u8]) -> Vec<TcpStream> {
    let mut set = JoinSet::new();
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let (addr, hello) = (addr.to_string(), hello.to_vec());
        set.spawn(async move {
            let mut s = TcpStream::connect(&addr).await.expect("connect");
            // A write may fail once the sidecar has had enough: fine.
            let _ = tokio::time::timeout(DEADLINE, s.write_all(&hello)).await;
            s
        });
        if set.len() >= 64 {
            if let Some(r) = set.join_next().await {
                out.push(r.expect("peer task"));
            }
        }
    }
    while let Some(r) = set.join_next().await {
        out.push(r.expect("peer task"));
    }
    out
}

/// Pre-authentication memory, sized for CI, with `--max-handshakes 50`.
/// First 400 peers each send most of a 64 KB ClientHello (the issue's
/// attack): every one is closed at the 32 KiB pre-authentication cap, none
/// held until the handshake timeout. Then 400 send just under the cap and
/// stall (the most a peer can pin): only the newest 50 are held, so what
/// they pin is bounded by `--max-handshakes` x the cap, not by the number
/// of peers. Before (12ed94e), each 64 KB hello was held whole until the
/// handshake timeout, and nothing bounded how many.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_client_hellos_are_cut_at_the_cap_and_bounded_by_max_handshakes() {
    const N: usize = 400;
    const MAX_HANDSHAKES: usize = 50;
    common::raise_nofile();
    let s = ServerSide::start(&[
        "--max-handshakes",
        &MAX_HANDSHAKES.to_string(),
        "--handshake-timeout",
        "60s",
        "--admin",
        "127.0.0.1:0",
    ])
    .await;
    let admin = s.sidecar.admin();
    let pid = pid_of(&s.server_dir);
    warm_up(&s).await;
    let fds_before = fds(pid);
    let rss_before = rss_kib(pid);

    // 64 KB hellos: each is cut off at the cap (the newest 50 could not
    // have been evicted: only the cap closes them).
    let big = partial_client_hello(64 * 1024 - 1000);
    let peers = partial_hellos(&s.addr, N, &big).await;
    let mut closing = JoinSet::new();
    for mut p in peers {
        closing.spawn(async move { read_until_closed(&mut p).await.len() });
    }
    while let Some(r) = closing.join_next().await {
        assert_eq!(
            r.expect("reader"),
            0,
            "the sidecar answered a partial hello"
        );
    }
    assert!(
        !s.sidecar
            .warn_lines(&["before completing its handshake"])
            .is_empty(),
        "no hello refused at the cap"
    );

    // Hellos just under the cap, held: bounded by --max-handshakes.
    let small = partial_client_hello(31 * 1024);
    let peers = partial_hellos(&s.addr, N, &small).await;
    let deadline = Instant::now() + DEADLINE;
    while pending_handshakes(&admin).await < MAX_HANDSHAKES as u64 {
        assert!(Instant::now() < deadline, "the hellos were not held");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rss_held = rss_kib(pid);
    let held = rss_held.saturating_sub(rss_before);
    eprintln!("RSS {rss_before} KiB; {N} hellos of 31 KiB, {MAX_HANDSHAKES} held: {rss_held} KiB");
    // One held handshake pins ~45 KiB (the cap, rustls's buffer growth,
    // the task), so all 400 held would be ~18 MB; 50 held are ~2.3 MB plus
    // what the allocator still keeps of the evicted ones. Half of the
    // unbounded figure tells the two apart with room for that.
    assert!(
        held <= (N as u64 * 45) / 2,
        "{held} KiB for {MAX_HANDSHAKES} held handshakes"
    );
    assert_eq!(pending_handshakes(&admin).await, MAX_HANDSHAKES as u64);
    drop(peers);
    eventually("descriptors back to the baseline", || {
        fds(pid) <= fds_before
    })
    .await;
}

/// Memory pinned before authentication is given back: 400 peers each hold
/// a handshake with just under the 32 KiB cap buffered (~18 MB in all, at
/// the default `--max-handshakes`), then close; the server's RSS comes back
/// within 4 MB of its figure before them (the product's margin: well under
/// the peak, so it fails when the allocator keeps what the burst grew,
/// which glibc does without `src/process/memtrim.rs`'s trim). Before (12ed94e) RSS
/// stayed at its peak (the issue: 1,000 peers, 8 MB -> 77 MB, for good).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_held_by_pending_handshakes_is_given_back() {
    const N: usize = 400;
    common::raise_nofile();
    let s = ServerSide::start(&["--handshake-timeout", "60s"]).await;
    let pid = pid_of(&s.server_dir);
    warm_up(&s).await;
    let fds_before = fds(pid);
    let rss_before = rss_kib(pid);

    let small = partial_client_hello(31 * 1024);
    let peers = partial_hellos(&s.addr, N, &small).await;
    // Counted by descriptors, which every version has, not `/status`.
    eventually("every hello held", || fds(pid) >= fds_before + N).await;
    let rss_held = rss_kib(pid);
    drop(peers);
    eventually("every held handshake ended", || fds(pid) <= fds_before).await;
    let closed = Instant::now();
    let margin = 4 * 1024;
    eventually(
        "RSS back within 4 MB of its figure before the peers",
        || rss_kib(pid) <= rss_before + margin,
    )
    .await;
    eprintln!(
        "RSS {rss_before} KiB -> {rss_held} KiB with {N} held -> {} KiB {:?} after they closed",
        rss_kib(pid),
        closed.elapsed()
    );
}

/// The listen queue absorbs a burst of connects. A flood can outpace the
/// accept loop for a moment (2,000 sockets 128 at a time did, in the
/// bench); with tokio's default backlog of 128 the kernel then dropped
/// SYNs, and a real peer caught in the burst waited a whole SYN
/// retransmit (1,023 ms measured). Here the sidecar is stopped (SIGSTOP:
/// its accept loop frozen, a worst case of falling behind) while 1,000
/// connects arrive: every one completes in the kernel's queue, and once
/// resumed the sidecar still serves the controller. Before, 129 did and
/// the rest hung in SYN retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_connects_fits_in_the_listen_queue() {
    common::raise_nofile();
    let somaxconn: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4096);
    // The kernel caps any backlog at somaxconn (4096 by default).
    let burst = somaxconn.min(1_000);
    assert!(
        burst > 128,
        "net.core.somaxconn is {somaxconn}: no room to test above 128"
    );
    let s = ServerSide::start(&[]).await;
    warm_up(&s).await;
    s.sidecar.signal(libc::SIGSTOP);
    let mut set = JoinSet::new();
    for _ in 0..burst {
        let addr = s.addr.clone();
        set.spawn(async move {
            // Generous: a queued connect completes in microseconds; a
            // dropped SYN is retried after 1 s, then 3 s.
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok)
        });
    }
    let mut queued = Vec::new();
    while let Some(r) = set.join_next().await {
        queued.extend(r.expect("connector"));
    }
    s.sidecar.signal(libc::SIGCONT);
    assert_eq!(
        queued.len(),
        burst,
        "only {} of {burst} connects were queued while the sidecar was stopped",
        queued.len()
    );
    drop(queued);
    let mut tls = tokio::time::timeout(DEADLINE, s.connect_good())
        .await
        .expect("the controller got through after the burst");
    assert_eq!(roundtrip(&mut tls, b"after").await, b"after");
}

/// A TLS 1.2 peer that asks to renegotiate is told no (rustls's
/// `no_renegotiation` warning) by the read that finds its ClientHello,
/// not at the sidecar's next write: here the target never writes again,
/// so an answer left queued would never leave.
#[tokio::test(flavor = "multi_thread")]
async fn a_renegotiation_request_is_answered_at_once() {
    if tools::skip_unless(&["openssl"]) {
        return;
    }
    let srv = ServerSide::start(&["--tls-min-version", "1.2"]).await;
    let d = &srv.controller_dir;
    let mut p = common::foreign::s_client_with_cert(&srv.addr, d, REPLICA, &["-tls1_2", "-state"]);
    p.send(b"before renegotiation\n").await;
    p.wait_stdout("before renegotiation\n").await;
    // s_client's command: a line "R" renegotiates (TLS 1.2).
    p.send(b"R\n").await;
    p.wait_output("no renegotiation").await;
}
