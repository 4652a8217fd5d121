//! Is the application behind a server route reachable without it?
//!
//! A server route whose target is on loopback (`127.0.0.1:2100`) protects
//! the application only while peers cannot reach the application's port
//! some other way. An application that listens on every address
//! (`0.0.0.0:2100`, `[::]:2100`) is then guarded by nothing but the inbound
//! capture rules (or a firewall); and a firewall reload that starts with
//! `flush ruleset` (Debian's `/etc/nftables.conf`) removes those rules
//! without a sound: plaintext peers reach the application directly.
//!
//! The sidecar cannot read the nftables rules (that needs `CAP_NET_ADMIN`),
//! but it can see the listening sockets of its own network namespace
//! ([`listeners`]). At start-up and on every poll it checks each such
//! route's target port for a listener on a non-loopback address, and says
//! so once per change of state: a WARN when the application becomes
//! exposed, an INFO when it no longer is. `/status` shows the state
//! (`target_exposure`) and `mtls_sidecar_target_exposed{route}` is 1 while
//! exposed.
//!
//! While a route is exposed, the sidecar also asks whether capture covers
//! it, without reading the rules: the shipped `inbound.nft` holds a canary
//! that rejects, with an ICMP "administratively prohibited", a connection
//! from this host to [`CANARY_ADDR`] on the application's ports. A connect
//! there fails with `EHOSTUNREACH` only while that table is loaded and
//! lists the port ([`canary_verdict`]); without it the connect is refused,
//! or reaches the application listening on every address. The verdict is
//! `/status` `captured` and `mtls_sidecar_target_captured{route}`.

pub mod listeners;
pub mod sockdiag;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics::{describe_gauge, gauge, Unit};
use serde::Serialize;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::proxy::addr::Addr;
use crate::proxy::settings::{Mode, RouteConfig};

/// 1 while the application behind a server route listens on a non-loopback
/// address of its target port, else 0.
pub const TARGET_EXPOSED: &str = "mtls_sidecar_target_exposed";

/// 1 while the capture canary answers for an exposed route's port.
pub const TARGET_CAPTURED: &str = "mtls_sidecar_target_captured";

/// The shortest time between two checks, whatever the poll interval.
const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Where the capture canary of `inbound.nft` rejects connections made from
/// this host (on the application's ports). A loopback address no service
/// uses: without the canary, a connection there reaches only an application
/// listening on every address.
pub const CANARY_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 255, 255, 254);

/// How long a canary connect may take (loopback: the answer is immediate).
const CANARY_TIMEOUT: Duration = Duration::from_millis(500);

/// While the canary says "not captured", it is asked again only every this
/// many checks: without the canary the probe may open a connection to the
/// application itself. While captured, every check asks (the rule rejects
/// the probe before it reaches anything).
const UNCAPTURED_PROBE_EVERY: u32 = 30;

/// What the last check found for one route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Not checked yet.
    Unchecked,
    /// The listening sockets could not be read (why).
    Unknown(String),
    /// No listener on the target's port outside loopback.
    NotExposed,
    /// The target's port listens on these non-loopback addresses.
    Exposed(Vec<SocketAddr>),
}

impl State {
    fn name(&self) -> &'static str {
        match self {
            State::Unchecked => "unchecked",
            State::Unknown(_) => "unknown",
            State::NotExposed => "not_exposed",
            State::Exposed(_) => "exposed",
        }
    }
}

/// One server route whose target is on loopback.
#[derive(Debug)]
struct Watched {
    route: String,
    target: String,
    port: u16,
    state: Mutex<State>,
    /// The capture canary's last verdict while exposed (`None`: not asked,
    /// or no clear answer), and the checks since it was asked.
    captured: Mutex<(Option<bool>, u32)>,
}

/// The server routes in front of a local application, and what the last
/// check found for each.
#[derive(Debug, Default)]
pub struct TargetExposure {
    watched: Vec<Watched>,
    /// Where the last check read the listening sockets: 0 not read,
    /// else a [`listeners::Source`] as its `u8`.
    source: AtomicU8,
}

/// One route in `/status`'s `target_exposure`.
#[derive(Debug, Serialize)]
pub struct ExposureStatus {
    pub route: String,
    pub target: String,
    /// `exposed`, `not_exposed`, `unknown` or `unchecked`.
    pub state: &'static str,
    /// When exposed: the application's non-loopback listening addresses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub listening: Vec<String>,
    /// When unknown: why the listeners could not be read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where the last check read the listening sockets: `netlink`
    /// (`NETLINK_SOCK_DIAG`, cheap) or `proc` (`/proc/self/net/tcp{,6}`,
    /// the fallback, which costs milliseconds of kernel time per check on
    /// a large host); absent before a check has read them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<&'static str>,
    /// While exposed: whether the inbound capture table's canary answers
    /// for the target's port (`true`: the capture rules cover it); absent
    /// when not exposed or the canary gave no clear answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub captured: Option<bool>,
}

/// The port of a server route's target when that target is on loopback
/// (`127.0.0.1`, `::1`, `localhost`): the routes this check is about.
pub fn local_target_port(cfg: &RouteConfig) -> Option<u16> {
    if cfg.mode != Mode::Server {
        return None;
    }
    let Addr::Tcp(hostport) = &cfg.target else {
        return None;
    };
    if !cfg.target.is_local_only() {
        return None;
    }
    hostport.rsplit_once(':')?.1.parse().ok()
}

/// Loopback, IPv4-mapped loopback included (`::ffff:127.0.0.1`).
fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map_or(v6.is_loopback(), |v4| v4.is_loopback()),
    }
}

/// The verdict for a target port, given the listening sockets (or why
/// they could not be read).
pub fn judge(port: u16, listening: &Result<Vec<SocketAddr>, String>) -> State {
    let all = match listening {
        Ok(all) => all,
        Err(e) => return State::Unknown(e.clone()),
    };
    let mut exposed: Vec<SocketAddr> = all
        .iter()
        .filter(|a| a.port() == port && !is_loopback(a.ip()))
        .copied()
        .collect();
    exposed.sort();
    exposed.dedup();
    if exposed.is_empty() {
        State::NotExposed
    } else {
        State::Exposed(exposed)
    }
}

fn addrs(list: &[SocketAddr]) -> String {
    list.iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl TargetExposure {
    /// Watches every server route among `routes` whose target is on
    /// loopback.
    pub fn watch<'a>(routes: impl Iterator<Item = &'a RouteConfig>) -> Arc<TargetExposure> {
        let watched: Vec<Watched> = routes
            .filter_map(|cfg| {
                local_target_port(cfg).map(|port| Watched {
                    route: cfg.name.clone(),
                    target: cfg.target.to_string(),
                    port,
                    state: Mutex::new(State::Unchecked),
                    captured: Mutex::new((None, 0)),
                })
            })
            .collect();
        if !watched.is_empty() {
            describe_gauge!(
                TARGET_EXPOSED,
                Unit::Count,
                "1 while the application behind a server route also listens on a non-loopback address of the target's port (only capture rules or a firewall keep plaintext peers from it), by route."
            );
            describe_gauge!(
                TARGET_CAPTURED,
                Unit::Count,
                "1 while a route's application is exposed and the inbound capture table's canary answers for its port (the capture rules are loaded and cover it), else 0, by route."
            );
        }
        Arc::new(TargetExposure {
            watched,
            source: AtomicU8::new(0),
        })
    }

    /// Reads the listening sockets once and judges every watched route.
    pub fn check(&self) {
        if self.watched.is_empty() {
            return;
        }
        let listening = match listeners::listening() {
            Ok((list, source)) => {
                self.source.store(source as u8, Ordering::Relaxed);
                Ok(list)
            }
            Err(e) => {
                self.source.store(0, Ordering::Relaxed);
                Err(e.to_string())
            }
        };
        for w in &self.watched {
            w.update(judge(w.port, &listening));
            w.ask_canary();
        }
    }

    /// Checks every `every` (at least `MIN_INTERVAL`) until `halt`.
    pub async fn run(self: Arc<Self>, every: Duration, mut halt: watch::Receiver<bool>) {
        if self.watched.is_empty() {
            return;
        }
        let every = every.max(MIN_INTERVAL);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => self.check(),
                _ = halt.changed() => return,
            }
        }
    }

    /// What `/status` shows, one entry per watched route.
    pub fn status(&self) -> Vec<ExposureStatus> {
        let source = listeners::Source::from_u8(self.source.load(Ordering::Relaxed));
        self.watched
            .iter()
            .map(|w| ExposureStatus {
                source: source.map(listeners::Source::as_str),
                ..w.status()
            })
            .collect()
    }
}

impl Watched {
    fn current(&self) -> State {
        self.state
            .lock()
            .map(|s| s.clone())
            .unwrap_or(State::Unchecked)
    }

    /// Records `next`; logs and sets the gauge when it differs from the
    /// last state.
    fn update(&self, next: State) {
        let Ok(mut state) = self.state.lock() else {
            return;
        };
        if *state == next {
            return;
        }
        self.report(&state, &next);
        *state = next;
    }

    fn report(&self, before: &State, next: &State) {
        let exposed = matches!(next, State::Exposed(_));
        gauge!(TARGET_EXPOSED, "route" => self.route.clone()).set(if exposed { 1.0 } else { 0.0 });
        let (route, target) = (&self.route, &self.target);
        match next {
            State::Exposed(list) => warn!(
                target: "mtls_sidecar::exposure",
                route = %route,
                target = %target,
                listening = %addrs(list),
                "the application behind this server route listens on a non-loopback address: \
                 only the inbound capture rules or a firewall keep plaintext peers from it \
                 (bind it to loopback; see docs/transparent.md)"
            ),
            State::NotExposed if matches!(before, State::Exposed(_)) => info!(
                target: "mtls_sidecar::exposure",
                route = %route,
                target = %target,
                "the application behind this server route no longer listens on a non-loopback address"
            ),
            State::Unknown(e) => info!(
                target: "mtls_sidecar::exposure",
                route = %route,
                error = %e,
                "cannot check whether the application behind this server route listens on a non-loopback address"
            ),
            State::NotExposed | State::Unchecked => {}
        }
    }

    /// While exposed, asks the capture canary (every check while captured,
    /// every [`UNCAPTURED_PROBE_EVERY`] checks otherwise); not exposed, the
    /// verdict is cleared. Logs and sets the gauge on a change.
    fn ask_canary(&self) {
        let exposed = matches!(self.current(), State::Exposed(_));
        let Ok(mut captured) = self.captured.lock() else {
            return;
        };
        let (before, since) = *captured;
        let next = if !exposed {
            None
        } else if before == Some(false) && since + 1 < UNCAPTURED_PROBE_EVERY {
            *captured = (before, since + 1);
            return;
        } else {
            canary_verdict(probe_canary(self.port))
        };
        *captured = (next, 0);
        drop(captured);
        gauge!(TARGET_CAPTURED, "route" => self.route.clone()).set(if next == Some(true) {
            1.0
        } else {
            0.0
        });
        if next == before || !exposed {
            return;
        }
        let (route, port) = (&self.route, self.port);
        match next {
            Some(true) => info!(
                target: "mtls_sidecar::exposure",
                route = %route,
                port,
                "the inbound capture rules cover this route's application port (their canary answers)"
            ),
            Some(false) => warn!(
                target: "mtls_sidecar::exposure",
                route = %route,
                port,
                "the application behind this server route is exposed and no capture rule covers its port \
                 (the canary of inbound.nft does not answer): plaintext peers reach it directly"
            ),
            None => {}
        }
    }

    fn status(&self) -> ExposureStatus {
        let state = self.current();
        let (listening, error) = match &state {
            State::Exposed(list) => (list.iter().map(SocketAddr::to_string).collect(), None),
            State::Unknown(e) => (Vec::new(), Some(e.clone())),
            State::NotExposed | State::Unchecked => (Vec::new(), None),
        };
        ExposureStatus {
            route: self.route.clone(),
            target: self.target.clone(),
            state: state.name(),
            listening,
            error,
            source: None,
            captured: self.captured.lock().ok().and_then(|c| c.0),
        }
    }
}

/// One connect to the capture canary, [`CANARY_ADDR`] on `port`; a
/// connection that is made is closed at once.
fn probe_canary(port: u16) -> std::io::Result<()> {
    let addr = SocketAddr::from((CANARY_ADDR, port));
    std::net::TcpStream::connect_timeout(&addr, CANARY_TIMEOUT).map(drop)
}

/// What a connect to the canary says: `Some(true)` when the canary rule
/// rejected it (`EHOSTUNREACH`: the capture table is loaded and lists the
/// port), `Some(false)` when it was refused or connected (no such rule:
/// nothing listens there, or the application on every address answered),
/// `None` for anything else (a timeout, the sandbox): no verdict.
pub fn canary_verdict(result: std::io::Result<()>) -> Option<bool> {
    match result {
        Ok(()) => Some(false),
        Err(e) if e.raw_os_error() == Some(libc::EHOSTUNREACH) => Some(true),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(false),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_canary_says_captured_only_when_its_rule_rejects() {
        use std::io::{Error, ErrorKind};
        assert_eq!(
            canary_verdict(Err(Error::from_raw_os_error(libc::EHOSTUNREACH))),
            Some(true)
        );
        assert_eq!(
            canary_verdict(Err(Error::from_raw_os_error(libc::ECONNREFUSED))),
            Some(false)
        );
        assert_eq!(canary_verdict(Ok(())), Some(false));
        assert_eq!(canary_verdict(Err(Error::from(ErrorKind::TimedOut))), None);
        assert_eq!(
            canary_verdict(Err(Error::from_raw_os_error(libc::EACCES))),
            None
        );
    }

    #[test]
    fn only_non_loopback_listeners_on_the_port_expose() {
        let ok = |v: &[&str]| Ok(v.iter().map(|s| sa(s)).collect::<Vec<_>>());
        let local = ok(&[
            "127.0.0.1:2100",
            "[::1]:2100",
            "[::ffff:127.0.0.1]:2100",
            "0.0.0.0:2101",
            "127.0.0.2:2100",
        ]);
        assert_eq!(judge(2100, &local), State::NotExposed);
        assert_eq!(judge(2100, &ok(&[])), State::NotExposed);
        for exposed in [
            "0.0.0.0:2100",
            "[::]:2100",
            "10.77.0.2:2100",
            "[fd00::1]:2100",
        ] {
            let got = judge(2100, &ok(&["127.0.0.1:2100", exposed, exposed]));
            assert_eq!(got, State::Exposed(vec![sa(exposed)]), "{exposed}");
        }
        let why = Err("cannot read".to_string());
        assert_eq!(judge(2100, &why), State::Unknown("cannot read".into()));
    }

    #[test]
    fn only_server_routes_with_a_loopback_target_are_watched() {
        let route = |mode: &str, target: &str, i: usize| {
            let sans = if mode == "server" {
                "allow_san = [\"c.test\"]"
            } else {
                "server_name = \"s.test\""
            };
            format!(
                "[[route]]\nname = \"r{i}\"\nmode = \"{mode}\"\nlisten = \"127.0.0.1:{}\"\n\
                 target = \"{target}\"\n{sans}\n",
                7000 + i
            )
        };
        let cases = [
            ("server", "127.0.0.1:2100", Some(2100)),
            ("server", "localhost:2101", Some(2101)),
            ("server", "[::1]:2102", Some(2102)),
            ("server", "10.77.0.2:2100", None),
            ("server", "app.example:2100", None),
            ("server", "unix:/run/app.sock", None),
            ("client", "127.0.0.1:2100", None),
        ];
        let text: String = std::iter::once("tls_dir = \"/x\"\n".to_string())
            .chain(cases.iter().enumerate().map(|(i, c)| route(c.0, c.1, i)))
            .collect();
        let spec: crate::config::FileSpec = toml::from_str(&text).unwrap();
        let settings = spec.validate().unwrap();
        for (cfg, (mode, target, want)) in settings.routes.iter().zip(cases) {
            assert_eq!(local_target_port(cfg), want, "{mode} {target}");
        }
        let watched = TargetExposure::watch(settings.routes.iter());
        let names: Vec<_> = watched.status().into_iter().map(|s| s.route).collect();
        assert_eq!(names, ["r0", "r1", "r2"]);
        assert!(watched.status().iter().all(|s| s.state == "unchecked"));
    }

    #[test]
    fn states_have_names_for_status() {
        let names: Vec<_> = [
            State::Unchecked,
            State::Unknown(String::new()),
            State::NotExposed,
            State::Exposed(vec![]),
        ]
        .iter()
        .map(State::name)
        .collect();
        assert_eq!(names, ["unchecked", "unknown", "not_exposed", "exposed"]);
    }
}
