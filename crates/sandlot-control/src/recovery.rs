//! Start-up recovery. The previous daemon's sandbox processes died with it (PDEATHSIG), so: persistent
//! sandboxes that were running or paused are `stopped` with their files; ephemeral ones are deleted;
//! half-created ones failed. Then every cgroup, layer and snapshot no record explains is swept.

use std::collections::HashSet;

use sandlot_api::SandboxState;

use crate::{Control, Result};

/// What recovery did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Sandboxes whose state changed, with the new state.
    pub changed: Vec<(String, SandboxState)>,
    /// Cgroups, layers and snapshots removed as leftovers.
    pub swept: Vec<String>,
}

impl Control {
    /// Brings the store and the host in line after a restart (see the module's documentation).
    pub async fn recover(&self) -> Result<Recovered> {
        let mut keep = HashSet::new();
        let mut done = Recovered::default();
        for rec in self.store.live_sandboxes()? {
            let id = &rec.info.id;
            let (state, reason) = match (rec.info.state, rec.info.persistent) {
                (SandboxState::Creating, _) => (SandboxState::Failed, "the server restarted during creation"),
                (SandboxState::Running | SandboxState::Paused, true) => {
                    (SandboxState::Stopped, "the server restarted; files kept, processes ended")
                }
                (SandboxState::Running | SandboxState::Paused, false) => {
                    (SandboxState::Deleted, "the server restarted; ephemeral sandbox removed")
                }
                (s, _) => {
                    if s == SandboxState::Stopped {
                        keep.insert(id.clone());
                        self.ledger.park(id, crate::lifecycle::claim(&rec));
                    }
                    continue;
                }
            };
            if state == SandboxState::Stopped {
                keep.insert(id.clone());
                // Its layer stays on the volume: it keeps its place until it is deleted.
                self.ledger.park(id, crate::lifecycle::claim(&rec));
            }
            self.store.set_state(id, state, Some(reason))?;
            self.store.audit(
                &rec.tenant,
                Some(id),
                "sandbox.recovered",
                &serde_json::json!({"state": state.as_str(), "reason": reason}),
            )?;
            let kind = match state {
                SandboxState::Failed => sandlot_api::EventKind::Failed,
                SandboxState::Stopped => sandlot_api::EventKind::Stopped,
                _ => sandlot_api::EventKind::Deleted,
            };
            self.emit(&rec, kind, serde_json::json!({"reason": reason, "why": "recovery"}));
            done.changed.push((id.clone(), state));
        }
        let report = self.engine.sweep(keep).await?;
        let snaps: HashSet<String> = self.store.live_snapshot_ids()?.into_iter().collect();
        let removed_snaps = self.engine.sweep_snapshots(snaps).await?;
        if !report.cgroups.is_empty() || !report.layers.is_empty() || !removed_snaps.is_empty() {
            tracing::info!(cgroups = ?report.cgroups, layers = ?report.layers, snapshots = ?removed_snaps, "swept leftovers of a previous run");
        }
        done.swept = report.cgroups.into_iter().chain(report.layers).chain(removed_snaps).collect();
        Ok(done)
    }
}
