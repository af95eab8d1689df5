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
//! | root, user namespaces, overlayfs in a user namespace | cannot create any sandbox | missing |
//! | cgroup memory + pids (v1) / memory, pids, cpu delegated (v2), a cgroup of its own (v2) | has no limits, or refuses at start (v2) | missing |
//! | cgroup cpu, freezer (v1) | no CPU limit; `pause` fails | degraded |
//! | seccomp filter mode | every sandbox fails at its supervisor's start | missing (degraded when switched off by `--insecure-disable-layer seccomp`) |
//! | Landlock | runs sandboxes without that layer (`container::enter` warns) | degraded |
//! | BPF sk_lookup | every sandbox fails at its network set-up | missing |
//! | btrfs, btrfs-progs, loop devices | cannot mount the layers volume | missing (degraded with `--no-disk-quota`: no disk limit) |
//! | free uid ranges | cannot claim a slot (`ids::claim`) | missing at none free, degraded below `--max-sandboxes` |
//! | pid_max, memory | refuses creates past the capacity ledger | degraded when `--max-sandboxes` default sandboxes do not fit |

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::cgroup::{join_cgroup, own_path, parse_mountinfo, MountEntry};
use crate::{DefenceLayers, UID_FIRST, UID_RANGE};

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
    checks.push(kernel(&read("/proc/sys/kernel/osrelease").unwrap_or_default()));
    let proc_cgroup_path = opts.proc_self_cgroup.clone().unwrap_or_else(|| PathBuf::from("/proc/self/cgroup"));
    let host = Cgroupfs;
    checks.extend(cgroups(
        &read(&proc_cgroup_path).unwrap_or_default(),
        &read("/proc/self/mountinfo").unwrap_or_default(),
        std::process::id(),
        &host,
    ));
    checks.push(user_namespaces());
    checks.push(overlay_in_userns(&opts.state_dir));
    checks.push(landlock(opts.layers.landlock, crate::landlock::abi()));
    checks.push(seccomp(opts.layers.seccomp));
    checks.push(sk_lookup(root));
    let release = read("/proc/sys/kernel/osrelease").unwrap_or_default();
    let modules = Modules::of(release.trim());
    checks.push(btrfs(opts.disk_quota, &read("/proc/filesystems").unwrap_or_default(), &modules, &Programs));
    checks.push(loop_devices(opts.disk_quota, Path::new("/dev/loop-control").exists(), &modules));
    checks.push(uid_ranges(
        opts.max_sandboxes,
        held_slots(),
        &read("/etc/subuid").unwrap_or_default(),
        &read("/etc/passwd").unwrap_or_default(),
    ));
    let pid_max = read("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    checks.push(pids(opts, pid_max));
    checks.push(memory(opts, crate::host_memory_bytes().unwrap_or(0) >> 20));
    Report { checks }
}

fn read(path: impl AsRef<Path>) -> io::Result<String> {
    fs::read_to_string(path)
}

// ---------------------------------------------------------------------------------------------------
// Kernel

/// Oldest kernel the engine can run on: overlayfs in a user namespace (5.11); sk_lookup is 5.9.
const MIN_KERNEL: (u32, u32) = (5, 11);

/// `major.minor` of a kernel release string (`6.1.0-57-amd64`, `6.18.44-fc-v1045`).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(|c: char| !c.is_ascii_digit());
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

fn kernel(release: &str) -> Check {
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

// ---------------------------------------------------------------------------------------------------
// cgroups

/// What the cgroup checks read from cgroupfs, so unit tests can answer for a host they describe.
pub(crate) trait CgroupRead {
    /// The contents of a cgroupfs file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Whether the daemon may create directories in `dir`.
    fn writable(&self, dir: &Path) -> bool;
}

struct Cgroupfs;

impl CgroupRead for Cgroupfs {
    fn read(&self, path: &Path) -> io::Result<String> {
        fs::read_to_string(path)
    }

    fn writable(&self, dir: &Path) -> bool {
        // access(2) honours read-only mounts (EROFS), the usual way a container withholds cgroups.
        dir.is_dir() && nix::unistd::access(dir, nix::unistd::AccessFlags::W_OK).is_ok()
    }
}

/// The v1 controllers the engine uses, in the order it looks for them (see `cgroup::Cgroups::detect`).
const V1_CONTROLLERS: [&str; 4] = ["memory", "pids", "cpu", "freezer"];
/// The v2 controllers the daemon enables for its sandboxes.
const V2_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];
/// The leaf a v2 daemon moves itself into (its parent is then the daemon's root cgroup).
const V2_DAEMON_LEAF: &str = "sandlot-daemon";

const DELEGATE_FIX: &str = "give sandlot a cgroup of its own with the controllers delegated: `systemctl start \
     sandlot` (packaging/sandlot.service, Delegate=yes), or `systemd-run -p Delegate=yes sandlot serve …`";

/// The three cgroup checks: mode, controllers, placement. Which hierarchy is chosen mirrors
/// `cgroup::Cgroups::detect`: v1 when the memory controller is mounted as v1, else cgroup2.
pub(crate) fn cgroups(proc_cgroup: &str, mountinfo: &str, own_pid: u32, fs: &dyn CgroupRead) -> Vec<Check> {
    let mounts = parse_mountinfo(mountinfo);
    let v1: Vec<(&str, String, PathBuf)> = V1_CONTROLLERS
        .iter()
        .filter_map(|ctrl| {
            let mnt = mounts.iter().find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == *ctrl))?;
            let path = own_path(proc_cgroup, |ctrls| ctrls.split(',').any(|c| c == *ctrl))?;
            let dir = join_cgroup(&mnt.point, &path, &mnt.root);
            Some((*ctrl, path, dir))
        })
        .collect();
    let cgroup2 = mounts.iter().find(|m| m.fstype == "cgroup2");
    if v1.iter().any(|(c, _, _)| *c == "memory") {
        return cgroups_v1(&v1, cgroup2, fs);
    }
    let Some(mnt) = cgroup2 else {
        return vec![check(
            "cgroup-mode",
            Verdict::Missing,
            "neither cgroup2 nor the v1 memory hierarchy is mounted",
            "mount cgroup2: `mount -t cgroup2 cgroup2 /sys/fs/cgroup` (systemd does it at boot)",
        )];
    };
    let Some(own) = own_path(proc_cgroup, |ctrls| ctrls.is_empty()) else {
        return vec![check(
            "cgroup-mode",
            Verdict::Missing,
            "cgroup2 is mounted but /proc/self/cgroup has no `0::` line",
            "mount cgroup2 at /sys/fs/cgroup and run sandlot in the host's cgroup namespace",
        )];
    };
    let v1_mounts: Vec<&str> = mounts
        .iter()
        .filter(|m| m.fstype == "cgroup")
        .flat_map(|m| m.options.split(',').filter(|o| V1_CONTROLLERS.contains(o)))
        .collect();
    let mode = if v1_mounts.is_empty() {
        format!("pure v2 (cgroup2 at {})", mnt.point.display())
    } else {
        format!("v2 (cgroup2 at {}; {} on v1, unused)", mnt.point.display(), v1_mounts.join(", "))
    };
    let mut out = vec![ok("cgroup-mode", mode)];
    out.extend(cgroups_v2(mnt, &own, own_pid, fs));
    out
}

fn cgroups_v1(v1: &[(&str, String, PathBuf)], cgroup2: Option<&MountEntry>, fs: &dyn CgroupRead) -> Vec<Check> {
    let names: Vec<&str> = v1.iter().map(|(c, _, _)| *c).collect();
    let mode = match cgroup2 {
        Some(m) => format!("v1 hybrid ({} on v1; cgroup2 at {} unused)", names.join(", "), m.point.display()),
        None => format!("v1 ({})", names.join(", ")),
    };
    let mut out = vec![ok("cgroup-mode", mode)];
    let lacks = |c: &str| !names.contains(&c);
    let mount_fix = |c: &[&str]| {
        c.iter()
            .map(|c| format!("`mkdir -p /sys/fs/cgroup/{c} && mount -t cgroup -o {c} cgroup /sys/fs/cgroup/{c}`"))
            .collect::<Vec<_>>()
            .join(" and ")
    };
    out.push(if lacks("pids") {
        check(
            "cgroup-controllers",
            Verdict::Missing,
            format!("{} mounted; no pids: a sandbox's fork bomb would reach the host's pid_max", names.join(", ")),
            mount_fix(&["pids"]),
        )
    } else {
        let absent: Vec<&str> = ["cpu", "freezer"].into_iter().filter(|c| lacks(c)).collect();
        if absent.is_empty() {
            ok("cgroup-controllers", names.join(", "))
        } else {
            let what: Vec<&str> = absent
                .iter()
                .map(|c| if *c == "cpu" { "no cpu: sandboxes get no CPU limit" } else { "no freezer: pause fails" })
                .collect();
            check(
                "cgroup-controllers",
                Verdict::Degraded,
                format!("{}; {}", names.join(", "), what.join("; ")),
                mount_fix(&absent),
            )
        }
    });
    let unusable: Vec<String> = v1
        .iter()
        .filter(|(_, _, dir)| !fs.writable(dir))
        .map(|(c, _, dir)| format!("{c} ({})", dir.display()))
        .collect();
    out.push(if unusable.is_empty() {
        // Group the controllers by the cgroup the daemon is in for each.
        let mut by_path: Vec<(String, Vec<&str>)> = Vec::new();
        for (c, path, _) in v1 {
            match by_path.iter_mut().find(|(p, _)| p == path) {
                Some((_, cs)) => cs.push(c),
                None => by_path.push((path.clone(), vec![c])),
            }
        }
        let places: Vec<String> = by_path.iter().map(|(p, cs)| format!("{p} ({})", cs.join(", "))).collect();
        ok("cgroup-placement", format!("sandbox cgroups go below {}", places.join(", ")))
    } else {
        check(
            "cgroup-placement",
            Verdict::Missing,
            format!("cannot create cgroups in {}", unusable.join(", ")),
            "run sandlot where cgroupfs is writable (in a container: a private cgroup namespace and a writable /sys/fs/cgroup)",
        )
    });
    out
}

fn cgroups_v2(mnt: &MountEntry, own: &str, own_pid: u32, fs: &dyn CgroupRead) -> Vec<Check> {
    let own_dir = join_cgroup(&mnt.point, own, &mnt.root);
    // The lead's start-up rule (cgroup.rs): a daemon already in its `sandlot-daemon` leaf uses the
    // parent; one in the root cgroup stays there; any other cgroup must be its alone.
    let (root, started_in_leaf) = match own.rsplit_once('/') {
        Some((parent, V2_DAEMON_LEAF)) => {
            let parent = if parent.is_empty() { "/" } else { parent };
            (join_cgroup(&mnt.point, parent, &mnt.root), true)
        }
        _ => (own_dir.clone(), false),
    };
    let shown = |dir: &Path| dir.strip_prefix(&mnt.point).map(|p| format!("/{}", p.display())).unwrap_or_default();
    let controllers_file = root.join("cgroup.controllers");
    let controllers = match fs.read(&controllers_file) {
        Ok(s) => check_v2_controllers(&s, &shown(&root)),
        Err(e) => check(
            "cgroup-controllers",
            Verdict::Missing,
            format!("cannot read {}: {e}", controllers_file.display()),
            DELEGATE_FIX,
        ),
    };
    let placement = if started_in_leaf || own == "/" {
        if fs.writable(&root) {
            ok("cgroup-placement", format!("sandbox cgroups go below {}", shown(&root)))
        } else {
            check("cgroup-placement", Verdict::Missing, format!("{} is not writable", root.display()), DELEGATE_FIX)
        }
    } else {
        let procs_file = own_dir.join("cgroup.procs");
        match fs.read(&procs_file) {
            Err(e) => check(
                "cgroup-placement",
                Verdict::Missing,
                format!("cannot read {}: {e}", procs_file.display()),
                DELEGATE_FIX,
            ),
            Ok(procs) => {
                let others: Vec<&str> =
                    procs.lines().map(str::trim).filter(|p| !p.is_empty() && *p != own_pid.to_string()).collect();
                if !others.is_empty() {
                    let shown_pids: Vec<&str> = others.iter().take(5).copied().collect();
                    let more = if others.len() > 5 { ", …" } else { "" };
                    check(
                        "cgroup-placement",
                        Verdict::Missing,
                        format!(
                            "{own} also holds {} other process{} (pid {}{more}): a daemon started here refuses \
                             rather than move them",
                            others.len(),
                            if others.len() == 1 { "" } else { "es" },
                            shown_pids.join(", ")
                        ),
                        DELEGATE_FIX,
                    )
                } else if !fs.writable(&own_dir) {
                    check("cgroup-placement", Verdict::Missing, format!("{own} is not writable"), DELEGATE_FIX)
                } else {
                    ok(
                        "cgroup-placement",
                        format!("alone in {own}: serve moves itself to {own}/{V2_DAEMON_LEAF}, sandboxes go beside it"),
                    )
                }
            }
        }
    };
    vec![controllers, placement]
}

fn check_v2_controllers(available: &str, cgroup: &str) -> Check {
    let have: Vec<&str> = available.split_whitespace().collect();
    let lacking: Vec<&str> = V2_CONTROLLERS.into_iter().filter(|c| !have.contains(c)).collect();
    if lacking.is_empty() {
        ok("cgroup-controllers", format!("{} delegated to {cgroup}", V2_CONTROLLERS.join(", ")))
    } else {
        check(
            "cgroup-controllers",
            Verdict::Missing,
            if have.is_empty() {
                format!("{cgroup} has no controllers: {} not delegated", lacking.join(", "))
            } else {
                format!("{cgroup} has {}; {} not delegated", have.join(" "), lacking.join(", "))
            },
            DELEGATE_FIX,
        )
    }
}

// ---------------------------------------------------------------------------------------------------
// Namespaces, overlayfs, Landlock, seccomp, BPF

fn user_namespaces() -> Check {
    let max = read("/proc/sys/user/max_user_namespaces").ok().map(|s| s.trim().to_string());
    let mut notes = Vec::new();
    if let Some(max) = &max {
        notes.push(format!("user.max_user_namespaces = {max}"));
    }
    // These two restrict only unprivileged users; the daemon runs as root. Shown, since they are the
    // usual suspects on Debian (unprivileged_userns_clone) and Ubuntu 24.04 (AppArmor).
    for (file, name) in [
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "kernel.apparmor_restrict_unprivileged_userns"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone"),
    ] {
        if let Ok(v) = read(file) {
            notes.push(format!("{name} = {} (binds only unprivileged users)", v.trim()));
        }
    }
    if max.as_deref() == Some("0") {
        return check(
            "userns",
            Verdict::Missing,
            notes.join("; "),
            "`sysctl -w user.max_user_namespaces=15000` (and the same in /etc/sysctl.d/ to keep it)",
        );
    }
    match probe_in_child(None) {
        Ok(()) => ok("userns", format!("a user namespace can be created; {}", notes.join("; "))),
        Err(e) => check(
            "userns",
            Verdict::Missing,
            format!("creating a user namespace failed: {e}; {}", notes.join("; ")),
            "enable user namespaces (CONFIG_USER_NS=y; in a container, a seccomp profile that allows clone/unshare of namespaces)",
        ),
    }
}

/// Mounts an overlay with `userxattr` in a fresh user and mount namespace, as every sandbox's root is,
/// on the state directory's filesystem (or the temporary directory's if it does not exist yet).
fn overlay_in_userns(state_dir: &Path) -> Check {
    let base = if state_dir.is_dir() { state_dir.to_path_buf() } else { std::env::temp_dir() };
    let dir = base.join(format!(".sandlot-doctor-{}", std::process::id()));
    let result = (|| -> Result<(), String> {
        for d in ["lower", "upper", "work", "merged"] {
            fs::create_dir_all(dir.join(d)).map_err(|e| format!("creating {}: {e}", dir.join(d).display()))?;
        }
        let c = |s: String| CString::new(s).map_err(|_| "a path with a NUL byte".to_string());
        let opts = c(format!(
            "lowerdir={},upperdir={},workdir={},userxattr",
            dir.join("lower").display(),
            dir.join("upper").display(),
            dir.join("work").display()
        ))?;
        let target = c(dir.join("merged").display().to_string())?;
        probe_in_child(Some((&target, &opts))).map_err(|e| e.to_string())
    })();
    let _ = fs::remove_dir_all(&dir);
    let fstype = fs_type(&base);
    match result {
        Ok(()) => ok("overlay-userns", format!("overlayfs mounts in a user namespace (upper on {fstype})")),
        Err(e) => check(
            "overlay-userns",
            Verdict::Missing,
            format!("overlayfs in a user namespace, upper on {fstype} ({}): {e}", base.display()),
            if read("/proc/filesystems").is_ok_and(|f| f.contains("overlay")) {
                "boot Linux 5.11 or later; keep the state directory on ext4, xfs or btrfs (not on overlayfs or tmpfs before 6.6)"
            } else {
                "`modprobe overlay` (CONFIG_OVERLAY_FS)"
            },
        ),
    }
}

/// The filesystem type holding `path`, from mountinfo (longest matching mount point).
fn fs_type(path: &Path) -> String {
    let mounts = parse_mountinfo(&read("/proc/self/mountinfo").unwrap_or_default());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    mounts
        .iter()
        .filter(|m| path.starts_with(&m.point))
        .max_by_key(|m| m.point.as_os_str().len())
        .map(|m| m.fstype.clone())
        .unwrap_or_else(|| "an unknown filesystem".into())
}

/// A step of a child probe that failed, with its errno.
#[derive(Debug)]
struct ProbeError {
    step: &'static str,
    errno: i32,
}

impl std::fmt::Display for ProbeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, io::Error::from_raw_os_error(self.errno))
    }
}

const PROBE_STEPS: [&str; 6] = [
    "unshare(CLONE_NEWUSER | CLONE_NEWNS)",
    "writing /proc/self/setgroups",
    "writing /proc/self/uid_map",
    "writing /proc/self/gid_map",
    "making / private",
    "mount -t overlay",
];

/// In a forked child: a new user and mount namespace (root mapped to this process's uid), and, with
/// `overlay` = (target, options), an overlay mount there. The child exits at once, taking both
/// namespaces and the mount with it.
fn probe_in_child(overlay: Option<(&CString, &CString)>) -> Result<(), ProbeError> {
    // Everything the child needs is prepared here: between fork and _exit it only makes raw syscalls
    // (a multi-threaded parent's locks, e.g. the allocator's, may be held by a thread that is gone).
    let uid_line = CString::new(format!("0 {} 1", nix::unistd::geteuid())).unwrap_or_default();
    let gid_line = CString::new(format!("0 {} 1", nix::unistd::getegid())).unwrap_or_default();
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into a valid array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(ProbeError { step: "pipe2", errno: errno() });
    }
    let (rd, wr) = (fds[0], fds[1]);
    // SAFETY: the child runs only the async-signal-safe calls of `child_probe`, then _exit.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = errno();
        // SAFETY: closing the pipe we just made.
        unsafe {
            libc::close(rd);
            libc::close(wr);
        }
        return Err(ProbeError { step: "fork", errno: e });
    }
    if pid == 0 {
        // SAFETY: in the child; see `child_probe`.
        unsafe {
            let failure = child_probe(&uid_line, &gid_line, overlay);
            let code = match failure {
                None => 0,
                Some(f) => {
                    libc::write(wr, (&f as *const [i32; 2]).cast(), std::mem::size_of::<[i32; 2]>());
                    1
                }
            };
            libc::_exit(code);
        }
    }
    // SAFETY: closing our copy of the write end, so the read below ends when the child exits.
    unsafe { libc::close(wr) };
    let mut failure = [0i32; 2];
    // SAFETY: reading at most 8 bytes into an 8-byte array from our pipe, then closing it.
    let n = unsafe {
        let n = libc::read(rd, failure.as_mut_ptr().cast(), std::mem::size_of::<[i32; 2]>());
        libc::close(rd);
        n
    };
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if n == std::mem::size_of::<[i32; 2]>() as isize {
        let step = PROBE_STEPS.get(failure[0] as usize).copied().unwrap_or("probe");
        return Err(ProbeError { step, errno: failure[1] });
    }
    if !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0) {
        return Err(ProbeError { step: "the probe's child died", errno: libc::ECHILD });
    }
    Ok(())
}

/// The child's side of [`probe_in_child`]: `None` on success, else (step index, errno).
///
/// # Safety
/// Call only in a freshly forked child; it makes raw syscalls on the given C strings.
unsafe fn child_probe(
    uid_line: &CString,
    gid_line: &CString,
    overlay: Option<(&CString, &CString)>,
) -> Option<[i32; 2]> {
    // SAFETY: raw syscalls on NUL-terminated strings that outlive them; nothing allocates.
    unsafe {
        let fail = |step: i32| Some([step, errno()]);
        if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS) != 0 {
            return fail(0);
        }
        // A user namespace alone is the user-namespace probe; the overlay probe goes on.
        let (target, opts) = overlay?;
        for (step, file, data) in [
            (1, c"/proc/self/setgroups", c"deny".as_ptr()),
            (2, c"/proc/self/uid_map", uid_line.as_ptr()),
            (3, c"/proc/self/gid_map", gid_line.as_ptr()),
        ] {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fail(step);
            }
            let len = libc::strlen(data);
            if libc::write(fd, data.cast(), len) != len as isize {
                return fail(step);
            }
            libc::close(fd);
        }
        if libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            std::ptr::null(),
        ) != 0
        {
            return fail(4);
        }
        if libc::mount(c"overlay".as_ptr(), target.as_ptr(), c"overlay".as_ptr(), 0, opts.as_ptr().cast()) != 0 {
            return fail(5);
        }
        None
    }
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn landlock(on: bool, abi: i64) -> Check {
    if !on {
        return check(
            "landlock",
            Verdict::Degraded,
            "switched off by --insecure-disable-layer landlock",
            "drop --insecure-disable-layer landlock (it exists for the escape suite only)",
        );
    }
    match abi {
        0 => check(
            "landlock",
            Verdict::Degraded,
            "not available: sandboxes run without the Landlock layer",
            "boot a kernel with CONFIG_SECURITY_LANDLOCK=y (Linux 5.13 or later) and landlock in lsm= \
             (e.g. lsm=landlock,lockdown,yama,apparmor,bpf)",
        ),
        1..=5 => ok(
            "landlock",
            format!(
                "ABI {abi}: files confined; signal and abstract-socket scoping need ABI 6 (Linux 6.12), the \
                 sandbox's pid and network namespaces separate those anyway"
            ),
        ),
        _ => ok("landlock", format!("ABI {abi}: files, signals and abstract sockets confined")),
    }
}

const SECCOMP_GET_ACTION_AVAIL: libc::c_ulong = 2;
/// The actions of the sandbox profile (sandlot-supervisor's `seccomp.rs`).
const SECCOMP_ACTIONS: [(u32, &str); 3] =
    [(0x8000_0000, "kill_process"), (0x0005_0000, "errno"), (0x7fff_0000, "allow")];

fn seccomp(on: bool) -> Check {
    if !on {
        return check(
            "seccomp",
            Verdict::Degraded,
            "switched off by --insecure-disable-layer seccomp",
            "drop --insecure-disable-layer seccomp (it exists for the escape suite only)",
        );
    }
    for (action, name) in SECCOMP_ACTIONS {
        // SAFETY: SECCOMP_GET_ACTION_AVAIL reads one u32 from a valid pointer and changes nothing.
        let rc = unsafe { libc::syscall(libc::SYS_seccomp, SECCOMP_GET_ACTION_AVAIL, 0, &action as *const u32) };
        if rc != 0 {
            return check(
                "seccomp",
                Verdict::Missing,
                format!("the filter action {name} is not available: {}", io::Error::last_os_error()),
                "boot a kernel with CONFIG_SECCOMP_FILTER=y (Linux 4.14 or later)",
            );
        }
    }
    let own = read("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim().to_string())));
    let note = if own.as_deref() == Some("2") {
        "; note: this process itself runs under a seccomp filter (a container runtime's?)"
    } else {
        ""
    };
    ok("seccomp", format!("filter mode, actions {}{note}", SECCOMP_ACTIONS.map(|(_, n)| n).join(", ")))
}

fn sk_lookup(root: bool) -> Check {
    if !root {
        return check(
            "sk-lookup",
            Verdict::Missing,
            "not checked: loading BPF needs root",
            "run `sudo sandlot doctor`",
        );
    }
    match crate::steer::probe() {
        Ok(()) => ok("sk-lookup", "the socket-lookup steering program loads"),
        Err(e) => check(
            "sk-lookup",
            Verdict::Missing,
            e.to_string(),
            "boot Linux 5.9 or later with CONFIG_BPF_SYSCALL=y; in a container, grant CAP_BPF and CAP_NET_ADMIN",
        ),
    }
}

// ---------------------------------------------------------------------------------------------------
// Disk: btrfs and loop devices

/// Which kernel modules can be loaded: the names listed in `/lib/modules/<release>/modules.dep` and
/// `modules.builtin`.
pub(crate) struct Modules {
    available: Vec<String>,
    builtin: Vec<String>,
}

impl Modules {
    fn of(release: &str) -> Modules {
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

    fn has(&self, name: &str) -> Option<&'static str> {
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

struct Programs;

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
        Some(how) => check(
            "loop",
            Verdict::Missing,
            format!("no /dev/loop-control; loop is {how}"),
            "`modprobe loop` (it creates /dev/loop-control), or pass --no-disk-quota",
        ),
        None => check(
            "loop",
            Verdict::Missing,
            "no /dev/loop-control and no loop module for this kernel (a container without devices?)",
            "`modprobe loop` on the host and pass /dev/loop-control and /dev/loop* in, or pass --no-disk-quota",
        ),
    }
}

// ---------------------------------------------------------------------------------------------------
// Host ids, pids, memory

/// Slots whose lock file is held now: slot files whose inode `/proc/locks` lists as flock'd.
fn held_slots() -> u32 {
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
    if fit >= opts.max_sandboxes {
        return ok("pid-max", found);
    }
    let want = (opts.max_sandboxes * per * PIDS_SHARE.1).div_ceil(PIDS_SHARE.0).clamp(pid_max + 1, 4_194_304);
    check(
        "pid-max",
        Verdict::Degraded,
        found,
        format!(
            "`sysctl -w kernel.pid_max={want}` (and in /etc/sysctl.d/ to keep it), or lower --max-sandboxes to {fit} \
             or --default-pids"
        ),
    )
}

pub(crate) fn memory(opts: &Options, memory_mb: u64) -> Check {
    let capacity = (memory_mb as f64 * opts.overcommit) as u64;
    let fit = capacity / opts.default_memory_mb.max(1);
    let found = format!(
        "{memory_mb} MiB × --overcommit {}: room for {fit} sandboxes of --default-memory-mb {}; --max-sandboxes is {}",
        opts.overcommit, opts.default_memory_mb, opts.max_sandboxes
    );
    if fit >= opts.max_sandboxes {
        ok("memory", found)
    } else {
        check(
            "memory",
            Verdict::Degraded,
            found,
            format!(
                "lower --max-sandboxes to {fit} or --default-memory-mb, or raise --overcommit (limits are ceilings)"
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A cgroupfs described by its files; every directory named in `writable` may be written.
    struct FakeCgroupfs {
        files: HashMap<PathBuf, String>,
        writable: Vec<PathBuf>,
    }

    impl CgroupRead for FakeCgroupfs {
        fn read(&self, path: &Path) -> io::Result<String> {
            self.files.get(path).cloned().ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn writable(&self, dir: &Path) -> bool {
            self.writable.iter().any(|w| w == dir)
        }
    }

    fn fake(files: &[(&str, &str)], writable: &[&str]) -> FakeCgroupfs {
        FakeCgroupfs {
            files: files.iter().map(|(p, s)| (PathBuf::from(p), s.to_string())).collect(),
            writable: writable.iter().map(PathBuf::from).collect(),
        }
    }

    fn by_name<'a>(checks: &'a [Check], name: &str) -> &'a Check {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name} in {checks:?}"))
    }

    // This machine's: memory, pids, cpu, freezer on v1, an empty cgroup2 at /sys/fs/cgroup/unified.
    const HYBRID_MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const HYBRID_CGROUP: &str =
        "9:name=systemd:/\n8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n2:cpuacct:/\n1:cpu:/\n0::/\n";
    // Debian 12 / systemd: one cgroup2 at /sys/fs/cgroup.
    const V2_MOUNTINFO: &str =
        "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n";

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

    #[test]
    fn this_hosts_v1_hybrid_is_ok_with_sandboxes_below_each_controllers_cgroup() {
        let fs = fake(
            &[],
            &[
                "/sys/fs/cgroup/memory/process_api/abc",
                "/sys/fs/cgroup/pids",
                "/sys/fs/cgroup/cpu",
                "/sys/fs/cgroup/freezer",
            ],
        );
        let checks = cgroups(HYBRID_CGROUP, HYBRID_MOUNTINFO, 42, &fs);
        let mode = by_name(&checks, "cgroup-mode");
        assert_eq!(mode.verdict, Verdict::Ok);
        assert!(mode.found.starts_with("v1 hybrid (memory, pids, cpu, freezer on v1"), "{mode:?}");
        assert_eq!(by_name(&checks, "cgroup-controllers").verdict, Verdict::Ok);
        let placement = by_name(&checks, "cgroup-placement");
        assert_eq!(placement.verdict, Verdict::Ok, "{placement:?}");
        assert!(
            placement.found.contains("/process_api/abc (memory)") && placement.found.contains("/ (pids, cpu, freezer)")
        );
    }

    #[test]
    fn v1_without_pids_is_missing_and_without_freezer_degraded() {
        let no_pids: String =
            HYBRID_MOUNTINFO.lines().filter(|l| !l.ends_with("rw,pids")).map(|l| format!("{l}\n")).collect();
        let fs = fake(&[], &["/sys/fs/cgroup/memory/process_api/abc", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/freezer"]);
        let c = cgroups(HYBRID_CGROUP, &no_pids, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Missing, "{ctrl:?}");
        assert!(ctrl.fix.contains("mount -t cgroup -o pids"), "{ctrl:?}");

        let no_freezer: String =
            HYBRID_MOUNTINFO.lines().filter(|l| !l.ends_with("rw,freezer")).map(|l| format!("{l}\n")).collect();
        let c = cgroups(HYBRID_CGROUP, &no_freezer, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Degraded, "{ctrl:?}");
        assert!(ctrl.found.contains("pause fails"), "{ctrl:?}");
    }

    #[test]
    fn v1_read_only_cgroupfs_is_missing() {
        let c = cgroups(HYBRID_CGROUP, HYBRID_MOUNTINFO, 42, &fake(&[], &[]));
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Missing);
        assert!(p.found.contains("/sys/fs/cgroup/memory/process_api/abc"), "{p:?}");
    }

    #[test]
    fn pure_v2_delegated_service_cgroup_alone_is_ok() {
        let own = "0::/system.slice/sandlot.service\n";
        let dir = "/sys/fs/cgroup/system.slice/sandlot.service";
        let fs = fake(
            &[
                (&format!("{dir}/cgroup.controllers"), "cpuset cpu io memory pids\n"),
                (&format!("{dir}/cgroup.procs"), "42\n"),
            ],
            &[dir],
        );
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        assert_eq!(by_name(&c, "cgroup-mode").found, "pure v2 (cgroup2 at /sys/fs/cgroup)");
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(
            (ctrl.verdict, ctrl.found.as_str()),
            (Verdict::Ok, "memory, pids, cpu delegated to /system.slice/sandlot.service")
        );
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Ok, "{p:?}");
        assert!(p.found.contains("sandlot.service/sandlot-daemon"), "{p:?}");
    }

    #[test]
    fn pure_v2_restarted_in_its_own_leaf_uses_the_parent() {
        let own = "0::/system.slice/sandlot.service/sandlot-daemon\n";
        let dir = "/sys/fs/cgroup/system.slice/sandlot.service";
        let fs = fake(&[(&format!("{dir}/cgroup.controllers"), "memory pids cpu\n")], &[dir]);
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        assert_eq!(by_name(&c, "cgroup-controllers").verdict, Verdict::Ok);
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(
            (p.verdict, p.found.as_str()),
            (Verdict::Ok, "sandbox cgroups go below /system.slice/sandlot.service")
        );
    }

    #[test]
    fn pure_v2_session_scope_shared_with_the_shell_is_missing_with_what_to_do() {
        // `sudo sandlot serve` from a login shell: the scope holds the shell and sudo too, and systemd
        // delegates no controllers to a session scope.
        let own = "0::/user.slice/user-1000.slice/session-2.scope\n";
        let dir = "/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope";
        let fs = fake(
            &[
                (&format!("{dir}/cgroup.controllers"), "memory pids\n"),
                (&format!("{dir}/cgroup.procs"), "811\n900\n42\n"),
            ],
            &[dir],
        );
        let c = cgroups(own, V2_MOUNTINFO, 42, &fs);
        let ctrl = by_name(&c, "cgroup-controllers");
        assert_eq!(ctrl.verdict, Verdict::Missing);
        assert_eq!(ctrl.found, "/user.slice/user-1000.slice/session-2.scope has memory pids; cpu not delegated");
        let p = by_name(&c, "cgroup-placement");
        assert_eq!(p.verdict, Verdict::Missing);
        assert!(p.found.contains("also holds 2 other processes (pid 811, 900)"), "{p:?}");
        assert!(p.fix.contains("Delegate=yes") && p.fix.contains("packaging/sandlot.service"), "{p:?}");
    }

    #[test]
    fn no_cgroup_hierarchy_at_all_is_missing() {
        let c = cgroups("0::/\n", "22 1 0:5 / /proc rw - proc proc rw\n", 42, &fake(&[], &[]));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].verdict, Verdict::Missing);
        assert!(c[0].fix.contains("mount -t cgroup2"));
    }

    #[test]
    fn landlock_absent_or_off_is_degraded_and_abi_2_is_ok() {
        assert_eq!(landlock(true, 0).verdict, Verdict::Degraded);
        assert_eq!(landlock(false, 6).verdict, Verdict::Degraded);
        let debian = landlock(true, 2);
        assert_eq!(debian.verdict, Verdict::Ok);
        assert!(debian.found.starts_with("ABI 2"));
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
        assert!(loop_devices(true, false, &module).fix.contains("modprobe loop"));
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
        let p = pids(&opts(256), 32768);
        assert_eq!(p.verdict, Verdict::Degraded);
        assert!(p.found.contains("room for 59 sandboxes"), "{p:?}");
        assert!(p.fix.contains("kernel.pid_max=141995"), "{p:?}");
        assert_eq!(pids(&opts(59), 32768).verdict, Verdict::Ok);
        // 24104 MiB × 1.5 / 512 = 70.
        let m = memory(&opts(256), 24104);
        assert_eq!(m.verdict, Verdict::Degraded);
        assert!(m.fix.contains("lower --max-sandboxes to 70"), "{m:?}");
        assert_eq!(memory(&opts(70), 24104).verdict, Verdict::Ok);
    }

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

    #[test]
    fn the_user_namespace_and_overlay_probes_leave_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("sandlot-doctor-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let userns = user_namespaces();
        let overlay = overlay_in_userns(&dir);
        // On a host without user namespaces (some CI containers) both say so; either way nothing stays.
        assert!(userns.verdict != Verdict::Degraded && overlay.verdict != Verdict::Degraded);
        if userns.verdict == Verdict::Ok {
            assert_eq!(overlay.verdict, Verdict::Ok, "{overlay:?}");
        }
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 0, "the probe's directories are removed");
        let mounts = read("/proc/self/mountinfo").unwrap();
        assert!(!mounts.contains(".sandlot-doctor-"), "no overlay mount reached this namespace");
        fs::remove_dir(&dir).unwrap();
    }
}
