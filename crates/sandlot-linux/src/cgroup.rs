//! Sandbox cgroups, always beneath the daemon's own cgroup, on cgroup v2 or the v1 hierarchies.
//!
//! Limits: memory (no swap beyond it), pids, CPU quota. The OOM-kill counter tells an `oom` end from any
//! other SIGKILL. Every sandbox cgroup lives in `<daemon cgroup>/sandlot-<instance>/<id>` (the instance
//! is the state directory's, so a restart finds the same place) so that a start-up sweep can find and
//! remove what the store does not explain. On v2 the daemon itself sits in `<daemon cgroup>/sandlot-daemon`
//! beside them ([`DAEMON_LEAF`]); it never moves another process.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::thread;
use std::time::Duration;

/// Limits applied to one sandbox cgroup.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CgroupLimits {
    /// Bytes of memory (and of memory+swap where the kernel accounts swap).
    pub memory_bytes: u64,
    /// Processes and threads.
    pub pids: u64,
    /// CPU cores (fractional).
    pub cpu: f64,
}

/// cgroup errors, with the file that failed.
#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// No usable cgroup hierarchy.
    #[error("cgroups: {0}")]
    Unsupported(String),
    /// A cgroupfs operation failed.
    #[error("cgroup {path}: {source}")]
    Io {
        /// File or directory.
        path: PathBuf,
        /// Cause.
        source: io::Error,
    },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> CgroupError + '_ {
    move |source| CgroupError::Io { path: path.to_path_buf(), source }
}

const CPU_PERIOD_US: u64 = 100_000;
/// Leaf of the supervisor, and leaf of every command. The sandbox's cgroup holds the limits plus a little
/// headroom; `work` holds the limits proper. A fork or memory bomb thus exhausts `work`, and the
/// supervisor still has room for its threads and pages (and the OOM killer looks only inside `work`).
const SUP: &str = "sup";
const WORK: &str = "work";
const HEADROOM_BYTES: u64 = 32 << 20;
/// Pids (threads) only pid 1 can use once `work` is full: two threads per inbound connection (the
/// supervisor allows 64, `ports::MAX_CONNECTIONS`), one per file operation (16, `files::MAX_FILE_OPS`),
/// and 16 for its own threads and those of an exec or two. A fork bomb in `work` thus never starves
/// the preview and file APIs; past these caps the supervisor answers "busy" instead of starting threads.
pub const SUPERVISOR_PIDS: u64 = 2 * 64 + 16 + 16;
/// `cpuacct` only accounts (the sandbox's CPU time, for metrics); mounted with `cpu` it shares its
/// directory, which is then simply made and joined twice.
pub(crate) const V1_CONTROLLERS: [&str; 5] = ["memory", "pids", "cpu", "cpuacct", "freezer"];

/// Where sandbox cgroups are made.
#[derive(Debug, Clone)]
pub enum Cgroups {
    /// Unified hierarchy: one directory per sandbox.
    V2 {
        /// `<mount>/<daemon cgroup>/sandlot`.
        base: PathBuf,
    },
    /// v1 (or hybrid): one directory per controller per sandbox.
    V1 {
        /// `(controller, <mount>/<daemon cgroup>/sandlot)`.
        bases: Vec<(&'static str, PathBuf)>,
    },
}

/// A sandbox cgroup's use of CPU and memory at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupUsage {
    /// CPU time used since the cgroup was made, microseconds (`None`: no CPU accounting here).
    pub cpu_usec: Option<u64>,
    /// Memory charged now, page cache included, bytes.
    pub memory_bytes: Option<u64>,
    /// Of that, page cache, bytes.
    pub cache_bytes: u64,
}

/// One sandbox's cgroup directories.
#[derive(Debug, Clone)]
pub struct SandboxCgroup {
    dirs: Vec<(&'static str, PathBuf)>,
    v2: bool,
}

impl Cgroups {
    /// Finds the daemon's own cgroup(s) and prepares `<it>/sandlot-<instance>` beneath. The instance name
    /// keeps two daemons in one cgroup (or parallel test servers) from sweeping each other's sandboxes.
    pub fn detect(instance: &str) -> Result<Self, CgroupError> {
        let dir_name = format!("sandlot-{instance}");
        let own = fs::read_to_string("/proc/self/cgroup").map_err(io_at(Path::new("/proc/self/cgroup")))?;
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").map_err(io_at(Path::new("/proc/self/mountinfo")))?;
        let mounts = parse_mountinfo(&mountinfo);
        let v1: Vec<_> = V1_CONTROLLERS
            .iter()
            .filter_map(|ctrl| {
                let mnt = mounts.iter().find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == *ctrl))?;
                let path = own_path(&own, |ctrls| ctrls.split(',').any(|c| c == *ctrl))?;
                Some((*ctrl, join_cgroup(&mnt.point, &path, &mnt.root).join(&dir_name)))
            })
            .collect();
        if v1.iter().any(|(c, _)| *c == "memory") {
            for (_, base) in &v1 {
                fs::create_dir_all(base).map_err(io_at(base))?;
            }
            return Ok(Cgroups::V1 { bases: v1 });
        }
        let mnt = mounts
            .iter()
            .find(|m| m.fstype == "cgroup2")
            .ok_or_else(|| CgroupError::Unsupported("no cgroup2 or v1 memory hierarchy is mounted".into()))?;
        let path = own_path(&own, |ctrls| ctrls.is_empty()).ok_or_else(|| {
            CgroupError::Unsupported("the daemon's cgroup v2 path is not in /proc/self/cgroup".into())
        })?;
        let own = join_cgroup(&mnt.point, &path, &mnt.root);
        let base = prepare_v2(&own, &dir_name)?;
        Ok(Cgroups::V2 { base })
    }

    /// Creates the cgroup of sandbox `id` with its limits.
    pub fn create(&self, id: &str, limits: CgroupLimits) -> Result<SandboxCgroup, CgroupError> {
        let cg = self.handle(id);
        let quota = ((limits.cpu * CPU_PERIOD_US as f64).round() as u64).max(1000);
        let outer = CgroupLimits {
            memory_bytes: limits.memory_bytes + HEADROOM_BYTES,
            pids: limits.pids + SUPERVISOR_PIDS,
            cpu: limits.cpu,
        };
        for (ctrl, dir) in &cg.dirs {
            fs::create_dir_all(dir).map_err(io_at(dir))?;
            if cg.v2 {
                // Controllers for the two leaves (the parent of `<id>` already delegates them).
                write(&dir.join("cgroup.subtree_control"), "+memory +pids")?;
                write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
            }
            if split(ctrl) {
                set_limits(cg.v2, ctrl, dir, outer)?;
                for leaf in [SUP, WORK] {
                    fs::create_dir_all(dir.join(leaf)).map_err(io_at(&dir.join(leaf)))?;
                }
                set_limits(cg.v2, ctrl, &dir.join(WORK), limits)?;
            } else if *ctrl == "cpu" {
                write(&dir.join("cpu.cfs_period_us"), &CPU_PERIOD_US.to_string())?;
                write(&dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
            }
        }
        Ok(cg)
    }

    /// The base directory of the v1 freezer hierarchy, where paused sandboxes are frozen; `None` on v2,
    /// whose frozen tasks die of SIGKILL anyway.
    pub fn freezer_base(&self) -> Option<&Path> {
        match self {
            Cgroups::V2 { .. } => None,
            Cgroups::V1 { bases } => bases.iter().find(|(c, _)| *c == "freezer").map(|(_, b)| b.as_path()),
        }
    }

    /// Removes this daemon's (empty) base cgroup directories, at shutdown.
    pub fn remove_base(&self) {
        let bases: Vec<&PathBuf> = match self {
            Cgroups::V2 { base } => vec![base],
            Cgroups::V1 { bases } => bases.iter().map(|(_, b)| b).collect(),
        };
        for b in bases {
            let _ = fs::remove_dir(b);
        }
    }

    /// The cgroup of sandbox `id`, whether or not it exists.
    pub fn handle(&self, id: &str) -> SandboxCgroup {
        match self {
            Cgroups::V2 { base } => SandboxCgroup { dirs: vec![("unified", base.join(id))], v2: true },
            Cgroups::V1 { bases } => {
                SandboxCgroup { dirs: bases.iter().map(|(c, b)| (*c, b.join(id))).collect(), v2: false }
            }
        }
    }

    /// Names of the sandbox cgroups that exist now.
    pub fn existing(&self) -> Vec<String> {
        let bases: Vec<&PathBuf> = match self {
            Cgroups::V2 { base } => vec![base],
            Cgroups::V1 { bases } => bases.iter().map(|(_, b)| b).collect(),
        };
        let mut names: Vec<String> = bases
            .iter()
            .filter_map(|b| fs::read_dir(b).ok())
            .flat_map(|rd| rd.flatten())
            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl SandboxCgroup {
    /// Moves process `pid` into every controller of this cgroup.
    pub fn add(&self, pid: i32) -> Result<(), CgroupError> {
        for (ctrl, dir) in &self.dirs {
            let dir = if split(ctrl) { dir.join(SUP) } else { dir.clone() };
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// The `cgroup.procs` files a command writes itself into before exec (the command leaf).
    pub fn work_procs(&self) -> Vec<PathBuf> {
        self.dirs.iter().filter(|(c, _)| split(c)).map(|(_, d)| d.join(WORK).join("cgroup.procs")).collect()
    }

    /// Lets host uid `owner` (the sandbox's root) move its own processes into the command leaf: needed on
    /// v2, where the write is checked against the common ancestor's `cgroup.procs`.
    pub fn delegate(&self, owner: u32) -> Result<(), CgroupError> {
        if !self.v2 {
            return Ok(());
        }
        for (_, dir) in &self.dirs {
            for f in [dir.join("cgroup.procs"), dir.join(WORK).join("cgroup.procs"), dir.join(SUP).join("cgroup.procs")]
            {
                std::os::unix::fs::chown(&f, Some(owner), Some(owner)).map_err(io_at(&f))?;
            }
        }
        Ok(())
    }

    /// How many processes the kernel's OOM killer has killed in this cgroup so far.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = if self.v2 { ("memory.events", "oom_kill") } else { ("memory.oom_control", "oom_kill") };
        let Some((_, dir)) = self.dirs.iter().find(|(c, _)| self.v2 || *c == "memory") else {
            return 0;
        };
        fs::read_to_string(dir.join(WORK).join(file))
            .ok()
            .and_then(|s| s.lines().find_map(|l| l.strip_prefix(key).and_then(|v| v.trim().parse().ok())))
            .unwrap_or(0)
    }

    /// What the sandbox's processes (supervisor and commands) use now, read from the cgroup files of
    /// either hierarchy: v2 `cpu.stat` / `memory.current` / `memory.stat`, v1 `cpuacct.usage` (when
    /// cpuacct is mounted) / `memory.usage_in_bytes` / `memory.stat`. A figure the kernel
    /// does not offer is `None` (or 0 for the page cache).
    pub fn usage(&self) -> CgroupUsage {
        let read = |p: PathBuf| fs::read_to_string(p).ok();
        let stat_field = |text: Option<String>, key: &str| {
            text.and_then(|t| {
                t.lines().find_map(|l| {
                    let (k, v) = l.split_once(' ')?;
                    (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
                })
            })
        };
        if self.v2 {
            let dir = &self.dirs[0].1;
            let stat = read(dir.join("memory.stat"));
            return CgroupUsage {
                cpu_usec: stat_field(read(dir.join("cpu.stat")), "usage_usec"),
                memory_bytes: read(dir.join("memory.current")).and_then(|s| s.trim().parse().ok()),
                cache_bytes: stat_field(stat, "file").unwrap_or(0),
            };
        }
        let dir_of = |ctrl: &str| self.dirs.iter().find(|(c, _)| *c == ctrl).map(|(_, d)| d.clone());
        let cpu_usec = dir_of("cpuacct")
            .and_then(|d| read(d.join("cpuacct.usage")))
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|ns| ns / 1000);
        let memory = dir_of("memory");
        CgroupUsage {
            cpu_usec,
            memory_bytes: memory
                .as_ref()
                .and_then(|d| read(d.join("memory.usage_in_bytes")))
                .and_then(|s| s.trim().parse().ok()),
            // Hierarchical: the `sup` and `work` leaves count too.
            cache_bytes: stat_field(memory.and_then(|d| read(d.join("memory.stat"))), "total_cache").unwrap_or(0),
        }
    }

    /// Everything metrics report of the sandbox's cgroup (see [`crate::cgroup_stats`] for which file
    /// gives what on each hierarchy).
    pub fn stats(&self) -> crate::cgroup_stats::CgroupStats {
        if self.v2 {
            return crate::cgroup_stats::read_v2(&self.dirs[0].1, WORK);
        }
        crate::cgroup_stats::read_v1(|ctrl| self.dirs.iter().find(|(c, _)| *c == ctrl).map(|(_, d)| d.clone()), WORK)
    }

    /// Freezes (`true`) or thaws every process of the sandbox and waits until the kernel reports the
    /// new state: frozen processes keep their memory and use no CPU.
    pub fn freeze(&self, frozen: bool) -> Result<(), CgroupError> {
        // What to write where, and the line the kernel shows once the change has settled.
        let (file, value, status, want) = if self.v2 {
            let dir = &self.dirs[0].1;
            let (value, want) = if frozen { ("1", "frozen 1") } else { ("0", "frozen 0") };
            (dir.join("cgroup.freeze"), value, dir.join("cgroup.events"), want)
        } else {
            let (_, dir) = self
                .dirs
                .iter()
                .find(|(c, _)| *c == "freezer")
                .ok_or_else(|| CgroupError::Unsupported("the v1 freezer controller is not mounted".into()))?;
            let value = if frozen { "FROZEN" } else { "THAWED" };
            (dir.join("freezer.state"), value, dir.join("freezer.state"), value)
        };
        let done = |s: &str| s.lines().any(|l| l.trim() == want);
        write(&file, value)?;
        for attempt in 0..2000 {
            let s = fs::read_to_string(&status).map_err(io_at(&status))?;
            if done(&s) {
                return Ok(());
            }
            // v1 reports FREEZING while tasks are still being stopped; writing again nudges stragglers.
            if !self.v2 && attempt % 50 == 49 {
                write(&file, value)?;
            }
            thread::sleep(Duration::from_micros(if attempt < 100 { 50 } else { 1000 }));
        }
        Err(CgroupError::Io { path: status, source: io::Error::other("freezer did not settle within 2 s") })
    }

    /// Kills every process in the cgroup and removes its directories. Idempotent.
    pub fn destroy(&self) -> Result<(), CgroupError> {
        // v1 frozen tasks do not die until thawed.
        if !self.v2 && self.dirs.iter().any(|(c, d)| *c == "freezer" && d.exists()) {
            let _ = self.freeze(false);
        }
        // Leaves first, then the sandbox's own directory.
        let all: Vec<PathBuf> = self
            .dirs
            .iter()
            .flat_map(|(c, d)| {
                let leaves = if split(c) { vec![d.join(WORK), d.join(SUP)] } else { Vec::new() };
                leaves.into_iter().chain(std::iter::once(d.clone()))
            })
            .collect();
        for attempt in 0..200 {
            let mut busy = false;
            for dir in &all {
                if !dir.exists() {
                    continue;
                }
                if self.v2 && dir.join("cgroup.kill").exists() {
                    let _ = fs::write(dir.join("cgroup.kill"), "1");
                }
                if let Ok(procs) = fs::read_to_string(dir.join("cgroup.procs")) {
                    for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                        // SAFETY: plain syscall on a pid read from this sandbox's own cgroup.
                        unsafe { libc::kill(pid, libc::SIGKILL) };
                    }
                }
                match fs::remove_dir(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => busy = true,
                    Err(e) => return Err(CgroupError::Io { path: dir.clone(), source: e }),
                }
            }
            if !busy {
                return Ok(());
            }
            // Killed processes leave the cgroup only once the kernel has torn them down.
            thread::sleep(Duration::from_millis(if attempt < 20 { 1 } else { 10 }));
        }
        Err(CgroupError::Io {
            path: self.dirs[0].1.clone(),
            source: io::Error::other("processes did not leave the cgroup within 2 s"),
        })
    }
}

/// Controllers whose sandbox cgroup is split into a supervisor leaf and a command leaf.
fn split(ctrl: &str) -> bool {
    matches!(ctrl, "memory" | "pids" | "unified")
}

fn set_limits(v2: bool, ctrl: &str, dir: &Path, l: CgroupLimits) -> Result<(), CgroupError> {
    if v2 {
        write(&dir.join("memory.max"), &l.memory_bytes.to_string())?;
        write(&dir.join("memory.swap.max"), "0").or_else(ignore_missing)?;
        return write(&dir.join("pids.max"), &l.pids.to_string());
    }
    match ctrl {
        "memory" => {
            write(&dir.join("memory.limit_in_bytes"), &l.memory_bytes.to_string())?;
            // Present only with swap accounting; where it is, memory+swap gets the same cap.
            write(&dir.join("memory.memsw.limit_in_bytes"), &l.memory_bytes.to_string()).or_else(ignore_missing)?;
            // v1 charges TCP socket buffers to this separate counter only once it has a limit; without
            // one, a 128 MiB sandbox pinned 2.2 GiB of host kernel memory in unread sockets and slowed
            // every tenant's TCP. (v2 charges them to memory.max with everything else.)
            write(&dir.join("memory.kmem.tcp.limit_in_bytes"), &(l.memory_bytes / 2).to_string())
                .or_else(ignore_missing)?;
            write(&dir.join("memory.swappiness"), "0").or_else(ignore_missing)
        }
        "pids" => write(&dir.join("pids.max"), &l.pids.to_string()),
        _ => Ok(()),
    }
}

/// The leaf a daemon moves itself into on v2, beside the sandbox bases of its cgroup. Its fixed name is
/// what keeps the layout stable: a daemon started in it (a restart by a service manager with
/// `DelegateSubgroup=`, or a second daemon of the same service) hangs its sandboxes beside it instead
/// of nesting a new leaf below.
pub const DAEMON_LEAF: &str = "sandlot-daemon";

/// Controllers sandbox cgroups need on v2.
pub(crate) const V2_CONTROLLERS: [&str; 3] = ["memory", "pids", "cpu"];

/// Finds the cgroup that holds this daemon's sandboxes on v2 (the daemon's own, or the parent of its
/// leaf), settles the daemon into [`DAEMON_LEAF`] when it must, and returns `<root>/<dir_name>` ready for
/// sandbox cgroups.
///
/// v2 hands controllers to children only from a cgroup without processes of its own (the root cgroup
/// excepted), so a daemon alone in its cgroup moves itself into a leaf first. It moves nothing else: a
/// cgroup that also holds other processes (a login session's scope, a shell, a test runner) belongs to
/// someone else, and start-up refuses and says how to give the daemon a cgroup of its own.
fn prepare_v2(own: &Path, dir_name: &str) -> Result<PathBuf, CgroupError> {
    let root = match v2_root_in_place(own, own.join("cgroup.type").exists()) {
        Some(root) => root,
        None => {
            settle_in_leaf(own)?;
            own.to_path_buf()
        }
    };
    enable_controllers(&root)?;
    let base = root.join(dir_name);
    fs::create_dir_all(&base).map_err(io_at(&base))?;
    write(&base.join("cgroup.subtree_control"), &wanted_controllers())?;
    Ok(base)
}

fn wanted_controllers() -> String {
    V2_CONTROLLERS.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(" ")
}

/// The cgroup that holds the sandboxes of a v2 daemon whose own cgroup is `own`, when it need not move:
/// the hierarchy's true root (the only cgroup without `cgroup.type`, and the only one that may hold
/// processes and hand out controllers at once; a cgroup namespace's root, as in a container, is an
/// ordinary cgroup), or the parent of its `sandlot-daemon` leaf. `None`: the daemon must settle into a
/// leaf of `own` first. Start-up and `sandlot doctor` decide by this one rule.
pub(crate) fn v2_root_in_place(own: &Path, has_type_file: bool) -> Option<PathBuf> {
    if !has_type_file {
        return Some(own.to_path_buf());
    }
    if own.file_name().is_some_and(|n| n == DAEMON_LEAF) {
        return own.parent().map(Path::to_path_buf);
    }
    None
}

/// The pids of a `cgroup.procs` text other than `me`.
pub(crate) fn other_pids(procs: &str, me: u32) -> Vec<u32> {
    procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()).filter(|pid| *pid != me).collect()
}

/// Moves this process, and only this process, into `<own>/sandlot-daemon`, and enables the controllers
/// in `own`; undoes the move when that fails.
fn settle_in_leaf(own: &Path) -> Result<(), CgroupError> {
    missing_controllers(own)?;
    let me = std::process::id();
    let others = other_processes(own, me);
    if !others.is_empty() {
        return Err(CgroupError::Unsupported(shared_cgroup_message(own, &others)));
    }
    let leaf = own.join(DAEMON_LEAF);
    fs::create_dir_all(&leaf).map_err(io_at(&leaf))?;
    // Writing our pid moves every thread of this process; nothing else is written anywhere.
    write(&leaf.join("cgroup.procs"), &me.to_string())?;
    if let Err(e) = write(&own.join("cgroup.subtree_control"), &wanted_controllers()) {
        // Leave the host as it was: back into our cgroup, and the leaf gone.
        let _ = fs::write(own.join("cgroup.procs"), me.to_string());
        let _ = fs::remove_dir(&leaf);
        let others = other_processes(own, me);
        return Err(CgroupError::Unsupported(if others.is_empty() {
            format!("cannot enable {} for the children of {}: {e}", V2_CONTROLLERS.join(", "), own.display())
        } else {
            shared_cgroup_message(own, &others)
        }));
    }
    Ok(())
}

/// Enables the sandbox controllers in `root`'s `cgroup.subtree_control` unless they already are.
fn enable_controllers(root: &Path) -> Result<(), CgroupError> {
    let sub = root.join("cgroup.subtree_control");
    let enabled = fs::read_to_string(&sub).map_err(io_at(&sub))?;
    if V2_CONTROLLERS.iter().all(|c| enabled.split_whitespace().any(|e| e == *c)) {
        return Ok(());
    }
    missing_controllers(root)?;
    write(&sub, &wanted_controllers())
}

/// Refuses when `dir`'s parent has not handed it every controller sandboxes need.
fn missing_controllers(dir: &Path) -> Result<(), CgroupError> {
    let file = dir.join("cgroup.controllers");
    let available = fs::read_to_string(&file).map_err(io_at(&file))?;
    let missing: Vec<&str> =
        V2_CONTROLLERS.iter().copied().filter(|c| !available.split_whitespace().any(|a| a == *c)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(CgroupError::Unsupported(format!(
        "the cgroup {} was not delegated the {} controller(s) sandboxes need (it has: {}); run sandlot as a \
         systemd service with Delegate=yes (packaging/sandlot.service), or enable them in the parent's \
         cgroup.subtree_control",
        dir.display(),
        missing.join(", "),
        if available.trim().is_empty() { "none" } else { available.trim() },
    )))
}

/// Processes in cgroup `dir` other than `me`, with their command names.
fn other_processes(dir: &Path, me: u32) -> Vec<(u32, String)> {
    other_pids(&fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default(), me)
        .into_iter()
        .map(|pid| {
            let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            (pid, comm.trim().to_string())
        })
        .collect()
}

fn shared_cgroup_message(own: &Path, others: &[(u32, String)]) -> String {
    const SHOWN: usize = 5;
    let mut listed: Vec<String> = others.iter().take(SHOWN).map(|(pid, comm)| format!("{pid} ({comm})")).collect();
    if others.len() > SHOWN {
        listed.push(format!("and {} more", others.len() - SHOWN));
    }
    format!(
        "on cgroup v2 sandlot needs a cgroup of its own, and {} also holds other processes: {}. Nothing was \
         moved. Run sandlot as a systemd service with Delegate=yes (packaging/sandlot.service), or \
         `systemd-run --unit sandlot -p Delegate=yes sandlot serve ...`, or start it in a cgroup of its own \
         (docs/DEPLOYING.md): `mkdir -p /sys/fs/cgroup/sandlot/sandlot-daemon && sh -c 'echo $$ > \
         /sys/fs/cgroup/sandlot/sandlot-daemon/cgroup.procs && exec sandlot serve ...'`",
        own.display(),
        listed.join(", "),
    )
}

fn write(path: &Path, value: &str) -> Result<(), CgroupError> {
    fs::write(path, value).map_err(io_at(path))
}

fn ignore_missing(e: CgroupError) -> Result<(), CgroupError> {
    match &e {
        CgroupError::Io { source, .. } if source.kind() == io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

pub(crate) struct MountEntry {
    pub(crate) root: String,
    pub(crate) point: PathBuf,
    pub(crate) fstype: String,
    pub(crate) options: String,
}

pub(crate) fn parse_mountinfo(s: &str) -> Vec<MountEntry> {
    s.lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            Some(MountEntry {
                root: pre.get(3)?.to_string(),
                point: PathBuf::from(pre.get(4)?),
                fstype: post.first()?.to_string(),
                options: post.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// The cgroup path of this process for the hierarchy whose controller list satisfies `pick`.
pub(crate) fn own_path(proc_cgroup: &str, pick: impl Fn(&str) -> bool) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        pick(ctrls).then(|| path.to_string())
    })
}

/// Joins a cgroup path onto its mount point, accounting for a mount of a sub-tree (`root` != "/").
pub(crate) fn join_cgroup(point: &Path, path: &str, root: &str) -> PathBuf {
    let rel = path.strip_prefix(root).unwrap_or(path).trim_start_matches('/');
    if rel.is_empty() {
        point.to_path_buf()
    } else {
        point.join(rel)
    }
}

/// The argument that makes the `sandlot` binary a thaw watchdog ([`thaw_watchdog_main`]).
pub const THAW_WATCHDOG_ARG: &str = "__thaw-on-exit";

/// Starts the thaw watchdog for the v1 freezer hierarchy `base`: a small process that waits for this
/// daemon to end, however it ends, and then thaws every cgroup below `base`. On cgroup v1 a frozen
/// task cannot die: without it, a sandbox paused when the daemon is killed would outlive the daemon,
/// frozen, until the next start swept it. Returns the descriptor whose closing (at the daemon's exit,
/// or its death) wakes the watchdog; keep it open for the daemon's lifetime.
///
/// `state_lock` (the daemon's lock on its state directory) is inherited by the watchdog as its
/// descriptor 3, so the lock is only released once the watchdog is done: a daemon started on the same
/// state right after a crash waits for the thaw instead of racing it.
pub fn spawn_thaw_watchdog(base: &Path, state_lock: &std::os::fd::OwnedFd) -> io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
    let lock = state_lock.as_raw_fd();
    let mut cmd = std::process::Command::new("/proc/self/exe");
    cmd.arg(THAW_WATCHDOG_ARG)
        .arg(base)
        .stdin(std::process::Stdio::from(read_end))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec only dup2 (async-signal-safe) on a descriptor the parent keeps open.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 leaves the new descriptor without close-on-exec.
            if libc::dup2(lock, WATCHDOG_LOCK_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()?;
    Ok(write_end)
}

/// The descriptor number the watchdog holds the daemon's state lock at.
const WATCHDOG_LOCK_FD: i32 = 3;

/// The watchdog's whole life: block until standard input (the daemon's pipe) closes, thaw every cgroup
/// below `base`, exit. The killed sandboxes' processes then receive their pending SIGKILL and end.
pub fn thaw_watchdog_main(base: &Path) -> ! {
    // Only stdin and the state lock are kept; a terminal's Ctrl-C or a service manager's SIGTERM to the
    // daemon's group must not end the watchdog before the daemon (it has nothing to clean up itself).
    // SAFETY: plain syscalls on this process's own descriptors and signal dispositions.
    unsafe {
        libc::syscall(libc::SYS_close_range, (WATCHDOG_LOCK_FD + 1) as u32, u32::MAX, 0u32);
        libc::setsid();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGPIPE] {
            libc::signal(sig, libc::SIG_IGN);
        }
    }
    let mut sink = [0u8; 64];
    loop {
        match nix::unistd::read(0, &mut sink) {
            Ok(0) => break,
            Ok(_) => continue,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    thaw_below(base);
    std::process::exit(0);
}

fn thaw_below(dir: &Path) {
    let state = dir.join("freezer.state");
    if fs::read_to_string(&state).is_ok_and(|s| s.trim() != "THAWED") {
        let _ = fs::write(&state, "THAWED");
    }
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            thaw_below(&entry.path());
        }
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    #[test]
    fn finds_v1_controller_paths_including_combined_ones() {
        let own = "4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/\n";
        assert_eq!(own_path(own, |c| c.split(',').any(|x| x == "memory")).as_deref(), Some("/process_api/abc"));
        assert_eq!(own_path(own, |c| c.split(',').any(|x| x == "cpu")).as_deref(), Some("/x"));
        assert_eq!(own_path(own, |c| c.is_empty()).as_deref(), Some("/"));
    }

    #[test]
    fn joins_paths_of_bind_mounted_subtrees() {
        assert_eq!(
            join_cgroup(Path::new("/sys/fs/cgroup/memory"), "/a/b", "/"),
            PathBuf::from("/sys/fs/cgroup/memory/a/b")
        );
        assert_eq!(join_cgroup(Path::new("/sys/fs/cgroup"), "/a/b", "/a"), PathBuf::from("/sys/fs/cgroup/b"));
        assert_eq!(join_cgroup(Path::new("/sys/fs/cgroup"), "/", "/"), PathBuf::from("/sys/fs/cgroup"));
    }

    /// A directory laid out like a v2 cgroup (the files start-up reads), as a stand-in for cgroupfs: the
    /// kernel's own refusals are exercised by the VM test; this checks what start-up decides and writes.
    fn fake_cgroup(dir: &Path, controllers: &str, procs: &str) {
        fs::create_dir_all(dir).unwrap();
        fs::write(dir.join("cgroup.controllers"), controllers).unwrap();
        fs::write(dir.join("cgroup.subtree_control"), "").unwrap();
        fs::write(dir.join("cgroup.procs"), procs).unwrap();
        fs::write(dir.join("cgroup.type"), "domain").unwrap();
    }

    #[test]
    fn v2_refuses_a_cgroup_shared_with_other_processes_and_moves_nothing() {
        let mount = tempfile::tempdir().unwrap();
        let own = mount.path().join("user.slice/session-1.scope");
        let me = std::process::id();
        // pid 1 is certainly not this test.
        fake_cgroup(&own, "cpu memory pids", &format!("1\n{me}\n"));
        let err = prepare_v2(&own, "sandlot-abc").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("also holds other processes: 1 ("), "{msg}");
        assert!(msg.contains("Nothing was moved") && msg.contains("Delegate=yes"), "{msg}");
        assert!(!own.join(DAEMON_LEAF).exists(), "a leaf was made for a refused start");
        assert!(!own.join("sandlot-abc").exists());
        assert_eq!(fs::read_to_string(own.join("cgroup.procs")).unwrap(), format!("1\n{me}\n"));
        assert_eq!(fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(), "");
    }

    #[test]
    fn v2_moves_only_itself_into_the_leaf_and_a_restart_keeps_the_layout() {
        let mount = tempfile::tempdir().unwrap();
        let own = mount.path().join("system.slice/sandlot.service");
        let me = std::process::id();
        fake_cgroup(&own, "cpuset cpu io memory pids", &me.to_string());
        let base = prepare_v2(&own, "sandlot-abc").unwrap();
        assert_eq!(base, own.join("sandlot-abc"));
        assert_eq!(fs::read_to_string(own.join(DAEMON_LEAF).join("cgroup.procs")).unwrap(), me.to_string());
        assert_eq!(fs::read_to_string(own.join("cgroup.subtree_control")).unwrap(), "+memory +pids +cpu");
        assert_eq!(fs::read_to_string(base.join("cgroup.subtree_control")).unwrap(), "+memory +pids +cpu");

        // Started again in the leaf (as a service manager may): the same base, no leaf below the leaf.
        let leaf = own.join(DAEMON_LEAF);
        fake_cgroup(&leaf, "cpu memory pids", &me.to_string());
        fs::write(own.join("cgroup.subtree_control"), "cpu memory pids").unwrap();
        let again = prepare_v2(&leaf, "sandlot-abc").unwrap();
        assert_eq!(again, base);
        assert!(!leaf.join(DAEMON_LEAF).exists(), "restarts nest");
    }

    #[test]
    fn v2_refuses_a_cgroup_without_the_controllers_and_says_which() {
        let mount = tempfile::tempdir().unwrap();
        let own = mount.path().join("svc");
        let me = std::process::id();
        fake_cgroup(&own, "cpu io", &me.to_string());
        let msg = prepare_v2(&own, "sandlot-abc").unwrap_err().to_string();
        assert!(msg.contains("was not delegated the memory, pids controller(s)") && msg.contains("cpu io"), "{msg}");
        assert!(!own.join(DAEMON_LEAF).exists());
    }

    #[test]
    fn v2_in_the_hierarchy_root_makes_the_base_there_without_moving() {
        let mount = tempfile::tempdir().unwrap();
        fake_cgroup(mount.path(), "cpu memory pids", "1\n2\n");
        fs::remove_file(mount.path().join("cgroup.type")).unwrap();
        let base = prepare_v2(mount.path(), "sandlot-abc").unwrap();
        assert_eq!(base, mount.path().join("sandlot-abc"));
        assert!(!mount.path().join(DAEMON_LEAF).exists());
        assert_eq!(fs::read_to_string(mount.path().join("cgroup.subtree_control")).unwrap(), "+memory +pids +cpu");
    }

    /// The figures metrics report, read from each hierarchy's own files (as the kernel writes them).
    #[test]
    fn usage_reads_cpu_and_memory_from_either_hierarchy() {
        let tmp = tempfile::tempdir().unwrap();
        let v2 = Cgroups::V2 { base: tmp.path().join("v2") }.handle("sb");
        let dir = tmp.path().join("v2/sb");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cpu.stat"), "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n").unwrap();
        fs::write(dir.join("memory.current"), "8388608\n").unwrap();
        fs::write(dir.join("memory.stat"), "anon 4194304\nfile 2097152\nfile_mapped 0\n").unwrap();
        let want = CgroupUsage { cpu_usec: Some(1500), memory_bytes: Some(8 << 20), cache_bytes: 2 << 20 };
        assert_eq!(v2.usage(), want);

        let bases = ["memory", "cpuacct"].map(|c| (c, tmp.path().join(c))).to_vec();
        let v1 = Cgroups::V1 { bases }.handle("sb");
        let (mem, acct) = (tmp.path().join("memory/sb"), tmp.path().join("cpuacct/sb"));
        fs::create_dir_all(&mem).unwrap();
        fs::create_dir_all(&acct).unwrap();
        fs::write(acct.join("cpuacct.usage"), "1500999\n").unwrap();
        fs::write(mem.join("memory.usage_in_bytes"), "8388608\n").unwrap();
        fs::write(mem.join("memory.stat"), "cache 1\nrss 2\ntotal_cache 2097152\ntotal_rss 4194304\n").unwrap();
        assert_eq!(v1.usage(), want, "nanoseconds to microseconds, the hierarchical cache");

        // Without CPU accounting (v1 without cpuacct) or with no files at all: unknown, not zero.
        fs::remove_dir_all(&acct).unwrap();
        assert_eq!(v1.usage().cpu_usec, None);
        let gone = Cgroups::V2 { base: tmp.path().join("nowhere") }.handle("sb").usage();
        assert_eq!(gone, CgroupUsage::default());
    }

    #[test]
    fn parses_mountinfo_lines() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid shared:9 - cgroup cgroup rw,memory\n";
        let m = parse_mountinfo(mi);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].fstype, "cgroup");
        assert_eq!(m[0].point, PathBuf::from("/sys/fs/cgroup/memory"));
        assert!(m[0].options.contains("memory"));
    }
}
