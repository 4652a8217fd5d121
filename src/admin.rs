//! The admin HTTP endpoint (`/metrics`, `/livez`, `/readyz`, `/status`).

use std::sync::Arc;

use tokio::sync::watch;

use crate::addr::Listener;
use crate::app::Shared;

/// Serves admin requests until `stop` turns true.
pub async fn serve(listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let _ = (&listener, &shared);
    let _ = stop.wait_for(|s| *s).await;
}
