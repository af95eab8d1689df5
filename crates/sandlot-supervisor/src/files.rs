//! File operations, performed inside the sandbox's own mount namespace and root.
//!
//! Each operation runs on its own thread whose fsuid/fsgid are set to the requesting sandbox user first
//! (Linux keeps these per thread), so permission checks are the kernel's own and a `user` request cannot
//! read `/root`. Paths resolve against the sandbox root (the supervisor has pivoted into it), so symlinks
//! and `..` written by sandbox code lead only to the sandbox's own files. The thread also drops to the
//! capabilities a command of that user has (`harden::limit_thread_caps`).
//!
//! Pid 1 must survive whatever the sandbox puts in its way: at most [`MAX_FILE_OPS`] operations run at
//! once; a download opens without blocking and refuses anything but a regular file outside `/proc` and
//! `/sys` (a FIFO would block its thread forever, `/proc/self/pagemap` never ends) and stops at the size
//! seen at open; a recursive remove walks the tree iteratively, descriptor-relative, so depth costs no
//! stack.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::UNIX_EPOCH;

use sandlot_protocol::{Event, FileAnswer, FileErrorKind, FileKind, FileOp, FileStat, MkdirMode, MAX_PAYLOAD};

use crate::credit::{Credits, Window};
use crate::{lock, spawn_thread, Outbox, Permit};

/// File operations running at once in one sandbox, each on a thread of pid 1 (threads count against
/// the sandbox's pids limit). 16 covers a client that uploads or downloads several files in parallel;
/// past it an operation is refused as busy rather than queued, so a burst never costs pid 1 more.
const MAX_FILE_OPS: usize = 16;

enum UploadMsg {
    Data(Vec<u8>),
    End,
    Abort,
}

/// Open uploads, keyed by request id, which the control loop feeds; and the count of running operations.
#[derive(Clone)]
pub(crate) struct Uploads {
    open: Arc<Mutex<HashMap<u64, SyncSender<UploadMsg>>>>,
    running: Arc<AtomicUsize>,
    /// The commands' RLIMIT_FSIZE (0 = none): no file the API writes may be larger either.
    max_file_bytes: u64,
}

impl Uploads {
    pub(crate) fn new(max_file_bytes: u64) -> Self {
        Uploads { open: Arc::default(), running: Arc::default(), max_file_bytes }
    }

    fn register(&self, req: u64) -> Receiver<UploadMsg> {
        // A small bound: a slow disk pushes back on the control socket instead of buffering in RAM.
        let (tx, rx) = sync_channel(8);
        lock(&self.open).insert(req, tx);
        rx
    }

    fn forget(&self, req: u64) {
        lock(&self.open).remove(&req);
    }

    fn send(&self, req: u64, msg: UploadMsg) {
        let tx = lock(&self.open).get(&req).cloned();
        if let Some(tx) = tx {
            // A closed receiver means the upload already failed and said so.
            let _ = tx.send(msg);
        }
    }

    pub(crate) fn data(&self, req: u64, bytes: Vec<u8>) {
        self.send(req, UploadMsg::Data(bytes));
    }

    pub(crate) fn end(&self, req: u64) {
        self.send(req, UploadMsg::End);
        self.forget(req);
    }

    pub(crate) fn abort(&self, req: u64) {
        self.send(req, UploadMsg::Abort);
        self.forget(req);
    }
}

/// An operation failure, as reported to the daemon.
#[derive(Debug)]
pub(crate) struct OpError {
    pub(crate) kind: FileErrorKind,
    pub(crate) message: String,
}

impl OpError {
    pub(crate) fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        OpError { kind, message: message.into() }
    }

    pub(crate) fn io(path: &Path, e: io::Error) -> Self {
        let kind = match e.raw_os_error() {
            Some(libc::ENOENT) => FileErrorKind::NotFound,
            Some(libc::EACCES | libc::EPERM | libc::EROFS) => FileErrorKind::PermissionDenied,
            Some(libc::EISDIR | libc::ENOTDIR) => FileErrorKind::WrongKind,
            Some(libc::EEXIST) => FileErrorKind::AlreadyExists,
            Some(libc::ENOTEMPTY) => FileErrorKind::NotEmpty,
            Some(libc::ENOSPC | libc::EDQUOT | libc::EFBIG) => FileErrorKind::TooLarge,
            Some(libc::ELOOP | libc::ENAMETOOLONG | libc::EINVAL | libc::EXDEV) => FileErrorKind::Invalid,
            _ => FileErrorKind::Other,
        };
        let what = match kind {
            FileErrorKind::NotFound => "no such file or directory".to_string(),
            FileErrorKind::PermissionDenied => "permission denied".to_string(),
            _ if e.raw_os_error() == Some(libc::EXDEV) => {
                "cannot move across filesystems (/tmp and /dev/shm are separate); copy and remove instead".to_string()
            }
            _ => e.to_string(),
        };
        OpError { kind, message: format!("{}: {what}", path.display()) }
    }
}

type OpResult = Result<FileAnswer, OpError>;

/// Starts one file operation on its own thread, unless [`MAX_FILE_OPS`] already run.
pub(crate) fn start(out: &Outbox, uploads: &Uploads, credits: &Credits, req: u64, uid: u32, op: FileOp) {
    let busy = |message: String| out.send(&Event::Failed { req, kind: FileErrorKind::Busy, message }, &[]);
    let Some(permit) = Permit::take(&uploads.running, MAX_FILE_OPS) else {
        busy(format!(
            "the sandbox already runs {MAX_FILE_OPS} file operations (the limit per sandbox); retry when one has \
             finished"
        ));
        return;
    };
    // Uploads are registered before the control loop reads their first Data frame.
    let rx = match &op {
        FileOp::Write { .. } | FileOp::Untar { .. } => Some(uploads.register(req)),
        _ => None,
    };
    // Downloads send only as fast as the daemon's reader takes (see `credit`).
    let window = matches!(op, FileOp::Read { .. } | FileOp::Tar { .. }).then(|| credits.open(req));
    let out2 = out.clone();
    let ups = uploads.clone();
    let creds = credits.clone();
    let started = spawn_thread("file-op", move || {
        let _permit = permit;
        let result = become_user(uid).and_then(|()| run(&out2, req, op, rx, ups.max_file_bytes, window));
        ups.forget(req);
        creds.forget(req);
        match result {
            Ok(answer) => out2.send(&Event::Done { req, answer }, &[]),
            Err(e) => out2.send(&Event::Failed { req, kind: e.kind, message: e.message }, &[]),
        }
    });
    if let Err(e) = started {
        uploads.forget(req);
        credits.forget(req);
        busy(e.to_string());
    }
}

pub(crate) fn become_user(uid: u32) -> Result<(), OpError> {
    // SAFETY: setfsgid/setfsuid change only this thread's filesystem credentials.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, uid);
        libc::syscall(libc::SYS_setfsuid, uid);
        // The syscalls return the previous value; calling again with -1 reads the current one back.
        if libc::syscall(libc::SYS_setfsuid, -1i32) as u32 != uid {
            return Err(OpError::new(FileErrorKind::Other, "cannot switch to the requested user"));
        }
    }
    crate::harden::limit_thread_caps(uid)
        .map_err(|e| OpError::new(FileErrorKind::Other, format!("cannot drop to the capabilities of uid {uid}: {e}")))
}

pub(crate) fn checked_path(p: &str) -> Result<PathBuf, OpError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(OpError::new(FileErrorKind::Invalid, format!("{p}: path must be absolute")));
    }
    Ok(path.to_path_buf())
}

fn run(
    out: &Outbox,
    req: u64,
    op: FileOp,
    rx: Option<Receiver<UploadMsg>>,
    max_file_bytes: u64,
    window: Option<Arc<Window>>,
) -> OpResult {
    match op {
        FileOp::Read { path } => read(out, req, &checked_path(&path)?, &window.expect("opened for downloads")),
        FileOp::Write { path, mode, max_bytes, in_place, metadata } => {
            let max = if max_file_bytes > 0 { max_bytes.min(max_file_bytes) } else { max_bytes };
            let rx = rx.expect("registered");
            let path = checked_path(&path)?;
            let written = if in_place { write_in_place(&path, mode, max, rx)? } else { write(&path, mode, max, rx)? };
            if in_place || !metadata.is_empty() {
                set_metadata(&path, &metadata)?;
            }
            Ok(written)
        }
        FileOp::Stat { path } => stat(&checked_path(&path)?).map(FileAnswer::Stat),
        FileOp::List { path, depth, max_entries } => list(&checked_path(&path)?, depth, max_entries),
        FileOp::Mkdir { path, mode } => mkdir(&checked_path(&path)?, mode),
        FileOp::Remove { path, recursive } => remove(&checked_path(&path)?, recursive),
        FileOp::Move { from, to, overwrite } => rename(&checked_path(&from)?, &checked_path(&to)?, overwrite),
        FileOp::Untar { path, max_bytes } => {
            untar(&checked_path(&path)?, max_bytes, max_file_bytes, rx.expect("registered"))
        }
        FileOp::Tar { path } => tar(out, req, &checked_path(&path)?, &window.expect("opened for downloads")),
    }
}

fn mkdir(path: &Path, mode: MkdirMode) -> Result<FileAnswer, OpError> {
    let made = match mode {
        MkdirMode::Single => fs::create_dir(path),
        MkdirMode::Parents => fs::create_dir_all(path),
        // The parents as for `mkdir -p`, then one mkdir that fails if the directory is there.
        MkdirMode::ParentsNew => match path.parent() {
            Some(parent) => fs::create_dir_all(parent).and_then(|()| fs::create_dir(path)),
            None => fs::create_dir(path),
        },
    };
    made.map_err(|e| OpError::io(path, e))?;
    Ok(FileAnswer::Made)
}

pub(crate) fn cstring(path: &Path) -> Result<CString, OpError> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| OpError::new(FileErrorKind::Invalid, format!("{}: path contains NUL", path.display())))
}

/// Whether the file behind `fd` lives on procfs or sysfs: kernel interfaces, not files. Checked on the
/// descriptor, so a symlink planted elsewhere (`/tmp/x -> /proc/1/environ`) is caught as well.
fn on_pseudo_fs(fd: &impl AsRawFd) -> bool {
    // SAFETY: plain data, all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into a statfs of the right type.
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    st.f_type == libc::PROC_SUPER_MAGIC || st.f_type == libc::SYSFS_MAGIC
}

/// Whether the directory holding `path` is on procfs or sysfs (true when that cannot be told). An
/// `O_PATH` handle, so a directory the user may search but not read still answers.
fn parent_on_pseudo_fs(path: &Path) -> bool {
    let Some(Ok(parent)) = path.parent().map(cstring) else { return true };
    // SAFETY: a valid NUL-terminated path; the descriptor is owned by the OwnedFd below.
    let fd = unsafe { libc::open(parent.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return true;
    }
    // SAFETY: just opened, owned by nothing else.
    on_pseudo_fs(&unsafe { OwnedFd::from_raw_fd(fd) })
}

fn kernel_interface(path: &Path) -> OpError {
    OpError::new(
        FileErrorKind::PermissionDenied,
        format!(
            "{}: is a kernel interface under /proc or /sys, which the file API does not read; run a command \
             (cat) in the sandbox instead",
            path.display()
        ),
    )
}

/// Opens a file for a download: without blocking (a FIFO would hold the thread until a writer comes),
/// refusing anything but a regular file outside /proc and /sys. Returns it, blocking again, with the
/// size seen now, past which nothing is read (a file that grows, or never ends, cannot hold a thread).
fn open_regular(path: &Path, follow: bool) -> Result<(File, fs::Metadata), OpError> {
    let c = cstring(path)?;
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    // SAFETY: a valid NUL-terminated path; the descriptor is owned by the File below.
    let fd = unsafe {
        libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC | nofollow)
    };
    if fd < 0 {
        let e = io::Error::last_os_error();
        // `/proc/1/fd/3` (a socket: ENXIO) and the like fail in open itself: refused as every other
        // kernel interface is, not reported as the server's own failure.
        if e.raw_os_error() == Some(libc::ENXIO) || (e.kind() != io::ErrorKind::NotFound && parent_on_pseudo_fs(path)) {
            return Err(kernel_interface(path));
        }
        return Err(OpError::io(path, e));
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let f = unsafe { File::from_raw_fd(fd) };
    let meta = f.metadata().map_err(|e| OpError::io(path, e))?;
    if !meta.is_file() {
        return Err(OpError::new(
            FileErrorKind::WrongKind,
            format!("{}: not a regular file (a directory, FIFO, socket or device cannot be read)", path.display()),
        ));
    }
    if on_pseudo_fs(&f) {
        return Err(kernel_interface(path));
    }
    // SAFETY: fcntl on our own descriptor.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
    }
    Ok((f, meta))
}

/// Most bytes read from one /proc file (their size says 0; what they hold is generated on read).
const PROC_READ_MAX: u64 = 1 << 20;
/// The files at the top of /proc a download may read: the sandbox's view of the machine, none
/// about a process.
const PROC_TOP_FILES: &[&str] = &[
    "buddyinfo",
    "cgroups",
    "cpuinfo",
    "crypto",
    "devices",
    "diskstats",
    "filesystems",
    "interrupts",
    "loadavg",
    "meminfo",
    "misc",
    "modules",
    "partitions",
    "softirqs",
    "stat",
    "swaps",
    "uptime",
    "version",
    "vmstat",
    "zoneinfo",
];

/// Whether the /proc file behind `fd` is one a download may read: under /proc/sys or
/// /proc/pressure, or a [`PROC_TOP_FILES`] one. Decided on where the descriptor leads (its
/// /proc/self/fd link), so a symlink or `/proc/self` cannot lead elsewhere: never a process's
/// directory (the supervisor's threads pass every ptrace check on pid 1, whose memory, descriptors
/// and environment are its own), never /sys, and only for reading.
fn readable_proc(fd: &impl AsRawFd) -> bool {
    let Ok(at) = fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())) else { return false };
    let Ok(rest) = at.strip_prefix("/proc") else { return false };
    let parts: Vec<_> = rest.components().collect();
    let names: Option<Vec<&str>> = parts
        .iter()
        .map(|c| match c {
            Component::Normal(n) => n.to_str(),
            _ => None,
        })
        .collect();
    match names.as_deref() {
        Some([top]) => PROC_TOP_FILES.contains(top),
        Some(["sys" | "pressure", _, ..]) => true,
        _ => false,
    }
}

/// Opens a /proc file the sandbox may read through the file API ([`readable_proc`]), with the
/// most bytes to read of it; `None` when `path` is not such a file.
fn open_proc(path: &Path) -> Option<(File, u64)> {
    let c = cstring(path).ok()?;
    // SAFETY: a valid NUL-terminated path; the descriptor is owned by the File below.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: fd was just opened and is owned by nothing else.
    let f = unsafe { File::from_raw_fd(fd) };
    // SAFETY: plain data, all-zero is a valid value.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: fstatfs writes into a statfs of the right type.
    let on_proc = unsafe { libc::fstatfs(fd, &mut st) } == 0 && st.f_type == libc::PROC_SUPER_MAGIC;
    (on_proc && f.metadata().is_ok_and(|m| m.is_file()) && readable_proc(&f)).then_some((f, PROC_READ_MAX))
}

/// The answer of a download whose reader went away: nobody waits for it, it only ends the thread.
fn abandoned(path: &Path) -> OpError {
    OpError::new(FileErrorKind::Other, format!("{}: the download was abandoned by its reader", path.display()))
}

fn read(out: &Outbox, req: u64, path: &Path, window: &Window) -> OpResult {
    let (f, limit) = match open_regular(path, true) {
        Ok((f, meta)) => (f, meta.len()),
        Err(e) if e.kind == FileErrorKind::PermissionDenied => open_proc(path).ok_or(e)?,
        Err(e) => return Err(e),
    };
    let mut f = f.take(limit);
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| OpError::io(path, e))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        if !window.take(n) {
            return Err(abandoned(path));
        }
        out.send(&Event::Chunk { req }, &buf[..n]);
    }
    Ok(FileAnswer::Sent { bytes: total })
}

/// Creates the directories above `path` (`dir`, its parent); a file among them is `wrong_kind`.
fn make_parents(path: &Path, dir: &Path) -> Result<(), OpError> {
    fs::create_dir_all(dir).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => OpError::new(
            FileErrorKind::WrongKind,
            format!("{}: a parent of the path is not a directory", path.display()),
        ),
        _ => OpError::io(dir, e),
    })
}

/// Copies an upload's data from `rx` into `f` until its end, at most `max_bytes`; the bytes written.
fn receive(f: &mut File, path: &Path, max_bytes: u64, rx: &Receiver<UploadMsg>) -> Result<u64, OpError> {
    let mut total = 0u64;
    loop {
        match rx.recv() {
            Ok(UploadMsg::Data(b)) => {
                total += b.len() as u64;
                if total > max_bytes {
                    return Err(OpError::new(
                        FileErrorKind::TooLarge,
                        format!("{}: upload is larger than the {max_bytes}-byte limit", path.display()),
                    ));
                }
                f.write_all(&b).map_err(|e| OpError::io(path, e))?;
            }
            Ok(UploadMsg::End) => return Ok(total),
            Ok(UploadMsg::Abort) | Err(_) => return Err(OpError::new(FileErrorKind::Other, "upload aborted")),
        }
    }
}

fn write(path: &Path, mode: u32, max_bytes: u64, rx: Receiver<UploadMsg>) -> OpResult {
    let (dir, name) = split(path)?;
    if fs::symlink_metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: is a directory", path.display())));
    }
    make_parents(path, dir)?;
    // Write beside the target and rename at the end: readers never see a half-written file, and an
    // acknowledged write has been fsynced with its directory entry.
    let tmp = dir.join(format!(".{}.sandlot-{:x}", name.to_string_lossy(), rand_suffix()));
    let mut f =
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(|e| OpError::io(path, e))?;
    let cleanup = |e: OpError| {
        let _ = fs::remove_file(&tmp);
        e
    };
    let total = receive(&mut f, path, max_bytes, &rx).map_err(cleanup)?;
    f.set_permissions(fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| cleanup(OpError::io(path, e)))?;
    f.sync_all().map_err(|e| cleanup(OpError::io(path, e)))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| cleanup(OpError::io(path, e)))?;
    sync_dir(dir);
    Ok(FileAnswer::Written { bytes: total })
}

/// A write into the file itself, as envd's `os.OpenFile(O_CREATE|O_TRUNC)` and copy: a watcher sees
/// the file's creation (when new), its writes and the chmod, never another name. Not through a
/// symlink (the file the path names, not where a link of the sandbox's leads). A failure removes a
/// file it created; an existing file is left as far as it got (envd's behaviour too).
fn write_in_place(path: &Path, mode: u32, max_bytes: u64, rx: Receiver<UploadMsg>) -> OpResult {
    let (dir, _) = split(path)?;
    let existing = fs::symlink_metadata(path).ok();
    if let Some(m) = &existing {
        if !m.is_file() {
            let what = if m.is_dir() { "is a directory" } else { "is not a regular file" };
            return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: {what}", path.display())));
        }
    }
    make_parents(path, dir)?;
    if parent_on_pseudo_fs(path) {
        return Err(OpError::new(
            FileErrorKind::PermissionDenied,
            format!("{}: is under /proc or /sys, which the file API does not write", path.display()),
        ));
    }
    let created = existing.is_none();
    // O_NOFOLLOW and O_NONBLOCK: a symlink or FIFO swapped in since the check fails the open
    // instead of leading the write elsewhere or blocking this thread.
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode & 0o7777)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| OpError::io(path, e))?;
    let cleanup = |e: OpError| {
        if created {
            let _ = fs::remove_file(path);
        }
        e
    };
    let total = receive(&mut f, path, max_bytes, &rx).map_err(cleanup)?;
    f.set_permissions(fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| cleanup(OpError::io(path, e)))?;
    f.sync_all().map_err(|e| cleanup(OpError::io(path, e)))?;
    sync_dir(dir);
    Ok(FileAnswer::Written { bytes: total })
}

/// The extended-attribute namespace of user metadata: E2B's envd keeps a file's metadata there, so
/// tools inside the sandbox see the same attributes.
const METADATA_XATTR_PREFIX: &str = "user.e2b.";
/// Most bytes of one attribute name list or value read back (the kernel's own limit is 64 KiB).
const XATTR_READ_MAX: usize = 64 * 1024;

/// Replaces the metadata of the file at `path` (not following a final symlink) with `metadata`.
fn set_metadata(path: &Path, metadata: &std::collections::BTreeMap<String, String>) -> Result<(), OpError> {
    let c = cstring(path)?;
    for name in xattr_names(&c).map_err(|e| OpError::io(path, e))? {
        if name.as_bytes().starts_with(METADATA_XATTR_PREFIX.as_bytes()) {
            // SAFETY: both pointers are NUL-terminated strings that outlive the call.
            if unsafe { libc::lremovexattr(c.as_ptr(), name.as_ptr()) } != 0 {
                return Err(OpError::io(path, io::Error::last_os_error()));
            }
        }
    }
    for (key, value) in metadata {
        let name = CString::new(format!("{METADATA_XATTR_PREFIX}{}", key.to_ascii_lowercase()))
            .map_err(|_| OpError::new(FileErrorKind::Invalid, format!("metadata key {key:?} holds a NUL byte")))?;
        // SAFETY: the path and name are NUL-terminated and the value pointer covers value.len() bytes;
        // all outlive the call.
        let r = unsafe { libc::lsetxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        if r != 0 {
            return Err(OpError::io(path, io::Error::last_os_error()));
        }
    }
    Ok(())
}

/// The names of the extended attributes of `path` (a final symlink not followed).
fn xattr_names(path: &CString) -> io::Result<Vec<CString>> {
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: the buffer is writable for buf.len() bytes; the path is NUL-terminated.
        let n = unsafe { libc::llistxattr(path.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            buf.truncate(n as usize);
            break;
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ERANGE) if buf.len() < XATTR_READ_MAX => buf.resize(buf.len() * 4, 0),
            Some(libc::ENOTSUP) => return Ok(Vec::new()),
            _ => return Err(e),
        }
    }
    Ok(buf.split(|b| *b == 0).filter(|n| !n.is_empty()).filter_map(|n| CString::new(n).ok()).collect())
}

/// The user metadata of `path`: its `user.e2b.*` attributes, prefix stripped (values not UTF-8 are
/// read lossily; unreadable ones are left out).
fn metadata_of(path: &Path) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(c) = cstring(path) else { return out };
    let Ok(names) = xattr_names(&c) else { return out };
    for name in names {
        let Some(key) = name.to_bytes().strip_prefix(METADATA_XATTR_PREFIX.as_bytes()) else { continue };
        let mut value = vec![0u8; XATTR_READ_MAX];
        // SAFETY: the buffer is writable for value.len() bytes; path and name are NUL-terminated.
        let n = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if n >= 0 {
            value.truncate(n as usize);
            out.insert(String::from_utf8_lossy(key).into_owned(), String::from_utf8_lossy(&value).into_owned());
        }
    }
    out
}

fn split(path: &Path) -> Result<(&Path, &std::ffi::OsStr), OpError> {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => Ok((dir, name)),
        _ => Err(OpError::new(FileErrorKind::Invalid, format!("{}: not a file path", path.display()))),
    }
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

fn rand_suffix() -> u64 {
    let mut b = [0u8; 8];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    u64::from_ne_bytes(b)
}

/// Metadata of one path, symlinks not followed.
fn stat(path: &Path) -> Result<FileStat, OpError> {
    let m = fs::symlink_metadata(path).map_err(|e| OpError::io(path, e))?;
    let ft = m.file_type();
    let kind = if ft.is_file() {
        FileKind::File
    } else if ft.is_dir() {
        FileKind::Dir
    } else if ft.is_symlink() {
        FileKind::Symlink
    } else {
        FileKind::Other
    };
    // Not for links on /proc or /sys: /proc/1/fd/* would tell where pid 1's own descriptors lead (its
    // threads pass every ptrace check on their own process, whatever their capabilities).
    let link_target = if ft.is_symlink() && !parent_on_pseudo_fs(path) {
        fs::read_link(path).ok().map(|t| t.to_string_lossy().into_owned())
    } else {
        None
    };
    let mtime_ms =
        m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as i64);
    let name = path.file_name().map_or_else(|| "/".to_string(), |n| n.to_string_lossy().into_owned());
    Ok(FileStat {
        path: path.to_string_lossy().into_owned(),
        name,
        kind,
        size: m.len(),
        mode: m.mode() & 0o7777,
        uid: m.uid(),
        mtime_ms,
        link_target,
        // Not on /proc or /sys (their attributes are the kernel's), nor of symlinks (user.*
        // attributes cannot be set on one).
        metadata: if (ft.is_file() || ft.is_dir()) && !parent_on_pseudo_fs(path) {
            metadata_of(path)
        } else {
            Default::default()
        },
    })
}

fn list(root: &Path, depth: u32, max_entries: u32) -> OpResult {
    if stat(root)?.kind != FileKind::Dir {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: not a directory", root.display())));
    }
    let mut entries = Vec::new();
    let mut stack = vec![(root.to_path_buf(), 1u32)];
    while let Some((dir, level)) = stack.pop() {
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            // The listed directory itself must be readable; unreadable subdirectories are just not entered.
            Err(e) if dir == root => return Err(OpError::io(&dir, e)),
            Err(_) => continue,
        };
        for ent in rd.flatten() {
            if entries.len() >= max_entries as usize {
                return Err(OpError::new(
                    FileErrorKind::TooLarge,
                    format!(
                        "{}: more than {max_entries} entries; list a smaller depth or subdirectory",
                        root.display()
                    ),
                ));
            }
            let p = ent.path();
            let Ok(st) = stat(&p) else { continue };
            let is_dir = st.kind == FileKind::Dir;
            entries.push(st);
            if is_dir && level < depth {
                stack.push((p, level + 1));
            }
        }
    }
    entries.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(FileAnswer::List { entries })
}

fn remove(path: &Path, recursive: bool) -> OpResult {
    if path == Path::new("/") {
        return Err(OpError::new(FileErrorKind::Invalid, "refusing to remove /"));
    }
    let m = fs::symlink_metadata(path).map_err(|e| OpError::io(path, e))?;
    let r = if m.is_dir() {
        if recursive {
            remove_tree(path)
        } else {
            fs::remove_dir(path)
        }
    } else {
        fs::remove_file(path)
    };
    r.map_err(|e| {
        if e.raw_os_error() == Some(libc::ENOTEMPTY) {
            OpError::new(
                FileErrorKind::NotEmpty,
                format!("{}: directory not empty; pass recursive=true to remove it with its contents", path.display()),
            )
        } else {
            OpError::io(path, e)
        }
    })?;
    Ok(FileAnswer::Removed)
}

/// `(dev, ino)` of an open directory.
fn ident(fd: &OwnedFd) -> io::Result<(u64, u64)> {
    // SAFETY: plain data, all-zero is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into a stat of the right type.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((st.st_dev, st.st_ino))
}

/// Most subdirectory names remembered per level of a recursive remove; a directory with more is listed
/// again once these are gone (bounds pid 1's memory on a flat directory of millions).
const REMOVE_BATCH: usize = 1024;

/// Opens directory `name` below `dir` as an `O_PATH` handle (no open-time check: Landlock's walk to the
/// root costs O(depth) per real open), without following a symlink.
fn open_dir_at(dir: libc::c_int, name: &CString) -> io::Result<OwnedFd> {
    let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid NUL-terminated name; the descriptor is owned by the OwnedFd.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn unlink_at(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid NUL-terminated name relative to an open directory.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) } != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENOENT) {
            return Err(e);
        }
    }
    Ok(())
}

/// Unlinks everything in `dir` that is not a directory; returns up to [`REMOVE_BATCH`] names of the
/// subdirectories left.
fn clear_files(dir: &OwnedFd) -> io::Result<Vec<CString>> {
    let dot = CString::new(".").expect("no NUL");
    // SAFETY: openat/fdopendir on our own descriptors; the DIR (owning `fd`) is closed below on every path.
    let dirp = unsafe {
        let fd = libc::openat(dir.as_raw_fd(), dot.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let d = libc::fdopendir(fd);
        if d.is_null() {
            let e = io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        d
    };
    let mut subdirs = Vec::new();
    let result = loop {
        // SAFETY: readdir on an open DIR; errno is cleared first to tell the end from an error.
        let ent = unsafe {
            *libc::__errno_location() = 0;
            libc::readdir(dirp)
        };
        if ent.is_null() {
            match io::Error::last_os_error().raw_os_error() {
                Some(0) | None => break Ok(()),
                _ => break Err(io::Error::last_os_error()),
            }
        }
        // SAFETY: d_name of a returned dirent is a NUL-terminated string valid until the next readdir.
        let (name, d_type) = unsafe { (std::ffi::CStr::from_ptr((*ent).d_name.as_ptr()).to_owned(), (*ent).d_type) };
        if name.as_bytes() == b"." || name.as_bytes() == b".." {
            continue;
        }
        let is_dir = match d_type {
            libc::DT_DIR => true,
            libc::DT_UNKNOWN => {
                // SAFETY: plain data, all-zero is a valid value.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: fstatat into a stat of the right type, with a NUL-terminated name.
                let rc = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
                rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
            }
            _ => false,
        };
        if is_dir {
            if subdirs.len() < REMOVE_BATCH {
                subdirs.push(name);
            }
        } else if let Err(e) = unlink_at(dir, &name, 0) {
            break Err(e);
        }
    };
    // SAFETY: closes the DIR (and its descriptor) opened above.
    unsafe { libc::closedir(dirp) };
    result.map(|()| subdirs)
}

/// One directory on the way down a recursive remove.
struct Level {
    /// Its name in the level above.
    name: CString,
    /// `(dev, ino)`, to check the way back up.
    ident: (u64, u64),
    /// Subdirectories still to remove.
    pending: Vec<CString>,
    /// Listed again after a removal failed as not empty and nothing was left to descend into: a second
    /// such failure is reported (sandbox code filling it as fast as it is emptied).
    retried: bool,
}

/// `rm -r` without recursion: one directory handle open at a time, each level opened relative to the
/// one above without following symlinks, the way back up checked against the identities recorded on the
/// way down (a tree moved meanwhile is an error, never a walk into somewhere else). Each level is listed
/// once and removed once; a 30,000-deep tree costs a 30,000-entry vector, not 30,000 stack frames.
fn remove_tree(path: &Path) -> io::Result<()> {
    let (parent, name) = match (path.parent(), path.file_name()) {
        (Some(p), Some(n)) => (p, n),
        _ => return Err(io::Error::from_raw_os_error(libc::EINVAL)),
    };
    let name = CString::new(name.as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let parent = File::open(parent).map(OwnedFd::from)?;
    let mut cur = open_dir_at(parent.as_raw_fd(), &name)?;
    let mut down = vec![Level { name, ident: ident(&cur)?, pending: clear_files(&cur)?, retried: false }];
    let dotdot = CString::new("..").expect("no NUL");
    loop {
        let top = down.last_mut().expect("never empty here");
        if let Some(sub) = top.pending.pop() {
            match open_dir_at(cur.as_raw_fd(), &sub) {
                Ok(fd) => {
                    let level = Level { ident: ident(&fd)?, pending: clear_files(&fd)?, name: sub, retried: false };
                    down.push(level);
                    cur = fd;
                }
                // Replaced by a non-directory since it was listed: unlink it like one.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => unlink_at(&cur, &sub, 0)?,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(e),
            }
            continue;
        }
        let level = down.pop().expect("never empty here");
        let up = match down.last() {
            None => None,
            Some(above) => {
                let up = open_dir_at(cur.as_raw_fd(), &dotdot)?;
                if ident(&up)? != above.ident {
                    return Err(io::Error::other("the directory tree was moved while it was being removed"));
                }
                Some(up)
            }
        };
        match unlink_at(up.as_ref().unwrap_or(&parent), &level.name, libc::AT_REMOVEDIR) {
            Ok(()) => match up {
                None => return Ok(()),
                Some(up) => cur = up,
            },
            // More subdirectories than one batch, or new entries meanwhile: list it again, go on there.
            Err(e) if e.raw_os_error() == Some(libc::ENOTEMPTY) && !level.retried => {
                let pending = clear_files(&cur)?;
                let retried = pending.is_empty();
                down.push(Level { pending, retried, ..level });
            }
            Err(e) => return Err(e),
        }
    }
}

fn rename(from: &Path, to: &Path, overwrite: bool) -> OpResult {
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|_| OpError::new(FileErrorKind::Invalid, "path contains NUL"))
    };
    let (cf, ct) = (c(from)?, c(to)?);
    let flags = if overwrite { 0 } else { libc::RENAME_NOREPLACE };
    // SAFETY: both pointers are valid NUL-terminated strings for the duration of the call.
    let rc = unsafe { libc::renameat2(libc::AT_FDCWD, cf.as_ptr(), libc::AT_FDCWD, ct.as_ptr(), flags) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        let at = if e.raw_os_error() == Some(libc::EEXIST) { to } else { from };
        return Err(OpError::io(at, e));
    }
    Ok(FileAnswer::Moved)
}

/// Reads upload frames as a byte stream, enforcing the size cap.
struct UploadReader {
    rx: Receiver<UploadMsg>,
    buf: Vec<u8>,
    pos: usize,
    total: u64,
    max: u64,
    ended: bool,
}

impl Read for UploadReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.buf.len() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(UploadMsg::Data(b)) => {
                    self.total += b.len() as u64;
                    if self.total > self.max {
                        return Err(io::Error::new(io::ErrorKind::FileTooLarge, "upload over its limit"));
                    }
                    self.buf = b;
                    self.pos = 0;
                }
                Ok(UploadMsg::End) => self.ended = true,
                Ok(UploadMsg::Abort) | Err(_) => return Err(io::Error::other("upload aborted")),
            }
        }
        let n = out.len().min(self.buf.len() - self.pos);
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

fn untar(dest: &Path, max_bytes: u64, max_file_bytes: u64, rx: Receiver<UploadMsg>) -> OpResult {
    fs::create_dir_all(dest).map_err(|e| OpError::io(dest, e))?;
    let mut reader = UploadReader { rx, buf: Vec::new(), pos: 0, total: 0, max: max_bytes, ended: false };
    let mut archive = tar::Archive::new(&mut reader);
    archive.set_preserve_permissions(true);
    archive.set_overwrite(true);
    let mut count = 0u64;
    let entries = archive.entries().map_err(|e| tar_error(dest, e))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| tar_error(dest, e))?;
        let name = entry.path().map_err(|e| tar_error(dest, e))?.into_owned();
        // Refuse rather than skip: a caller who sent `../x` or `/etc/x` should learn it was not written.
        if name.is_absolute() || name.components().any(|c| matches!(c, Component::ParentDir)) {
            return Err(OpError::new(
                FileErrorKind::Invalid,
                format!("tar entry {}: absolute paths and `..` are not allowed", name.display()),
            ));
        }
        // The size a file gets on disk (a sparse entry's real size, not its stored bytes): a command could
        // not write a file past RLIMIT_FSIZE, and neither may an upload.
        let size = entry.header().size().unwrap_or(u64::MAX).max(entry.size());
        if max_file_bytes > 0 && size > max_file_bytes {
            return Err(OpError::new(
                FileErrorKind::TooLarge,
                format!(
                    "tar entry {}: {size} bytes, over the sandbox's largest file ({max_file_bytes} bytes)",
                    name.display()
                ),
            ));
        }
        let written = entry.unpack_in(dest).map_err(|e| tar_error(dest, e))?;
        if !written {
            return Err(OpError::new(
                FileErrorKind::Invalid,
                format!("tar entry {}: would land outside {}", name.display(), dest.display()),
            ));
        }
        count += 1;
    }
    // Drain to the End marker so the byte count is exact and the control loop is never left blocked.
    io::copy(&mut reader, &mut io::sink()).map_err(|e| tar_error(dest, e))?;
    sync_dir(dest);
    Ok(FileAnswer::Untarred { entries: count, bytes: reader.total })
}

fn tar_error(dest: &Path, e: io::Error) -> OpError {
    match e.kind() {
        io::ErrorKind::FileTooLarge => {
            OpError::new(FileErrorKind::TooLarge, format!("tar upload into {} is over the size limit", dest.display()))
        }
        _ if e.raw_os_error().is_some() => OpError::io(dest, e),
        _ => OpError::new(FileErrorKind::Invalid, format!("tar upload into {}: {e}", dest.display())),
    }
}

/// Sends bytes as `Chunk` frames, as the daemon's reader gives credit.
struct ChunkWriter<'a> {
    out: &'a Outbox,
    req: u64,
    buf: Vec<u8>,
    window: &'a Window,
    /// Bytes sent so far.
    sent: u64,
}

impl Write for ChunkWriter<'_> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let room = MAX_PAYLOAD - self.buf.len();
        let n = room.min(data.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == MAX_PAYLOAD {
            self.flush()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            if !self.window.take(self.buf.len()) {
                return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the download was abandoned by its reader"));
            }
            self.out.send(&Event::Chunk { req: self.req }, &self.buf);
            self.sent += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

fn tar(out: &Outbox, req: u64, dir: &Path, window: &Window) -> OpResult {
    if stat(dir)?.kind != FileKind::Dir {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: not a directory", dir.display())));
    }
    let top = File::open(dir).map_err(|e| OpError::io(dir, e))?;
    if on_pseudo_fs(&top) {
        return Err(OpError::new(
            FileErrorKind::PermissionDenied,
            format!("{}: is under /proc or /sys, which the file API does not read", dir.display()),
        ));
    }
    let mut w = ChunkWriter { out, req, buf: Vec::with_capacity(MAX_PAYLOAD), window, sent: 0 };
    {
        let mut builder = tar::Builder::new(&mut w);
        builder.append_dir(".", dir).map_err(|e| OpError::io(dir, e))?;
        // The tree is walked here rather than by `append_dir_all`, which would open FIFOs (blocking) and
        // copy /proc files without end: names below `dir`, depth first, without recursion.
        let mut stack = vec![PathBuf::new()];
        while let Some(rel) = stack.pop() {
            let src = dir.join(&rel);
            for ent in fs::read_dir(&src).map_err(|e| OpError::io(&src, e))? {
                let ent = ent.map_err(|e| OpError::io(&src, e))?;
                tar_entry(&mut builder, &ent.path(), rel.join(ent.file_name()), &mut stack)?;
            }
        }
        builder.finish().map_err(|e| OpError::io(dir, e))?;
    }
    w.flush().map_err(|e| OpError::io(dir, e))?;
    Ok(FileAnswer::Sent { bytes: w.sent })
}

/// Archives one entry as `name`; a directory is pushed on `stack` to be walked.
fn tar_entry<W: Write>(
    b: &mut tar::Builder<W>,
    src: &Path,
    name: PathBuf,
    stack: &mut Vec<PathBuf>,
) -> Result<(), OpError> {
    let io_err = |e| OpError::io(src, e);
    let m = fs::symlink_metadata(src).map_err(io_err)?;
    let ft = m.file_type();
    let mut header = tar::Header::new_gnu();
    header.set_metadata(&m);
    if ft.is_dir() {
        // A /proc or /sys mounted below is not descended into: its files are kernel interfaces.
        let d = File::open(src).map_err(io_err)?;
        b.append_dir(&name, src).map_err(io_err)?;
        if !on_pseudo_fs(&d) {
            stack.push(name);
        }
    } else if ft.is_symlink() {
        // Archived as a link: following it would read whatever the sandbox pointed it at.
        let target = fs::read_link(src).map_err(io_err)?;
        header.set_size(0);
        b.append_link(&mut header, &name, target).map_err(io_err)?;
    } else if ft.is_file() {
        let (f, meta) = match open_regular(src, false) {
            Ok(x) => x,
            // Replaced by something else since it was listed, or a /proc file bound here: left out.
            Err(e) if matches!(e.kind, FileErrorKind::WrongKind | FileErrorKind::PermissionDenied) => return Ok(()),
            Err(e) => return Err(e),
        };
        header.set_metadata(&meta);
        // Exactly the size in the header: what the file holds at open, zero-padded if it shrank meanwhile.
        let size = meta.len();
        let data = f.take(size).chain(io::repeat(0)).take(size);
        b.append_data(&mut header, &name, data).map_err(io_err)?;
    } else if !ft.is_socket() {
        // FIFOs and device nodes: their header only (a socket cannot be archived).
        header.set_size(0);
        b.append_data(&mut header, &name, io::empty()).map_err(io_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system's temporary one, removed at the end.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let dir = std::env::temp_dir().join(format!("sandlot-files-{name}-{:x}", rand_suffix()));
            fs::create_dir(&dir).unwrap();
            Scratch(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn stat_answers_with_the_kind_size_mode_and_link_target() {
        let s = Scratch::new("stat");
        let file = s.0.join("f");
        fs::write(&file, b"hello").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o640)).unwrap();
        std::os::unix::fs::symlink("f", s.0.join("l")).unwrap();

        let st = stat(&file).unwrap();
        assert_eq!((st.kind, st.size, st.mode, st.name.as_str()), (FileKind::File, 5, 0o640, "f"));
        assert_eq!(st.path, file.to_str().unwrap());
        assert_eq!(st.link_target, None);
        assert!(st.mtime_ms > 0);
        let link = stat(&s.0.join("l")).unwrap();
        assert_eq!((link.kind, link.link_target.as_deref()), (FileKind::Symlink, Some("f")));
        assert_eq!(stat(&s.0).unwrap().kind, FileKind::Dir);
        assert_eq!(stat(Path::new("/")).unwrap().name, "/");
        assert!(matches!(stat(&s.0.join("none")), Err(OpError { kind: FileErrorKind::NotFound, .. })));
    }

    #[test]
    fn list_answers_with_entries_sorted_by_path_to_the_asked_depth() {
        let s = Scratch::new("list");
        fs::create_dir_all(s.0.join("b/deeper")).unwrap();
        fs::write(s.0.join("b/x"), b"").unwrap();
        fs::write(s.0.join("a"), b"12").unwrap();
        let paths = |answer: FileAnswer| match answer {
            FileAnswer::List { entries } => {
                entries.iter().map(|e| e.path.strip_prefix(s.0.to_str().unwrap()).unwrap().to_string()).collect()
            }
            other => panic!("a list answered {other:?}"),
        };
        let top: Vec<String> = paths(list(&s.0, 1, 100).unwrap());
        assert_eq!(top, ["/a", "/b"]);
        let all: Vec<String> = paths(list(&s.0, 2, 100).unwrap());
        assert_eq!(all, ["/a", "/b", "/b/deeper", "/b/x"]);
        assert!(matches!(list(&s.0, 2, 3), Err(OpError { kind: FileErrorKind::TooLarge, .. })));
        assert!(matches!(list(&s.0.join("a"), 1, 100), Err(OpError { kind: FileErrorKind::WrongKind, .. })));
    }

    #[test]
    fn mkdir_modes_differ_on_missing_parents_and_a_directory_already_there() {
        let s = Scratch::new("mkdir");
        let exists =
            |r: Result<FileAnswer, OpError>| matches!(r, Err(OpError { kind: FileErrorKind::AlreadyExists, .. }));
        assert!(matches!(
            mkdir(&s.0.join("a/b"), MkdirMode::Single),
            Err(OpError { kind: FileErrorKind::NotFound, .. })
        ));
        assert_eq!(mkdir(&s.0.join("a/b"), MkdirMode::ParentsNew).unwrap(), FileAnswer::Made);
        assert!(exists(mkdir(&s.0.join("a/b"), MkdirMode::ParentsNew)));
        assert!(exists(mkdir(&s.0.join("a/b"), MkdirMode::Single)));
        assert_eq!(mkdir(&s.0.join("a/b"), MkdirMode::Parents).unwrap(), FileAnswer::Made);
        assert_eq!(mkdir(&s.0.join("c/d/e"), MkdirMode::Parents).unwrap(), FileAnswer::Made);
        assert!(s.0.join("c/d/e").is_dir());
        fs::write(s.0.join("f"), b"").unwrap();
        assert!(exists(mkdir(&s.0.join("f"), MkdirMode::ParentsNew)), "a file there is there too");
    }

    #[test]
    fn remove_and_rename_answer_with_their_own_kind() {
        let s = Scratch::new("rm-mv");
        fs::write(s.0.join("a"), b"").unwrap();
        assert_eq!(rename(&s.0.join("a"), &s.0.join("b"), false).unwrap(), FileAnswer::Moved);
        assert!(s.0.join("b").exists());
        assert_eq!(remove(&s.0.join("b"), false).unwrap(), FileAnswer::Removed);
        assert!(!s.0.join("b").exists());
    }
}
