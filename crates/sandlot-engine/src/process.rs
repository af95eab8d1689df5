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

/// Most bytes one output event carries. A follower's catch-up span may cover a whole stream (a full
/// log, then an exit); it is handed out in pieces of this size, so a follower never holds more than
/// this beyond the captures.
const MAX_CHUNK: usize = 256 * 1024;

/// Most bytes of a process's environment (names and values) a listing shows. A larger one is listed
/// by its names alone (values empty), names past this bound left out: a listing of many processes
/// costs at most this per process, not the 1 MiB a request's argv and env may take.
pub const MAX_LISTED_ENV_BYTES: usize = 64 * 1024;

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

    /// The first piece (at most [`MAX_CHUNK`] bytes) of `span` of stream `fd` and where it ends; no
    /// event when none of it is held any more (a replay of bytes that were streamed live before
    /// truncation dropped them: the `truncated` event in the log says so).
    fn piece(&self, fd: u8, span: Span) -> (Option<Next>, u64) {
        let (data, end) = self.out[usize::from(fd == 2)].piece(span, MAX_CHUNK);
        ((!data.is_empty()).then_some(Next::Output(fd, data)), end)
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

/// What a process is listed with besides its argv: the caller's label and what the request gave.
#[derive(Debug, Clone, Default)]
pub struct ProcessMeta {
    /// The request's tag.
    pub tag: Option<String>,
    /// Working directory.
    pub cwd: String,
    /// The request's own environment variables (not the sandbox's or the image's).
    pub env: std::collections::BTreeMap<String, String>,
    /// The process whose group this is, left behind when that process ended ([`sandlot_protocol::Event::Left`]).
    pub left_by: Option<u64>,
}

/// One piece of a process's output or life, with output as the bytes written ([`Follow::next_raw`]).
#[derive(Debug, Clone, PartialEq)]
pub enum RawEvent {
    /// Bytes of standard output (a pty's whole output). A chunk ends on a UTF-8 character boundary
    /// where the output is UTF-8; other bytes come as written.
    Stdout(Vec<u8>),
    /// Bytes of standard error.
    Stderr(Vec<u8>),
    /// Any other event (never `Stdout` or `Stderr`).
    Event(ExecEvent),
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
    /// Tag, cwd and the request's environment.
    pub meta: ProcessMeta,
    /// Whether it runs on a pseudo-terminal.
    pub pty: bool,
    started: Instant,
    stdin_open: std::sync::atomic::AtomicBool,
    /// Why the supervisor closed standard input on its own (the process did not read it), if it did.
    stdin_closed_why: Mutex<Option<String>>,
    /// Whether the supervisor has said what this process left in its group ([`Process::mark_left`]).
    left: std::sync::atomic::AtomicBool,
    state: Mutex<State>,
    /// Length of the log, for followers waiting on new entries.
    changed: watch::Sender<usize>,
    /// Room for the captures in the sandbox's and the daemon's output budgets.
    reservation: Reservation,
    /// The sandbox's end: its supervisor reaped (`Some` with how it ended).
    sandbox_end: watch::Receiver<Option<String>>,
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
    /// End once every event so far is handed out, instead of waiting for more ([`Follow::up_to_now`]).
    up_to_now: bool,
    changed: watch::Receiver<usize>,
}

/// What a follower found next: output bytes of a stream, or another event.
enum Next {
    Output(u8, Vec<u8>),
    Event(ExecEvent),
}

impl Follow {
    /// The next event, waiting for it if the process has not produced it yet. Output is text (UTF-8,
    /// invalid bytes replaced).
    pub async fn next(&mut self) -> Option<ExecEvent> {
        Some(match self.next_item().await? {
            Next::Output(fd, bytes) => {
                let mut data = String::from_utf8_lossy(&bytes).into_owned();
                // Replacing invalid bytes grows the text by doubling; the event holds only its text.
                data.shrink_to_fit();
                if fd == 2 {
                    ExecEvent::Stderr { data }
                } else {
                    ExecEvent::Stdout { data }
                }
            }
            Next::Event(ev) => ev,
        })
    }

    /// The next event with output as the bytes the process wrote (terminal escape sequences, binary
    /// output): what [`Follow::next`] gives, before the text conversion. The bytes are read from the
    /// one capture the process keeps.
    pub async fn next_raw(&mut self) -> Option<RawEvent> {
        Some(match self.next_item().await? {
            Next::Output(2, bytes) => RawEvent::Stderr(bytes),
            Next::Output(_, bytes) => RawEvent::Stdout(bytes),
            Next::Event(ev) => RawEvent::Event(ev),
        })
    }

    /// The process followed.
    pub fn process(&self) -> Arc<Process> {
        Arc::clone(&self.proc)
    }

    /// This follower, ending once it has handed out what the process has produced so far (a log
    /// read, not a follow).
    pub fn up_to_now(mut self) -> Self {
        self.up_to_now = true;
        self
    }

    async fn next_item(&mut self) -> Option<Next> {
        loop {
            if self.done {
                return None;
            }
            if let Some(ev) = self.poll() {
                return Some(ev);
            }
            if self.up_to_now {
                return None;
            }
            if self.changed.changed().await.is_err() {
                return None;
            }
        }
    }

    /// The next event if there is one already.
    fn poll(&mut self) -> Option<Next> {
        let proc = Arc::clone(&self.proc);
        let st = proc.lock();
        while let Some(entry) = st.log.get(self.at) {
            match entry {
                Entry::Output { fd, span } => {
                    let i = usize::from(*fd == 2);
                    let from = span.0.max(self.sent[i]);
                    if from < span.1 {
                        let (ev, end) = st.piece(*fd, (from, span.1));
                        self.sent[i] = end;
                        match ev {
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
                    return Some(Next::Event(event.clone()));
                }
            }
        }
        self.catch_up(&st, st.streamed())
    }

    fn catch_up(&mut self, st: &State, upto: [u64; 2]) -> Option<Next> {
        for (i, fd) in [(0, 1u8), (1, 2u8)] {
            // Piece by piece: the span may be the whole stream, dropped middle included.
            while self.sent[i] < upto[i] {
                let (ev, end) = st.piece(fd, (self.sent[i], upto[i]));
                self.sent[i] = end;
                if ev.is_some() {
                    return ev;
                }
            }
        }
        None
    }
}

impl Process {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        handle: u64,
        argv: Vec<String>,
        cap: usize,
        scrollback: bool,
        started_at_ms: i64,
        stdin_open: bool,
        pty: bool,
        meta: ProcessMeta,
        reservation: Reservation,
        sandbox_end: watch::Receiver<Option<String>>,
    ) -> Arc<Self> {
        Arc::new(Process {
            handle,
            argv,
            started_at_ms,
            meta,
            pty,
            started: Instant::now(),
            stdin_open: std::sync::atomic::AtomicBool::new(stdin_open),
            stdin_closed_why: Mutex::new(None),
            left: std::sync::atomic::AtomicBool::new(false),
            state: Mutex::new(State {
                out: if scrollback {
                    [Capture::scrollback(cap), Capture::scrollback(cap)]
                } else {
                    [Capture::new(cap), Capture::new(cap)]
                },
                log: Vec::new(),
                started: false,
                end: None,
            }),
            changed: watch::channel(0).0,
            reservation,
            sandbox_end,
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

    /// Records that this process left members of its group behind; `false` when that was already
    /// recorded, or when this is itself such a group (each command leaves at most one).
    pub(crate) fn mark_left(&self) -> bool {
        self.meta.left_by.is_none() && !self.left.swap(true, std::sync::atomic::Ordering::SeqCst)
    }

    /// Whether it has ended.
    pub fn finished(&self) -> bool {
        self.lock().end.is_some()
    }

    /// A follower from the first event.
    pub fn follow(self: &Arc<Self>) -> Follow {
        Follow {
            proc: Arc::clone(self),
            at: 0,
            sent: [0, 0],
            done: false,
            up_to_now: false,
            changed: self.changed.subscribe(),
        }
    }

    /// API view. The environment is capped at `MAX_LISTED_ENV_BYTES` (64 KiB).
    pub fn info(&self) -> ProcessInfo {
        let st = self.lock();
        ProcessInfo {
            pid: self.handle,
            argv: self.argv.clone(),
            running: st.end.is_none(),
            status: st.end.map(|e| e.status),
            exit_code: st.end.map(|e| e.exit_code),
            started_at_ms: self.started_at_ms,
            tag: self.meta.tag.clone(),
            cwd: self.meta.cwd.clone(),
            env: self.listed_env(),
            pty: self.pty,
            left_by: self.meta.left_by,
        }
    }

    /// The environment as listed: whole up to [`MAX_LISTED_ENV_BYTES`], else names only, up to it.
    fn listed_env(&self) -> std::collections::BTreeMap<String, String> {
        let env = &self.meta.env;
        if env.iter().map(|(k, v)| k.len() + v.len()).sum::<usize>() <= MAX_LISTED_ENV_BYTES {
            return env.clone();
        }
        let mut used = 0;
        env.keys()
            .take_while(|k| {
                used += k.len();
                used <= MAX_LISTED_ENV_BYTES
            })
            .map(|k| (k.clone(), String::new()))
            .collect()
    }

    /// About the bytes [`Process::info`] allocates (argv, listed env, cwd, tag), known before it does:
    /// what a listing counts against its bound.
    pub fn info_bytes(&self) -> usize {
        let env: usize = self.meta.env.iter().map(|(k, v)| k.len() + v.len()).sum();
        let argv: usize = self.argv.iter().map(String::len).sum();
        argv + env.min(MAX_LISTED_ENV_BYTES) + self.meta.cwd.len() + self.meta.tag.as_ref().map_or(0, String::len)
    }

    /// Waits until its sandbox has ended (deleted, stopped or crashed: its supervisor reaped). A
    /// surface streaming this process to a client that may not read selects on it, so the stream,
    /// and the `Arc` that keeps this process's output reserved, do not outlive the sandbox.
    pub async fn sandbox_ended(&self) {
        let mut end = self.sandbox_end.clone();
        // An error is a sender gone without a word: the reaper is gone, so the sandbox is too.
        let _ = end.wait_for(|e| e.is_some()).await;
    }

    /// Whether it still runs (its exit has not been recorded).
    pub fn running(&self) -> bool {
        !self.finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Budget;

    fn process(cap: usize, pool: &Arc<Budget>) -> Arc<Process> {
        let reservation = Reservation::take(std::slice::from_ref(pool), 2 * cap as u64).unwrap();
        let sandbox_end = watch::channel(None).1;
        Process::new(1, vec!["x".into()], cap, false, 0, false, false, ProcessMeta::default(), reservation, sandbox_end)
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

    /// The raw follower hands out the bytes written, escape sequences and invalid UTF-8 included, and a
    /// character split across two writes whole in one chunk; the text follower of the same process
    /// shows the same output converted, from the same capture (nothing more is reserved).
    #[tokio::test]
    async fn a_raw_follower_gets_the_bytes_and_the_text_follower_their_text() {
        let pool = Budget::new(1 << 20);
        let p = process(1000, &pool);
        let mut raw = p.follow();
        p.on_started();
        let snow = "☃".as_bytes();
        p.on_output(1, b"\x1b[1mbold\x1b[0m ");
        p.on_output(1, &snow[..2]);
        p.on_output(1, &snow[2..]);
        p.on_output(2, b"\xff\xfe");
        p.on_exit(Some(Termination::Exited { code: 0 }), false);
        let mut events = Vec::new();
        while let Some(ev) = raw.next_raw().await {
            events.push(ev);
        }
        assert!(matches!(events[0], RawEvent::Event(ExecEvent::Started { pid: 1 })), "{events:?}");
        assert_eq!(events[1], RawEvent::Stdout(b"\x1b[1mbold\x1b[0m ".to_vec()));
        assert_eq!(events[2], RawEvent::Stdout(snow.to_vec()), "the split character comes whole");
        assert_eq!(events[3], RawEvent::Stderr(vec![0xff, 0xfe]));
        assert!(matches!(events[4], RawEvent::Event(ExecEvent::Exited { .. })), "{events:?}");
        assert_eq!(events.len(), 5);
        let text = drain(&mut p.follow()).await;
        assert_eq!(text[3], ExecEvent::Stderr { data: "\u{fffd}\u{fffd}".into() });
        assert_eq!(text[2], ExecEvent::Stdout { data: "☃".into() });
        assert_eq!(pool.used(), 18, "one capture: 13 + 3 + 2 bytes held");
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

    /// A full log, then truncation, then the exit: the exit's catch-up spans the whole stream, dropped
    /// middle included (a sandbox chooses its size). Both followers get the held bytes only (head and
    /// tail), in pieces of at most [`MAX_CHUNK`] each allocated at its size, and the text follower's
    /// pieces never split a character.
    #[tokio::test]
    async fn a_catch_up_over_a_truncated_stream_hands_out_only_held_bytes_in_bounded_pieces() {
        let cap = 1 << 20;
        let pool = Budget::new(4 << 20);
        let p = process(cap, &pool);
        let (mut raw, mut text) = (p.follow(), p.follow());
        p.on_started();
        for i in 0..1100u32 {
            p.on_output(1 + (i % 2) as u8, b"x");
        }
        assert_eq!(p.lock().log.len(), MAX_LOG_ENTRIES, "the log is full before the flood");
        let block = "☃".repeat(21_845); // 65 535 bytes: pieces of MAX_CHUNK would cut characters
        let flood = 256;
        for _ in 0..flood {
            p.on_output(1, block.as_bytes());
        }
        p.on_exit(Some(Termination::Exited { code: 0 }), false);
        let written = 550 + flood * block.len();
        assert_eq!(p.result().unwrap().stdout_bytes, written as u64);

        let (mut stdout, mut stderr, mut truncated, mut pieces) = (Vec::new(), Vec::new(), 0, 0);
        while let Some(ev) = raw.next_raw().await {
            match ev {
                RawEvent::Stdout(b) | RawEvent::Stderr(b) if b.len() > MAX_CHUNK || b.capacity() > MAX_CHUNK => {
                    panic!("a piece of {} bytes with capacity {}", b.len(), b.capacity())
                }
                RawEvent::Stdout(b) => {
                    pieces += 1;
                    stdout.extend_from_slice(&b);
                }
                RawEvent::Stderr(b) => stderr.extend_from_slice(&b),
                RawEvent::Event(ExecEvent::Truncated { .. }) => truncated += 1,
                RawEvent::Event(_) => {}
            }
        }
        assert_eq!(truncated, 1, "the dropped middle is announced");
        assert_eq!(stdout.len(), cap, "stdout: head and tail, nothing of the dropped middle");
        assert!(pieces >= cap / MAX_CHUNK, "{pieces} pieces");
        assert_eq!(stderr, vec![b'x'; 550]);
        let (head, tail) = stdout.split_at(cap / 2);
        assert!(head.starts_with(&[b'x'; 550]) && tail.ends_with(block.as_bytes()));

        let mut text_stdout = String::new();
        for ev in drain(&mut text).await {
            if let ExecEvent::Stdout { data } | ExecEvent::Stderr { data } = &ev {
                // A character truncation cut at a piece's end becomes one U+FFFD: up to 2 bytes more.
                assert!(data.len() <= MAX_CHUNK + 2, "{} bytes", data.len());
                assert_eq!(data.capacity(), data.len(), "the text is allocated at its size");
            }
            if let ExecEvent::Stdout { data } = ev {
                text_stdout.push_str(&data);
            }
        }
        let whole = String::from_utf8_lossy(head).into_owned() + &String::from_utf8_lossy(tail);
        assert_eq!(text_stdout, whole, "pieces split no character (truncation's own cuts aside)");
    }

    /// A listing shows a small environment whole, a large one by names (no values) within the bound.
    #[test]
    fn a_large_environment_is_listed_by_its_names_within_the_bound() {
        let pool = Budget::new(1 << 20);
        let mut small = ProcessMeta::default();
        small.env.insert("A".into(), "1".into());
        let reservation = Reservation::take(std::slice::from_ref(&pool), 0).unwrap();
        let p =
            Process::new(1, vec!["x".into()], 0, false, 0, false, false, small, reservation, watch::channel(None).1);
        assert_eq!(p.info().env.get("A").map(String::as_str), Some("1"));
        let mut large = ProcessMeta::default();
        for i in 0..10_000 {
            large.env.insert(format!("NAME_{i:05}"), "v".repeat(90));
        }
        let reservation = Reservation::take(std::slice::from_ref(&pool), 0).unwrap();
        let p =
            Process::new(2, vec!["x".into()], 0, false, 0, false, false, large, reservation, watch::channel(None).1);
        let env = p.info().env;
        assert!(env.values().all(String::is_empty), "values are left out");
        let names: usize = env.keys().map(String::len).sum();
        assert!(names <= MAX_LISTED_ENV_BYTES && names > MAX_LISTED_ENV_BYTES - 10, "{names} bytes of names");
        assert!(p.info_bytes() <= 1 + MAX_LISTED_ENV_BYTES);
    }
}
