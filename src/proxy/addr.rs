//! Addresses (`host:port`, `unix:/path`, or, to listen, `systemd:NAME`) and
//! the plain streams and listeners behind them, so every route can listen
//! or connect on either kind of socket.

use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::str::FromStr;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// Where a route listens or connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Addr {
    /// `host:port`; the host may be a name resolved at connect time.
    Tcp(String),
    /// `unix:/path/to/socket`.
    Unix(PathBuf),
    /// `systemd:NAME`: a listening socket passed by systemd socket
    /// activation (`FileDescriptorName=`); `systemd:` alone is the first
    /// one passed. Listen only.
    Systemd(String),
}

/// Why an address string was refused.
#[derive(Debug, thiserror::Error)]
#[error("invalid address {input:?}: {why} (expected host:port, unix:/path or systemd:NAME)")]
pub struct AddrError {
    input: String,
    why: &'static str,
}

impl FromStr for Addr {
    type Err = AddrError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = |why| AddrError {
            input: s.to_string(),
            why,
        };
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err(err("empty socket path"));
            }
            return Ok(Addr::Unix(PathBuf::from(path)));
        }
        if let Some(name) = s.strip_prefix("systemd:") {
            // systemd's own rules for FileDescriptorName=.
            if name.len() > 255 || name.chars().any(|c| c == ':' || c.is_control()) {
                return Err(err("bad systemd socket name"));
            }
            return Ok(Addr::Systemd(name.to_string()));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| err("missing port"))?;
        if host.is_empty() {
            return Err(err("missing host"));
        }
        port.parse::<u16>().map_err(|_| err("bad port"))?;
        Ok(Addr::Tcp(s.to_string()))
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Tcp(a) => f.write_str(a),
            Addr::Unix(p) => write!(f, "unix:{}", p.display()),
            Addr::Systemd(n) => write!(f, "systemd:{n}"),
        }
    }
}

impl Addr {
    /// The host part of a TCP address without brackets (`None` for Unix
    /// and systemd sockets).
    pub fn host(&self) -> Option<&str> {
        match self {
            Addr::Tcp(a) => a
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']')),
            Addr::Unix(_) | Addr::Systemd(_) => None,
        }
    }

    /// True when only this machine can reach the address: a Unix socket, a
    /// loopback IP, or `localhost`. A systemd socket's address is the
    /// socket unit's business, unknown here: not local-only.
    pub fn is_local_only(&self) -> bool {
        if matches!(self, Addr::Systemd(_)) {
            return false;
        }
        match self.host() {
            None => true,
            Some("localhost") => true,
            Some(h) => h
                .parse::<IpAddr>()
                .map(|ip| ip.is_loopback())
                .unwrap_or(false),
        }
    }

    /// Connects within `timeout`, with `TCP_NODELAY` set on TCP.
    pub async fn connect(&self, timeout: Duration) -> io::Result<Stream> {
        let fut = async {
            match self {
                Addr::Tcp(a) => {
                    let s = TcpStream::connect(a.as_str()).await?;
                    s.set_nodelay(true)?;
                    Ok(Stream::Tcp(s))
                }
                Addr::Unix(p) => Ok(Stream::Unix(UnixStream::connect(p).await?)),
                Addr::Systemd(_) => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "a systemd: socket can only be listened on",
                )),
            }
        };
        match tokio::time::timeout(timeout, fut).await {
            Ok(r) => r,
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to {self} timed out after {timeout:?}"),
            )),
        }
    }

    /// [`Addr::connect`] with `SO_MARK` set to `mark` on a TCP socket before
    /// it connects (`--mark`); `None`, or a Unix socket, is [`Addr::connect`].
    pub async fn connect_marked(&self, timeout: Duration, mark: Option<u32>) -> io::Result<Stream> {
        let (Some(mark), Addr::Tcp(a)) = (mark, self) else {
            return self.connect(timeout).await;
        };
        match tokio::time::timeout(timeout, super::mark::connect_marked(a, mark)).await {
            Ok(r) => r.map(Stream::Tcp),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("connecting to {self} timed out after {timeout:?}"),
            )),
        }
    }

    /// Binds a listener. A stale Unix socket file left by an earlier run is
    /// removed first; any other file at that path is an error.
    pub async fn bind(&self) -> io::Result<Listener> {
        self.bind_std()?.into_tokio()
    }

    /// Binds a non-blocking listener without a runtime, so that every
    /// listener can exist before the sandbox is applied and the runtime
    /// built (see [`crate::sandbox`]). Same rules as [`Addr::bind`].
    pub fn bind_std(&self) -> io::Result<StdListener> {
        let listener = match self {
            Addr::Tcp(a) => {
                let l = std::net::TcpListener::bind(a.as_str())?;
                widen_backlog(&l)?;
                StdListener::Tcp(l)
            }
            Addr::Unix(p) => {
                use std::os::unix::fs::FileTypeExt;
                if let Ok(meta) = std::fs::symlink_metadata(p) {
                    if meta.file_type().is_socket() {
                        std::fs::remove_file(p)?;
                    }
                }
                let l = std::os::unix::net::UnixListener::bind(p)?;
                widen_backlog(&l)?;
                StdListener::Unix(l)
            }
            Addr::Systemd(name) => {
                let fd = crate::process::systemd::take(name).map_err(io::Error::other)?;
                match crate::process::systemd::kind(name, &fd).map_err(io::Error::other)? {
                    crate::process::systemd::Kind::Tcp => StdListener::Tcp(fd.into()),
                    crate::process::systemd::Kind::Unix => StdListener::Unix(fd.into()),
                }
            }
        };
        listener.set_nonblocking()?;
        Ok(listener)
    }

    /// [`Addr::bind_std`] for a listener only the sidecar's own user may
    /// reach (the admin endpoint, whose `/connections` names every peer): a
    /// Unix socket file is created with mode 0600 whatever the process
    /// umask. A socket systemd passes keeps the mode its unit gives it
    /// (`SocketMode=`, 0666 by default).
    pub fn bind_std_private(&self) -> io::Result<StdListener> {
        match self {
            Addr::Unix(_) => with_umask(PRIVATE_SOCKET_UMASK, || self.bind_std()),
            _ => self.bind_std(),
        }
    }
}

/// The umask a private Unix socket is created under: rw for its owner only.
const PRIVATE_SOCKET_UMASK: libc::mode_t = 0o177;

/// Runs `f` with the process umask set to `mask`, then restores it. The
/// umask is process-wide: a file another thread creates meanwhile gets the
/// stricter mask, never a wider one (the sidecar binds its listeners at
/// start-up, before the runtime, and writes no files).
fn with_umask<T>(mask: libc::mode_t, f: impl FnOnce() -> T) -> T {
    // SAFETY: umask(2) only swaps the process's file-creation mask; it
    // takes no pointer and cannot fail.
    let old = unsafe { libc::umask(mask) };
    let out = f();
    // SAFETY: as above, putting the previous mask back.
    unsafe { libc::umask(old) };
    out
}

/// A bound, non-blocking listener not yet registered with a runtime.
#[derive(Debug)]
pub enum StdListener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

impl StdListener {
    fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            StdListener::Tcp(l) => l.set_nonblocking(true),
            StdListener::Unix(l) => l.set_nonblocking(true),
        }
    }

    /// The bound address, with the real port when the config said port 0.
    pub fn local_addr(&self) -> io::Result<Addr> {
        match self {
            StdListener::Tcp(l) => Ok(Addr::Tcp(l.local_addr()?.to_string())),
            StdListener::Unix(l) => {
                let a = l.local_addr()?;
                let p = a.as_pathname().map(PathBuf::from).unwrap_or_default();
                Ok(Addr::Unix(p))
            }
        }
    }

    /// The bound TCP port (`None` for a Unix socket).
    pub fn tcp_port(&self) -> Option<u16> {
        match self {
            StdListener::Tcp(l) => l.local_addr().ok().map(|a| a.port()),
            StdListener::Unix(_) => None,
        }
    }

    /// Registers the listener with the current tokio runtime (must be
    /// called from inside one).
    pub fn into_tokio(self) -> io::Result<Listener> {
        match self {
            StdListener::Tcp(l) => Ok(Listener::Tcp(TcpListener::from_std(l)?)),
            StdListener::Unix(l) => Ok(Listener::Unix(UnixListener::from_std(l)?)),
        }
    }
}

/// Connections the kernel queues until they are accepted. tokio, like std,
/// listens with 128: a burst of more connects than that between two
/// accepts (a flood of 2,000 sockets did it) overflows the queue, the kernel
/// drops SYNs, and a real peer caught in the burst waits a whole SYN
/// retransmit (1 s). The kernel caps this at `net.core.somaxconn` (4096 by
/// default), as it does nginx's and HAProxy's larger backlogs.
pub(crate) const BACKLOG: libc::c_int = 4096;

/// Listens again with [`BACKLOG`]: on a listening socket, `listen` only
/// changes the queue's length.
fn widen_backlog(listener: &impl std::os::fd::AsRawFd) -> io::Result<()> {
    // SAFETY: listen(2) on a descriptor the listener owns and keeps open
    // for the duration of the call; no memory is passed.
    if unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A bound listener of either kind.
#[derive(Debug)]
pub enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener),
}

impl Listener {
    /// Accepts one connection, returning it with a printable peer address.
    pub async fn accept(&self) -> io::Result<(Stream, String)> {
        match self {
            Listener::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // A socket we cannot set NODELAY on is still usable; the
                // failure is not worth refusing the connection over.
                let _ = s.set_nodelay(true);
                Ok((Stream::Tcp(s), peer.to_string()))
            }
            Listener::Unix(l) => {
                let (s, _) = l.accept().await?;
                Ok((Stream::Unix(s), "unix".to_string()))
            }
        }
    }

    /// The bound address, with the real port when the config said port 0.
    pub fn local_addr(&self) -> io::Result<Addr> {
        match self {
            Listener::Tcp(l) => Ok(Addr::Tcp(l.local_addr()?.to_string())),
            Listener::Unix(l) => {
                let a = l.local_addr()?;
                let p = a.as_pathname().map(PathBuf::from).unwrap_or_default();
                Ok(Addr::Unix(p))
            }
        }
    }
}

/// A plain (non-TLS) byte stream over TCP or a Unix socket.
#[derive(Debug)]
pub enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

macro_rules! delegate {
    ($self:ident, $s:ident => $e:expr) => {
        match $self.get_mut() {
            Stream::Tcp($s) => $e,
            Stream::Unix($s) => $e,
        }
    };
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_read(cx, buf))
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        delegate!(self, s => Pin::new(s).poll_shutdown(cx))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        delegate!(self, s => Pin::new(s).poll_write_vectored(cx, bufs))
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Tcp(s) => s.is_write_vectored(),
            Stream::Unix(s) => s.is_write_vectored(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tcp_and_unix() {
        assert_eq!(
            "127.0.0.1:80".parse::<Addr>().unwrap().host(),
            Some("127.0.0.1")
        );
        assert_eq!("[::1]:80".parse::<Addr>().unwrap().host(), Some("::1"));
        assert!("[::1]:80".parse::<Addr>().unwrap().is_local_only());
        assert!(!"0.0.0.0:80".parse::<Addr>().unwrap().is_local_only());
        assert!("unix:/tmp/x".parse::<Addr>().unwrap().is_local_only());
        assert!("nohost".parse::<Addr>().is_err());
        assert!("h:99999".parse::<Addr>().is_err());
        assert!("unix:".parse::<Addr>().is_err());
        assert_eq!(
            "systemd:tls".parse::<Addr>().unwrap(),
            Addr::Systemd("tls".into())
        );
        assert_eq!("systemd:".parse::<Addr>().unwrap().to_string(), "systemd:");
        assert!(!"systemd:tls".parse::<Addr>().unwrap().is_local_only());
        assert!("systemd:a:b".parse::<Addr>().is_err());
    }
}
