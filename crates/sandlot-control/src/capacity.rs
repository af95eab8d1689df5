//! What this host can give sandboxes, and the ledger of what running sandboxes were promised.
//!
//! A request is refused when one sandbox asks for more than the host has (memory, pids, the layers
//! volume), and when the running sandboxes together would exceed the host's capacity times the
//! admin's overcommit ratio. Places are reserved atomically, before the boot is awaited, so
//! concurrent creates cannot all pass the check and then all boot (`--max-sandboxes` too).

use std::collections::HashMap;
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

impl From<sandlot_engine::HostCapacity> for Host {
    /// The capacity the driver read, in the ledger's units.
    fn from(c: sandlot_engine::HostCapacity) -> Host {
        Host { memory_mb: c.memory_bytes >> 20, pid_max: c.pid_max, disk_mb: c.layers_bytes.map(|b| b >> 20) }
    }
}

impl Host {
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

/// What one tenant's persistent sandboxes may hold together, running or stopped: a stopped sandbox
/// keeps its writable layer on the layers volume, so it keeps its charge until it is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PersistentQuota {
    /// Most persistent sandboxes one tenant keeps (not deleted).
    pub count: u64,
    /// Disk they may be promised together (each counts its `disk_mb`), MiB.
    pub disk_mb: u64,
}

impl Default for PersistentQuota {
    fn default() -> Self {
        PersistentQuota { count: 64, disk_mb: 32_768 }
    }
}

/// Whom a place in the ledger is for.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The sandbox's owner.
    pub tenant: &'a str,
    /// Whether it keeps its files when it stops (and so its layer, while stopped).
    pub persistent: bool,
    /// What it was promised.
    pub limits: &'a Limits,
}

/// One sandbox's place: what it was promised, and whether it runs (a stopped one holds only its layer).
#[derive(Debug, Clone)]
struct Place {
    tenant: String,
    persistent: bool,
    limits: Limits,
    running: bool,
}

impl Place {
    fn disk(&self) -> u64 {
        self.limits.disk_mb.unwrap_or(0)
    }
}

/// Reservations of running (and paused) sandboxes, and the layers stopped persistent ones keep.
pub struct Ledger {
    host: Host,
    overcommit: f64,
    max_sandboxes: usize,
    persistent: PersistentQuota,
    /// Pids each sandbox holds beyond its own limit (its supervisor's headroom).
    pids_overhead: u64,
    held: Mutex<HashMap<String, Place>>,
}

impl Ledger {
    /// A ledger with nothing reserved.
    pub fn new(host: Host, overcommit: f64, max_sandboxes: usize) -> Ledger {
        Ledger {
            host,
            overcommit,
            max_sandboxes,
            persistent: PersistentQuota::default(),
            pids_overhead: 0,
            held: Mutex::default(),
        }
    }

    /// Counts `pids` more per sandbox than it asked for: what its supervisor may use on top.
    pub fn with_pids_overhead(mut self, pids: u64) -> Ledger {
        self.pids_overhead = pids;
        self
    }

    /// Bounds each tenant's persistent sandboxes by `quota`.
    pub fn with_persistent_quota(mut self, quota: PersistentQuota) -> Ledger {
        self.persistent = quota;
        self
    }

    /// The host's capacity.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// Reserves a running sandbox's place for `id` (again: a no-op; a stopped one's place becomes a
    /// running one's), or says which bound it would cross.
    pub fn reserve(&self, id: &str, claim: Claim<'_>) -> Result<(), Error> {
        let mut held = lock(&self.held);
        if held.get(id).is_some_and(|p| p.running) {
            return Ok(());
        }
        let others = || held.iter().filter(|(k, _)| k.as_str() != id).map(|(_, p)| p);
        let running = others().filter(|p| p.running).count();
        if running >= self.max_sandboxes {
            return Err(Error::new(
                Kind::LimitReached,
                format!("this server runs at most {} sandboxes at once; delete one and retry", self.max_sandboxes),
            ));
        }
        let limits = claim.limits;
        let sum =
            |f: &dyn Fn(&Limits) -> u64| others().filter(|p| p.running).map(|p| f(&p.limits)).sum::<u64>() + f(limits);
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
        let disk = limits.disk_mb.unwrap_or(0);
        if let Some(volume) = self.host.disk_mb {
            // Stopped sandboxes' layers stay on the volume: they count as running ones' do.
            let stopped: u64 = others().filter(|p| !p.running).map(Place::disk).sum();
            let total = others().filter(|p| p.running).map(Place::disk).sum::<u64>() + stopped + disk;
            if total > cap(volume) {
                return Err(Error::new(
                    Kind::ServerFull,
                    format!(
                        "server full: sandboxes would hold {total} MiB of the layers volume together ({stopped} MiB \
                         of it kept by stopped sandboxes), over this server's capacity of {} MiB; delete stopped \
                         sandboxes you no longer need, retry later, or ask for less disk_mb",
                        cap(volume)
                    ),
                ));
            }
        }
        if claim.persistent {
            let mine: Vec<&Place> = others().filter(|p| p.persistent && p.tenant == claim.tenant).collect();
            let quota = self.persistent;
            if mine.len() as u64 >= quota.count {
                return Err(Error::limit(format!(
                    "tenant {} already keeps {} persistent sandboxes (running or stopped), this server's most \
                     per tenant: delete some (sandlot sandbox rm) or create this one with persistent=false",
                    claim.tenant,
                    mine.len()
                )));
            }
            let promised = mine.iter().map(|p| p.disk()).sum::<u64>();
            if promised + disk > quota.disk_mb {
                return Err(Error::limit(format!(
                    "tenant {}'s persistent sandboxes (running or stopped) already hold {promised} MiB of disk; \
                     with this one's {disk} MiB that is over the {} MiB each tenant may keep \
                     (--persistent-disk-quota-mb): delete stopped sandboxes (sandlot sandbox rm) or ask for less \
                     disk_mb",
                    claim.tenant, quota.disk_mb
                )));
            }
        }
        held.insert(
            id.to_string(),
            Place {
                tenant: claim.tenant.to_string(),
                persistent: claim.persistent,
                limits: limits.clone(),
                running: true,
            },
        );
        Ok(())
    }

    /// Sandbox `id` stopped and kept its files: it gives back what its processes held and keeps its
    /// layer's place. A sandbox the ledger did not know (one stopped before this server started) is
    /// recorded as stopped with `claim`, without checks: its layer is already on the volume.
    pub fn park(&self, id: &str, claim: Claim<'_>) {
        let mut held = lock(&self.held);
        let place = held.entry(id.to_string()).or_insert_with(|| Place {
            tenant: claim.tenant.to_string(),
            persistent: claim.persistent,
            limits: claim.limits.clone(),
            running: false,
        });
        place.running = false;
    }

    /// Gives sandbox `id`'s place back, running or stopped (if it holds one).
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

    fn eph(limits: &Limits) -> Claim<'_> {
        Claim { tenant: "t", persistent: false, limits }
    }

    fn kept<'a>(tenant: &'a str, limits: &'a Limits) -> Claim<'a> {
        Claim { tenant, persistent: true, limits }
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
        ledger.reserve("a", eph(&limits(1000, 8, 16))).unwrap();
        let e = ledger.reserve("b", eph(&limits(501, 8, 16))).unwrap_err();
        assert_eq!(e.kind, Kind::ServerFull);
        assert!(
            e.message.contains("1501 MiB of memory together, over this server's capacity of 1500"),
            "{}",
            e.message
        );
        ledger.reserve("b", eph(&limits(500, 8, 16))).unwrap();
        // pids are not overcommitted.
        let e = ledger.reserve("c", eph(&limits(0, 735, 16))).unwrap_err();
        assert!(e.message.contains("751 processes of pids"), "{}", e.message);
        ledger.release("a");
        ledger.reserve("c", eph(&limits(0, 734, 16))).unwrap();
    }

    #[test]
    fn the_sandbox_count_is_reserved_too() {
        let ledger = Ledger::new(HOST, 1.5, 2);
        ledger.reserve("a", eph(&limits(16, 8, 16))).unwrap();
        ledger.reserve("a", eph(&limits(16, 8, 16))).unwrap();
        ledger.reserve("b", eph(&limits(16, 8, 16))).unwrap();
        assert_eq!(ledger.reserve("c", eph(&limits(16, 8, 16))).unwrap_err().kind, Kind::LimitReached);
    }

    #[test]
    fn stopped_sandboxes_keep_their_layers_place_and_count_against_their_tenant() {
        let ledger = Ledger::new(HOST, 1.0, 100).with_persistent_quota(PersistentQuota { count: 3, disk_mb: 500 });
        let l = limits(16, 8, 200);
        ledger.reserve("a", kept("alice", &l)).unwrap();
        ledger.park("a", kept("alice", &l));
        ledger.reserve("b", kept("alice", &l)).unwrap();
        ledger.park("b", kept("alice", &l));
        // Two stopped sandboxes hold 400 MiB of alice's 500.
        let e = ledger.reserve("c", kept("alice", &l)).unwrap_err();
        assert_eq!(e.kind, Kind::LimitReached);
        assert!(e.message.contains("already hold 400 MiB of disk"), "{}", e.message);
        // Resuming one of them is no new charge.
        ledger.reserve("a", kept("alice", &l)).unwrap();
        // The volume counts stopped layers: bob's 600 MiB would make 1000 + 0 over nothing, 1001 over.
        let big = limits(16, 8, 600);
        let e = ledger.reserve("d", kept("bob", &limits(16, 8, 601))).unwrap_err();
        assert_eq!(e.kind, Kind::ServerFull);
        assert!(e.message.contains("200 MiB of it kept by stopped sandboxes"), "{}", e.message);
        ledger.reserve("d", eph(&big)).unwrap();
        ledger.release("d");
        // The count: a third persistent sandbox with room, not a fourth.
        let small = limits(16, 8, 10);
        ledger.reserve("e", kept("alice", &small)).unwrap();
        let e = ledger.reserve("f", kept("alice", &small)).unwrap_err();
        assert!(e.message.contains("already keeps 3 persistent sandboxes"), "{}", e.message);
        // Deleting gives the place back; ephemeral sandboxes are not persistent ones.
        ledger.release("b");
        ledger.reserve("f", kept("alice", &small)).unwrap();
        ledger.reserve("g", eph(&small)).unwrap();
        // A sandbox stopped before this server started is known from recovery, unchecked.
        ledger.park("h", kept("carol", &limits(16, 8, 900)));
        assert_eq!(ledger.reserve("i", eph(&limits(16, 8, 100))).unwrap_err().kind, Kind::ServerFull);
    }
}
