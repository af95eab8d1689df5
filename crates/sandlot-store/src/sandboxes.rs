//! The `sandboxes` table: one row per sandbox ever created (deleted ones stay, marked, for audit).

use std::collections::BTreeMap;

use rusqlite::{params, OptionalExtension};
use sandlot_api::{Limits, NetworkSpec, SandboxInfo, SandboxState, TimeoutAction};

use crate::{Result, SqliteStore};

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
    /// The root it boots: `None` for `host`, else the image's config digest (pinned at create, so a
    /// tag pulled again later does not change an existing sandbox).
    pub image_key: Option<String>,
}

/// Sandbox records: state, limits, network spec, expiry, slot.
pub trait Sandboxes {
    /// Records a new sandbox.
    /// Fails with a constraint error when the tenant already has a live sandbox of that name.
    fn insert_sandbox(&self, rec: &SandboxRecord) -> Result<()>;

    /// The tenant that owns sandbox `id`.
    fn tenant_of(&self, id: &str) -> Result<Option<String>>;

    /// Replaces a sandbox's network policy.
    fn set_network(&self, id: &str, network: &NetworkSpec) -> Result<()>;

    /// Records activity (an API call or process output) for idle timeouts.
    fn touch(&self, id: &str, at_ms: i64) -> Result<()>;

    /// Sets a new lifetime end.
    fn set_expiry(&self, id: &str, expires_ms: i64) -> Result<()>;

    /// The tenant's live sandbox called `name`.
    fn get_by_name(&self, tenant: &str, name: &str) -> Result<Option<SandboxRecord>>;

    /// Sets a sandbox's state (and reason, cleared when `None`).
    fn set_state(&self, id: &str, state: SandboxState, reason: Option<&str>) -> Result<()>;

    /// One sandbox of `tenant` (another tenant's id is simply not found).
    fn get_sandbox(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>>;

    /// One sandbox of `tenant`, deleted ones included (to report how it ended).
    fn get_sandbox_any(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>>;

    /// Records the host uid-range slot a sandbox runs with.
    fn set_slot(&self, id: &str, slot: u32) -> Result<()>;

    /// Sandboxes of `tenant` that are not deleted, newest first.
    fn list_sandboxes(&self, tenant: &str) -> Result<Vec<SandboxRecord>>;

    /// Every sandbox not deleted, of all tenants (start-up recovery, expiry).
    fn live_sandboxes(&self) -> Result<Vec<SandboxRecord>>;
}

impl Sandboxes for SqliteStore {
    fn insert_sandbox(&self, rec: &SandboxRecord) -> Result<()> {
        let i = &rec.info;
        self.conn().execute(
            "INSERT INTO sandboxes(id, tenant, state, reason, image, limits, env, metadata, slot, created_ms, expires_ms,
                                   name, persistent, auto_resume, idle_s, on_timeout, stop_after_s, active_ms, snapshot, network, image_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)",
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
                rec.image_key,
            ],
        )?;
        Ok(())
    }

    fn tenant_of(&self, id: &str) -> Result<Option<String>> {
        Ok(self.conn().query_row("SELECT tenant FROM sandboxes WHERE id = ?1", params![id], |r| r.get(0)).optional()?)
    }

    fn set_network(&self, id: &str, network: &NetworkSpec) -> Result<()> {
        self.conn()
            .execute("UPDATE sandboxes SET network = ?2 WHERE id = ?1", params![id, serde_json::to_string(network)?])?;
        Ok(())
    }

    fn touch(&self, id: &str, at_ms: i64) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET active_ms = max(active_ms, ?2) WHERE id = ?1", params![id, at_ms])?;
        Ok(())
    }

    fn set_expiry(&self, id: &str, expires_ms: i64) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET expires_ms = ?2 WHERE id = ?1", params![id, expires_ms])?;
        Ok(())
    }

    fn get_by_name(&self, tenant: &str, name: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE tenant = ?1 AND name = ?2 AND state != 'deleted'", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&tenant, &name])?.into_iter().next())
    }

    fn set_state(&self, id: &str, state: SandboxState, reason: Option<&str>) -> Result<()> {
        self.conn().execute(
            "UPDATE sandboxes SET state = ?2, reason = ?3 WHERE id = ?1",
            params![id, state.as_str(), reason],
        )?;
        Ok(())
    }

    fn get_sandbox(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE id = ?1 AND tenant = ?2 AND state != 'deleted'", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&id, &tenant])?.into_iter().next())
    }

    fn get_sandbox_any(&self, tenant: &str, id: &str) -> Result<Option<SandboxRecord>> {
        let sql = format!("{} WHERE id = ?1 AND tenant = ?2", Self::COLUMNS);
        Ok(self.sandboxes(&sql, &[&id, &tenant])?.into_iter().next())
    }

    fn set_slot(&self, id: &str, slot: u32) -> Result<()> {
        self.conn().execute("UPDATE sandboxes SET slot = ?2 WHERE id = ?1", params![id, slot])?;
        Ok(())
    }

    fn list_sandboxes(&self, tenant: &str) -> Result<Vec<SandboxRecord>> {
        let sql = format!("{} WHERE tenant = ?1 AND state != 'deleted' ORDER BY created_ms DESC, id", Self::COLUMNS);
        self.sandboxes(&sql, &[&tenant])
    }

    fn live_sandboxes(&self) -> Result<Vec<SandboxRecord>> {
        let sql = format!("{} WHERE state != 'deleted' ORDER BY created_ms", Self::COLUMNS);
        self.sandboxes(&sql, &[])
    }
}

impl SqliteStore {
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
                r.get::<_, Option<String>>(20)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut info, tenant, slot, limits, env, metadata, network, image_key) = row?;
            info.limits = serde_json::from_str(&limits)?;
            info.metadata = serde_json::from_str(&metadata)?;
            let network: NetworkSpec = serde_json::from_str(&network)?;
            info.network = network.info(0, 0);
            out.push(SandboxRecord { info, tenant, env: serde_json::from_str(&env)?, slot, network, image_key });
        }
        Ok(out)
    }

    const COLUMNS: &'static str =
        "SELECT id, tenant, state, reason, image, limits, env, metadata, slot, created_ms, expires_ms,
         name, persistent, auto_resume, idle_s, on_timeout, stop_after_s, active_ms, snapshot, network, image_key FROM sandboxes";
}
