//! Spawning, reaping and piping processes.

use std::collections::HashMap;
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use sandlot_protocol::{Event, Spawn, Termination, MAX_PAYLOAD};

use crate::harden::Hardening;
use crate::Outbox;

/// How long output pipes may stay open after the process itself has exited (a daemonised grandchild
/// holding them). Past this the exit is reported and later output of that handle is dropped.
const PIPE_GRACE: Duration = Duration::from_millis(200);

struct Proc {
    pid: i32,
    stdin: Option<mpsc::Sender<StdinMsg>>,
    exit: Option<Termination>,
    open_pipes: u8,
    timed_out: bool,
    /// Dropping it wakes the timeout thread early.
    timer: Option<mpsc::Sender<()>>,
}

enum StdinMsg {
    Bytes(Vec<u8>),
    Eof,
}

#[derive(Default)]
struct Inner {
    by_handle: HashMap<u64, Proc>,
    by_pid: HashMap<i32, u64>,
}

/// All processes the daemon asked for, keyed by the daemon's handle.
#[derive(Clone)]
pub(crate) struct Table {
    inner: Arc<Mutex<Inner>>,
    out: Outbox,
    hardening: Arc<Hardening>,
}

/// Blocks SIGCHLD in the calling thread (and so in every thread created after).
pub(crate) fn block_sigchld() -> io::Result<()> {
    // SAFETY: sigset_t is plain data initialised by sigemptyset before use; pthread_sigmask only reads it.
    let rc = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut())
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

impl Table {
    pub(crate) fn new(out: Outbox, hardening: Hardening) -> Self {
        Table { inner: Arc::default(), out, hardening: Arc::new(hardening) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the thread that reaps every child, ours and orphans reparented to pid 1.
    pub(crate) fn start_reaper(&self) {
        let table = self.clone();
        thread::spawn(move || loop {
            wait_sigchld();
            table.reap();
        });
    }

    fn reap(&self) {
        // The lock is taken before waitpid so that a spawn (which holds it until the new pid is recorded)
        // can never have its child reaped before it is known.
        let mut inner = self.lock();
        loop {
            let mut status = 0;
            // SAFETY: plain syscall with a valid out-pointer.
            let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            let Some(&handle) = inner.by_pid.get(&pid) else {
                continue; // an orphan: reaped, nothing to report
            };
            inner.by_pid.remove(&pid);
            let Some(p) = inner.by_handle.get_mut(&handle) else {
                continue;
            };
            p.exit = Some(if p.timed_out {
                Termination::Timeout
            } else if libc::WIFSIGNALED(status) {
                Termination::Signaled { signal: libc::WTERMSIG(status) }
            } else {
                Termination::Exited { code: libc::WEXITSTATUS(status) }
            });
            // Dropping the timer's sender wakes it: it then still kills whatever the command left in
            // its process group at the deadline.
            p.timer = None;
            p.stdin = None;
            if p.open_pipes > 0 {
                let table = self.clone();
                thread::spawn(move || {
                    thread::sleep(PIPE_GRACE);
                    let mut inner = table.lock();
                    if let Some(p) = inner.by_handle.get_mut(&handle) {
                        p.open_pipes = 0;
                    }
                    table.finish_locked(&mut inner, handle);
                });
            }
            self.finish_locked(&mut inner, handle);
        }
    }

    /// Reports the exit once the process has ended and its pipes are drained.
    fn finish_locked(&self, inner: &mut Inner, handle: u64) {
        let done = matches!(inner.by_handle.get(&handle), Some(p) if p.exit.is_some() && p.open_pipes == 0);
        if done {
            let p = inner.by_handle.remove(&handle).expect("checked above");
            self.out.send(&Event::Exited { proc: handle, end: p.exit.expect("checked above") }, &[]);
        }
    }

    pub(crate) fn spawn(&self, s: Spawn) {
        let handle = s.proc;
        let mut inner = self.lock();
        if inner.by_handle.contains_key(&handle) || s.argv.is_empty() {
            drop(inner);
            let message = if s.argv.is_empty() { "empty argv" } else { "process handle in use" };
            self.out.send(&Event::SpawnFailed { proc: handle, message: message.into() }, &[]);
            return;
        }
        let Ok(cwd) = CString::new(s.cwd.as_bytes()) else {
            drop(inner);
            self.out.send(&Event::SpawnFailed { proc: handle, message: "cwd contains NUL".into() }, &[]);
            return;
        };
        let mut cmd = Command::new(&s.argv[0]);
        cmd.args(&s.argv[1..])
            .env_clear()
            .envs(s.env.iter().map(|(k, v)| (k, v)))
            .stdin(if s.stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Own process group, so a timeout or kill reaches everything the command started.
            .process_group(0);
        let hardening = Arc::clone(&self.hardening);
        let uid = s.uid;
        // SAFETY: `apply` only makes raw syscalls on data prepared before the fork.
        unsafe {
            cmd.pre_exec(move || hardening.apply(uid, &cwd));
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                drop(inner);
                let message = spawn_error(&s, &e);
                self.out.send(&Event::SpawnFailed { proc: handle, message }, &[]);
                return;
            }
        };
        let pid = child.id() as i32;
        let stdin = child.stdin.take().map(start_stdin_writer);
        let timer = s.timeout_ms.map(|ms| self.start_timer(handle, pid, Duration::from_millis(ms)));
        inner.by_pid.insert(pid, handle);
        inner.by_handle.insert(handle, Proc { pid, stdin, exit: None, open_pipes: 2, timed_out: false, timer });
        // Started goes out before any output: the pipe readers begin only after this send.
        self.out.send(&Event::Started { proc: handle, pid }, &[]);
        drop(inner);
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        self.start_reader(handle, 1, stdout);
        self.start_reader(handle, 2, stderr);
        // `child` is dropped without waiting: the reaper owns waitpid.
    }

    fn start_reader(&self, handle: u64, fd: u8, mut pipe: impl Read + Send + 'static) {
        let table = self.clone();
        thread::spawn(move || {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Output of a handle already reported as exited (grace passed) is dropped.
                let inner = table.lock();
                if !inner.by_handle.contains_key(&handle) {
                    continue;
                }
                table.out.send(&Event::Output { proc: handle, fd }, &buf[..n]);
                drop(inner);
            }
            let mut inner = table.lock();
            if let Some(p) = inner.by_handle.get_mut(&handle) {
                p.open_pipes = p.open_pipes.saturating_sub(1);
            }
            table.finish_locked(&mut inner, handle);
        });
    }

    fn start_timer(&self, handle: u64, pid: i32, after: Duration) -> mpsc::Sender<()> {
        let (tx, rx) = mpsc::channel::<()>();
        let table = self.clone();
        thread::spawn(move || {
            let deadline = Instant::now() + after;
            match rx.recv_timeout(after) {
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let mut inner = table.lock();
                    if let Some(p) = inner.by_handle.get_mut(&handle) {
                        if p.exit.is_none() {
                            p.timed_out = true;
                        }
                    }
                }
                // The command's leader is gone. What it left in its process group (a fork bomb's
                // children, say) still dies at the deadline.
                Err(mpsc::RecvTimeoutError::Disconnected) => loop {
                    // SAFETY: signal 0 only checks whether the group has members.
                    if unsafe { libc::kill(-pid, 0) } != 0 {
                        return;
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break;
                    }
                    thread::sleep((deadline - now).min(Duration::from_millis(100)));
                },
                Ok(()) => return,
            }
            // SAFETY: plain syscall; a negative pid addresses the command's process group.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
        });
        tx
    }

    pub(crate) fn stdin(&self, handle: u64, data: &[u8], eof: bool) {
        let mut inner = self.lock();
        let Some(p) = inner.by_handle.get_mut(&handle) else {
            return;
        };
        if let Some(tx) = &p.stdin {
            if !data.is_empty() {
                let _ = tx.send(StdinMsg::Bytes(data.to_vec()));
            }
            if eof {
                let _ = tx.send(StdinMsg::Eof);
                p.stdin = None;
            }
        }
    }

    pub(crate) fn signal(&self, handle: u64, signal: i32) {
        let inner = self.lock();
        if let Some(p) = inner.by_handle.get(&handle) {
            if p.exit.is_none() {
                // SAFETY: plain syscall; the group id equals the leader's pid (process_group(0)).
                unsafe { libc::kill(-p.pid, signal) };
            }
        }
    }
}

/// Feeds a child's stdin from its own thread, so a child that never reads cannot stall the control loop.
fn start_stdin_writer(mut w: std::process::ChildStdin) -> mpsc::Sender<StdinMsg> {
    let (tx, rx) = mpsc::channel::<StdinMsg>();
    thread::spawn(move || {
        while let Ok(msg) = rx.recv() {
            match msg {
                StdinMsg::Bytes(b) => {
                    if w.write_all(&b).is_err() {
                        return;
                    }
                }
                StdinMsg::Eof => return,
            }
        }
    });
    tx
}

fn spawn_error(s: &Spawn, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound if !std::path::Path::new(&s.cwd).is_dir() => {
            format!("working directory {} does not exist", s.cwd)
        }
        io::ErrorKind::NotFound => format!("{}: command not found", s.argv[0]),
        io::ErrorKind::PermissionDenied => format!("{}: permission denied", s.argv[0]),
        _ => format!("cannot start {}: {e}", s.argv[0]),
    }
}

fn wait_sigchld() {
    // SAFETY: sigset_t initialised by sigemptyset; sigwait writes the received signal into `sig`.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGCHLD);
        let mut sig = 0;
        libc::sigwait(&set, &mut sig);
    }
}
