//! Commands in a sandbox: an exec request validated into the engine's spec, run in the way the
//! surface asked, and audited (the command line's head and digest, the names of the variables set).

use std::sync::Arc;

use sandlot_api::{ExecRequest, ExecResult, ExitStatus, ProcessList, PtySize, User};
use sandlot_engine::{ExecSpec, Process};
use sandlot_store::SandboxRecord;
use serde_json::json;

use crate::audit::Class;
use crate::config::OUTPUT_CAP_RANGE;
use crate::plan::{check_env, no_nul};
use crate::{Caller, Control, Error, Kind, Result};

/// Foreground commands without a `timeout_s` are killed after this long.
const DEFAULT_EXEC_TIMEOUT_S: f64 = 60.0;
const MAX_ARGV_BYTES: usize = 1 << 20;
const MAX_STDIN_BYTES: usize = 8 << 20;
/// Longest process tag, in bytes.
const MAX_TAG_BYTES: usize = 256;
/// Most bytes of argv, env, cwd and tags one process listing copies (envs counted as listed, at most
/// 64 KiB each).
pub const MAX_LIST_BYTES: usize = 16 << 20;
/// Checks a terminal size given by a caller.
pub(crate) fn check_pty_size(rows: u16, cols: u16) -> Result<()> {
    PtySize { rows, cols }.check().map_err(Error::invalid)?;
    Ok(())
}

/// How a started command is answered.
pub enum Started {
    /// `background: true`: it runs on; its pid is the answer.
    Background {
        /// The process handle's id in the API.
        pid: u64,
        /// The process itself, for a surface that streams it at once (envd's `Start`) without
        /// looking it up again.
        process: Arc<Process>,
    },
    /// The caller follows its events as they happen.
    Streaming(Arc<Process>),
    /// It ran to its end.
    Finished(ExecResult),
}

/// Turns a request into an [`ExecSpec`], validating every field; `tls_env` is the driver's (every
/// command's TLS stacks pointed at the image's bundle).
fn spec(
    max_timeout_s: u64,
    default_output: u64,
    tls_env: &[(&'static str, &'static str)],
    rec: &SandboxRecord,
    image: Option<&crate::images::RootConfig>,
    req: ExecRequest,
    scrollback: bool,
) -> Result<(ExecSpec, String)> {
    let argv = match (req.argv, req.shell) {
        (Some(argv), None) => argv,
        (None, Some(shell)) => vec!["/bin/sh".into(), "-c".into(), shell],
        (Some(_), Some(_)) => return Err(Error::invalid("give either `argv` or `shell`, not both")),
        (None, None) => return Err(Error::invalid("missing command: give `argv` (a list) or `shell` (a string)")),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(Error::invalid("`argv` must name a program in its first element"));
    }
    let mut size = 0;
    for a in &argv {
        no_nul("argv", a)?;
        size += a.len() + 1;
    }
    if size > MAX_ARGV_BYTES {
        return Err(Error::invalid(format!(
            "argv is {size} bytes; the limit is {MAX_ARGV_BYTES}; pass large input through stdin or a file"
        )));
    }
    check_env(&req.env)?;
    if let Some(tag) = &req.tag {
        no_nul("tag", tag)?;
        if tag.len() > MAX_TAG_BYTES {
            return Err(Error::invalid(format!("tag is {} bytes; the limit is {MAX_TAG_BYTES}", tag.len())));
        }
    }
    if let Some(size) = req.pty {
        check_pty_size(size.rows, size.cols)?;
    }
    // argv and environment share the kernel's ARG_MAX: bound them together, as a client error.
    let env_bytes: usize = req.env.iter().chain(rec.env.iter()).map(|(k, v)| k.len() + v.len() + 2).sum();
    if size + env_bytes > MAX_ARGV_BYTES {
        return Err(Error::invalid(format!(
            "argv and env are {} bytes together; the limit is {MAX_ARGV_BYTES}; pass large data through stdin or a file",
            size + env_bytes
        )));
    }
    let who = identity(req.user, image)?;
    // The image's WorkingDir is where its programs expect to start, as `docker run` does.
    let cwd = req.cwd.or_else(|| image.and_then(|i| i.run.working_dir.clone())).unwrap_or_else(|| who.home.clone());
    no_nul("cwd", &cwd)?;
    if !cwd.starts_with('/') {
        return Err(Error::invalid(format!("cwd must be an absolute path, got {cwd:?}")));
    }
    let timeout = match (req.timeout_s, req.background) {
        (Some(t), _) if !(t.is_finite() && t > 0.0 && t <= max_timeout_s as f64) => {
            return Err(Error::invalid(format!(
                "timeout_s must be a positive number of seconds up to {max_timeout_s}, got {t}"
            )));
        }
        (Some(t), _) => Some(t),
        (None, false) => Some(DEFAULT_EXEC_TIMEOUT_S),
        (None, true) => None,
    };
    let max_output = req.max_output_bytes.unwrap_or(default_output);
    if !OUTPUT_CAP_RANGE.contains(&max_output) {
        return Err(Error::invalid(format!(
            "max_output_bytes must be between 1024 and {}, got {max_output}",
            OUTPUT_CAP_RANGE.end()
        )));
    }
    let stdin = req.stdin.map(String::into_bytes);
    if stdin.as_ref().is_some_and(|s| s.len() > MAX_STDIN_BYTES) {
        return Err(Error::invalid(format!("stdin over {MAX_STDIN_BYTES} bytes: upload a file instead")));
    }
    // Base environment, then the image's, then the sandbox's, then the request's: later wins. A pty
    // process gets a TERM that matches what terminal clients (xterm.js, E2B's SDKs) render, unless
    // one of those sets its own.
    let term = req.pty.map(|_| ("TERM", "xterm-256color"));
    let base = [
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LANG", "C.UTF-8"),
        ("HOME", who.home.as_str()),
        ("USER", who.name.as_str()),
        ("LOGNAME", who.name.as_str()),
        ("SHELL", "/bin/bash"),
    ];
    let mut env: std::collections::BTreeMap<String, String> = base
        .into_iter()
        .chain(term)
        .chain(tls_env.iter().copied())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let image_env = image.map(|i| i.run.env.as_slice()).unwrap_or_default();
    env.extend(image_env.iter().filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())));
    env.extend(rec.env.clone());
    let meta = sandlot_engine::ProcessMeta { tag: req.tag, cwd: cwd.clone(), env: req.env.clone(), left_by: None };
    env.extend(req.env);
    Ok((
        ExecSpec {
            argv,
            env: env.into_iter().collect(),
            cwd,
            uid: who.uid,
            gid: who.gid,
            timeout_ms: timeout.map(|t| (t * 1000.0) as u64),
            stdin,
            keep_stdin: req.stdin_open.unwrap_or(req.background),
            max_output: max_output as usize,
            scrollback,
            pty: req.pty,
            meta,
        },
        who.name,
    ))
}

/// Who a command runs as.
struct Identity {
    uid: u32,
    gid: Option<u32>,
    name: String,
    home: String,
}

/// The asked-for user; else the image's `USER` when it names one; else `user`.
fn identity(asked: Option<User>, image: Option<&crate::images::RootConfig>) -> Result<Identity> {
    let builtin = |u: User| Identity { uid: u.uid(), gid: None, name: u.name().into(), home: u.home().into() };
    let Some(image) = image.filter(|i| i.run.user.is_some()) else {
        return Ok(builtin(asked.unwrap_or_default()));
    };
    if let Some(u) = asked {
        return Ok(builtin(u));
    }
    match &image.identity {
        Some(id) => Ok(Identity { uid: id.uid, gid: Some(id.gid), name: id.name.clone(), home: id.home.clone() }),
        None => Err(Error::invalid(format!(
            "{}; give `user` (`user` or `root`) to run the command",
            image.identity_error.as_deref().unwrap_or("the image's USER cannot be resolved")
        ))),
    }
}

/// The audit row of an exec as it starts: its command line (the first KiB, with length and digest if
/// longer) and the names of the variables the request set (their values may be secrets).
fn audit_start(proc: &Process, user: &str, env_names: &[String], background: bool) -> serde_json::Value {
    let mut row = sandlot_store::audit_argv(&proc.argv);
    let (names, cut) = sandlot_store::audit_head(env_names);
    row["pid"] = json!(proc.handle);
    row["user"] = json!(user);
    row["env"] = json!(names);
    if cut {
        row["env_truncated"] = json!(true);
    }
    if background {
        row["background"] = json!(true);
    }
    row
}

fn with_outcome(mut row: serde_json::Value, r: &ExecResult) -> serde_json::Value {
    row["status"] = json!(r.status);
    row["exit_code"] = json!(r.exit_code);
    row["duration_ms"] = json!(r.duration_ms);
    row["stdout_bytes"] = json!(r.stdout_bytes);
    row["stderr_bytes"] = json!(r.stderr_bytes);
    row
}

/// The image label naming a shell command line that is started in the background, as the image's
/// user, every time a sandbox of the image boots (create, resume from stopped, fork, snapshot restore).
pub const START_LABEL: &str = "sandlot.start";
/// The image label naming who runs the `sandlot.start` command instead of the image's user: `user` or
/// `root` (the sandbox's own root, as `"user": "root"` on an exec). A service that hands out sessions
/// as several users, as E2B's code interpreter does with its contexts, starts as root and drops.
pub const START_USER_LABEL: &str = "sandlot.start.user";

impl Control {
    /// Starts the `sandlot.start` command of `rec`'s image in the just-booted `sb`, if it names one.
    /// Never fails the boot: a command that cannot start, or that exits unsuccessfully, is an audit row
    /// (`sandbox.start_command_failed`) for the owner to read, and the sandbox runs on without it.
    pub(crate) async fn run_start_command(&self, rec: &SandboxRecord, sb: &sandlot_engine::Sandbox) {
        let id = rec.info.id.as_str();
        let failed = |reason: String| {
            let row = json!({"tag": START_LABEL, "reason": reason});
            self.audit_limited(Class::Exec, &rec.tenant, Some(id), "sandbox.start_command_failed", &row);
        };
        let image = match self.image_run_config(rec.image_key.as_deref()) {
            Ok(image) => image,
            Err(e) => return failed(format!("the image's config could not be read: {}", e.message)),
        };
        let Some(command) = image.as_ref().and_then(|i| i.run.labels.get(START_LABEL)).cloned() else { return };
        let start_user = match image.as_ref().and_then(|i| i.run.labels.get(START_USER_LABEL)).map(String::as_str) {
            None => None,
            Some("user") => Some(User::User),
            Some("root") => Some(User::Root),
            Some(other) => {
                return failed(format!(
                    "label {START_USER_LABEL} is {other:?}; it names who runs {START_LABEL}: \"user\" or \"root\""
                ))
            }
        };
        let req = ExecRequest {
            shell: Some(command),
            background: true,
            tag: Some(START_LABEL.into()),
            user: start_user,
            ..Default::default()
        };
        let (spec, user) = match spec(
            self.cfg.max_timeout_s,
            self.cfg.max_output_bytes,
            self.engine.tls_env(),
            rec,
            image.as_ref(),
            req,
            false,
        ) {
            Ok(s) => s,
            Err(e) => return failed(format!("label {START_LABEL} is not a command sandlot can run: {}", e.message)),
        };
        let proc = match sb.spawn(spec).await {
            Ok(p) => p,
            Err(e) => return failed(format!("the command could not start: {e}")),
        };
        let mut row = audit_start(&proc, &user, &[], true);
        row["tag"] = json!(START_LABEL);
        self.audit_limited(Class::Exec, &rec.tenant, Some(id), "sandbox.start_command", &row);
        let Some(this) = self.me.upgrade() else { return };
        let (tenant, id) = (rec.tenant.clone(), rec.info.id.clone());
        tokio::spawn(async move {
            let r = proc.wait().await;
            // Ending with its sandbox (`killed`: stopped, deleted, expired) is not a failure of the command.
            let ok = r.status == ExitStatus::Killed || (r.status == ExitStatus::Exited && r.exit_code == 0);
            if !ok {
                let mut row = with_outcome(json!({"tag": START_LABEL, "pid": proc.handle}), &r);
                row["logs"] = json!(format!("GET /v1/sandboxes/{id}/processes/{}/logs", proc.handle));
                this.audit_limited(Class::Exec, &tenant, Some(&id), "sandbox.start_command_failed", &row);
            }
        });
    }

    fn audit_exec(&self, rec: &SandboxRecord, action: &str, row: &serde_json::Value) {
        self.audit_limited(Class::Exec, &rec.tenant, Some(&rec.info.id), action, row);
    }

    /// Writes the exec's row once it ends, for calls that answer before that. A background exec's
    /// start row already holds its command line: its end row (`exec.end`) holds the pid and outcome.
    fn audit_when_done(
        self: &Arc<Self>,
        rec: SandboxRecord,
        proc: &Arc<Process>,
        row: serde_json::Value,
        started: bool,
    ) {
        let (this, proc) = (Arc::clone(self), Arc::clone(proc));
        tokio::spawn(async move {
            let r = proc.wait().await;
            if started {
                this.audit_exec(&rec, "exec.end", &with_outcome(json!({"pid": proc.handle}), &r));
            } else {
                this.audit_exec(&rec, "exec", &with_outcome(row, &r));
            }
        });
    }

    /// Runs a command in the caller's sandbox `id` (resumed first if it auto-resumes). A foreground
    /// command is waited for, unless `streaming`, when the caller follows it instead.
    pub async fn exec(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
        streaming: bool,
    ) -> Result<Started> {
        self.exec_as(caller, id, req, streaming, false).await
    }

    /// [`Control::exec`], with output kept as a scrollback (`scrollback`: a terminal's, streamed live
    /// however much is printed, its last bytes kept for a reattach) or as head and tail. A
    /// scrollback's start row says `terminal: true`.
    pub async fn exec_as(
        self: &Arc<Self>,
        caller: &Caller,
        id: &str,
        req: ExecRequest,
        streaming: bool,
        scrollback: bool,
    ) -> Result<Started> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let background = req.background;
        let env_names: Vec<String> = req.env.keys().cloned().collect();
        let image = self.image_run_config(rec.image_key.as_deref())?;
        let (spec, user) = spec(
            self.cfg.max_timeout_s,
            self.cfg.max_output_bytes,
            self.engine.tls_env(),
            &rec,
            image.as_ref(),
            req,
            scrollback,
        )?;
        let proc = sb.spawn(spec).await?;
        let mut row = audit_start(&proc, &user, &env_names, background);
        if scrollback {
            row["terminal"] = json!(true);
        }
        if background {
            self.audit_exec(&rec, "exec.start", &row);
            self.audit_when_done(rec, &proc, serde_json::Value::Null, true);
            return Ok(Started::Background { pid: proc.handle, process: proc });
        }
        if streaming {
            self.audit_when_done(rec, &proc, row, false);
            return Ok(Started::Streaming(proc));
        }
        let r = proc.wait().await;
        self.audit_exec(&rec, "exec", &with_outcome(row, &r));
        Ok(Started::Finished(r))
    }

    /// Process `pid` of the caller's sandbox `id`.
    pub async fn process(&self, caller: &Caller, id: &str, pid: u64) -> Result<Arc<Process>> {
        Ok(self.running_process(caller, id, pid).await?.2)
    }

    /// The caller's running sandbox `id` and its process `pid`.
    pub(crate) async fn running_process(
        &self,
        caller: &Caller,
        id: &str,
        pid: u64,
    ) -> Result<(SandboxRecord, Arc<sandlot_engine::Sandbox>, Arc<Process>)> {
        let (rec, sb) = self.ensure_running(caller, id).await?;
        let proc = sb.process(pid).ok_or_else(|| Error::not_found(&format!("process {pid}")))?;
        Ok((rec, sb, proc))
    }

    /// The processes the caller's sandbox `id` remembers, oldest first; only the running ones with
    /// `running_only` (filtered before anything is copied). A listing larger than
    /// `MAX_LIST_BYTES` (16 MiB) is refused before it is built: up to 1 024 processes of up to 1 MiB of argv
    /// each would otherwise be copied for one request.
    pub async fn processes(&self, caller: &Caller, id: &str, running_only: bool) -> Result<ProcessList> {
        let (_, sb) = self.ensure_running(caller, id).await?;
        let listed: Vec<_> = sb.processes().into_iter().filter(|p| !running_only || p.running()).collect();
        let bytes: usize = listed.iter().map(|p| p.info_bytes()).sum();
        if bytes > MAX_LIST_BYTES {
            return Err(Error::new(
                Kind::TooLarge,
                format!(
                    "the listing of {} processes would be {bytes} bytes of argv and env; the limit is \
                     {MAX_LIST_BYTES}: look processes up by pid or tag, or end some",
                    listed.len()
                ),
            ));
        }
        Ok(ProcessList { processes: listed.iter().map(|p| p.info()).collect() })
    }

    /// Sends `signal` (SIGKILL by default) to process `pid` of the caller's sandbox `id`.
    pub async fn kill(&self, caller: &Caller, id: &str, pid: u64, signal: Option<i32>) -> Result<()> {
        let (rec, sb, proc) = self.running_process(caller, id, pid).await?;
        let signal = signal.unwrap_or(libc_sigkill());
        if !(1..=64).contains(&signal) {
            return Err(Error::invalid(format!("signal must be 1-64, got {signal}")));
        }
        if proc.finished() {
            return Err(Error::conflict(format!("process {pid} has already exited")));
        }
        sb.signal(pid, signal).await?;
        self.audit(&rec.tenant, Some(id), "process.kill", &json!({"pid": pid, "signal": signal}))?;
        Ok(())
    }

    /// Writes `data` to process `pid`'s standard input (then closes it, with `eof`).
    pub async fn stdin(&self, caller: &Caller, id: &str, pid: u64, data: &[u8], eof: bool) -> Result<()> {
        let (_, sb, proc) = self.running_process(caller, id, pid).await?;
        if let Some(why) = proc.stdin_closed_reason() {
            return Err(Error::conflict(format!("process {pid} has no open standard input: {why}")));
        }
        if !proc.stdin_open() {
            return Err(Error::conflict(format!(
                "process {pid} has no open standard input (it has exited, its stdin was closed, or it was \
                 started with `stdin_open: false`, or in the foreground without `stdin_open: true`)"
            )));
        }
        sb.stdin(pid, data, eof).await?;
        Ok(())
    }
}

impl Control {
    /// The newest running process of the caller's sandbox `id` started with `tag`.
    pub async fn process_by_tag(&self, caller: &Caller, id: &str, tag: &str) -> Result<Arc<Process>> {
        let (_, sb) = self.ensure_running(caller, id).await?;
        sb.processes()
            .into_iter()
            .rev()
            .find(|p| p.running() && p.meta.tag.as_deref() == Some(tag))
            .ok_or_else(|| Error::not_found(&format!("running process tagged {tag:?}")))
    }

    /// Sets the terminal size of pty process `pid` of the caller's sandbox `id` (the process gets
    /// SIGWINCH). Not audited, as stdin writes are not: it changes nothing but the running process's
    /// view of its terminal, and a terminal client sends one per window resize.
    pub async fn resize(&self, caller: &Caller, id: &str, pid: u64, rows: u16, cols: u16) -> Result<()> {
        check_pty_size(rows, cols)?;
        let (_, sb, proc) = self.running_process(caller, id, pid).await?;
        if !proc.pty {
            return Err(Error::invalid(format!(
                "process {pid} has no terminal to resize: only a process started with `pty` has one"
            )));
        }
        if proc.finished() {
            return Err(Error::conflict(format!("process {pid} has already exited")));
        }
        sb.resize(pid, rows, cols).await?;
        Ok(())
    }
}

/// SIGKILL's number (9 on every Linux architecture).
fn libc_sigkill() -> i32 {
    nix::sys::signal::Signal::SIGKILL as i32
}
