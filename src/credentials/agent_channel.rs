//! The connection to a SPIFFE Workload API agent: the `spiffe` crate's
//! client over a gRPC channel of our own, which differs from the crate's
//! only in sending HTTP/2 keepalive pings.
//!
//! Why: the X.509 stream is quiet between rotations (an hour, often), so
//! an agent that hangs with its socket open (stopped, deadlocked, its node
//! frozen) looks exactly like an agent with nothing to say. A ping that is
//! not answered within [`KEEPALIVE_TIMEOUT`] ends the connection, and the
//! source reports the agent down and retries like any lost stream.
//!
//! The interval is long by default because gRPC servers police pings: a
//! Go server (SPIRE's agent is one) that is not configured otherwise
//! answers a client pinging more often than every five minutes with
//! GOAWAY `too_many_pings` and closes the connection — a stream that
//! broke on its own every few minutes. [`KEEPALIVE_DEFAULT`] stays above
//! that floor; `--workload-api-keepalive` lowers it for an agent whose
//! policy permits more.

use std::time::Duration;

use hyper_util::rt::TokioIo;
use spiffe::transport::Endpoint;
use spiffe::WorkloadApiClient;
use tonic::transport::{Endpoint as Channel, Uri};

/// The default interval between two pings on a quiet connection: above
/// the five minutes a default gRPC server requires between pings.
pub const KEEPALIVE_DEFAULT: Duration = Duration::from_secs(6 * 60);
/// How long a ping may go unanswered before the agent counts as down (or
/// the interval, when that is shorter).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long connecting to the agent's socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of the agent at `endpoint` (`unix:///path`), its connection
/// pinged every `keepalive` while quiet and given up when a ping goes
/// unanswered for [`KEEPALIVE_TIMEOUT`] or `keepalive`, the shorter.
pub async fn connect(endpoint: &str, keepalive: Duration) -> Result<WorkloadApiClient, String> {
    let parsed = Endpoint::parse(endpoint).map_err(|e| e.to_string())?;
    let Endpoint::Unix(path) = &parsed else {
        return Err(format!("{endpoint}: only unix:// endpoints are supported"));
    };
    let path = path.clone();
    // The URI is only the channel's authority: the connector dials the socket.
    let channel = Channel::from_static("http://localhost")
        .connect_timeout(CONNECT_TIMEOUT)
        .http2_keep_alive_interval(keepalive)
        .keep_alive_timeout(keepalive.min(KEEPALIVE_TIMEOUT))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(&path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .map_err(|e| format!("{e}: {}", source_chain(&e)))?;
    Ok(WorkloadApiClient::new_with_channel(parsed, channel))
}

/// The causes below a transport error (tonic's own message is only
/// "transport error").
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        out.push(s.to_string());
        cur = s.source();
    }
    out.join(": ")
}
