//! File operations, performed inside the sandbox's own mount namespace and root.
//!
//! Each operation runs on its own thread whose fsuid/fsgid are set to the requesting sandbox user first
//! (Linux keeps these per thread), so permission checks are the kernel's own and a `user` request cannot
//! read `/root`. Paths resolve against the sandbox root (the supervisor has pivoted into it), so symlinks
//! and `..` written by sandbox code lead only to the sandbox's own files.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::UNIX_EPOCH;

use sandlot_protocol::{Event, FileErrorKind, FileOp, MAX_PAYLOAD};
use serde_json::{json, Value};

use crate::Outbox;

enum UploadMsg {
    Data(Vec<u8>),
    End,
    Abort,
}

/// Open uploads, keyed by request id; the control loop feeds them.
#[derive(Default, Clone)]
pub(crate) struct Uploads {
    open: Arc<Mutex<HashMap<u64, SyncSender<UploadMsg>>>>,
}

impl Uploads {
    fn register(&self, req: u64) -> Receiver<UploadMsg> {
        // A small bound: a slow disk pushes back on the control socket instead of buffering in RAM.
        let (tx, rx) = sync_channel(8);
        self.open.lock().unwrap_or_else(|p| p.into_inner()).insert(req, tx);
        rx
    }

    fn forget(&self, req: u64) {
        self.open.lock().unwrap_or_else(|p| p.into_inner()).remove(&req);
    }

    fn send(&self, req: u64, msg: UploadMsg) {
        let tx = self.open.lock().unwrap_or_else(|p| p.into_inner()).get(&req).cloned();
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
struct OpError {
    kind: FileErrorKind,
    message: String,
}

impl OpError {
    fn new(kind: FileErrorKind, message: impl Into<String>) -> Self {
        OpError { kind, message: message.into() }
    }

    fn io(path: &Path, e: io::Error) -> Self {
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

type OpResult = Result<Value, OpError>;

/// Starts one file operation on its own thread.
pub(crate) fn start(out: &Outbox, uploads: &Uploads, req: u64, uid: u32, op: FileOp) {
    // Uploads are registered before the control loop reads their first Data frame.
    let rx = match &op {
        FileOp::Write { .. } | FileOp::Untar { .. } => Some(uploads.register(req)),
        _ => None,
    };
    let out = out.clone();
    let uploads = uploads.clone();
    thread::spawn(move || {
        let result = become_user(uid).and_then(|()| run(&out, req, op, rx));
        uploads.forget(req);
        match result {
            Ok(value) => out.send(&Event::Done { req, value }, &[]),
            Err(e) => out.send(&Event::Failed { req, kind: e.kind, message: e.message }, &[]),
        }
    });
}

fn become_user(uid: u32) -> Result<(), OpError> {
    // SAFETY: setfsgid/setfsuid change only this thread's filesystem credentials.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, uid);
        libc::syscall(libc::SYS_setfsuid, uid);
        // The syscalls return the previous value; calling again with -1 reads the current one back.
        if libc::syscall(libc::SYS_setfsuid, -1i32) as u32 != uid {
            return Err(OpError::new(FileErrorKind::Other, "cannot switch to the requested user"));
        }
    }
    Ok(())
}

fn checked_path(p: &str) -> Result<PathBuf, OpError> {
    let path = Path::new(p);
    if !path.is_absolute() {
        return Err(OpError::new(FileErrorKind::Invalid, format!("{p}: path must be absolute")));
    }
    Ok(path.to_path_buf())
}

fn run(out: &Outbox, req: u64, op: FileOp, rx: Option<Receiver<UploadMsg>>) -> OpResult {
    match op {
        FileOp::Read { path } => read(out, req, &checked_path(&path)?),
        FileOp::Write { path, mode, max_bytes } => {
            write(&checked_path(&path)?, mode, max_bytes, rx.expect("registered"))
        }
        FileOp::Stat { path } => {
            let path = checked_path(&path)?;
            stat(&path).map(|s| s.0)
        }
        FileOp::List { path, depth, max_entries } => list(&checked_path(&path)?, depth, max_entries),
        FileOp::Mkdir { path, parents } => {
            let path = checked_path(&path)?;
            let r = if parents { fs::create_dir_all(&path) } else { fs::create_dir(&path) };
            r.map_err(|e| OpError::io(&path, e))?;
            Ok(json!({"path": path}))
        }
        FileOp::Remove { path, recursive } => remove(&checked_path(&path)?, recursive),
        FileOp::Move { from, to, overwrite } => rename(&checked_path(&from)?, &checked_path(&to)?, overwrite),
        FileOp::Untar { path, max_bytes } => untar(&checked_path(&path)?, max_bytes, rx.expect("registered")),
        FileOp::Tar { path } => tar(out, req, &checked_path(&path)?),
    }
}

fn read(out: &Outbox, req: u64, path: &Path) -> OpResult {
    let mut f = File::open(path).map_err(|e| OpError::io(path, e))?;
    let meta = f.metadata().map_err(|e| OpError::io(path, e))?;
    if !meta.is_file() {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: not a regular file", path.display())));
    }
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut total = 0u64;
    loop {
        let n = f.read(&mut buf).map_err(|e| OpError::io(path, e))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        out.send(&Event::Chunk { req }, &buf[..n]);
    }
    Ok(json!({"bytes": total}))
}

fn write(path: &Path, mode: u32, max_bytes: u64, rx: Receiver<UploadMsg>) -> OpResult {
    let (dir, name) = split(path)?;
    if fs::symlink_metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: is a directory", path.display())));
    }
    fs::create_dir_all(dir).map_err(|e| match e.kind() {
        io::ErrorKind::AlreadyExists | io::ErrorKind::NotADirectory => OpError::new(
            FileErrorKind::WrongKind,
            format!("{}: a parent of the path is not a directory", path.display()),
        ),
        _ => OpError::io(dir, e),
    })?;
    // Write beside the target and rename at the end: readers never see a half-written file, and an
    // acknowledged write has been fsynced with its directory entry.
    let tmp = dir.join(format!(".{}.sandlot-{:x}", name.to_string_lossy(), rand_suffix()));
    let mut f =
        OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(|e| OpError::io(path, e))?;
    let cleanup = |e: OpError| {
        let _ = fs::remove_file(&tmp);
        e
    };
    let mut total = 0u64;
    loop {
        match rx.recv() {
            Ok(UploadMsg::Data(b)) => {
                total += b.len() as u64;
                if total > max_bytes {
                    return Err(cleanup(OpError::new(
                        FileErrorKind::TooLarge,
                        format!("{}: upload is larger than the {max_bytes}-byte limit", path.display()),
                    )));
                }
                f.write_all(&b).map_err(|e| cleanup(OpError::io(path, e)))?;
            }
            Ok(UploadMsg::End) => break,
            Ok(UploadMsg::Abort) | Err(_) => {
                return Err(cleanup(OpError::new(FileErrorKind::Other, "upload aborted")));
            }
        }
    }
    f.set_permissions(fs::Permissions::from_mode(mode & 0o7777)).map_err(|e| cleanup(OpError::io(path, e)))?;
    f.sync_all().map_err(|e| cleanup(OpError::io(path, e)))?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| cleanup(OpError::io(path, e)))?;
    sync_dir(dir);
    Ok(json!({"bytes": total}))
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

/// `(json, is_dir)` for one path, symlinks not followed.
fn stat(path: &Path) -> Result<(Value, bool), OpError> {
    let m = fs::symlink_metadata(path).map_err(|e| OpError::io(path, e))?;
    let ft = m.file_type();
    let kind = if ft.is_file() {
        "file"
    } else if ft.is_dir() {
        "dir"
    } else if ft.is_symlink() {
        "symlink"
    } else {
        "other"
    };
    let link_target =
        if ft.is_symlink() { fs::read_link(path).ok().map(|t| t.to_string_lossy().into_owned()) } else { None };
    let mtime_ms =
        m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_millis() as i64);
    let name = path.file_name().map_or_else(|| "/".to_string(), |n| n.to_string_lossy().into_owned());
    let mut v = json!({
        "path": path.to_string_lossy(),
        "name": name,
        "kind": kind,
        "size": m.len(),
        "mode": m.mode() & 0o7777,
        "uid": m.uid(),
        "mtime_ms": mtime_ms,
    });
    if let Some(t) = link_target {
        v["link_target"] = Value::String(t);
    }
    Ok((v, ft.is_dir()))
}

fn list(root: &Path, depth: u32, max_entries: u32) -> OpResult {
    let (_, is_dir) = stat(root)?;
    if !is_dir {
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
            let Ok((v, is_dir)) = stat(&p) else { continue };
            entries.push(v);
            if is_dir && level < depth {
                stack.push((p, level + 1));
            }
        }
    }
    entries.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(json!({"entries": entries}))
}

fn remove(path: &Path, recursive: bool) -> OpResult {
    if path == Path::new("/") {
        return Err(OpError::new(FileErrorKind::Invalid, "refusing to remove /"));
    }
    let m = fs::symlink_metadata(path).map_err(|e| OpError::io(path, e))?;
    let r = if m.is_dir() {
        if recursive {
            fs::remove_dir_all(path)
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
    Ok(json!({"path": path}))
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
    Ok(json!({"from": from, "to": to}))
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

fn untar(dest: &Path, max_bytes: u64, rx: Receiver<UploadMsg>) -> OpResult {
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
    Ok(json!({"entries": count, "bytes": reader.total}))
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

/// Sends bytes as `Chunk` frames.
struct ChunkWriter<'a> {
    out: &'a Outbox,
    req: u64,
    buf: Vec<u8>,
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
            self.out.send(&Event::Chunk { req: self.req }, &self.buf);
            self.buf.clear();
        }
        Ok(())
    }
}

fn tar(out: &Outbox, req: u64, dir: &Path) -> OpResult {
    let (_, is_dir) = stat(dir)?;
    if !is_dir {
        return Err(OpError::new(FileErrorKind::WrongKind, format!("{}: not a directory", dir.display())));
    }
    let mut w = ChunkWriter { out, req, buf: Vec::with_capacity(MAX_PAYLOAD) };
    {
        let mut builder = tar::Builder::new(&mut w);
        // Symlinks are archived as links: following them would read whatever the sandbox pointed them at.
        builder.follow_symlinks(false);
        builder.append_dir_all(".", dir).map_err(|e| OpError::io(dir, e))?;
        builder.finish().map_err(|e| OpError::io(dir, e))?;
    }
    w.flush().map_err(|e| OpError::io(dir, e))?;
    Ok(json!({}))
}
