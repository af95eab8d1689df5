//! Streams to clients: the one policy for a client that stops reading, and the bodies that carry
//! the streams.
//!
//! Every stream the server feeds while something in a sandbox produces it (a native exec's NDJSON,
//! envd's process and watch streams, a terminal's WebSocket, a native watch) waits for its client
//! under the same [`StreamPolicy`], held once in the server's state: a message that waits longer
//! than `stall` for room ends the stream (the producer's queue and reservation go with it), and once
//! the sandbox has ended, `after_end` instead, since its processes have ended too and a reading
//! client takes the rest at once.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::app::AppState;

/// How long a stream waits for a client that does not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamPolicy {
    /// How long one message may wait for the client to take it while the sandbox runs.
    pub stall: Duration,
    /// The same once the sandbox has ended.
    pub after_end: Duration,
}

impl Default for StreamPolicy {
    /// A minute while the sandbox runs (a client on a slow link, or paused in a debugger, keeps its
    /// stream), a second once it has ended.
    fn default() -> Self {
        StreamPolicy { stall: Duration::from_secs(60), after_end: Duration::from_secs(1) }
    }
}

/// A client took no message within the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled;

/// One stream's place under the policy: whether its sandbox has ended.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    policy: StreamPolicy,
    sandbox_ended: bool,
}

impl Pace {
    /// A stream of a running sandbox.
    pub fn new(policy: StreamPolicy) -> Self {
        Pace { policy, sandbox_ended: false }
    }

    /// The sandbox has ended: from now on a message waits [`StreamPolicy::after_end`] at most.
    pub fn sandbox_ended(&mut self) {
        self.sandbox_ended = true;
    }

    /// Whether [`Self::sandbox_ended`] was called.
    pub fn knows_sandbox_ended(&self) -> bool {
        self.sandbox_ended
    }

    /// The bound in force.
    pub fn bound(&self) -> Duration {
        if self.sandbox_ended {
            self.policy.after_end
        } else {
            self.policy.stall
        }
    }

    /// `send` (one message's send) within the bound in force.
    pub async fn send<F: Future>(&self, send: F) -> Result<F::Output, Stalled> {
        tokio::time::timeout(self.bound(), send).await.map_err(|_| Stalled)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_send_waits_the_stall_then_only_the_after_end_bound() {
        let policy = StreamPolicy { stall: Duration::from_secs(60), after_end: Duration::from_secs(1) };
        let mut pace = Pace::new(policy);
        let t0 = tokio::time::Instant::now();
        assert_eq!(pace.send(std::future::pending::<()>()).await, Err(Stalled));
        assert_eq!(t0.elapsed(), Duration::from_secs(60));
        assert_eq!(pace.send(async { 7 }).await, Ok(7));
        pace.sandbox_ended();
        assert!(pace.knows_sandbox_ended());
        let t1 = tokio::time::Instant::now();
        assert_eq!(pace.send(std::future::pending::<()>()).await, Err(Stalled));
        assert_eq!(t1.elapsed(), Duration::from_secs(1));
    }
}
