//! The sandbox network, seen from the host: what a sandbox may reach and how its traffic is parsed.
//!
//! Everything here handles bytes that sandbox code controls (DNS queries, TLS ClientHellos, HTTP request
//! heads), so every parser is bounded and returns `None` rather than guessing. This crate never touches
//! the store or the driver's privileges.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod broker;
pub mod cidr;
pub mod dial;
pub mod dns;
pub mod egress;
pub mod policy;
pub mod sniff;
pub mod splice;

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

// The three helpers below go on with the data of a lock holder that panicked. That is sound here:
// every value kept under these locks (leaf certificate and idle-connection caches, lookup caches, the
// virtual address table, audit budgets, the policy and network sets, each swapped whole) is whole after
// each statement, and the one update that changes two maps together (`Vips::assign`) has no step
// between them that can panic. So a panic elsewhere never leaves one half-changed.

/// Locks `m`, ignoring poison (see above).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read-locks `l`, ignoring poison (see above).
pub(crate) fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Write-locks `l`, ignoring poison (see above).
pub(crate) fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}
