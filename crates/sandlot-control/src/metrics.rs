//! Sandbox metrics: what a running sandbox uses, read from its cgroup and layer when asked (no
//! background sampler, so nothing is spent on sandboxes nobody watches).

use std::time::Duration;

use sandlot_api::{SandboxMetrics, SandboxState};

use crate::{Caller, Control, Error, Result};

/// How long CPU use is measured over: two readings this far apart.
const CPU_WINDOW: Duration = Duration::from_millis(250);

impl Control {
    /// What the caller's sandbox `id` uses now; `None` when it is not running (a paused or stopped
    /// sandbox uses no CPU and its memory is not what a running one would show).
    pub async fn metrics(&self, caller: &Caller, id: &str) -> Result<Option<SandboxMetrics>> {
        let rec = self.record(caller, id)?;
        if rec.info.state != SandboxState::Running {
            return Ok(None);
        }
        let not_running = |_| Error::conflict(format!("sandbox {id} stopped while it was being measured"));
        let first = self.engine.usage(id).await.map_err(not_running)?;
        let t0 = std::time::Instant::now();
        tokio::time::sleep(CPU_WINDOW).await;
        let second = self.engine.usage(id).await.map_err(not_running)?;
        let elapsed_us = t0.elapsed().as_micros().max(1) as f64;
        let limits = &rec.info.limits;
        let cpu_used_pct = match (first.cpu_usec, second.cpu_usec) {
            (Some(a), Some(b)) => {
                let pct = b.saturating_sub(a) as f64 / elapsed_us / limits.cpu.max(0.01) * 100.0;
                Some((pct * 100.0).round() / 100.0)
            }
            _ => None,
        };
        let memory = second.memory_bytes.unwrap_or(0);
        Ok(Some(SandboxMetrics {
            at_ms: sandlot_store::now_ms(),
            cpu_limit: limits.cpu,
            cpu_used_pct,
            memory_used_bytes: memory.saturating_sub(second.cache_bytes),
            memory_cache_bytes: second.cache_bytes,
            memory_total_bytes: limits.memory_mb << 20,
            disk_used_bytes: second.disk_bytes,
            disk_total_bytes: limits.disk_mb.map(|mb| mb << 20),
        }))
    }
}
