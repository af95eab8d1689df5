//! A sandbox's lifecycle: the create request, its state, its limits and how it is listed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::NetworkInfo;
use crate::NetworkSpec;

/// Body of `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CreateSandbox {
    /// Image to boot; `host` (the default) is the host's `/usr`, read-only, with a generated `/etc`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// CPU limit in cores (fractional allowed, e.g. `0.5`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<f64>,
    /// Memory limit in MiB (no swap beyond it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Maximum number of processes and threads alive at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Size cap of the sandbox's writable layer in MiB; writes past it fail with EDQUOT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_mb: Option<u64>,
    /// Sandbox lifetime in seconds; on expiry an ephemeral sandbox is deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    /// Environment given to every command (exec `env` overrides it).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Free-form labels, returned as given.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// Name, unique among the tenant's sandboxes that are not deleted (letters, digits, `-_.`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Keep the sandbox (and its files) across stop, expiry and server restarts (default false).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
    /// With `name`: return the tenant's existing sandbox of that name (resuming it if needed) instead
    /// of failing with 409.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub get_or_create: bool,
    /// Resume a stopped or paused sandbox automatically when a command or file operation needs it
    /// (default: on for persistent sandboxes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_resume: Option<bool>,
    /// End the sandbox this many seconds after the last API call or process output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    /// What expiry (lifetime or idle) does: `delete` (ephemeral default), `stop`, or `pause`
    /// (persistent default; a paused sandbox is stopped after `stop_after_s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_timeout: Option<TimeoutAction>,
    /// Seconds a sandbox paused by expiry stays paused before it is stopped (default 600).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_after_s: Option<u64>,
    /// Start from this snapshot's files (its image is used).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Network egress policy (default: deny, loopback only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkSpec>,
}

/// What happens when a sandbox's lifetime or idle time runs out.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum TimeoutAction {
    /// Delete it, files and all.
    Delete,
    /// Stop it: processes end, files stay.
    Stop,
    /// Pause it (processes frozen in memory), then stop it after `stop_after_s`.
    Pause,
}

impl TimeoutAction {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TimeoutAction::Delete => "delete",
            TimeoutAction::Stop => "stop",
            TimeoutAction::Pause => "pause",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "delete" => TimeoutAction::Delete,
            "stop" => TimeoutAction::Stop,
            "pause" => TimeoutAction::Pause,
            _ => return None,
        })
    }
}

/// Lifecycle state of a sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SandboxState {
    /// Being set up.
    Creating,
    /// Supervisor up; commands and file operations are accepted.
    Running,
    /// Every process frozen in memory (no CPU); resume continues them where they were.
    Paused,
    /// Processes gone, layers kept.
    Stopped,
    /// Setup or the supervisor failed; see `reason`.
    Failed,
    /// Removed; kept in the store for audit.
    Deleted,
}

impl SandboxState {
    /// The name used on the wire and in the store.
    pub fn as_str(self) -> &'static str {
        match self {
            SandboxState::Creating => "creating",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Stopped => "stopped",
            SandboxState::Failed => "failed",
            SandboxState::Deleted => "deleted",
        }
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "creating" => SandboxState::Creating,
            "running" => SandboxState::Running,
            "paused" => SandboxState::Paused,
            "stopped" => SandboxState::Stopped,
            "failed" => SandboxState::Failed,
            "deleted" => SandboxState::Deleted,
            _ => return None,
        })
    }
}

/// Resource limits in force for a sandbox (defaults filled in).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct Limits {
    /// CPU cores.
    pub cpu: f64,
    /// Memory in MiB.
    pub memory_mb: u64,
    /// Processes and threads.
    pub pids: u64,
    /// Writable-layer cap in MiB; `null` when the server runs without disk limits (`--no-disk-quota`).
    #[serde(default)]
    pub disk_mb: Option<u64>,
    /// Lifetime in seconds.
    pub timeout_s: u64,
}

/// A sandbox as the API reports it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SandboxInfo {
    /// Opaque identifier (`sb_…`); knowing it grants nothing without the owner's key.
    pub id: String,
    /// Current state.
    pub state: SandboxState,
    /// Why the sandbox is `failed` (or how it ended), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Image it runs.
    pub image: String,
    /// Limits in force.
    pub limits: Limits,
    /// Labels given at create.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Creation time, Unix milliseconds.
    pub created_at_ms: i64,
    /// When the lifetime ends, Unix milliseconds.
    pub expires_at_ms: i64,
    /// Name, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Kept across stop, expiry and restarts.
    #[serde(default)]
    pub persistent: bool,
    /// Resumed automatically by commands and file operations.
    #[serde(default)]
    pub auto_resume: bool,
    /// Idle timeout in seconds, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_s: Option<u64>,
    /// What expiry does.
    pub on_timeout: TimeoutAction,
    /// Seconds an expiry-paused sandbox waits before it is stopped.
    pub stop_after_s: u64,
    /// Last API activity or process output, Unix milliseconds.
    pub last_active_at_ms: i64,
    /// Snapshot it started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<String>,
    /// Network policy (secrets redacted) and traffic counters.
    #[serde(default)]
    pub network: NetworkInfo,
}

/// Body of `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SetTimeout {
    /// New lifetime, in seconds from now.
    pub timeout_s: u64,
}

/// What a running sandbox uses, sampled now.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SandboxMetrics {
    /// When the sample ended, Unix milliseconds.
    pub at_ms: i64,
    /// CPU limit, cores.
    pub cpu_limit: f64,
    /// CPU used over the sampling window, percent of the limit (`None`: the host accounts no CPU).
    pub cpu_used_pct: Option<f64>,
    /// Memory in use without page cache, bytes.
    pub memory_used_bytes: u64,
    /// Page cache, bytes.
    pub memory_cache_bytes: u64,
    /// Memory limit, bytes.
    pub memory_total_bytes: u64,
    /// Bytes the writable layer references (`None` without the layers volume).
    pub disk_used_bytes: Option<u64>,
    /// Writable-layer cap, bytes (`None` without disk limits).
    pub disk_total_bytes: Option<u64>,
}

/// Body of `GET /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct SandboxList {
    /// Sandboxes of the caller's tenant, newest first.
    pub sandboxes: Vec<SandboxInfo>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_str::<CreateSandbox>(r#"{"memroy_mb": 5}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `memroy_mb`"), "{err}");
    }

    #[test]
    fn state_names_round_trip() {
        for s in [
            SandboxState::Creating,
            SandboxState::Running,
            SandboxState::Paused,
            SandboxState::Stopped,
            SandboxState::Failed,
            SandboxState::Deleted,
        ] {
            assert_eq!(SandboxState::parse(s.as_str()), Some(s));
        }
    }
}
