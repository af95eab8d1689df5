//! The database schema and its migrations: tables are created if missing, and columns added after a
//! table's first release are added to databases made by older servers.

use rusqlite::Connection;

use crate::Result;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tenants (
    name        TEXT PRIMARY KEY,
    created_ms  INTEGER NOT NULL,
    network_exempt TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS api_keys (
    digest      TEXT PRIMARY KEY,
    prefix      TEXT NOT NULL,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    admin       INTEGER NOT NULL DEFAULT 0,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER,
    revoked_ms  INTEGER,
    last_used_ms INTEGER
);
CREATE TABLE IF NOT EXISTS sandboxes (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    state       TEXT NOT NULL,
    reason      TEXT,
    image       TEXT NOT NULL,
    limits      TEXT NOT NULL,
    env         TEXT NOT NULL,
    metadata    TEXT NOT NULL,
    slot        INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    expires_ms  INTEGER NOT NULL,
    name        TEXT,
    persistent  INTEGER NOT NULL DEFAULT 0,
    auto_resume INTEGER NOT NULL DEFAULT 0,
    idle_s      INTEGER,
    on_timeout  TEXT NOT NULL DEFAULT 'delete',
    stop_after_s INTEGER NOT NULL DEFAULT 600,
    active_ms   INTEGER NOT NULL DEFAULT 0,
    snapshot    TEXT,
    network     TEXT NOT NULL DEFAULT '{}',
    image_key   TEXT
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys(tenant);
CREATE INDEX IF NOT EXISTS sandboxes_tenant ON sandboxes(tenant, created_ms);
CREATE UNIQUE INDEX IF NOT EXISTS sandboxes_name ON sandboxes(tenant, name)
    WHERE name IS NOT NULL AND state != 'deleted';
CREATE TABLE IF NOT EXISTS snapshots (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    name        TEXT,
    sandbox_id  TEXT NOT NULL,
    image       TEXT NOT NULL,
    base        INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    deleted     INTEGER NOT NULL DEFAULT 0,
    bytes       INTEGER NOT NULL DEFAULT 0,
    image_key   TEXT
);
CREATE TABLE IF NOT EXISTS images (
    tenant      TEXT NOT NULL,
    name        TEXT NOT NULL,
    reference   TEXT,
    digest      TEXT NOT NULL,
    image_key   TEXT NOT NULL,
    image       TEXT NOT NULL,
    bytes       INTEGER NOT NULL,
    created_ms  INTEGER NOT NULL,
    blobs       TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (tenant, name)
);
CREATE TABLE IF NOT EXISTS image_roots (
    image_key   TEXT PRIMARY KEY,
    config      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    bytes       INTEGER NOT NULL DEFAULT 0,
    image       TEXT
);
CREATE TABLE IF NOT EXISTS build_cache (
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    result      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE TABLE IF NOT EXISTS audit (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms       INTEGER NOT NULL,
    tenant      TEXT NOT NULL,
    sandbox_id  TEXT,
    action      TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_sandbox ON audit(sandbox_id, seq);
CREATE INDEX IF NOT EXISTS audit_at ON audit(at_ms);
CREATE TABLE IF NOT EXISTS server_secrets (
    name   TEXT PRIMARY KEY,
    value  BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    at_ms       INTEGER NOT NULL,
    tenant      TEXT NOT NULL,
    sandbox_id  TEXT NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_tenant ON events(tenant, id);
CREATE INDEX IF NOT EXISTS events_at ON events(at_ms);
CREATE TABLE IF NOT EXISTS webhooks (
    id          TEXT PRIMARY KEY,
    tenant      TEXT NOT NULL REFERENCES tenants(name),
    url         TEXT NOT NULL,
    kinds       TEXT NOT NULL,
    secret      TEXT NOT NULL,
    created_ms  INTEGER NOT NULL,
    cursor      INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhooks_tenant ON webhooks(tenant, created_ms);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    seq         INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id  TEXT NOT NULL,
    event_id    INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    at_ms       INTEGER NOT NULL,
    status      INTEGER,
    error       TEXT,
    duration_ms INTEGER NOT NULL,
    ok          INTEGER NOT NULL,
    will_retry  INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS webhook_deliveries_hook ON webhook_deliveries(webhook_id, seq);
PRAGMA user_version = 1;
";

/// Columns added to tables after their first release, with their definitions: a database made by an
/// older server gains them on open (SQLite's ADD COLUMN keeps every row).
const ADDED_COLUMNS: &[(&str, &str, &str)] = &[
    ("sandboxes", "name", "TEXT"),
    ("sandboxes", "persistent", "INTEGER NOT NULL DEFAULT 0"),
    ("sandboxes", "auto_resume", "INTEGER NOT NULL DEFAULT 0"),
    ("sandboxes", "idle_s", "INTEGER"),
    ("sandboxes", "on_timeout", "TEXT NOT NULL DEFAULT 'delete'"),
    ("sandboxes", "stop_after_s", "INTEGER NOT NULL DEFAULT 600"),
    ("sandboxes", "active_ms", "INTEGER NOT NULL DEFAULT 0"),
    ("sandboxes", "snapshot", "TEXT"),
    ("sandboxes", "network", "TEXT NOT NULL DEFAULT '{}'"),
    ("tenants", "network_exempt", "TEXT NOT NULL DEFAULT '[]'"),
    ("snapshots", "bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("sandboxes", "image_key", "TEXT"),
    ("snapshots", "image_key", "TEXT"),
    ("image_roots", "bytes", "INTEGER NOT NULL DEFAULT 0"),
    ("image_roots", "image", "TEXT"),
    ("api_keys", "expires_ms", "INTEGER"),
    ("api_keys", "revoked_ms", "INTEGER"),
    ("api_keys", "last_used_ms", "INTEGER"),
    ("images", "blobs", "TEXT NOT NULL DEFAULT '[]'"),
];

fn migrate(conn: &Connection) -> Result<()> {
    for (table, col, def) in ADDED_COLUMNS {
        let exists: bool = conn.query_row(
            "SELECT EXISTS(SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            [table],
            |r| r.get(0),
        )?;
        if !exists {
            continue;
        }
        let mut stmt = conn.prepare("SELECT name FROM pragma_table_info(?1)")?;
        let have: Vec<String> = stmt.query_map([table], |r| r.get(0))?.collect::<rusqlite::Result<_>>()?;
        if !have.iter().any(|h| h == col) {
            conn.execute_batch(&format!("ALTER TABLE {table} ADD COLUMN {col} {def}"))?;
        }
    }
    Ok(())
}

/// Brings `conn` to the current schema: first the columns older databases lack (so the indexes and
/// statements of [`SCHEMA`] find them), then whatever tables and indexes do not exist yet.
pub(crate) fn apply(conn: &Connection) -> Result<()> {
    migrate(conn)?;
    conn.execute_batch(SCHEMA)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prelude::*;
    use crate::SqliteStore;
    use sandlot_api::SandboxState;

    #[test]
    fn a_database_of_the_first_schema_is_migrated_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let old = Connection::open(&path).unwrap();
        old.execute_batch(
            "CREATE TABLE tenants (name TEXT PRIMARY KEY, created_ms INTEGER NOT NULL);
             CREATE TABLE sandboxes (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, state TEXT NOT NULL, reason TEXT,
               image TEXT NOT NULL, limits TEXT NOT NULL, env TEXT NOT NULL, metadata TEXT NOT NULL,
               slot INTEGER NOT NULL, created_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL);
             INSERT INTO tenants VALUES ('a', 0);
             INSERT INTO sandboxes VALUES ('sb_old', 'a', 'stopped', NULL, 'host',
               '{\"cpu\":1.0,\"memory_mb\":512,\"pids\":256,\"timeout_s\":300}', '{}', '{}', 0, 1, 2);",
        )
        .unwrap();
        drop(old);
        let store = SqliteStore::open(&path).unwrap();
        let rec = store.get_sandbox("a", "sb_old").unwrap().expect("the old row survives");
        assert_eq!(rec.info.state, SandboxState::Stopped);
        assert_eq!(rec.info.limits.disk_mb, None);
        assert!(!rec.info.persistent);
    }
}
