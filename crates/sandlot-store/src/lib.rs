//! sandlot's durable state: one SQLite database in WAL mode.
//!
//! Tenants, API keys (stored as SHA-256 digests, never in clear), sandboxes and the audit log. SQLite is
//! the source of truth; the engine's in-memory state is rebuilt from it at start-up. All access goes
//! through typed methods; no SQL leaves this crate.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension};
use sandlot_api::{AuditEntry, KeyInfo, Limits, NetworkSpec, SandboxInfo, SandboxState, SnapshotInfo, TimeoutAction};
use sha2::{Digest, Sha256};

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

/// Who a valid API key acts for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// Tenant name.
    pub tenant: String,
    /// May create keys and read every tenant's audit.
    pub admin: bool,
}

/// What an API key is worth now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// A valid key.
    Valid(Principal),
    /// No such key.
    Unknown,
    /// The key expired at this time (Unix ms).
    Expired(i64),
    /// The key was revoked at this time (Unix ms).
    Revoked(i64),
}

/// How often a key's `last_used` is written at most: a write per minute per key, not per request.
const LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// A sandbox row.
#[derive(Debug, Clone, PartialEq)]
pub struct SandboxRecord {
    /// The API view.
    pub info: SandboxInfo,
    /// Owner.
    pub tenant: String,
    /// Environment given to every command.
    pub env: BTreeMap<String, String>,
    /// Host uid-range slot.
    pub slot: u32,
    /// Network policy, secrets included (the database file is mode 0600).
    pub network: NetworkSpec,
}

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
    network     TEXT NOT NULL DEFAULT '{}'
);
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
    bytes       INTEGER NOT NULL DEFAULT 0
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
    ("api_keys", "expires_ms", "INTEGER"),
    ("api_keys", "revoked_ms", "INTEGER"),
    ("api_keys", "last_used_ms", "INTEGER"),
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

/// Bytes of a command line (or of a list of names) an audit row keeps: enough to read what ran, small
/// enough that a tenant running commands with megabyte argvs cannot fill the host's disk through the
/// audit log. What is cut is identified by its full length and SHA-256.
pub const AUDIT_LIST_BYTES: usize = 1024;

/// The first [`AUDIT_LIST_BYTES`] of `items` (each counted with a NUL after it, as `execve` sees an
/// argv; the last kept item cut at a character boundary), and whether anything was cut.
pub fn audit_head(items: &[String]) -> (Vec<String>, bool) {
    let mut used = 0;
    let mut out = Vec::new();
    for item in items {
        if used + item.len() < AUDIT_LIST_BYTES {
            used += item.len() + 1;
            out.push(item.clone());
            continue;
        }
        let mut cut = AUDIT_LIST_BYTES.saturating_sub(used + 1);
        while !item.is_char_boundary(cut) {
            cut -= 1;
        }
        out.push(item[..cut].to_string());
        return (out, true);
    }
    (out, false)
}

/// An audit row's view of a command line: `{"argv": [...]}` when it fits in [`AUDIT_LIST_BYTES`];
/// else its head, with `argv_truncated: true`, `argv_bytes` (the full size, NULs included) and
/// `argv_sha256` (of every argument followed by a NUL).
pub fn audit_argv(argv: &[String]) -> serde_json::Value {
    let (head, cut) = audit_head(argv);
    if !cut {
        return serde_json::json!({ "argv": head });
    }
    let mut h = Sha256::new();
    for a in argv {
        h.update(a.as_bytes());
        h.update([0u8]);
    }
    let sha: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let bytes: usize = argv.iter().map(|a| a.len() + 1).sum();
    serde_json::json!({ "argv": head, "argv_truncated": true, "argv_bytes": bytes, "argv_sha256": sha })
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

fn digest(key: &str) -> String {
    let d = Sha256::digest(key.as_bytes());
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// A key's public id: derived from its digest (a hash of a hash of 238 random bits reveals nothing),
/// so it needs no column and old keys have one too.
fn key_id(digest: &str) -> String {
    format!("key_{}", &digest[..16])
}

fn random_token(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..40).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{body}")
}

/// The database handle. One connection behind a mutex: writes are tiny and SQLite serialises them anyway.
pub struct Store {
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) the database at `path` in WAL mode with `synchronous=NORMAL`: a
    /// committed transaction survives a crash or kill -9 of the daemon (the WAL is written before the
    /// commit returns), and only a power loss or kernel crash can drop the last few — while a commit
    /// costs no fsync, which keeps the per-exec audit row off the exec's latency.
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        migrate(&conn)?;
        conn.execute_batch(SCHEMA)?;
        Ok(Store { conn: Mutex::new(conn) })
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Runs SQLite's integrity check.
    pub fn integrity_check(&self) -> Result<()> {
        let r: String = self.conn().query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
        if r == "ok" {
            Ok(())
        } else {
            Err(StoreError::Integrity(r))
        }
    }

    /// Creates the first admin key if no admin key exists; returns it in clear (shown once).
    pub fn ensure_admin_key(&self) -> Result<Option<String>> {
        let has: bool =
            self.conn().query_row("SELECT EXISTS(SELECT 1 FROM api_keys WHERE admin = 1)", [], |r| r.get(0))?;
        if has {
            return Ok(None);
        }
        self.create_key("admin", true).map(Some)
    }

    /// Creates an API key for `tenant` (creating the tenant if new) and returns it in clear.
    pub fn create_key(&self, tenant: &str, admin: bool) -> Result<String> {
        Ok(self.create_key_expiring(tenant, admin, None)?.0)
    }

    /// Creates an API key for `tenant` that stops working at `expires_ms` (if given); returns the key
    /// in clear and its id.
    pub fn create_key_expiring(&self, tenant: &str, admin: bool, expires_ms: Option<i64>) -> Result<(String, String)> {
        let key = random_token("sl_");
        let d = digest(&key);
        let now = now_ms();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("INSERT OR IGNORE INTO tenants(name, created_ms) VALUES (?1, ?2)", params![tenant, now])?;
        tx.execute(
            "INSERT INTO api_keys(digest, prefix, tenant, admin, created_ms, expires_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![d, &key[..8], tenant, admin, now, expires_ms],
        )?;
        tx.commit()?;
        Ok((key, key_id(&d)))
    }

    /// What `key` is worth now; a valid key's last use is recorded (to the minute).
    pub fn authenticate(&self, key: &str) -> Result<Auth> {
        let d = digest(key);
        let conn = self.conn();
        let row = conn
            .query_row(
                "SELECT tenant, admin, expires_ms, revoked_ms FROM api_keys WHERE digest = ?1",
                params![d],
                |r| Ok((r.get(0)?, r.get(1)?, r.get::<_, Option<i64>>(2)?, r.get::<_, Option<i64>>(3)?)),
            )
            .optional()?;
        let Some((tenant, admin, expires, revoked)) = row else { return Ok(Auth::Unknown) };
        let now = now_ms();
        if let Some(at) = revoked {
            return Ok(Auth::Revoked(at));
        }
        if let Some(at) = expires.filter(|at| *at <= now) {
            return Ok(Auth::Expired(at));
        }
        conn.execute(
            "UPDATE api_keys SET last_used_ms = ?2 WHERE digest = ?1 AND (last_used_ms IS NULL OR last_used_ms <= ?3)",
            params![d, now, now - LAST_USED_RESOLUTION_MS],
        )?;
        Ok(Auth::Valid(Principal { tenant, admin }))
    }

    /// API keys, of one tenant or all, oldest first (revoked ones included, marked).
    pub fn list_keys(&self, tenant: Option<&str>) -> Result<Vec<KeyInfo>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT digest, prefix, tenant, admin, created_ms, expires_ms, last_used_ms, revoked_ms FROM api_keys
             WHERE (?1 IS NULL OR tenant = ?1) ORDER BY created_ms, digest",
        )?;
        let rows = stmt.query_map(params![tenant], |r| {
            Ok(KeyInfo {
                id: key_id(&r.get::<_, String>(0)?),
                prefix: r.get(1)?,
                tenant: r.get(2)?,
                admin: r.get(3)?,
                created_at_ms: r.get(4)?,
                expires_at_ms: r.get(5)?,
                last_used_at_ms: r.get(6)?,
                revoked_at_ms: r.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// Revokes the key with id `id` (kept, marked, so its holder is told it was revoked); returns it
    /// as it was, or `None` if there is no such key.
    pub fn revoke_key(&self, id: &str) -> Result<Option<KeyInfo>> {
        let Some(key) = self.list_keys(None)?.into_iter().find(|k| k.id == id) else { return Ok(None) };
        let Some(hex) = id.strip_prefix("key_") else { return Ok(None) };
        self.conn().execute(
            "UPDATE api_keys SET revoked_ms = ?2 WHERE substr(digest, 1, 16) = ?1 AND revoked_ms IS NULL",
            params![hex, now_ms()],
        )?;
        Ok(Some(key))
    }

    /// Records a new sandbox.
    /// Fails with a constraint error when the tenant already has a live sandbox of that name.
    pub fn insert_sandbox(&self, rec: &SandboxRecord) -> Result<()> {
        let i = &rec.info;
        self.conn().execute(
            "INSERT INTO sandboxes(id, tenant, state, reason, image, limits, env, metadata, slot, created_ms, expires_ms,
                                   name, persistent, auto_resume, idle_s, on_timeout, stop_after_s, active_ms, snapshot, network)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
            params![
                i.id,
                rec.tenant,
                i.state.as_str(),
                i.reason,
                i.image,
                serde_json::to_string(&i.limits)?,
                serde_json::to_string(&rec.env)?,
                serde_json::to_string(&i.metadata)?,
                rec.slot,
                i.created_at_ms,
                i.expires_at_ms,
                i.name,
                i.persistent,
                i.auto_resume,
                i.idle_timeout_s,
                i.on_timeout.as_str(),
                i.stop_after_s,
                i.last_active_at_ms,
                i.snapshot,
                serde_json::to_string(&rec.network)?,
            ],
        )?;
        Ok(())
    }

    /// The always-denied ranges an admin opted `tenant` into; `None` if there is no such tenant.
    pub fn tenant_exemptions(&self, tenant: &str) -> Result<Option<Vec<String>>> {
        let text: Option<String> = self
            .conn()
            .query_row("SELECT network_exempt FROM tenants WHERE name = ?1", params![tenant], |r| r.get(0))
            .optional()?;
        Ok(match text {
            Some(t) => Some(serde_json::from_str(&t)?),
            None => None,
        })
    }

    /// Replaces `tenant`'s exemptions; false if there is no such tenant.
    pub fn set_tenant_exemptions(&self, tenant: &str, cidrs: &[String]) -> Result<bool> {
        let n = self.conn().execute(
            "UPDATE tenants SET network_exempt = ?2 WHERE name = ?1",
            params![tenant, serde_json::to_string(cidrs)?],
        )?;
        Ok(n == 1)
    }

    /// The tenant that owns sandbox `id`.
    pub fn tenant_of(&self, id: &str) -> Result<Option<String>> {
        Ok(self.conn().query_row("SELECT tenant FROM sandboxes WHERE id = ?1", params![id], |r| r.get(0)).optional()?)
    }

    /// Replaces a sandbox's network policy.
    pub fn set_network(&self, id: &str, network: &NetworkSpec) -> Result<()> {
        self.conn()
            .execute("UPDATE sandboxes SET network = ?2 WHERE id = ?1", params![id, serde_json::to_string(network)?])?;
        Ok(())
    }

    /// Records activity (an API call or process output) for idle timeouts.
    pub fn touch(&self, id: &str, at_ms: i64) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET active_ms = max(active_ms, ?2) WHERE id = ?1", params![id, at_ms])?;
        Ok(())
    }

    /// Sets a new lifetime end.
    pub fn set_expiry(&self, id: &str, expires_ms: i64) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET expires_ms = ?2 WHERE id = ?1", params![id, expires_ms])?;
        Ok(())
    }

    /// The tenant's live sandbox called `name`.
    pub fn get_by_name(&self, tenant: &str, name: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE tenant = ?1 AND name = ?2 AND state != 'deleted'", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&tenant, &name])?.into_iter().next())
    }

    /// Records a snapshot.
    pub fn insert_snapshot(&self, tenant: &str, snap: &SnapshotInfo, base: u32) -> Result<()> {
        self.conn().execute(
            "INSERT INTO snapshots(id, tenant, name, sandbox_id, image, base, created_ms, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![snap.id, tenant, snap.name, snap.sandbox_id, snap.image, base, snap.created_at_ms, snap.bytes as i64],
        )?;
        Ok(())
    }

    fn snapshots_where(&self, filter: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<(SnapshotInfo, u32)>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(&format!(
            "SELECT id, name, sandbox_id, image, created_ms, base, bytes FROM snapshots WHERE deleted = 0 AND {filter} ORDER BY created_ms DESC"
        ))?;
        let rows = stmt.query_map(args, |r| {
            Ok((
                SnapshotInfo {
                    id: r.get(0)?,
                    name: r.get(1)?,
                    sandbox_id: r.get(2)?,
                    image: r.get(3)?,
                    created_at_ms: r.get(4)?,
                    bytes: r.get::<_, i64>(6)? as u64,
                },
                r.get::<_, u32>(5)?,
            ))
        })?;
        Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
    }

    /// The tenant's snapshot `id` (by id or name), with the host id base of its files.
    pub fn get_snapshot(&self, tenant: &str, id: &str) -> Result<Option<(SnapshotInfo, u32)>> {
        Ok(self.snapshots_where("tenant = ?1 AND (id = ?2 OR name = ?2)", &[&tenant, &id])?.into_iter().next())
    }

    /// The tenant's snapshots, newest first.
    pub fn list_snapshots(&self, tenant: &str) -> Result<Vec<SnapshotInfo>> {
        Ok(self.snapshots_where("tenant = ?1", &[&tenant])?.into_iter().map(|(s, _)| s).collect())
    }

    /// How many snapshots the tenant keeps, and the bytes they are charged.
    pub fn snapshot_usage(&self, tenant: &str) -> Result<(u64, u64)> {
        let (n, bytes): (i64, i64) = self.conn().query_row(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM snapshots WHERE deleted = 0 AND tenant = ?1",
            params![tenant],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok((n as u64, bytes as u64))
    }

    /// Ids of every snapshot not deleted (garbage collection keeps these).
    pub fn live_snapshot_ids(&self) -> Result<Vec<String>> {
        Ok(self.snapshots_where("1 = 1", &[])?.into_iter().map(|(s, _)| s.id).collect())
    }

    /// Marks a snapshot deleted.
    pub fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.conn().execute("UPDATE snapshots SET deleted = 1 WHERE id = ?1", params![id])?;
        Ok(())
    }

    /// Sets a sandbox's state (and reason, cleared when `None`).
    pub fn set_state(&self, id: &str, state: SandboxState, reason: Option<&str>) -> Result<()> {
        self.conn().execute(
            "UPDATE sandboxes SET state = ?2, reason = ?3 WHERE id = ?1",
            params![id, state.as_str(), reason],
        )?;
        Ok(())
    }

    fn sandboxes(&self, sql: &str, args: &[&dyn rusqlite::ToSql]) -> Result<Vec<SandboxRecord>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(sql)?;
        let rows = stmt.query_map(args, |r| {
            let state: String = r.get(2)?;
            let limits: String = r.get(5)?;
            let env: String = r.get(6)?;
            let metadata: String = r.get(7)?;
            let on_timeout: String = r.get(15)?;
            Ok((
                SandboxInfo {
                    id: r.get(0)?,
                    state: SandboxState::parse(&state).unwrap_or(SandboxState::Failed),
                    reason: r.get(3)?,
                    image: r.get(4)?,
                    limits: Limits { cpu: 0.0, memory_mb: 0, pids: 0, disk_mb: None, timeout_s: 0 },
                    metadata: BTreeMap::new(),
                    created_at_ms: r.get(9)?,
                    expires_at_ms: r.get(10)?,
                    name: r.get(11)?,
                    persistent: r.get(12)?,
                    auto_resume: r.get(13)?,
                    idle_timeout_s: r.get(14)?,
                    on_timeout: TimeoutAction::parse(&on_timeout).unwrap_or(TimeoutAction::Delete),
                    stop_after_s: r.get(16)?,
                    last_active_at_ms: r.get(17)?,
                    snapshot: r.get(18)?,
                    network: Default::default(),
                },
                r.get::<_, String>(1)?,
                r.get::<_, u32>(8)?,
                limits,
                env,
                metadata,
                r.get::<_, String>(19)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut info, tenant, slot, limits, env, metadata, network) = row?;
            info.limits = serde_json::from_str(&limits)?;
            info.metadata = serde_json::from_str(&metadata)?;
            let network: NetworkSpec = serde_json::from_str(&network)?;
            info.network = network.info(0, 0);
            out.push(SandboxRecord { info, tenant, env: serde_json::from_str(&env)?, slot, network });
        }
        Ok(out)
    }

    const COLUMNS: &'static str =
        "SELECT id, tenant, state, reason, image, limits, env, metadata, slot, created_ms, expires_ms,
         name, persistent, auto_resume, idle_s, on_timeout, stop_after_s, active_ms, snapshot, network FROM sandboxes";

    /// One sandbox of `tenant` (another tenant's id is simply not found).
    pub fn get_sandbox(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE id = ?1 AND tenant = ?2 AND state != 'deleted'", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&id, &tenant])?.into_iter().next())
    }

    /// One sandbox of `tenant`, deleted ones included (to report how it ended).
    pub fn get_sandbox_any(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE id = ?1 AND tenant = ?2", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&id, &tenant])?.into_iter().next())
    }

    /// Records the host uid-range slot a sandbox runs with.
    pub fn set_slot(&self, id: &str, slot: u32) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET slot = ?2 WHERE id = ?1", params![id, slot])?;
        Ok(())
    }

    /// Sandboxes of `tenant` that are not deleted, newest first.
    pub fn list_sandboxes(&self, tenant: &str) -> Result<Vec<SandboxRecord>> {
        let sql = format!("{} WHERE tenant = ?1 AND state != 'deleted' ORDER BY created_ms DESC, id", Self::COLUMNS);
        self.sandboxes(&sql, &[&tenant])
    }

    /// Every sandbox not deleted, of all tenants (start-up recovery, expiry).
    pub fn live_sandboxes(&self) -> Result<Vec<SandboxRecord>> {
        let sql = format!("{} WHERE state != 'deleted' ORDER BY created_ms", Self::COLUMNS);
        self.sandboxes(&sql, &[])
    }

    /// Appends an audit record.
    pub fn audit(
        &self,
        tenant: &str,
        sandbox_id: Option<&str>,
        action: &str,
        detail: &serde_json::Value,
    ) -> Result<()> {
        self.conn().execute(
            "INSERT INTO audit(at_ms, tenant, sandbox_id, action, detail) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![now_ms(), tenant, sandbox_id, action, detail.to_string()],
        )?;
        Ok(())
    }

    /// Deletes audit records older than `before_ms`, a batch at a time (so the database is never
    /// locked for long); returns how many went.
    pub fn prune_audit(&self, before_ms: i64) -> Result<usize> {
        /// Rows one statement deletes: a few milliseconds of work between other writers' turns.
        const BATCH: i64 = 5_000;
        let mut total = 0;
        loop {
            let n = self.conn().execute(
                "DELETE FROM audit WHERE seq IN (SELECT seq FROM audit WHERE at_ms < ?1 LIMIT ?2)",
                params![before_ms, BATCH],
            )?;
            total += n;
            if (n as i64) < BATCH {
                return Ok(total);
            }
        }
    }

    /// Audit records, newest first; `tenant = None` reads every tenant's (admin).
    pub fn list_audit(&self, tenant: Option<&str>, sandbox_id: Option<&str>, limit: u32) -> Result<Vec<AuditEntry>> {
        let conn = self.conn();
        let mut stmt = conn.prepare(
            "SELECT seq, at_ms, tenant, sandbox_id, action, detail FROM audit
             WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR sandbox_id = ?2)
             ORDER BY seq DESC LIMIT ?3",
        )?;
        let rows = stmt.query_map(params![tenant, sandbox_id, limit], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get::<_, String>(5)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, at_ms, tenant, sandbox_id, action, detail) = row?;
            out.push(AuditEntry { seq, at_ms, tenant, sandbox_id, action, detail: serde_json::from_str(&detail)? });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, tenant: &str) -> SandboxRecord {
        SandboxRecord {
            info: SandboxInfo {
                id: id.into(),
                state: SandboxState::Running,
                reason: None,
                image: "host".into(),
                limits: Limits { cpu: 1.0, memory_mb: 512, pids: 256, disk_mb: Some(1024), timeout_s: 300 },
                metadata: BTreeMap::from([("k".into(), "v".into())]),
                created_at_ms: 1,
                expires_at_ms: 2,
                name: Some("n".into()),
                persistent: true,
                auto_resume: true,
                idle_timeout_s: Some(5),
                on_timeout: TimeoutAction::Pause,
                stop_after_s: 600,
                last_active_at_ms: 1,
                snapshot: None,
                network: Default::default(),
            },
            tenant: tenant.into(),
            env: BTreeMap::new(),
            slot: 3,
            network: Default::default(),
        }
    }

    #[test]
    fn keys_authenticate_and_are_stored_hashed() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        let admin = store.ensure_admin_key().unwrap().expect("first admin key");
        assert!(store.ensure_admin_key().unwrap().is_none(), "only one bootstrap key");
        let key = store.create_key("acme", false).unwrap();
        assert_eq!(store.authenticate(&key).unwrap(), Auth::Valid(Principal { tenant: "acme".into(), admin: false }));
        assert!(matches!(store.authenticate(&admin).unwrap(), Auth::Valid(p) if p.admin));
        assert_eq!(store.authenticate("sl_wrong").unwrap(), Auth::Unknown);
        drop(store);
        let raw = std::fs::read(dir.path().join("s.db")).unwrap();
        let wal = std::fs::read(dir.path().join("s.db-wal")).unwrap_or_default();
        for bytes in [raw, wal] {
            assert!(!bytes.windows(key.len()).any(|w| w == key.as_bytes()), "key in clear on disk");
        }
    }

    #[test]
    fn keys_are_listed_without_secrets_and_can_be_revoked_or_expire() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        let (key, id) = store.create_key_expiring("acme", false, None).unwrap();
        let (old, _) = store.create_key_expiring("acme", false, Some(now_ms() - 1)).unwrap();
        store.create_key("other", false).unwrap();
        let listed = store.list_keys(Some("acme")).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().any(|k| (k.id.as_str(), k.prefix.as_str()) == (id.as_str(), &key[..8])));
        assert!(matches!(store.authenticate(&old).unwrap(), Auth::Expired(_)));
        assert!(matches!(store.authenticate(&key).unwrap(), Auth::Valid(_)));
        let mine = |s: &Store| s.list_keys(Some("acme")).unwrap().into_iter().find(|k| k.id == id).unwrap();
        assert!(mine(&store).last_used_at_ms.is_some());
        assert_eq!(store.revoke_key(&id).unwrap().map(|k| k.tenant), Some("acme".to_string()));
        assert!(matches!(store.authenticate(&key).unwrap(), Auth::Revoked(_)));
        assert!(mine(&store).revoked_at_ms.is_some());
        assert_eq!(store.revoke_key("key_0000000000000000").unwrap(), None);
        assert_eq!(store.list_keys(None).unwrap().len(), 3);
    }

    #[test]
    fn sandboxes_are_scoped_by_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        store.create_key("a", false).unwrap();
        store.create_key("b", false).unwrap();
        store.insert_sandbox(&record("sb_1", "a")).unwrap();
        assert_eq!(store.get_sandbox("a", "sb_1").unwrap(), Some(record("sb_1", "a")));
        assert_eq!(store.get_sandbox("b", "sb_1").unwrap(), None);
        assert_eq!(store.list_sandboxes("b").unwrap().len(), 0);
        store.set_state("sb_1", SandboxState::Deleted, None).unwrap();
        assert_eq!(store.get_sandbox("a", "sb_1").unwrap(), None);
        assert!(store.live_sandboxes().unwrap().is_empty());
    }

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
        let store = Store::open(&path).unwrap();
        let rec = store.get_sandbox("a", "sb_old").unwrap().expect("the old row survives");
        assert_eq!(rec.info.state, SandboxState::Stopped);
        assert_eq!(rec.info.limits.disk_mb, None);
        assert!(!rec.info.persistent);
    }

    #[test]
    fn a_megabyte_argv_is_stored_as_its_first_kib_with_length_and_digest() {
        let argv = vec!["/bin/echo".to_string(), "é".repeat(1 << 19)];
        let v = audit_argv(&argv);
        let stored = v.to_string();
        assert!(stored.len() < AUDIT_LIST_BYTES + 300, "{} bytes stored", stored.len());
        assert_eq!(v["argv_truncated"], true);
        assert_eq!(v["argv_bytes"], 10 + (1 << 20) + 1);
        assert_eq!(v["argv"][0], "/bin/echo");
        assert!(v["argv"][1].as_str().unwrap().starts_with("éé"));
        assert_eq!(v["argv_sha256"].as_str().unwrap().len(), 64);
        assert_eq!(audit_argv(&["true".to_string()]), serde_json::json!({"argv": ["true"]}));
    }

    #[test]
    fn audit_rows_older_than_the_retention_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        store.audit("a", None, "old", &serde_json::json!({})).unwrap();
        store.audit("a", None, "old", &serde_json::json!({})).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let cut = now_ms();
        store.audit("a", None, "new", &serde_json::json!({})).unwrap();
        assert_eq!(store.prune_audit(cut).unwrap(), 2);
        let left = store.list_audit(None, None, 10).unwrap();
        assert_eq!(left.iter().map(|e| e.action.as_str()).collect::<Vec<_>>(), ["new"]);
    }

    #[test]
    fn audit_filters_by_tenant_and_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("s.db")).unwrap();
        store.audit("a", Some("sb_1"), "exec", &serde_json::json!({"argv": ["true"]})).unwrap();
        store.audit("b", None, "key.create", &serde_json::json!({})).unwrap();
        assert_eq!(store.list_audit(Some("a"), None, 10).unwrap().len(), 1);
        assert_eq!(store.list_audit(None, None, 10).unwrap().len(), 2);
        let e = &store.list_audit(Some("a"), Some("sb_1"), 10).unwrap()[0];
        assert_eq!(e.action, "exec");
        assert_eq!(e.detail["argv"][0], "true");
        store.integrity_check().unwrap();
    }
}
