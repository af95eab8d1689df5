//! What every handler shares: the control layer, and what only HTTP needs.

use std::net::SocketAddr;
use std::sync::Arc;

use sandlot_control::Control;

/// What the handlers share: the control layer, and what only HTTP needs (how preview URLs look).
pub struct App {
    pub control: Arc<Control>,
    /// Host-routed preview origins' domain (`--preview-domain`, normalised once at start).
    pub preview_domain: Option<String>,
    /// The address the API listens on (preview URLs of clients that sent no `Host`).
    pub listen: SocketAddr,
    /// Where request bodies that must be read in any order (image archives) are spooled.
    pub spool_dir: std::path::PathBuf,
    /// The E2B surface's templates and domain (`--e2b-*`).
    pub e2b: super::e2b::E2bSettings,
    /// Cancelled when the server stops: ends every MCP session and its open event streams.
    pub mcp_shutdown: tokio_util::sync::CancellationToken,
    /// Start time and request latencies, for `GET /metrics`.
    pub http_metrics: Arc<super::metrics::HttpMetrics>,
    /// How every stream to a client waits for one that does not read.
    pub streams: super::stream::StreamPolicy,
}

pub type AppState = Arc<App>;

/// The domain of host-routed preview origins, if any, from `--preview-domain` (`given`) and the
/// listening address: `localhost` by default on loopback, none elsewhere or when given empty.
pub fn preview_domain(given: Option<&str>, listen: SocketAddr) -> Option<String> {
    match given {
        Some(d) => Some(d.trim_matches('.').to_ascii_lowercase()).filter(|d| !d.is_empty()),
        None => listen.ip().is_loopback().then(|| "localhost".to_string()),
    }
}

impl App {
    /// The domain of host-routed preview origins, if any.
    pub fn preview_domain(&self) -> Option<&str> {
        self.preview_domain.as_deref()
    }
}
