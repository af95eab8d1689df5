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

/// The queue of a response body its producer can abandon ([`abandonable_queue`]). It holds the
/// queue weakly: a body dropped because its client went drops the receiver, so the producer's
/// `send` fails and `closed()` fires as for a plain channel.
pub struct Abandon<T>(std::sync::Weak<std::sync::Mutex<Option<tokio::sync::mpsc::Receiver<T>>>>);

impl<T> Abandon<T> {
    /// Drops what is queued and ends the body: for a client that stopped reading, whose queue
    /// would otherwise stay held for as long as its connection stays open.
    pub fn abandon(&self) {
        if let Some(queue) = self.0.upgrade() {
            drop(queue.lock().unwrap_or_else(|p| p.into_inner()).take());
        }
    }
}

/// A stream of what `rx` receives, and the handle that abandons it.
pub fn abandonable_queue<T: Send + 'static>(
    rx: tokio::sync::mpsc::Receiver<T>,
) -> (impl futures_util::Stream<Item = T> + Send + 'static, Abandon<T>) {
    let queue = Arc::new(std::sync::Mutex::new(Some(rx)));
    let handle = Arc::downgrade(&queue);
    let stream =
        futures_util::stream::poll_fn(move |cx| match queue.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            Some(rx) => rx.poll_recv(cx),
            None => std::task::Poll::Ready(None),
        });
    (stream, Abandon(handle))
}

/// A response body fed by a channel: each item is a chunk, an error aborts the transfer.
pub fn channel_body<E>(mut rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, E>>) -> axum::body::Body
where
    E: Into<axum::BoxError> + Send + 'static,
{
    axum::body::Body::from_stream(futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)))
}

/// `resp` with a body that ends once the key behind `lease` is revoked or expires (checked every
/// [`sandlot_control::LEASE_RECHECK`]): a stream opened with a key lasts no longer than the key does.
/// Ending it drops the inner body, which stops whatever fed it (a watch, a follower).
pub fn leased(
    app: &AppState,
    mut lease: sandlot_control::KeyLease,
    resp: axum::response::Response,
) -> axum::response::Response {
    use futures_util::StreamExt;
    let (parts, body) = resp.into_parts();
    let mut inner = body.into_data_stream();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, axum::Error>>(1);
    let control = Arc::clone(&app.control);
    tokio::spawn(async move {
        let mut recheck = tokio::time::interval(sandlot_control::LEASE_RECHECK);
        recheck.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        recheck.tick().await;
        loop {
            tokio::select! {
                chunk = inner.next() => match chunk {
                    Some(chunk) => {
                        if tx.send(chunk).await.is_err() {
                            return;
                        }
                    }
                    None => return,
                },
                _ = recheck.tick() => {
                    if let Err(e) = control.recheck_key(&mut lease) {
                        tracing::info!(key = lease.id(), "a stream ends with its key: {}", e.message);
                        return;
                    }
                }
                () = tx.closed() => return,
            }
        }
    });
    axum::response::Response::from_parts(parts, channel_body(rx))
}
