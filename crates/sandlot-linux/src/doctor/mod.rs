//! `sandlot doctor`: what this host offers of what the daemon uses, one typed [`Check`] per feature.
//!
//! Read-only: every check reads /proc, /sys or /etc, except three probes that must try the real thing,
//! each undone before it returns: creating a user namespace and mounting overlayfs inside one (both in a
//! forked child whose namespaces vanish when it exits; the overlay's four empty directories are removed
//! after), and loading the socket-lookup BPF program (dropped at once, attached to nothing).
//!
//! A feature the engine cannot work without is [`Verdict::Missing`] when absent, and `sandlot serve`
//! refuses to start; one whose absence only weakens a sandbox or the server's capacity is
//! [`Verdict::Degraded`], and serve starts with a warning (and lists it in `/healthz`). Which is
//! which follows what the engine does without it:
//!
//! | feature | absent, the engine… | verdict |
//! |---|---|---|
//! | root, Linux ≥ 5.11, user namespaces, overlayfs in a user namespace | cannot create any sandbox | missing |
//! | cgroup memory + pids (v1) / memory, pids, cpu delegated (v2), a cgroup of its own (v2) | has no limits, or refuses at start (v2) | missing |
//! | cgroup cpu, freezer (v1) | no CPU limit; `pause` fails | degraded |
//! | seccomp filter mode | every sandbox fails at its supervisor's start | missing (degraded when switched off by `--insecure-disable-layer seccomp`) |
//! | Landlock | runs sandboxes without that layer (`container::enter` warns) | degraded |
//! | BPF sk_lookup | every sandbox fails at its network set-up | missing |
//! | btrfs, btrfs-progs, loop devices | cannot mount the layers volume | missing (a module serve loads itself, `kmod`, counts as there; degraded with `--no-disk-quota`: no disk limit) |
//! | free uid ranges, sandlot's alone | cannot claim a slot (`ids::claim`); shares host ids with a user or its `/etc/subuid` range | missing at none free or on overlap, degraded below `--max-sandboxes` |
//! | pid_max, memory | refuses creates past the capacity ledger | degraded when `--max-sandboxes` default sandboxes do not fit |

mod cgroups;
mod host;
mod probes;

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::DefenceLayers;

/// How far the host meets one requirement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Present and usable.
    Ok,
    /// Absent or limited; `sandlot serve` runs without it, weaker or smaller, and says so.
    Degraded,
    /// Absent; `sandlot serve` refuses to start.
    Missing,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Degraded => "degraded",
            Verdict::Missing => "missing",
        }
    }
}

/// One line of the doctor's table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Short stable name (`kernel`, `cgroup-placement`, `landlock`…), as `/healthz` lists it.
    pub name: &'static str,
    /// The verdict.
    pub verdict: Verdict,
    /// What was found.
    pub found: String,
    /// What to do about it (a sysctl, a module, a systemd property, a package); empty when ok.
    pub fix: String,
}

fn check(name: &'static str, verdict: Verdict, found: impl Into<String>, fix: impl Into<String>) -> Check {
    Check { name, verdict, found: found.into(), fix: fix.into() }
}

fn ok(name: &'static str, found: impl Into<String>) -> Check {
    check(name, Verdict::Ok, found, "")
}

/// What changes the requirements: the options of `sandlot serve` that matter here.
#[derive(Debug, Clone)]
pub struct Options {
    /// The state directory (the overlay probe runs on its filesystem when it exists).
    pub state_dir: PathBuf,
    /// Whether writable layers get a size limit (the btrfs volume); `false` with `--no-disk-quota`.
    pub disk_quota: bool,
    /// Defence layers in force (`--insecure-disable-layer` switches them off).
    pub layers: DefenceLayers,
    /// `--max-sandboxes`.
    pub max_sandboxes: u64,
    /// `--default-memory-mb`.
    pub default_memory_mb: u64,
    /// `--default-pids`.
    pub default_pids: u64,
    /// `--overcommit`.
    pub overcommit: f64,
    /// TESTING ONLY: read the process's cgroup membership from this file instead of /proc/self/cgroup.
    pub proc_self_cgroup: Option<PathBuf>,
}

/// Every check, in the order of the table.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// Whether nothing required is missing (`sandlot serve` would start).
    pub fn ready(&self) -> bool {
        !self.checks.iter().any(|c| c.verdict == Verdict::Missing)
    }

    /// The checks with verdict `v`.
    pub fn with(&self, v: Verdict) -> Vec<&Check> {
        self.checks.iter().filter(|c| c.verdict == v).collect()
    }
}

/// The table `sandlot doctor` prints, one line per check: verdict, name, what was found, what to do.
pub fn table(checks: &[&Check]) -> String {
    let name_w = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let fix =
            if c.fix.is_empty() { String::new() } else { format!("\n{:>w$}  → {}", "", c.fix, w = 8 + name_w + 2) };
        out.push_str(&format!("{:<8}  {:<name_w$}  {}{fix}\n", c.verdict.word(), c.name, c.found));
    }
    out
}

/// Runs every check on this host.
pub fn examine(opts: &Options) -> Report {
    let root = crate::running_as_root();
    let mut checks = vec![if root {
        ok("root", "running as root")
    } else {
        check(
            "root",
            Verdict::Missing,
            format!("running as uid {}", nix::unistd::geteuid()),
            "run it as root (`sudo sandlot serve`; `sudo sandlot doctor` for the checks that need root)",
        )
    }];
    checks.push(host::kernel(&read("/proc/sys/kernel/osrelease").unwrap_or_default()));
    let proc_cgroup_path = opts.proc_self_cgroup.clone().unwrap_or_else(|| PathBuf::from("/proc/self/cgroup"));
    checks.extend(cgroups::cgroups(
        &read(&proc_cgroup_path).unwrap_or_default(),
        &read("/proc/self/mountinfo").unwrap_or_default(),
        std::process::id(),
        &cgroups::Cgroupfs,
    ));
    checks.push(probes::user_namespaces());
    let release = read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let modules = host::Modules::of(release.trim());
    checks.push(probes::overlay_in_userns(&opts.state_dir, &modules));
    checks.push(probes::landlock(opts.layers.landlock, crate::landlock::abi()));
    checks.push(probes::seccomp(opts.layers.seccomp));
    checks.push(probes::sk_lookup(root));
    let filesystems = read("/proc/filesystems").unwrap_or_default();
    checks.push(host::btrfs(opts.disk_quota, &filesystems, &modules, &host::Programs));
    checks.push(host::loop_devices(opts.disk_quota, Path::new("/dev/loop-control").exists(), &modules));
    let (subuid, passwd) = (read("/etc/subuid").unwrap_or_default(), read("/etc/passwd").unwrap_or_default());
    checks.push(host::uid_ranges(opts.max_sandboxes, host::held_slots(), &subuid, &passwd));
    let pid_max = read("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    checks.push(host::pids(opts, pid_max));
    checks.push(host::memory(opts, crate::host_memory_bytes().unwrap_or(0) >> 20));
    Report { checks }
}

fn read(path: impl AsRef<Path>) -> io::Result<String> {
    fs::read_to_string(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_aligns_names_and_puts_the_fix_under_its_line() {
        let a = ok("kernel", "Linux 6.1");
        let b = check("cgroup-placement", Verdict::Missing, "shared", "do this");
        let t = table(&[&a, &b]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "ok        kernel            Linux 6.1");
        assert_eq!(lines[1], "missing   cgroup-placement  shared");
        assert_eq!(lines[2], "                            → do this");
    }
}
