//! File routes. Every operation is performed by the supervisor inside the sandbox, as the requesting
//! sandbox user; this layer validates input, streams bodies and records each operation in the audit log.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::TryStreamExt;
use sandlot_api::{FileList, FileStat, MkdirRequest, MoveRequest, User};
use sandlot_engine::FileStream;
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
    let uid = q.user.uid();
    let (r, action) = match kind {
        Upload::File => {
            let mode = match q.mode.as_deref() {
                None => 0o644,
                Some(m) => {
                    u32::from_str_radix(m.trim_start_matches("0o"), 8).ok().filter(|m| *m <= 0o7777).ok_or_else(
                        || ApiError::invalid(format!("mode must be octal permission bits like 0644, got {m:?}")),
                    )?
                }
            };
            (sb.write_file(&path, uid, mode, max, reader).await, "file.write")
        }
        Upload::Tar => (sb.upload_tar(&path, uid, max, reader).await, "file.untar"),
    };
    let written = match r {
        Ok(w) => w,
        Err(e) => {
            audit(app, &rec.tenant, id, action, json!({"path": path, "user": q.user, "error": e.to_string()}));
            return Err(e.into());
        }
    };
    let detail = json!({"path": path, "user": q.user, "bytes": written.bytes, "entries": written.entries});
    audit(app, &rec.tenant, id, action, detail);
    Ok((StatusCode::CREATED, Json(written)).into_response())
}

pub async fn read(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    send(&app, &caller, &id, &q, Download::File, "file.read", "application/octet-stream").await
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
    let r = sb.list(&path, q.user.uid(), depth, MAX_LIST_ENTRIES).await;
    audit(&app, &rec.tenant, &id, "file.list", json!({"path": path, "user": q.user, "ok": r.is_ok()}));
    Ok(Json(r?))
}

pub async fn stat(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileStat>, ApiError> {
    let (_, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    Ok(Json(sb.stat(&path, q.user.uid()).await?))
}

pub async fn mkdir(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MkdirRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let (rec, sb) = running(&app, &caller, &id).await?;
    let path = sandbox_path(&req.path, req.user)?;
    let r = sb.mkdir(&path, req.user.uid(), req.parents).await;
    audit(&app, &rec.tenant, &id, "file.mkdir", json!({"path": path, "user": req.user, "ok": r.is_ok()}));
    r?;
    Ok((StatusCode::CREATED, Json(sb.stat(&path, req.user.uid()).await?)))
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
    let r = sb.remove(&path, q.user.uid(), recursive).await;
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
    let r = sb.rename(&from, &to, req.user.uid(), req.overwrite).await;
    audit(&app, &rec.tenant, &id, "file.move", json!({"from": from, "to": to, "user": req.user, "ok": r.is_ok()}));
    r?;
    Ok(Json(sb.stat(&to, req.user.uid()).await?))
}

pub async fn download_tar(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    send(&app, &caller, &id, &q, Download::Tar, "file.tar", "application/x-tar").await
}

/// What a download carries.
#[derive(Clone, Copy)]
enum Download {
    /// One file (`GET …/files`).
    File,
    /// A directory as a tar archive (`GET …/files/tar`).
    Tar,
}

/// Streams what the supervisor reads at `q.path` (a file, or a directory as tar) to the client, and
/// audits the read as `action`.
async fn send(
    app: &AppState,
    caller: &Caller,
    id: &str,
    q: &PathQuery,
    kind: Download,
    action: &str,
    content_type: &'static str,
) -> Result<Response, ApiError> {
    let (rec, sb) = running(app, caller, id).await?;
    let path = sandbox_path(&q.path, q.user)?;
    let r = match kind {
        Download::File => sb.read_file(&path, q.user.uid()).await,
        Download::Tar => sb.download_tar(&path, q.user.uid()).await,
    };
    audit(app, &rec.tenant, id, action, json!({"path": path, "user": q.user, "ok": r.is_ok()}));
    Ok(stream_body(r?, content_type))
}
