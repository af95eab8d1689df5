//! File operations inside a sandbox: metadata, listings, mkdir, move and write results.

use serde::{Deserialize, Serialize};

use crate::User;

/// Kind of a directory entry.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link (not followed).
    Symlink,
    /// Device, socket or fifo.
    Other,
}

/// Metadata of one path, as seen inside the sandbox.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct FileStat {
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Last path component.
    pub name: String,
    /// Entry kind.
    pub kind: FileKind,
    /// Size in bytes.
    pub size: u64,
    /// Permission bits (e.g. 0o644).
    pub mode: u32,
    /// Owner uid inside the sandbox.
    pub uid: u32,
    /// Modification time, Unix milliseconds.
    pub mtime_ms: i64,
    /// Target of a symlink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link_target: Option<String>,
    /// User metadata: the entry's `user.e2b.*` extended attributes, prefix stripped (what E2B's
    /// `files.write(…, metadata=…)` sets); absent when there is none.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metadata: std::collections::BTreeMap<String, String>,
}

/// Body of `GET …/files/list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct FileList {
    /// Entries below the listed directory (to the asked depth), sorted by path.
    pub entries: Vec<FileStat>,
}

/// Body of `POST …/files/mkdir`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MkdirRequest {
    /// Directory to create.
    pub path: String,
    /// Create missing parents and accept an existing directory (default true).
    #[serde(default = "default_true")]
    pub parents: bool,
    /// Identity to create it as (default `user`).
    #[serde(default)]
    pub user: User,
}

/// Body of `POST …/files/move`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MoveRequest {
    /// Existing path.
    pub from: String,
    /// New path.
    pub to: String,
    /// Replace an existing destination (default false).
    #[serde(default)]
    pub overwrite: bool,
    /// Identity to move it as (default `user`).
    #[serde(default)]
    pub user: User,
}

/// Answer to a file write or tar upload.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct WriteResult {
    /// Path written (the file, or the directory unpacked into).
    pub path: String,
    /// Bytes received.
    pub bytes: u64,
    /// Entries unpacked (tar uploads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
}

fn default_true() -> bool {
    true
}

/// What changed, in one line of `GET /v1/sandboxes/{id}/files/watch`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WatchKind {
    /// An entry was created (or moved in from outside the watched tree).
    Create,
    /// A file open for writing was closed (one event per finished write, not per `write(2)`).
    Write,
    /// An entry was removed (or moved out of the watched tree).
    Remove,
    /// An entry was renamed away from `path`; the `rename_to` with its new path follows.
    RenameFrom,
    /// An entry was renamed to `path`.
    RenameTo,
    /// Permissions, owner or timestamps changed.
    Chmod,
    /// Events were lost (too many too fast for the reader); what changed meanwhile is unknown.
    Overflow,
}

/// One line of a watch stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct WatchEvent {
    /// What happened.
    #[serde(rename = "type")]
    pub kind: WatchKind,
    /// Absolute path in the sandbox of the entry (for `overflow`, of the directory concerned).
    pub path: String,
}
