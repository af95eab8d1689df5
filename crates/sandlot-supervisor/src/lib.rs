//! The supervisor: pid 1 of every sandbox.
//!
//! It is started by the Linux driver after the sandbox's root is in place and speaks the framed protocol of
//! `sandlot-protocol` on one socket. It spawns commands (each in its own process group), reaps every
//! zombie (orphans included, as any init must), pipes output back, enforces per-command timeouts by
//! killing the group, and performs file operations from inside the sandbox's own view, with the requesting
//! user's fsuid, so a planted symlink or `..` can only ever reach the sandbox's own files.
//!
//! It holds no host secret and trusts nothing from the workload. Its threads: one reads requests, one reaps
//! children, one per output pipe or pty, one per file operation, one per directory watch; all writes to the socket go through
//! `Outbox`, which writes whole frames under a lock.
//!
//! Pid 1 must never die from load: its death ends the sandbox. Every thread is started with
//! `spawn_thread`, whose failure (EAGAIN once the sandbox's pids limit, which counts threads, is
//! reached) becomes an error answer to the request that needed it; inbound connections and file
//! operations are capped per sandbox; every queue between the control loop and a slow consumer is bounded.

#![deny(missing_docs)]

mod credit;
mod files;
mod harden;
mod ports;
mod process;
mod pty;
pub mod seccomp;
mod watch;

use std::io::{self, BufReader, Write};
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use sandlot_protocol::{encode, read_frame, Event, FileErrorKind, FrameError, Request, CONTROL_FD, MAX_HEADER};

/// A thread the supervisor needed for a request could not be started. Thread creation fails (EAGAIN)
/// when the sandbox's pids limit is reached; the message says so and what to do, and is what the
/// daemon's caller reads.
#[derive(Debug)]
pub(crate) struct ThreadError(io::Error);

impl std::fmt::Display for ThreadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the sandbox is at its process limit (pids, which counts threads) and its supervisor cannot start a \
             thread for this request ({}); retry once fewer processes run, or create the sandbox with a larger \
             pids limit",
            self.0
        )
    }
}

impl std::error::Error for ThreadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// Starts a named thread, or says why it could not; the caller answers its request with the error
/// instead of panicking.
pub(crate) fn spawn_thread(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), ThreadError> {
    std::thread::Builder::new().name(name.into()).spawn(f).map(drop).map_err(ThreadError)
}

/// One of at most `max` things running at once (file operations, inbound connections), counted in
/// `count` from [`Permit::take`] until the permit is dropped, however the work ends.
pub(crate) struct Permit(Arc<std::sync::atomic::AtomicUsize>);

impl Permit {
    /// A permit, or `None` when `max` are taken.
    pub(crate) fn take(count: &Arc<std::sync::atomic::AtomicUsize>, max: usize) -> Option<Permit> {
        use std::sync::atomic::Ordering;
        if count.fetch_add(1, Ordering::SeqCst) >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Permit(Arc::clone(count)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The write half of the control socket, shared by every thread.
#[derive(Clone)]
pub(crate) struct Outbox {
    sock: Arc<Mutex<UnixStream>>,
}

impl Outbox {
    /// Sends one event. A broken socket means the daemon is gone: the sandbox has no reason to live.
    /// An event too large for one frame was never written, so the socket is fine: an answer of that
    /// size (a listing of 10 000 long paths) becomes its request's `too_large` failure, and pid 1
    /// goes on.
    pub(crate) fn send(&self, ev: &Event, payload: &[u8]) {
        let frame = match encode(ev, payload) {
            Ok(frame) => frame,
            Err(e) => {
                match ev {
                    Event::Done { req, .. } => self.send(
                        &Event::Failed {
                            req: *req,
                            kind: FileErrorKind::TooLarge,
                            message: format!(
                                "the answer is over the {} MiB a supervisor message may hold; ask for less \
                                 (a smaller depth, a subdirectory)",
                                MAX_HEADER >> 20
                            ),
                        },
                        &[],
                    ),
                    _ => eprintln!("supervisor: an event could not be encoded ({e}); it is dropped"),
                }
                return;
            }
        };
        let mut sock = lock(&self.sock);
        if let Err(e) = sock.write_all(&frame) {
            eprintln!("supervisor: control socket write failed ({e}); exiting");
            std::process::exit(70);
        }
    }
}

/// Options fixed by the daemon for the life of the sandbox.
#[derive(Debug, Clone)]
pub struct Options {
    /// Install the seccomp profile on the supervisor, and so on every process it spawns (off only for
    /// the escape suite's layer-by-layer tests).
    pub seccomp: bool,
    /// Open `cgroup.procs` files of the command leaf; each command writes itself into them before exec.
    pub work_cgroup_fds: Vec<i32>,
    /// RLIMIT_FSIZE for commands (0 = unlimited).
    pub max_file_bytes: u64,
}

/// Runs the supervisor on the control socket at [`CONTROL_FD`]. Never returns.
pub fn run(opts: Options) -> ! {
    // SAFETY: the driver places the control socket at CONTROL_FD before exec; nothing else owns it.
    let sock = unsafe { UnixStream::from_raw_fd(CONTROL_FD) };
    // dup2 cleared close-on-exec on these; no command may inherit them.
    for fd in std::iter::once(CONTROL_FD).chain(opts.work_cgroup_fds.iter().copied()) {
        // SAFETY: fcntl on our own fd.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
    match serve(sock, opts) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            eprintln!("supervisor: {e}");
            std::process::exit(70);
        }
    }
}

fn serve(sock: UnixStream, opts: Options) -> io::Result<()> {
    // SIGCHLD is consumed by the reaper thread with sigwait, so it must be blocked in every thread; threads
    // inherit the mask, and std's Command resets it in children before exec.
    process::block_sigchld()?;
    let outbox = Outbox { sock: Arc::new(Mutex::new(sock.try_clone()?)) };
    // The seccomp profile goes on the supervisor itself, before it starts any thread: every thread and
    // every command inherits it (filters cannot be removed), and no command pays for installing it
    // (compiling a ~700-instruction filter was a tenth of the supervisor's time per exec). The
    // supervisor needs nothing the profile denies once the root is built.
    if opts.seccomp {
        let filter = seccomp::Filter::sandbox().map_err(|e| io::Error::other(e.to_string()))?;
        // SAFETY: installs a prepared BPF program on this (still single-threaded) process; the process
        // holds CAP_SYS_ADMIN in its user namespace, as PR_SET_SECCOMP without no_new_privs requires.
        if unsafe { filter.install() } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let procs =
        process::Table::new(outbox.clone(), harden::Hardening::new(opts.work_cgroup_fds.clone(), opts.max_file_bytes)?);
    procs.start_reaper().map_err(io::Error::other)?;
    let uploads = files::Uploads::new(opts.max_file_bytes);
    let credits = credit::Credits::default();
    let ports = ports::Ports::new(credits.clone());
    let watches = watch::Watches::default();

    outbox.send(&Event::Ready { version: sandlot_protocol::VERSION }, &[]);
    let mut reader = BufReader::with_capacity(256 << 10, sock);
    loop {
        let frame = match read_frame::<Request, _>(&mut reader) {
            Ok(f) => f,
            Err(FrameError::Closed) => return Ok(()),
            Err(e) => return Err(io::Error::other(e.to_string())),
        };
        match frame.header {
            Request::Spawn(spawn) => procs.spawn(spawn),
            Request::Stdin { proc, eof } => procs.stdin(proc, &frame.payload, eof),
            Request::Signal { proc, signal } => procs.signal(proc, signal),
            Request::Adopt { proc, left_by } => procs.adopt(proc, left_by),
            Request::Resize { proc, rows, cols } => procs.resize(proc, sandlot_protocol::PtySize { rows, cols }),
            Request::Watch { id, uid, path, recursive } => watches.start(&outbox, id, uid, path, recursive),
            Request::Unwatch { id } => watches.stop(id),
            Request::WatchCredit { id, events } => watches.credit(id, events),
            Request::File { req, uid, op } => files::start(&outbox, &uploads, &credits, req, uid, op),
            Request::Data { req } => uploads.data(req, frame.payload),
            Request::End { req } => uploads.end(req),
            Request::Abort { req } => {
                uploads.abort(req);
                credits.close(req);
            }
            Request::Credit { id, bytes } => credits.give(id, bytes),
            Request::Connect { conn, port } => ports.connect(&outbox, conn, port),
            Request::StreamData { conn } => ports.data(conn, frame.payload),
            Request::StreamClose { conn } => {
                ports.close(conn);
                credits.close(conn);
            }
        }
    }
}

/// Locks `m`, going on with the data of a holder that panicked: every value kept under these locks
/// (the process table, stdin queues, stream windows, open uploads and connections) is whole after each
/// statement, and the control socket is written one whole encoded frame per call, so a panic in one
/// thread never leaves it half-changed and pid 1 goes on serving the others.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` with `guard`, ignoring poison as [`lock`] does.
pub(crate) fn wait<'a, T>(cv: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_refused_at_the_pids_limit_says_which_limit_and_what_to_do() {
        let e = ThreadError(io::Error::from_raw_os_error(libc::EAGAIN));
        let message = e.to_string();
        assert!(message.starts_with("the sandbox is at its process limit (pids, which counts threads)"), "{message}");
        assert!(message.contains(&io::Error::from_raw_os_error(libc::EAGAIN).to_string()), "{message}");
        assert!(message.ends_with("or create the sandbox with a larger pids limit"), "{message}");
        let source = std::error::Error::source(&e).expect("the OS error is kept as the source");
        assert_eq!(source.to_string(), io::Error::from_raw_os_error(libc::EAGAIN).to_string());
    }
}
