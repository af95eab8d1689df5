//! A process started through the API: its captured output, its event log and its final result.
//!
//! The output bytes are held once, in the two [`Capture`]s. The event log records where each live
//! chunk begins and ends in its stream, not the text; followers (live streams, `logs` replays) and the
//! final result read the text from the captures when they need it. Followers keep their own cursor
//! into the log, so a slow one costs nothing and never makes a fast one wait.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use sandlot_api::{ExecEvent, ExecResult, ExitStatus, ProcessInfo};
use sandlot_protocol::Termination;
use tokio::sync::watch;

use crate::budget::Reservation;
use crate::lock;
use crate::output::{Capture, Span};

/// Log entries kept per process. Past it, output is no longer logged chunk by chunk: a follower
/// catches up on whole spans of each stream instead (the bytes are all there; only the interleaving
/// of stdout and stderr becomes coarser). Bounds the log of a flood of one-byte writes.
const MAX_LOG_ENTRIES: usize = 1024;

/// One entry of a process's event log.
#[derive(Debug, Clone)]
enum Entry {
    /// Live output: bytes `span` of stream `fd` (1 or 2).
    Output { fd: u8, span: Span },
    /// Any other event, with how far each stream (stdout, stderr) had been streamed when it happened.
    Event { event: ExecEvent, streamed: [u64; 2] },
}

struct State {
    out: [Capture; 2],
    log: Vec<Entry>,
    started: bool,
    end: Option<End>,
}

/// How a process ended, without its output (that stays in the captures).
#[derive(Debug, Clone, Copy)]
struct End {
    status: ExitStatus,
    exit_code: i32,
    signal: Option<i32>,
    duration_ms: u64,
}

impl State {
    fn capture(&mut self, fd: u8) -> &mut Capture {
        &mut self.out[usize::from(fd == 2)]
    }

    fn streamed(&self) -> [u64; 2] {
        [self.out[0].emitted(), self.out[1].emitted()]
    }

    fn log_output(&mut self, fd: u8, span: Span) {
        if self.log.len() < MAX_LOG_ENTRIES {
            self.log.push(Entry::Output { fd, span });
            return;
        }
        // Full: a chunk that continues the last one of the same stream extends it (a follower that
        // read part of it reads the rest: it tracks bytes, not entries); others are caught up on.
        if let Some(Entry::Output { fd: last, span: s }) = self.log.last_mut() {
            if *last == fd && s.1 == span.0 {
                s.1 = span.1;
            }
        }
    }

    fn log_event(&mut self, event: ExecEvent) {
        let streamed = self.streamed();
        self.log.push(Entry::Event { event, streamed });
    }

    /// The output event for `span` of stream `fd`; `None` when none of it is held any more (a replay
    /// of bytes that were streamed live before truncation dropped them).
    fn text(&self, fd: u8, span: Span) -> Option<ExecEvent> {
        let data = self.out[usize::from(fd == 2)].text_of(span);
        if data.is_empty() {
            None
        } else if fd == 2 {
            Some(ExecEvent::Stderr { data })
        } else {
            Some(ExecEvent::Stdout { data })
        }
    }

    fn result(&self, end: End) -> ExecResult {
        let [stdout, stderr] = &self.out;
        ExecResult {
            status: end.status,
            exit_code: end.exit_code,
            signal: end.signal,
            stdout: stdout.text(),
            stderr: stderr.text(),
            stdout_bytes: stdout.total(),
            stderr_bytes: stderr.total(),
            truncated: stdout.dropped() > 0 || stderr.dropped() > 0,
            duration_ms: end.duration_ms,
        }
    }
}

/// One API process.
pub struct Process {
    /// Its handle in the sandbox: the API's `pid` and the protocol's `proc`, chosen by the engine; not a
    /// kernel pid (the protocol's `pid`).
    pub handle: u64,
    /// What it runs.
    pub argv: Vec<String>,
    /// Start time, Unix milliseconds.
    pub started_at_ms: i64,
    started: Instant,
    stdin_open: std::sync::atomic::AtomicBool,
    /// Why the supervisor closed standard input on its own (the process did not read it), if it did.
    stdin_closed_why: Mutex<Option<String>>,
    state: Mutex<State>,
    /// Length of the log, for followers waiting on new entries.
    changed: watch::Sender<usize>,
    /// Room for the captures in the sandbox's and the daemon's output budgets.
    reservation: Reservation,
}

/// A follower of one process: every event from the first, then live ones as they come, then `None`
/// after `exited`. Each follower reads at its own pace.
pub struct Follow {
    proc: Arc<Process>,
    /// Next log entry to read.
    at: usize,
    /// Bytes of each stream (stdout, stderr) already handed out.
    sent: [u64; 2],
    done: bool,
    changed: watch::Receiver<usize>,
}

impl Follow {
    /// The next event, waiting for it if the process has not produced it yet.
    pub async fn next(&mut self) -> Option<ExecEvent> {
        loop {
            if self.done {
                return None;
            }
            if let Some(ev) = self.poll() {
                return Some(ev);
            }
            if self.changed.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The next event if there is one already.
    fn poll(&mut self) -> Option<ExecEvent> {
        let proc = Arc::clone(&self.proc);
        let st = proc.lock();
        while let Some(entry) = st.log.get(self.at) {
            match entry {
                Entry::Output { fd, span } => {
                    let i = usize::from(*fd == 2);
                    let from = span.0.max(self.sent[i]);
                    if from < span.1 {
                        self.sent[i] = span.1;
                        match st.text(*fd, (from, span.1)) {
                            Some(ev) => return Some(ev),
                            None => continue,
                        }
                    }
                    if self.at + 1 == st.log.len() {
                        // The last entry may still grow; stay on it.
                        break;
                    }
                    self.at += 1;
                }
                Entry::Event { event, streamed } => {
                    // Output that happened before this event but was not logged (a full log) goes first.
                    if let Some(ev) = self.catch_up(&st, *streamed) {
                        return Some(ev);
                    }
                    self.at += 1;
                    self.done = matches!(event, ExecEvent::Exited { .. });
                    return Some(event.clone());
                }
            }
        }
        self.catch_up(&st, st.streamed())
    }

    fn catch_up(&mut self, st: &State, upto: [u64; 2]) -> Option<ExecEvent> {
        for (i, fd) in [(0, 1u8), (1, 2u8)] {
            if self.sent[i] < upto[i] {
                let span = (self.sent[i], upto[i]);
                self.sent[i] = upto[i];
                if let Some(ev) = st.text(fd, span) {
                    return Some(ev);
                }
            }
        }
        None
    }
}

impl Process {
    pub(crate) fn new(
        handle: u64,
        argv: Vec<String>,
        cap: usize,
        started_at_ms: i64,
        stdin_open: bool,
        reservation: Reservation,
    ) -> Arc<Self> {
        Arc::new(Process {
            handle,
            argv,
            started_at_ms,
            started: Instant::now(),
            stdin_open: std::sync::atomic::AtomicBool::new(stdin_open),
            stdin_closed_why: Mutex::new(None),
            state: Mutex::new(State {
                out: [Capture::new(cap), Capture::new(cap)],
                log: Vec::new(),
                started: false,
                end: None,
            }),
            changed: watch::channel(0).0,
            reservation,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    fn notify(&self, st: &State) {
        self.changed.send_replace(st.log.len());
    }

    pub(crate) fn on_started(&self) {
        let mut st = self.lock();
        // Once, and only before the end: the supervisor's word is not trusted to be sane, and every
        // event is a log entry (the log's bound is on output entries, so events must be few).
        if st.started || st.end.is_some() {
            return;
        }
        st.started = true;
        st.log_event(ExecEvent::Started { pid: self.handle });
        self.notify(&st);
    }

    pub(crate) fn on_output(&self, fd: u8, data: &[u8]) {
        let mut st = self.lock();
        if st.end.is_some() {
            return;
        }
        let (span, began) = st.capture(fd).push(data);
        if let Some(span) = span {
            st.log_output(fd, span);
        }
        if began {
            let stream = if fd == 2 { "stderr" } else { "stdout" };
            st.log_event(ExecEvent::Truncated { stream: stream.into() });
        }
        self.notify(&st);
    }

    /// Records the end. `oom` says the sandbox's OOM-kill counter rose while it ran.
    pub(crate) fn on_exit(&self, end: Option<Termination>, oom: bool) {
        let mut st = self.lock();
        if st.end.is_some() {
            return;
        }
        for fd in [1u8, 2] {
            if let Some(span) = st.capture(fd).finish() {
                st.log_output(fd, span);
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
        let end = End { status, exit_code, signal, duration_ms: self.started.elapsed().as_millis() as u64 };
        let [stdout, stderr] = &st.out;
        let (stdout_bytes, stderr_bytes) = (stdout.total(), stderr.total());
        let truncated = stdout.dropped() > 0 || stderr.dropped() > 0;
        let held = (stdout.held() + stderr.held()) as u64;
        st.log_event(ExecEvent::Exited {
            status,
            exit_code,
            signal,
            stdout_bytes,
            stderr_bytes,
            truncated,
            duration_ms: end.duration_ms,
        });
        st.end = Some(end);
        // What the captures hold is all this process keeps from now on.
        self.reservation.shrink_to(held);
        self.notify(&st);
    }

    /// A spawn the supervisor could not perform, reported like a shell would (127 not found, 126 other).
    pub(crate) fn on_spawn_failed(&self, message: &str) {
        let code = if message.ends_with("command not found") { 127 } else { 126 };
        self.on_output(2, format!("sandlot: {message}\n").as_bytes());
        self.on_exit(Some(Termination::Exited { code }), false);
    }

    /// Whether standard input still accepts writes.
    pub fn stdin_open(&self) -> bool {
        self.stdin_open.load(std::sync::atomic::Ordering::SeqCst) && !self.finished()
    }

    pub(crate) fn close_stdin(&self) {
        self.stdin_open.store(false, std::sync::atomic::Ordering::SeqCst);
    }

    /// The supervisor closed standard input because the process did not read it.
    pub(crate) fn stdin_closed_by_supervisor(&self, why: String) {
        *lock(&self.stdin_closed_why) = Some(why);
        self.close_stdin();
    }

    /// Why the supervisor closed standard input on its own, if it did.
    pub fn stdin_closed_reason(&self) -> Option<String> {
        lock(&self.stdin_closed_why).clone()
    }

    /// Waits for the end.
    pub async fn wait(&self) -> ExecResult {
        let mut rx = self.changed.subscribe();
        loop {
            // Checked cheaply on every change (each output chunk is one); the text is rendered once.
            if self.finished() {
                return self.result().expect("finished");
            }
            if rx.changed().await.is_err() {
                // The sender lives in self, so this cannot happen while we hold &self.
                continue;
            }
        }
    }

    /// The result, if it has ended.
    pub fn result(&self) -> Option<ExecResult> {
        let st = self.lock();
        st.end.map(|end| st.result(end))
    }

    /// Whether it has ended.
    pub fn finished(&self) -> bool {
        self.lock().end.is_some()
    }

    /// A follower from the first event.
    pub fn follow(self: &Arc<Self>) -> Follow {
        Follow { proc: Arc::clone(self), at: 0, sent: [0, 0], done: false, changed: self.changed.subscribe() }
    }

    /// API view.
    pub fn info(&self) -> ProcessInfo {
        let st = self.lock();
        ProcessInfo {
            pid: self.handle,
            argv: self.argv.clone(),
            running: st.end.is_none(),
            status: st.end.map(|e| e.status),
            exit_code: st.end.map(|e| e.exit_code),
            started_at_ms: self.started_at_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;

    fn process(cap: usize, pool: &Arc<Budget>) -> Arc<Process> {
        let reservation = Reservation::take(std::slice::from_ref(pool), 2 * cap as u64).unwrap();
        Process::new(1, vec!["x".into()], cap, 0, false, reservation)
    }

    async fn drain(f: &mut Follow) -> Vec<ExecEvent> {
        let mut events = Vec::new();
        while let Some(ev) = f.next().await {
            events.push(ev);
        }
        events
    }

    fn text(events: &[ExecEvent], stderr: bool) -> String {
        events
            .iter()
            .filter_map(|e| match e {
                ExecEvent::Stdout { data } if !stderr => Some(data.as_str()),
                ExecEvent::Stderr { data } if stderr => Some(data.as_str()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_replay_after_the_end_is_the_live_stream_and_holds_no_copy() {
        let pool = Budget::new(1 << 20);
        let p = process(1000, &pool);
        let mut follower = p.follow();
        p.on_started();
        p.on_output(1, b"one\n");
        p.on_output(2, b"two\n");
        p.on_output(1, b"three\n");
        p.on_exit(Some(Termination::Exited { code: 0 }), false);
        let live = drain(&mut follower).await;
        let replay = drain(&mut p.follow()).await;
        assert_eq!(live, replay);
        assert_eq!(live.len(), 5, "{live:?}");
        assert_eq!(text(&live, false), "one\nthree\n");
        assert_eq!(p.result().unwrap().stderr, "two\n");
        assert_eq!(pool.used(), 14, "the reservation shrank to the bytes held");
        drop((p, follower));
        assert_eq!(pool.used(), 0, "a forgotten process gives its bytes back");
    }

    #[tokio::test]
    async fn a_repeated_started_event_is_logged_once() {
        let pool = Budget::new(1 << 20);
        let p = process(1000, &pool);
        for _ in 0..10_000 {
            p.on_started();
        }
        p.on_exit(Some(Termination::Exited { code: 0 }), false);
        p.on_started();
        let events = drain(&mut p.follow()).await;
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(p.lock().log.len(), 2);
    }

    #[tokio::test]
    async fn a_flood_of_tiny_interleaved_writes_keeps_the_log_bounded_and_loses_no_byte() {
        let pool = Budget::new(1 << 20);
        let p = process(1 << 16, &pool);
        p.on_started();
        let mut slow = p.follow();
        for i in 0..20_000u32 {
            p.on_output(1 + (i % 2) as u8, &[b'a' + (i % 26) as u8]);
        }
        p.on_exit(Some(Termination::Exited { code: 0 }), false);
        assert!(p.lock().log.len() <= MAX_LOG_ENTRIES + 4, "log holds {} entries", p.lock().log.len());
        let events = drain(&mut slow).await;
        let r = p.result().unwrap();
        assert_eq!(text(&events, false), r.stdout);
        assert_eq!(text(&events, true), r.stderr);
        assert_eq!(r.stdout.len() + r.stderr.len(), 20_000);
        assert!(matches!(events.last(), Some(ExecEvent::Exited { .. })));
    }
}
