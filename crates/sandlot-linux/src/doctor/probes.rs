//! The checks that try the real thing and undo it: a user namespace, overlayfs in one, the seccomp
//! filter actions, the socket-lookup BPF program; and Landlock's ABI.

use std::ffi::CString;
use std::fs;
use std::io;
use std::path::Path;

use super::{check, ok, read, Check, Verdict};
use crate::cgroup::parse_mountinfo;

pub(super) fn user_namespaces() -> Check {
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
pub(super) fn overlay_in_userns(state_dir: &Path, modules: &super::host::Modules) -> Check {
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
    // overlayfs leaves `work/work` with mode 000; its owner (root, or an unprivileged caller) may
    // still chmod it, without which an unprivileged caller could not list and remove it.
    let _ = fs::set_permissions(dir.join("work/work"), std::os::unix::fs::PermissionsExt::from_mode(0o700));
    let cleanup = match fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => format!("; could not remove {}: {e}", dir.display()),
        _ => String::new(),
    };
    let fstype = fs_type(&base);
    let listed =
        read("/proc/filesystems").is_ok_and(|f| f.lines().any(|l| l.split_whitespace().last() == Some("overlay")));
    match result {
        Ok(()) => ok("overlay-userns", format!("overlayfs mounts in a user namespace (upper on {fstype}){cleanup}")),
        // `sandlot serve` loads the module itself before its first sandbox (`kmod::filesystem`).
        Err(_) if !listed && modules.has("overlay").is_some() => ok(
            "overlay-userns",
            "the overlay module is not loaded yet; serve loads it (`modprobe overlay`, then run the doctor again to \
             try the mount)",
        ),
        Err(e) => check(
            "overlay-userns",
            Verdict::Missing,
            format!("overlayfs in a user namespace, upper on {fstype} ({}): {e}{cleanup}", base.display()),
            if listed {
                "boot Linux 5.11 or later; keep the state directory on ext4, xfs or btrfs (not on overlayfs, or tmpfs before 6.6)"
            } else {
                "build or install the kernel's overlay module (CONFIG_OVERLAY_FS)"
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

pub(super) fn landlock(on: bool, abi: i64) -> Check {
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

pub(super) fn seccomp(on: bool) -> Check {
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

pub(super) fn sk_lookup(root: bool) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn landlock_absent_or_off_is_degraded_and_abi_2_is_ok() {
        assert_eq!(landlock(true, 0).verdict, Verdict::Degraded);
        assert_eq!(landlock(false, 6).verdict, Verdict::Degraded);
        let debian = landlock(true, 2);
        assert_eq!(debian.verdict, Verdict::Ok);
        assert!(debian.found.starts_with("ABI 2"));
    }

    #[test]
    fn the_user_namespace_and_overlay_probes_leave_nothing_behind() {
        let dir = std::env::temp_dir().join(format!("sandlot-doctor-unit-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let userns = user_namespaces();
        let overlay = overlay_in_userns(&dir, &super::super::host::Modules::of(""));
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
