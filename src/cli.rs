//! The command line (docs/configuration.md lists every flag). Parsing only: flags
//! become a [`RouteSpec`]/[`FileSpec`] and are validated in [`crate::config`].

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{CredentialSpec, FileSpec, RouteSpec};
use crate::identity::Role;
use crate::log::LogFormat;
use crate::proxy::settings::Mode;
use crate::sandbox::SandboxMode;

/// A transparent mutual-TLS sidecar proxy for plaintext controller/replica ports.
#[derive(Debug, Parser)]
#[command(name = "mtls-sidecar", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Terminate mutual TLS and forward to a plaintext target on this host.
    Server(ServerArgs),
    /// Accept plaintext locally and originate mutual TLS to a remote sidecar.
    Client(ClientArgs),
    /// Run several routes from a TOML config file, sharing one credential set.
    Run(RunArgs),
    /// Preflight-check a credential directory or three files, or (--manifest) rendered workloads.
    Check(CheckArgs),
    /// Development PKI in process: mint a CA and issue identities.
    #[command(subcommand)]
    Certs(CertsCommand),
    /// A self-contained walkthrough: two sidecars, a rotation, the metrics.
    Demo(DemoArgs),
    /// Probe a running sidecar's admin endpoint (for container HEALTHCHECKs).
    Health(HealthArgs),
    /// Write files as a new revision of a directory, kubelet-style (atomic ..data swap).
    Publish(PublishArgs),
    /// Add the sidecar to every pod template that opted in by annotation (manifests to stdout).
    Inject(InjectArgs),
    /// Remove what `inject` added (manifests to stdout).
    Uninject(UninjectArgs),
    /// Serve the mutating admission webhook that injects opted-in pods (POST /inject over HTTPS).
    Webhook(WebhookArgs),
    /// Tests only: apply the sandbox a config file gets, then try accesses.
    #[command(hide = true)]
    SandboxProbe(SandboxProbeArgs),
}

/// Where credentials come from.
#[derive(Debug, Clone, Args)]
pub struct CredentialArgs {
    /// Directory holding tls.crt, tls.key and ca.crt (a Secret mount or a plain directory).
    #[arg(long, value_name = "DIR")]
    pub tls_dir: Option<PathBuf>,
    /// With --tls-dir: the directory holding ca.crt (and optionally ca.crl, intermediates, deny) instead of --tls-dir (a csi-driver identity volume beside a trust ConfigMap volume).
    #[arg(long, value_name = "DIR", requires = "tls_dir")]
    pub trust_dir: Option<PathBuf>,
    /// Certificate chain file (leaf first); with --key and --ca instead of --tls-dir.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Private key file (PKCS#8, SEC1 or PKCS#1 PEM).
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// CA bundle file (one or more trust anchors).
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// CRL file (PEM or DER, one or more CRLs); with --cert/--key/--ca (a directory's is ca.crl).
    #[arg(long, value_name = "FILE")]
    pub crl: Option<PathBuf>,
    /// Known intermediate CAs (PEM) that CRLs may be signed by, never trust anchors; with --cert/--key/--ca (a directory's is intermediates).
    #[arg(long, value_name = "FILE")]
    pub intermediates: Option<PathBuf>,
    /// Deny-list file (spki-sha256:, serial:, san: entries); with --cert/--key/--ca (a directory's is deny).
    #[arg(long, value_name = "FILE")]
    pub deny_file: Option<PathBuf>,
    /// The SPIFFE Workload API (unix:///path/to/agent.sock) instead of files; bare, SPIFFE_ENDPOINT_SOCKET's.
    #[arg(long, value_name = "ENDPOINT", num_args = 0..=1, default_missing_value = "")]
    pub workload_api: Option<String>,
    /// With --workload-api: the SPIFFE ID of the SVID to use [default: the first the agent sends].
    #[arg(long, value_name = "SPIFFE_ID")]
    pub svid: Option<String>,
}

impl CredentialArgs {
    pub fn spec(&self) -> CredentialSpec {
        CredentialSpec {
            tls_dir: self.tls_dir.clone(),
            trust_dir: self.trust_dir.clone(),
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.ca.clone(),
            crl: self.crl.clone(),
            intermediates: self.intermediates.clone(),
            deny: self.deny_file.clone(),
            workload_api: self.workload_api.clone(),
            svid: self.svid.clone(),
        }
    }
}

/// Flags shared by `server` and `client`.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Where to accept (TLS for server, plaintext for client): host:port, unix:/path, or systemd:NAME (socket activation).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// Where to connect (plaintext for server, TLS for client): host:port or unix:/path
    /// [required, except for client --transparent].
    #[arg(long, value_name = "ADDR")]
    pub target: Option<String>,
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// Route name in logs and metric labels [default: server / client].
    #[arg(long)]
    pub name: Option<String>,
    /// Admin HTTP listener for /metrics, /livez, /readyz, /status (host:port, unix:/path or systemd:NAME).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// Bound on one TLS handshake.
    #[arg(long, value_name = "DUR", default_value = "10s")]
    pub handshake_timeout: String,
    /// Bound on connecting to the target.
    #[arg(long, value_name = "DUR", default_value = "5s")]
    pub connect_timeout: String,
    /// Authenticated, forwarded connections at once on the route (more wait for a slot).
    #[arg(long, value_name = "N", default_value_t = 4096)]
    pub max_connections: u64,
    /// Unauthenticated handshakes in flight on the route; when full, the oldest is closed.
    #[arg(long, value_name = "N", default_value_t = 1024)]
    pub max_handshakes: u64,
    /// Runtime worker threads [default: the CPUs this process may use, at most 4].
    #[arg(long, value_name = "N")]
    pub worker_threads: Option<u64>,
    /// How the threads share connections: `per-core` (one single-threaded runtime per thread, each accepting; a connection stays on its thread) or `multi` (one work-stealing runtime) [default: per-core].
    #[arg(long, value_name = "MODEL", value_parser = crate::config::RuntimeModel::NAMES)]
    pub runtime: Option<String>,
    /// How often the credential files are polled.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    pub reload_interval: String,
    /// How long a CA removed from ca.crt stays trusted (max 24h).
    #[arg(long, value_name = "DUR", default_value = "0s")]
    pub trust_grace: String,
    /// How often a quiet connection to the SPIFFE Workload API agent is pinged (an unanswered ping marks the agent down; gRPC servers refuse pings more often than every 5m unless configured to allow them).
    #[arg(long, value_name = "DUR", default_value = "6m")]
    pub workload_api_keepalive: String,
    /// Which certificates of a peer chain are checked against the CRLs: the leaf, or every CA-issued one.
    #[arg(long, value_name = "SCOPE", default_value = "leaf", value_parser = ["leaf", "chain"])]
    pub crl_scope: String,
    /// How long ago a serial must have been revoked for a CRL at a higher CRL number that omits it to prune it (its certificate expired) rather than un-revoke it [default: 720h, the shipped CRL job's --prune-expired].
    #[arg(long, value_name = "DUR")]
    pub crl_prune_age: Option<String>,
    /// Close connections older than this [default: off].
    #[arg(long, value_name = "DUR")]
    pub max_connection_lifetime: Option<String>,
    /// Lowest TLS version offered/accepted.
    #[arg(long, value_name = "VERSION", default_value = "1.3", value_parser = ["1.2", "1.3"])]
    pub tls_min_version: String,
    /// On SIGTERM, how long live connections may finish.
    #[arg(long, value_name = "DUR", default_value = "30s")]
    pub drain_timeout: String,
    /// Log line format (level from RUST_LOG, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Set SO_MARK N on every outbound socket (decimal or 0x hex), so redirect rules can skip
    /// the sidecar's own connections; needs CAP_NET_ADMIN.
    #[arg(long, value_name = "N", value_parser = crate::proxy::mark::parse_mark)]
    pub mark: Option<u32>,
    /// Landlock: restrict the process to its credentials, listen and target ports [default: best-effort].
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// How long a half-closed connection may stay quiet (tests only).
    #[arg(long, value_name = "DUR", hide = true)]
    pub half_close_linger: Option<String>,
    /// ALPN protocol (repeatable): a server accepts only these (a peer offering none is still accepted); a client offers them.
    #[arg(long, value_name = "PROTO")]
    pub alpn: Vec<String>,
    /// One INFO line per authenticated connection at close (identity, bytes, duration, reason)
    /// [default: on for server, off for client].
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub access_log: Option<String>,
    /// Serve the admin path /connections (live peer identities) on a non-loopback admin
    /// listener too [default: off; always on for a loopback or Unix-socket one].
    #[arg(long, value_name = "on|off", value_parser = ["on", "off"])]
    pub admin_connections: Option<String>,
    /// An application probe the admin endpoint performs at /app-probe/NAME against a server
    /// route's loopback target port: NAME=HANDLER, the pod's probe handler as JSON (written
    /// by `inject`; repeatable).
    #[arg(long, value_name = "NAME=HANDLER")]
    pub app_probe: Vec<String>,
    /// TLS 1.3 session resumption with tickets bound to the credential revision (never TLS 1.2 resumption or 0-RTT).
    #[arg(long)]
    pub resumption: bool,
}

#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// Allowed client identity: DNS name, *.suffix (one label), or URI (repeatable).
    #[arg(long, value_name = "NAME")]
    pub allow_san: Vec<String>,
    /// Accept any client certificate from the trusted CA (logs a warning).
    #[arg(long)]
    pub allow_any_san: bool,
    /// Forward one connection at a time; an authenticated newcomer displaces the incumbent.
    #[arg(long)]
    pub exclusive: bool,
    /// Pin the client's public key: base64 SHA-256 of its SubjectPublicKeyInfo (repeatable; in addition to CA and SAN).
    #[arg(long, value_name = "B64")]
    pub allow_spki_sha256: Vec<String>,
    /// Write a PROXY protocol header (v2) with the peer's address and identity to the target first.
    #[arg(long, value_name = "VERSION", value_parser = ["v2"])]
    pub proxy_protocol: Option<String>,
    /// The target speaks HTTP (HTTP/1.1, or h2c when the client negotiated h2): add the
    /// verified peer's identity to every request as x-forwarded-client-cert (Envoy's format),
    /// removing any the client sent.
    #[arg(long, value_name = "FORMAT", value_parser = ["xfcc"])]
    pub http_identity: Option<String>,
    /// With --http-identity: a request whose header section is larger gets 431 [default: 65536].
    #[arg(long, value_name = "BYTES", requires = "http_identity")]
    pub http_max_header_bytes: Option<u64>,
    /// With --http-identity: a request with more header fields gets 431 [default: 100].
    #[arg(long, value_name = "N", requires = "http_identity")]
    pub http_max_headers: Option<u64>,
    /// With --http-identity: close a connection with no complete request head this long after
    /// it opened or after its last response (an unfinished head, an idle keep-alive or h2
    /// connection) [default: 30s].
    #[arg(long, value_name = "DURATION", requires = "http_identity")]
    pub http_header_timeout: Option<String>,
    /// With --http-identity: answer 408 and end a request (HTTP/1.1: close the connection; h2:
    /// the stream) whose body has not sent its next part for this long [default: 60s].
    #[arg(long, value_name = "DURATION", requires = "http_identity")]
    pub http_body_timeout: Option<String>,
    /// With --http-identity: close a connection whose unfinished HTTP/1.1 request head or h2
    /// header block would take the route's unfinished heads, all connections together, past this
    /// [default: 4194304].
    #[arg(long, value_name = "BYTES", requires = "http_identity")]
    pub http_max_pending_head_bytes: Option<u64>,
}

#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    #[command(flatten)]
    pub common: CommonArgs,
    /// SNI sent to the remote sidecar and default expected SAN [default: the target's host].
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
    /// Expected server identity: DNS name, *.suffix or URI (repeatable).
    #[arg(long, value_name = "NAME")]
    pub expect_san: Vec<String>,
    /// Allow a plaintext listener on a non-loopback address.
    #[arg(long)]
    pub unsafe_listen: bool,
    /// Pin the server's public key: base64 SHA-256 of its SubjectPublicKeyInfo (repeatable; in addition to CA and SAN).
    #[arg(long, value_name = "B64")]
    pub expect_spki_sha256: Vec<String>,
    #[command(flatten)]
    pub transparent: TransparentArgs,
}

/// `client --transparent`: one destination rule per `--destination`, all
/// with the route's --expect-san, --server-name and --tls-port.
#[derive(Debug, Clone, Args)]
pub struct TransparentArgs {
    /// Accept connections redirected by nftables/iptables and dial each one's original
    /// destination (no --target; see --destination).
    #[arg(long)]
    pub transparent: bool,
    /// Original destinations to serve, CIDR:PORT or [IPv6/PREFIX]:PORT (repeatable; first
    /// match wins); others are refused (no_destination).
    #[arg(long, value_name = "CIDR:PORT", requires = "transparent")]
    pub destination: Vec<String>,
    /// Port of the server sidecars at the original destinations [default: the destination's port].
    #[arg(long, value_name = "PORT", requires = "transparent")]
    pub tls_port: Option<u16>,
    /// The connections are diverted by TPROXY, not REDIRECT: the listener gets IP_TRANSPARENT
    /// and each connection's local address is its original destination; needs CAP_NET_ADMIN.
    #[arg(long, requires = "transparent")]
    pub tproxy: bool,
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The TOML config file.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Log line format (level from RUST_LOG, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Landlock mode; overrides the file's `sandbox` key [default: best-effort].
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// An application probe served at /app-probe/NAME, in addition to the file's `app_probe`
    /// (see `server --app-probe`; repeatable).
    #[arg(long, value_name = "NAME=HANDLER")]
    pub app_probe: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub credentials: CredentialArgs,
    /// A SAN the certificate must carry (repeatable; extra SANs are fine).
    #[arg(long, value_name = "NAME")]
    pub require_san: Vec<String>,
    /// The usage the certificate must allow.
    #[arg(long, value_enum)]
    pub role: Option<Role>,
    /// Fail when less than this much validity is left.
    #[arg(long, value_name = "DUR")]
    pub min_validity: Option<String>,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
    /// A Secret as `kubectl get secret NAME -o yaml|json` prints it (`-`:
    /// stdin), checked for type kubernetes.io/tls and its keys; with --ca
    /// the trust comes from that file instead of the Secret's ca.crt.
    #[arg(long, value_name = "FILE|-")]
    pub secret: Option<String>,
    /// Print the identity certificate's public-key pin (base64 SHA-256 of its
    /// SubjectPublicKeyInfo, for --allow-spki-sha256/--expect-spki-sha256)
    /// instead of checking; --cert FILE alone is enough.
    #[arg(long)]
    pub spki: bool,
    /// Validate a `run --config` file instead (routes, limits, transparent
    /// destination rules): exit 0 when `run --config` would accept it, 2
    /// naming the first problem. With --against: preview it as a candidate.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["secret", "spki", "json"])]
    pub config: Option<PathBuf>,
    /// Preview the candidate (a directory, files, a Secret, a --workload-api context, --crl FILE or
    /// --deny-file FILE alone, or a --config FILE) on a running sidecar whose admin endpoint is ADMIN_URL (http://HOST:PORT, HOST:PORT
    /// or unix:/PATH): print each live connection it would close, why and when, changing nothing. Exit 2:
    /// the candidate is invalid (or nothing could be fetched); 1: something would be closed; 0: nothing.
    #[arg(long, value_name = "ADMIN_URL", conflicts_with_all = ["spki", "json"])]
    pub against: Option<String>,
    /// With --against: the --trust-grace to preview with [default: the running sidecar's].
    #[arg(long, value_name = "DUR", requires = "against")]
    pub trust_grace: Option<String>,
    /// Preflight rendered Kubernetes manifests offline (YAML or JSON, multi-document, `-`: stdin;
    /// repeatable or several files): for each opted-in or injected pod template, its referenced
    /// Secrets/ConfigMaps are present, its SANs satisfy the workloads it dials and that dial it, and
    /// Services reach the `mtls` port. PASS/WARN/FAIL per workload; exit 1 on a FAIL, 2 on unreadable input.
    #[arg(long, value_name = "FILE|-", num_args = 1.., conflicts_with_all = ["secret", "spki", "json", "config", "against"])]
    pub manifest: Vec<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum CertsCommand {
    /// Mint an ECDSA P-256 CA into DIR (ca.crt, ca.key).
    Ca(CertsCaArgs),
    /// Issue a leaf from a CA into DIR (tls.crt, tls.key, ca.crt).
    Issue(CertsIssueArgs),
    /// Write a CRL signed by the CA in DIR revoking serials, or extend (or, with no serial, re-sign) an existing one.
    Revoke(CertsRevokeArgs),
    /// Append one entry to a deny file (validated, never twice, atomic; existing lines kept): no CA key needed.
    Deny(CertsDenyArgs),
}

#[derive(Debug, Clone, Args)]
pub struct CertsDenyArgs {
    /// The deny file to write (created if missing; a credential directory's `deny`, or a --deny-file).
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Deny this certificate's key (any certificate: a leaf, an intermediate, a CA): spki-sha256 of the file's first certificate.
    #[arg(long, value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Deny a key by its SPKI SHA-256, base64.
    #[arg(long, value_name = "B64")]
    pub spki: Option<String>,
    /// Deny a serial number (hex, colons allowed) issued by the key of --issuer-cert.
    #[arg(long, value_name = "HEX")]
    pub serial: Option<String>,
    /// The issuer of --serial (its key names it).
    #[arg(long, value_name = "FILE")]
    pub issuer_cert: Option<PathBuf>,
    /// Deny a SAN: a DNS name (case-insensitive) or a URI (exact).
    #[arg(long, value_name = "NAME")]
    pub san: Option<String>,
    /// A comment line written above the entry (who, why, ticket).
    #[arg(long, value_name = "TEXT")]
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CertsRevokeArgs {
    /// Directory written by `certs ca` (ca.crt, ca.key), or a cert-manager CA Secret's files (tls.crt, tls.key). Repeatable to re-sign each CA's CRL of the file (a CA rotation): a directory holding no CA, or a CA with no CRL in the file, is then skipped.
    #[arg(long, value_name = "DIR", required = true)]
    pub ca: Vec<PathBuf>,
    /// Serial number to revoke, hex, colons allowed (repeatable).
    #[arg(long, value_name = "HEX")]
    pub serial: Vec<String>,
    /// Certificate file whose serial to revoke (repeatable).
    #[arg(long, value_name = "FILE")]
    pub cert: Vec<PathBuf>,
    /// The CRL file to write (one CRL per CA; other CAs' CRLs are kept); this CA's CRL is extended (its entries kept, its CRL number incremented) or started; with no --serial/--cert it is re-signed with a new nextUpdate.
    #[arg(long, value_name = "FILE")]
    pub out: PathBuf,
    /// Days until the CRL's nextUpdate.
    #[arg(long, default_value_t = 7)]
    pub days: u32,
    /// Leave out the entries revoked more than this long ago (e.g. 720h): the longest lifetime of a certificate the CA issues, so every such certificate has expired.
    #[arg(long, value_name = "MAX_LIFETIME")]
    pub prune_expired: Option<String>,
}

#[derive(Debug, Clone, Args)]
pub struct CertsCaArgs {
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "mtls-sidecar dev CA")]
    pub name: String,
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Overwrite an existing key.
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Clone, Args)]
pub struct CertsIssueArgs {
    /// Directory written by `certs ca` (ca.crt, ca.key), or a cert-manager CA Secret's files (tls.crt, tls.key).
    #[arg(long, value_name = "DIR")]
    pub ca: PathBuf,
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// DNS SAN (repeatable).
    #[arg(long, value_name = "NAME")]
    pub dns: Vec<String>,
    /// URI SAN such as a SPIFFE ID (repeatable).
    #[arg(long, value_name = "URI")]
    pub uri: Vec<String>,
    /// Extended key usage of the leaf.
    #[arg(long, value_enum)]
    pub role: Role,
    #[arg(long, default_value_t = 90)]
    pub days: u32,
    /// Overwrite an existing key.
    #[arg(long)]
    pub force: bool,
}

/// The hidden `sandbox-probe` (see [`crate::tools::sandbox_probe`]).
#[derive(Debug, Clone, Args)]
pub struct SandboxProbeArgs {
    /// The TOML config file whose sandbox is applied.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// Overrides the file's `sandbox` key.
    #[arg(long, value_enum, value_name = "MODE")]
    pub sandbox: Option<SandboxMode>,
    /// A file to try reading once the sandbox is in force (repeatable).
    #[arg(long, value_name = "PATH")]
    pub read: Vec<PathBuf>,
    /// A TCP address to try connecting to once the sandbox is in force (repeatable).
    #[arg(long, value_name = "HOST:PORT")]
    pub connect: Vec<String>,
    /// A file to try opening for writing, created if missing (repeatable).
    #[arg(long, value_name = "PATH")]
    pub write: Vec<PathBuf>,
    /// A file to try removing (repeatable).
    #[arg(long, value_name = "PATH")]
    pub remove: Vec<PathBuf>,
    /// A TCP address to try binding (repeatable).
    #[arg(long, value_name = "HOST:PORT")]
    pub bind: Vec<String>,
    /// Once the other attempts are made, close the sidecar's own TCP
    /// listeners and try binding their addresses again.
    #[arg(long)]
    pub rebind_listeners: bool,
    /// An abstract unix socket name (without the leading NUL) to try connecting to (repeatable).
    #[arg(long, value_name = "NAME")]
    pub abstract_connect: Vec<String>,
    /// A pathname unix socket to try connecting to (repeatable).
    #[arg(long, value_name = "PATH")]
    pub unix_connect: Vec<PathBuf>,
    /// A process to try signalling, with signal 0 (repeatable).
    #[arg(long, value_name = "PID", value_parser = clap::value_parser!(i32).range(1..))]
    pub signal: Vec<i32>,
    /// Try creating a raw IPv4 (ICMP) socket.
    #[arg(long)]
    pub raw_socket: bool,
    /// Try creating a netlink socket of the two protocols told apart by
    /// the filter: `NETLINK_SOCK_DIAG` (allowed) and `NETLINK_ROUTE`.
    #[arg(long)]
    pub netlink: bool,
    /// A UDP address to try sending one datagram to (repeatable).
    #[arg(long, value_name = "HOST:PORT")]
    pub udp_send: Vec<String>,
}

#[derive(Debug, Clone, Args)]
pub struct DemoArgs {}

#[derive(Debug, Clone, Args)]
pub struct HealthArgs {
    /// The sidecar's admin address (host:port or unix:/path).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9901")]
    pub admin: String,
    /// The path to probe.
    #[arg(long, default_value = "/readyz")]
    pub path: String,
    /// Bound on connecting, sending and reading the whole answer.
    #[arg(long, value_name = "DUR", default_value = "2s")]
    pub timeout: String,
}

impl CommonArgs {
    fn route_spec(&self, mode: Mode) -> RouteSpec {
        RouteSpec {
            name: self.name.clone(),
            mode: Some(mode),
            listen: Some(self.listen.clone()),
            target: self.target.clone(),
            handshake_timeout: Some(self.handshake_timeout.clone()),
            connect_timeout: Some(self.connect_timeout.clone()),
            max_connections: Some(self.max_connections),
            max_handshakes: Some(self.max_handshakes),
            max_connection_lifetime: self.max_connection_lifetime.clone(),
            tls_min_version: Some(self.tls_min_version.clone()),
            half_close_linger: self.half_close_linger.clone(),
            alpn: self.alpn.clone(),
            mark: self.mark.map(u64::from),
            access_log: self.access_log.clone(),
            resumption: self.resumption,
            ..Default::default()
        }
    }

    fn file_spec(&self, route: RouteSpec) -> FileSpec {
        FileSpec {
            admin: self.admin.clone(),
            admin_connections: self.admin_connections.clone(),
            reload_interval: Some(self.reload_interval.clone()),
            trust_grace: Some(self.trust_grace.clone()),
            workload_api_keepalive: Some(self.workload_api_keepalive.clone()),
            crl_scope: Some(self.crl_scope.clone()),
            crl_prune_age: self.crl_prune_age.clone(),
            drain_timeout: Some(self.drain_timeout.clone()),
            worker_threads: self.worker_threads,
            runtime: self.runtime.clone(),
            mark: None,
            sandbox: self.sandbox,
            credentials: self.credentials.spec(),
            app_probe: self.app_probe.clone(),
            routes: vec![route],
        }
    }
}

impl ServerArgs {
    /// The one-route config this command line describes.
    pub fn to_spec(&self) -> FileSpec {
        let route = RouteSpec {
            allow_san: self.allow_san.clone(),
            allow_any_san: self.allow_any_san,
            exclusive: self.exclusive,
            allow_spki_sha256: self.allow_spki_sha256.clone(),
            proxy_protocol: self.proxy_protocol.clone(),
            http_identity: self.http_identity.clone(),
            http_max_header_bytes: self.http_max_header_bytes,
            http_max_headers: self.http_max_headers,
            http_header_timeout: self.http_header_timeout.clone(),
            http_body_timeout: self.http_body_timeout.clone(),
            http_max_pending_head_bytes: self.http_max_pending_head_bytes,
            ..self.common.route_spec(Mode::Server)
        };
        self.common.file_spec(route)
    }
}

impl ClientArgs {
    /// The one-route config this command line describes.
    pub fn to_spec(&self) -> FileSpec {
        let route = RouteSpec {
            server_name: self.server_name.clone(),
            expect_san: self.expect_san.clone(),
            unsafe_listen: self.unsafe_listen,
            expect_spki_sha256: self.expect_spki_sha256.clone(),
            ..self.common.route_spec(Mode::Client)
        };
        self.common.file_spec(self.transparent.apply(route))
    }
}

impl TransparentArgs {
    /// With `--transparent`, turns the route's --expect-san/--server-name
    /// into one destination rule per `--destination`.
    fn apply(&self, mut route: RouteSpec) -> RouteSpec {
        if !self.transparent {
            return route;
        }
        let expect_san = std::mem::take(&mut route.expect_san);
        let server_name = route.server_name.take();
        route.transparent = true;
        route.tproxy = self.tproxy;
        route.destination = self
            .destination
            .iter()
            .map(|m| crate::proxy::transparent::DestinationSpec {
                matches: m.clone(),
                tls_port: self.tls_port,
                expect_san: expect_san.clone(),
                server_name: server_name.clone(),
            })
            .collect();
        route
    }
}

/// `publish --into DIR FILE...`.
#[derive(Debug, Clone, Args)]
pub struct PublishArgs {
    /// The directory to publish into (the sidecar's --tls-dir); created if missing.
    #[arg(long, value_name = "DIR")]
    pub into: PathBuf,
    /// Files of the new revision: PATH (published under its base name) or
    /// NAME=PATH. Files of the previous revision not given are kept.
    #[arg(value_name = "FILE", required_unless_present = "drop")]
    pub files: Vec<String>,
    /// Remove NAME, a file of the previous revision, instead of keeping it (repeatable).
    #[arg(long, value_name = "NAME")]
    pub drop: Vec<String>,
    /// Permission bits of the published files (octal).
    #[arg(long, value_name = "OCTAL", default_value = "0640")]
    pub mode: String,
    /// Publish even a credential revision the sidecar would reject.
    #[arg(long)]
    pub no_check: bool,
    /// The sidecars' --crl-prune-age, to say which serials a CRL at a higher CRL number prunes and which it un-revokes [default: 720h].
    #[arg(long, value_name = "DUR")]
    pub crl_prune_age: Option<String>,
}

/// `inject -f FILE|-...`.
#[derive(Debug, Clone, Args)]
pub struct InjectArgs {
    /// A manifest file (YAML or JSON, several documents allowed; `-`: stdin); repeatable.
    #[arg(short = 'f', long, value_name = "FILE|-", required = true)]
    pub filename: Vec<String>,
    /// The sidecar image (pin it by digest: IMAGE@sha256:...) [default: this version's].
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
}

/// `uninject -f FILE|-...`.
#[derive(Debug, Clone, Args)]
pub struct UninjectArgs {
    /// A manifest file (YAML or JSON, several documents allowed; `-`: stdin); repeatable.
    #[arg(short = 'f', long, value_name = "FILE|-", required = true)]
    pub filename: Vec<String>,
}

/// `webhook --listen ADDR --tls-dir DIR`.
#[derive(Debug, Clone, Args)]
pub struct WebhookArgs {
    /// Where to serve HTTPS (host:port).
    #[arg(long, value_name = "ADDR")]
    pub listen: String,
    /// The serving certificate's directory: tls.crt (SAN `<service>.<namespace>.svc`), tls.key, ca.crt; rotated like a sidecar's.
    #[arg(long, value_name = "DIR")]
    pub tls_dir: PathBuf,
    /// Admin HTTP listener for /metrics, /livez, /readyz (host:port or unix:/path).
    #[arg(long, value_name = "ADDR")]
    pub admin: Option<String>,
    /// The sidecar image injected (pin it by digest: IMAGE@sha256:...) [default: this version's].
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// How often the certificate files are polled.
    #[arg(long, value_name = "DUR", default_value = "1s")]
    pub reload_interval: String,
    /// Log line format (level from RUST_LOG, default info).
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Landlock and seccomp: read only --tls-dir, bind only the two listeners, connect nowhere.
    #[arg(long, value_enum, value_name = "MODE", default_value_t = SandboxMode::BestEffort)]
    pub sandbox: SandboxMode,
}
