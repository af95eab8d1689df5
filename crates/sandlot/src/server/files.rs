//! File routes. Every operation is performed by the supervisor inside the sandbox, as the requesting
//! sandbox user; this layer validates input, streams bodies and records each operation in the audit log.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::TryStreamExt;
use sandlot_api::{FileList, FileStat, MkdirRequest, MoveRequest, User, WriteResult};
use sandlot_engine::FileStream;
use sandlot_protocol::FileOp;
use serde::Deserialize;
use serde_json::json;

use super::extract::{no_nul, running, ApiJson, ApiPath, ApiQuery, Caller};
use super::{ApiError, AppState};

const MAX_PATH: usize = 4096;
const MAX_LIST_ENTRIES: u32 = 10_000;
const MAX_LIST_DEPTH: u32 = 16;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathQuery {
    path: String,
    #[serde(default)]
    user: User,
    mode: Option<String>,
    recursive: Option<bool>,
    depth: Option<u32>,
}

/// Resolves a request path: absolute as given, relative to the user's home otherwise.
fn sandbox_path(p: &str, user: User) -> Result<String, ApiError> {
    no_nul("path", p)?;
    if p.is_empty() {
        return Err(ApiError::invalid("path is empty"));
    }
    if p.len() > MAX_PATH {
        return Err(ApiError::invalid(format!("path longer than {MAX_PATH} bytes")));
    }
    Ok(if p.starts_with('/') { p.to_string() } else { format!("{}/{p}", user.home()) })
}

fn audit(app: &AppState, tenant: &str, id: &str, action: &str, detail: serde_json::Value) {
    let _ = app.store.audit(tenant, Some(id), action, &detail);
}

fn stream_body(mut s: FileStream, content_type: &'static str) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    tokio::spawn(async move {
        loop {
            let item = match s.next().await {
                Ok(Some(b)) => Ok(b),
                Ok(None) => return,
                // Headers are gone already: abort the body so the client sees a broken transfer, not a
                // short file.
                Err(e) => Err(std::io::Error::other(e.to_string())),
            };
            let stop = item.is_err();
            if tx.send(item).await.is_err() || stop {
                return;
            }
        }
    });
    ([(header::CONTENT_TYPE, content_type)], super::channel_body(rx)).into_response()
}

fn body_reader(body: Body) -> impl tokio::io::AsyncRead + Unpin {
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    tokio_util::io::StreamReader::new(stream)
}

/// Reads and discards the rest of a failed upload's body (bounded in time), so the client, still
/// sending, gets to read the error instead of a broken pipe.
async fn drain(reader: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(30), tokio::io::copy(reader, &mut tokio::io::sink())).await;
}

fn check_length(headers: &HeaderMap, max: u64) -> Result<(), ApiError> {
    let len = headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if len.is_some_and(|l| l > max) {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            sandlot_api::codes::TOO_LARGE,
            format!("upload is larger than this server's limit of {max} bytes (--max-upload-mb)"),
        ));
    }
    Ok(())
}

/// What an upload carries.
#[derive(Clone, Copy)]
enum Upload {
    /// One file (`PUT …/files`).
    File,
    /// A tar archive unpacked into a directory (`PUT …/files/tar`).
    Tar,
}

pub async fn write(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    upload(&app, &caller, &id, q, &headers, body, Upload::File).await
}

pub async fn upload_tar(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    upload(&app, &caller, &id, q, &headers, body, Upload::Tar).await
}

/// Any refusal, early or mid-transfer, drains the rest of the body first: a client still sending then
/// reads the error instead of a broken pipe.
async fn upload(
    app: &AppState,
    caller: &Caller,
    id: &str,
    q: PathQuery,
    headers: &HeaderMap,
    body: Body,
    kind: Upload,
) -> Result<Response, ApiError> {
    let mut reader = body_reader(body);
    let r = upload_inner(app, caller, id, q, headers, &mut reader, kind).await;
    if r.is_err() {
        drain(&mut reader).await;
    }
    r
}

async fn upload_inner(
    app: &AppState,
    caller: &Caller,
    id: &str,
    q: PathQuery,
    headers: &HeaderMap,
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    kind: Upload,
) -> Result<Response, ApiError> {
    let (rec, sb) = running(app, caller, id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let max = app.cfg.max_upload_mb << 20;
    check_length(headers, max)?;
    let (op, action) = match kind {
        Upload::File => {
            let mode = match q.mode.as_deref() {
                None => 0o644,
                Some(m) => {
                    u32::from_str_radix(m.trim_start_matches("0o"), 8).ok().filter(|m| *m <= 0o7777).ok_or_else(
                        || ApiError::invalid(format!("mode must be octal permission bits like 0644, got {m:?}")),
                    )?
                }
            };
            (FileOp::Write { path: path.clone(), mode, max_bytes: max }, "file.write")
        }
        Upload::Tar => (FileOp::Untar { path: path.clone(), max_bytes: max }, "file.untar"),
    };
    let v = match sb.upload(q.user.uid(), op, reader).await {
        Ok(v) => v,
        Err(e) => {
            audit(app, &rec.tenant, id, action, json!({"path": path, "user": q.user, "error": e.to_string()}));
            return Err(e.into());
        }
    };
    let bytes = v["bytes"].as_u64().unwrap_or(0);
    let entries = v["entries"].as_u64();
    audit(app, &rec.tenant, id, action, json!({"path": path, "user": q.user, "bytes": bytes, "entries": entries}));
    Ok((StatusCode::CREATED, Json(WriteResult { path, bytes, entries })).into_response())
}

pub async fn read(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    send(&app, &caller, &id, &q, |path| FileOp::Read { path }, "file.read", "application/octet-stream").await
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileList>, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let depth = q.depth.unwrap_or(1);
    if !(1..=MAX_LIST_DEPTH).contains(&depth) {
        return Err(ApiError::invalid(format!("depth must be between 1 and {MAX_LIST_DEPTH}, got {depth}")));
    }
    let v = sb.file_op(q.user.uid(), FileOp::List { path: path.clone(), depth, max_entries: MAX_LIST_ENTRIES }).await;
    audit(&app, &rec.tenant, &id, "file.list", json!({"path": path, "user": q.user, "ok": v.is_ok()}));
    let list: FileList =
        serde_json::from_value(v?).map_err(|e| ApiError::internal(format!("supervisor answer: {e}")))?;
    Ok(Json(list))
}

pub async fn stat(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileStat>, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let v = sb.file_op(q.user.uid(), FileOp::Stat { path }).await?;
    Ok(Json(serde_json::from_value(v).map_err(|e| ApiError::internal(format!("supervisor answer: {e}")))?))
}

pub async fn mkdir(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MkdirRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&req.path, req.user)?;
    let r = sb.file_op(req.user.uid(), FileOp::Mkdir { path: path.clone(), parents: req.parents }).await;
    audit(&app, &rec.tenant, &id, "file.mkdir", json!({"path": path, "user": req.user, "ok": r.is_ok()}));
    r?;
    let v = sb.file_op(req.user.uid(), FileOp::Stat { path }).await?;
    let st: FileStat = serde_json::from_value(v).map_err(|e| ApiError::internal(format!("supervisor answer: {e}")))?;
    Ok((StatusCode::CREATED, Json(st)))
}

pub async fn remove(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let recursive = q.recursive.unwrap_or(false);
    let r = sb.file_op(q.user.uid(), FileOp::Remove { path: path.clone(), recursive }).await;
    audit(
        &app,
        &rec.tenant,
        &id,
        "file.remove",
        json!({"path": path, "user": q.user, "recursive": recursive, "ok": r.is_ok()}),
    );
    r?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MoveRequest>,
) -> Result<Json<FileStat>, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let from = sandbox_path(&req.from, req.user)?;
    let to = sandbox_path(&req.to, req.user)?;
    let r =
        sb.file_op(req.user.uid(), FileOp::Move { from: from.clone(), to: to.clone(), overwrite: req.overwrite }).await;
    audit(&app, &rec.tenant, &id, "file.move", json!({"from": from, "to": to, "user": req.user, "ok": r.is_ok()}));
    r?;
    let v = sb.file_op(req.user.uid(), FileOp::Stat { path: to }).await?;
    Ok(Json(serde_json::from_value(v).map_err(|e| ApiError::internal(format!("supervisor answer: {e}")))?))
}

pub async fn download_tar(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    send(&app, &caller, &id, &q, |path| FileOp::Tar { path }, "file.tar", "application/x-tar").await
}

/// Streams what the supervisor reads at `q.path` (a file, or a directory as tar) to the client, and
/// audits the read as `action`.
async fn send(
    app: &AppState,
    caller: &Caller,
    id: &str,
    q: &PathQuery,
    op: impl FnOnce(String) -> FileOp,
    action: &str,
    content_type: &'static str,
) -> Result<Response, ApiError> {
    let (rec, sb) = running(app, caller, id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let r = sb.download(q.user.uid(), op(path.clone())).await;
    audit(app, &rec.tenant, id, action, json!({"path": path, "user": q.user, "ok": r.is_ok()}));
    Ok(stream_body(r?, content_type))
}
