//! `plain-rust`: the ceiling of a user-space forwarder without crypto.
//!
//! A pair of plaintext forwarders, two processes like the sidecar pair:
//! client side → server side → target. Each is this executable re-run with
//! `--plain-forward LISTEN TARGET`: a tokio multi-thread runtime with 2
//! workers, TCP_NODELAY on every socket, both directions copied with 64 KiB
//! buffers (`copy_bidirectional_with_sizes`), no TLS. It prints the address
//! it bound on stdout and exits when its stdin closes (the parent is gone).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::net::{TcpSocket, TcpStream};

/// The hidden argument that turns this executable into a forwarder.
const FLAG: &str = "--plain-forward";
/// Copy buffer per direction per connection.
const BUF: usize = 64 * 1024;
/// Runtime workers per forwarder process (the sidecar's default here: one
/// per core on the 2-core bench machine).
const WORKERS: usize = 2;

/// `Some((listen, target))` if this process was started as a forwarder.
pub fn args() -> Option<(String, String)> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    match a.as_slice() {
        [flag, listen, target] if flag == FLAG => Some((listen.clone(), target.clone())),
        [flag, ..] if flag == FLAG => {
            eprintln!("usage: sidecar {FLAG} LISTEN_ADDR TARGET_ADDR");
            std::process::exit(2)
        }
        _ => None,
    }
}

/// Runs a forwarder until stdin closes: accepts on `listen` (port 0 picks
/// one; the bound address is printed on stdout) and forwards every
/// connection to `target`.
pub fn serve(listen: &str, target: &str) -> ! {
    let listen: SocketAddr = listen.parse().expect("--plain-forward LISTEN_ADDR");
    let target: SocketAddr = target.parse().expect("--plain-forward TARGET_ADDR");
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0)
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .enable_all()
        .build()
        .expect("forwarder runtime");
    rt.block_on(async move {
        let sock = if listen.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .expect("socket");
        sock.set_reuseaddr(true).expect("SO_REUSEADDR");
        sock.bind(listen)
            .unwrap_or_else(|e| panic!("forwarder cannot bind {listen}: {e}"));
        let l = sock.listen(4096).expect("listen");
        let mut out = std::io::stdout();
        writeln!(out, "{}", l.local_addr().expect("local addr")).expect("stdout");
        out.flush().expect("stdout");
        loop {
            let Ok((down, _)) = l.accept().await else {
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            };
            tokio::spawn(async move {
                let mut down = down;
                let _ = down.set_nodelay(true);
                let Ok(mut up) = TcpStream::connect(target).await else {
                    return;
                };
                let _ = up.set_nodelay(true);
                let _ =
                    tokio::io::copy_bidirectional_with_sizes(&mut down, &mut up, BUF, BUF).await;
            });
        }
    })
}

/// One forwarder process, stopped on drop.
pub struct PlainForwarder {
    child: Child,
    /// Held open: the forwarder exits when it closes.
    _stdin: ChildStdin,
    pub listen: SocketAddr,
}

impl PlainForwarder {
    /// Starts a forwarder on a free loopback port in front of `target`.
    pub fn start(target: SocketAddr) -> PlainForwarder {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(&exe)
            .args([FLAG, "127.0.0.1:0", &target.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", exe.display()));
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let _ = stdout.read_line(&mut line);
        let listen = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("plain forwarder printed {line:?}, not an address"));
        // Nothing more is printed; drain anyway so a stray line cannot block it.
        std::thread::spawn(move || {
            let _ = stdout.read_to_end(&mut Vec::new());
        });
        PlainForwarder {
            child,
            _stdin: stdin,
            listen,
        }
    }

    /// The forwarder's process id (its CPU time is the pair's cost).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PlainForwarder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
