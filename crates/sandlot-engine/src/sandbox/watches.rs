//! Directory watches: the supervisor's inotify events for one caller, as a [`WatchStream`].
//!
//! The read loop never waits on a watcher: each watch has a bounded queue ([`WATCH_QUEUE`] events);
//! an event that finds it full is dropped and the loss is delivered as an `overflow` event of its own,
//! where the events went missing (see [`WatchSink::push`]), never silently. Each queued event is
//! charged, until its caller takes it, to the sandbox's and the daemon's output pools (which process
//! output reserves from too) and to the caller's own pool (the control layer gives each tenant one):
//! an event that any of them has no room for is a loss like a full queue, so unread watches of many
//! sandboxes cannot make the daemon hold more than those pools.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use sandlot_api::{WatchEvent, WatchKind};
use sandlot_protocol::{encode, Request};
use tokio::sync::{mpsc, oneshot};

use super::Sandbox;
use crate::budget::Budget;
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
/// What a queued event is charged beyond its path's bytes: the event and its slot in the queue.
pub(crate) const EVENT_OVERHEAD: u64 = 64;

/// What one watch's queued events hold in its pools; whatever is still held when the watch's last
/// end goes is given back.
pub(super) struct WatchCharge {
    pools: Vec<Arc<Budget>>,
    held: AtomicU64,
    /// Events of the supervisor's dropped since credit was last given back: their credit goes back
    /// once the client takes something (a client that reads nothing gets the supervisor nothing more).
    dropped: AtomicU64,
}

impl WatchCharge {
    pub(super) fn new(pools: Vec<Arc<Budget>>) -> Arc<WatchCharge> {
        Arc::new(WatchCharge { pools, held: AtomicU64::new(0), dropped: AtomicU64::new(0) })
    }

    /// Takes `bytes` from every pool, or from none.
    fn take(&self, bytes: u64) -> bool {
        for (i, pool) in self.pools.iter().enumerate() {
            if !pool.take(bytes) {
                for done in &self.pools[..i] {
                    done.give(bytes);
                }
                return false;
            }
        }
        self.held.fetch_add(bytes, Ordering::SeqCst);
        true
    }

    fn give(&self, bytes: u64) {
        self.held.fetch_sub(bytes, Ordering::SeqCst);
        for pool in &self.pools {
            pool.give(bytes);
        }
    }
}

impl Drop for WatchCharge {
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        for pool in &self.pools {
            pool.give(held);
        }
    }
}

/// The read loop's end of one watch.
pub(super) struct WatchSink {
    /// Each event with what it was charged.
    tx: mpsc::Sender<(WatchEvent, u64)>,
    charge: Arc<WatchCharge>,
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
    /// An event the pools have no room for is lost the same way; the `overflow` itself is not
    /// charged (one per run of losses, in the slot kept for it).
    pub(super) fn push(&self, ev: WatchEvent) {
        let cost = ev.path.len() as u64 + EVENT_OVERHEAD;
        // The read loop is the only sender, so the room seen here is still there at the send.
        if ev.path.len() <= MAX_EVENT_PATH && self.tx.capacity() > 1 && self.charge.take(cost) {
            self.lost.store(false, Ordering::SeqCst);
            if self.tx.try_send((ev, cost)).is_err() {
                self.charge.give(cost); // the stream went
            }
        } else {
            self.charge.dropped.fetch_add(1, Ordering::SeqCst);
            if !self.lost.swap(true, Ordering::SeqCst) {
                let _ = self.tx.try_send((WatchEvent { kind: WatchKind::Overflow, path: self.path.clone() }, 0));
            }
        }
    }
}

/// The events of one watch, as they happen. Dropping it stops the watch in the sandbox.
pub struct WatchStream {
    id: u64,
    rx: mpsc::Receiver<(WatchEvent, u64)>,
    charge: Arc<WatchCharge>,
    link: Arc<super::link::LinkState>,
    /// Credit taken from the supervisor's events and not yet given back.
    owed: u32,
}

/// Credit is given back in batches of this many events, or at once when the queue is empty.
const CREDIT_BATCH: u32 = 32;

impl WatchStream {
    /// The next event; `None` once the watch has ended (the directory was removed, or the sandbox
    /// stopped).
    pub async fn next(&mut self) -> Option<WatchEvent> {
        let (ev, cost) = self.rx.recv().await?;
        self.charge.give(cost);
        // The daemon's own `overflow` (cost 0) took no credit; what was dropped did.
        let dropped = self.charge.dropped.swap(0, Ordering::SeqCst);
        self.owed =
            self.owed.saturating_add(u32::from(cost > 0)).saturating_add(dropped.min(u64::from(u32::MAX)) as u32);
        if self.owed >= CREDIT_BATCH || (self.owed > 0 && self.rx.is_empty()) {
            let events = std::mem::take(&mut self.owed);
            if let Ok(frame) = encode(&Request::WatchCredit { id: self.id, events }, &[]) {
                let _ = self.link.out.send(frame).await;
            }
        }
        Some(ev)
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
    /// answers once the supervisor has the watch in place, or with why it could not. Its queued
    /// events are charged to `caller_pool` (the caller's) besides the sandbox's and daemon's output
    /// pools.
    pub async fn watch(
        &self,
        uid: u32,
        path: &str,
        recursive: bool,
        caller_pool: Arc<Budget>,
    ) -> Result<WatchStream, EngineError> {
        let id = self.link.next_id.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::channel(WATCH_QUEUE);
        let (ready_tx, ready_rx) = oneshot::channel();
        let [sandbox_pool, daemon_pool] = &self.link.output_pools;
        let charge = WatchCharge::new(vec![Arc::clone(sandbox_pool), caller_pool, Arc::clone(daemon_pool)]);
        {
            let mut watches = lock(&self.link.watches);
            if watches.len() >= MAX_WATCHES {
                return Err(EngineError::Busy(format!(
                    "the sandbox has {MAX_WATCHES} watches open (the limit per sandbox); close one first"
                )));
            }
            let sink = WatchSink {
                tx,
                charge: Arc::clone(&charge),
                lost: AtomicBool::new(false),
                path: path.to_string(),
                ready: Some(ready_tx),
            };
            watches.insert(id, sink);
        }
        // From here the stream's Drop unwatches, whatever happens to this call.
        let stream = WatchStream { id, rx, charge, link: Arc::clone(&self.link), owed: 0 };
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
    fn sink(tx: mpsc::Sender<(WatchEvent, u64)>, pools: Vec<Arc<Budget>>) -> WatchSink {
        WatchSink { tx, charge: WatchCharge::new(pools), lost: AtomicBool::new(false), path: "/w".into(), ready: None }
    }

    /// Queued events hold their bytes in every pool until taken; a pool without room loses the
    /// event as a full queue does (one `overflow`), and what is held goes back with the watch.
    #[tokio::test]
    async fn queued_events_are_charged_to_every_pool_until_taken() {
        let (sandbox, tenant) = (Budget::new(1 << 20), Budget::new(3 * (1 + EVENT_OVERHEAD)));
        let (tx, mut rx) = mpsc::channel(WATCH_QUEUE);
        let sink = sink(tx, vec![Arc::clone(&sandbox), Arc::clone(&tenant)]);
        for p in ["a", "b", "c", "d", "e"] {
            sink.push(ev(p));
        }
        assert_eq!((sandbox.used(), tenant.used()), (3 * (1 + EVENT_OVERHEAD), 3 * (1 + EVENT_OVERHEAD)));
        let taken: Vec<_> = (0..4).map(|_| rx.try_recv().unwrap()).collect();
        let kinds: Vec<_> = taken.iter().map(|(e, _)| (e.kind, e.path.as_str())).collect();
        assert_eq!(
            kinds,
            [(WatchKind::Create, "a"), (WatchKind::Create, "b"), (WatchKind::Create, "c"), (WatchKind::Overflow, "/w")]
        );
        for (_, cost) in &taken {
            sink.charge.give(*cost);
        }
        assert_eq!((sandbox.used(), tenant.used()), (0, 0), "taken events give their bytes back");
        sink.push(ev("f"));
        assert_eq!(tenant.used(), 1 + EVENT_OVERHEAD);
        drop((sink, rx));
        assert_eq!((sandbox.used(), tenant.used()), (0, 0), "a watch that goes gives back what it held");
    }

    #[tokio::test]
    async fn a_full_queue_delivers_an_overflow_in_place_of_what_it_dropped() {
        let (tx, mut rx) = mpsc::channel(3);
        let sink = sink(tx, vec![Budget::new(1 << 20)]);
        for p in ["a", "b", "c", "d", "e"] {
            sink.push(ev(p));
        }
        let overflow = WatchEvent { kind: WatchKind::Overflow, path: "/w".into() };
        assert_eq!(rx.recv().await.unwrap().0, ev("a"));
        // a's slot is the only free one, and it is the kept one: f is dropped with the others.
        sink.push(ev("f"));
        assert_eq!(rx.recv().await.unwrap().0, ev("b"));
        sink.push(ev("g"));
        assert_eq!(rx.recv().await.unwrap().0, overflow, "c, d, e and f were dropped, once said");
        assert_eq!(rx.recv().await.unwrap().0, ev("g"), "events flow again once there is room");
        sink.push(WatchEvent { kind: WatchKind::Create, path: "/".repeat(MAX_EVENT_PATH + 1) });
        sink.push(ev("h"));
        assert_eq!(rx.recv().await.unwrap().0, overflow, "an oversized path is a loss, not held");
        assert_eq!(rx.recv().await.unwrap().0, ev("h"));
        assert!(rx.try_recv().is_err());
    }
}
