//! One running sandbox: the control connection to its supervisor, its processes, its file operations.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sandlot_protocol::{
    encode, read_frame_async, Event, FileAnswer, FileErrorKind, FileOp, Frame, FrameError, Request, Spawn, Termination,
    MAX_PAYLOAD, OUT_WINDOW, STREAM_WINDOW,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use crate::budget::{Budget, Reservation, SANDBOX_OUTPUT_BYTES};
use crate::driver::{Instance, Launched, Resources};
use crate::process::Process;
use crate::{lock, EngineError};

/// Most processes remembered per sandbox; the oldest finished ones are forgotten first.
const MAX_REMEMBERED_PROCESSES: usize = 1024;
/// Bytes of supervisor stderr kept as a failure reason.
const LOG_KEEP: usize = 4096;

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
    /// Wall-clock limit.
    pub timeout_ms: Option<u64>,
    /// Bytes for stdin, then EOF. `None` with `keep_stdin` leaves it open for later writes.
    pub stdin: Option<Vec<u8>>,
    /// Keep stdin open for `/stdin` calls.
    pub keep_stdin: bool,
    /// Per-stream output cap.
    pub max_output: usize,
}

enum FileMsg {
    Chunk(Vec<u8>),
    Done(FileAnswer),
    Failed(FileErrorKind, String),
}

/// Where the read loop hands one stream's frames (a file operation's, a connection's) without ever
/// waiting: the channel is unbounded, and what may be in it is bounded instead by the supervisor's
/// send window ([`OUT_WINDOW`] bytes ahead of the consumer's credit). A supervisor that sends past
/// its window is cut off from that stream.
struct Inbound<T> {
    tx: mpsc::UnboundedSender<T>,
    /// Payload bytes handed on and not yet taken by the consumer.
    held: Arc<AtomicUsize>,
}

impl<T> Clone for Inbound<T> {
    fn clone(&self) -> Self {
        Inbound { tx: self.tx.clone(), held: Arc::clone(&self.held) }
    }
}

impl<T> Inbound<T> {
    fn new() -> (Self, mpsc::UnboundedReceiver<T>, Arc<AtomicUsize>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let held = Arc::new(AtomicUsize::new(0));
        (Inbound { tx, held: Arc::clone(&held) }, rx, held)
    }

    /// Hands on `msg` carrying `bytes` of payload; `false` (and nothing sent) if that overruns the
    /// window, or carries nothing: the supervisor never sends an empty data frame, and uncounted
    /// frames would queue here without bound.
    fn pass(&self, msg: T, bytes: usize) -> bool {
        if bytes == 0 || self.held.fetch_add(bytes, Ordering::SeqCst) + bytes > OUT_WINDOW {
            return false;
        }
        let _ = self.tx.send(msg);
        true
    }
}

/// Tells the supervisor that `bytes` of stream `id` were taken, so it may send that many more.
async fn credit(out: &mpsc::Sender<Vec<u8>>, held: &AtomicUsize, id: u64, bytes: usize) {
    held.fetch_sub(bytes, Ordering::SeqCst);
    if let Ok(frame) = encode(&Request::Credit { id, bytes: bytes as u64 }, &[]) {
        let _ = out.send(frame).await;
    }
}

/// A stream the supervisor works on for a caller that may go away while it waits (an HTTP handler
/// dropped with its client): unless disarmed, dropping it forgets the daemon's side of the stream and
/// tells the supervisor to stop, so no thread or slot of pid 1 waits forever for a reader.
struct Pending<'a> {
    link: &'a LinkState,
    stream: Option<Stream>,
}

#[derive(Clone, Copy)]
enum Stream {
    File(u64),
    Conn(u64),
}

impl Pending<'_> {
    fn disarm(&mut self) {
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

/// Bytes of a file (or tar stream) coming out of the sandbox, as fast as the caller takes them: the
/// supervisor sends only what this stream gives credit for. Dropped before its end, it tells the
/// supervisor to stop reading.
pub struct FileStream {
    req: u64,
    rx: mpsc::UnboundedReceiver<FileMsg>,
    held: Arc<AtomicUsize>,
    out: mpsc::Sender<Vec<u8>>,
    first: Option<Vec<u8>>,
    ended: bool,
}

impl FileStream {
    /// The next chunk; `Ok(None)` at the end.
    pub async fn next(&mut self) -> Result<Option<Bytes>, EngineError> {
        let msg = match self.first.take() {
            Some(b) => Some(FileMsg::Chunk(b)),
            None if self.ended => return Ok(None),
            None => self.rx.recv().await,
        };
        match msg {
            Some(FileMsg::Chunk(b)) => {
                credit(&self.out, &self.held, self.req, b.len()).await;
                Ok(Some(Bytes::from(b)))
            }
            Some(FileMsg::Done(_)) => {
                self.ended = true;
                Ok(None)
            }
            Some(FileMsg::Failed(kind, message)) => {
                self.ended = true;
                Err(EngineError::File { kind, message })
            }
            None => {
                self.ended = true;
                Err(EngineError::Gone("file transfer interrupted".into()))
            }
        }
    }
}

impl Drop for FileStream {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // The client went away: the supervisor's reader, waiting for credit, stops and frees its slot.
        let (out, req) = (self.out.clone(), self.req);
        if let (Ok(rt), Ok(frame)) = (tokio::runtime::Handle::try_current(), encode(&Request::Abort { req }, &[])) {
            rt.spawn(async move {
                let _ = out.send(frame).await;
            });
        }
    }
}

/// An inbound connection being set up or open.
struct Conn {
    ready: Option<oneshot::Sender<Result<(), EngineError>>>,
    data: Inbound<Option<Vec<u8>>>,
    /// Bytes we may still send before the supervisor acknowledges some ([`STREAM_WINDOW`]).
    window: Arc<tokio::sync::Semaphore>,
}

/// What the [`Sandbox`] handle and its supervisor link's read loop share: the open processes,
/// connections and file transfers the read loop routes events to, and the sandbox's liveness.
struct LinkState {
    conns: Mutex<HashMap<u64, Conn>>,
    /// Processes by handle (the API's pid, not the kernel's), each with the sandbox's OOM kill count
    /// when it started.
    procs: Mutex<HashMap<u64, (Arc<Process>, u64)>>,
    /// Handles of `procs`, oldest first.
    order: Mutex<Vec<u64>>,
    files: Mutex<HashMap<u64, Inbound<FileMsg>>>,
    alive: AtomicBool,
    destroying: AtomicBool,
    /// Unix ms of the last process output (idle timeouts count it as activity).
    last_output_ms: std::sync::atomic::AtomicI64,
    /// What the driver does for this sandbox (OOM counts, freeze, kill, teardown).
    instance: Arc<dyn Instance>,
    /// Output budgets a process reserves its captures from: this sandbox's, then the daemon's.
    output_pools: [Arc<Budget>; 2],
    /// Frames to the supervisor (the read loop's way of cutting off a stream).
    out: mpsc::Sender<Vec<u8>>,
}

/// A running sandbox.
pub struct Sandbox {
    /// Its id.
    pub id: String,
    /// Limits it was started with.
    pub resources: Resources,
    /// Host pid of its supervisor (the sandbox's pid 1).
    supervisor_pid: i32,
    out: mpsc::Sender<Vec<u8>>,
    link: Arc<LinkState>,
    /// The next process handle (the API's pid), file request or connection id: one counter for all.
    next_id: AtomicU64,
    ready: Mutex<Option<oneshot::Receiver<Result<(), String>>>>,
    reaped: watch::Receiver<Option<String>>,
    /// The sandbox's network (created on first use of a policy that allows anything).
    net: Mutex<Option<(Arc<sandlot_netproxy::egress::SandboxNet>, tokio::task::JoinHandle<()>)>>,
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
        let link = Arc::new(LinkState {
            conns: Mutex::default(),
            procs: Mutex::default(),
            order: Mutex::default(),
            files: Mutex::default(),
            alive: AtomicBool::new(true),
            destroying: AtomicBool::new(false),
            last_output_ms: std::sync::atomic::AtomicI64::new(0),
            instance: Arc::clone(&instance),
            output_pools: [Budget::new(SANDBOX_OUTPUT_BYTES), daemon_output],
            out: out.clone(),
        });
        let (ready_tx, ready_rx) = oneshot::channel();
        let log_buf = Arc::new(Mutex::new(Vec::new()));
        if let Some(log) = log {
            spawn_log_reader(log, Arc::clone(&log_buf), id.clone());
        }
        let reader_link = Arc::clone(&link);
        let reader_log = Arc::clone(&log_buf);
        let reader_id = id.clone();
        let (reaped_tx, reaped) = watch::channel(None);
        let mut reader_reaped = reaped.clone();
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
            next_id: AtomicU64::new(1),
            ready: Mutex::new(Some(ready_rx)),
            reaped,
            net: Mutex::new(None),
        })
    }

    pub(crate) async fn ready(&self) -> Result<(), String> {
        let rx = lock(&self.ready).take();
        match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err("supervisor connection dropped".into())),
            None => Ok(()),
        }
    }

    /// Host pid of the sandbox's pid 1 (its supervisor).
    pub fn supervisor_pid(&self) -> i32 {
        self.supervisor_pid
    }

    /// The sandbox's network, if it has one.
    pub fn net(&self) -> Option<Arc<sandlot_netproxy::egress::SandboxNet>> {
        lock(&self.net).as_ref().map(|(n, _)| Arc::clone(n))
    }

    pub(crate) fn set_net(&self, net: Arc<sandlot_netproxy::egress::SandboxNet>, task: tokio::task::JoinHandle<()>) {
        *lock(&self.net) = Some((net, task));
    }

    /// Bytes `(out, in)` through the sandbox's network so far.
    pub fn net_bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.net().map_or((0, 0), |n| (n.bytes_out.load(Relaxed), n.bytes_in.load(Relaxed)))
    }

    /// Unix ms of the last output of any process (0 if none yet).
    pub fn last_output_ms(&self) -> i64 {
        self.link.last_output_ms.load(Ordering::Relaxed)
    }

    /// The host slot (uid range) it holds.
    pub fn slot(&self) -> u32 {
        self.link.instance.slot()
    }

    /// Whether the supervisor is still connected.
    pub fn alive(&self) -> bool {
        self.link.alive.load(Ordering::SeqCst)
    }

    async fn send(&self, req: &Request, payload: &[u8]) -> Result<(), EngineError> {
        let frame = encode(req, payload)?;
        if !self.alive() {
            return Err(EngineError::Gone(self.id.clone()));
        }
        self.out.send(frame).await.map_err(|_| EngineError::Gone(self.id.clone()))
    }

    /// Starts a process and returns its record once the supervisor has answered the spawn.
    pub async fn spawn(&self, spec: ExecSpec) -> Result<Arc<Process>, EngineError> {
        let handle = self.next_id.fetch_add(1, Ordering::SeqCst);
        let reservation = self.link.reserve_output(2 * spec.max_output as u64)?;
        let proc = Process::new(handle, spec.argv.clone(), spec.max_output, now_ms(), spec.keep_stdin, reservation);
        let oom_before = self.link.instance.oom_kills();
        self.link.remember(handle, Arc::clone(&proc), oom_before);
        let mut started = proc.follow();
        let spawn = Spawn {
            proc: handle,
            argv: spec.argv,
            env: spec.env,
            cwd: spec.cwd,
            uid: spec.uid,
            timeout_ms: spec.timeout_ms,
            stdin: spec.stdin.is_some() || spec.keep_stdin,
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

    fn open_file_req(&self) -> (u64, mpsc::UnboundedReceiver<FileMsg>, Arc<AtomicUsize>) {
        let req = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (inbound, rx, held) = Inbound::new();
        lock(&self.link.files).insert(req, inbound);
        (req, rx, held)
    }

    /// A file operation answered in one message (stat, list, mkdir, remove, move).
    pub(crate) async fn file_op(&self, uid: u32, op: FileOp) -> Result<FileAnswer, EngineError> {
        let (req, mut rx, _) = self.open_file_req();
        self.send(&Request::File { req, uid, op }, &[]).await?;
        loop {
            match rx.recv().await {
                Some(FileMsg::Done(v)) => return Ok(v),
                Some(FileMsg::Failed(kind, message)) => return Err(EngineError::File { kind, message }),
                Some(FileMsg::Chunk(_)) => continue,
                None => return Err(EngineError::Gone(self.id.clone())),
            }
        }
    }

    /// Starts a download (`Read` or `Tar`); errors that happen before the first byte are returned here.
    pub(crate) async fn download(&self, uid: u32, op: FileOp) -> Result<FileStream, EngineError> {
        let (req, mut rx, held) = self.open_file_req();
        let mut pending = Pending { link: &self.link, stream: Some(Stream::File(req)) };
        self.send(&Request::File { req, uid, op }, &[]).await?;
        let first = rx.recv().await;
        // From here the FileStream (or the answer) takes care of the end.
        pending.disarm();
        let stream = |rx, first, ended| FileStream { req, rx, held, out: self.out.clone(), first, ended };
        match first {
            Some(FileMsg::Chunk(b)) => Ok(stream(rx, Some(b), false)),
            // An empty file: a stream that ends at once.
            Some(FileMsg::Done(_)) => Ok(stream(rx, None, true)),
            Some(FileMsg::Failed(kind, message)) => Err(EngineError::File { kind, message }),
            None => Err(EngineError::Gone(self.id.clone())),
        }
    }

    /// Runs an upload (`Write` or `Untar`), feeding it from `body` (chunks of any size).
    pub(crate) async fn upload<R: AsyncRead + Unpin>(
        &self,
        uid: u32,
        op: FileOp,
        body: &mut R,
    ) -> Result<FileAnswer, EngineError> {
        let (req, mut rx, _) = self.open_file_req();
        // A caller dropped mid-upload would leave pid 1's writer waiting for data that never comes.
        let mut pending = Pending { link: &self.link, stream: Some(Stream::File(req)) };
        self.send(&Request::File { req, uid, op }, &[]).await?;
        let mut buf = vec![0u8; MAX_PAYLOAD];
        loop {
            // A failure reported mid-upload (too large, disk full) ends it at once.
            if let Ok(msg) = rx.try_recv() {
                pending.disarm();
                return finish_upload(msg);
            }
            let n = match body.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    let _ = self.send(&Request::Abort { req }, &[]).await;
                    return Err(EngineError::File {
                        kind: FileErrorKind::Invalid,
                        message: format!("reading the request body failed: {e}"),
                    });
                }
            };
            if n == 0 {
                break;
            }
            self.send(&Request::Data { req }, &buf[..n]).await?;
        }
        self.send(&Request::End { req }, &[]).await?;
        let answer = rx.recv().await;
        pending.disarm();
        match answer {
            Some(msg) => finish_upload(msg),
            None => Err(EngineError::Gone(self.id.clone())),
        }
    }

    /// Opens a TCP connection to a server listening on `port` of the sandbox's loopback; the returned
    /// stream carries its bytes (through the supervisor, over the control socket).
    pub async fn connect(&self, port: u16) -> Result<tokio::io::DuplexStream, EngineError> {
        let conn = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (ready_tx, ready_rx) = oneshot::channel();
        let (data_tx, mut data_rx, held) = Inbound::new();
        let window = Arc::new(tokio::sync::Semaphore::new(STREAM_WINDOW));
        lock(&self.link.conns).insert(conn, Conn { ready: Some(ready_tx), data: data_tx, window: Arc::clone(&window) });
        // A caller dropped before `Connected` would leave pid 1 holding the connection (and a slot).
        let mut pending = Pending { link: &self.link, stream: Some(Stream::Conn(conn)) };
        self.send(&Request::Connect { conn, port }, &[]).await?;
        match ready_rx.await {
            Ok(Ok(())) => pending.disarm(),
            Ok(Err(e)) => {
                pending.disarm();
                return Err(e);
            }
            Err(_) => return Err(EngineError::Gone(self.id.clone())),
        }
        let (ours, theirs) = tokio::io::duplex(256 << 10);
        let (mut rd, mut wr) = tokio::io::split(theirs);
        // Sandbox server → client, credited as the client takes it: a client that stops reading stops
        // the supervisor's reader of this connection, nothing else.
        let credits = self.out.clone();
        tokio::spawn(async move {
            while let Some(Some(chunk)) = data_rx.recv().await {
                if wr.write_all(&chunk).await.is_err() {
                    break;
                }
                credit(&credits, &held, conn, chunk.len()).await;
            }
            let _ = wr.shutdown().await;
        });
        let out = self.out.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_PAYLOAD];
            loop {
                let n = match rd.read(&mut buf).await {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                let frame = if n == 0 {
                    encode(&Request::StreamClose { conn }, &[])
                } else {
                    // Wait until the sandbox server has read enough of what went before: a server that
                    // does not read stalls its client here, not the supervisor's memory. Closed when the
                    // connection ends.
                    match window.acquire_many(n as u32).await {
                        Ok(permit) => permit.forget(),
                        Err(_) => break,
                    }
                    encode(&Request::StreamData { conn }, &buf[..n])
                };
                let Ok(frame) = frame else { break };
                if out.send(frame).await.is_err() || n == 0 {
                    break;
                }
            }
        });
        Ok(ours)
    }

    /// What the driver does for this sandbox.
    pub(crate) fn instance(&self) -> Arc<dyn Instance> {
        Arc::clone(&self.link.instance)
    }

    /// Kills the sandbox and removes its cgroup; the writable layer too when `remove_layer`.
    pub(crate) async fn destroy(&self, remove_layer: bool) {
        self.link.destroying.store(true, Ordering::SeqCst);
        if let Some((_, task)) = lock(&self.net).take() {
            task.abort();
        }
        let instance = self.instance();
        let _ = tokio::task::spawn_blocking(move || instance.kill()).await;
        let mut reaped = self.reaped.clone();
        let _ = reaped.wait_for(|r| r.is_some()).await;
        let instance = self.instance();
        let _ = tokio::task::spawn_blocking(move || instance.teardown(remove_layer)).await;
    }
}

fn finish_upload(msg: FileMsg) -> Result<FileAnswer, EngineError> {
    match msg {
        FileMsg::Done(v) => Ok(v),
        FileMsg::Failed(kind, message) => Err(EngineError::File { kind, message }),
        FileMsg::Chunk(_) => Err(EngineError::Gone("unexpected data during an upload".into())),
    }
}

impl LinkState {
    /// Forgets `stream` on the daemon's side, ends whatever waits on it here (with `why`), and tells
    /// the supervisor to stop it. The stop is sent from a task of its own: the read loop, which calls
    /// this for a stream that broke the protocol, never waits on the outbound channel.
    fn abandon(&self, stream: Stream, why: &str) {
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

    fn proc(&self, handle: u64) -> Option<(Arc<Process>, u64)> {
        lock(&self.procs).get(&handle).map(|(p, o)| (Arc::clone(p), *o))
    }

    /// The supervisor is gone: every running process ends `killed` (or `oom`), every transfer fails.
    fn fail_all(&self) {
        let procs: Vec<_> = lock(&self.procs).values().cloned().collect();
        let oom_now = self.instance.oom_kills();
        for (p, before) in procs {
            p.on_exit(None, oom_now > before);
        }
        lock(&self.files).clear();
        lock(&self.conns).clear();
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

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
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
