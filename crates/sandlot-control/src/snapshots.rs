//! Snapshots (charged to their tenant, within its count and byte quotas) and forks.

use std::sync::Arc;

use sandlot_api::{SandboxInfo, SnapshotInfo, SnapshotList};
use sandlot_engine::LayerSource;
use sandlot_store::{now_ms, SandboxRecord};
use serde_json::json;

use crate::plan::{check_name, new_record, random_id, Plan};
use crate::transitions::{refusal, step, Step, Transition};
use crate::{Caller, Control, Error, Kind, Result};

/// Most copies one fork makes.
const MAX_FORK: u32 = 32;

/// Whether a snapshot counts against its tenant's snapshot limits: the ones a caller keeps, not the
/// one a fork takes and deletes once its copies exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charge {
    Tenant,
    Transient,
}

impl Control {
    /// Takes a snapshot of the caller's sandbox `id`, optionally named. It runs detached from the
    /// caller: one that goes away mid-snapshot must not leave a snapshot on disk that the store (and so
    /// the tenant's quota) never learns of.
    pub async fn snapshot(self: &Arc<Self>, caller: &Caller, id: &str, name: Option<String>) -> Result<SnapshotInfo> {
        if let Some(n) = &name {
            check_name(n)?;
            if self.store.get_snapshot(&caller.tenant, n)?.is_some() {
                return Err(Error::new(Kind::AlreadyExists, format!("a snapshot named {n:?} exists")));
            }
        }
        let rec = self.record(caller, id)?;
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let _g = this.entries.lock(&rec.info.id).await;
            let rec = this.fresh(&rec)?;
            this.take_snapshot(&rec, name, Charge::Tenant).await.map(|(snap, _)| snap)
        })
        .await
        .map_err(|e| Error::internal(format!("the snapshot task failed: {e}")))?
    }

    /// Takes a snapshot of `rec` (under its lock) and records it for its tenant; returns it with the
    /// driver's note of its files' owner.
    async fn take_snapshot(
        &self,
        rec: &SandboxRecord,
        name: Option<String>,
        charge: Charge,
    ) -> Result<(SnapshotInfo, u32)> {
        if step(rec.info.state, Transition::Snapshot) != Step::Go {
            return Err(refusal(&rec.info.id, rec.info.state, Transition::Snapshot));
        }
        // One check-take-record at a time per tenant, so two sandboxes of one tenant cannot both pass
        // the check on the same room.
        let _tenant = self.entries.lock_tenant(&rec.tenant).await;
        let (count, charged) = self.store.snapshot_usage(&rec.tenant)?;
        if charge == Charge::Tenant && count >= self.cfg.max_snapshots_per_tenant {
            return Err(Error::limit(format!(
                "tenant {} keeps {count} snapshots, the most this server allows (--max-snapshots-per-tenant); \
                 delete one (DELETE /v1/snapshots/ID) and retry",
                rec.tenant
            )));
        }
        let mut snap = SnapshotInfo {
            id: random_id("snap_"),
            name,
            sandbox_id: rec.info.id.clone(),
            image: rec.info.image.clone(),
            created_at_ms: now_ms(),
            bytes: 0,
        };
        let t0 = std::time::Instant::now();
        let taken = self.engine.snapshot(&rec.info.id, rec.slot, &snap.id).await?;
        snap.bytes = taken.bytes;
        let quota = self.cfg.snapshot_quota_bytes;
        if charge == Charge::Tenant && charged + snap.bytes > quota {
            let _ = self.engine.delete_snapshot(&snap.id).await;
            return Err(Error::limit(format!(
                "this snapshot would hold {} MiB; tenant {}'s snapshots already hold {} MiB of {} MiB \
                 (--snapshot-quota-mb): delete snapshots (DELETE /v1/snapshots/ID) and retry",
                snap.bytes.div_ceil(1 << 20),
                rec.tenant,
                charged.div_ceil(1 << 20),
                quota >> 20
            )));
        }
        self.store.insert_snapshot(&rec.tenant, &snap, taken.owner, rec.image_key.as_deref())?;
        self.audit(
            &rec.tenant,
            Some(&rec.info.id),
            "snapshot.create",
            &json!({"snapshot": snap.id, "name": snap.name, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
        )?;
        Ok((snap, taken.owner))
    }

    /// The caller's snapshots.
    pub fn list_snapshots(&self, caller: &Caller) -> Result<SnapshotList> {
        Ok(SnapshotList { snapshots: self.store.list_snapshots(&caller.tenant)? })
    }

    /// Deletes the caller's snapshot `id` (by id or name).
    pub async fn delete_snapshot(&self, caller: &Caller, id: &str) -> Result<()> {
        let (snap, _) =
            self.store.get_snapshot(&caller.tenant, id)?.ok_or_else(|| Error::not_found(&format!("snapshot {id}")))?;
        // Sandboxes made from a snapshot hold copy-on-write copies, not references: deleting it never
        // affects them, so there is no "in use" state to refuse.
        self.engine.delete_snapshot(&snap.id).await?;
        self.store.delete_snapshot(&snap.id)?;
        self.audit(&caller.tenant, Some(&snap.sandbox_id), "snapshot.delete", &json!({"snapshot": snap.id}))?;
        Ok(())
    }

    /// Makes `count` copies of the caller's sandbox `id`, each a new sandbox with its files. Detached,
    /// like a snapshot: a caller that goes away mid-fork must not leave its transient snapshot (never
    /// charged) behind, nor copies half-recorded.
    pub async fn fork(self: &Arc<Self>, caller: &Caller, id: &str, count: u32) -> Result<Vec<SandboxInfo>> {
        if !(1..=MAX_FORK).contains(&count) {
            return Err(Error::invalid(format!("count must be between 1 and {MAX_FORK}, got {count}")));
        }
        let rec = self.record(caller, id)?;
        let this = Arc::clone(self);
        tokio::spawn(async move { this.fork_copies(rec, count).await })
            .await
            .map_err(|e| Error::internal(format!("the fork task failed: {e}")))?
    }

    /// Takes a transient snapshot of `rec` and starts `count` sandboxes from it, then deletes it.
    async fn fork_copies(&self, rec: SandboxRecord, count: u32) -> Result<Vec<SandboxInfo>> {
        let id = rec.info.id.clone();
        let (snap, owner) = {
            let _g = self.entries.lock(&id).await;
            let rec = self.fresh(&rec)?;
            self.take_snapshot(&rec, None, Charge::Transient).await?
        };
        let mut made = Vec::new();
        let mut failure = None;
        {
            for _ in 0..count {
                let mut copy = new_record(&rec.tenant, &rec.info.image, rec.info.limits.clone(), &rec.env);
                copy.info.metadata = rec.info.metadata.clone();
                // A fork of a build step's sandbox is an ordinary sandbox.
                for key in crate::plan::RESERVED_METADATA {
                    copy.info.metadata.remove(key);
                }
                copy.image_key = rec.image_key.clone();
                copy.network = rec.network.clone();
                copy.info.metadata.insert("forked_from".into(), id.clone());
                copy.info.snapshot = Some(snap.id.clone());
                let source = LayerSource::Snapshot { id: snap.id.clone(), owner };
                match self.start_record(Plan { rec: copy, source, policy: None }).await {
                    Ok(info) => made.push(info),
                    Err(e) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        // The implicit snapshot was only the source of the copies, which do not depend on it.
        let _ = self.engine.delete_snapshot(&snap.id).await;
        let _ = self.store.delete_snapshot(&snap.id);
        self.audit(
            &rec.tenant,
            Some(&id),
            "sandbox.fork",
            &json!({"count": made.len(), "sandboxes": made.iter().map(|s| &s.id).collect::<Vec<_>>()}),
        )?;
        if let Some(e) = failure {
            return Err(Error::new(
                e.kind,
                format!(
                    "{} of {} copies made ({}) before: {}",
                    made.len(),
                    count,
                    made.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", "),
                    e.message
                ),
            ));
        }
        Ok(made)
    }
}
