//! The sandbox side of the driver: runs as pid 1 of the new namespaces, before the supervisor, and
//! turns a [`ContainerSpec`] into the sandbox's root. Nothing here runs in the daemon.
//!
//! One step per call, each with why. Any failure ends the process with the step named on stderr, which
//! the daemon reports as the sandbox's `failed` reason.

use std::ffi::CString;
use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::stat::{umask, Mode};
use nix::sys::statvfs::{statvfs, FsFlags};
use nix::unistd::{chdir, pivot_root, sethostname};

use crate::ContainerSpec;

/// A setup step that failed.
#[derive(Debug, thiserror::Error)]
#[error("sandbox setup: {step}: {source}")]
pub struct SetupError {
    step: String,
    source: io::Error,
}

fn step<T, E: Into<io::Error>>(what: impl Into<String>, r: Result<T, E>) -> Result<T, SetupError> {
    r.map_err(|e| SetupError { step: what.into(), source: e.into() })
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Device nodes bound from the host: harmless character devices that programs expect.
const DEVICES: [&str; 6] = ["null", "zero", "full", "random", "urandom", "tty"];

/// Reads the spec the daemon sends as the first frame on the control socket.
pub fn read_spec() -> Result<ContainerSpec, sandlot_protocol::FrameError> {
    // SAFETY: the launcher placed the control socket at CONTROL_FD; ManuallyDrop keeps it open for the
    // supervisor, which takes ownership of the same fd afterwards.
    let sock = std::mem::ManuallyDrop::new(unsafe {
        <std::os::unix::net::UnixStream as std::os::fd::FromRawFd>::from_raw_fd(sandlot_protocol::CONTROL_FD)
    });
    let mut reader: &std::os::unix::net::UnixStream = &sock;
    Ok(sandlot_protocol::read_frame::<ContainerSpec, _>(&mut reader)?.header)
}

/// Builds the root described by `spec` and enters it. Called once, in the sandbox's first process.
pub fn enter(spec: &ContainerSpec) -> Result<(), SetupError> {
    // The daemon has already put this process in the sandbox cgroup; a cgroup namespace rooted there
    // hides the host's cgroup paths from /proc/self/cgroup.
    step("unshare cgroup namespace", unshare(CloneFlags::CLONE_NEWCGROUP).map_err(errno))?;
    // Nothing mounted from here on may propagate back to the host.
    step(
        "make / private",
        mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>).map_err(errno),
    )?;

    let root = &spec.root;
    // overlayfs resolves its options from the current directory and shows them verbatim in the
    // sandbox's /proc/self/mountinfo: relative paths keep the host's directory layout out of sight.
    let base = spec.upper.parent().unwrap_or(Path::new("/"));
    step("chdir to the layer", chdir(base).map_err(errno))?;
    let rel = |p: &Path| relative(base, p).display().to_string();
    let lower = spec.lower.iter().map(|p| rel(p)).collect::<Vec<_>>().join(":");
    let opts = format!("lowerdir={lower},upperdir={},workdir={},userxattr", rel(&spec.upper), rel(&spec.work));
    step(
        "mount overlay root",
        mount(Some("overlay"), root, Some("overlay"), MsFlags::empty(), Some(opts.as_str())).map_err(errno),
    )?;

    for (src, dst) in &spec.ro_binds {
        bind_readonly(src, &mount_point(root, dst)?)?;
    }

    let proc_dir = mount_point(root, Path::new("proc"))?;
    step(
        "mount /proc",
        mount(
            Some("proc"),
            &proc_dir,
            Some("proc"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
            None::<&str>,
        )
        .map_err(errno),
    )?;
    setup_dev(root, spec.tmp_mb)?;
    if !spec.build_step {
        let tmp_opts = format!("mode=1777,size={}m", spec.tmp_mb);
        step(
            "mount /tmp",
            mount(
                Some("tmpfs"),
                &mount_point(root, Path::new("tmp"))?,
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some(tmp_opts.as_str()),
            )
            .map_err(errno),
        )?;
    }

    // pivot_root(".", ".") stacks the old root under the new one; detaching it leaves no path back.
    step("chdir to new root", chdir(root.as_path()).map_err(errno))?;
    step("pivot_root", pivot_root(".", ".").map_err(errno))?;
    step("detach old root", umount2(".", MntFlags::MNT_DETACH).map_err(errno))?;
    step("chdir /", chdir("/").map_err(errno))?;

    mask_proc()?;
    boot_id()?;
    step("set hostname", sethostname(&spec.hostname).map_err(errno))?;
    step("bring up loopback", loopback_up())?;
    umask(Mode::from_bits_truncate(0o022));
    if spec.layers.landlock {
        let enforced = step("landlock", crate::landlock::restrict_to("/"))?;
        if enforced.abi == 0 {
            eprintln!("warning: this kernel has no Landlock; the sandbox runs without that layer");
        }
    }
    Ok(())
}

/// Kernel interfaces in /proc that a sandbox has no business reading or writing, hidden the way
/// Docker's default masks do: files under /dev/null, directories under an empty read-only tmpfs, and the
/// sysctl/irq/bus trees read-only.
fn mask_proc() -> Result<(), SetupError> {
    for f in [
        "/proc/kcore",
        "/proc/keys",
        "/proc/timer_list",
        "/proc/sysrq-trigger",
        "/proc/latency_stats",
        "/proc/sched_debug",
        "/proc/kallsyms",
        "/proc/kpagecount",
        "/proc/kpageflags",
    ] {
        if Path::new(f).exists() {
            step(
                format!("mask {f}"),
                mount(Some("/dev/null"), f, None::<&str>, MsFlags::MS_BIND, None::<&str>).map_err(errno),
            )?;
        }
    }
    for d in ["/proc/acpi", "/proc/scsi", "/proc/asound"] {
        if Path::new(d).is_dir() {
            step(
                format!("mask {d}"),
                mount(Some("tmpfs"), d, Some("tmpfs"), MsFlags::MS_RDONLY, Some("size=0")).map_err(errno),
            )?;
        }
    }
    for d in ["/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs"] {
        if Path::new(d).is_dir() {
            bind_readonly(Path::new(d), Path::new(d))?;
        }
    }
    Ok(())
}

/// Gives this start of the sandbox a boot id of its own, as LXC does: the kernel's
/// /proc/sys/kernel/random/boot_id is the host's, the same for every sandbox and across a sandbox's
/// stop and start, where programs (and E2B's SDK tests) read it to tell a cold boot from a resume.
/// A pause freezes the processes and keeps it; a stop and start makes a new one. The file is written
/// on the sandbox's /dev tmpfs before any of its code runs, bound read-only over the kernel's, and
/// unlinked: the bind keeps it, no name shows it.
fn boot_id() -> Result<(), SetupError> {
    use rand::Rng;
    let target = Path::new("/proc/sys/kernel/random/boot_id");
    if !target.is_file() {
        return Ok(());
    }
    let b: [u8; 16] = rand::thread_rng().gen();
    // A version 4 UUID, lowercase, with the kernel's trailing newline.
    let hex = |r: std::ops::Range<usize>| b[r].iter().map(|x| format!("{x:02x}")).collect::<String>();
    let (v, var) = (0x40 | (b[6] & 0x0f), 0x80 | (b[8] & 0x3f));
    let id = format!("{}-{}-{v:02x}{:02x}-{var:02x}{:02x}-{}\n", hex(0..4), hex(4..6), b[7], b[9], hex(10..16));
    let src = Path::new("/dev/.boot_id");
    step("write the boot id", fs::write(src, id))?;
    bind_readonly(src, target)?;
    step("unlink the boot id's source", fs::remove_file(src))?;
    Ok(())
}

/// `target` relative to directory `base` (both absolute).
fn relative(base: &Path, target: &Path) -> PathBuf {
    let b: Vec<_> = base.components().collect();
    let t: Vec<_> = target.components().collect();
    let common = b.iter().zip(&t).take_while(|(x, y)| x == y).count();
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out
}

/// Where `p` (absolute inside the sandbox) is under `root`, checked to be a directory all the way
/// down. The root holds the sandbox's layer and the image: a symlink there (planted by a previous run
/// of a persistent sandbox, or shipped in an image) would make `mount` follow it to a path of this
/// namespace's old root. Nothing of the sandbox runs yet, so what lstat sees is what mount gets.
fn mount_point(root: &Path, p: &Path) -> Result<PathBuf, SetupError> {
    let mut at = root.to_path_buf();
    for c in p.components().filter(|c| matches!(c, std::path::Component::Normal(_))) {
        at.push(c);
        let meta = step(format!("mount point {}", p.display()), fs::symlink_metadata(&at))?;
        if !meta.is_dir() {
            return step(
                format!("mount point {}", p.display()),
                Err(io::Error::other(format!(
                    "{} is not a directory (a symlink or file in the image or layer)",
                    at.display()
                ))),
            );
        }
    }
    Ok(at)
}

/// Binds `src` at `dst` and makes it read-only. Flags the host mount already has (nosuid, nodev…) are
/// locked in a user namespace and must be repeated in the remount.
fn bind_readonly(src: &Path, dst: &Path) -> Result<(), SetupError> {
    let what = format!("bind {} read-only", src.display());
    step(&what, mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>).map_err(errno))?;
    let current = step(&what, statvfs(dst).map_err(errno))?.flags();
    let mut flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    for (have, want) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_NOATIME, MsFlags::MS_NOATIME),
        (FsFlags::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (FsFlags::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if current.contains(have) {
            flags |= want;
        }
    }
    step(&what, mount(None::<&str>, dst, None::<&str>, flags, None::<&str>).map_err(errno))?;
    Ok(())
}

/// A tmpfs /dev with a handful of host character devices bound in (mknod is not allowed in a user
/// namespace, and should not be), a private devpts and /dev/shm.
fn setup_dev(root: &Path, shm_mb: u64) -> Result<(), SetupError> {
    let dev = mount_point(root, Path::new("dev"))?;
    step(
        "mount /dev",
        mount(Some("tmpfs"), &dev, Some("tmpfs"), MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC, Some("mode=755,size=64k"))
            .map_err(errno),
    )?;
    for name in DEVICES {
        let target = dev.join(name);
        step(format!("create /dev/{name}"), File::create(&target))?;
        step(
            format!("bind /dev/{name}"),
            mount(Some(&Path::new("/dev").join(name)), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
                .map_err(errno),
        )?;
    }
    for (link, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        step(format!("link /dev/{link}"), symlink(target, dev.join(link)))?;
    }
    step("mkdir /dev/pts", fs::create_dir(dev.join("pts")))?;
    step(
        "mount /dev/pts",
        mount(
            Some("devpts"),
            &dev.join("pts"),
            Some("devpts"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some("newinstance,ptmxmode=0666,mode=0620"),
        )
        .map_err(errno),
    )?;
    step("mkdir /dev/shm", fs::create_dir(dev.join("shm")))?;
    let shm_opts = format!("mode=1777,size={shm_mb}m");
    step(
        "mount /dev/shm",
        mount(
            Some("tmpfs"),
            &dev.join("shm"),
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(shm_opts.as_str()),
        )
        .map_err(errno),
    )?;
    Ok(())
}

/// Sets IFF_UP on `lo` of the sandbox's fresh network namespace (it starts down).
fn loopback_up() -> io::Result<()> {
    // SAFETY: socket() has no memory-safety preconditions; the fd is owned by `sock` below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by socket() and is owned by nothing else.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zeroed is a valid initial state.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let name = CString::new("lo").expect("no NUL");
    for (i, b) in name.as_bytes_with_nul().iter().enumerate() {
        req.ifr_name[i] = *b as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS reads the interface name and writes the flags union of a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the union member written by SIOCGIFFLAGS is ifru_flags.
    unsafe { req.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short };
    // SAFETY: SIOCSIFFLAGS reads a valid ifreq.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_must_be_directories_all_the_way_down() {
        let root = std::env::temp_dir().join(format!("sandlot-mountpoint-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("usr/lib")).unwrap();
        fs::create_dir_all(root.join("real")).unwrap();
        symlink("/", root.join("proc")).unwrap();
        symlink("real", root.join("dev")).unwrap();
        assert_eq!(mount_point(&root, Path::new("/usr/lib")).unwrap(), root.join("usr/lib"));
        for bad in ["proc", "/dev", "proc/sys"] {
            let err = mount_point(&root, Path::new(bad)).unwrap_err().to_string();
            assert!(err.contains("is not a directory"), "{bad}: {err}");
        }
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn relative_paths_climb_and_descend() {
        let base = Path::new("/s/layers/sandboxes/sb_1");
        assert_eq!(relative(base, Path::new("/s/layers/sandboxes/sb_1/upper")), PathBuf::from("upper"));
        assert_eq!(relative(base, Path::new("/s/images/host/rootfs")), PathBuf::from("../../../images/host/rootfs"));
    }
}
