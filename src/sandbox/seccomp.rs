//! A seccomp filter for what Landlock cannot restrict on the kernels this
//! runs on: UDP. Landlock has UDP rules only from ABI 10; a filter on
//! `socket(2)` works everywhere, but it sees only the call's integer
//! arguments, never a destination address. So it refuses, with EACCES,
//! creating an IPv4 or IPv6 raw socket always, and a datagram socket (UDP,
//! ICMP echo) unless a route's target is a host name: DNS queries go over
//! UDP, to whatever server resolv.conf names, and no filter can tell those
//! from any other datagram. Unix sockets (the `NOTIFY_SOCKET` the watchdog
//! pings, unix listeners and targets) and TCP are left to Landlock.
//! Netlink sockets are refused (EACCES) but for `NETLINK_SOCK_DIAG`, which
//! the target-exposure check lists listening sockets with
//! (`crate::target_exposure::sockdiag`), and, when a target is a host name,
//! `NETLINK_ROUTE`: glibc's resolver asks it which address families the
//! host has whenever a name has several addresses to sort (it copes with a
//! refusal, but sorts without that knowledge). No other netlink protocol
//! (audit, netfilter, ...) is asked for by the sidecar once it serves.
//!
//! `SOCK_CLOEXEC` and `SOCK_NONBLOCK` ride in `socket()`'s type argument
//! (Rust's std and glibc's resolver always set the first), so the filter
//! masks them off before comparing the socket type. It denies every system
//! call made through another architecture's calling convention (i386 on
//! x86_64, the x32 ABI) with ENOSYS: those would reach `socket` under other
//! numbers.

use std::io;

use libc::{sock_filter, sock_fprog};

/// The architecture's audit id, `socket`'s number, and whether system
/// call numbers with the x32 bit must be denied.
struct Arch {
    audit: u32,
    socket: u32,
    x32_bit: bool,
}

// Little-endian only: the argument offsets below read an argument's low
// 32 bits, which come first there (and the audit ids are the LE ones).
#[cfg(all(target_arch = "x86_64", target_endian = "little"))]
const ARCH: Option<Arch> = Some(Arch {
    audit: 0xC000_003E, // AUDIT_ARCH_X86_64
    socket: libc::SYS_socket as u32,
    x32_bit: true,
});

#[cfg(all(target_arch = "aarch64", target_endian = "little"))]
const ARCH: Option<Arch> = Some(Arch {
    audit: 0xC000_00B7, // AUDIT_ARCH_AARCH64
    socket: libc::SYS_socket as u32,
    x32_bit: false,
});

#[cfg(not(all(
    any(target_arch = "x86_64", target_arch = "aarch64"),
    target_endian = "little"
)))]
const ARCH: Option<Arch> = None;

/// x32 system calls are the x86_64 numbers with this bit set.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

// Offsets into `struct seccomp_data` (little-endian: an argument's low
// 32 bits come first, and `socket` takes ints).
const NR: u32 = 0;
const ARCH_OFFSET: u32 = 4;
const ARG0: u32 = 16;
const ARG1: u32 = 24;
const ARG2: u32 = 32;

const LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const AND_K: u16 = 0x54; // BPF_ALU | BPF_AND | BPF_K
const RET_K: u16 = 0x06; // BPF_RET | BPF_K

fn stmt(code: u16, k: u32) -> sock_filter {
    jump(code, k, 0, 0)
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// Where a conditional jump goes.
#[derive(Clone, Copy)]
enum To {
    Next,
    Allow,
    Refuse,
    Foreign,
    /// The socket-type check.
    Type,
}

enum Insn {
    Load(u32),
    And(u32),
    Jump(u16, u32, To, To),
}

/// The socket types refused for IPv4 and IPv6 (after masking the flags).
fn refused_types(dns: bool) -> Vec<u32> {
    let mut t = vec![libc::SOCK_RAW as u32];
    if !dns {
        t.push(libc::SOCK_DGRAM as u32);
    }
    t
}

/// The netlink protocols allowed: the exposure check's, and glibc's
/// resolver's when DNS is.
fn netlink_protocols(dns: bool) -> Vec<u32> {
    let mut p = vec![libc::NETLINK_SOCK_DIAG as u32];
    if dns {
        p.push(libc::NETLINK_ROUTE as u32);
    }
    p
}

/// The filter's decisions, before jump offsets are worked out.
fn decisions(arch: &Arch, dns: bool) -> (Vec<Insn>, usize) {
    let mut p = vec![
        Insn::Load(ARCH_OFFSET),
        Insn::Jump(JEQ_K, arch.audit, To::Next, To::Foreign),
        Insn::Load(NR),
    ];
    if arch.x32_bit {
        p.push(Insn::Jump(JGE_K, X32_SYSCALL_BIT, To::Foreign, To::Next));
    }
    p.extend([
        Insn::Jump(JEQ_K, arch.socket, To::Next, To::Allow),
        Insn::Load(ARG0),
        Insn::Jump(JEQ_K, libc::AF_INET as u32, To::Type, To::Next),
        Insn::Jump(JEQ_K, libc::AF_INET6 as u32, To::Type, To::Next),
        Insn::Jump(JEQ_K, libc::AF_NETLINK as u32, To::Next, To::Allow),
        Insn::Load(ARG2),
    ]);
    let protocols = netlink_protocols(dns);
    for (i, protocol) in protocols.iter().enumerate() {
        let otherwise = if i + 1 == protocols.len() {
            To::Refuse
        } else {
            To::Next
        };
        p.push(Insn::Jump(JEQ_K, *protocol, To::Allow, otherwise));
    }
    let type_at = p.len();
    let flags = (libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK) as u32;
    p.extend([Insn::Load(ARG1), Insn::And(!flags)]);
    for t in refused_types(dns) {
        p.push(Insn::Jump(JEQ_K, t, To::Refuse, To::Next));
    }
    (p, type_at)
}

/// The BPF program: the decisions, then allow, refuse (EACCES) and
/// foreign (ENOSYS) returns.
fn program(arch: &Arch, dns: bool) -> io::Result<Vec<sock_filter>> {
    let (insns, type_at) = decisions(arch, dns);
    let allow = insns.len();
    let target = |to: To, i: usize| match to {
        To::Next => i + 1,
        To::Allow => allow,
        To::Refuse => allow + 1,
        To::Foreign => allow + 2,
        To::Type => type_at,
    };
    let offset = |to: To, i: usize| {
        u8::try_from(target(to, i) - (i + 1))
            .map_err(|_| io::Error::other("seccomp filter too long for a BPF jump"))
    };
    let mut out = Vec::with_capacity(allow + 3);
    for (i, insn) in insns.iter().enumerate() {
        out.push(match *insn {
            Insn::Load(at) => stmt(LD_W_ABS, at),
            Insn::And(mask) => stmt(AND_K, mask),
            Insn::Jump(code, k, t, f) => jump(code, k, offset(t, i)?, offset(f, i)?),
        });
    }
    out.extend([
        stmt(RET_K, libc::SECCOMP_RET_ALLOW),
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EACCES as u32),
        stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32),
    ]);
    Ok(out)
}

/// Installs the filter on the calling thread (and the threads it creates
/// later); `dns` keeps datagram sockets for the resolver. `Ok(false)` on an
/// architecture the filter is not written for.
pub(super) fn install(dns: bool) -> io::Result<bool> {
    let Some(arch) = &ARCH else {
        return Ok(false);
    };
    let filter = program(arch, dns)?;
    let prog = sock_fprog {
        len: u16::try_from(filter.len()).map_err(io::Error::other)?,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl reads `prog`, which points at `filter`, both alive for
    // the call; the kernel copies the program.
    let failed = unsafe {
        libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(libc::PR_SET_SECCOMP, libc::SECCOMP_MODE_FILTER, &prog) != 0
    };
    if failed {
        return Err(io::Error::last_os_error());
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEST_ARCH: Arch = Arch {
        audit: 1,
        socket: 41,
        x32_bit: true,
    };

    #[test]
    fn netlink_route_is_allowed_only_with_dns() {
        let route = libc::NETLINK_ROUTE as u32;
        let diag = libc::NETLINK_SOCK_DIAG as u32;
        assert_eq!(netlink_protocols(false), [diag]);
        assert!(netlink_protocols(true).contains(&route));
        assert!(netlink_protocols(true).contains(&diag));
    }

    #[test]
    fn datagram_sockets_are_refused_only_without_dns() {
        let dgram = libc::SOCK_DGRAM as u32;
        assert!(refused_types(false).contains(&dgram));
        assert!(!refused_types(true).contains(&dgram));
        assert!(refused_types(true).contains(&(libc::SOCK_RAW as u32)));
    }

    /// Runs `p` the way the kernel does on one system call: the returned
    /// action (`SECCOMP_RET_*`, with the errno in its low bits).
    fn run(p: &[sock_filter], arch: u32, nr: u32, args: [u32; 3]) -> u32 {
        let word = |at: u32| match at {
            NR => nr,
            ARCH_OFFSET => arch,
            ARG0 => args[0],
            ARG1 => args[1],
            ARG2 => args[2],
            _ => panic!("load of offset {at}"),
        };
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let insn = p[pc];
            pc += 1;
            let taken = |cond: bool| usize::from(if cond { insn.jt } else { insn.jf });
            match insn.code {
                LD_W_ABS => a = word(insn.k),
                AND_K => a &= insn.k,
                JEQ_K => pc += taken(a == insn.k),
                JGE_K => pc += taken(a >= insn.k),
                RET_K => return insn.k,
                code => panic!("instruction {code:#x} at {}", pc - 1),
            }
        }
    }

    /// Every path through the filter, with and without DNS: each socket
    /// `socket(2)` may ask for, the other system calls, and calls through
    /// another architecture's convention, judged by running the program.
    #[test]
    fn the_filter_refuses_what_it_says_and_allows_the_rest() {
        let allow = libc::SECCOMP_RET_ALLOW;
        let eacces = libc::SECCOMP_RET_ERRNO | libc::EACCES as u32;
        let enosys = libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32;
        let cloexec = libc::SOCK_CLOEXEC as u32;
        let nonblock = libc::SOCK_NONBLOCK as u32;
        let (inet, inet6) = (libc::AF_INET as u32, libc::AF_INET6 as u32);
        let (unix, netlink) = (libc::AF_UNIX as u32, libc::AF_NETLINK as u32);
        let (stream, dgram) = (libc::SOCK_STREAM as u32, libc::SOCK_DGRAM as u32);
        let raw = libc::SOCK_RAW as u32;
        let diag = libc::NETLINK_SOCK_DIAG as u32;
        let route = libc::NETLINK_ROUTE as u32;
        let audit = libc::NETLINK_AUDIT as u32;
        for dns in [false, true] {
            let p = program(&TEST_ARCH, dns).unwrap();
            let socket = |args| run(&p, TEST_ARCH.audit, TEST_ARCH.socket, args);
            let udp = if dns { allow } else { eacces };
            let cases = [
                ([inet, stream | cloexec, 0], allow),
                ([inet6, stream | cloexec | nonblock, 0], allow),
                ([unix, dgram | cloexec, 0], allow),
                ([unix, stream, 0], allow),
                ([inet, raw, 0], eacces),
                ([inet6, raw | cloexec | nonblock, 0], eacces),
                ([inet, dgram, 0], udp),
                ([inet, dgram | cloexec, 0], udp),
                ([inet6, dgram | cloexec | nonblock, 0], udp),
                ([netlink, raw | cloexec, diag], allow),
                ([netlink, dgram, diag], allow),
                (
                    [netlink, raw | cloexec, route],
                    if dns { allow } else { eacces },
                ),
                ([netlink, raw | cloexec, audit], eacces),
                ([netlink, dgram, audit], eacces),
                ([netlink, stream, audit], eacces),
            ];
            for (args, want) in cases {
                assert_eq!(socket(args), want, "dns {dns}: socket{args:?}");
            }
            // Another system call, whatever its arguments.
            let other = TEST_ARCH.socket + 1;
            assert_eq!(run(&p, TEST_ARCH.audit, other, [inet, raw, 0]), allow);
            // Another architecture's convention, or the x32 ABI: ENOSYS.
            assert_eq!(run(&p, 2, TEST_ARCH.socket, [inet, stream, 0]), enosys);
            let x32 = TEST_ARCH.socket | X32_SYSCALL_BIT;
            assert_eq!(run(&p, TEST_ARCH.audit, x32, [inet, stream, 0]), enosys);
        }
    }

    /// Every jump lands inside the program, on the instruction meant.
    #[test]
    fn jumps_land_on_their_targets() {
        for dns in [false, true] {
            let p = program(&TEST_ARCH, dns).unwrap();
            let n = p.len();
            for (i, insn) in p.iter().enumerate() {
                if insn.code & 0x07 == 0x05 {
                    for off in [insn.jt, insn.jf] {
                        assert!(i + 1 + usize::from(off) < n, "{i}: {off}");
                    }
                }
            }
            // The last three are the returns: allow, EACCES, ENOSYS.
            assert_eq!(p[n - 3].k, libc::SECCOMP_RET_ALLOW);
            assert_eq!(p[n - 2].k, libc::SECCOMP_RET_ERRNO | libc::EACCES as u32);
            assert_eq!(p[n - 1].k, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32);
        }
    }
}
