//! Webhooks (per tenant, with each one's delivery cursor) and their delivery log.

use rusqlite::{params, OptionalExtension};
use sandlot_api::{Delivery, EventKind};

use crate::{now_ms, Result, SqliteStore, StoreError};

/// A webhook as stored: its secret too (it signs every delivery), which no answer carries.
#[derive(Clone, PartialEq)]
pub struct WebhookRow {
    /// `wh_` and 16 hex digits.
    pub id: String,
    /// The tenant whose events it receives.
    pub tenant: String,
    /// Where events are POSTed.
    pub url: String,
    /// Kinds delivered (empty: every kind).
    pub kinds: Vec<EventKind>,
    /// The HMAC key.
    pub secret: String,
    /// Creation time (Unix ms).
    pub created_ms: i64,
    /// The last event delivered or given up on.
    pub cursor: i64,
}

impl std::fmt::Debug for WebhookRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookRow")
            .field("id", &self.id)
            .field("tenant", &self.tenant)
            .field("url", &self.url)
            .field("kinds", &self.kinds)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

/// A delivery attempt as logged (the API's [`Delivery`]).
pub type DeliveryRow = Delivery;

const COLUMNS: &str = "id, tenant, url, kinds, secret, created_ms, cursor";

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, String, String, String, String, i64, i64)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?))
}

fn to_webhook(t: (String, String, String, String, String, i64, i64)) -> Result<WebhookRow> {
    let (id, tenant, url, kinds, secret, created_ms, cursor) = t;
    let kinds: Vec<EventKind> = serde_json::from_str(&kinds)?;
    Ok(WebhookRow { id, tenant, url, kinds, secret, created_ms, cursor })
}

/// Webhooks and their deliveries.
pub trait Webhooks {
    /// Stores a new webhook unless its tenant has `max_per_tenant` already (then `false`). Its cursor
    /// is the newest event now: it receives what happens from here on.
    fn insert_webhook(&self, hook: &WebhookRow, max_per_tenant: u64) -> Result<bool>;

    /// Webhooks, oldest first: one tenant's, or every tenant's (`None`).
    fn list_webhooks(&self, tenant: Option<&str>) -> Result<Vec<WebhookRow>>;

    /// Webhook `id` of `tenant` (`None`: of any tenant, for the admin and the delivery service).
    fn get_webhook(&self, tenant: Option<&str>, id: &str) -> Result<Option<WebhookRow>>;

    /// Deletes webhook `id` of `tenant` (`None`: any tenant's) and its delivery log; `false` if there
    /// was none.
    fn delete_webhook(&self, tenant: Option<&str>, id: &str) -> Result<bool>;

    /// Moves webhook `id`'s cursor forward to `cursor` (never back); `false` if the webhook is gone.
    fn advance_webhook(&self, id: &str, cursor: i64) -> Result<bool>;

    /// Logs one delivery attempt of webhook `id`, and keeps its newest `keep` attempts only; `false`
    /// (nothing logged) when the webhook is gone: an attempt in flight at its deletion leaves no row.
    fn record_delivery(&self, id: &str, d: &Delivery, keep: u64) -> Result<bool>;

    /// The newest `limit` attempts of webhook `id`, newest first.
    fn list_deliveries(&self, id: &str, limit: u32) -> Result<Vec<Delivery>>;

    /// Keeps each webhook's newest `keep` attempts; returns how many older ones went.
    fn prune_deliveries(&self, keep: u64) -> Result<usize>;
}

impl Webhooks for SqliteStore {
    fn insert_webhook(&self, hook: &WebhookRow, max_per_tenant: u64) -> Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let have: i64 =
            tx.query_row("SELECT COUNT(*) FROM webhooks WHERE tenant = ?1", [&hook.tenant], |r| r.get(0))?;
        if have as u64 >= max_per_tenant {
            return Ok(false);
        }
        tx.execute("INSERT OR IGNORE INTO tenants(name, created_ms) VALUES (?1, ?2)", params![hook.tenant, now_ms()])?;
        tx.execute(
            &format!("INSERT INTO webhooks({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"),
            params![
                hook.id,
                hook.tenant,
                hook.url,
                serde_json::to_string(&hook.kinds)?,
                hook.secret,
                hook.created_ms,
                hook.cursor
            ],
        )?;
        tx.commit()?;
        Ok(true)
    }

    fn list_webhooks(&self, tenant: Option<&str>) -> Result<Vec<WebhookRow>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE (?1 IS NULL OR tenant = ?1) ORDER BY created_ms, id"
        ))?;
        let rows = stmt.query_map([tenant], row)?;
        rows.map(|r| to_webhook(r.map_err(StoreError::from)?)).collect()
    }

    fn get_webhook(&self, tenant: Option<&str>, id: &str) -> Result<Option<WebhookRow>> {
        let conn = self.conn();
        let found = conn
            .query_row(
                &format!("SELECT {COLUMNS} FROM webhooks WHERE id = ?1 AND (?2 IS NULL OR tenant = ?2)"),
                params![id, tenant],
                row,
            )
            .optional()?;
        found.map(to_webhook).transpose()
    }

    fn delete_webhook(&self, tenant: Option<&str>, id: &str) -> Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let n =
            tx.execute("DELETE FROM webhooks WHERE id = ?1 AND (?2 IS NULL OR tenant = ?2)", params![id, tenant])?;
        if n > 0 {
            tx.execute("DELETE FROM webhook_deliveries WHERE webhook_id = ?1", [id])?;
        }
        tx.commit()?;
        Ok(n > 0)
    }

    fn advance_webhook(&self, id: &str, cursor: i64) -> Result<bool> {
        let n =
            self.conn().execute("UPDATE webhooks SET cursor = MAX(cursor, ?2) WHERE id = ?1", params![id, cursor])?;
        Ok(n > 0)
    }

    fn record_delivery(&self, id: &str, d: &Delivery, keep: u64) -> Result<bool> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let n = tx.execute(
            "INSERT INTO webhook_deliveries(webhook_id, event_id, kind, attempt, at_ms, status, error, duration_ms, ok, will_retry)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10 WHERE EXISTS (SELECT 1 FROM webhooks WHERE id = ?1)",
            params![
                id,
                d.event_id,
                d.kind.as_str(),
                d.attempt,
                d.at_ms,
                d.status,
                d.error,
                d.duration_ms as i64,
                d.ok,
                d.will_retry
            ],
        )?;
        if n > 0 {
            // Through `webhook_deliveries_hook`: the rows past the newest `keep` of this webhook.
            tx.execute(
                "DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND seq <= (SELECT seq FROM webhook_deliveries
                   WHERE webhook_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
                params![id, keep as i64],
            )?;
        }
        tx.commit()?;
        Ok(n > 0)
    }

    fn list_deliveries(&self, id: &str, limit: u32) -> Result<Vec<Delivery>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT event_id, kind, attempt, at_ms, status, error, duration_ms, ok, will_retry
             FROM webhook_deliveries WHERE webhook_id = ?1 ORDER BY seq DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![id, limit], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, u32>(2)?,
                r.get::<_, i64>(3)?,
                r.get::<_, Option<u16>>(4)?,
                r.get::<_, Option<String>>(5)?,
                r.get::<_, i64>(6)?,
                r.get::<_, bool>(7)?,
                r.get::<_, bool>(8)?,
            ))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (event_id, kind, attempt, at_ms, status, error, duration_ms, ok, will_retry) = r?;
            let kind = EventKind::parse(&kind)
                .ok_or_else(|| StoreError::Integrity(format!("delivery of event {event_id} has kind {kind:?}")))?;
            out.push(Delivery {
                event_id,
                kind,
                attempt,
                at_ms,
                status,
                error,
                duration_ms: duration_ms.max(0) as u64,
                ok,
                will_retry,
            });
        }
        Ok(out)
    }

    fn prune_deliveries(&self, keep: u64) -> Result<usize> {
        let ids: Vec<String> = {
            let conn = self.conn();
            let mut stmt =
                conn.prepare("SELECT webhook_id FROM webhook_deliveries GROUP BY webhook_id HAVING COUNT(*) > ?1")?;
            let rows = stmt.query_map([keep as i64], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        let mut total = 0;
        for id in ids {
            total += self.conn().execute(
                "DELETE FROM webhook_deliveries WHERE webhook_id = ?1 AND seq <= (SELECT seq FROM webhook_deliveries
                   WHERE webhook_id = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
                params![id, keep as i64],
            )?;
        }
        // Logs of webhooks deleted while a delivery of theirs was in flight.
        total += self
            .conn()
            .execute("DELETE FROM webhook_deliveries WHERE webhook_id NOT IN (SELECT id FROM webhooks)", [])?;
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(id: &str, tenant: &str) -> WebhookRow {
        WebhookRow {
            id: id.into(),
            tenant: tenant.into(),
            url: "https://example.com/hook".into(),
            kinds: vec![EventKind::Created],
            secret: "s3cret-s3cret-s3cret".into(),
            created_ms: now_ms(),
            cursor: 7,
        }
    }

    fn delivery(event_id: i64, attempt: u32) -> Delivery {
        Delivery {
            event_id,
            kind: EventKind::Created,
            attempt,
            at_ms: now_ms(),
            status: Some(500),
            error: None,
            duration_ms: 3,
            ok: false,
            will_retry: true,
        }
    }

    #[test]
    fn webhooks_are_per_tenant_capped_and_their_logs_go_with_them() {
        let s = SqliteStore::open_in_memory().unwrap();
        assert!(s.insert_webhook(&hook("wh_1", "a"), 2).unwrap());
        assert!(s.insert_webhook(&hook("wh_2", "a"), 2).unwrap());
        assert!(!s.insert_webhook(&hook("wh_3", "a"), 2).unwrap(), "the cap holds");
        assert!(s.insert_webhook(&hook("wh_4", "b"), 2).unwrap(), "another tenant has its own cap");
        assert_eq!(s.list_webhooks(Some("a")).unwrap().len(), 2);
        assert_eq!(s.list_webhooks(None).unwrap().len(), 3);
        assert!(s.get_webhook(Some("b"), "wh_1").unwrap().is_none(), "another tenant's is not found");
        let got = s.get_webhook(Some("a"), "wh_1").unwrap().unwrap();
        assert_eq!((got.kinds, got.cursor, got.secret.as_str()), (vec![EventKind::Created], 7, "s3cret-s3cret-s3cret"));
        assert!(!format!("{:?}", s.get_webhook(None, "wh_1").unwrap().unwrap()).contains("s3cret"));

        assert!(s.advance_webhook("wh_1", 9).unwrap());
        assert!(s.advance_webhook("wh_1", 8).unwrap());
        assert_eq!(s.get_webhook(None, "wh_1").unwrap().unwrap().cursor, 9, "a cursor never goes back");

        for attempt in 1..=4 {
            assert!(s.record_delivery("wh_1", &delivery(9, attempt), 10).unwrap());
        }
        let log = s.list_deliveries("wh_1", 10).unwrap();
        assert_eq!(log.iter().map(|d| d.attempt).collect::<Vec<_>>(), [4, 3, 2, 1]);
        assert_eq!(log[0], Delivery { at_ms: log[0].at_ms, ..delivery(9, 4) });
        assert_eq!(s.prune_deliveries(3).unwrap(), 1);
        assert_eq!(s.list_deliveries("wh_1", 10).unwrap().len(), 3);

        assert!(!s.delete_webhook(Some("b"), "wh_1").unwrap(), "another tenant cannot delete it");
        assert!(s.delete_webhook(Some("a"), "wh_1").unwrap());
        assert!(s.list_deliveries("wh_1", 10).unwrap().is_empty());
        assert!(!s.advance_webhook("wh_1", 10).unwrap());
    }

    #[test]
    fn a_delivery_log_stays_bounded_and_leaves_no_rows_behind_its_webhook() {
        let s = SqliteStore::open_in_memory().unwrap();
        assert!(s.insert_webhook(&hook("wh_1", "a"), 10).unwrap());
        assert!(s.insert_webhook(&hook("wh_2", "a"), 10).unwrap());
        // Each attempt logged trims the webhook's log to its newest `keep` rows, at once.
        for attempt in 1..=7 {
            assert!(s.record_delivery("wh_1", &delivery(9, attempt), 3).unwrap());
        }
        s.record_delivery("wh_2", &delivery(9, 1), 3).unwrap();
        let log = s.list_deliveries("wh_1", 100).unwrap();
        assert_eq!(log.iter().map(|d| d.attempt).collect::<Vec<_>>(), [7, 6, 5]);
        assert_eq!(s.list_deliveries("wh_2", 100).unwrap().len(), 1, "another webhook's log is its own");
        // Deleting a webhook deletes its log; an attempt that ends after the deletion logs nothing.
        assert!(s.delete_webhook(None, "wh_1").unwrap());
        assert!(!s.record_delivery("wh_1", &delivery(9, 8), 3).unwrap());
        assert!(s.list_deliveries("wh_1", 100).unwrap().is_empty());
        // Rows of a webhook that is gone (an older server's) go in the pruning pass.
        s.conn()
            .execute(
                "INSERT INTO webhook_deliveries(webhook_id, event_id, kind, attempt, at_ms, duration_ms, ok, will_retry)
                 VALUES ('wh_gone', 1, 'created', 1, 0, 0, 0, 0)",
                [],
            )
            .unwrap();
        assert_eq!(s.prune_deliveries(3).unwrap(), 1);
        assert!(s.list_deliveries("wh_gone", 100).unwrap().is_empty());
        assert_eq!(s.list_deliveries("wh_2", 100).unwrap().len(), 1);
    }
}
