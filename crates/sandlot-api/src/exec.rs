//! Running commands: the exec request, how a command ended, the NDJSON event stream and the
//! background-process routes.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::User;

/// Body of `POST /v1/sandboxes/{id}/exec`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
    /// Who runs it: `user` (uid 1000) or `root`; by default the image's `USER` when it names one,
    /// else `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<User>,
    /// Bytes fed to standard input, as UTF-8 text; standard input is closed after them unless
    /// `stdin_open` keeps it open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin: Option<String>,
    /// Keep standard input open for `/processes/{pid}/stdin` writes (`true`), or close it at the start
    /// (`false`: the process reads end of file, and writes are refused with 409). Default: open for a
    /// background process, closed (after `stdin`) for a foreground one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdin_open: Option<bool>,
    /// Run on a new pseudo-terminal of this size: the process leads a session whose controlling
    /// terminal is its stdin, stdout and stderr; all its output is `stdout` (the terminal's, escape
    /// sequences and `\r\n` included) and `stderr` stays empty. `TERM` is `xterm-256color` unless set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<PtySize>,
    /// A label to find the process by (`GET …/processes?tag=`); at most 256 bytes, no NUL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
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

/// Size of a pseudo-terminal, in character cells; each between 1 and 1000.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PtySize {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

/// The rows, and the columns, a pseudo-terminal may have.
pub const PTY_CELLS: std::ops::RangeInclusive<u16> = 1..=1000;

impl PtySize {
    /// The size, if both its rows and its cols are within [`PTY_CELLS`]; else why not.
    pub fn check(self) -> Result<PtySize, String> {
        if !PTY_CELLS.contains(&self.rows) || !PTY_CELLS.contains(&self.cols) {
            return Err(format!(
                "a terminal size must have rows and cols between {} and {}, got {}x{}",
                PTY_CELLS.start(),
                PTY_CELLS.end(),
                self.rows,
                self.cols
            ));
        }
        Ok(self)
    }
}

/// Body of `POST …/processes/{pid}/resize`: the new size of a pty process's terminal.
pub type ResizeRequest = PtySize;

/// How a command ended. `exited` carries `exit_code`, `signaled` carries `signal`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ProcessStarted {
    /// Process id within the sandbox's API (not the kernel pid).
    pub pid: u64,
}

/// A process started through the API.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
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
    /// The request's `tag`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Working directory it started in.
    #[serde(default)]
    pub cwd: String,
    /// The variables the request's `env` set (not the sandbox's or the image's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Whether it runs on a pseudo-terminal.
    #[serde(default)]
    pub pty: bool,
    /// Set for what a finished command left running in its process group (a server started with
    /// `&` or `nohup`): that command's pid. It lives on until it ends or the sandbox does; `kill`
    /// signals the whole group; it has no output of its own (what it writes to the command's pipes
    /// after the command's exit is dropped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_by: Option<u64>,
}

/// Body of `GET /v1/sandboxes/{id}/processes`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
pub struct ProcessList {
    /// Processes started through the API, oldest first.
    pub processes: Vec<ProcessInfo>,
}

/// Body of `POST …/processes/{pid}/kill`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct KillRequest {
    /// Signal number (default 9, SIGKILL); sent to the whole process group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// Body of `POST …/processes/{pid}/stdin`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StdinRequest {
    /// Text to write.
    #[serde(default)]
    pub data: String,
    /// Close standard input after writing.
    #[serde(default)]
    pub eof: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_event_shape_is_tagged() {
        let line = serde_json::to_string(&ExecEvent::Stdout { data: "hi".into() }).unwrap();
        assert_eq!(line, r#"{"type":"stdout","data":"hi"}"#);
    }
}
