//! What the control layer keeps in memory per sandbox: its transition lock, its last API activity and
//! the tokens of its preview URLs. An entry goes when its sandbox ends (deleted or failed), so the
//! map holds only sandboxes that exist.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use crate::lock;

/// One sandbox's entry.
#[derive(Default)]
pub(crate) struct Entry {
    /// Serialises its transitions: two concurrent resumes start it once.
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Last API activity, Unix ms (idle timeouts; not persisted: no sandbox runs across a restart).
    pub(crate) last_activity: AtomicI64,
    /// Tokens of its preview URLs, by port (a restart invalidates them, as it stops every sandbox).
    port_tokens: Mutex<HashMap<u16, String>>,
    /// Terminal connections open on it (`terminal.rs`).
    pub(crate) terminals: std::sync::atomic::AtomicUsize,
    /// Whether it is paused (frozen): set by pause, cleared by resume, so a terminal connection knows
    /// without a store read that its sandbox takes no input now.
    pub(crate) paused: std::sync::atomic::AtomicBool,
    /// Whether it is being deleted: its processes are being killed, its record still says running.
    pub(crate) removing: std::sync::atomic::AtomicBool,
}

/// Every sandbox's entry, and per-tenant locks.
#[derive(Default)]
pub(crate) struct Entries {
    sandboxes: Mutex<HashMap<String, Arc<Entry>>>,
    /// Per-tenant locks (snapshot quota checks). Tenants are few, made by the admin.
    tenants: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Terminal connections open on all sandboxes together (`terminal.rs`).
    pub(crate) terminals: Arc<std::sync::atomic::AtomicUsize>,
    /// Terminal connections open per tenant (`terminal.rs`); a tenant with none has no key.
    pub(crate) tenant_terminals: Arc<Mutex<HashMap<String, usize>>>,
}

impl Entries {
    fn entry(&self, id: &str) -> Arc<Entry> {
        Arc::clone(lock(&self.sandboxes).entry(id.to_string()).or_default())
    }

    /// Sandbox `id`'s entry if it has one (every running sandbox has), without making one.
    pub(crate) fn existing(&self, id: &str) -> Option<Arc<Entry>> {
        lock(&self.sandboxes).get(id).cloned()
    }

    /// Takes sandbox `id`'s transition lock. Call it only for an id the caller owns (each id gets an
    /// entry).
    pub(crate) async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = Arc::clone(&self.entry(id).lock);
        m.lock_owned().await
    }

    /// Takes tenant `tenant`'s lock.
    pub(crate) async fn lock_tenant(&self, tenant: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let m = Arc::clone(lock(&self.tenants).entry(tenant.to_string()).or_default());
        m.lock_owned().await
    }

    /// Records API activity on `id`, if it has an entry: every running sandbox has one (made by the
    /// lock of its create or resume), and one that ended meanwhile must not get a new one.
    pub(crate) fn touch(&self, id: &str, now_ms: i64) {
        if let Some(e) = lock(&self.sandboxes).get(id) {
            e.last_activity.store(now_ms, Ordering::Relaxed);
        }
    }

    /// Last API activity on `id` known in memory (0 if none).
    pub(crate) fn last_activity(&self, id: &str) -> i64 {
        lock(&self.sandboxes).get(id).map_or(0, |e| e.last_activity.load(Ordering::Relaxed))
    }

    /// The token of `id`'s preview URL for `port`, made on first use.
    pub(crate) fn port_token(&self, id: &str, port: u16, make: impl FnOnce() -> String) -> String {
        let entry = self.entry(id);
        let mut tokens = lock(&entry.port_tokens);
        tokens.entry(port).or_insert_with(make).clone()
    }

    /// Whether `token` is `id`'s preview token for `port`.
    pub(crate) fn port_token_matches(&self, id: &str, port: u16, token: &str) -> bool {
        let Some(entry) = lock(&self.sandboxes).get(id).cloned() else { return false };
        let tokens = lock(&entry.port_tokens);
        tokens.get(&port).is_some_and(|t| t == token)
    }

    /// Marks sandbox `id` paused or not, if it has an entry.
    pub(crate) fn set_paused(&self, id: &str, paused: bool) {
        if let Some(e) = lock(&self.sandboxes).get(id) {
            e.paused.store(paused, Ordering::SeqCst);
        }
    }

    /// Forgets sandbox `id` (it ended for good). A task still waiting on its old lock re-reads the
    /// record and finds it ended.
    pub(crate) fn remove(&self, id: &str) {
        lock(&self.sandboxes).remove(id);
    }

    /// How many sandboxes have an entry.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.sandboxes).len()
    }
}
