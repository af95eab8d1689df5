//! File operations on a running sandbox, with typed arguments and answers: the HTTP layer never builds a
//! protocol message or reads a supervisor answer. Each method sends one [`FileOp`], checks that the
//! supervisor answered that operation (it is the untrusted side: any other answer is its fault, reported
//! as a host error) and converts the answer into the API's types.

use sandlot_api::{FileList, FileStat, WriteResult};
use sandlot_protocol::{FileAnswer, FileKind, FileOp, MkdirMode};
use tokio::io::AsyncRead;

use crate::{EngineError, FileStream, Sandbox};

impl Sandbox {
    /// Metadata of `path` (symlinks not followed), as sandbox user `uid`.
    pub async fn stat(&self, path: &str, uid: u32) -> Result<FileStat, EngineError> {
        match self.file_op(uid, FileOp::Stat { path: path.into() }).await? {
            FileAnswer::Stat(st) => Ok(api_stat(st)),
            other => Err(unexpected("stat", &other)),
        }
    }

    /// Entries below directory `path` to `depth` levels (1 = its children), sorted by path; more than
    /// `max_entries` fails as too large.
    pub async fn list(&self, path: &str, uid: u32, depth: u32, max_entries: u32) -> Result<FileList, EngineError> {
        match self.file_op(uid, FileOp::List { path: path.into(), depth, max_entries }).await? {
            FileAnswer::List { entries } => Ok(FileList { entries: entries.into_iter().map(api_stat).collect() }),
            other => Err(unexpected("list", &other)),
        }
    }

    /// Creates directory `path`; with `parents` like `mkdir -p`.
    pub async fn mkdir(&self, path: &str, uid: u32, mode: MkdirMode) -> Result<(), EngineError> {
        match self.file_op(uid, FileOp::Mkdir { path: path.into(), mode }).await? {
            FileAnswer::Made => Ok(()),
            other => Err(unexpected("mkdir", &other)),
        }
    }

    /// Removes a file or directory; a non-empty directory only when `recursive`.
    pub async fn remove(&self, path: &str, uid: u32, recursive: bool) -> Result<(), EngineError> {
        match self.file_op(uid, FileOp::Remove { path: path.into(), recursive }).await? {
            FileAnswer::Removed => Ok(()),
            other => Err(unexpected("remove", &other)),
        }
    }

    /// Renames `from` to `to`; an existing `to` is replaced only when `overwrite`.
    pub async fn rename(&self, from: &str, to: &str, uid: u32, overwrite: bool) -> Result<(), EngineError> {
        match self.file_op(uid, FileOp::Move { from: from.into(), to: to.into(), overwrite }).await? {
            FileAnswer::Moved => Ok(()),
            other => Err(unexpected("move", &other)),
        }
    }

    /// Streams the regular file at `path` out of the sandbox.
    pub async fn read_file(&self, path: &str, uid: u32) -> Result<FileStream, EngineError> {
        self.download(uid, FileOp::Read { path: path.into() }).await
    }

    /// Streams directory `path` out of the sandbox as a tar archive.
    pub async fn download_tar(&self, path: &str, uid: u32) -> Result<FileStream, EngineError> {
        self.download(uid, FileOp::Tar { path: path.into() }).await
    }

    /// Writes `body` to the file at `path` with permission bits `mode`, committed atomically at its end
    /// (unless `opts.in_place`); more than `max_bytes` fails as too large and leaves nothing behind.
    pub async fn write_file<R: AsyncRead + Unpin>(
        &self,
        path: &str,
        uid: u32,
        mode: u32,
        max_bytes: u64,
        opts: WriteOptions,
        body: &mut R,
    ) -> Result<WriteResult, EngineError> {
        let WriteOptions { in_place, metadata } = opts;
        let op = FileOp::Write { path: path.into(), mode, max_bytes, in_place, metadata };
        match self.upload(uid, op, body).await? {
            FileAnswer::Written { bytes } => Ok(WriteResult { path: path.into(), bytes, entries: None }),
            other => Err(unexpected("write", &other)),
        }
    }

    /// Unpacks the tar archive in `body` into directory `path` (created if missing); an archive of more
    /// than `max_bytes` fails as too large.
    pub async fn upload_tar<R: AsyncRead + Unpin>(
        &self,
        path: &str,
        uid: u32,
        max_bytes: u64,
        body: &mut R,
    ) -> Result<WriteResult, EngineError> {
        match self.upload(uid, FileOp::Untar { path: path.into(), max_bytes }, body).await? {
            FileAnswer::Untarred { entries, bytes } => {
                Ok(WriteResult { path: path.into(), bytes, entries: Some(entries) })
            }
            other => Err(unexpected("untar", &other)),
        }
    }
}

/// The supervisor answered `asked` with another operation's answer.
fn unexpected(asked: &str, got: &FileAnswer) -> EngineError {
    let got = match got {
        FileAnswer::Sent { .. } => "the end of a download",
        FileAnswer::Written { .. } => "a written file",
        FileAnswer::Untarred { .. } => "an unpacked archive",
        FileAnswer::Stat(_) => "a stat",
        FileAnswer::List { .. } => "a listing",
        FileAnswer::Made => "a created directory",
        FileAnswer::Removed => "a removal",
        FileAnswer::Moved => "a move",
    };
    EngineError::Violation(format!("the sandbox's supervisor answered a {asked} with {got}; it breaks the protocol"))
}

/// The protocol's stat as the API's: the same fields, kept as two types so that a change to the HTTP
/// API cannot change the supervisor protocol without a version bump.
/// How a file write lands, beyond its bytes and mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Into the file itself rather than beside it and renamed (E2B's envd semantics: watchers see
    /// create, write and chmod of the file's own name; a failed upload leaves it partial).
    pub in_place: bool,
    /// User metadata, stored as `user.e2b.*` extended attributes; the file's old ones are cleared.
    pub metadata: std::collections::BTreeMap<String, String>,
}

fn api_stat(st: sandlot_protocol::FileStat) -> FileStat {
    let kind = match st.kind {
        FileKind::File => sandlot_api::FileKind::File,
        FileKind::Dir => sandlot_api::FileKind::Dir,
        FileKind::Symlink => sandlot_api::FileKind::Symlink,
        FileKind::Other => sandlot_api::FileKind::Other,
    };
    FileStat {
        path: st.path,
        name: st.name,
        kind,
        size: st.size,
        mode: st.mode,
        uid: st.uid,
        mtime_ms: st.mtime_ms,
        link_target: st.link_target,
        metadata: st.metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_stat_becomes_the_same_api_stat() {
        for (kind, api_kind) in [
            (FileKind::File, sandlot_api::FileKind::File),
            (FileKind::Dir, sandlot_api::FileKind::Dir),
            (FileKind::Symlink, sandlot_api::FileKind::Symlink),
            (FileKind::Other, sandlot_api::FileKind::Other),
        ] {
            let st = sandlot_protocol::FileStat {
                path: "/home/user/x".into(),
                name: "x".into(),
                kind,
                size: 5,
                mode: 0o640,
                uid: 1000,
                mtime_ms: 1_700_000_000_001,
                link_target: Some("y".into()),
                metadata: [("author".to_string(), "a".to_string())].into(),
            };
            let want = FileStat {
                path: "/home/user/x".into(),
                name: "x".into(),
                kind: api_kind,
                size: 5,
                mode: 0o640,
                uid: 1000,
                mtime_ms: 1_700_000_000_001,
                link_target: Some("y".into()),
                metadata: [("author".to_string(), "a".to_string())].into(),
            };
            // Same JSON too: the API's body for a stat is what the supervisor's answer held.
            assert_eq!(serde_json::to_value(&st).unwrap(), serde_json::to_value(&want).unwrap());
            assert_eq!(api_stat(st), want);
        }
    }

    #[test]
    fn an_answer_to_another_operation_is_a_host_error_naming_both() {
        let e = unexpected("stat", &FileAnswer::Removed);
        assert!(matches!(&e, EngineError::Violation(m) if m.contains("a stat with a removal")), "{e}");
    }
}
