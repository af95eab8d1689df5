//! The control protocol between the daemon (host, trusted) and the supervisor (pid 1 of a sandbox,
//! untrusted side of the line).
//!
//! A frame is `u32 header_len | u32 payload_len | header (JSON) | payload (raw bytes)`, little endian.
//! Both lengths are capped before anything is allocated, so a hostile supervisor cannot make the daemon
//! allocate more than [`MAX_HEADER`] + [`MAX_PAYLOAD`] per frame. Bulk data (process output, file bytes)
//! travels in the payload so it is never base64-encoded.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};

/// Protocol version, sent by the supervisor in [`Event::Ready`]. 2: `Done` carries a typed
/// [`FileAnswer`] instead of free-form JSON. 3: processes on a pty ([`Spawn::pty`], [`Request::Resize`])
/// and directory watches ([`Request::Watch`]). 4: watch events flow by credit ([`Request::WatchCredit`]).
/// 5: what a finished command leaves in its process group lives on ([`Event::Left`], [`Request::Adopt`]).
pub const VERSION: u32 = 5;

/// Most bytes of the command line [`Event::Left`] names (arguments past it are left out).
pub const MAX_LEFT_ARGV_BYTES: usize = 4096;

/// Watch events the supervisor may send for one watch before the daemon gives credit back
/// ([`Request::WatchCredit`]) as its client takes them: what the daemon queues per watch. A watch
/// nobody reads costs the daemon this many events, not every change the sandbox makes; the rest
/// waits in the kernel's inotify queue (the sandbox's memory), whose overflow is reported.
pub const WATCH_CREDIT: u32 = 512;
/// Largest header accepted (argv and env of a spawn live here).
pub const MAX_HEADER: usize = 4 << 20;
/// Largest payload per frame; bulk data is split into frames of at most this size.
pub const MAX_PAYLOAD: usize = 256 << 10;

/// Bytes of `StreamData` the daemon may have sent on one connection and the supervisor not yet
/// acknowledged with [`Event::StreamAck`] (written to the sandbox server). Bounds what pid 1 buffers for
/// a server that does not read (64 connections × 256 KiB at most) and pushes back on the client instead.
pub const STREAM_WINDOW: usize = MAX_PAYLOAD;

/// Bytes of one outbound stream (a download, an inbound connection's replies) the supervisor may have
/// sent and the daemon's consumer not yet taken ([`Request::Credit`]). The daemon's read loop hands
/// frames on without waiting for any consumer, so this is what bounds the daemon's memory for a client
/// that stops reading, and what keeps such a client from stalling the sandbox's other streams: four
/// frames in flight keep a download at full speed over the control socket.
pub const OUT_WINDOW: usize = 4 * MAX_PAYLOAD;

/// Sandbox-side file descriptor number on which the supervisor finds its control socket.
pub const CONTROL_FD: i32 = 3;

/// Daemon → supervisor.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// Start a process. Its output arrives as [`Event::Output`] frames tagged with `proc`.
    Spawn(Spawn),
    /// Bytes for a process's standard input (in the payload); `eof` closes it afterwards.
    Stdin {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Close standard input after the payload.
        eof: bool,
    },
    /// Send a signal to a process's whole group.
    Signal {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Signal number.
        signal: i32,
    },
    /// Track the process group `pgid` that process `left_by` left behind ([`Event::Left`]) as process
    /// `proc`: signals reach the group, and [`Event::Exited`] for `proc` comes once it has no member.
    Adopt {
        /// The new process handle (the API's pid) the daemon gave the group.
        proc: u64,
        /// The handle of the command that left it.
        left_by: u64,
    },
    /// New terminal size for a process started with [`Spawn::pty`] (the kernel sends SIGWINCH to its
    /// foreground process group). Ignored for a process without a pty or one that has ended.
    Resize {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Rows.
        rows: u16,
        /// Columns.
        cols: u16,
    },
    /// Start watching a directory; answered by [`Event::Watching`] or [`Event::WatchFailed`], then
    /// [`Event::WatchEvent`]s until [`Request::Unwatch`].
    Watch {
        /// Watch id chosen by the daemon.
        id: u64,
        /// Sandbox uid the directory is resolved and read as.
        uid: u32,
        /// Absolute path of the directory.
        path: String,
        /// Watch the subdirectories too, those created later included.
        recursive: bool,
    },
    /// Stop a watch (its inotify descriptor is closed; no event follows [`Event::WatchEnded`]).
    Unwatch {
        /// Watch id.
        id: u64,
    },
    /// `events` more [`Event::WatchEvent`]s of watch `id` may be sent (its client took, or the
    /// daemon dropped, that many). A watch starts with [`WATCH_CREDIT`].
    WatchCredit {
        /// Watch id.
        id: u64,
        /// Events given back.
        events: u32,
    },
    /// A file-system operation; answered by [`Event::Done`], [`Event::Failed`] or data frames.
    File {
        /// Request id, echoed in answers.
        req: u64,
        /// Sandbox uid to perform it as.
        uid: u32,
        /// The operation.
        op: FileOp,
    },
    /// Payload bytes for an open upload (`FileOp::Write` or `FileOp::Untar`).
    Data {
        /// Request id of the upload.
        req: u64,
    },
    /// End of an upload: the supervisor commits it and answers `Done`.
    End {
        /// Request id of the upload.
        req: u64,
    },
    /// Abandon an upload (nothing is committed) or a download (its reader stops).
    Abort {
        /// Request id of the upload or download.
        req: u64,
    },
    /// The daemon's consumer took `bytes` of what the supervisor sent on stream `id` (a download's
    /// `Chunk`s, a connection's `StreamData`): the supervisor may send that many more (see
    /// [`OUT_WINDOW`]).
    Credit {
        /// Request id of a download, or connection id.
        id: u64,
        /// Bytes consumed.
        bytes: u64,
    },
    /// Open a TCP connection to `127.0.0.1:port` inside the sandbox (inbound traffic to a server the
    /// sandbox runs); answered by `Connected` or `ConnectFailed`.
    Connect {
        /// Connection id chosen by the daemon.
        conn: u64,
        /// Port inside the sandbox.
        port: u16,
    },
    /// Bytes for an open connection (in the payload).
    StreamData {
        /// Connection id.
        conn: u64,
    },
    /// The daemon's side is done sending (the supervisor shuts down its write half).
    StreamClose {
        /// Connection id.
        conn: u64,
    },
}

/// A process to start.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Spawn {
    /// Handle chosen by the daemon (the API's pid), not a kernel pid.
    pub proc: u64,
    /// Program and arguments; `argv[0]` is looked up in `PATH`.
    pub argv: Vec<String>,
    /// Complete environment.
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: String,
    /// Uid inside the sandbox (and gid, unless `gid` says otherwise).
    pub uid: u32,
    /// Gid inside the sandbox, when it differs from the uid (an image's `USER app:staff`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gid: Option<u32>,
    /// Wall-clock limit; the group is killed with SIGKILL when it passes.
    pub timeout_ms: Option<u64>,
    /// Keep standard input open for [`Request::Stdin`] (else it reads from /dev/null). With `pty`,
    /// `false` means writes are refused; the terminal itself is always the process's stdin.
    pub stdin: bool,
    /// Run on a new pseudo-terminal of this size: the process leads a new session with the terminal as
    /// its controlling terminal and its stdin, stdout and stderr; its output is the terminal's, sent
    /// as stdout (`fd` 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
}

/// Size of a pseudo-terminal.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct PtySize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// File operations performed by the supervisor inside the sandbox's own view.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FileOp {
    /// Stream a regular file back as `Chunk` frames, then `Done`.
    Read {
        /// Path.
        path: String,
    },
    /// Begin an upload; data follows in `Data` frames, committed atomically at `End`.
    Write {
        /// Path.
        path: String,
        /// Permission bits.
        mode: u32,
        /// Most bytes accepted.
        max_bytes: u64,
        /// Write into the file itself (created or truncated, then the bytes) instead of beside it
        /// with a rename at the end: a directory watcher then sees what E2B's envd makes it see
        /// (create, write, chmod on the file's own name), at the cost of a failed upload leaving
        /// the file partial.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        in_place: bool,
        /// User metadata for the file, stored as `user.e2b.KEY` extended attributes (the namespace
        /// E2B's envd uses); any the file had before are cleared first.
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        metadata: BTreeMap<String, String>,
    },
    /// Metadata of one path (symlinks not followed).
    Stat {
        /// Path.
        path: String,
    },
    /// Entries below a directory.
    List {
        /// Directory.
        path: String,
        /// 1 = direct children.
        depth: u32,
        /// Most entries returned.
        max_entries: u32,
    },
    /// Create a directory.
    Mkdir {
        /// Path.
        path: String,
        /// What happens with missing parents and with a directory already there.
        mode: MkdirMode,
    },
    /// Remove a file or directory.
    Remove {
        /// Path.
        path: String,
        /// Remove a non-empty directory too.
        recursive: bool,
    },
    /// Rename.
    Move {
        /// Source.
        from: String,
        /// Destination.
        to: String,
        /// Replace an existing destination.
        overwrite: bool,
    },
    /// Begin a tar upload unpacked into a directory; data follows in `Data` frames.
    Untar {
        /// Destination directory (created if missing).
        path: String,
        /// Most bytes accepted.
        max_bytes: u64,
    },
    /// Stream a directory as a tar archive in `Chunk` frames, then `Done`.
    Tar {
        /// Directory.
        path: String,
    },
}

/// Supervisor → daemon.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The supervisor has finished setting up and accepts requests.
    Ready {
        /// Its protocol version.
        version: u32,
    },
    /// A spawned process is running.
    Started {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Kernel pid inside the sandbox.
        pid: i32,
    },
    /// A spawn failed before the program ran (not found, bad cwd…).
    SpawnFailed {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Why.
        message: String,
    },
    /// Output bytes in the payload.
    Output {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// 1 = stdout, 2 = stderr.
        fd: u8,
    },
    /// The process ended and both output pipes are drained; nothing more comes for `proc`.
    Exited {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// How.
        end: Termination,
    },
    /// Process `proc` has ended (its [`Event::Exited`] came first) but members of its process group
    /// live on (a server started with `&`, `nohup`): they keep running until they end or the sandbox
    /// does. The daemon answers with [`Request::Adopt`] to track them under a handle of their own.
    Left {
        /// Process handle (the API's pid) of the command that ended.
        proc: u64,
        /// The command line of the group's oldest member (at most [`MAX_LEFT_ARGV_BYTES`]).
        argv: Vec<String>,
    },
    /// The supervisor closed a process's standard input without being asked to: the process did not read
    /// it and more bytes waited than the supervisor buffers. Later `Stdin` requests are dropped.
    StdinClosed {
        /// Process handle (the API's pid), not a kernel pid.
        proc: u64,
        /// Why, for the API caller.
        message: String,
    },
    /// A `Watch` is in place; its events follow.
    Watching {
        /// Watch id.
        id: u64,
    },
    /// A `Watch` could not be set up (missing path, not a directory, no permission, too many watches).
    WatchFailed {
        /// Watch id.
        id: u64,
        /// Category.
        kind: FileErrorKind,
        /// Why (paths are the sandbox's own).
        message: String,
    },
    /// Something changed below a watched directory.
    WatchEvent {
        /// Watch id.
        id: u64,
        /// What happened.
        kind: WatchKind,
        /// Absolute path inside the sandbox of the entry it happened to (the watched directory for
        /// `overflow`).
        path: String,
    },
    /// A watch ended on the supervisor's side (after `Unwatch`, or because the watched directory went
    /// away); nothing more comes for `id`.
    WatchEnded {
        /// Watch id.
        id: u64,
    },
    /// Bytes of a file read or tar download, in the payload.
    Chunk {
        /// Request id.
        req: u64,
    },
    /// A file operation finished.
    Done {
        /// Request id.
        req: u64,
        /// What it did or found; one kind of answer per [`FileOp`].
        answer: FileAnswer,
    },
    /// A `Connect` succeeded.
    Connected {
        /// Connection id.
        conn: u64,
    },
    /// A `Connect` failed (nothing listens there, …).
    ConnectFailed {
        /// Connection id.
        conn: u64,
        /// Why.
        message: String,
        /// The sandbox is at its limit of open connections (or threads): retrying later may work.
        #[serde(default)]
        busy: bool,
    },
    /// Bytes from the sandbox side of a connection (in the payload).
    StreamData {
        /// Connection id.
        conn: u64,
    },
    /// `bytes` of the daemon's `StreamData` were written to the sandbox server: the daemon may send that
    /// many more (see [`STREAM_WINDOW`]).
    StreamAck {
        /// Connection id.
        conn: u64,
        /// Bytes written.
        bytes: u64,
    },
    /// The sandbox side closed (EOF or error); nothing more comes for `conn`.
    StreamClose {
        /// Connection id.
        conn: u64,
    },
    /// A file operation failed.
    Failed {
        /// Request id.
        req: u64,
        /// Category.
        kind: FileErrorKind,
        /// Message (paths are the sandbox's own).
        message: String,
    },
}

/// The answer of a finished [`FileOp`]: the variant names the operation it answers, so a daemon that
/// gets another kind than it asked for knows the supervisor broke the protocol.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FileAnswer {
    /// A download (`Read` or `Tar`) sent all its `Chunk`s.
    Sent {
        /// Payload bytes sent in `Chunk` frames.
        bytes: u64,
    },
    /// A `Write` was committed.
    Written {
        /// Bytes written.
        bytes: u64,
    },
    /// An `Untar` was unpacked.
    Untarred {
        /// Archive entries unpacked.
        entries: u64,
        /// Archive bytes received.
        bytes: u64,
    },
    /// Metadata of the path of a `Stat`.
    Stat(FileStat),
    /// The entries of a `List`, sorted by path.
    List {
        /// One per entry below the directory, to the asked depth.
        entries: Vec<FileStat>,
    },
    /// A `Mkdir` created the directory (or, with `parents`, found it there).
    Made,
    /// A `Remove` removed the path.
    Removed,
    /// A `Move` renamed the path.
    Moved,
}

/// How a [`FileOp::Mkdir`] treats missing parents and a directory already there.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MkdirMode {
    /// `mkdir`: the parent must exist, and the path must not.
    Single,
    /// `mkdir -p`: parents are made as needed, and a directory already there is success.
    Parents,
    /// Parents are made as needed; the directory itself must be new (envd's `MakeDir`), decided by
    /// the last `mkdir`, so two callers cannot both be told they made it.
    ParentsNew,
}

/// Metadata of one path inside the sandbox, symlinks not followed.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct FileStat {
    /// Absolute path.
    pub path: String,
    /// Last path component (`/` for the root).
    pub name: String,
    /// Entry kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Owner uid.
    pub uid: u32,
    /// Modification time, Unix milliseconds.
    pub mtime_ms: i64,
    /// Target of a symlink (absent for other kinds, and for links on /proc or /sys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
    /// User metadata: the entry's `user.e2b.*` extended attributes, prefix stripped.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// Kind of a file-system entry.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Device, socket or FIFO.
    Other,
}

/// Kinds of change a watch reports.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    /// An entry was created (or moved in from outside the watched tree).
    Create,
    /// A file opened for writing was closed (IN_CLOSE_WRITE): one event per finished write, not one
    /// per `write(2)`.
    Write,
    /// An entry was removed (or moved out of the watched tree).
    Remove,
    /// An entry was renamed away from this path (the `rename_to` with the new path follows).
    RenameFrom,
    /// An entry was renamed to this path.
    RenameTo,
    /// Permissions, ownership or timestamps changed (IN_ATTRIB).
    Chmod,
    /// Events were lost (the kernel's queue overflowed, or the supervisor or the daemon could not keep
    /// up with a reader that does not read); what changed meanwhile is unknown.
    Overflow,
}

/// How a process ended, as the supervisor saw it.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "how", rename_all = "snake_case")]
pub enum Termination {
    /// Normal exit.
    Exited {
        /// Exit code.
        code: i32,
    },
    /// A signal ended it.
    Signaled {
        /// Signal number.
        signal: i32,
    },
    /// The supervisor killed it because its timeout passed.
    Timeout,
}

/// Categories of file-operation failure, mapped to API error codes by the daemon.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FileErrorKind {
    /// ENOENT.
    NotFound,
    /// EACCES / EPERM / EROFS.
    PermissionDenied,
    /// EISDIR / ENOTDIR / not a regular file.
    WrongKind,
    /// EEXIST.
    AlreadyExists,
    /// ENOTEMPTY: a directory removed without `recursive`.
    NotEmpty,
    /// Upload larger than allowed, ENOSPC, EDQUOT, EFBIG.
    TooLarge,
    /// Malformed input (bad tar entry, relative path…).
    Invalid,
    /// The sandbox runs as many file operations as its supervisor allows at once (or cannot start a
    /// thread): retrying later may work.
    Busy,
    /// Anything else.
    Other,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<T> {
    /// The message.
    pub header: T,
    /// Bulk bytes (possibly empty).
    pub payload: Vec<u8>,
}

/// Framing failures.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The peer closed the connection between frames.
    #[error("connection closed")]
    Closed,
    /// Read or write failed.
    #[error("control socket I/O: {0}")]
    Io(#[from] io::Error),
    /// A length field is over its cap.
    #[error("frame too large: header {header} bytes, payload {payload} bytes")]
    TooLarge {
        /// Announced header length.
        header: usize,
        /// Announced payload length.
        payload: usize,
    },
    /// The header is not a message of this protocol.
    #[error("malformed frame header: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Encodes one frame into bytes ready to write.
pub fn encode<T: Serialize>(header: &T, payload: &[u8]) -> Result<Vec<u8>, FrameError> {
    let head = serde_json::to_vec(header)?;
    if head.len() > MAX_HEADER || payload.len() > MAX_PAYLOAD {
        return Err(FrameError::TooLarge { header: head.len(), payload: payload.len() });
    }
    let mut out = Vec::with_capacity(8 + head.len() + payload.len());
    out.extend_from_slice(&(head.len() as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(payload);
    Ok(out)
}

/// Bytes of the length prefix that starts every frame.
pub const PREFIX_LEN: usize = 8;

/// Checks the 8-byte length prefix and returns `(header_len, payload_len)`.
pub fn parse_prefix(prefix: [u8; PREFIX_LEN]) -> Result<(usize, usize), FrameError> {
    let header = u32::from_le_bytes(prefix[..4].try_into().expect("4 bytes")) as usize;
    let payload = u32::from_le_bytes(prefix[4..].try_into().expect("4 bytes")) as usize;
    if header > MAX_HEADER || payload > MAX_PAYLOAD || header == 0 {
        return Err(FrameError::TooLarge { header, payload });
    }
    Ok((header, payload))
}

/// The rest of a frame whose prefix passed the caps: buffers of exactly the announced sizes for the
/// reader to fill, then decoded. The blocking and the async reader share it, so the caps, the
/// allocation and the decoding exist once and only the I/O calls differ.
struct FrameBody {
    head: Vec<u8>,
    payload: Vec<u8>,
}

impl FrameBody {
    fn new(prefix: [u8; PREFIX_LEN]) -> Result<Self, FrameError> {
        let (hlen, plen) = parse_prefix(prefix)?;
        Ok(FrameBody { head: vec![0u8; hlen], payload: vec![0u8; plen] })
    }

    fn decode<T: for<'de> Deserialize<'de>>(self) -> Result<Frame<T>, FrameError> {
        Ok(Frame { header: serde_json::from_slice(&self.head)?, payload: self.payload })
    }
}

/// A failed read of the prefix: a clean EOF between frames is [`FrameError::Closed`].
fn prefix_error(e: io::Error) -> FrameError {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        FrameError::Closed
    } else {
        FrameError::Io(e)
    }
}

/// Writes one frame (blocking).
pub fn write_frame<T: Serialize, W: Write>(w: &mut W, header: &T, payload: &[u8]) -> Result<(), FrameError> {
    w.write_all(&encode(header, payload)?)?;
    Ok(())
}

/// Reads one frame (blocking). Returns [`FrameError::Closed`] on a clean EOF between frames.
pub fn read_frame<T: for<'de> Deserialize<'de>, R: Read>(r: &mut R) -> Result<Frame<T>, FrameError> {
    let mut prefix = [0u8; PREFIX_LEN];
    r.read_exact(&mut prefix).map_err(prefix_error)?;
    let mut body = FrameBody::new(prefix)?;
    r.read_exact(&mut body.head)?;
    r.read_exact(&mut body.payload)?;
    body.decode()
}

/// Reads one frame from an async reader (the daemon's side), with the same caps and errors as
/// [`read_frame`].
#[cfg(feature = "tokio")]
pub async fn read_frame_async<T: for<'de> Deserialize<'de>, R: tokio::io::AsyncRead + Unpin>(
    r: &mut R,
) -> Result<Frame<T>, FrameError> {
    use tokio::io::AsyncReadExt;
    let mut prefix = [0u8; PREFIX_LEN];
    r.read_exact(&mut prefix).await.map_err(prefix_error)?;
    let mut body = FrameBody::new(prefix)?;
    r.read_exact(&mut body.head).await?;
    r.read_exact(&mut body.payload).await?;
    body.decode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip() {
        let ev = Event::Output { proc: 7, fd: 1 };
        let bytes = encode(&ev, b"hello").unwrap();
        let frame: Frame<Event> = read_frame(&mut &bytes[..]).unwrap();
        assert_eq!(frame.header, ev);
        assert_eq!(frame.payload, b"hello");
    }

    #[test]
    fn oversized_lengths_are_refused_before_allocation() {
        let mut prefix = [0u8; 8];
        prefix[..4].copy_from_slice(&10u32.to_le_bytes());
        prefix[4..].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(parse_prefix(prefix), Err(FrameError::TooLarge { .. })));
        let mut prefix = [0u8; 8];
        prefix[..4].copy_from_slice(&(MAX_HEADER as u32 + 1).to_le_bytes());
        assert!(matches!(parse_prefix(prefix), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn clean_eof_is_closed_and_torn_frame_is_io() {
        assert!(matches!(read_frame::<Event, _>(&mut &b""[..]), Err(FrameError::Closed)));
        let bytes = encode(&Event::Ready { version: 1 }, b"").unwrap();
        let torn = &bytes[..bytes.len() - 1];
        assert!(matches!(read_frame::<Event, _>(&mut &torn[..]), Err(FrameError::Io(_))));
    }

    #[test]
    fn garbage_header_is_malformed() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&3u32.to_le_bytes());
        bytes.extend_from_slice(&0u32.to_le_bytes());
        bytes.extend_from_slice(b"{x}");
        assert!(matches!(read_frame::<Event, _>(&mut &bytes[..]), Err(FrameError::Malformed(_))));
    }

    fn stat(path: &str, kind: FileKind, link_target: Option<&str>) -> FileStat {
        FileStat {
            path: path.into(),
            name: path.rsplit('/').next().unwrap_or("/").into(),
            kind,
            size: 4096,
            mode: 0o755,
            uid: 1000,
            mtime_ms: 1_700_000_000_123,
            link_target: link_target.map(Into::into),
            metadata: BTreeMap::new(),
        }
    }

    /// One of each kind of answer, with every optional field both set and unset.
    fn every_answer() -> Vec<FileAnswer> {
        vec![
            FileAnswer::Sent { bytes: 0 },
            FileAnswer::Sent { bytes: u64::MAX },
            FileAnswer::Written { bytes: 12 },
            FileAnswer::Untarred { entries: 3, bytes: 10_240 },
            FileAnswer::Stat(stat("/home/user/a", FileKind::File, None)),
            FileAnswer::Stat(stat("/home/user/l", FileKind::Symlink, Some("/etc/passwd"))),
            FileAnswer::List { entries: vec![] },
            FileAnswer::List {
                entries: vec![
                    stat("/d/dir", FileKind::Dir, None),
                    stat("/d/fifo", FileKind::Other, None),
                    stat("/d/link", FileKind::Symlink, Some("dir")),
                ],
            },
            FileAnswer::Made,
            FileAnswer::Removed,
            FileAnswer::Moved,
        ]
    }

    #[test]
    fn every_file_answer_round_trips_through_a_frame() {
        for (req, answer) in every_answer().into_iter().enumerate() {
            let ev = Event::Done { req: req as u64, answer };
            let bytes = encode(&ev, b"").unwrap();
            let frame: Frame<Event> = read_frame(&mut &bytes[..]).unwrap();
            assert_eq!(frame.header, ev);
            assert!(frame.payload.is_empty());
        }
    }

    #[test]
    fn file_answers_are_tagged_by_type_and_omit_absent_link_targets() {
        let done = Event::Done { req: 3, answer: FileAnswer::Untarred { entries: 2, bytes: 5 } };
        assert_eq!(
            serde_json::to_value(&done).unwrap(),
            serde_json::json!({"ev": "done", "req": 3, "answer": {"type": "untarred", "entries": 2, "bytes": 5}})
        );
        let st = serde_json::to_value(FileAnswer::Stat(stat("/a", FileKind::File, None))).unwrap();
        assert_eq!(st["type"], "stat");
        assert_eq!(st["kind"], "file");
        assert!(st.get("link_target").is_none(), "{st}");
        assert_eq!(serde_json::to_value(FileAnswer::Removed).unwrap(), serde_json::json!({"type": "removed"}));
    }

    #[test]
    fn an_answer_of_no_known_type_is_malformed() {
        for bad in [
            r#"{"ev":"done","req":1,"answer":{"type":"deleted"}}"#,
            r#"{"ev":"done","req":1,"answer":{"type":"written"}}"#,
            r#"{"ev":"done","req":1,"answer":null}"#,
            r#"{"ev":"done","req":1,"answer":{"type":"stat","path":"/a","kind":"file"}}"#,
        ] {
            let mut bytes = Vec::new();
            bytes.extend_from_slice(&(bad.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&0u32.to_le_bytes());
            bytes.extend_from_slice(bad.as_bytes());
            assert!(matches!(read_frame::<Event, _>(&mut &bytes[..]), Err(FrameError::Malformed(_))), "{bad}");
        }
    }

    /// The async reader (the daemon's) gives what the blocking one gives, on the same bytes.
    #[cfg(feature = "tokio")]
    #[test]
    fn the_async_reader_agrees_with_the_blocking_one() {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let mut stream = Vec::new();
            for (req, answer) in every_answer().into_iter().enumerate() {
                stream.extend(encode(&Event::Done { req: req as u64, answer }, b"").unwrap());
            }
            stream.extend(encode(&Event::Chunk { req: 9 }, &[7u8; MAX_PAYLOAD]).unwrap());
            let (mut sync_rd, mut async_rd) = (&stream[..], &stream[..]);
            loop {
                let want = read_frame::<Event, _>(&mut sync_rd);
                let got = read_frame_async::<Event, _>(&mut async_rd).await;
                match (want, got) {
                    (Ok(w), Ok(g)) => assert_eq!(w, g),
                    (Err(FrameError::Closed), Err(FrameError::Closed)) => break,
                    (w, g) => panic!("blocking reader: {w:?}, async reader: {g:?}"),
                }
            }

            let mut oversized = Vec::new();
            oversized.extend_from_slice(&10u32.to_le_bytes());
            oversized.extend_from_slice(&(MAX_PAYLOAD as u32 + 1).to_le_bytes());
            let r = read_frame_async::<Event, _>(&mut &oversized[..]).await;
            assert!(matches!(r, Err(FrameError::TooLarge { .. })), "{r:?}");

            let bytes = encode(&Event::Ready { version: VERSION }, b"").unwrap();
            let r = read_frame_async::<Event, _>(&mut &bytes[..bytes.len() - 1]).await;
            assert!(matches!(r, Err(FrameError::Io(_))), "a torn frame: {r:?}");
        });
    }
}
