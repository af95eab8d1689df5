//! Keys held by connections that outlive one request (terminals): the key is checked when the
//! connection opens, and the connection re-checks it while it lasts, so revoking a key or its expiry
//! ends the connection too, not only its next request.
//!
//! A re-check is cheap: a clock comparison for the expiry, and a store read (one indexed row) only
//! when some key was revoked since the last one, or [`LEASE_FULL_CHECK`] has passed.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use sandlot_store::now_ms;

use crate::{Caller, Control, Error, Kind, Result};

/// How often a connection holding a key re-checks it (no store read unless a key was revoked).
pub const LEASE_RECHECK: Duration = Duration::from_secs(5);
/// How often a re-check reads the key's row even when no revocation went through this server.
pub const LEASE_FULL_CHECK: Duration = Duration::from_secs(30);

/// The key a long-lived connection was opened with: its id, never the key itself.
#[derive(Debug)]
pub struct KeyLease {
    id: String,
    expires_at_ms: Option<i64>,
    /// The server's revocation count when the key was last read.
    seen: u64,
    read_at: Instant,
}

impl KeyLease {
    /// The key's public id (`key_…`).
    pub fn id(&self) -> &str {
        &self.id
    }
}

fn ended(message: String) -> Error {
    Error::new(Kind::Unauthenticated, message)
}

impl Control {
    /// [`Control::authenticate`], and a lease that [`Control::recheck_key`] keeps checking while a
    /// connection opened with `key` lasts.
    pub fn authenticate_lease(&self, key: &str) -> Result<(Caller, KeyLease)> {
        let seen = self.key_revocations.load(Ordering::SeqCst);
        let caller = self.authenticate(key)?;
        let id = sandlot_store::key_id_of(key);
        let info = self.store.key_by_id(&id)?.ok_or_else(|| ended("unknown API key".into()))?;
        Ok((caller, KeyLease { id, expires_at_ms: info.expires_at_ms, seen, read_at: Instant::now() }))
    }

    /// Whether the key behind `lease` still works: an error (unauthenticated) once it has expired, been
    /// revoked or removed; the connection that holds it must then end.
    pub fn recheck_key(&self, lease: &mut KeyLease) -> Result<()> {
        let id = &lease.id;
        let expired = |at: i64| {
            ended(format!(
                "API key {id} expired at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            ))
        };
        if let Some(at) = lease.expires_at_ms.filter(|at| *at <= now_ms()) {
            return Err(expired(at));
        }
        let revocations = self.key_revocations.load(Ordering::SeqCst);
        if revocations == lease.seen && lease.read_at.elapsed() < LEASE_FULL_CHECK {
            return Ok(());
        }
        let info = self.store.key_by_id(id)?.ok_or_else(|| ended(format!("API key {id} no longer exists")))?;
        if let Some(at) = info.revoked_at_ms {
            return Err(ended(format!(
                "API key {id} was revoked at {at} (Unix ms); ask the admin for a new one (`sandlot keys create`)"
            )));
        }
        if let Some(at) = info.expires_at_ms.filter(|at| *at <= now_ms()) {
            return Err(expired(at));
        }
        (lease.expires_at_ms, lease.seen, lease.read_at) = (info.expires_at_ms, revocations, Instant::now());
        Ok(())
    }
}
