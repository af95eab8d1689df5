//! A sandbox's processes: spawning, signals, standard input, and the table of processes it remembers,
//! whose output reservations are made room for by forgetting finished ones.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use sandlot_protocol::{PtySize, Request, Spawn, MAX_LEFT_ARGV_BYTES, MAX_PAYLOAD};

use super::link::LinkState;
use super::{now_ms, Sandbox};
use crate::budget::Reservation;
use crate::process::{Process, ProcessMeta};
use crate::{lock, EngineError};

/// Most processes remembered per sandbox; the oldest finished ones are forgotten first.
const MAX_REMEMBERED_PROCESSES: usize = 1024;

/// A validated exec, ready for the supervisor.
#[derive(Debug, Clone)]
pub struct ExecSpec {
    /// Program and arguments.
    pub argv: Vec<String>,
    /// Complete environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: String,
    /// Sandbox uid.
    pub uid: u32,
    /// Sandbox gid (`None`: the same as the uid).
    pub gid: Option<u32>,
    /// Wall-clock limit.
    pub timeout_ms: Option<u64>,
    /// Bytes for stdin, then EOF. `None` with `keep_stdin` leaves it open for later writes.
    pub stdin: Option<Vec<u8>>,
    /// Keep stdin open for `/stdin` calls.
    pub keep_stdin: bool,
    /// Per-stream output cap.
    pub max_output: usize,
    /// Keep only the last `max_output` bytes of each stream and stream output live whatever its
    /// length (a terminal's scrollback), instead of head and tail with live output stopping at the cap.
    pub scrollback: bool,
    /// Run on a pseudo-terminal of this size.
    pub pty: Option<sandlot_api::PtySize>,
    /// What the process is listed with (tag, cwd, the request's env).
    pub meta: ProcessMeta,
}

impl Sandbox {
    /// Starts a process and returns its record once the supervisor has answered the spawn.
    pub async fn spawn(&self, spec: ExecSpec) -> Result<Arc<Process>, EngineError> {
        let handle = self.link.next_id.fetch_add(1, Ordering::SeqCst);
        let reservation = self.link.reserve_output(2 * spec.max_output as u64)?;
        let proc = Process::new(
            handle,
            spec.argv.clone(),
            spec.max_output,
            spec.scrollback,
            now_ms(),
            spec.keep_stdin,
            spec.pty.is_some(),
            spec.meta,
            reservation,
            self.link.sandbox_end.clone(),
        );
        let oom_before = self.link.instance.oom_kills();
        self.link.remember(handle, Arc::clone(&proc), oom_before);
        let mut started = proc.follow();
        let spawn = Spawn {
            proc: handle,
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
            uid: spec.uid,
            gid: spec.gid,
            timeout_ms: spec.timeout_ms,
            stdin: spec.stdin.is_some() || spec.keep_stdin,
            pty: spec.pty.map(|p| PtySize { rows: p.rows, cols: p.cols }),
        };
        self.send(&Request::Spawn(spawn), &[]).await?;
        if let Some(bytes) = spec.stdin {
            for chunk in bytes.chunks(MAX_PAYLOAD) {
                self.send(&Request::Stdin { proc: handle, eof: false }, chunk).await?;
            }
            if !spec.keep_stdin {
                self.send(&Request::Stdin { proc: handle, eof: true }, &[]).await?;
            }
        }
        // Wait for Started (or an immediate failure/exit) so the caller can rely on the process existing.
        let _ = started.next().await;
        Ok(proc)
    }

    /// The process with `handle` (the API's pid, not the kernel's), if it is still remembered.
    pub fn process(&self, handle: u64) -> Option<Arc<Process>> {
        lock(&self.link.procs).get(&handle).map(|(p, _)| Arc::clone(p))
    }

    /// All remembered processes, oldest first.
    pub fn processes(&self) -> Vec<Arc<Process>> {
        let order = lock(&self.link.order).clone();
        order.iter().filter_map(|handle| self.process(*handle)).collect()
    }

    /// Sends `signal` to the process group of the process with `handle` (the API's pid).
    pub async fn signal(&self, handle: u64, signal: i32) -> Result<(), EngineError> {
        self.send(&Request::Signal { proc: handle, signal }, &[]).await
    }

    /// Sets the terminal size of the pty process with `handle` (the API's pid); the caller checks that
    /// it has a pty ([`Process::pty`]).
    pub async fn resize(&self, handle: u64, rows: u16, cols: u16) -> Result<(), EngineError> {
        self.send(&Request::Resize { proc: handle, rows, cols }, &[]).await
    }

    /// Writes to the stdin of the process with `handle` (the API's pid).
    pub async fn stdin(&self, handle: u64, data: &[u8], eof: bool) -> Result<(), EngineError> {
        if eof {
            if let Some(p) = self.process(handle) {
                p.close_stdin();
            }
        }
        let mut chunks: Vec<&[u8]> = data.chunks(MAX_PAYLOAD).collect();
        if chunks.is_empty() {
            chunks.push(&[]);
        }
        let last = chunks.len() - 1;
        for (i, c) in chunks.into_iter().enumerate() {
            self.send(&Request::Stdin { proc: handle, eof: eof && i == last }, c).await?;
        }
        Ok(())
    }
}

impl LinkState {
    /// Room for a new process's output, made by forgetting finished processes (oldest first) when the
    /// sandbox's budget is short. Refused when running processes hold it all, or the daemon's is short.
    fn reserve_output(&self, bytes: u64) -> Result<Reservation, EngineError> {
        loop {
            match Reservation::take(&self.output_pools, bytes) {
                Ok(r) => return Ok(r),
                Err(short) => {
                    // Whichever pool is short, this sandbox's own finished output is what it may give up.
                    if self.forget_oldest_finished() {
                        continue;
                    }
                    let (pool, whose) = if short == 0 {
                        (&self.output_pools[0], "this sandbox")
                    } else {
                        (&self.output_pools[1], "the server")
                    };
                    return Err(EngineError::OutputBudget(format!(
                        "{whose} holds {} MiB of process output (at most {} MiB) for processes still running; \
                         this one would need {} MiB: wait for one to finish, kill one, or ask for a smaller \
                         max_output_bytes",
                        pool.used() >> 20,
                        pool.limit() >> 20,
                        bytes.div_ceil(1 << 20)
                    )));
                }
            }
        }
    }

    /// Forgets the oldest finished process; `false` when none is.
    fn forget_oldest_finished(&self) -> bool {
        let mut procs = lock(&self.procs);
        let mut order = lock(&self.order);
        let Some(pos) = order.iter().position(|i| procs.get(i).is_some_and(|(p, _)| p.finished())) else {
            return false;
        };
        let old = order.remove(pos);
        procs.remove(&old);
        true
    }

    fn remember(&self, handle: u64, proc: Arc<Process>, oom_before: u64) {
        lock(&self.procs).insert(handle, (proc, oom_before));
        lock(&self.order).push(handle);
        while lock(&self.order).len() > MAX_REMEMBERED_PROCESSES && self.forget_oldest_finished() {}
    }

    /// Lists what command `by` left in its process group ([`sandlot_protocol::Event::Left`]) as a
    /// process of its own, and asks the supervisor to track it under that handle.
    pub(super) fn adopt_left(&self, by: &Process, mut argv: Vec<String>) {
        // The supervisor bounds the command line; a supervisor that does not is cut here.
        let mut used = 0;
        argv.retain(|a| {
            used += a.len() + 1;
            used <= MAX_LEFT_ARGV_BYTES
        });
        let Ok(reservation) = Reservation::take(&self.output_pools, 0) else { return };
        let handle = self.next_id.fetch_add(1, Ordering::SeqCst);
        let meta = ProcessMeta { cwd: by.meta.cwd.clone(), left_by: Some(by.handle), ..ProcessMeta::default() };
        let left =
            Process::new(handle, argv, 0, false, now_ms(), false, false, meta, reservation, self.sandbox_end.clone());
        self.remember(handle, left, self.instance.oom_kills());
        if let Ok(frame) = sandlot_protocol::encode(&Request::Adopt { proc: handle, left_by: by.handle }, &[]) {
            let out = self.out.clone();
            // The read loop calls this: it never waits on the outbound channel.
            tokio::spawn(async move {
                let _ = out.send(frame).await;
            });
        }
    }

    pub(super) fn proc(&self, handle: u64) -> Option<(Arc<Process>, u64)> {
        lock(&self.procs).get(&handle).map(|(p, o)| (Arc::clone(p), *o))
    }
}
