//! The `snapshots` table: a tenant's read-only snapshots and the host id base of their files.

use rusqlite::{params, OptionalExtension};
use sandlot_api::SnapshotInfo;

use crate::{Result, SqliteStore};

/// Snapshots of writable layers.
pub trait Snapshots {
    /// Records a snapshot; `image_key` is the image root its sandbox booted (`None` for `host`).
    fn insert_snapshot(&self, tenant: &str, snap: &SnapshotInfo, base: u32, image_key: Option<&str>) -> Result<()>;

    /// The image root snapshot `id` was taken over (`None` for `host`).
    fn snapshot_image_key(&self, id: &str) -> Result<Option<String>>;

    /// The tenant's snapshot `id` (by id or name), with the host id base of its files.
    fn get_snapshot(&self, tenant: &str, id: &str) -> Result<Option<(SnapshotInfo, u32)>>;

    /// The tenant's snapshots, newest first.
    fn list_snapshots(&self, tenant: &str) -> Result<Vec<SnapshotInfo>>;

    /// How many snapshots the tenant keeps, and the bytes they are charged.
    fn snapshot_usage(&self, tenant: &str) -> Result<(u64, u64)>;

    /// Ids of every snapshot not deleted (garbage collection keeps these).
    fn live_snapshot_ids(&self) -> Result<Vec<String>>;

    /// Marks a snapshot deleted.
    fn delete_snapshot(&self, id: &str) -> Result<()>;
}

impl Snapshots for SqliteStore {
    fn insert_snapshot(&self, tenant: &str, snap: &SnapshotInfo, base: u32, image_key: Option<&str>) -> Result<()> {
        self.conn().execute(
            "INSERT INTO snapshots(id, tenant, name, sandbox_id, image, base, created_ms, bytes, image_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            params![
                snap.id,
                tenant,
                snap.name,
                snap.sandbox_id,
                snap.image,
                base,
                snap.created_at_ms,
                snap.bytes as i64,
                image_key
            ],
        )?;
        Ok(())
    }

    fn snapshot_image_key(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .conn()
            .query_row("SELECT image_key FROM snapshots WHERE id = ?1", params![id], |r| r.get::<_, Option<String>>(0))
            .optional()?
            .flatten())
    }

    fn get_snapshot(&self, tenant: &str, id: &str) -> Result<Option<(SnapshotInfo, u32)>> {
        Ok(self.snapshots_where("tenant = ?1 AND (id = ?2 OR name = ?2)", &[&tenant, &id])?.into_iter().next())
    }

    fn list_snapshots(&self, tenant: &str) -> Result<Vec<SnapshotInfo>> {
        Ok(self.snapshots_where("tenant = ?1", &[&tenant])?.into_iter().map(|(s, _)| s).collect())
    }

    fn snapshot_usage(&self, tenant: &str) -> Result<(u64, u64)> {
        let (n, bytes): (i64, i64) = self.conn().query_row(
            "SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM snapshots WHERE deleted = 0 AND tenant = ?1",
            params![tenant],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok((n as u64, bytes as u64))
    }

    fn live_snapshot_ids(&self) -> Result<Vec<String>> {
        Ok(self.snapshots_where("1 = 1", &[])?.into_iter().map(|(s, _)| s.id).collect())
    }

    fn delete_snapshot(&self, id: &str) -> Result<()> {
        self.conn().execute("UPDATE snapshots SET deleted = 1 WHERE id = ?1", params![id])?;
        Ok(())
    }
}

impl SqliteStore {
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
}
