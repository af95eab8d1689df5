//! Exec and process routes.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use sandlot_api::{ExecEvent, ExecRequest, ExecResult, KillRequest, ProcessList, ProcessStarted, StdinRequest, NDJSON};
use sandlot_engine::{ExecSpec, Process};
use sandlot_store::SandboxRecord;
use serde_json::json;

use super::extract::{no_nul, running, ApiJson, ApiPath, Caller};
use super::sandboxes::check_env;
use super::{ApiError, AppState};

/// Foreground commands without a `timeout_s` are killed after this long.
const DEFAULT_EXEC_TIMEOUT_S: f64 = 60.0;
const MAX_ARGV_BYTES: usize = 1 << 20;
const MAX_STDIN_BYTES: usize = 8 << 20;

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(NDJSON))
}

/// Turns a request into an [`ExecSpec`], validating every field.
fn spec(app: &AppState, rec: &SandboxRecord, req: ExecRequest) -> Result<ExecSpec, ApiError> {
    let argv = match (req.argv, req.shell) {
        (Some(argv), None) => argv,
        (None, Some(shell)) => vec!["/bin/sh".into(), "-c".into(), shell],
        (Some(_), Some(_)) => return Err(ApiError::invalid("give either `argv` or `shell`, not both")),
        (None, None) => return Err(ApiError::invalid("missing command: give `argv` (a list) or `shell` (a string)")),
    };
    if argv.is_empty() || argv[0].is_empty() {
        return Err(ApiError::invalid("`argv` must name a program in its first element"));
    }
    let mut size = 0;
    for a in &argv {
        no_nul("argv", a)?;
        size += a.len() + 1;
    }
    if size > MAX_ARGV_BYTES {
        return Err(ApiError::invalid(format!(
            "argv is {size} bytes; the limit is {MAX_ARGV_BYTES}; pass large input through stdin or a file"
        )));
    }
    check_env(&req.env)?;
    // argv and environment share the kernel's ARG_MAX: bound them together, as a client error.
    let env_bytes: usize = req.env.iter().chain(rec.env.iter()).map(|(k, v)| k.len() + v.len() + 2).sum();
    if size + env_bytes > MAX_ARGV_BYTES {
        return Err(ApiError::invalid(format!(
            "argv and env are {} bytes together; the limit is {MAX_ARGV_BYTES}; pass large data through stdin or a file",
            size + env_bytes
        )));
    }
    let user = req.user;
    let cwd = req.cwd.unwrap_or_else(|| user.home().to_string());
    no_nul("cwd", &cwd)?;
    if !cwd.starts_with('/') {
        return Err(ApiError::invalid(format!("cwd must be an absolute path, got {cwd:?}")));
    }
    let timeout = match (req.timeout_s, req.background) {
        (Some(t), _) if !(t.is_finite() && t > 0.0 && t <= app.cfg.max_timeout_s as f64) => {
            return Err(ApiError::invalid(format!(
                "timeout_s must be a positive number of seconds up to {}, got {t}",
                app.cfg.max_timeout_s
            )));
        }
        (Some(t), _) => Some(t),
        (None, false) => Some(DEFAULT_EXEC_TIMEOUT_S),
        (None, true) => None,
    };
    let max_output = req.max_output_bytes.unwrap_or(app.cfg.max_output_bytes);
    if !(1024..=64 << 20).contains(&max_output) {
        return Err(ApiError::invalid(format!(
            "max_output_bytes must be between 1024 and {}, got {max_output}",
            64 << 20
        )));
    }
    let stdin = req.stdin.map(String::into_bytes);
    if stdin.as_ref().is_some_and(|s| s.len() > MAX_STDIN_BYTES) {
        return Err(ApiError::invalid(format!("stdin over {MAX_STDIN_BYTES} bytes: upload a file instead")));
    }
    // Base environment, then the sandbox's, then the request's: later wins.
    let mut env: std::collections::BTreeMap<String, String> = [
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        ("LANG", "C.UTF-8"),
        ("HOME", user.home()),
        ("USER", user.name()),
        ("LOGNAME", user.name()),
        ("SHELL", "/bin/bash"),
        // The daemon's egress CA (for brokered hosts) is in the bundle; point every TLS stack at it.
        ("SSL_CERT_FILE", sandlot_linux::image::CA_BUNDLE),
        ("REQUESTS_CA_BUNDLE", sandlot_linux::image::CA_BUNDLE),
        ("CURL_CA_BUNDLE", sandlot_linux::image::CA_BUNDLE),
        ("PIP_CERT", sandlot_linux::image::CA_BUNDLE),
        ("NODE_EXTRA_CA_CERTS", sandlot_linux::image::CA_CERT),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.extend(rec.env.clone());
    env.extend(req.env);
    Ok(ExecSpec {
        argv,
        env: env.into_iter().collect(),
        cwd,
        uid: user.uid(),
        timeout_ms: timeout.map(|t| (t * 1000.0) as u64),
        stdin,
        keep_stdin: req.background,
        max_output: max_output as usize,
    })
}

/// The audit row of an exec as it starts: its command line (the first KiB, with length and digest if
/// longer) and the names of the variables the request set (their values may be secrets).
fn audit_start(proc: &Process, user: &str, env_names: &[String], background: bool) -> serde_json::Value {
    let mut row = sandlot_store::audit_argv(&proc.argv);
    let (names, cut) = sandlot_store::audit_head(env_names);
    row["pid"] = json!(proc.id);
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

fn audit(app: &AppState, rec: &SandboxRecord, action: &str, row: &serde_json::Value) {
    app.audit_limited(super::audit::Class::Exec, &rec.tenant, Some(&rec.info.id), action, row);
}

/// Writes the exec's row once it ends, for calls that answer before that. A background exec's start
/// row already holds its command line: its end row (`exec.end`) holds the pid and the outcome only.
fn audit_when_done(app: &AppState, rec: SandboxRecord, proc: &Arc<Process>, row: serde_json::Value, started: bool) {
    let (app, proc) = (Arc::clone(app), Arc::clone(proc));
    tokio::spawn(async move {
        let r = proc.wait().await;
        if started {
            audit(&app, &rec, "exec.end", &with_outcome(json!({"pid": proc.id}), &r));
        } else {
            audit(&app, &rec, "exec", &with_outcome(row, &r));
        }
    });
}

pub async fn exec(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecRequest>,
) -> Result<Response, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let background = req.background;
    let user = req.user.name();
    let env_names: Vec<String> = req.env.keys().cloned().collect();
    let spec = spec(&app, &rec, req)?;
    let proc = sb.spawn(spec).await?;
    let row = audit_start(&proc, user, &env_names, background);
    if background {
        audit(&app, &rec, "exec.start", &row);
        audit_when_done(&app, rec, &proc, serde_json::Value::Null, true);
        return Ok((StatusCode::ACCEPTED, Json(ProcessStarted { pid: proc.id })).into_response());
    }
    if wants_ndjson(&headers) {
        audit_when_done(&app, rec, &proc, row, false);
        return Ok(ndjson(proc));
    }
    let r = proc.wait().await;
    audit(&app, &rec, "exec", &with_outcome(row, &r));
    Ok(Json(r).into_response())
}

/// Streams a process's events, from its first, as NDJSON until it exits.
fn ndjson(proc: Arc<Process>) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(async move {
        let line = |ev: &ExecEvent| {
            let mut v = serde_json::to_vec(ev).expect("events serialise");
            v.push(b'\n');
            Ok(Bytes::from(v))
        };
        // The follower reads at this client's pace: a client that stops reading holds one event here
        // and 64 lines in the channel, and costs the process nothing.
        let mut follow = proc.follow();
        while let Some(ev) = follow.next().await {
            if tx.send(line(&ev)).await.is_err() {
                return;
            }
        }
    });
    ([(header::CONTENT_TYPE, NDJSON)], super::channel_body(rx)).into_response()
}

fn process(sb: &sandlot_engine::Sandbox, pid: u64) -> Result<Arc<Process>, ApiError> {
    sb.process(pid).ok_or_else(|| ApiError::not_found(&format!("process {pid}")))
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ProcessList>, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    Ok(Json(ProcessList { processes: sb.processes().iter().map(|p| p.info()).collect() }))
}

pub async fn wait(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
) -> Result<Json<ExecResult>, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    let proc = process(&sb, pid)?;
    Ok(Json(proc.wait().await))
}

pub async fn kill(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    // The body is optional: empty means SIGKILL.
    let req: KillRequest = if body.iter().all(u8::is_ascii_whitespace) {
        KillRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?
    };
    let (rec, sb) = running(&app, &caller, &id).await?;
    let proc = process(&sb, pid)?;
    let signal = req.signal.unwrap_or(libc::SIGKILL);
    if !(1..=64).contains(&signal) {
        return Err(ApiError::invalid(format!("signal must be 1-64, got {signal}")));
    }
    if proc.finished() {
        return Err(ApiError::conflict(format!("process {pid} has already exited")));
    }
    sb.signal(pid, signal).await?;
    app.store.audit(&rec.tenant, Some(&id), "process.kill", &json!({"pid": pid, "signal": signal}))?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn stdin(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    ApiJson(req): ApiJson<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    let proc = process(&sb, pid)?;
    if let Some(why) = proc.stdin_closed_reason() {
        return Err(ApiError::conflict(format!("process {pid} has no open standard input: {why}")));
    }
    if !proc.stdin_open() {
        return Err(ApiError::conflict(format!(
            "process {pid} has no open standard input (it has exited, its stdin was closed, or it was not \
             started with `background: true`)"
        )));
    }
    sb.stdin(pid, req.data.as_bytes(), req.eof).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn logs(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
) -> Result<Response, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    Ok(ndjson(process(&sb, pid)?))
}
