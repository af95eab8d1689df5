//! Flow control of what pid 1 sends the daemon on a stream (a download, an inbound connection's
//! replies): at most [`OUT_WINDOW`] bytes sent and not yet taken by the daemon's consumer. The
//! daemon gives credit back as its consumer (an HTTP client) reads; a client that stops reading stops
//! the thread that serves it here, and nothing else: the control socket, and every other stream of
//! the sandbox, keep moving.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};

use sandlot_protocol::OUT_WINDOW;

use crate::{lock, wait};

/// One stream's window.
pub(crate) struct Window {
    /// Bytes that may still be sent, and whether the stream was closed (its reader gone).
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Window {
    /// Waits until `n` bytes (at most [`OUT_WINDOW`]) may be sent and takes them; `false` once the
    /// stream is closed, when the caller stops sending.
    pub(crate) fn take(&self, n: usize) -> bool {
        let n = n.min(OUT_WINDOW);
        let mut st = lock(&self.state);
        loop {
            if st.1 {
                return false;
            }
            if st.0 >= n {
                st.0 -= n;
                return true;
            }
            st = wait(&self.changed, st);
        }
    }

    fn give(&self, n: usize) {
        let mut st = lock(&self.state);
        // Never more than the window, whatever the daemon says.
        st.0 = (st.0 + n).min(OUT_WINDOW);
        self.changed.notify_all();
    }

    fn close(&self) {
        lock(&self.state).1 = true;
        self.changed.notify_all();
    }
}

/// The windows of every open outbound stream, fed by the control loop.
#[derive(Default, Clone)]
pub(crate) struct Credits {
    open: Arc<Mutex<HashMap<u64, Arc<Window>>>>,
}

impl Credits {
    /// A full window for stream `id`, until [`Credits::forget`].
    pub(crate) fn open(&self, id: u64) -> Arc<Window> {
        let w = Arc::new(Window { state: Mutex::new((OUT_WINDOW, false)), changed: Condvar::new() });
        lock(&self.open).insert(id, Arc::clone(&w));
        w
    }

    /// The daemon took `bytes` of stream `id`.
    pub(crate) fn give(&self, id: u64, bytes: u64) {
        if let Some(w) = lock(&self.open).get(&id) {
            w.give(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }

    /// The daemon no longer reads stream `id`: its sender stops at its next `take`.
    pub(crate) fn close(&self, id: u64) {
        if let Some(w) = lock(&self.open).remove(&id) {
            w.close();
        }
    }

    /// Stream `id` has ended on its own.
    pub(crate) fn forget(&self, id: u64) {
        lock(&self.open).remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_sender_waits_for_credit_and_stops_when_closed() {
        let credits = Credits::default();
        let w = credits.open(7);
        assert!(w.take(OUT_WINDOW), "a fresh window holds one full window");
        let (w2, c2) = (Arc::clone(&w), credits.clone());
        let waiter = std::thread::spawn(move || w2.take(100));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!waiter.is_finished(), "no credit: the sender waits");
        c2.give(7, 100);
        assert!(waiter.join().unwrap());
        // Credit is capped at one window: after taking it all, the next byte waits.
        credits.give(7, u64::MAX);
        assert!(w.take(OUT_WINDOW));
        let w3 = Arc::clone(&w);
        let blocked = std::thread::spawn(move || w3.take(1));
        std::thread::sleep(Duration::from_millis(50));
        assert!(!blocked.is_finished(), "more than one window of credit was kept");
        // Closing releases the sender, which then stops.
        credits.close(7);
        assert!(!blocked.join().unwrap());
    }
}
