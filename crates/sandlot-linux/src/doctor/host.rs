//! The checks that read the host's configuration: kernel version, btrfs and loop devices, host id
//! ranges, pid_max and memory against the configured limits.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::{check, ok, read, Check, Options, Verdict};
use crate::{UID_FIRST, UID_RANGE};
// Kernel

/// Oldest kernel the engine can run on: overlayfs in a user namespace (5.11); sk_lookup is 5.9.
const MIN_KERNEL: (u32, u32) = (5, 11);

/// `major.minor` of a kernel release string (`6.1.0-57-amd64`, `6.18.44-fc-v1045`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

pub(super) fn kernel(release: &str) -> Check {
    let release = release.trim();
    match kernel_version(release) {
        Some(v) if v >= MIN_KERNEL => ok("kernel", format!("Linux {release}")),
        Some(_) => check(
            "kernel",
            Verdict::Missing,
            format!("Linux {release}: older than 5.11 (overlayfs in a user namespace)"),
            "boot Linux 5.11 or later (tested: 6.1, Debian 12's, and 6.18)",
        ),
        None => check(
            "kernel",
            Verdict::Missing,
            format!("unreadable release {release:?} in /proc/sys/kernel/osrelease"),
            "mount /proc",
        ),
    }
}

// Disk: btrfs and loop devices

/// Which kernel modules can be loaded: the names listed in `/lib/modules/<release>/modules.dep` and
/// `modules.builtin`.
pub(crate) struct Modules {
    available: Vec<String>,
    builtin: Vec<String>,
}

impl Modules {
    pub(super) fn of(release: &str) -> Modules {
        let dir = Path::new("/lib/modules").join(release);
        Modules {
            available: Self::names(&read(dir.join("modules.dep")).unwrap_or_default()),
            builtin: Self::names(&read(dir.join("modules.builtin")).unwrap_or_default()),
        }
    }

    /// Module names of a `modules.dep` or `modules.builtin` listing (`kernel/fs/btrfs/btrfs.ko.xz: …`).
    fn names(listing: &str) -> Vec<String> {
        listing
            .lines()
            .filter_map(|l| {
                let path = l.split(':').next()?;
                let file = path.rsplit('/').next()?;
                Some(file.split(".ko").next()?.to_string())
            })
            .collect()
    }

    pub(super) fn has(&self, name: &str) -> Option<&'static str> {
        if self.builtin.iter().any(|m| m == name) {
            Some("built in")
        } else if self.available.iter().any(|m| m == name) {
            Some("a module")
        } else {
            None
        }
    }
}

/// Finds the programs the layers volume needs.
pub(crate) trait ProgramLookup {
    /// Whether `name` is on PATH (or in /usr/sbin, /sbin).
    fn has(&self, name: &str) -> bool;
}

pub(super) struct Programs;

impl ProgramLookup for Programs {
    fn has(&self, name: &str) -> bool {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from))
            .any(|d| d.join(name).is_file())
    }
}

pub(crate) fn btrfs(disk_quota: bool, filesystems: &str, modules: &Modules, programs: &dyn ProgramLookup) -> Check {
    if !disk_quota {
        return check(
            "btrfs",
            Verdict::Degraded,
            "not used (--no-disk-quota): writable layers have no size limit and can fill the host's disk",
            "install btrfs-progs and drop --no-disk-quota",
        );
    }
    let missing: Vec<&str> = ["mkfs.btrfs", "btrfs"].into_iter().filter(|p| !programs.has(p)).collect();
    if !missing.is_empty() {
        return check(
            "btrfs",
            Verdict::Missing,
            format!("{} not found (btrfs-progs)", missing.join(" and ")),
            "`apt-get install btrfs-progs` (dnf: btrfs-progs), or pass --no-disk-quota to run without disk limits",
        );
    }
    let registered = filesystems.lines().any(|l| l.split_whitespace().last() == Some("btrfs"));
    if registered {
        return ok("btrfs", "in /proc/filesystems; btrfs-progs installed");
    }
    match modules.has("btrfs") {
        Some(how) => {
            ok("btrfs", format!("{how}, not loaded yet (the layers volume's mount loads it); btrfs-progs installed"))
        }
        None => check(
            "btrfs",
            Verdict::Missing,
            "not in /proc/filesystems and no btrfs module for this kernel",
            "install this kernel's modules (btrfs.ko) and `modprobe btrfs`, or pass --no-disk-quota",
        ),
    }
}

pub(crate) fn loop_devices(disk_quota: bool, loop_control: bool, modules: &Modules) -> Check {
    if !disk_quota {
        return ok("loop", "not needed (--no-disk-quota)");
    }
    if loop_control {
        return ok("loop", "/dev/loop-control present");
    }
    match modules.has("loop") {
        // `sandlot serve` loads it itself before it mounts the layers volume (`kmod::loop_devices`).
        Some(how) => {
            ok("loop", format!("no /dev/loop-control yet; loop is {how}, which serve loads (`modprobe loop`)"))
        }
        None => check(
            "loop",
            Verdict::Missing,
            "no /dev/loop-control and no loop module for this kernel (a container without devices?)",
            "`modprobe loop` on the host and pass /dev/loop-control and /dev/loop* in, or pass --no-disk-quota",
        ),
    }
}

// Host ids, pids, memory

/// Slots whose lock file is held now: slot files whose inode `/proc/locks` lists as flock'd.
pub(super) fn held_slots() -> u32 {
    let locks = read("/proc/locks").unwrap_or_default();
    let held: Vec<String> = locks
        .lines()
        .filter(|l| l.contains("FLOCK") && !l.contains("->"))
        .filter_map(|l| l.split_whitespace().nth(5).map(str::to_string))
        .collect();
    let Ok(dir) = fs::read_dir(crate::ids::SLOT_DIR) else { return 0 };
    dir.flatten()
        .filter_map(|e| e.metadata().ok())
        .filter(|m| {
            let dev = m.dev();
            let key = format!("{:02x}:{:02x}:{}", libc::major(dev), libc::minor(dev), m.ino());
            held.contains(&key)
        })
        .count() as u32
}

/// Ranges of `/etc/subuid` (`user:start:count`) and uids of `/etc/passwd` inside sandlot's ids.
fn overlaps(subuid: &str, passwd: &str) -> Vec<String> {
    let (lo, hi) = (u64::from(UID_FIRST), u64::from(UID_FIRST) + u64::from(crate::ids::SLOTS) * u64::from(UID_RANGE));
    let mut out = Vec::new();
    for l in subuid.lines().filter(|l| !l.trim_start().starts_with('#')) {
        let f: Vec<&str> = l.trim().split(':').collect();
        let (Some(start), Some(count)) =
            (f.get(1).and_then(|s| s.parse::<u64>().ok()), f.get(2).and_then(|s| s.parse::<u64>().ok()))
        else {
            continue;
        };
        if start < hi && start + count > lo {
            out.push(format!("/etc/subuid gives {} {start}–{}", f[0], start + count - 1));
        }
    }
    for l in passwd.lines() {
        let f: Vec<&str> = l.split(':').collect();
        if let Some(uid) = f.get(2).and_then(|s| s.parse::<u64>().ok()) {
            if (lo..hi).contains(&uid) {
                out.push(format!("/etc/passwd has {} with uid {uid}", f[0]));
            }
        }
    }
    out
}

pub(crate) fn uid_ranges(max_sandboxes: u64, held: u32, subuid: &str, passwd: &str) -> Check {
    let slots = crate::ids::SLOTS;
    let last = u64::from(UID_FIRST) + u64::from(slots) * u64::from(UID_RANGE) - 1;
    let clash = overlaps(subuid, passwd);
    if !clash.is_empty() {
        return check(
            "uid-ranges",
            Verdict::Missing,
            format!("sandbox ids {UID_FIRST}–{last} are not sandlot's alone: {}", clash.join("; ")),
            format!("move those ids below {UID_FIRST} (usermod, or edit /etc/subuid)"),
        );
    }
    let free = slots.saturating_sub(held);
    let found = format!(
        "{free} of {slots} ranges of {UID_RANGE} ids free (host ids {UID_FIRST}–{last}, claimed per sandbox under {}; \
         /etc/subuid is not used and does not overlap)",
        crate::ids::SLOT_DIR
    );
    if free == 0 {
        check("uid-ranges", Verdict::Missing, found, "stop the other sandlot daemons on this host")
    } else if u64::from(free) < max_sandboxes {
        check(
            "uid-ranges",
            Verdict::Degraded,
            format!("{found}: fewer than --max-sandboxes {max_sandboxes}"),
            format!("lower --max-sandboxes to {free}, or stop other sandlot daemons on this host"),
        )
    } else {
        ok("uid-ranges", found)
    }
}

/// The kernel's ceiling for `kernel.pid_max` on 64-bit (`PID_MAX_LIMIT`), where systemd sets it.
const PID_MAX_LIMIT: u64 = 4_194_304;

/// Share of pid_max sandboxes may hold together (as `sandlot-control`'s capacity ledger counts it).
const PIDS_SHARE: (u64, u64) = (3, 4);

pub(crate) fn pids(opts: &Options, pid_max: u64) -> Check {
    let per = opts.default_pids + crate::cgroup::SUPERVISOR_PIDS;
    let share = pid_max * PIDS_SHARE.0 / PIDS_SHARE.1;
    let fit = share / per.max(1);
    let found = format!(
        "kernel.pid_max = {pid_max}: room for {fit} sandboxes of --default-pids {} (+{} for each supervisor) in \
         three quarters of it; --max-sandboxes is {}",
        opts.default_pids,
        crate::cgroup::SUPERVISOR_PIDS,
        opts.max_sandboxes
    );
    let needed = (opts.max_sandboxes * per * PIDS_SHARE.1).div_ceil(PIDS_SHARE.0);
    // systemd sets pid_max to the kernel's ceiling on 64-bit hosts: then only fewer pids per sandbox help.
    let more = if pid_max < PID_MAX_LIMIT {
        let want = needed.max(pid_max + 1).min(PID_MAX_LIMIT);
        format!(
            "`sysctl -w kernel.pid_max={want}` (and in /etc/sysctl.d/ to keep it) or lower --default-pids; or set \
             --max-sandboxes {fit} to match"
        )
    } else {
        format!("lower --default-pids (pid_max is at the kernel's ceiling); or set --max-sandboxes {fit} to match")
    };
    within_capacity("pid-max", fit, opts.max_sandboxes, found, more)
}

/// The verdict of a host resource that admission control divides among sandboxes: fewer sandboxes fit
/// than `--max-sandboxes` allows is how most hosts run (past `fit`, creates are refused with `429
/// server_full`: no sandbox is starved), so it is only noted; not even one fitting is missing.
fn within_capacity(name: &'static str, fit: u64, max_sandboxes: u64, found: String, more: String) -> Check {
    if fit >= max_sandboxes {
        ok(name, found)
    } else if fit >= 1 {
        ok(name, format!("{found}; creates past {fit} running sandboxes get 429 server_full (to allow more: {more})"))
    } else {
        check(name, Verdict::Missing, found, more)
    }
}

pub(crate) fn memory(opts: &Options, memory_mb: u64) -> Check {
    let capacity = (memory_mb as f64 * opts.overcommit) as u64;
    let fit = capacity / opts.default_memory_mb.max(1);
    let found = format!(
        "{memory_mb} MiB × --overcommit {}: room for {fit} sandboxes of --default-memory-mb {}; --max-sandboxes is {}",
        opts.overcommit, opts.default_memory_mb, opts.max_sandboxes
    );
    let more = if fit >= 1 {
        format!("raise --overcommit (limits are ceilings) or lower --default-memory-mb; or set --max-sandboxes {fit} to match")
    } else {
        "lower --default-memory-mb, or raise --overcommit (limits are ceilings)".to_string()
    };
    within_capacity("memory", fit, opts.max_sandboxes, found, more)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DefenceLayers;

    #[test]
    fn kernel_versions_parse_and_5_11_is_the_floor() {
        assert_eq!(kernel_version("6.1.0-57-amd64"), Some((6, 1)));
        assert_eq!(kernel_version("6.18.44-fc-v1045\n"), Some((6, 18)));
        assert_eq!(kernel_version("5.10.0-28-amd64"), Some((5, 10)));
        assert_eq!(kernel_version("garbage"), None);
        assert_eq!(kernel("6.1.0-57-amd64\n").verdict, Verdict::Ok);
        assert_eq!(kernel("5.11.0").verdict, Verdict::Ok);
        let old = kernel("5.10.0-28-amd64");
        assert_eq!(old.verdict, Verdict::Missing);
        assert!(old.fix.contains("5.11"), "{old:?}");
    }

    struct Have(&'static [&'static str]);
    impl ProgramLookup for Have {
        fn has(&self, name: &str) -> bool {
            self.0.contains(&name)
        }
    }

    #[test]
    fn btrfs_needs_progs_and_the_filesystem_unless_disk_quotas_are_off() {
        let none = Modules { available: vec![], builtin: vec![] };
        let progs = Have(&["mkfs.btrfs", "btrfs"]);
        assert_eq!(btrfs(true, "nodev\toverlay\n\tbtrfs\n", &none, &progs).verdict, Verdict::Ok);
        let no_progs = btrfs(true, "\tbtrfs\n", &none, &Have(&[]));
        assert_eq!(no_progs.verdict, Verdict::Missing);
        assert!(no_progs.fix.contains("btrfs-progs"));
        assert_eq!(btrfs(true, "\text4\n", &none, &progs).verdict, Verdict::Missing);
        let module =
            Modules { available: Modules::names("kernel/fs/btrfs/btrfs.ko.xz: kernel/lib/zstd.ko\n"), builtin: vec![] };
        assert_eq!(btrfs(true, "\text4\n", &module, &progs).verdict, Verdict::Ok);
        assert_eq!(btrfs(false, "", &none, &Have(&[])).verdict, Verdict::Degraded);
    }

    #[test]
    fn loop_devices_are_required_only_with_disk_quotas() {
        let none = Modules { available: vec![], builtin: vec![] };
        assert_eq!(loop_devices(true, true, &none).verdict, Verdict::Ok);
        let absent = loop_devices(true, false, &none);
        assert_eq!(absent.verdict, Verdict::Missing);
        assert!(absent.fix.contains("--no-disk-quota"));
        let module = Modules { available: Modules::names("kernel/drivers/block/loop.ko:\n"), builtin: vec![] };
        assert_eq!(loop_devices(true, false, &module).verdict, Verdict::Ok, "serve loads it");
        assert_eq!(loop_devices(false, false, &none).verdict, Verdict::Ok);
    }

    #[test]
    fn uid_ranges_clash_with_subuid_or_run_short() {
        assert_eq!(uid_ranges(256, 0, "alice:100000:65536\n", "root:x:0:0::/root:/bin/sh\n").verdict, Verdict::Ok);
        let clash = uid_ranges(256, 0, "bob:268500000:65536\n", "");
        assert_eq!(clash.verdict, Verdict::Missing);
        assert!(clash.found.contains("/etc/subuid gives bob"), "{clash:?}");
        assert_eq!(uid_ranges(256, 0, "", "svc:x:300000000:1::/:/bin/false\n").verdict, Verdict::Missing);
        assert_eq!(uid_ranges(256, 4000, "", "").verdict, Verdict::Degraded);
        assert_eq!(uid_ranges(256, 4096, "", "").verdict, Verdict::Missing);
    }

    fn opts(max_sandboxes: u64) -> Options {
        Options {
            state_dir: PathBuf::from("/nonexistent"),
            disk_quota: true,
            layers: DefenceLayers::default(),
            max_sandboxes,
            default_memory_mb: 512,
            default_pids: 256,
            overcommit: 1.5,
            proc_self_cgroup: None,
        }
    }

    #[test]
    fn pid_max_and_memory_against_max_sandboxes_times_the_defaults() {
        // 32768 × 3/4 = 24576 pids; 416 per default sandbox: 59 fit.
        // Fewer than --max-sandboxes fit: admission control refuses the rest (noted, not degraded).
        let p = pids(&opts(256), 32768);
        assert_eq!(p.verdict, Verdict::Ok);
        assert!(p.found.contains("room for 59 sandboxes"), "{p:?}");
        assert!(p.found.contains("past 59 running sandboxes get 429"), "{p:?}");
        assert!(p.found.contains("kernel.pid_max=141995"), "{p:?}");
        let all = pids(&opts(59), 32768);
        assert_eq!(all.verdict, Verdict::Ok);
        assert!(!all.found.contains("429"), "{all:?}");
        // systemd's pid_max, the kernel's ceiling: room for all, and nothing to raise (this panicked).
        let ceiling = pids(&opts(256), PID_MAX_LIMIT);
        assert_eq!(ceiling.verdict, Verdict::Ok);
        assert!(ceiling.found.contains("room for 7561 sandboxes"), "{ceiling:?}");
        let many = Options { default_pids: 65_536, ..opts(256) };
        let tight = pids(&many, PID_MAX_LIMIT);
        assert_eq!(tight.verdict, Verdict::Ok);
        assert!(tight.found.contains("lower --default-pids (pid_max is at the kernel's ceiling)"), "{tight:?}");
        assert!(!tight.found.contains("sysctl"), "{tight:?}");
        // Not one default sandbox fits: nothing could run.
        let none = pids(&opts(256), 400);
        assert_eq!(none.verdict, Verdict::Missing);
        assert!(none.fix.contains("kernel.pid_max="), "{none:?}");
        // 24104 MiB × 1.5 / 512 = 70.
        let m = memory(&opts(256), 24104);
        assert_eq!(m.verdict, Verdict::Ok);
        assert!(m.found.contains("set --max-sandboxes 70 to match"), "{m:?}");
        assert_eq!(memory(&opts(70), 24104).verdict, Verdict::Ok);
        assert_eq!(memory(&opts(70), 300).verdict, Verdict::Missing);
    }
}
