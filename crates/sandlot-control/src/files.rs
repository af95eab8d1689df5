//! Files in a sandbox. Every operation is done by the supervisor inside it, as the requesting sandbox
//! user; this layer validates paths and limits and records each operation in the audit log.

use sandlot_api::{FileList, FileStat, User, WriteResult};
use sandlot_engine::budget::Budget;
use sandlot_engine::{FileStream, MkdirMode, WatchStream, WriteOptions};
use serde_json::json;

use crate::plan::no_nul;
use crate::{Caller, Control, Error, Kind, Result};

const MAX_PATH: usize = 4096;

/// Bytes of events one tenant's watches may hold queued for their clients, over all its sandboxes
/// (each event costs its path plus 64 bytes): 8 watches of 512 events of 4 KiB paths in one
/// sandbox, or many watches of ordinary paths. Past it, events are lost as `overflow`.
pub const TENANT_WATCH_BYTES: u64 = 32 << 20;

/// Each tenant's pool of [`TENANT_WATCH_BYTES`], made on its first watch.
#[derive(Default)]
pub(crate) struct WatchPools(std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<Budget>>>);

impl WatchPools {
    pub(crate) fn of(&self, tenant: &str) -> std::sync::Arc<Budget> {
        let mut pools = self.0.lock().unwrap_or_else(|p| p.into_inner());
        std::sync::Arc::clone(pools.entry(tenant.to_string()).or_insert_with(|| Budget::new(TENANT_WATCH_BYTES)))
    }
}
const MAX_LIST_ENTRIES: u32 = 10_000;
const MAX_LIST_DEPTH: u32 = 16;

/// What an upload carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upload {
    /// One file, created with these permission bits (`0644` when `None`).
    File {
        /// Octal permission bits as the caller wrote them (`"0644"`, `"0o755"`), checked with the
        /// rest of the request.
        mode: Option<String>,
        /// In place rather than atomically, and with user metadata (the E2B surface's writes).
        opts: WriteOptions,
    },
    /// A tar archive unpacked into a directory.
    Tar,
}

/// A path in a sandbox, as a sandbox user names it (relative paths are from the user's home).
#[derive(Debug, Clone, Copy)]
pub struct SandboxPath<'a> {
    /// The path.
    pub path: &'a str,
    /// The sandbox user the operation runs as.
    pub user: User,
}

/// Resolves a request path: absolute as given, relative to the user's home otherwise.
fn sandbox_path(p: &str, user: User) -> Result<String> {
    no_nul("path", p)?;
    if p.is_empty() {
        return Err(Error::invalid("path is empty"));
    }
    if p.len() > MAX_PATH {
        return Err(Error::invalid(format!("path longer than {MAX_PATH} bytes")));
    }
    Ok(if p.starts_with('/') { p.to_string() } else { format!("{}/{p}", user.home()) })
}

/// Permission bits written in octal (`0644`, `0o755`), at most `0o7777`.
fn parse_mode(m: &str) -> Result<u32> {
    u32::from_str_radix(m.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| Error::invalid(format!("mode must be octal permission bits like 0644, got {m:?}")))
}

impl Control {
    fn audit_file(&self, tenant: &str, id: &str, action: &str, detail: serde_json::Value) {
        let _ = self.store.audit(tenant, Some(id), action, &detail);
    }

    /// Writes an upload of `kind` at `path`, fed from `body`. `declared` is the length the caller
    /// announced, if any: over the limit, it is refused before a byte is read.
    pub async fn upload<R: tokio::io::AsyncRead + Unpin>(
        &self,
        caller: &Caller,
        id: &str,
        to: SandboxPath<'_>,
        kind: Upload,
        declared: Option<u64>,
        body: &mut R,
    ) -> Result<WriteResult> {
        let SandboxPath { path, user } = to;
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let max = self.cfg.max_upload_bytes;
        if declared.is_some_and(|l| l > max) {
            return Err(Error::new(
                Kind::TooLarge,
                format!("upload is larger than this server's limit of {max} bytes (--max-upload-mb)"),
            ));
        }
        let (written, action) = match kind {
            Upload::File { mode, opts } => {
                let mode = mode.as_deref().map(parse_mode).transpose()?.unwrap_or(0o644);
                (sb.write_file(&path, user.uid(), mode, max, opts, body).await, "file.write")
            }
            Upload::Tar => (sb.upload_tar(&path, user.uid(), max, body).await, "file.untar"),
        };
        let written = match written {
            Ok(w) => w,
            Err(e) => {
                self.audit_file(&rec.tenant, id, action, json!({"path": path, "user": user, "error": e.to_string()}));
                return Err(e.into());
            }
        };
        let (bytes, entries) = (written.bytes, written.entries);
        self.audit_file(
            &rec.tenant,
            id,
            action,
            json!({"path": path, "user": user, "bytes": bytes, "entries": entries}),
        );
        Ok(written)
    }

    /// Streams the file at `path` out of the caller's sandbox `id`.
    pub async fn read_file(&self, caller: &Caller, id: &str, path: &str, user: User) -> Result<FileStream> {
        self.download(caller, id, path, user, false).await
    }

    /// Streams the directory at `path` out of the caller's sandbox `id` as a tar archive.
    pub async fn download_tar(&self, caller: &Caller, id: &str, path: &str, user: User) -> Result<FileStream> {
        self.download(caller, id, path, user, true).await
    }

    /// A file, or a directory as tar (`tar`), streamed out and audited.
    async fn download(&self, caller: &Caller, id: &str, path: &str, user: User, tar: bool) -> Result<FileStream> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let (r, action) = match tar {
            false => (sb.read_file(&path, user.uid()).await, "file.read"),
            true => (sb.download_tar(&path, user.uid()).await, "file.tar"),
        };
        self.audit_file(&rec.tenant, id, action, json!({"path": path, "user": user, "ok": r.is_ok()}));
        Ok(r?)
    }

    /// Lists the directory at `path`, `depth` levels deep (1 by default).
    pub async fn list_files(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        user: User,
        depth: Option<u32>,
    ) -> Result<FileList> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let depth = depth.unwrap_or(1);
        if !(1..=MAX_LIST_DEPTH).contains(&depth) {
            return Err(Error::invalid(format!("depth must be between 1 and {MAX_LIST_DEPTH}, got {depth}")));
        }
        let list = sb.list(&path, user.uid(), depth, MAX_LIST_ENTRIES).await;
        self.audit_file(&rec.tenant, id, "file.list", json!({"path": path, "user": user, "ok": list.is_ok()}));
        Ok(list?)
    }

    /// Watches directory `path` (and its subdirectories, with `recursive`) as `user`: the events as
    /// they happen, until the stream is dropped. Audited once, when the watch starts (or fails).
    pub async fn watch(
        &self,
        caller: &Caller,
        id: &str,
        path: &str,
        recursive: bool,
        user: User,
    ) -> Result<WatchStream> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let stream = sb.watch(user.uid(), &path, recursive, self.watch_pools.of(&rec.tenant)).await;
        let row = json!({"path": path, "user": user, "recursive": recursive, "ok": stream.is_ok()});
        self.audit_file(&rec.tenant, id, "file.watch", row);
        Ok(stream?)
    }

    /// What is at `path`.
    pub async fn stat(&self, caller: &Caller, id: &str, path: &str, user: User) -> Result<FileStat> {
        let (_, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        Ok(sb.stat(&path, user.uid()).await?)
    }

    /// Makes the directory `path` (and its parents, with `parents`); returns what is there then.
    pub async fn mkdir(&self, caller: &Caller, id: &str, path: &str, user: User, mode: MkdirMode) -> Result<FileStat> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let r = sb.mkdir(&path, user.uid(), mode).await;
        self.audit_file(&rec.tenant, id, "file.mkdir", json!({"path": path, "user": user, "ok": r.is_ok()}));
        r?;
        Ok(sb.stat(&path, user.uid()).await?)
    }

    /// Removes what is at `path` (a directory's contents too, with `recursive`).
    pub async fn remove_file(&self, caller: &Caller, id: &str, path: &str, user: User, recursive: bool) -> Result<()> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let path = sandbox_path(path, user)?;
        let r = sb.remove(&path, user.uid(), recursive).await;
        self.audit_file(
            &rec.tenant,
            id,
            "file.remove",
            json!({"path": path, "user": user, "recursive": recursive, "ok": r.is_ok()}),
        );
        r?;
        Ok(())
    }

    /// Moves `from` to `to` (replacing what is there, with `overwrite`); returns what is at `to` then.
    pub async fn move_file(
        &self,
        caller: &Caller,
        id: &str,
        from: &str,
        to: &str,
        user: User,
        overwrite: bool,
    ) -> Result<FileStat> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let from = sandbox_path(from, user)?;
        let to = sandbox_path(to, user)?;
        let r = sb.rename(&from, &to, user.uid(), overwrite).await;
        self.audit_file(&rec.tenant, id, "file.move", json!({"from": from, "to": to, "user": user, "ok": r.is_ok()}));
        r?;
        Ok(sb.stat(&to, user.uid()).await?)
    }
}
