//! The Linux namespace driver of sandlot.
//!
//! It executes a [`ContainerSpec`]; it does not choose policy. The daemon side ([`cgroup`], [`image`],
//! [`layers`], [`launch`]) prepares host resources and clones the sandbox's first process; the sandbox
//! side ([`container`]) runs inside the new namespaces, builds the root and hands over to the supervisor.
//!
//! Order, per sandbox: cgroup beneath the daemon's own → clone into new user, pid, mount, net, ipc, uts
//! namespaces → uid/gid map (a distinct host range per sandbox) → join cgroup, new cgroup namespace →
//! overlayfs root (lower = image, upper = private layer) → pivot_root, fresh /proc, minimal /dev, tmpfs
//! /tmp and /dev/shm, no /sys → hostname, loopback up → supervisor as pid 1.

#![deny(missing_docs)]

pub mod cgroup;
pub mod cgroup_stats;
pub mod container;
pub mod doctor;
pub mod idmap;
pub mod ids;
pub mod image;
pub mod image_store;
pub mod kmod;
pub mod landlock;
pub mod launch;
pub mod layer_export;
pub mod layers;
pub mod net;
pub mod steer;
pub mod tree;
pub mod unpack;
pub mod volume;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// Everything the sandbox side needs to build its root. Sent as the first frame on the control socket
/// (not in argv, which every process of the sandbox can read in /proc/1/cmdline: the spec names host paths).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContainerSpec {
    /// Empty directory the root is assembled on.
    pub root: PathBuf,
    /// Read-only image layers, top first.
    pub lower: Vec<PathBuf>,
    /// The sandbox's private writable layer.
    pub upper: PathBuf,
    /// overlayfs work directory (same filesystem as `upper`).
    pub work: PathBuf,
    /// Host directories bound read-only into the root (the `host` image's /usr).
    pub ro_binds: Vec<(PathBuf, PathBuf)>,
    /// Hostname inside the sandbox.
    pub hostname: String,
    /// Size cap of the /tmp and /dev/shm tmpfs, in MiB (also charged to the memory cgroup).
    pub tmp_mb: u64,
    /// No tmpfs on /tmp: it stays the root's own directory (a build step's, whose /tmp the image keeps).
    #[serde(default)]
    pub build_step: bool,
    /// Which defence layers are on. All are, outside the escape suite's layer-by-layer tests.
    pub layers: DefenceLayers,
    /// How many `cgroup.procs` files of the command leaf are open at fds 4, 5, … (written by each command
    /// before exec, so commands never share the supervisor's cgroup leaf).
    #[serde(default)]
    pub work_cgroup_fds: u32,
    /// RLIMIT_FSIZE of every command (the writable layer's cap; 0 = unlimited).
    #[serde(default)]
    pub max_file_bytes: u64,
}

/// First fd of the command-leaf `cgroup.procs` files in the supervisor.
pub const WORK_CGROUP_FD: i32 = 4;

/// Defence layers that can be switched off one by one, only to prove what each stops on its own.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct DefenceLayers {
    /// seccomp-bpf profile on every spawned process.
    pub seccomp: bool,
    /// Landlock on the supervisor and everything it starts.
    pub landlock: bool,
}

impl Default for DefenceLayers {
    fn default() -> Self {
        DefenceLayers { seccomp: true, landlock: true }
    }
}

/// The host's memory (`MemTotal` of /proc/meminfo) in bytes.
pub fn host_memory_bytes() -> std::io::Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| std::io::Error::other("/proc/meminfo has no MemTotal line"))
}

/// Whether this process runs as the host's root (the driver needs it).
pub fn running_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Opens (creating) `path` and takes an exclusive `flock` on it without waiting: `Ok(None)` when
/// another open file holds it. The kernel drops the lock with the last descriptor of the file, so a
/// crashed holder frees it.
pub(crate) fn try_flock(path: &std::path::Path) -> std::io::Result<Option<std::fs::File>> {
    use std::os::fd::AsRawFd;
    let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
    // SAFETY: flock on a descriptor we own.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(Some(file));
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(None)
    } else {
        Err(e)
    }
}

/// Takes the daemon's exclusive lock on its state directory (`<state>/daemon.lock`), waiting up to
/// `wait` for a previous daemon's thaw watchdog to finish with it. Two daemons on one state directory
/// would sweep each other's sandboxes and thaw each other's paused ones.
pub fn lock_state_dir(state_dir: &std::path::Path, wait: std::time::Duration) -> std::io::Result<std::os::fd::OwnedFd> {
    let path = state_dir.join("daemon.lock");
    let deadline = std::time::Instant::now() + wait;
    loop {
        if let Some(file) = try_flock(&path)? {
            return Ok(file.into());
        }
        if std::time::Instant::now() >= deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!(
                    "{} is in use by another sandlot serve (it holds {}); stop it, or give this one its own --state-dir",
                    state_dir.display(),
                    path.display()
                ),
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit and returns it: the daemon
/// holds two descriptors per proxied connection and a few per sandbox, and a default soft limit of
/// 1024 would let a handful of busy sandboxes starve the API. (Sandboxes do not inherit it: the
/// supervisor sets their own limit.)
pub fn raise_fd_limit() -> std::io::Result<u64> {
    let mut r = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into a valid rlimit.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    r.rlim_cur = r.rlim_max;
    // SAFETY: setrlimit reads a valid rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &r) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(r.rlim_cur)
}

/// A contiguous host uid/gid range that a sandbox's ids 0..[`UID_RANGE`] map onto.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// Host id of the sandbox's root.
    pub base: u32,
}

/// Ids each sandbox owns on the host.
pub const UID_RANGE: u32 = 65536;
/// First host id handed to sandboxes; far above ordinary users and systemd's dynamic ranges.
pub const UID_FIRST: u32 = 0x1000_0000;

impl IdRange {
    /// The range of slot `n`: slots never overlap, and none contains host root.
    pub fn for_slot(n: u32) -> Self {
        IdRange { base: UID_FIRST + n * UID_RANGE }
    }

    /// Host id of sandbox id `id`.
    pub fn host(self, id: u32) -> u32 {
        self.base + id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_daemon_on_the_same_state_dir_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("sandlot-lock-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let held = lock_state_dir(&dir, std::time::Duration::ZERO).unwrap();
        let err = lock_state_dir(&dir, std::time::Duration::from_millis(50)).unwrap_err();
        assert!(err.to_string().contains("in use by another sandlot serve"), "{err}");
        drop(held);
        assert!(lock_state_dir(&dir, std::time::Duration::ZERO).is_ok(), "released with its holder");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
