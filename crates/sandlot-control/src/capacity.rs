//! What this host can give sandboxes, and the ledger of what running sandboxes were promised.
//!
//! A request is refused when one sandbox asks for more than the host has (memory, pids, the layers
//! volume), and when the running sandboxes together would exceed the host's capacity times the
//! admin's overcommit ratio. Places are reserved atomically, before the boot is awaited, so
//! concurrent creates cannot all pass the check and then all boot (`--max-sandboxes` too).

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use sandlot_api::Limits;

use crate::{lock, Error, Kind};

/// Share of `pid_max` that sandboxes together may hold, in quarters: three quarters. A pid is a
/// host-wide resource with no overcommit: when it runs out, nothing on the host can fork (sshd, the
/// daemon's own threads), so a quarter stays with the host whatever `--overcommit` says.
const PIDS_SHARE_QUARTERS: u64 = 3;
/// Highest per-sandbox pids value regardless of the host (the cgroup's limit is a u64, but a sandbox
/// needing more than this is not a sandbox).
const MAX_PIDS: u64 = 65_536;

/// The host's capacity, read once at start-up.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    /// Physical memory (`MemTotal`), MiB.
    pub memory_mb: u64,
    /// `kernel.pid_max`.
    pub pid_max: u64,
    /// Space for writable layers, MiB: the layers volume, or less if the filesystem that holds its
    /// sparse file is smaller. `None` without disk quotas.
    pub disk_mb: Option<u64>,
}

impl Host {
    /// Reads /proc/meminfo, /proc/sys/kernel/pid_max and the size of the state directory's filesystem.
    pub fn detect(state_dir: &Path, layers_volume_gb: Option<u64>) -> std::io::Result<Host> {
        let memory = sandlot_engine::linux::host::host_memory_bytes()?;
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")?
            .trim()
            .parse::<u64>()
            .map_err(|e| std::io::Error::other(format!("/proc/sys/kernel/pid_max: {e}")))?;
        let disk_mb = match layers_volume_gb {
            None => None,
            Some(gb) => {
                let fs = nix::sys::statvfs::statvfs(state_dir).map_err(std::io::Error::from)?;
                let fs_mb = (fs.blocks() * fs.fragment_size()) >> 20;
                Some((gb << 10).min(fs_mb))
            }
        };
        Ok(Host { memory_mb: memory >> 20, pid_max, disk_mb })
    }

    /// Most pids one sandbox may ask for.
    fn max_pids(&self) -> u64 {
        self.pids_total().min(MAX_PIDS)
    }

    /// Most pids running sandboxes may hold together.
    fn pids_total(&self) -> u64 {
        self.pid_max * PIDS_SHARE_QUARTERS / 4
    }
}

fn too_much(what: &str, asked: u64, max: u64, because: &str) -> Error {
    Error::invalid(format!("{what} {asked} exceeds this server's maximum of {max} ({because}); ask for at most {max}"))
}

/// Refuses a sandbox that asks for more than the host has.
pub fn check_against_host(host: &Host, l: &Limits) -> Result<(), Error> {
    if l.memory_mb > host.memory_mb {
        return Err(too_much("memory_mb", l.memory_mb, host.memory_mb, "the host's memory"));
    }
    if l.pids > host.max_pids() {
        let why = format!("three quarters of the host's pid_max of {}", host.pid_max);
        return Err(too_much("pids", l.pids, host.max_pids(), &why));
    }
    if let (Some(d), Some(max)) = (l.disk_mb, host.disk_mb) {
        if d > max {
            return Err(too_much("disk_mb", d, max, "the layers volume, or the filesystem that holds it if smaller"));
        }
    }
    Ok(())
}

/// Reservations of running (and paused) sandboxes.
pub struct Ledger {
    host: Host,
    overcommit: f64,
    max_sandboxes: usize,
    /// Pids each sandbox holds beyond its own limit (its supervisor's headroom).
    pids_overhead: u64,
    held: Mutex<HashMap<String, Limits>>,
}

impl Ledger {
    /// A ledger with nothing reserved.
    pub fn new(host: Host, overcommit: f64, max_sandboxes: usize) -> Ledger {
        Ledger { host, overcommit, max_sandboxes, pids_overhead: 0, held: Mutex::default() }
    }

    /// Counts `pids` more per sandbox than it asked for: what its supervisor may use on top.
    pub fn with_pids_overhead(mut self, pids: u64) -> Ledger {
        self.pids_overhead = pids;
        self
    }

    /// The host's capacity.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Reserves `limits` for sandbox `id` (again: a no-op), or says which bound it would cross.
    pub fn reserve(&self, id: &str, limits: &Limits) -> Result<(), Error> {
        let mut held = lock(&self.held);
        if held.contains_key(id) {
            return Ok(());
        }
        if held.len() >= self.max_sandboxes {
            return Err(Error::new(
                Kind::LimitReached,
                format!("this server runs at most {} sandboxes at once; delete one and retry", self.max_sandboxes),
            ));
        }
        let sum = |f: &dyn Fn(&Limits) -> u64| held.values().map(f).sum::<u64>() + f(limits);
        let ratio = self.overcommit;
        let cap = |c: u64| (c as f64 * ratio) as u64;
        let full = |what: &str, total: u64, cap: u64, unit: &str| {
            Error::new(
                Kind::ServerFull,
                format!(
                    "server full: running sandboxes would hold {total} {unit} of {what} together, over this \
                     server's capacity of {cap}; retry when some have ended, or ask for less"
                ),
            )
        };
        let memory = sum(&|l| l.memory_mb);
        if memory > cap(self.host.memory_mb) {
            return Err(full("memory", memory, cap(self.host.memory_mb), "MiB"));
        }
        let pids = sum(&|l| l.pids + self.pids_overhead);
        if pids > self.host.pids_total() {
            return Err(full("pids", pids, self.host.pids_total(), "processes"));
        }
        if let Some(disk) = self.host.disk_mb {
            let total = sum(&|l| l.disk_mb.unwrap_or(0));
            if total > cap(disk) {
                return Err(full("disk", total, cap(disk), "MiB"));
            }
        }
        held.insert(id.to_string(), limits.clone());
        Ok(())
    }

    /// Gives sandbox `id`'s reservation back (if it holds one).
    pub fn release(&self, id: &str) {
        lock(&self.held).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memory_mb: u64, pids: u64, disk_mb: u64) -> Limits {
        Limits { cpu: 1.0, memory_mb, pids, disk_mb: Some(disk_mb), timeout_s: 60 }
    }

    const HOST: Host = Host { memory_mb: 1000, pid_max: 1000, disk_mb: Some(1000) };

    #[test]
    fn one_sandbox_may_not_ask_for_more_than_the_host_has() {
        let e = check_against_host(&HOST, &limits(1001, 8, 16)).unwrap_err();
        assert_eq!(
            e.message,
            "memory_mb 1001 exceeds this server's maximum of 1000 (the host's memory); ask for at most 1000"
        );
        let e = check_against_host(&HOST, &limits(16, 751, 16)).unwrap_err();
        assert!(e.message.contains("pids 751 exceeds this server's maximum of 750"), "{}", e.message);
        let e = check_against_host(&HOST, &limits(16, 8, 1001)).unwrap_err();
        assert!(e.message.contains("maximum of 1000 (the layers volume"), "{}", e.message);
        check_against_host(&HOST, &limits(1000, 750, 1000)).unwrap();
    }

    #[test]
    fn running_sandboxes_stay_within_capacity_times_overcommit() {
        let ledger = Ledger::new(HOST, 1.5, 100);
        ledger.reserve("a", &limits(1000, 8, 16)).unwrap();
        let e = ledger.reserve("b", &limits(501, 8, 16)).unwrap_err();
        assert_eq!(e.kind, Kind::ServerFull);
        assert!(
            e.message.contains("1501 MiB of memory together, over this server's capacity of 1500"),
            "{}",
            e.message
        );
        ledger.reserve("b", &limits(500, 8, 16)).unwrap();
        // pids are not overcommitted.
        let e = ledger.reserve("c", &limits(0, 735, 16)).unwrap_err();
        assert!(e.message.contains("751 processes of pids"), "{}", e.message);
        ledger.release("a");
        ledger.reserve("c", &limits(0, 734, 16)).unwrap();
    }

    #[test]
    fn the_sandbox_count_is_reserved_too() {
        let ledger = Ledger::new(HOST, 1.5, 2);
        ledger.reserve("a", &limits(16, 8, 16)).unwrap();
        ledger.reserve("a", &limits(16, 8, 16)).unwrap();
        ledger.reserve("b", &limits(16, 8, 16)).unwrap();
        assert_eq!(ledger.reserve("c", &limits(16, 8, 16)).unwrap_err().kind, Kind::LimitReached);
    }
}
