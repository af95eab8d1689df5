//! Daemon side: clones a sandbox's first process into its namespaces and hands it the control socket.
//!
//! The clone happens on one long-lived launcher thread because PR_SET_PDEATHSIG fires when the *thread*
//! that created the child exits, not the process: a clone from a short-lived worker thread would kill the
//! sandbox when that thread ended. With the signal tied to a thread that lives as long as the daemon, a
//! daemon crash (even kill -9) takes every supervisor down, and the kernel then kills the rest of each
//! sandbox's pid namespace.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::mpsc;
use std::thread;

use nix::sched::{clone, CloneFlags};
use nix::sys::signal::Signal;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::cgroup::SandboxCgroup;
use crate::{ContainerSpec, IdRange, UID_RANGE};

/// Hidden subcommand of the `sandlot` binary that runs the sandbox side.
pub const SUPERVISOR_ARG: &str = "__supervisor";

/// A sandbox process that has been started.
#[derive(Debug)]
pub struct Launched {
    /// Host pid of the sandbox's pid 1.
    pub pid: i32,
    /// Daemon end of the control socket.
    pub control: OwnedFd,
    /// Read end of the supervisor's stderr (setup errors, panics).
    pub log: OwnedFd,
}

/// What to launch.
pub struct LaunchRequest {
    /// Root to build.
    pub spec: ContainerSpec,
    /// Host id range of the sandbox.
    pub ids: IdRange,
    /// Cgroup the process joins before it runs anything.
    pub cgroup: SandboxCgroup,
    /// An image root to show the sandbox through an idmapped mount ([`crate::idmap`]).
    pub image: Option<ImageMount>,
}

/// An image root and where the sandbox's overlay expects it as its lower layer.
#[derive(Debug, Clone)]
pub struct ImageMount {
    /// The image's root on the host (a read-only subvolume of the image store).
    pub root: std::path::PathBuf,
    /// The empty directory it is mounted on, in the daemon's namespace only until the clone has copied
    /// it (the sandbox's spec names this as its lower layer).
    pub at: std::path::PathBuf,
}

type Job = (LaunchRequest, mpsc::Sender<io::Result<Launched>>);

/// Handle to the launcher thread.
#[derive(Clone)]
pub struct Launcher {
    tx: mpsc::Sender<Job>,
}

impl Launcher {
    /// Starts the launcher thread. Call once, early, from the daemon.
    pub fn start() -> io::Result<Self> {
        // A sandbox's memory bomb must hit user code, never pid 1. Lowering a score needs CAP_SYS_RESOURCE
        // in the host namespace, which the sandbox does not have, so the daemon lowers its own (as dockerd
        // does) and each supervisor inherits it. Hosts that withhold CAP_SYS_RESOURCE even from root refuse
        // this; the supervisor then still raises its children to +500, which alone makes them the OOM
        // killer's first choice within the sandbox's cgroup.
        if let Err(e) = fs::write("/proc/self/oom_score_adj", "-999") {
            tracing::info!("could not lower the daemon's oom_score_adj ({e}); relying on +500 for sandbox processes");
        }
        let (tx, rx) = mpsc::channel::<Job>();
        thread::Builder::new().name("sandlot-launcher".into()).spawn(move || {
            for (req, reply) in rx {
                let _ = reply.send(launch(req));
            }
        })?;
        Ok(Launcher { tx })
    }

    /// Launches one sandbox process (blocking; a few hundred microseconds).
    pub fn launch(&self, req: LaunchRequest) -> io::Result<Launched> {
        let (tx, rx) = mpsc::channel();
        self.tx.send((req, tx)).map_err(|_| io::Error::other("launcher thread is gone"))?;
        rx.recv().map_err(|_| io::Error::other("launcher thread is gone"))?
    }
}

/// Waits for a sandbox's pid 1 to end (blocking) and returns how it ended.
pub fn wait(pid: i32) -> io::Result<WaitStatus> {
    loop {
        match waitpid(Pid::from_raw(pid), None) {
            Err(nix::Error::EINTR) => continue,
            r => return r.map_err(|e| io::Error::from_raw_os_error(e as i32)),
        }
    }
}

fn cstring(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in launch argument"))
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: socketpair writes two fds into the array on success.
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0, fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both fds were just created and are owned by nothing else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Duplicates `fd` to a number >= 100, so that the child's dup2 onto 0..=3 can never overwrite a source.
fn high(fd: &OwnedFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC returns a new fd owned by the caller.
    let n = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 100) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: n is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(n) })
}

fn launch(req: LaunchRequest) -> io::Result<Launched> {
    let spec_frame = sandlot_protocol::encode(&req.spec, &[]).map_err(io::Error::other)?;
    // Everything the child touches is prepared here: between clone and exec it may only make syscalls.
    let exe = cstring("/proc/self/exe")?;
    // The spec travels as the first frame on the control socket, not in argv: argv is visible to every
    // process in the sandbox through /proc/1/cmdline, and the spec names host paths.
    let argv = [cstring("sandlot")?, cstring(SUPERVISOR_ARG)?];
    let envp = [cstring("PATH=/usr/local/bin:/usr/bin:/bin")?, cstring("LANG=C.UTF-8")?];
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    envp_p.push(std::ptr::null());

    let (control, child_sock) = socketpair()?;
    let (go_r, go_w) = pipe()?;
    let (log, log_w) = pipe()?;
    let devnull = fs::OpenOptions::new().read(true).write(true).open("/dev/null")?;
    // The command leaf's cgroup.procs files, opened here (by host root) and handed over at fds 4, 5, …
    let mut work = Vec::new();
    for path in req.cgroup.work_procs() {
        let f = fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        work.push(high(&OwnedFd::from(f))?);
    }
    let work_raw: Vec<RawFd> = work.iter().map(|f| f.as_raw_fd()).collect();
    let (c_sock, c_go_r, c_log_w, c_null) = (high(&child_sock)?, high(&go_r)?, high(&log_w)?, high(&devnull.into())?);
    let (fd_sock, fd_go_r, fd_go_w, fd_log, fd_null) =
        (c_sock.as_raw_fd(), c_go_r.as_raw_fd(), go_w.as_raw_fd(), c_log_w.as_raw_fd(), c_null.as_raw_fd());

    let child = Box::new(move || -> isize {
        // SAFETY: only async-signal-safe syscalls on fds and strings prepared before the clone.
        unsafe {
            child_main(
                fd_go_r,
                fd_go_w,
                fd_null,
                fd_log,
                fd_sock,
                &work_raw,
                exe.as_ptr(),
                argv_p.as_ptr(),
                envp_p.as_ptr(),
            )
        }
    });
    // The image is mounted (idmapped to this slot) where the child's copy of the mount table will
    // have it, and unmounted from the daemon's own table right after the clone.
    let image_mount = match &req.image {
        Some(m) => {
            fs::create_dir_all(&m.at)?;
            let tree = crate::idmap::image_tree(&m.root, req.ids.base)?;
            crate::idmap::attach(std::os::fd::AsFd::as_fd(&tree), &m.at)?;
            Some(m.at.clone())
        }
        None => None,
    };
    let unmount_image = || {
        if let Some(at) = &image_mount {
            if let Err(e) = nix::mount::umount2(at, nix::mount::MntFlags::MNT_DETACH) {
                tracing::warn!("unmounting the image at {} from the daemon: {e}", at.display());
            }
        }
    };
    let mut stack = vec![0u8; 128 << 10];
    let flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS;
    // SAFETY: the child runs `child_main` on its own copy of the address space (no CLONE_VM) and execs.
    let pid = unsafe { clone(child, &mut stack, flags, Some(Signal::SIGCHLD as i32)) }
        .map_err(|e| io::Error::from_raw_os_error(e as i32));
    unmount_image();
    let pid = pid?.as_raw();

    let finish = || -> io::Result<()> {
        // The daemon (root) writes the maps: sandbox ids 0..65536 land on the sandbox's own host range.
        let map = format!("0 {} {UID_RANGE}\n", req.ids.base);
        let ctx = |what: &'static str| move |e: io::Error| io::Error::new(e.kind(), format!("{what}: {e}"));
        fs::write(format!("/proc/{pid}/uid_map"), &map).map_err(ctx("write uid_map"))?;
        fs::write(format!("/proc/{pid}/gid_map"), &map).map_err(ctx("write gid_map"))?;
        req.cgroup.add(pid).map_err(io::Error::other)?;
        req.cgroup.delegate(req.ids.base).map_err(io::Error::other)?;
        // The socket buffer takes the spec frame before the child reads it (it is a few hundred bytes).
        let mut sock = std::os::unix::net::UnixStream::from(control.try_clone()?);
        std::io::Write::write_all(&mut sock, &spec_frame).map_err(ctx("send spec"))?;
        drop(sock);
        // Release the child: one byte on the go pipe.
        // SAFETY: writing one byte from a valid buffer to an fd we own.
        if unsafe { libc::write(go_w.as_raw_fd(), [1u8].as_ptr().cast(), 1) } != 1 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    };
    if let Err(e) = finish() {
        // SAFETY: plain syscalls on the pid we just cloned.
        unsafe { libc::kill(pid, libc::SIGKILL) };
        let _ = wait(pid);
        return Err(e);
    }
    Ok(Launched { pid, control, log })
}

/// The cloned child until exec. Runs in a copy of a multi-threaded process, so only raw syscalls.
///
/// # Safety
/// All pointers must be valid NUL-terminated strings / NULL-terminated arrays, as prepared by `launch`.
#[allow(clippy::too_many_arguments)]
unsafe fn child_main(
    go_r: RawFd,
    go_w: RawFd,
    null: RawFd,
    log: RawFd,
    sock: RawFd,
    work: &[RawFd],
    exe: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
) -> isize {
    // SAFETY: (whole body) raw syscalls with valid fds and the caller's pointers.
    unsafe {
        // Our copy of the write end must go, or a dead daemon would never give us EOF below.
        libc::close(go_w);
        let mut b = 0u8;
        if libc::read(go_r, (&mut b as *mut u8).cast(), 1) != 1 {
            libc::_exit(1);
        }
        // Until now we carry the daemon's host uid 0, which the new namespace does not map: become the
        // namespace's root (host uid `base`), or exec would drop every capability.
        // Raw syscalls, not glibc's wrappers: those broadcast the change to every thread glibc believes
        // exists, and after a raw clone of a multi-threaded daemon it still lists threads that are not
        // here, so the wrapper would wait for them forever.
        if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
            || libc::syscall(libc::SYS_setresgid, 0, 0, 0) != 0
            || libc::syscall(libc::SYS_setresuid, 0, 0, 0) != 0
        {
            libc::_exit(3);
        }
        // Die with the launcher thread, i.e. with the daemon. Set after the uid change, which clears it.
        // Had the daemon died in between, the supervisor's first write on the control socket fails.
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        if libc::dup2(null, 0) < 0 || libc::dup2(log, 1) < 0 || libc::dup2(log, 2) < 0 || libc::dup2(sock, 3) < 0 {
            libc::_exit(2);
        }
        for (i, fd) in work.iter().enumerate() {
            if libc::dup2(*fd, crate::WORK_CGROUP_FD + i as i32) < 0 {
                libc::_exit(2);
            }
        }
        // Nothing else of the daemon crosses into the sandbox, not even a descriptor some parent of the
        // daemon forgot to mark close-on-exec.
        let first_free = (crate::WORK_CGROUP_FD + work.len() as i32) as u32;
        if libc::syscall(libc::SYS_close_range, first_free, u32::MAX, 0u32) != 0 {
            libc::_exit(4);
        }
        libc::execve(exe, argv, envp);
        libc::_exit(127)
    }
}
