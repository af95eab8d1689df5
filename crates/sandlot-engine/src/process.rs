//! A process started through the API: its captured output, its live event stream and its final result.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sandlot_api::{ExecEvent, ExecResult, ExitStatus, ProcessInfo};
use sandlot_protocol::Termination;
use tokio::sync::{broadcast, watch};

use crate::output::Capture;

/// How many live events a slow follower may fall behind before it is told output was skipped.
const FOLLOW_BUFFER: usize = 4096;

struct State {
    stdout: Capture,
    stderr: Capture,
    /// Every event sent so far, for `logs` replays. Bounded: output events stop at the cap.
    log: Vec<ExecEvent>,
    result: Option<ExecResult>,
}

/// One API process.
pub struct Process {
    /// API process id (the supervisor's handle).
    pub id: u64,
    /// What it runs.
    pub argv: Vec<String>,
    /// Start time, Unix milliseconds.
    pub started_at_ms: i64,
    started: Instant,
    stdin_open: std::sync::atomic::AtomicBool,
    /// Why the supervisor closed standard input on its own (the process did not read it), if it did.
    stdin_closed_why: Mutex<Option<String>>,
    state: Mutex<State>,
    live: broadcast::Sender<ExecEvent>,
    done: watch::Sender<Option<ExecResult>>,
}

/// A follower's view: events so far, then a live receiver with no gap between them.
pub struct Follow {
    /// Events already emitted.
    pub replay: Vec<ExecEvent>,
    /// Live events after the replay; `None` when the process has already exited.
    pub live: Option<broadcast::Receiver<ExecEvent>>,
}

impl Process {
    pub(crate) fn new(id: u64, argv: Vec<String>, cap: usize, started_at_ms: i64, stdin_open: bool) -> Arc<Self> {
        Arc::new(Process {
            id,
            argv,
            started_at_ms,
            started: Instant::now(),
            stdin_open: std::sync::atomic::AtomicBool::new(stdin_open),
            stdin_closed_why: Mutex::new(None),
            state: Mutex::new(State {
                stdout: Capture::new(cap),
                stderr: Capture::new(cap),
                log: Vec::new(),
                result: None,
            }),
            live: broadcast::channel(FOLLOW_BUFFER).0,
            done: watch::channel(None).0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn emit(&self, st: &mut State, ev: ExecEvent) {
        st.log.push(ev.clone());
        let _ = self.live.send(ev);
    }

    pub(crate) fn on_started(&self) {
        let mut st = self.lock();
        self.emit(&mut st, ExecEvent::Started { pid: self.id });
    }

    pub(crate) fn on_output(&self, fd: u8, data: &[u8]) {
        let mut st = self.lock();
        let (live, began) = if fd == 2 { st.stderr.push(data) } else { st.stdout.push(data) };
        if let Some(text) = live {
            let ev = if fd == 2 { ExecEvent::Stderr { data: text } } else { ExecEvent::Stdout { data: text } };
            self.emit(&mut st, ev);
        }
        if began {
            let stream = if fd == 2 { "stderr" } else { "stdout" };
            self.emit(&mut st, ExecEvent::Truncated { stream: stream.into() });
        }
    }

    /// Records the end. `oom` says the sandbox's OOM-kill counter rose while it ran.
    pub(crate) fn on_exit(&self, end: Option<Termination>, oom: bool) {
        let mut st = self.lock();
        if st.result.is_some() {
            return;
        }
        for fd in [1u8, 2] {
            let tail = if fd == 2 { st.stderr.finish_stream() } else { st.stdout.finish_stream() };
            if let Some(text) = tail {
                let ev = if fd == 2 { ExecEvent::Stderr { data: text } } else { ExecEvent::Stdout { data: text } };
                self.emit(&mut st, ev);
            }
        }
        let (status, exit_code, signal) = match end {
            Some(Termination::Timeout) => (ExitStatus::Timeout, 124, Some(libc::SIGKILL)),
            Some(Termination::Signaled { signal }) if oom && signal == libc::SIGKILL => {
                (ExitStatus::Oom, 128 + signal, Some(signal))
            }
            // A shell whose child the OOM killer took reports 137 as its own exit code.
            Some(Termination::Exited { code: 137 }) if oom => (ExitStatus::Oom, 137, Some(libc::SIGKILL)),
            Some(Termination::Signaled { signal }) => (ExitStatus::Signaled, 128 + signal, Some(signal)),
            Some(Termination::Exited { code }) => (ExitStatus::Exited, code, None),
            None if oom => (ExitStatus::Oom, 137, Some(libc::SIGKILL)),
            None => (ExitStatus::Killed, 137, Some(libc::SIGKILL)),
        };
        let result = ExecResult {
            status,
            exit_code,
            signal,
            stdout: st.stdout.text(),
            stderr: st.stderr.text(),
            stdout_bytes: st.stdout.total(),
            stderr_bytes: st.stderr.total(),
            truncated: st.stdout.dropped() > 0 || st.stderr.dropped() > 0,
            duration_ms: self.started.elapsed().as_millis() as u64,
        };
        let ev = ExecEvent::Exited {
            status,
            exit_code,
            signal,
            stdout_bytes: result.stdout_bytes,
            stderr_bytes: result.stderr_bytes,
            truncated: result.truncated,
            duration_ms: result.duration_ms,
        };
        self.emit(&mut st, ev);
        st.result = Some(result.clone());
        self.done.send_replace(Some(result));
    }

    /// A spawn the supervisor could not perform, reported like a shell would (127 not found, 126 other).
    pub(crate) fn on_spawn_failed(&self, message: &str) {
        let code = if message.ends_with("command not found") { 127 } else { 126 };
        self.on_output(2, format!("sandlot: {message}\n").as_bytes());
        self.on_exit(Some(Termination::Exited { code }), false);
    }

    /// Whether standard input still accepts writes.
    pub fn stdin_open(&self) -> bool {
        self.stdin_open.load(std::sync::atomic::Ordering::SeqCst) && self.result().is_none()
    }

    pub(crate) fn close_stdin(&self) {
        self.stdin_open.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// The supervisor closed standard input because the process did not read it.
    pub(crate) fn stdin_closed_by_supervisor(&self, why: String) {
        *self.stdin_closed_why.lock().unwrap_or_else(|p| p.into_inner()) = Some(why);
        self.close_stdin();
    }

    /// Why the supervisor closed standard input on its own, if it did.
    pub fn stdin_closed_reason(&self) -> Option<String> {
        self.stdin_closed_why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Waits for the end.
    pub async fn wait(&self) -> ExecResult {
        let mut rx = self.done.subscribe();
        loop {
            if let Some(r) = rx.borrow_and_update().clone() {
                return r;
            }
            if rx.changed().await.is_err() {
                // The sender lives in self, so this cannot happen while we hold &self.
                continue;
            }
        }
    }

    /// The result, if it has ended.
    pub fn result(&self) -> Option<ExecResult> {
        self.lock().result.clone()
    }

    /// Events so far plus a gap-free live subscription.
    pub fn follow(&self) -> Follow {
        let st = self.lock();
        let live = st.result.is_none().then(|| self.live.subscribe());
        Follow { replay: st.log.clone(), live }
    }

    /// API view.
    pub fn info(&self) -> ProcessInfo {
        let st = self.lock();
        ProcessInfo {
            pid: self.id,
            argv: self.argv.clone(),
            running: st.result.is_none(),
            status: st.result.as_ref().map(|r| r.status),
            exit_code: st.result.as_ref().map(|r| r.exit_code),
            started_at_ms: self.started_at_ms,
        }
    }
}
