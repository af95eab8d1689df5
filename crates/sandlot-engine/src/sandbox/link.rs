//! The control connection to a sandbox's supervisor: [`Sandbox::attach`] starts the read loop, which
//! routes each event to the process, connection or file transfer it belongs to and hands stream bytes
//! on without ever waiting ([`Inbound`]); [`Pending`] and [`LinkState::abandon`] cut a stream off when
//! its caller goes away or the supervisor breaks the protocol.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use sandlot_protocol::{
    encode, read_frame_async, Event, FileErrorKind, Frame, FrameError, Request, Termination, OUT_WINDOW, STREAM_WINDOW,
};
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use super::connections::Conn;
use super::transfers::FileMsg;
use super::watches::WatchSink;
use super::{now_ms, Sandbox};
use crate::budget::{Budget, SANDBOX_OUTPUT_BYTES};
use crate::driver::{Instance, Launched, Resources};
use crate::process::Process;
use crate::{lock, EngineError};

/// Bytes of supervisor stderr kept as a failure reason.
const LOG_KEEP: usize = 4096;

/// Where the read loop hands one stream's frames (a file operation's, a connection's) without ever
/// waiting: the channel is unbounded, and what may be in it is bounded instead by the supervisor's
/// send window ([`OUT_WINDOW`] bytes ahead of the consumer's credit). A supervisor that sends past
/// its window is cut off from that stream.
pub(super) struct Inbound<T> {
    pub(super) tx: mpsc::UnboundedSender<T>,
    /// Payload bytes handed on and not yet taken by the consumer.
    pub(super) held: Arc<AtomicUsize>,
}

impl<T> Clone for Inbound<T> {
    fn clone(&self) -> Self {
        Inbound { tx: self.tx.clone(), held: Arc::clone(&self.held) }
    }
}

impl<T> Inbound<T> {
    pub(super) fn new() -> (Self, mpsc::UnboundedReceiver<T>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(AtomicUsize::new(0));
        (Inbound { tx, held: Arc::clone(&held) }, rx, held)
    }

    /// Hands on `msg` carrying `bytes` of payload; `false` (and nothing sent) if that overruns the
    /// window, or carries nothing: the supervisor never sends an empty data frame, and uncounted
    /// frames would queue here without bound.
    pub(super) fn pass(&self, msg: T, bytes: usize) -> bool {
        if bytes == 0 || self.held.fetch_add(bytes, Ordering::SeqCst) + bytes > OUT_WINDOW {
            return false;
        }
        let _ = self.tx.send(msg);
        true
    }
}

/// Tells the supervisor that `bytes` of stream `id` were taken, so it may send that many more.
pub(super) async fn credit(out: &mpsc::Sender<Vec<u8>>, held: &AtomicUsize, id: u64, bytes: usize) {
    held.fetch_sub(bytes, Ordering::SeqCst);
    if let Ok(frame) = encode(&Request::Credit { id, bytes: bytes as u64 }, &[]) {
        let _ = out.send(frame).await;
    }
}

/// A stream the supervisor works on for a caller that may go away while it waits (an HTTP handler
/// dropped with its client): unless disarmed, dropping it forgets the daemon's side of the stream and
/// tells the supervisor to stop, so no thread or slot of pid 1 waits forever for a reader.
pub(super) struct Pending<'a> {
    pub(super) link: &'a LinkState,
    pub(super) stream: Option<Stream>,
}

#[derive(Clone, Copy)]
pub(super) enum Stream {
    File(u64),
    Conn(u64),
}

impl Pending<'_> {
    pub(super) fn disarm(&mut self) {
        self.stream = None;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(stream) = self.stream {
            self.link.abandon(stream, "its caller went away");
        }
    }
}

/// What the [`Sandbox`] handle and its supervisor link's read loop share: the open processes,
/// connections and file transfers the read loop routes events to, and the sandbox's liveness.
pub(super) struct LinkState {
    pub(super) conns: Mutex<HashMap<u64, Conn>>,
    /// Processes by handle (the API's pid, not the kernel's), each with the sandbox's OOM kill count
    /// when it started.
    pub(super) procs: Mutex<HashMap<u64, (Arc<Process>, u64)>>,
    /// Handles of `procs`, oldest first.
    pub(super) order: Mutex<Vec<u64>>,
    pub(super) files: Mutex<HashMap<u64, Inbound<FileMsg>>>,
    /// Open directory watches by watch id.
    pub(super) watches: Mutex<HashMap<u64, WatchSink>>,
    pub(super) alive: AtomicBool,
    pub(super) destroying: AtomicBool,
    /// Unix ms of the last process output (idle timeouts count it as activity).
    pub(super) last_output_ms: std::sync::atomic::AtomicI64,
    /// What the driver does for this sandbox (OOM counts, freeze, kill, teardown).
    pub(super) instance: Arc<dyn Instance>,
    /// Output budgets a process reserves its captures from: this sandbox's, then the daemon's.
    pub(super) output_pools: [Arc<Budget>; 2],
    /// Frames to the supervisor (the read loop's way of cutting off a stream).
    pub(super) out: mpsc::Sender<Vec<u8>>,
    /// The next process handle (the API's pid), file request or connection id: one counter for all.
    pub(super) next_id: AtomicU64,
    /// The sandbox's end (its supervisor reaped), which processes' followers wait on.
    pub(super) sandbox_end: watch::Receiver<Option<String>>,
}

impl Sandbox {
    pub(crate) fn attach(
        id: String,
        launched: Launched,
        resources: Resources,
        deaths: mpsc::UnboundedSender<crate::Death>,
        daemon_output: Arc<Budget>,
    ) -> Arc<Self> {
        let Launched { pid, control, log, instance } = launched;
        let instance: Arc<dyn Instance> = Arc::from(instance);
        control.set_nonblocking(true).expect("fcntl on a fresh socket");
        let sock = tokio::net::UnixStream::from_std(control).expect("inside a tokio runtime");
        let (mut rd, mut wr) = sock.into_split();
        let (out, mut out_rx) = mpsc::channel::<Vec<u8>>(64);
        tokio::spawn(async move {
            while let Some(frame) = out_rx.recv().await {
                if wr.write_all(&frame).await.is_err() {
                    break;
                }
            }
        });
        let (reaped_tx, reaped) = watch::channel(None);
        let link = Arc::new(LinkState {
            conns: Mutex::default(),
            procs: Mutex::default(),
            order: Mutex::default(),
            files: Mutex::default(),
            watches: Mutex::default(),
            alive: AtomicBool::new(true),
            destroying: AtomicBool::new(false),
            last_output_ms: std::sync::atomic::AtomicI64::new(0),
            instance: Arc::clone(&instance),
            output_pools: [Budget::new(SANDBOX_OUTPUT_BYTES), daemon_output],
            out: out.clone(),
            next_id: AtomicU64::new(1),
            sandbox_end: reaped,
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let log_buf = Arc::new(Mutex::new(Vec::new()));
        if let Some(log) = log {
            spawn_log_reader(log, Arc::clone(&log_buf), id.clone());
        }
        let reader_link = Arc::clone(&link);
        let reader_log = Arc::clone(&log_buf);
        let reader_id = id.clone();
        let mut reader_reaped = link.sandbox_end.clone();
        tokio::spawn(async move {
            let mut ready = Some(ready_tx);
            let end = read_loop(&mut rd, &reader_link, &mut ready).await;
            reader_link.alive.store(false, Ordering::SeqCst);
            if let Some(tx) = ready.take() {
                // Wait (briefly) for the exit status and the setup error the supervisor printed.
                let how = tokio::time::timeout(
                    std::time::Duration::from_millis(500),
                    reader_reaped.wait_for(|r| r.is_some()),
                )
                .await
                .ok()
                .and_then(|r| r.ok().and_then(|v| v.clone()))
                .unwrap_or_else(|| "still running".into());
                let log = String::from_utf8_lossy(&lock(&reader_log)).trim().to_string();
                let reason = if log.is_empty() {
                    format!("{end}; supervisor {how}")
                } else {
                    format!("{log} (supervisor {how})")
                };
                let _ = tx.send(Err(reason));
            } else if !reader_link.destroying.load(Ordering::SeqCst) {
                let log = String::from_utf8_lossy(&lock(&reader_log)).trim().to_string();
                let why = if log.is_empty() { "the sandbox's supervisor exited".to_string() } else { log };
                let _ = deaths.send(crate::Death { id: reader_id, pid, why });
            }
            reader_link.fail_all();
        });
        let waiter = Arc::clone(&instance);
        std::thread::spawn(move || {
            let _ = reaped_tx.send(Some(waiter.wait()));
        });
        Arc::new(Sandbox {
            id,
            resources,
            supervisor_pid: pid,
            out,
            link,
            ready: Mutex::new(Some(ready_rx)),
            net: Mutex::new(None),
        })
    }
}

impl LinkState {
    /// Forgets `stream` on the daemon's side, ends whatever waits on it here (with `why`), and tells
    /// the supervisor to stop it. The stop is sent from a task of its own: the read loop, which calls
    /// this for a stream that broke the protocol, never waits on the outbound channel.
    pub(super) fn abandon(&self, stream: Stream, why: &str) {
        let stop = match stream {
            Stream::File(req) => {
                if let Some(file) = lock(&self.files).remove(&req) {
                    let _ = file.tx.send(FileMsg::Failed(FileErrorKind::Other, why.to_string()));
                }
                Request::Abort { req }
            }
            Stream::Conn(conn) => {
                if let Some(c) = lock(&self.conns).remove(&conn) {
                    c.window.close();
                    let _ = c.data.tx.send(None);
                }
                Request::StreamClose { conn }
            }
        };
        if let Ok(frame) = encode(&stop, &[]) {
            let out = self.out.clone();
            tokio::spawn(async move {
                let _ = out.send(frame).await;
            });
        }
    }

    /// The supervisor is gone: every running process ends `killed` (or `oom`), every transfer fails.
    pub(super) fn fail_all(&self) {
        let procs: Vec<_> = lock(&self.procs).values().cloned().collect();
        let oom_now = self.instance.oom_kills();
        for (p, before) in procs {
            p.on_exit(None, oom_now > before);
        }
        lock(&self.files).clear();
        lock(&self.conns).clear();
        lock(&self.watches).clear();
    }
}

/// Dispatches supervisor events until the connection ends; returns why it ended.
async fn read_loop<R: AsyncRead + Unpin>(
    rd: &mut R,
    link: &LinkState,
    ready: &mut Option<oneshot::Sender<Result<(), String>>>,
) -> String {
    loop {
        let (ev, payload) = match read_frame_async::<Event, _>(rd).await {
            Ok(Frame { header, payload }) => (header, payload),
            Err(FrameError::Closed) => return "supervisor connection closed".into(),
            Err(e) => return format!("reading from the supervisor: {e}"),
        };
        match ev {
            Event::Ready { version } => {
                if let Some(tx) = ready.take() {
                    let r = if version == sandlot_protocol::VERSION {
                        Ok(())
                    } else {
                        Err(format!("supervisor speaks protocol {version}, daemon {}", sandlot_protocol::VERSION))
                    };
                    let _ = tx.send(r);
                }
            }
            Event::Started { proc, .. } => {
                if let Some((p, _)) = link.proc(proc) {
                    p.on_started();
                }
            }
            Event::SpawnFailed { proc, message } => {
                if let Some((p, _)) = link.proc(proc) {
                    p.on_spawn_failed(&message);
                }
            }
            Event::Output { proc, fd } => {
                link.last_output_ms.store(now_ms(), Ordering::Relaxed);
                if let Some((p, _)) = link.proc(proc) {
                    p.on_output(fd, &payload);
                }
            }
            Event::Exited { proc, end } => {
                if let Some((p, before)) = link.proc(proc) {
                    let killed = matches!(
                        end,
                        Termination::Signaled { signal: libc::SIGKILL } | Termination::Exited { code: 137 }
                    );
                    if killed && link.instance.oom_kills() <= before {
                        // The kernel counts an OOM kill just after sending the SIGKILL, so the victim can
                        // be reaped and reported before the count moves: look again for a moment.
                        let instance = Arc::clone(&link.instance);
                        tokio::spawn(async move {
                            let mut oom = false;
                            for _ in 0..10 {
                                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                                oom = instance.oom_kills() > before;
                                if oom {
                                    break;
                                }
                            }
                            p.on_exit(Some(end), oom);
                        });
                    } else {
                        p.on_exit(Some(end), link.instance.oom_kills() > before);
                    }
                }
            }
            Event::Connected { conn } => {
                let ready = lock(&link.conns).get_mut(&conn).and_then(|c| c.ready.take());
                if let Some(tx) = ready {
                    let _ = tx.send(Ok(()));
                }
            }
            Event::ConnectFailed { conn, message, busy } => {
                let c = lock(&link.conns).remove(&conn);
                if let Some(tx) = c.and_then(|mut c| c.ready.take()) {
                    let _ = tx.send(Err(if busy {
                        EngineError::Busy(message)
                    } else {
                        EngineError::PortUnreachable(message)
                    }));
                }
            }
            Event::Left { proc, argv } => {
                // At most once per command of ours: the supervisor is the untrusted side.
                if let Some((p, _)) = link.proc(proc) {
                    // Its Exited came first: a Left for a command still running is not one.
                    if p.finished() && p.mark_left() {
                        link.adopt_left(&p, argv);
                    }
                }
            }
            Event::StdinClosed { proc, message } => {
                if let Some((p, _)) = link.proc(proc) {
                    p.stdin_closed_by_supervisor(message);
                }
            }
            Event::StreamData { conn } => {
                let data = lock(&link.conns).get(&conn).map(|c| c.data.clone());
                if let Some(data) = data {
                    let n = payload.len();
                    if !data.pass(Some(payload), n) {
                        tracing::warn!("supervisor overran the send window of connection {conn}: closing it");
                        link.abandon(Stream::Conn(conn), "window overrun");
                    }
                }
            }
            Event::StreamAck { conn, bytes } => {
                if let Some(c) = lock(&link.conns).get(&conn) {
                    // Never more than the window: the supervisor is the untrusted side.
                    let room = STREAM_WINDOW.saturating_sub(c.window.available_permits());
                    c.window.add_permits((bytes as usize).min(room));
                }
            }
            Event::StreamClose { conn } => {
                let c = lock(&link.conns).remove(&conn);
                if let Some(c) = c {
                    c.window.close();
                    let _ = c.data.tx.send(None);
                }
            }
            Event::Watching { id } => {
                let ready = lock(&link.watches).get_mut(&id).and_then(|w| w.ready.take());
                if let Some(tx) = ready {
                    let _ = tx.send(Ok(()));
                }
            }
            Event::WatchFailed { id, kind, message } => {
                let ready = lock(&link.watches).remove(&id).and_then(|mut w| w.ready.take());
                if let Some(tx) = ready {
                    let _ = tx.send(Err(EngineError::File { kind, message }));
                }
            }
            Event::WatchEvent { id, kind, path } => {
                if let Some(w) = lock(&link.watches).get(&id) {
                    w.push(sandlot_api::WatchEvent { kind: api_watch_kind(kind), path });
                }
            }
            Event::WatchEnded { id } => {
                // Dropping the sink ends the stream after what it has queued.
                lock(&link.watches).remove(&id);
            }
            Event::Chunk { req } => {
                let file = lock(&link.files).get(&req).cloned();
                if let Some(file) = file {
                    let n = payload.len();
                    // A receiver that went away (client disconnected) just drops the rest.
                    if !file.pass(FileMsg::Chunk(payload), n) {
                        link.abandon(Stream::File(req), "the supervisor sent past its window; transfer cut off");
                    }
                }
            }
            Event::Done { req, answer } => {
                let file = lock(&link.files).remove(&req);
                if let Some(file) = file {
                    let _ = file.tx.send(FileMsg::Done(answer));
                }
            }
            Event::Failed { req, kind, message } => {
                let file = lock(&link.files).remove(&req);
                if let Some(file) = file {
                    let _ = file.tx.send(FileMsg::Failed(kind, message));
                }
            }
        }
    }
}

fn api_watch_kind(kind: sandlot_protocol::WatchKind) -> sandlot_api::WatchKind {
    use sandlot_api::WatchKind as Api;
    use sandlot_protocol::WatchKind as Wire;
    match kind {
        Wire::Create => Api::Create,
        Wire::Write => Api::Write,
        Wire::Remove => Api::Remove,
        Wire::RenameFrom => Api::RenameFrom,
        Wire::RenameTo => Api::RenameTo,
        Wire::Chmod => Api::Chmod,
        Wire::Overflow => Api::Overflow,
    }
}

/// Collects the supervisor's stderr (bounded) and logs it.
fn spawn_log_reader(log: OwnedFd, keep: Arc<Mutex<Vec<u8>>>, id: String) {
    std::thread::spawn(move || {
        use std::io::Read;
        let mut f = std::fs::File::from(log);
        let mut buf = [0u8; 4096];
        while let Ok(n) = f.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut k = lock(&keep);
            k.extend_from_slice(&buf[..n]);
            let excess = k.len().saturating_sub(LOG_KEEP);
            k.drain(..excess);
            tracing::warn!(sandbox = %id, "supervisor: {}", String::from_utf8_lossy(&buf[..n]).trim_end());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hand_off_refuses_empty_frames_and_frames_past_the_window() {
        let (inbound, mut rx, held) = Inbound::<usize>::new();
        assert!(!inbound.pass(0, 0), "an empty data frame would queue uncounted");
        assert!(inbound.pass(1, OUT_WINDOW - 1));
        assert!(inbound.pass(2, 1));
        assert!(!inbound.pass(3, 1), "one byte past the window");
        assert_eq!((rx.try_recv(), rx.try_recv()), (Ok(1), Ok(2)));
        assert!(rx.try_recv().is_err(), "refused frames are not handed on");
        assert!(held.load(Ordering::SeqCst) > OUT_WINDOW, "the overrun is counted: the stream is cut off");
    }
}
