//! sandlot's durable state, behind the [`Store`] trait: one SQLite database in WAL mode
//! ([`SqliteStore`]) on a single host.
//!
//! Tenants, API keys (stored as SHA-256 digests, never in clear), sandboxes and the audit log. The store
//! is the source of truth; the engine's in-memory state is rebuilt from it at start-up. All access goes
//! through typed methods, one trait per table ([`Keys`], [`Sandboxes`], [`Snapshots`], [`Images`],
//! [`AuditLog`], [`EventLog`], [`Webhooks`], [`Secrets`]); no SQL leaves this crate. The control layer
//! holds a `dyn Store`, so another implementation (PostgreSQL, for a cluster) plugs in unchanged;
//! [`conformance`] is what any implementation must pass.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod audit;
pub mod conformance;
mod events;
mod images;
mod keys;
mod sandboxes;
mod schema;
mod secrets;
mod snapshots;
mod webhooks;

use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::Connection;

pub use audit::{audit_argv, audit_head, AuditLog, AUDIT_LIST_BYTES};
pub use events::{EventFilter, EventLog, EventPage, EVENTS_SCANNED_MAX};
pub use images::{ImageRow, Images, PUBLIC};
pub use keys::{key_id_of, Auth, Keys, Principal};
pub use sandboxes::{SandboxRecord, Sandboxes};
pub use secrets::Secrets;
pub use snapshots::Snapshots;
pub use webhooks::{DeliveryRow, WebhookRow, Webhooks};

/// Store failures.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// SQLite reported an error.
    #[error("state database: {0}")]
    Sqlite(#[from] rusqlite::Error),
    /// A stored JSON column did not parse.
    #[error("state database: corrupt JSON column: {0}")]
    Json(#[from] serde_json::Error),
    /// The integrity check found a problem.
    #[error("state database failed its integrity check: {0}")]
    Integrity(String),
}

type Result<T> = std::result::Result<T, StoreError>;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The store's traits, to call their methods on a concrete store (a `dyn Store` needs none of this).
pub mod prelude {
    pub use crate::{AuditLog, EventLog, Images, Keys, Sandboxes, Secrets, Snapshots, Store, Webhooks};
}

/// Everything sandlot keeps durably: each table's trait, and a check of the whole. What the control
/// layer holds (`Box<dyn Store>`); implementations must pass [`conformance::check_all`].
pub trait Store:
    Keys + Sandboxes + Snapshots + Images + AuditLog + EventLog + Webhooks + Secrets + Send + Sync
{
    /// Checks that the stored state is whole (SQLite's integrity check).
    fn integrity_check(&self) -> Result<()>;
}

/// The single-host store: one SQLite database. One connection behind a mutex: writes are tiny and
/// SQLite serialises them anyway.
pub struct SqliteStore {
    conn: Mutex<Connection>,
}

impl Store for SqliteStore {
    fn integrity_check(&self) -> Result<()> {
        let r: String = self.conn().query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if r == "ok" {
            Ok(())
        } else {
            Err(StoreError::Integrity(r))
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` in WAL mode with `synchronous=NORMAL`: a
    /// committed transaction survives a crash or kill -9 of the daemon (the WAL is written before the
    /// commit returns), and only a power loss or kernel crash can drop the last few — while a commit
    /// costs no fsync, which keeps the per-exec audit row off the exec's latency.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Self::with_schema(conn)
    }

    /// Opens a private database in memory with the same schema, for tests that need a store but no
    /// file. WAL and `synchronous` do not apply to memory (there is no file to journal to), nor does
    /// the busy timeout (no other connection can reach this database); foreign keys are checked as on
    /// disk. Everything is gone when the `Store` is dropped.
    pub fn open_in_memory() -> Result<Self> {
        Self::with_schema(Connection::open_in_memory()?)
    }

    /// Turns on foreign-key checks and applies the schema; the rest of the set-up is per medium.
    fn with_schema(conn: Connection) -> Result<Self> {
        conn.pragma_update(None, "foreign_keys", "ON")?;
        schema::apply(&conn)?;
        Ok(SqliteStore { conn: Mutex::new(conn) })
    }

    /// Locks the connection, going on with it after a holder panicked: SQLite keeps the database whole
    /// whatever the caller did, and a transaction open at the panic is rolled back when its
    /// `rusqlite::Transaction` drops during unwinding, so the next holder finds no half-written change.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_in_memory_store_has_the_schema_and_checks_foreign_keys() {
        let store = SqliteStore::open_in_memory().unwrap();
        let key = store.create_key("acme", false).unwrap();
        assert_eq!(store.authenticate(&key).unwrap(), Auth::Valid(Principal { tenant: "acme".into(), admin: false }));
        store.insert_sandbox(&conformance::record("sb_1", "acme", Some("n"))).unwrap();
        assert_eq!(store.get_sandbox("acme", "sb_1").unwrap(), Some(conformance::record("sb_1", "acme", Some("n"))));
        store.audit("acme", Some("sb_1"), "exec", &serde_json::json!({})).unwrap();
        assert_eq!(store.list_audit(Some("acme"), None, 10).unwrap().len(), 1);
        let version: i64 = store.conn().query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(version, 1);
        let err = store.insert_sandbox(&conformance::record("sb_2", "nobody", Some("n"))).unwrap_err();
        assert!(err.to_string().contains("FOREIGN KEY"), "{err}");
        store.integrity_check().unwrap();
    }

    #[test]
    fn in_memory_stores_share_nothing() {
        let first = SqliteStore::open_in_memory().unwrap();
        let second = SqliteStore::open_in_memory().unwrap();
        let key = first.create_key("acme", false).unwrap();
        assert_eq!(second.authenticate(&key).unwrap(), Auth::Unknown);
        assert!(second.ensure_admin_key().unwrap().is_some(), "the second store has no admin key of the first");
    }
}
