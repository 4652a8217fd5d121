//! A packet tap on the loopback interface: the TCP segments to or from one
//! port, in the order the kernel transmitted them. What a test reads from
//! its own `accept()` or `read()` says when the test got round to looking
//! (a starved thread looks late and sees an old connection already
//! closed); the tap says in which order the SYN and the FIN left the
//! sender. Needs root (an `AF_PACKET` socket: `CAP_NET_RAW`).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One TCP segment seen leaving a loopback socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub src_port: u16,
    pub dst_port: u16,
    pub flags: u8,
}

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

impl Segment {
    /// A connection's first segment (SYN without ACK), sent to `port`.
    pub fn opens(&self, port: u16) -> bool {
        self.dst_port == port && self.flags & (SYN | ACK) == SYN
    }

    /// The end of the connection from `src_port` to `port`: its FIN or RST.
    pub fn ends(&self, src_port: u16, port: u16) -> bool {
        self.src_port == src_port && self.dst_port == port && self.flags & (FIN | RST) != 0
    }
}

/// Captures IPv4 TCP segments to or from `port` on `lo` until dropped.
pub struct Tap {
    fd: Arc<OwnedFd>,
    seen: Arc<Mutex<Vec<Segment>>>,
    stop: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<()>>,
}

const ETH_P_IP: u16 = 0x0800;
/// Every protocol: only such a tap sees packets as they are sent (the
/// kernel hands sent packets to protocol-specific taps not at all).
const ETH_P_ALL: u16 = 0x0003;
const PACKET_OUTGOING: u8 = 4;
const PACKET_STATISTICS: libc::c_int = 6;

/// A classic BPF program keeping IPv4 TCP segments (first fragments) whose
/// source or destination port is `port`: the socket's queue holds only
/// what the test wants, whatever else the parallel tests send over `lo`.
fn port_filter(port: u16) -> Vec<libc::sock_filter> {
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    let port = u32::from(port);
    vec![
        op(0x30, 0, 0, 9),      // 0: ldb [9] (protocol)
        op(0x15, 0, 8, 6),      // 1: tcp? else drop
        op(0x28, 0, 0, 6),      // 2: ldh [6] (fragment offset)
        op(0x45, 6, 0, 0x1fff), // 3: a later fragment: drop
        op(0xb1, 0, 0, 0),      // 4: x = IP header length
        op(0x48, 0, 0, 0),      // 5: ldh [x] (source port)
        op(0x15, 2, 0, port),   // 6: match: keep
        op(0x48, 0, 0, 2),      // 7: ldh [x + 2] (destination port)
        op(0x15, 0, 1, port),   // 8: match: keep, else drop
        op(0x06, 0, 0, 0xffff), // 9: keep
        op(0x06, 0, 0, 0),      // 10: drop
    ]
}

fn check(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn setsockopt<T>(fd: &OwnedFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    let len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: value points at a T of len bytes for the call's duration.
    let rc =
        unsafe { libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast(), len) };
    check(rc, "setsockopt")
}

/// The segment an IPv4 packet carries, if it is TCP.
fn parse(packet: &[u8]) -> Option<Segment> {
    let first = *packet.first()?;
    let ihl = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || packet.get(9) != Some(&6) || ihl < 20 {
        return None;
    }
    let tcp = packet.get(ihl..ihl + 14)?;
    Some(Segment {
        src_port: u16::from_be_bytes([tcp[0], tcp[1]]),
        dst_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        flags: tcp[13],
    })
}

impl Tap {
    /// Starts capturing. Fails without `CAP_NET_RAW`.
    pub fn open(port: u16) -> io::Result<Tap> {
        // SAFETY: plain syscalls on a descriptor this function owns.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        check(raw, "socket(AF_PACKET)")?;
        // SAFETY: `raw` was just checked to be a new descriptor nobody else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let filter = port_filter(port);
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)?;
        let rcvbuf: libc::c_int = 8 << 20;
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, &rcvbuf)?;
        let timeout = libc::timeval {
            tv_sec: 0,
            tv_usec: 50_000,
        };
        setsockopt(&fd, libc::SOL_SOCKET, libc::SO_RCVTIMEO, &timeout)?;
        // SAFETY: a NUL-terminated literal; the call only reads it.
        let lo = unsafe { libc::if_nametoindex(c"lo".as_ptr()) };
        if lo == 0 {
            return Err(io::Error::other("no loopback interface"));
        }
        // SAFETY: `sockaddr_ll` is plain old data; all zeroes is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = lo as i32;
        let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `addr` is a live `sockaddr_ll` and `len` its size; `fd` is open.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                len,
            )
        };
        check(rc, "bind(lo)")?;
        // Packets queued before the filter was attached may be anything:
        // read them out (the parser keeps only the port's anyway).
        let fd = Arc::new(fd);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let reader = std::thread::spawn({
            let (fd, seen, stop) = (fd.clone(), seen.clone(), stop.clone());
            move || Tap::read(&fd, port, &seen, &stop)
        });
        Ok(Tap {
            fd,
            seen,
            stop,
            reader: Some(reader),
        })
    }

    fn read(fd: &OwnedFd, port: u16, seen: &Mutex<Vec<Segment>>, stop: &AtomicBool) {
        let mut buf = [0u8; 256];
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: `sockaddr_ll` is plain old data; all zeroes is a valid value.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            // SAFETY: buf and from are valid for the sizes passed.
            let n = unsafe {
                libc::recvfrom(
                    fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_TRUNC,
                    (&mut from as *mut libc::sockaddr_ll).cast(),
                    &mut len,
                )
            };
            if n <= 0 {
                continue; // the receive timeout: look at `stop` again
            }
            // Loopback shows each packet twice (sent, then received): keep
            // the sending side's copy, in the order the senders sent.
            if from.sll_pkttype != PACKET_OUTGOING || from.sll_protocol != ETH_P_IP.to_be() {
                continue;
            }
            let got = &buf[..(n as usize).min(buf.len())];
            if let Some(seg) = parse(got).filter(|s| s.src_port == port || s.dst_port == port) {
                seen.lock().unwrap().push(seg);
            }
        }
    }

    /// The segments seen so far, in the order they were sent.
    pub fn segments(&self) -> Vec<Segment> {
        self.seen.lock().unwrap().clone()
    }

    /// Packets the kernel dropped for want of room in the tap's queue since
    /// the last call: anything but 0 means the order seen has gaps.
    pub fn drops(&self) -> u32 {
        let mut stats = [0u32; 2]; // struct tpacket_stats { packets, drops }
        let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: stats is valid for len bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0, "PACKET_STATISTICS: {}", io::Error::last_os_error());
        stats[1]
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}
