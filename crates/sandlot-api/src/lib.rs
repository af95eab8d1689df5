//! Wire types of the sandlot HTTP API (`/v1`).
//!
//! This crate holds only serde types and their syntactic checks: no I/O, no tokio, no engine. The server
//! parses requests into these types (unknown fields are rejected) and the clients build them, so both ends
//! agree on one definition.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Default TCP address of `sandlot serve`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7423";
/// Environment variable naming the server URL for the CLI and the SDKs.
pub const ENV_URL: &str = "SANDLOT_URL";
/// Environment variable holding the API key for the CLI and the SDKs.
pub const ENV_API_KEY: &str = "SANDLOT_API_KEY";
/// Media type that switches exec and logs to a stream of [`ExecEvent`]s, one JSON object per line.
pub const NDJSON: &str = "application/x-ndjson";

/// Body of `POST /v1/sandboxes`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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

/// Network egress mode of a sandbox.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Nothing leaves (the default).
    #[default]
    Deny,
    /// Everything except the always-deny list and `deny` CIDRs.
    AllowAll,
    /// Only `allow` names and CIDRs.
    Allowlist,
}

/// Per-host transforms (credential brokering).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct HostRule {
    /// Headers added or replaced on every request to the host. Write-only through the API.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// The `network` object of `POST /v1/sandboxes` and `PATCH /v1/sandboxes/{id}/network`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct NetworkSpec {
    /// Mode.
    #[serde(default)]
    pub mode: Mode,
    /// Allowed names (`api.example.com`, `*.pypi.org`) and CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// CIDRs always refused, even when allowed otherwise.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Host → transforms.
    #[serde(default)]
    pub rules: BTreeMap<String, HostRule>,
}

/// The network as `GET` reports it: header values of rules are never returned.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct NetworkInfo {
    /// Mode.
    pub mode: Mode,
    /// Allowed names and CIDRs.
    #[serde(default)]
    pub allow: Vec<String>,
    /// Denied CIDRs.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Host → names of the headers injected for it (values are write-only).
    #[serde(default)]
    pub rules: BTreeMap<String, Vec<String>>,
    /// Bytes sent by the sandbox through the proxy.
    #[serde(default)]
    pub bytes_out: u64,
    /// Bytes received by the sandbox through the proxy.
    #[serde(default)]
    pub bytes_in: u64,
}

impl NetworkSpec {
    /// The redacted view.
    pub fn info(&self, bytes_out: u64, bytes_in: u64) -> NetworkInfo {
        NetworkInfo {
            mode: self.mode,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            rules: self.rules.iter().map(|(h, r)| (h.clone(), r.headers.keys().cloned().collect())).collect(),
            bytes_out,
            bytes_in,
        }
    }
}

/// Lifecycle state of a sandbox.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
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

/// A read-only snapshot of a sandbox's files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
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
pub struct SnapshotList {
    /// Snapshots of the caller's tenant, newest first.
    pub snapshots: Vec<SnapshotInfo>,
}

/// Body of `POST /v1/sandboxes/{id}/snapshot`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CreateSnapshot {
    /// Optional name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Body of `POST /v1/sandboxes/{id}/fork`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// How many copies (1–32).
    pub count: u32,
}

/// Answer of a fork.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ForkResult {
    /// The new sandboxes, running, each with a copy-on-write copy of the files.
    pub sandboxes: Vec<SandboxInfo>,
}

/// Body of `POST /v1/sandboxes/{id}/timeout`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SetTimeout {
    /// New lifetime, in seconds from now.
    pub timeout_s: u64,
}

/// Body of `GET /v1/sandboxes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SandboxList {
    /// Sandboxes of the caller's tenant, newest first.
    pub sandboxes: Vec<SandboxInfo>,
}

/// Identity a command or file operation runs as inside the sandbox.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum User {
    /// `user`, uid/gid 1000, home `/home/user` (the default).
    #[default]
    User,
    /// `root` of the sandbox's own user namespace (not root of the host).
    Root,
}

impl User {
    /// The sandbox uid (and gid) of this identity.
    pub fn uid(self) -> u32 {
        match self {
            User::User => 1000,
            User::Root => 0,
        }
    }

    /// Home directory inside the sandbox.
    pub fn home(self) -> &'static str {
        match self {
            User::User => "/home/user",
            User::Root => "/root",
        }
    }

    /// Login name.
    pub fn name(self) -> &'static str {
        match self {
            User::User => "user",
            User::Root => "root",
        }
    }
}

/// Body of `POST /v1/sandboxes/{id}/exec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    /// Program and arguments, run directly (no shell). Exactly one of `argv` and `shell`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// A command line for `/bin/sh -c`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<String>,
    /// Working directory inside the sandbox (default: the user's home).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    /// Extra environment, over the sandbox's.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Who runs it (default `user`).
    #[serde(default)]
    pub user: User,
    /// Bytes fed to standard input, as UTF-8 text; standard input is closed after them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Wall-clock limit in seconds; the process group is killed when it passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<f64>,
    /// Return at once with a process id instead of waiting.
    #[serde(default)]
    pub background: bool,
    /// Per-stream output cap in bytes (default: the server's, 1 MiB); head and tail are kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_bytes: Option<u64>,
}

/// How a command ended. `exited` carries `exit_code`, `signaled` carries `signal`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// Returned from main or called exit.
    Exited,
    /// Killed by a signal it did not catch (not by sandlot).
    Signaled,
    /// Killed by sandlot because its `timeout_s` passed.
    Timeout,
    /// Killed by the kernel because the sandbox hit `memory_mb`.
    Oom,
    /// Ended because its sandbox went away (deleted, expired, or its supervisor died). A signal sent
    /// through `/processes/{pid}/kill` reports `signaled`.
    Killed,
}

impl ExitStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Exited => "exited",
            ExitStatus::Signaled => "signaled",
            ExitStatus::Timeout => "timeout",
            ExitStatus::Oom => "oom",
            ExitStatus::Killed => "killed",
        }
    }
}

/// Result of a foreground exec, or of waiting on a background process.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ExecResult {
    /// How it ended.
    pub status: ExitStatus,
    /// Exit code when `status` is `exited`; 128+signal for `signaled`, `oom` and `killed` (as a shell
    /// would report); 124 for `timeout` (as coreutils `timeout` does).
    pub exit_code: i32,
    /// Signal number when a signal ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Standard output (UTF-8, invalid bytes replaced); head and tail when truncated.
    pub stdout: String,
    /// Standard error, same rules.
    pub stderr: String,
    /// Total bytes the command wrote to standard output.
    pub stdout_bytes: u64,
    /// Total bytes the command wrote to standard error.
    pub stderr_bytes: u64,
    /// True when either stream was longer than the cap and its middle was dropped.
    pub truncated: bool,
    /// Wall-clock time from start to exit.
    pub duration_ms: u64,
}

/// One line of an NDJSON exec or log stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ExecEvent {
    /// The process is running.
    Started {
        /// Process id, usable with `/processes/{pid}`.
        pid: u64,
    },
    /// A chunk of standard output.
    Stdout {
        /// Text (UTF-8, invalid bytes replaced).
        data: String,
    },
    /// A chunk of standard error.
    Stderr {
        /// Text (UTF-8, invalid bytes replaced).
        data: String,
    },
    /// Output was dropped because the stream passed its cap; counts are in `exited`.
    Truncated {
        /// `stdout` or `stderr`.
        stream: String,
    },
    /// The process ended; no event follows.
    Exited {
        /// How it ended.
        status: ExitStatus,
        /// Exit code (128+signal when signalled).
        exit_code: i32,
        /// Signal number when a signal ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// Total standard output bytes.
        stdout_bytes: u64,
        /// Total standard error bytes.
        stderr_bytes: u64,
        /// Whether output was dropped.
        truncated: bool,
        /// Run time.
        duration_ms: u64,
    },
    /// The stream broke because of a server-side problem; the process state is unknown.
    Error {
        /// Stable error code.
        code: String,
        /// Human explanation.
        message: String,
    },
}

/// Answer to a `background: true` exec.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessStarted {
    /// Process id within the sandbox's API (not the kernel pid).
    pub pid: u64,
}

/// A process started through the API.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessInfo {
    /// API process id.
    pub pid: u64,
    /// What it runs.
    pub argv: Vec<String>,
    /// Whether it still runs.
    pub running: bool,
    /// Final status once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ExitStatus>,
    /// Exit code once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Start time, Unix milliseconds.
    pub started_at_ms: i64,
}

/// Body of `GET /v1/sandboxes/{id}/processes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ProcessList {
    /// Processes started through the API, oldest first.
    pub processes: Vec<ProcessInfo>,
}

/// Body of `POST …/processes/{pid}/kill`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// Signal number (default 9, SIGKILL); sent to the whole process group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// Body of `POST …/processes/{pid}/stdin`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    /// Text to write.
    #[serde(default)]
    pub data: String,
    /// Close standard input after writing.
    #[serde(default)]
    pub eof: bool,
}

/// Kind of a directory entry.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
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
}

/// Body of `GET …/files/list`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FileList {
    /// Entries below the listed directory (to the asked depth), sorted by path.
    pub entries: Vec<FileStat>,
}

/// Body of `POST …/files/mkdir`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
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
pub struct WriteResult {
    /// Path written (the file, or the directory unpacked into).
    pub path: String,
    /// Bytes received.
    pub bytes: u64,
    /// Entries unpacked (tar uploads only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entries: Option<u64>,
}

/// Body of `POST /v1/sandboxes/{id}/ports`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExposePort {
    /// Port a server listens on inside the sandbox (on its loopback or any address).
    pub port: u16,
}

/// An exposed port: its preview URL works without an API key (the token is in it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PortInfo {
    /// The port.
    pub port: u16,
    /// Preview URL (HTTP/1.1 and WebSocket upgrades are proxied; the token becomes a cookie).
    pub url: String,
    /// The per-port token (a bearer for this port of this sandbox only).
    pub token: String,
}

/// Body of `POST /v1/keys` (admin only).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CreateKey {
    /// Tenant the key acts for; created if new.
    pub tenant: String,
    /// The key stops working this many seconds from now (at most ten years). At most one of this and
    /// `expires_at_ms`; neither: it never expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_s: Option<u64>,
    /// The key stops working at this Unix time (ms), which must be in the future.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// A freshly created API key. The secret is shown once and stored only as a hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyCreated {
    /// Tenant of the key.
    pub tenant: String,
    /// The bearer token.
    pub key: String,
    /// The key's id (for `GET /v1/keys` and `DELETE /v1/keys/{id}`); not a secret.
    #[serde(default)]
    pub id: String,
    /// When the key stops working (Unix ms), if ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
}

/// One API key as `GET /v1/keys` shows it: never the secret or its hash.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyInfo {
    /// Id (`key_` and 16 hex digits), for `DELETE /v1/keys/{id}`.
    pub id: String,
    /// The secret's first 8 characters, to tell keys apart.
    pub prefix: String,
    /// Tenant the key acts for.
    pub tenant: String,
    /// The bootstrap admin key.
    pub admin: bool,
    /// Creation time (Unix ms).
    pub created_at_ms: i64,
    /// When it stops working (Unix ms), if ever.
    pub expires_at_ms: Option<i64>,
    /// Last successful use (Unix ms, to the minute), if any.
    pub last_used_at_ms: Option<i64>,
    /// When it was revoked (Unix ms), if it was.
    pub revoked_at_ms: Option<i64>,
}

/// `GET /v1/keys`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct KeyList {
    /// Keys, oldest first.
    pub keys: Vec<KeyInfo>,
}

/// `GET`/`PUT /v1/tenants/{tenant}/network` (admin only): what of the always-deny list a tenant's
/// sandboxes may reach. An exemption only lifts the always-deny list; each sandbox's own policy must
/// still allow the destination (an `allow` CIDR or `allow-all`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct TenantNetwork {
    /// CIDRs (private ranges, metadata, the host's own addresses …) the tenant is opted into.
    #[serde(default)]
    pub exempt: Vec<String>,
}

/// One audit record.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    /// Sequence number.
    pub seq: i64,
    /// Unix milliseconds.
    pub at_ms: i64,
    /// Tenant that acted.
    pub tenant: String,
    /// Sandbox concerned, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    /// What happened, e.g. `sandbox.create`, `exec`, `file.write`.
    pub action: String,
    /// Details (argv, path, status, duration…).
    pub detail: serde_json::Value,
}

/// Body of `GET /v1/audit`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditList {
    /// Records, newest first.
    pub entries: Vec<AuditEntry>,
}

/// Error body of every non-2xx answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// Stable code plus a message meant for a human.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorDetail {
    /// Stable machine code, see [`codes`].
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// Whether the same request may succeed later unchanged (a limit or the host's capacity frees up,
    /// a server in the sandbox starts listening). Absent from older servers: then `false`.
    #[serde(default)]
    pub retryable: bool,
}

/// Stable error codes. New ones may be added; existing ones keep their meaning and HTTP status.
pub mod codes {
    /// 400: the request is malformed or a value is out of range.
    pub const INVALID_REQUEST: &str = "invalid_request";
    /// 401: no or unknown API key.
    pub const UNAUTHENTICATED: &str = "unauthenticated";
    /// 403: the key is valid but may not do this (admin routes).
    pub const FORBIDDEN: &str = "forbidden";
    /// 404: no such sandbox/process for this tenant.
    pub const NOT_FOUND: &str = "not_found";
    /// 404: the path does not exist inside the sandbox.
    pub const FILE_NOT_FOUND: &str = "file_not_found";
    /// 409: the sandbox is not in a state that allows this.
    pub const CONFLICT: &str = "conflict";
    /// 409: a directory was given where a file is needed, or the reverse.
    pub const WRONG_FILE_KIND: &str = "wrong_file_kind";
    /// 409: the destination exists.
    pub const ALREADY_EXISTS: &str = "already_exists";
    /// 409: a directory is not empty (remove it with `recursive=true`).
    pub const DIRECTORY_NOT_EMPTY: &str = "directory_not_empty";
    /// 403: the sandbox user may not access the path.
    pub const PERMISSION_DENIED: &str = "permission_denied";
    /// 413: the body is larger than the server allows.
    pub const TOO_LARGE: &str = "too_large";
    /// 429: the server runs its maximum number of sandboxes (`--max-sandboxes`), or a sandbox has as many
    /// inbound connections or file operations open as its supervisor allows at once.
    pub const LIMIT_REACHED: &str = "limit_reached";
    /// 429: the running sandboxes together hold this server's capacity (memory, pids or disk, times
    /// `--overcommit`); retry when some have ended.
    pub const SERVER_FULL: &str = "server_full";
    /// 502: nothing answers on the sandbox port that was asked for (the workload's state; retry once
    /// it listens).
    pub const PORT_UNREACHABLE: &str = "port_unreachable";
    /// 500: a bug or a host problem; retrying may help.
    pub const INTERNAL: &str = "internal";
    /// 503: the server is overloaded: it has its maximum of API connections open (in total or from
    /// the caller's address); retry shortly.
    pub const UNAVAILABLE: &str = "unavailable";
}

fn default_true() -> bool {
    true
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
    fn exec_event_shape_is_tagged() {
        let line = serde_json::to_string(&ExecEvent::Stdout { data: "hi".into() }).unwrap();
        assert_eq!(line, r#"{"type":"stdout","data":"hi"}"#);
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
