//! Lifecycle events: each transition of a sandbox (and each OOM kill in it) is appended to the
//! store's `events` table where it happens, read by cursor (`GET /v1/events`), delivered to webhooks
//! (`delivery`), and pruned after the retention window and beyond a count per tenant.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandlot_api::{EventKind, EventList, SandboxState};
use sandlot_store::{now_ms, EventFilter, SandboxRecord};
use serde_json::json;
use tokio::sync::watch;

use crate::{lock, Caller, ConfigError, Control, Error, Kind, Result};

/// How often the OOM counters of running sandboxes are read.
const OOM_EVERY: Duration = Duration::from_secs(1);
/// How often old events and delivery logs are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Delivery attempts kept per webhook.
pub(crate) const DELIVERIES_KEPT: u64 = 1_000;
/// Longest a `GET /v1/events?wait_s=` waits for an event.
pub const MAX_WAIT_S: u64 = 60;
/// Most events one read answers.
pub const MAX_LIMIT: u32 = 1_000;

/// Settings of events and webhooks.
#[derive(Debug, Clone, PartialEq)]
pub struct EventsConfig {
    /// Events older than this are pruned, seconds.
    pub retention_s: u64,
    /// Events one tenant keeps at most (the oldest go first).
    pub max_per_tenant: u64,
    /// Webhooks one tenant may register.
    pub max_webhooks_per_tenant: u64,
    /// Whether webhooks may target loopback, private, link-local and other non-public addresses.
    pub webhook_allow_private: bool,
    /// Attempts to deliver one event (the first included).
    pub webhook_attempts: u32,
    /// Wait before the second attempt, ms; each later wait doubles (with jitter), capped at an hour.
    pub webhook_base_delay_ms: u64,
    /// Longest one attempt may take (connect, TLS, request, answer's head), ms.
    pub webhook_timeout_ms: u64,
    /// Attempts in flight at once, every tenant together.
    pub webhook_concurrency: usize,
    /// Attempts in flight at once for one tenant.
    pub webhook_tenant_concurrency: usize,
    /// CA certificates (PEM) trusted for `https://` webhooks besides the system roots.
    pub webhook_extra_roots_pem: Vec<u8>,
}

impl Default for EventsConfig {
    fn default() -> Self {
        EventsConfig {
            retention_s: 7 * 86_400,
            max_per_tenant: 100_000,
            max_webhooks_per_tenant: 10,
            webhook_allow_private: false,
            // Waits of ~20, 40, 80, 160 and 320 s: the last attempt ~10 minutes after the first.
            webhook_attempts: 6,
            webhook_base_delay_ms: 20_000,
            webhook_timeout_ms: 10_000,
            webhook_concurrency: 32,
            webhook_tenant_concurrency: 4,
            webhook_extra_roots_pem: Vec::new(),
        }
    }
}

impl EventsConfig {
    pub(crate) fn validate(&self) -> std::result::Result<(), ConfigError> {
        let bad = |option, problem: String| Err(ConfigError { option, problem });
        if self.retention_s == 0 {
            return bad("--events-retention-s", "must be at least 1".into());
        }
        if self.max_per_tenant == 0 {
            return bad("--max-events-per-tenant", "must be at least 1".into());
        }
        if !(1..=20).contains(&self.webhook_attempts) {
            return bad("--webhook-attempts", format!("{} must be between 1 and 20", self.webhook_attempts));
        }
        if self.webhook_timeout_ms == 0 {
            return bad("--webhook-timeout-s", "must be at least 1".into());
        }
        if self.webhook_concurrency == 0 || self.webhook_tenant_concurrency == 0 {
            return bad("--webhook-concurrency", "must be at least 1".into());
        }
        crate::delivery::tls_config(&self.webhook_extra_roots_pem)
            .map(|_| ())
            .map_err(|problem| ConfigError { option: "--webhook-extra-ca", problem })
    }
}

/// Reads of events with `wait_s` one tenant may have waiting at once.
pub const MAX_WAITERS_PER_TENANT: usize = 16;

/// A waiting read's slot (see `Control::waiter`).
pub(crate) struct Waiter {
    hub: Arc<Hub>,
    tenant: String,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut waiters = lock(&self.hub.waiters);
        if let Some(n) = waiters.get_mut(&self.tenant) {
            *n -= 1;
            if *n == 0 {
                waiters.remove(&self.tenant);
            }
        }
    }
}

/// What the control layer keeps of events in memory.
pub(crate) struct Hub {
    /// The newest event's id: deliveries wait on it.
    pub(crate) latest: watch::Sender<i64>,
    /// Per sandbox: the supervisor pid and the OOM kills already reported for it.
    ooms: Mutex<HashMap<String, (i32, u64)>>,
    /// A webhook was created or deleted: the delivery service reads the list again.
    pub(crate) hooks_changed: tokio::sync::Notify,
    /// Per tenant: its reads waiting for an event.
    waiters: Mutex<HashMap<String, usize>>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            latest: watch::Sender::new(0),
            ooms: Mutex::default(),
            hooks_changed: Default::default(),
            waiters: Mutex::default(),
        }
    }
}

/// A read of `GET /v1/events`.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// Events with an id above this (0, the default: from the oldest kept).
    pub since: Option<i64>,
    /// At most this many (default 100, at most [`MAX_LIMIT`]).
    pub limit: Option<u32>,
    /// One sandbox's.
    pub sandbox_id: Option<String>,
    /// Kinds, comma-separated.
    pub kind: Option<String>,
    /// The admin: one tenant's (default: every tenant's). Anyone else: only their own.
    pub tenant: Option<String>,
    /// When nothing is there yet, wait this long (at most [`MAX_WAIT_S`]) for an event to come.
    pub wait_s: Option<u64>,
}

/// Parses a comma-separated list of kinds.
pub fn parse_kinds(s: &str) -> Result<Vec<EventKind>> {
    s.split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(|k| {
            EventKind::parse(k).ok_or_else(|| {
                let all: Vec<&str> = EventKind::ALL.iter().map(|k| k.as_str()).collect();
                Error::invalid(format!("unknown event kind {k:?}; the kinds are {}", all.join(", ")))
            })
        })
        .collect()
}

impl Control {
    /// Appends an event of `rec`'s sandbox (none for the sandboxes of image builds, which their
    /// tenant never made). An event that cannot be written is logged: the transition stands.
    pub(crate) fn emit(&self, rec: &SandboxRecord, kind: EventKind, detail: serde_json::Value) {
        if rec.info.metadata.contains_key("build") {
            return;
        }
        self.emit_raw(&rec.tenant, &rec.info.id, kind, detail);
    }

    fn emit_raw(&self, tenant: &str, id: &str, kind: EventKind, detail: serde_json::Value) {
        match self.store.insert_event(tenant, id, kind, &detail) {
            Ok(seq) => {
                self.events.latest.send_replace(seq);
            }
            Err(e) => tracing::error!(sandbox = %id, "writing the {kind} event: {e}"),
        }
    }

    /// The events the caller may read after `q.since`, oldest first, and the cursor of the next read.
    pub async fn events(self: &Arc<Self>, caller: &Caller, q: EventQuery) -> Result<EventList> {
        let tenant = match (&q.tenant, caller.admin) {
            (Some(t), true) => Some(t.clone()),
            (None, true) => None,
            (Some(t), false) if *t != caller.tenant => {
                return Err(Error::new(Kind::Forbidden, "only the admin key reads another tenant's events"))
            }
            (_, false) => Some(caller.tenant.clone()),
        };
        let kinds = q.kind.as_deref().map(parse_kinds).transpose()?.unwrap_or_default();
        let mut since = q.since.unwrap_or(0).max(0);
        let limit = q.limit.unwrap_or(100).clamp(1, MAX_LIMIT);
        let wait = Duration::from_secs(q.wait_s.unwrap_or(0).min(MAX_WAIT_S));
        // A waiting read holds a connection and wakes at every event: a tenant has a few at once.
        let _waiter = if wait.is_zero() { None } else { Some(self.waiter(&caller.tenant)?) };
        let query = Arc::new((tenant, q.sandbox_id, kinds));
        // Subscribed before the first read: an event written between the read and the wait wakes it.
        let mut latest = self.events.latest.subscribe();
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let (c, query) = (Arc::clone(self), Arc::clone(&query));
            // The store is one connection behind a mutex: its reads block, off the runtime's workers.
            let (upto, page) = tokio::task::spawn_blocking(move || -> Result<_> {
                let (tenant, sandbox_id, kinds) = &*query;
                let filter = EventFilter { tenant: tenant.as_deref(), sandbox_id: sandbox_id.as_deref(), kinds };
                // Read first: every event up to it is committed, so an empty read that saw every row
                // may move the cursor past the other tenants' and kinds' events it skipped.
                let upto = c.store.last_event_id()?;
                Ok((upto, c.store.list_events(&filter, since, limit)?))
            })
            .await
            .map_err(|e| Error::internal(format!("reading events: {e}")))??;
            let next = page.next(since, upto);
            if !page.events.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(EventList { events: page.events, next });
            }
            // Nothing matched up to `next`: the next read starts there, never over the same rows; a
            // read that stopped at its window goes on with the next window before it waits.
            since = next;
            if page.scanned_to.is_some() {
                continue;
            }
            if tokio::time::timeout_at(deadline, latest.changed()).await.is_err() {
                continue; // one last read at the deadline
            }
        }
    }

    /// A slot of `tenant`'s waiting reads, given back when dropped; past [`MAX_WAITERS_PER_TENANT`],
    /// a limit error.
    pub(crate) fn waiter(&self, tenant: &str) -> Result<Waiter> {
        let mut waiters = lock(&self.events.waiters);
        let n = waiters.entry(tenant.to_string()).or_insert(0);
        if *n >= MAX_WAITERS_PER_TENANT {
            return Err(Error::limit(format!(
                "tenant {tenant} has {MAX_WAITERS_PER_TENANT} reads of events waiting (wait_s) already, the most \
                 this server allows; wait for one to answer, or read without wait_s"
            )));
        }
        *n += 1;
        Ok(Waiter { hub: Arc::clone(&self.events), tenant: tenant.to_string() })
    }

    /// Emits an `oom` event for each running sandbox whose OOM-kill counter rose since the last look.
    pub(crate) fn check_ooms(&self) {
        let Ok(live) = self.store.live_sandboxes() else { return };
        let mut seen = HashMap::new();
        for rec in live.iter().filter(|r| r.info.state == SandboxState::Running) {
            let Some(sb) = self.engine.get(&rec.info.id) else { continue };
            let (pid, kills) = (sb.supervisor_pid(), sb.oom_kills());
            // A new supervisor (resumed after a stop) has a new cgroup: its count starts again.
            let before = match lock(&self.events.ooms).get(&rec.info.id) {
                Some((p, k)) if *p == pid => *k,
                _ => 0,
            };
            if kills > before {
                self.emit(rec, EventKind::Oom, json!({"kills": kills - before, "total": kills}));
            }
            seen.insert(rec.info.id.clone(), (pid, kills));
        }
        *lock(&self.events.ooms) = seen;
    }

    /// Prunes events past the retention or the per-tenant count, and old delivery attempts.
    pub(crate) fn prune_events(&self) {
        let cfg = &self.cfg.events;
        let before = now_ms() - (cfg.retention_s as i64).saturating_mul(1000);
        match self.store.prune_events(before, cfg.max_per_tenant) {
            Ok(0) => {}
            Ok(n) => tracing::info!("pruned {n} events past the retention or the per-tenant count"),
            Err(e) => tracing::error!("pruning events: {e}"),
        }
        if let Err(e) = self.store.prune_deliveries(DELIVERIES_KEPT) {
            tracing::error!("pruning webhook delivery logs: {e}");
        }
    }
}

/// Reads OOM counters every second and prunes every minute (at start too), until `shutdown`.
pub(crate) async fn events_service(control: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let mut oom = tokio::time::interval(OOM_EVERY);
    let mut prune = tokio::time::interval(PRUNE_EVERY);
    loop {
        let c = Arc::clone(&control);
        // The store and cgroup reads block: off the runtime's workers.
        let job: Box<dyn FnOnce() + Send> = tokio::select! {
            _ = oom.tick() => Box::new(move || c.check_ooms()),
            _ = prune.tick() => Box::new(move || c.prune_events()),
            _ = shutdown.changed() => return,
        };
        let _ = tokio::task::spawn_blocking(job).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_from_a_comma_separated_list_and_unknown_ones_are_named() {
        assert_eq!(parse_kinds("created, deleted,").unwrap(), [EventKind::Created, EventKind::Deleted]);
        let e = parse_kinds("created,exploded").unwrap_err();
        assert!(e.message.contains("\"exploded\"") && e.message.contains("oom"), "{}", e.message);
    }

    #[test]
    fn the_defaults_validate_and_bad_settings_name_their_option() {
        EventsConfig::default().validate().unwrap();
        let e = EventsConfig { webhook_attempts: 0, ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.option, "--webhook-attempts");
        let e =
            EventsConfig { webhook_extra_roots_pem: b"junk".to_vec(), ..Default::default() }.validate().unwrap_err();
        assert_eq!(e.option, "--webhook-extra-ca");
    }
}
