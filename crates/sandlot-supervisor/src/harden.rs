//! What every spawned process goes through between fork and exec, in this order: capability bounding
//! set, groups, gid, uid, capabilities, working directory, OOM score, no_new_privs, rlimits. (The seccomp
//! filter is inherited from the supervisor, which installs it on itself at start.)
//!
//! Everything is prepared before the fork ([`Hardening::new`]); the child only makes raw syscalls.
//! Landlock is not here: the supervisor restricts itself once at start-up, and every process inherits
//! that domain (so processes of different execs can still signal each other and share abstract sockets).

use std::ffi::CString;
use std::io;

/// Capabilities sandbox `root` keeps (inside its own user namespace). Docker's default set minus
/// CAP_NET_RAW (raw and packet sockets), CAP_MKNOD and CAP_AUDIT_WRITE. Notably absent: SYS_ADMIN,
/// SYS_PTRACE, NET_ADMIN, SYS_MODULE, SYS_TIME, DAC_READ_SEARCH.
const ROOT_CAPS: [u32; 10] = [
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    5,  // CAP_KILL
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    8,  // CAP_SETPCAP
    10, // CAP_NET_BIND_SERVICE
    18, // CAP_SYS_CHROOT
];

/// Gives the calling thread of the supervisor the capabilities a command of `uid` gets: [`ROOT_CAPS`]
/// for root, none for anyone else (capabilities are per thread on Linux). File operations run on a
/// thread of pid 1, which otherwise holds every capability of the sandbox's user namespace: with them a
/// `root` (or, through CAP_SYS_PTRACE, any) file operation could read pid 1's own `/proc/1/environ` or
/// memory maps. Irreversible for the thread, which ends with its operation.
pub(crate) fn limit_thread_caps(uid: u32) -> io::Result<()> {
    let mask = if uid == 0 { ROOT_CAPS.iter().fold(0u64, |m, c| m | (1u64 << c)) } else { 0 };
    let data = [
        CapData { effective: mask as u32, permitted: mask as u32, inheritable: 0 },
        CapData { effective: (mask >> 32) as u32, permitted: (mask >> 32) as u32, inheritable: 0 },
    ];
    let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    // SAFETY: capset reads a valid header and two data structs; pid 0 is the calling thread.
    if unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Open files a sandbox process may hold.
const NOFILE: u64 = 65_536;

/// Prepared once per supervisor.
pub struct Hardening {
    work_cgroup_fds: Vec<i32>,
    max_file_bytes: u64,
    cap_last: u32,
    nofile: u64,
    oom_path: CString,
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

impl Hardening {
    /// Reads the kernel's capability count and the limits to apply.
    pub fn new(work_cgroup_fds: Vec<i32>, max_file_bytes: u64) -> io::Result<Self> {
        let cap_last = std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(40);
        // Raising the hard limit needs CAP_SYS_RESOURCE, which the sandbox lacks: stay within the
        // supervisor's own hard limit.
        let mut cur = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes into a valid rlimit.
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut cur) };
        let nofile = NOFILE.min(cur.rlim_max);
        Ok(Hardening {
            work_cgroup_fds,
            max_file_bytes,
            cap_last,
            nofile,
            oom_path: CString::new("/proc/self/oom_score_adj").expect("no NUL"),
        })
    }

    /// Applies everything to the calling (forked, not yet exec'd) process.
    ///
    /// # Safety
    /// Call only between fork and exec: it changes the process's credentials.
    pub unsafe fn apply(&self, uid: u32, gid: u32, cwd: &CString) -> io::Result<()> {
        let check = |rc: libc::c_long| if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) };
        let keep: &[u32] = if uid == 0 { &ROOT_CAPS } else { &[] };
        // SAFETY: raw syscalls on prepared data; this is a single-threaded child between fork and exec.
        unsafe {
            reset_signals();
            // Into the command leaf of the sandbox's cgroup ("0" = the writing process), while still
            // the sandbox's root: the leaf's limits, not the supervisor's headroom, apply from here on.
            for fd in &self.work_cgroup_fds {
                if libc::write(*fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Nothing but stdio crosses into the command: every other descriptor (the control socket
            // above all) is closed at exec. CLOEXEC rather than close, so std's exec-error pipe still works.
            check(libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, libc::CLOSE_RANGE_CLOEXEC))?;
            // Before the uid change, which makes the process non-dumpable and its /proc files root's.
            // User code is the OOM killer's first choice in the sandbox, never pid 1 (raising a score needs
            // no privilege; the supervisor itself may hold a lowered score inherited from the daemon).
            let fd = libc::open(self.oom_path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"500\n".as_ptr().cast(), 4);
                libc::close(fd);
            }
            // The bounding set limits what any later exec (file capabilities) could ever grant.
            for cap in 0..=self.cap_last {
                if !keep.contains(&cap) {
                    check(libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) as libc::c_long)?;
                }
            }
            check(libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()))?;
            check(libc::syscall(libc::SYS_setresgid, gid, gid, gid))?;
            // From root to a non-zero uid the kernel clears permitted and effective capabilities.
            check(libc::syscall(libc::SYS_setresuid, uid, uid, uid))?;
            if uid == 0 {
                let mask = keep.iter().fold(0u64, |m, c| m | (1u64 << c));
                let data = [
                    CapData { effective: mask as u32, permitted: mask as u32, inheritable: 0 },
                    CapData { effective: (mask >> 32) as u32, permitted: (mask >> 32) as u32, inheritable: 0 },
                ];
                let header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
                check(libc::syscall(libc::SYS_capset, &header, data.as_ptr()))?;
            }
            check(libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) as libc::c_long)?;
            // After the uid change, so the directory is checked with the user's own permissions.
            check(libc::chdir(cwd.as_ptr()) as libc::c_long)?;
            // No set-uid binary or file capability can raise privileges again.
            check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) as libc::c_long)?;
            let core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            check(libc::setrlimit(libc::RLIMIT_CORE, &core) as libc::c_long)?;
            let nofile = libc::rlimit { rlim_cur: self.nofile, rlim_max: self.nofile };
            check(libc::setrlimit(libc::RLIMIT_NOFILE, &nofile) as libc::c_long)?;
            // No single file larger than the writable layer may hold (SIGXFSZ / EFBIG past it).
            if self.max_file_bytes > 0 {
                let fsize = libc::rlimit { rlim_cur: self.max_file_bytes, rlim_max: self.max_file_bytes };
                check(libc::setrlimit(libc::RLIMIT_FSIZE, &fsize) as libc::c_long)?;
            }
        }
        Ok(())
    }
}

/// Gives the command the signal state a process started by `docker exec` (or a login) has: nothing
/// blocked, nothing ignored. Both survive exec: the supervisor's threads block SIGCHLD (its reaper
/// waits for it), and the daemon may have been started with signals ignored (a shell's background
/// job ignores SIGQUIT). dash's `wait` suspends with the mask it started with, so a SIGCHLD blocked
/// there left `sleep 1 & wait` waiting for ever. Handlers need no reset: exec resets them.
///
/// # Safety
/// Call only between fork and exec (it changes the process's signal dispositions).
unsafe fn reset_signals() {
    // SAFETY: sigset_t is plain data initialised by sigemptyset; sigprocmask and signal are
    // async-signal-safe and act on this process alone.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        // The kernel's sigaction, not libc's: glibc refuses to touch its own real-time signals (32,
        // 33), which an ignoring parent leaves ignored all the same.
        #[repr(C)]
        struct KernelSigaction {
            handler: libc::sighandler_t,
            flags: libc::c_ulong,
            restorer: usize,
            mask: u64,
        }
        let default = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
        for sig in 1..=64 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::syscall(libc::SYS_rt_sigaction, sig, &default, std::ptr::null_mut::<KernelSigaction>(), 8usize);
            }
        }
    }
}
