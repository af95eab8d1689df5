//! Lifecycle events: appended by the control layer, read by cursor (`GET /v1/events`, the webhook
//! deliveries), pruned after the retention and beyond a count per tenant.

use rusqlite::{params, OptionalExtension};
use sandlot_api::{Event, EventKind};

use crate::{now_ms, Result, SqliteStore, StoreError};

/// Which events a read wants.
#[derive(Debug, Clone, Default)]
pub struct EventFilter<'a> {
    /// One tenant's (`None`: every tenant's, for the admin).
    pub tenant: Option<&'a str>,
    /// One sandbox's.
    pub sandbox_id: Option<&'a str>,
    /// These kinds only (empty: every kind).
    pub kinds: &'a [EventKind],
}

/// Most rows one read of events looks at: past it, a read that matched nothing answers where it
/// stopped, and the next read goes on from there.
pub const EVENTS_SCANNED_MAX: i64 = 10_000;

/// What a read of events found.
#[derive(Debug, Clone, PartialEq)]
pub struct EventPage {
    /// The events that passed the filter, oldest first.
    pub events: Vec<Event>,
    /// When the read stopped at [`EVENTS_SCANNED_MAX`] rows: the newest id it looked at (every
    /// event of the filter up to it is in `events`, or `events` is full). `None`: it saw every row.
    pub scanned_to: Option<i64>,
}

impl EventPage {
    /// The cursor past this page when it is not full: its last event, else the newest id examined
    /// (the window's end, or `upto`: the newest id committed before the read).
    pub fn next(&self, since: i64, upto: i64) -> i64 {
        match (self.events.last(), self.scanned_to) {
            (Some(e), _) => e.id,
            (None, Some(to)) => to,
            (None, None) => since.max(upto),
        }
    }
}

// The statements of a read, one pair per kind of read. Parameters: ?1 since, ?2 tenant, ?3 the
// offset of the window's end (bound) or the window's last id (page), ?4 sandbox, ?5 kinds (JSON), ?6 limit.
const TENANT_BOUND: &str = "SELECT id FROM events WHERE tenant = ?2 AND id > ?1 ORDER BY id LIMIT 1 OFFSET ?3";
const TENANT_PAGE: &str = "SELECT id, at_ms, tenant, sandbox_id, kind, detail FROM events
     WHERE tenant = ?2 AND id > ?1 AND id <= ?3 AND (?4 IS NULL OR sandbox_id = ?4)
       AND (?5 = '[]' OR kind IN (SELECT value FROM json_each(?5)))
     ORDER BY id LIMIT ?6";
const ALL_BOUND: &str = "SELECT id FROM events WHERE id > ?1 AND ?2 IS NULL ORDER BY id LIMIT 1 OFFSET ?3";
const ALL_PAGE: &str = "SELECT id, at_ms, tenant, sandbox_id, kind, detail FROM events
     WHERE id > ?1 AND id <= ?3 AND ?2 IS NULL AND (?4 IS NULL OR sandbox_id = ?4)
       AND (?5 = '[]' OR kind IN (SELECT value FROM json_each(?5)))
     ORDER BY id LIMIT ?6";

fn row_to_event(r: &rusqlite::Row<'_>) -> rusqlite::Result<(i64, i64, String, String, String, String)> {
    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
}

/// Lifecycle events, read by cursor, pruned to a window.
pub trait EventLog {
    /// Appends an event and returns its id (greater than every id before it, pruned ones included:
    /// the table is AUTOINCREMENT, so a cursor never sees an id twice).
    fn insert_event(&self, tenant: &str, sandbox_id: &str, kind: EventKind, detail: &serde_json::Value) -> Result<i64>;

    /// Up to `limit` events with an id above `since` that pass `filter`, oldest first, looking at no
    /// more than [`EVENTS_SCANNED_MAX`] rows (of the filter's tenant only, through `events_tenant`).
    fn list_events(&self, filter: &EventFilter<'_>, since: i64, limit: u32) -> Result<EventPage>;

    /// The id of the newest event (0 when there is none yet): where a new webhook's cursor starts.
    fn last_event_id(&self) -> Result<i64>;

    /// Deletes events older than `before_ms`, and each tenant's beyond its newest `keep_per_tenant`;
    /// returns how many went. A batch at a time, so other writers get their turns.
    fn prune_events(&self, before_ms: i64, keep_per_tenant: u64) -> Result<usize>;
}

impl EventLog for SqliteStore {
    fn insert_event(&self, tenant: &str, sandbox_id: &str, kind: EventKind, detail: &serde_json::Value) -> Result<i64> {
        let conn = self.conn();
        conn.execute(
            "INSERT INTO events(at_ms, tenant, sandbox_id, kind, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![now_ms(), tenant, sandbox_id, kind.as_str(), detail.to_string()],
        )?;
        Ok(conn.last_insert_rowid())
    }

    fn list_events(&self, filter: &EventFilter<'_>, since: i64, limit: u32) -> Result<EventPage> {
        let kinds: Vec<&str> = filter.kinds.iter().map(|k| k.as_str()).collect();
        let kinds = serde_json::to_string(&kinds)?;
        let conn = self.conn();
        // Two statements, not `(?2 IS NULL OR tenant = ?2)`: SQLite plans that as a walk of every
        // tenant's rows after `since`, and one tenant's read would then hold the store for all.
        let (bound_sql, page_sql) = match filter.tenant {
            Some(_) => (TENANT_BOUND, TENANT_PAGE),
            None => (ALL_BOUND, ALL_PAGE),
        };
        // The newest id of the window of rows this read may look at (none: the window reaches the end).
        let bound: Option<i64> = conn
            .prepare_cached(bound_sql)?
            .query_row(params![since, filter.tenant, EVENTS_SCANNED_MAX - 1], |r| r.get(0))
            .optional()?;
        let mut stmt = conn.prepare_cached(page_sql)?;
        let rows = stmt.query_map(
            params![since, filter.tenant, bound.unwrap_or(i64::MAX), filter.sandbox_id, kinds, limit],
            row_to_event,
        )?;
        let mut events = Vec::new();
        for row in rows {
            let (id, at_ms, tenant, sandbox_id, kind, detail) = row?;
            let kind = EventKind::parse(&kind)
                .ok_or_else(|| StoreError::Integrity(format!("event {id} has an unknown kind {kind:?}")))?;
            events.push(Event { id, at_ms, tenant, sandbox_id, kind, detail: serde_json::from_str(&detail)? });
        }
        Ok(EventPage { events, scanned_to: bound })
    }

    fn last_event_id(&self) -> Result<i64> {
        // The AUTOINCREMENT counter, not MAX(id): it survives the pruning of every row.
        let seq: Option<i64> = self
            .conn()
            .query_row("SELECT seq FROM sqlite_sequence WHERE name = 'events'", [], |r| r.get(0))
            .map(Some)
            .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
        Ok(seq.unwrap_or(0))
    }

    fn prune_events(&self, before_ms: i64, keep_per_tenant: u64) -> Result<usize> {
        const BATCH: i64 = 5_000;
        let mut total = 0;
        loop {
            let n = self.conn().execute(
                "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE at_ms < ?1 LIMIT ?2)",
                params![before_ms, BATCH],
            )?;
            total += n;
            if (n as i64) < BATCH {
                break;
            }
        }
        let tenants: Vec<String> = {
            let conn = self.conn();
            let mut stmt = conn.prepare("SELECT tenant FROM events GROUP BY tenant HAVING COUNT(*) > ?1")?;
            let rows = stmt.query_map([keep_per_tenant as i64], |r| r.get(0))?;
            rows.collect::<rusqlite::Result<_>>()?
        };
        for tenant in tenants {
            total += self.conn().execute(
                "DELETE FROM events WHERE tenant = ?1 AND id <= (SELECT id FROM events WHERE tenant = ?1
                   ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                params![tenant, keep_per_tenant as i64],
            )?;
        }
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store() -> SqliteStore {
        SqliteStore::open_in_memory().unwrap()
    }

    #[test]
    fn events_are_read_by_cursor_oldest_first_with_filters() {
        let s = store();
        assert_eq!(s.last_event_id().unwrap(), 0);
        let a1 = s.insert_event("a", "sb_1", EventKind::Created, &json!({"image": "host"})).unwrap();
        let b1 = s.insert_event("b", "sb_2", EventKind::Created, &json!({})).unwrap();
        let a2 = s.insert_event("a", "sb_1", EventKind::Deleted, &json!({"reason": null})).unwrap();
        assert!(a1 < b1 && b1 < a2);
        assert_eq!(s.last_event_id().unwrap(), a2);
        let all = EventFilter { tenant: Some("a"), ..Default::default() };
        let page = s.list_events(&all, 0, 1).unwrap().events;
        assert_eq!(page.iter().map(|e| e.id).collect::<Vec<_>>(), [a1]);
        assert_eq!(page[0].detail["image"], "host");
        let next = s.list_events(&all, page[0].id, 10).unwrap().events;
        assert_eq!(next.iter().map(|e| (e.id, e.kind)).collect::<Vec<_>>(), [(a2, EventKind::Deleted)]);
        assert!(s.list_events(&all, a2, 10).unwrap().events.is_empty());
        // Another tenant's events never show in a tenant's read; the admin's sees both.
        assert_eq!(s.list_events(&EventFilter::default(), 0, 10).unwrap().events.len(), 3);
        let kinds = [EventKind::Deleted];
        let deleted = EventFilter { kinds: &kinds, ..Default::default() };
        assert_eq!(s.list_events(&deleted, 0, 10).unwrap().events.iter().map(|e| e.id).collect::<Vec<_>>(), [a2]);
        let sb2 = EventFilter { sandbox_id: Some("sb_2"), tenant: Some("a"), ..Default::default() };
        assert!(s.list_events(&sb2, 0, 10).unwrap().events.is_empty());
    }

    #[test]
    fn pruning_keeps_the_window_and_a_count_per_tenant_and_ids_never_come_back() {
        let s = store();
        let old = s.insert_event("a", "sb_1", EventKind::Created, &json!({})).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(15));
        let cut = now_ms();
        for _ in 0..5 {
            s.insert_event("a", "sb_1", EventKind::Paused, &json!({})).unwrap();
        }
        let b = s.insert_event("b", "sb_2", EventKind::Created, &json!({})).unwrap();
        // The old one goes by age, then `a` keeps its newest 3; `b` is under the count.
        assert_eq!(s.prune_events(cut, 3).unwrap(), 1 + 2);
        let a: Vec<i64> = s
            .list_events(&EventFilter { tenant: Some("a"), ..Default::default() }, 0, 10)
            .unwrap()
            .events
            .iter()
            .map(|e| e.id)
            .collect();
        assert_eq!(a.len(), 3);
        assert!(a.iter().all(|id| *id > old + 2));
        assert_eq!(
            s.list_events(&EventFilter { tenant: Some("b"), ..Default::default() }, 0, 10).unwrap().events[0].id,
            b
        );
        s.prune_events(i64::MAX, 0).unwrap();
        assert_eq!(s.last_event_id().unwrap(), b, "the cursor counter survives an empty table");
        assert!(s.insert_event("a", "sb_1", EventKind::Stopped, &json!({})).unwrap() > b);
    }

    fn plan(s: &SqliteStore, sql: &str, tenant: Option<&str>) -> String {
        let conn = s.conn();
        let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let n = stmt.parameter_count();
        let args: Vec<rusqlite::types::Value> = (1..=n)
            .map(|i| match i {
                2 => tenant.map_or(rusqlite::types::Value::Null, |t| t.to_string().into()),
                5 => "[]".to_string().into(),
                _ => 1i64.into(),
            })
            .collect();
        let rows = stmt.query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3)).unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn a_tenants_read_walks_the_tenant_index_and_at_most_a_window_of_rows() {
        let s = store();
        // Each statement a tenant's read runs is a search of `events_tenant` by tenant and id; a
        // shared `(?2 IS NULL OR tenant = ?2)` was a walk of the primary key over every tenant's rows.
        for sql in [TENANT_BOUND, TENANT_PAGE] {
            let p = plan(&s, sql, Some("a"));
            assert!(p.starts_with("SEARCH events USING") && p.contains("INDEX events_tenant (tenant=? AND"), "{p}");
        }
        for sql in [ALL_BOUND, ALL_PAGE] {
            let p = plan(&s, sql, None);
            assert!(p.starts_with("SEARCH events USING INTEGER PRIMARY KEY (rowid>?"), "{p}");
        }
        let old = "SELECT id FROM events WHERE id > ?1 AND (?2 IS NULL OR tenant = ?2) ORDER BY id";
        assert!(!plan(&s, old, Some("a")).contains("events_tenant"), "the shared form misses the index");

        // Another tenant's churn is never examined, and a read that matches nothing in its window
        // answers where the window ended, so the next read goes on from there.
        for _ in 0..3 {
            s.insert_event("b", "sb_2", EventKind::Created, &json!({})).unwrap();
        }
        let n = EVENTS_SCANNED_MAX + 5;
        {
            let mut conn = s.conn();
            let tx = conn.transaction().unwrap();
            for _ in 0..n {
                tx.execute(
                    "INSERT INTO events(at_ms, tenant, sandbox_id, kind, detail) VALUES (1, 'a', 'sb_1', 'created', '{}')",
                    [],
                )
                .unwrap();
            }
            tx.commit().unwrap();
        }
        let failed = s.insert_event("a", "sb_1", EventKind::Failed, &json!({})).unwrap();
        let kinds = [EventKind::Failed];
        let f = EventFilter { tenant: Some("a"), kinds: &kinds, ..Default::default() };
        let first = s.list_events(&f, 0, 10).unwrap();
        assert!(first.events.is_empty());
        let to = first.scanned_to.expect("the read stopped at the window");
        assert_eq!(to, 3 + EVENTS_SCANNED_MAX, "the window is a's first rows, b's skipped by the index");
        assert_eq!(first.next(0, failed), to);
        let second = s.list_events(&f, to, 10).unwrap();
        assert_eq!(second.events.iter().map(|e| e.id).collect::<Vec<_>>(), [failed]);
        assert_eq!(second.scanned_to, None);
        assert_eq!(second.next(to, failed), failed);
        // The admin's read (every tenant) has the same window.
        let all = EventFilter { kinds: &kinds, ..Default::default() };
        assert_eq!(s.list_events(&all, 0, 10).unwrap().scanned_to, Some(EVENTS_SCANNED_MAX));
    }
}
