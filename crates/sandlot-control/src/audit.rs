//! The audit log's bounds on the daemon side: a per-tenant rate limit for the high-volume rows (execs
//! and network decisions) and the retention service that prunes old rows.
//!
//! Lifecycle rows (create, delete, keys, policy changes) are never rate-limited: they are bounded by
//! what they record, and they are the ones an investigation needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use sandlot_api::AuditList;

use crate::{lock, Caller, Control, Result};

/// Rows of one class one tenant may write in a burst, and per second after it. 10 rows/s is far more
/// execs than an honest tenant runs in a sustained way; at the ~2 KiB an exec row is at most, a
/// tenant at the limit writes ~1.7 GiB a day, which the retention (30 days by default) then bounds.
const BURST: f64 = 1_000.0;
const PER_SECOND: f64 = 10.0;
/// How often old rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3_600);

/// Classes of rate-limited rows, each with its own budget so one cannot starve another (a flood of
/// allowed connections must not hide the denial that follows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Class {
    Exec,
    NetAllow,
    NetDeny,
}

impl Class {
    fn as_str(self) -> &'static str {
        match self {
            Class::Exec => "exec",
            Class::NetAllow => "net.allow",
            Class::NetDeny => "net.deny",
        }
    }
}

/// One budget: (tokens, last refill, rows left out since the last summary).
type Budget = (f64, std::time::Instant, u64);

/// Token buckets per (tenant, class).
#[derive(Default)]
pub(crate) struct Gate {
    budgets: Mutex<HashMap<(String, Class), Budget>>,
}

impl Gate {
    /// Whether a row may be written now, and how many were left out before it (to be summarised).
    fn admit(&self, tenant: &str, class: Class) -> Option<u64> {
        let mut budgets = lock(&self.budgets);
        let now = std::time::Instant::now();
        // Tenants are few (made by the admin); the map stays small.
        let b = budgets.entry((tenant.to_string(), class)).or_insert((BURST, now, 0));
        b.0 = (b.0 + now.duration_since(b.1).as_secs_f64() * PER_SECOND).min(BURST);
        b.1 = now;
        if b.0 < 1.0 {
            b.2 += 1;
            return None;
        }
        b.0 -= 1.0;
        Some(std::mem::take(&mut b.2))
    }
}

impl Control {
    /// Writes a rate-limited audit row (see [`Gate`]); rows left out are counted in an
    /// `audit.dropped` row written before the next one that passes.
    pub(crate) fn audit_limited(
        &self,
        class: Class,
        tenant: &str,
        sandbox: Option<&str>,
        action: &str,
        detail: &serde_json::Value,
    ) {
        let Some(dropped) = self.audit_gate.admit(tenant, class) else { return };
        if dropped > 0 {
            let summary = json!({"class": class.as_str(), "dropped": dropped,
                "reason": format!("more than {PER_SECOND} {} rows a second for this tenant", class.as_str())});
            let _ = self.store.audit(tenant, None, "audit.dropped", &summary);
        }
        if let Err(e) = self.store.audit(tenant, sandbox, action, detail) {
            tracing::error!("writing an audit row: {e}");
        }
    }

    /// The newest `limit` audit rows the caller may read (the admin: every tenant's), optionally of
    /// one sandbox.
    pub fn audit_log(&self, caller: &Caller, sandbox_id: Option<&str>, limit: Option<u32>) -> Result<AuditList> {
        let limit = limit.unwrap_or(100).clamp(1, 10_000);
        let tenant = if caller.admin { None } else { Some(caller.tenant.as_str()) };
        Ok(AuditList { entries: self.store.list_audit(tenant, sandbox_id, limit)? })
    }

    /// Writes a lifecycle audit row (never rate-limited).
    pub(crate) fn audit(
        &self,
        tenant: &str,
        sandbox: Option<&str>,
        action: &str,
        detail: &serde_json::Value,
    ) -> Result<()> {
        Ok(self.store.audit(tenant, sandbox, action, detail)?)
    }
}

/// Prunes rows older than the retention at start and then hourly, until `shutdown`.
pub(crate) async fn retention_service(control: Arc<Control>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let keep_ms = control.cfg.audit_retention_days as i64 * 86_400_000;
    let mut tick = tokio::time::interval(PRUNE_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let control = Arc::clone(&control);
        let before = sandlot_store::now_ms() - keep_ms;
        // The deletes block; off the runtime's workers.
        match tokio::task::spawn_blocking(move || control.store.prune_audit(before)).await {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => tracing::info!("pruned {n} audit rows older than the retention"),
            Ok(Err(e)) => tracing::error!("pruning the audit log: {e}"),
            Err(e) => tracing::error!("pruning the audit log: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_rows_is_cut_at_the_burst_and_counted() {
        let gate = Gate::default();
        for _ in 0..BURST as usize {
            assert_eq!(gate.admit("t", Class::Exec), Some(0));
        }
        assert_eq!(gate.admit("t", Class::Exec), None);
        assert_eq!(gate.admit("t", Class::Exec), None);
        // Another tenant, and another class of the same tenant, have budgets of their own.
        assert_eq!(gate.admit("u", Class::Exec), Some(0));
        assert_eq!(gate.admit("t", Class::NetDeny), Some(0));
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(gate.admit("t", Class::Exec), Some(2), "the next row to pass reports what was left out");
    }
}
