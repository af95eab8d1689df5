//! Directory watches: the supervisor's inotify events for one caller, as a [`WatchStream`].
//!
//! The read loop never waits on a watcher: each watch has a bounded queue ([`WATCH_QUEUE`] events);
//! an event that finds it full is dropped and the loss is delivered as an `overflow` event of its own,
//! where the events went missing (see [`WatchSink::push`]), never silently.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sandlot_api::{WatchEvent, WatchKind};
use sandlot_protocol::{encode, Request};
use tokio::sync::{mpsc, oneshot};

use super::Sandbox;
use crate::{lock, EngineError};

/// Events queued per watch for a caller that has not taken them yet.
pub(crate) const WATCH_QUEUE: usize = 512;
/// Watches open at once per sandbox (the supervisor allows as many; this bounds the daemon's side
/// whatever the supervisor says).
pub(crate) const MAX_WATCHES: usize = 8;
/// Longest path an event may carry (PATH_MAX plus a name): with [`WATCH_QUEUE`] and [`MAX_WATCHES`],
/// what a hostile supervisor can make the daemon hold for a sandbox that nobody reads (about 17 MiB).
/// A longer one (a tree deeper than any path a syscall takes) is dropped and owed as `overflow`.
pub(crate) const MAX_EVENT_PATH: usize = 4096 + 256;

/// The read loop's end of one watch.
pub(super) struct WatchSink {
    tx: mpsc::Sender<WatchEvent>,
    /// Events are being dropped and the `overflow` that says so is queued.
    lost: AtomicBool,
    /// The watched directory, named by the `overflow` events the daemon adds.
    path: String,
    pub(super) ready: Option<oneshot::Sender<Result<(), EngineError>>>,
}

impl WatchSink {
    /// Queues `ev` without waiting. The queue's last slot is kept for an `overflow`: an event that
    /// would take it is dropped and the `overflow` takes it instead (once per run of losses), so the
    /// reader always learns of a loss, in its place, and is woken for it as for any event.
    pub(super) fn push(&self, ev: WatchEvent) {
        // The read loop is the only sender, so the room seen here is still there at the send.
        if ev.path.len() <= MAX_EVENT_PATH && self.tx.capacity() > 1 {
            self.lost.store(false, Ordering::SeqCst);
            let _ = self.tx.try_send(ev);
        } else if !self.lost.swap(true, Ordering::SeqCst) {
            let _ = self.tx.try_send(WatchEvent { kind: WatchKind::Overflow, path: self.path.clone() });
        }
    }
}

/// The events of one watch, as they happen. Dropping it stops the watch in the sandbox.
pub struct WatchStream {
    id: u64,
    rx: mpsc::Receiver<WatchEvent>,
    link: Arc<super::link::LinkState>,
}

impl WatchStream {
    /// The next event; `None` once the watch has ended (the directory was removed, or the sandbox
    /// stopped).
    pub async fn next(&mut self) -> Option<WatchEvent> {
        self.rx.recv().await
    }
}

impl Drop for WatchStream {
    fn drop(&mut self) {
        lock(&self.link.watches).remove(&self.id);
        let (out, id) = (self.link.out.clone(), self.id);
        if let (Ok(rt), Ok(frame)) = (tokio::runtime::Handle::try_current(), encode(&Request::Unwatch { id }, &[])) {
            rt.spawn(async move {
                let _ = out.send(frame).await;
            });
        }
    }
}

impl Sandbox {
    /// Watches directory `path` as sandbox user `uid` (and its subdirectories, with `recursive`);
    /// answers once the supervisor has the watch in place, or with why it could not.
    pub async fn watch(&self, uid: u32, path: &str, recursive: bool) -> Result<WatchStream, EngineError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(WATCH_QUEUE);
        let (ready_tx, ready_rx) = oneshot::channel();
        {
            let mut watches = lock(&self.link.watches);
            if watches.len() >= MAX_WATCHES {
                return Err(EngineError::Busy(format!(
                    "the sandbox has {MAX_WATCHES} watches open (the limit per sandbox); close one first"
                )));
            }
            let sink = WatchSink { tx, lost: AtomicBool::new(false), path: path.to_string(), ready: Some(ready_tx) };
            watches.insert(id, sink);
        }
        // From here the stream's Drop unwatches, whatever happens to this call.
        let stream = WatchStream { id, rx, link: Arc::clone(&self.link) };
        self.send(&Request::Watch { id, uid, path: path.to_string(), recursive }, &[]).await?;
        match ready_rx.await {
            Ok(Ok(())) => Ok(stream),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(EngineError::Gone(self.id.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(path: &str) -> WatchEvent {
        WatchEvent { kind: WatchKind::Create, path: path.into() }
    }

    /// A queue that fills keeps its last slot for one `overflow` per run of losses, which comes where
    /// the events were dropped; events flow again once there is room; an oversized path is a loss too.
    #[tokio::test]
    async fn a_full_queue_delivers_an_overflow_in_place_of_what_it_dropped() {
        let (tx, mut rx) = mpsc::channel(3);
        let sink = WatchSink { tx, lost: AtomicBool::new(false), path: "/w".into(), ready: None };
        for p in ["a", "b", "c", "d", "e"] {
            sink.push(ev(p));
        }
        let overflow = WatchEvent { kind: WatchKind::Overflow, path: "/w".into() };
        assert_eq!(rx.recv().await.unwrap(), ev("a"));
        // a's slot is the only free one, and it is the kept one: f is dropped with the others.
        sink.push(ev("f"));
        assert_eq!(rx.recv().await.unwrap(), ev("b"));
        sink.push(ev("g"));
        assert_eq!(rx.recv().await.unwrap(), overflow, "c, d, e and f were dropped, once said");
        assert_eq!(rx.recv().await.unwrap(), ev("g"), "events flow again once there is room");
        sink.push(WatchEvent { kind: WatchKind::Create, path: "/".repeat(MAX_EVENT_PATH + 1) });
        sink.push(ev("h"));
        assert_eq!(rx.recv().await.unwrap(), overflow, "an oversized path is a loss, not held");
        assert_eq!(rx.recv().await.unwrap(), ev("h"));
        assert!(rx.try_recv().is_err());
    }
}
