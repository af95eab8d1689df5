//! Spawning, reaping and piping processes.

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use sandlot_protocol::{Event, PtySize, Spawn, Termination, MAX_LEFT_ARGV_BYTES, MAX_PAYLOAD};

use crate::harden::Hardening;
use crate::{lock, spawn_thread, wait, Outbox, ThreadError};

/// How long output pipes may stay open after the process itself has exited (a daemonised grandchild
/// holding them). Past this the exit is reported and later output of that handle is dropped.
const PIPE_GRACE: Duration = Duration::from_millis(200);
/// Bytes of standard input held for one process that has not read them yet. Twice the most one API
/// call may send (8 MiB, `MAX_STDIN_BYTES` of the server), so a caller one call ahead of a process that
/// does read always fits; past it the process is not reading, and pid 1 must not buffer for it without
/// bound (its memory is the sandbox's headroom, not the commands' limit): its stdin is closed.
const MAX_STDIN_QUEUED: usize = 16 << 20;
/// Bytes of standard input held for all processes of the sandbox together: pid 1's memory headroom is
/// 32 MiB (`HEADROOM_BYTES` of the cgroup), and pid 1 must stay inside it whatever many processes do.
const MAX_STDIN_QUEUED_TOTAL: usize = 24 << 20;

struct Proc {
    pid: i32,
    stdin: Option<StdinQueue>,
    /// The pty master of a process started with one (for resizes; the reader holds its own).
    pty: Option<Arc<OwnedFd>>,
    /// Set when the exit is reported: a pty reader stops then (dropping its master, which hangs up
    /// the terminal for whatever still holds it), as no later output of the handle is sent.
    reported: Arc<AtomicBool>,
    exit: Option<Termination>,
    open_pipes: u8,
    timed_out: bool,
    /// Dropping it wakes the timeout thread early.
    timer: Option<mpsc::Sender<()>>,
    /// A process group a finished command left (`pid` is its group id), tracked until it has no
    /// member ([`Table::adopt`]); with how its last reaped member ended.
    group: Option<Option<Termination>>,
    /// Whether the daemon sent it a signal.
    signalled: bool,
}

/// Standard input waiting for a process, between the control loop and the process's writer thread;
/// with the sandbox-wide count of queued bytes.
#[derive(Clone)]
struct StdinQueue(Arc<(Mutex<StdinState>, Condvar)>, Arc<AtomicUsize>);

#[derive(Default)]
struct StdinState {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes in `chunks` plus the chunk being written.
    bytes: usize,
    eof: bool,
    /// Stop now, dropping what waits (the process exited or overflowed its queue).
    closed: bool,
}

impl StdinQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, StdinState> {
        lock(&self.0 .0)
    }

    /// Queues `data`; `false` (and nothing queued) when it does not fit in [`MAX_STDIN_QUEUED`] for
    /// this process or [`MAX_STDIN_QUEUED_TOTAL`] for the sandbox.
    fn push(&self, data: &[u8], eof: bool) -> bool {
        let mut st = self.lock();
        if st.closed {
            // The process closed its stdin or is gone: the bytes go nowhere, as they would in a pipe.
            return true;
        }
        if st.bytes + data.len() > MAX_STDIN_QUEUED {
            return false;
        }
        if self.1.fetch_add(data.len(), Ordering::SeqCst) + data.len() > MAX_STDIN_QUEUED_TOTAL {
            self.1.fetch_sub(data.len(), Ordering::SeqCst);
            return false;
        }
        if !data.is_empty() {
            st.bytes += data.len();
            st.chunks.push_back(data.to_vec());
        }
        st.eof |= eof;
        self.0 .1.notify_one();
        true
    }

    fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        let dropped: usize = st.chunks.drain(..).map(|c| c.len()).sum();
        st.bytes -= dropped;
        self.1.fetch_sub(dropped, Ordering::SeqCst);
        self.0 .1.notify_one();
    }

    /// The next chunk for the writer; `None` when it should close the pipe.
    fn next(&self) -> Option<Vec<u8>> {
        let mut st = self.lock();
        loop {
            if st.closed {
                return None;
            }
            if let Some(c) = st.chunks.pop_front() {
                return Some(c);
            }
            if st.eof {
                return None;
            }
            st = wait(&self.0 .1, st);
        }
    }

    fn written(&self, n: usize) {
        let mut st = self.lock();
        st.bytes -= n;
        self.1.fetch_sub(n, Ordering::SeqCst);
    }
}

#[derive(Default)]
struct Inner {
    by_handle: HashMap<u64, Proc>,
    by_pid: HashMap<i32, u64>,
    /// Group ids of the groups finished commands left ([`Event::Left`] sent), by the command's handle,
    /// until the daemon adopts them.
    left: HashMap<u64, i32>,
    /// Adopted groups: group id → handle.
    groups: HashMap<i32, u64>,
    /// Whether the thread that notices groups emptied without a reap (members that moved to a group
    /// of their own) runs.
    group_watch: bool,
}

/// Most groups left by finished commands and not yet adopted. The daemon adopts each at once; past
/// this it is not answering, and pid 1 does not keep more for it.
const MAX_LEFT_UNADOPTED: usize = 1024;
/// How often adopted groups are checked for members that left them without exiting.
const GROUP_CHECK: Duration = Duration::from_millis(500);

/// Whether process group `pgid` has a member.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence. EPERM means a member exists that pid 1 may not signal.
    unsafe { libc::kill(-pgid, 0) == 0 || *libc::__errno_location() == libc::EPERM }
}

/// `(state, pgrp, starttime)` of `pid` from its stat, read while it is alive or a zombie.
fn stat_of(pid: i32) -> Option<(char, i32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp ... starttime(22)`: comm may hold spaces and parentheses, so parse
    // after the last `)`.
    let mut f = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = f.next()?.chars().next()?;
    let pgrp = f.nth(1)?.parse().ok()?;
    let start = f.nth(16)?.parse().ok()?;
    Some((state, pgrp, start))
}

/// The process group of `pid`, read while it is alive or a zombie.
fn pgid_of(pid: i32) -> Option<i32> {
    stat_of(pid).map(|(_, pgrp, _)| pgrp)
}

/// The command line of the oldest member of group `pgid` that is not a zombie, at most
/// [`MAX_LEFT_ARGV_BYTES`] of it; `None` when every member is a zombie (or gone).
fn oldest_live_member_argv(pgid: i32) -> Option<Vec<String>> {
    let dir = std::fs::read_dir("/proc").ok()?;
    let (_, pid) = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| stat_of(pid).map(|s| (pid, s)))
        .filter(|(_, (state, pgrp, _))| *pgrp == pgid && !matches!(state, 'Z' | 'X'))
        .map(|(pid, (_, _, start))| (start, pid))
        .min()?;
    let mut raw = Vec::new();
    if let Ok(f) = std::fs::File::open(format!("/proc/{pid}/cmdline")) {
        // Bounded: a cmdline runs on into the environment when a process rewrites it.
        let _ = f.take(MAX_LEFT_ARGV_BYTES as u64).read_to_end(&mut raw);
    }
    let mut argv = Vec::new();
    let mut used = 0;
    for arg in raw.split(|b| *b == 0).filter(|a| !a.is_empty()) {
        let arg = String::from_utf8_lossy(arg).into_owned();
        used += arg.len() + 1;
        if used > MAX_LEFT_ARGV_BYTES {
            break;
        }
        argv.push(arg);
    }
    Some(argv)
}

/// All processes the daemon asked for, keyed by the daemon's handle.
#[derive(Clone)]
pub(crate) struct Table {
    inner: Arc<Mutex<Inner>>,
    out: Outbox,
    hardening: Arc<Hardening>,
    /// Bytes of standard input queued for all processes.
    stdin_queued: Arc<AtomicUsize>,
    /// Where output pipes of reported processes go to be drained (a leftover holding them), so that
    /// no pair of reader threads lives on per leftover: one thread for them all, started on first use.
    drain: Arc<Mutex<Option<mpsc::Sender<std::fs::File>>>>,
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
        Table {
            inner: Arc::default(),
            out,
            hardening: Arc::new(hardening),
            stdin_queued: Arc::default(),
            drain: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        lock(&self.inner)
    }

    /// Starts the thread that reaps every child, ours and orphans reparented to pid 1.
    pub(crate) fn start_reaper(&self) -> Result<(), ThreadError> {
        let table = self.clone();
        spawn_thread("reaper", move || loop {
            wait_sigchld();
            table.reap();
        })
    }

    fn reap(&self) {
        // The lock is taken before waitpid so that a spawn (which holds it until the new pid is recorded)
        // can never have its child reaped before it is known.
        let mut inner = self.lock();
        loop {
            // With adopted groups, an orphan's group is read before it is reaped (a zombie's stat
            // still names it): its end is the group's, should it be the last member.
            let (which, orphan_group) = if inner.groups.is_empty() {
                (-1, None)
            } else {
                match peek_exited() {
                    Some(pid) => (pid, pgid_of(pid)),
                    None => break,
                }
            };
            let mut status = 0;
            // SAFETY: plain syscall with a valid out-pointer.
            let pid = unsafe { libc::waitpid(which, &mut status, libc::WNOHANG) };
            if pid <= 0 {
                break;
            }
            // A child that stopped under ptrace (PTRACE_TRACEME makes pid 1 its tracer) or was continued
            // is still alive: only an exit or a fatal signal ends a process. (Pid 1 does not resume such a
            // child: only the thread that forked it, the control loop, could. SIGKILL still ends it.)
            if !libc::WIFEXITED(status) && !libc::WIFSIGNALED(status) {
                continue;
            }
            let Some(&handle) = inner.by_pid.get(&pid) else {
                // An orphan: nothing to report, unless it was a member of a group a command left.
                if let Some(g) = orphan_group {
                    self.orphan_reaped(&mut inner, g, termination(status));
                }
                continue;
            };
            inner.by_pid.remove(&pid);
            let Some(p) = inner.by_handle.get_mut(&handle) else {
                continue;
            };
            p.exit = Some(if p.timed_out { Termination::Timeout } else { termination(status) });
            // Dropping the timer's sender ends it: the timeout is the command's; what it left in its
            // process group lives on ([`Event::Left`]).
            p.timer = None;
            if let Some(q) = p.stdin.take() {
                q.close();
            }
            if p.open_pipes > 0 {
                let table = self.clone();
                let grace = spawn_thread("pipe-grace", move || {
                    thread::sleep(PIPE_GRACE);
                    let mut inner = table.lock();
                    if let Some(p) = inner.by_handle.get_mut(&handle) {
                        p.open_pipes = 0;
                    }
                    table.finish_locked(&mut inner, handle);
                });
                if grace.is_err() {
                    // No thread to wait with: report the exit now; later output of the handle is dropped.
                    p.open_pipes = 0;
                }
            }
            self.finish_locked(&mut inner, handle);
        }
    }

    /// Reports the exit once the process has ended and its pipes are drained; then what it left in
    /// its process group, if anything ([`Event::Left`]).
    fn finish_locked(&self, inner: &mut Inner, handle: u64) {
        let done = matches!(inner.by_handle.get(&handle), Some(p) if p.exit.is_some() && p.open_pipes == 0);
        if done {
            let p = inner.by_handle.remove(&handle).expect("checked above");
            p.reported.store(true, Ordering::SeqCst);
            self.out.send(&Event::Exited { proc: handle, end: p.exit.expect("checked above") }, &[]);
            if p.group.is_some() {
                inner.groups.remove(&p.pid);
            } else if p.exit != Some(Termination::Timeout)
                && !p.signalled
                && inner.left.len() < MAX_LEFT_UNADOPTED
                && group_alive(p.pid)
            {
                // Members that are only zombies (a group killed whole, reaped one by one) left nothing.
                if let Some(argv) = oldest_live_member_argv(p.pid) {
                    inner.left.insert(handle, p.pid);
                    self.out.send(&Event::Left { proc: handle, argv }, &[]);
                }
            }
        }
    }

    /// Tracks the group command `left_by` left ([`Event::Left`]) as process `handle`.
    pub(crate) fn adopt(&self, handle: u64, left_by: u64) {
        let mut inner = self.lock();
        let Some(pgid) = inner.left.remove(&left_by) else {
            drop(inner);
            self.out.send(&Event::SpawnFailed { proc: handle, message: "no group left by that process".into() }, &[]);
            return;
        };
        if inner.by_handle.contains_key(&handle) {
            drop(inner);
            self.out.send(&Event::SpawnFailed { proc: handle, message: "process handle in use".into() }, &[]);
            return;
        }
        inner.groups.insert(pgid, handle);
        inner.by_handle.insert(
            handle,
            Proc {
                pid: pgid,
                stdin: None,
                pty: None,
                reported: Arc::new(AtomicBool::new(false)),
                exit: None,
                open_pipes: 0,
                timed_out: false,
                timer: None,
                group: Some(None),
                signalled: false,
            },
        );
        self.out.send(&Event::Started { proc: handle, pid: pgid }, &[]);
        if !inner.group_watch {
            let table = self.clone();
            inner.group_watch = spawn_thread("groups", move || loop {
                thread::sleep(GROUP_CHECK);
                let mut inner = table.lock();
                let gone: Vec<i32> = inner.groups.keys().copied().filter(|g| !group_alive(*g)).collect();
                for g in gone {
                    table.group_emptied(&mut inner, g);
                }
            })
            .is_ok();
        }
        // It may have emptied between the command's exit and now.
        if !group_alive(pgid) {
            self.group_emptied(&mut inner, pgid);
        }
    }

    /// A member of a tracked group was reaped with `end`: the group ends when that was its last.
    fn orphan_reaped(&self, inner: &mut Inner, pgid: i32, end: Termination) {
        let Some(&handle) = inner.groups.get(&pgid) else { return };
        if let Some(Proc { group: Some(last), .. }) = inner.by_handle.get_mut(&handle) {
            *last = Some(end);
        }
        if !group_alive(pgid) {
            self.group_emptied(inner, pgid);
        }
    }

    /// Tracked group `pgid` has no member left: its process ends as its last reaped member did (exit
    /// 0 when none was reaped here: they all moved to groups of their own).
    fn group_emptied(&self, inner: &mut Inner, pgid: i32) {
        let Some(&handle) = inner.groups.get(&pgid) else { return };
        if let Some(p) = inner.by_handle.get_mut(&handle) {
            p.exit = Some(p.group.flatten().unwrap_or(Termination::Exited { code: 0 }));
        }
        self.finish_locked(inner, handle);
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
        let (uid, gid) = (s.uid, s.gid.unwrap_or(s.uid));
        let pty = match s.pty.map(|size| crate::pty::open(size, uid, gid)).transpose() {
            Ok(pty) => pty,
            Err(e) => {
                drop(inner);
                let message = format!("cannot open a pseudo-terminal in the sandbox: {e}");
                self.out.send(&Event::SpawnFailed { proc: handle, message }, &[]);
                return;
            }
        };
        let mut cmd = Command::new(&s.argv[0]);
        cmd.args(&s.argv[1..]).env_clear().envs(s.env.iter().map(|(k, v)| (k, v)));
        // Descriptors of a pty process: three copies of the slave for its stdio, the master for the
        // reader, and one for the stdin writer; made before the fork, so a failure (EMFILE) is this
        // spawn's error and nothing has run.
        let pty_fds = pty
            .as_ref()
            .map(|(master, slave)| -> io::Result<_> {
                let stdio = || slave.try_clone().map(Stdio::from);
                let writer = if s.stdin { Some(std::fs::File::from(master.try_clone()?)) } else { None };
                Ok(((stdio()?, stdio()?, stdio()?), Arc::new(master.try_clone()?), writer))
            })
            .transpose();
        let (slave_stdio, master) = match pty_fds {
            Ok(Some((stdio, master, writer))) => (Some(stdio), Some((master, writer))),
            Ok(None) => (None, None),
            Err(e) => {
                drop(inner);
                let message = format!("cannot set up the pseudo-terminal: {e}");
                self.out.send(&Event::SpawnFailed { proc: handle, message }, &[]);
                return;
            }
        };
        let hardening = Arc::clone(&self.hardening);
        match slave_stdio {
            Some((i, o, e)) => {
                // A new session instead of a new process group: its group id is still the pid, so
                // signals and timeouts reach the group as for any process.
                cmd.stdin(i).stdout(o).stderr(e);
                // SAFETY: both closures only make raw syscalls on data prepared before the fork.
                unsafe {
                    cmd.pre_exec(move || {
                        crate::pty::become_session_leader()?;
                        hardening.apply(uid, gid, &cwd)
                    });
                }
            }
            None => {
                cmd.stdin(if s.stdin { Stdio::piped() } else { Stdio::null() })
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    // Own process group, so a timeout or kill reaches everything the command started.
                    .process_group(0);
                // SAFETY: `apply` only makes raw syscalls on data prepared before the fork.
                unsafe {
                    cmd.pre_exec(move || hardening.apply(uid, gid, &cwd));
                }
            }
        }
        let spawned = cmd.spawn();
        // The supervisor's copies of the slave go now: the terminal hangs up once the process (and
        // whatever it left holding the slave) closes it.
        drop(cmd);
        drop(pty);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                drop(inner);
                let message = spawn_error(&s, &e);
                self.out.send(&Event::SpawnFailed { proc: handle, message }, &[]);
                return;
            }
        };
        let pid = child.id() as i32;
        let reported = Arc::new(AtomicBool::new(false));
        // The readers may start before Started is sent: they take the table's lock (held here) before
        // they send anything, and find the handle only once it is recorded. The timer comes last, so
        // nothing can fail after it is armed.
        let threads = match master {
            Some((master, writer)) => self
                .start_pty_reader(handle, Arc::clone(&master), Arc::clone(&reported))
                .and_then(|()| writer.map(|w| start_stdin_writer(w, &self.stdin_queued)).transpose())
                .map(|stdin| (stdin, Some(master), 1)),
            None => {
                let (stdout, stderr) = (child.stdout.take().expect("piped"), child.stderr.take().expect("piped"));
                self.start_reader(handle, 1, stdout)
                    .and_then(|()| self.start_reader(handle, 2, stderr))
                    .and_then(|()| child.stdin.take().map(|w| start_stdin_writer(w, &self.stdin_queued)).transpose())
                    .map(|stdin| (stdin, None, 2))
            }
        }
        .and_then(|(stdin, pty, pipes)| {
            let timer = s.timeout_ms.map(|ms| self.start_timer(handle, pid, Duration::from_millis(ms)));
            Ok((stdin, pty, pipes, timer.transpose()?))
        });
        let (stdin, pty, open_pipes, timer) = match threads {
            Ok(t) => t,
            Err(e) => {
                // The command never gets to run unwatched: kill its group; the reaper reaps it as an
                // orphan, and readers already started find no handle and end at EOF.
                // SAFETY: plain syscall; the group id equals the child's pid (process_group(0) or setsid).
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                reported.store(true, Ordering::SeqCst);
                drop(inner);
                self.out.send(&Event::SpawnFailed { proc: handle, message: e.to_string() }, &[]);
                return;
            }
        };
        inner.by_pid.insert(pid, handle);
        inner.by_handle.insert(
            handle,
            Proc {
                pid,
                stdin,
                pty,
                reported,
                exit: None,
                open_pipes,
                timed_out: false,
                timer,
                group: None,
                signalled: false,
            },
        );
        // Started goes out before any output: the pipe readers wait for the lock held until after it.
        self.out.send(&Event::Started { proc: handle, pid }, &[]);
        drop(inner);
        // `child` is dropped without waiting: the reaper owns waitpid.
    }

    fn start_reader(&self, handle: u64, fd: u8, pipe: impl Into<OwnedFd>) -> Result<(), ThreadError> {
        let table = self.clone();
        let mut pipe = std::fs::File::from(pipe.into());
        spawn_thread("output", move || {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                // Output of a handle already reported as exited (grace passed) is dropped: what
                // still holds the pipe (a leftover) is drained by the one drain thread from now on.
                let inner = table.lock();
                if !inner.by_handle.contains_key(&handle) {
                    drop(inner);
                    match table.hand_to_drain(pipe) {
                        Ok(()) => return,
                        Err(back) => {
                            pipe = back;
                            continue;
                        }
                    }
                }
                table.out.send(&Event::Output { proc: handle, fd }, &buf[..n]);
                drop(inner);
            }
            let mut inner = table.lock();
            if let Some(p) = inner.by_handle.get_mut(&handle) {
                p.open_pipes = p.open_pipes.saturating_sub(1);
            }
            table.finish_locked(&mut inner, handle);
        })
    }

    /// Gives `pipe` to the drain thread (started on first use), which reads and drops what comes until
    /// its writers close it; back when there is no thread for it (then the caller drains it itself).
    fn hand_to_drain(&self, pipe: std::fs::File) -> Result<(), std::fs::File> {
        let mut drain = lock(&self.drain);
        if drain.is_none() {
            let (tx, rx) = mpsc::channel::<std::fs::File>();
            if spawn_thread("drain", move || drain_pipes(&rx)).is_err() {
                return Err(pipe);
            }
            *drain = Some(tx);
        }
        drain.as_ref().expect("set above").send(pipe).map_err(|e| e.0)
    }

    /// Relays a pty master as the process's stdout. Polls rather than blocking in `read`, so it can stop
    /// once the exit is reported even while a leftover process holds the terminal open: the master
    /// then closes and the terminal hangs up. A read error is the end: EIO once every holder of the
    /// slave has closed it (after the bytes still buffered have been read).
    fn start_pty_reader(
        &self,
        handle: u64,
        master: Arc<OwnedFd>,
        reported: Arc<AtomicBool>,
    ) -> Result<(), ThreadError> {
        let table = self.clone();
        spawn_thread("pty", move || {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            while !reported.load(Ordering::SeqCst) {
                let mut pfd = libc::pollfd { fd: master.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: poll on one valid pollfd.
                let ready = unsafe { libc::poll(&mut pfd, 1, 100) };
                if ready == 0 || (ready < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted) {
                    continue;
                }
                // SAFETY: read into a buffer of the length given, from a valid fd.
                let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                if n <= 0 {
                    break;
                }
                let inner = table.lock();
                if !inner.by_handle.contains_key(&handle) {
                    continue;
                }
                table.out.send(&Event::Output { proc: handle, fd: 1 }, &buf[..n as usize]);
                drop(inner);
            }
            let mut inner = table.lock();
            if let Some(p) = inner.by_handle.get_mut(&handle) {
                p.open_pipes = p.open_pipes.saturating_sub(1);
            }
            table.finish_locked(&mut inner, handle);
        })
    }

    fn start_timer(&self, handle: u64, pid: i32, after: Duration) -> Result<mpsc::Sender<()>, ThreadError> {
        let (tx, rx) = mpsc::channel::<()>();
        let table = self.clone();
        spawn_thread("timeout", move || {
            // Woken early (the sender dropped): the command ended in time, and what it left in its
            // process group lives on, as under `docker exec`, bounded by the sandbox's limits and
            // lifetime ([`Event::Left`]).
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(after) {
                // Under the lock, and only while the command runs: a command that ended at the
                // deadline left its group (perhaps reported as left already), which lives on.
                let mut inner = table.lock();
                if let Some(p) = inner.by_handle.get_mut(&handle) {
                    if p.exit.is_none() {
                        p.timed_out = true;
                        // SAFETY: plain syscall; a negative pid addresses the command's process group.
                        unsafe { libc::kill(-pid, libc::SIGKILL) };
                    }
                }
            }
        })?;
        Ok(tx)
    }

    pub(crate) fn stdin(&self, handle: u64, data: &[u8], eof: bool) {
        let mut inner = self.lock();
        let Some(p) = inner.by_handle.get_mut(&handle) else {
            return;
        };
        let Some(q) = &p.stdin else { return };
        if !q.push(data, eof) {
            q.close();
            p.stdin = None;
            drop(inner);
            let message = format!(
                "the process did not read its standard input fast enough: {} MiB per process ({} MiB for the \
                 whole sandbox) may wait, and this write did not fit, so its stdin was closed and the write \
                 dropped. Write large input to a file and let the process read that instead",
                MAX_STDIN_QUEUED >> 20,
                MAX_STDIN_QUEUED_TOTAL >> 20
            );
            self.out.send(&Event::StdinClosed { proc: handle, message }, &[]);
            return;
        }
        if eof {
            // The writer finishes what is queued, then closes the pipe.
            p.stdin = None;
        }
    }

    /// Resizes the terminal of a pty process; nothing for another (the daemon refuses those itself).
    pub(crate) fn resize(&self, handle: u64, size: PtySize) {
        let inner = self.lock();
        if let Some(master) = inner.by_handle.get(&handle).and_then(|p| p.pty.as_ref()) {
            // A failure (the terminal hung up) leaves nothing to resize.
            let _ = crate::pty::resize(master, size);
        }
    }

    pub(crate) fn signal(&self, handle: u64, signal: i32) {
        let mut inner = self.lock();
        if let Some(p) = inner.by_handle.get_mut(&handle) {
            // Also between the leader's exit and its report (the pipe grace): the daemon still lists
            // it running, and the group's id cannot be reused while the group has members.
            if p.exit.is_none() || group_alive(p.pid) {
                // A group the daemon signalled is not reported as left: it was asked to end.
                p.signalled = true;
                // SAFETY: plain syscall; the group id equals the leader's pid (process_group(0)).
                unsafe { libc::kill(-p.pid, signal) };
            }
        }
    }
}

/// Feeds a child's stdin from its own thread, so a child that never reads cannot stall the control loop.
fn start_stdin_writer(mut w: impl Write + Send + 'static, total: &Arc<AtomicUsize>) -> Result<StdinQueue, ThreadError> {
    let q = StdinQueue(Arc::default(), Arc::clone(total));
    let theirs = q.clone();
    spawn_thread("stdin", move || {
        while let Some(b) = theirs.next() {
            let ok = w.write_all(&b).is_ok();
            theirs.written(b.len());
            if !ok {
                break;
            }
        }
        // Whatever still waits (the process closed its stdin or died) no longer counts.
        theirs.close();
    })?;
    Ok(q)
}

fn spawn_error(s: &Spawn, e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::NotFound if !std::path::Path::new(&s.cwd).is_dir() => {
            format!("working directory {} does not exist", s.cwd)
        }
        io::ErrorKind::NotFound => format!("{}: command not found", s.argv[0]),
        io::ErrorKind::PermissionDenied => format!("{}: permission denied", s.argv[0]),
        _ if e.raw_os_error() == Some(libc::EAGAIN) => format!(
            "cannot start {}: the sandbox is at its process limit (pids); wait for processes to end or create \
             the sandbox with a larger pids limit",
            s.argv[0]
        ),
        _ => format!("cannot start {}: {e}", s.argv[0]),
    }
}

/// How a process with wait status `status` ended.
fn termination(status: i32) -> Termination {
    if libc::WIFSIGNALED(status) {
        Termination::Signaled { signal: libc::WTERMSIG(status) }
    } else {
        Termination::Exited { code: libc::WEXITSTATUS(status) }
    }
}

/// The pid of a child that has exited, left unreaped (`WNOWAIT`), if any.
fn peek_exited() -> Option<i32> {
    // SAFETY: siginfo_t is plain data; waitid fills it, and si_pid reads the field it set (0: none).
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let rc = libc::waitid(libc::P_ALL, 0, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT);
        let pid = info.si_pid();
        (rc == 0 && pid > 0).then_some(pid)
    }
}

/// Reads and drops what comes on every pipe received from `rx` until its writers close it (the
/// drain thread of [`Table::hand_to_drain`]).
fn drain_pipes(rx: &mpsc::Receiver<std::fs::File>) {
    use std::os::fd::AsRawFd;
    let mut pipes: Vec<std::fs::File> = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    loop {
        if pipes.is_empty() {
            match rx.recv() {
                Ok(p) => pipes.push(p),
                Err(_) => return,
            }
        }
        pipes.extend(rx.try_iter());
        let mut polled: Vec<libc::pollfd> =
            pipes.iter().map(|p| libc::pollfd { fd: p.as_raw_fd(), events: libc::POLLIN, revents: 0 }).collect();
        // SAFETY: `polled` is a valid array of `polled.len()` pollfds for the call's duration. The
        // timeout lets pipes handed over meanwhile join.
        let n = unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 500) };
        if n <= 0 {
            continue;
        }
        for i in (0..polled.len()).rev() {
            if polled[i].revents == 0 {
                continue;
            }
            // Readable (or hung up): this read does not block. 0 or an error is the end.
            match pipes[i].read(&mut buf) {
                Ok(n) if n > 0 => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => {
                    pipes.swap_remove(i);
                }
            }
        }
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
