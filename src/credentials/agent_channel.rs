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
/// How long the agent may take to answer a call (its response headers, not
/// the stream that follows): an agent that accepts the connection but never
/// answers is given up on after this, not only after a keepalive interval.
/// SPIRE answers at once, with the first context or an error (no identity
/// for this workload yet).
pub const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

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
        .timeout(ANSWER_TIMEOUT)
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
/// "transport error"), each said once (a cause often repeats its source's
/// text).
fn source_chain(e: &dyn std::error::Error) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.iter().any(|t| t.contains(&text)) {
            out.push(text);
        }
        cur = s.source();
    }
    out.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A default gRPC server (SPIRE's agent is one) closes a connection that
    /// pings more often than every five minutes: the default stays above.
    #[test]
    fn the_default_keepalive_is_above_a_grpc_servers_ping_floor() {
        assert!(KEEPALIVE_DEFAULT > Duration::from_secs(5 * 60));
        assert!(KEEPALIVE_TIMEOUT < KEEPALIVE_DEFAULT);
    }

    /// An error saying `text`, caused by `cause`.
    #[derive(Debug)]
    struct Layer(&'static str, Option<Box<Layer>>);

    impl std::fmt::Display for Layer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Layer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            self.1.as_deref().map(|l| l as _)
        }
    }

    #[test]
    fn a_cause_chain_says_each_cause_once() {
        let io = Layer("No such file or directory (os error 2)", None);
        let wrapped = Layer("No such file or directory (os error 2)", Some(Box::new(io)));
        let connect = Layer("connect failed", Some(Box::new(wrapped)));
        let top = Layer("transport error", Some(Box::new(connect)));
        assert_eq!(
            source_chain(&top),
            "connect failed: No such file or directory (os error 2)"
        );
    }
}
