//! Snapshots (read-only copies of a sandbox's files) and forks (running copy-on-write copies).

use serde::{Deserialize, Serialize};

use crate::SandboxInfo;

/// A read-only snapshot of a sandbox's files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SnapshotInfo {
    /// Opaque identifier (`snap_…`); pass it as `snapshot` when creating a sandbox.
    pub id: String,
    /// Name, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Sandbox it was taken from.
    pub sandbox_id: String,
    /// Image of that sandbox.
    pub image: String,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// Bytes charged to the tenant's snapshot quota: what the sandbox's layer referenced when the
    /// snapshot was taken (the most it can ever hold on its own).
    #[serde(default)]
    pub bytes: u64,
}

/// Body of `GET /v1/snapshots`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SnapshotList {
    /// Snapshots of the caller's tenant, newest first.
    pub snapshots: Vec<SnapshotInfo>,
}

/// Body of `POST /v1/sandboxes/{id}/snapshot`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// Optional name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Body of `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many copies (1–32).
    pub count: u32,
}

/// Answer of a fork.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ForkResult {
    /// The new sandboxes, running, each with a copy-on-write copy of the files.
    pub sandboxes: Vec<SandboxInfo>,
}
