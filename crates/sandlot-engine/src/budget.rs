//! Memory the daemon spends holding a sandbox's process output, bounded per sandbox and for all.
//! Directory watches' queued events are charged to the same pools, event by event (and to their
//! tenant's watch pool), while they wait for their client.
//!
//! A process reserves room for its whole capture (two streams at their cap) before it starts, and at
//! its end gives back what it did not use; a finished process's output is then kept until the sandbox
//! needs the room for a new one (oldest finished first) or the sandbox goes. Reserving up front means
//! output is never dropped for want of memory after a command started: the cap it was started with
//! holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Output bytes one sandbox may hold, running and finished processes together: two processes at the
/// largest cap (two streams of 64 MiB each), or 128 at the default 1 MiB cap.
pub const SANDBOX_OUTPUT_BYTES: u64 = 256 << 20;

/// A pool of bytes.
#[derive(Debug)]
pub struct Budget {
    limit: u64,
    used: AtomicU64,
}

impl Budget {
    /// A pool of `limit` bytes.
    pub fn new(limit: u64) -> Arc<Budget> {
        Arc::new(Budget { limit, used: AtomicU64::new(0) })
    }

    /// Its size.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes reserved now.
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::SeqCst)
    }

    pub(crate) fn take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |u| u.checked_add(bytes).filter(|n| *n <= self.limit))
            .is_ok()
    }

    pub(crate) fn give(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::SeqCst);
    }
}

/// Bytes taken from every pool of `pools` at once; given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    pools: Vec<Arc<Budget>>,
    bytes: AtomicU64,
}

impl Reservation {
    /// Takes `bytes` from each of `pools`, or from none (`None` names the first pool that was short).
    pub fn take(pools: &[Arc<Budget>], bytes: u64) -> Result<Reservation, usize> {
        for (i, pool) in pools.iter().enumerate() {
            if !pool.take(bytes) {
                for done in &pools[..i] {
                    done.give(bytes);
                }
                return Err(i);
            }
        }
        Ok(Reservation { pools: pools.to_vec(), bytes: AtomicU64::new(bytes) })
    }

    /// Gives back everything above `bytes`.
    pub fn shrink_to(&self, bytes: u64) {
        let before = self.bytes.fetch_min(bytes, Ordering::SeqCst);
        if before > bytes {
            for pool in &self.pools {
                pool.give(before - bytes);
            }
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let bytes = *self.bytes.get_mut();
        for pool in &self.pools {
            pool.give(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_take_from_every_pool_or_none_and_give_back() {
        let (sandbox, global) = (Budget::new(100), Budget::new(150));
        let pools = [Arc::clone(&sandbox), Arc::clone(&global)];
        let a = Reservation::take(&pools, 60).unwrap();
        assert_eq!(Reservation::take(&pools, 60).unwrap_err(), 0, "the sandbox pool is short");
        assert_eq!((sandbox.used(), global.used()), (60, 60), "a refused reservation takes nothing");
        a.shrink_to(10);
        assert_eq!((sandbox.used(), global.used()), (10, 10));
        let b = Reservation::take(&pools, 90).unwrap();
        let other = Budget::new(100);
        let c = Reservation::take(&[Arc::clone(&other), Arc::clone(&global)], 60);
        assert_eq!(c.unwrap_err(), 1, "the global pool is short");
        assert_eq!(other.used(), 0);
        drop((a, b));
        assert_eq!((sandbox.used(), global.used()), (0, 0));
    }
}
