//! File routes: bodies streamed in and out; the control layer validates, audits and has the
//! supervisor inside the sandbox do each operation as the requesting sandbox user.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::TryStreamExt;
use sandlot_api::{FileList, FileStat, MkdirRequest, MoveRequest, User};
use sandlot_control::{Caller, FileStream, MkdirMode, SandboxPath, Upload};
use serde::Deserialize;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth, Leased};
use super::stream::{abandonable_queue, channel_body, leased, Pace};

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

pub(crate) fn stream_body(mut s: FileStream, content_type: &'static str) -> Response {
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
    ([(header::CONTENT_TYPE, content_type)], channel_body(rx)).into_response()
}

pub(crate) fn body_reader(body: Body) -> impl tokio::io::AsyncRead + Unpin {
    let stream = body.into_data_stream().map_err(std::io::Error::other);
    tokio_util::io::StreamReader::new(stream)
}

/// Reads and discards the rest of a failed upload's body (bounded in time), so the client, still
/// sending, gets to read the error instead of a broken pipe.
pub(crate) async fn drain(reader: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(30), tokio::io::copy(reader, &mut tokio::io::sink())).await;
}

/// `e`, once the request's body is drained ([`drain`]): for a refusal before a byte of an upload
/// is read, so a client still sending reads the error instead of a broken pipe.
pub(crate) async fn refused(body: Body, e: impl Into<ApiError>) -> ApiError {
    drain(&mut body_reader(body)).await;
    e.into()
}

pub async fn write(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    upload(&app, &caller, &id, q, &headers, body, false).await
}

pub async fn upload_tar(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    upload(&app, &caller, &id, q, &headers, body, true).await
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
    tar: bool,
) -> Result<Response, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    let mut reader = body_reader(body);
    let kind = if tar { Upload::Tar } else { Upload::File { mode: q.mode.clone(), opts: Default::default() } };
    let to = SandboxPath { path: &q.path, user: q.user };
    let r = app.control.upload(caller, id, to, kind, declared, &mut reader).await;
    match r {
        Ok(written) => Ok((StatusCode::CREATED, Json(written)).into_response()),
        Err(e) => {
            drain(&mut reader).await;
            Err(e.into())
        }
    }
}

pub async fn read(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    let stream = app.control.read_file(&caller, &id, &q.path, q.user).await?;
    Ok(stream_body(stream, "application/octet-stream"))
}

pub async fn download_tar(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Response, ApiError> {
    let stream = app.control.download_tar(&caller, &id, &q.path, q.user).await?;
    Ok(stream_body(stream, "application/x-tar"))
}

pub async fn list(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileList>, ApiError> {
    Ok(Json(app.control.list_files(&caller, &id, &q.path, q.user, q.depth).await?))
}

/// Query of `GET …/files/watch`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WatchQuery {
    path: String,
    #[serde(default)]
    user: User,
    #[serde(default)]
    recursive: bool,
}

/// Streams a directory's changes as NDJSON lines until the client goes away (which stops the watch
/// in the sandbox), the directory is removed, or the client takes no line within the stream policy's
/// bound while events wait.
pub async fn watch(
    State(app): State<AppState>,
    Leased(caller, lease): Leased,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<WatchQuery>,
) -> Result<Response, ApiError> {
    let mut stream = app.control.watch(&caller, &id, &q.path, q.recursive, q.user).await?;
    // Few lines wait here: the events wait in the watch's queue, where they are charged.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(8);
    let (lines, queue) = abandonable_queue(rx);
    let pace = Pace::new(app.streams);
    tokio::spawn(async move {
        loop {
            // A client that leaves is noticed even while nothing changes, so its watch (one of the
            // sandbox's few) is not held for nobody.
            let ev = tokio::select! {
                ev = stream.next() => ev,
                () = tx.closed() => return,
            };
            let Some(ev) = ev else { return };
            let mut line = serde_json::to_vec(&ev).expect("events serialise");
            line.push(b'\n');
            match pace.send(tx.send(Ok(Bytes::from(line)))).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return,
                // A client that takes nothing while events wait: its lines and its watch go (the
                // watch's queue is charged to the tenant and the daemon while nobody reads it).
                Err(_) => return queue.abandon(),
            }
        }
    });
    let resp = ([(header::CONTENT_TYPE, sandlot_api::NDJSON)], Body::from_stream(lines)).into_response();
    Ok(leased(&app, lease, resp))
}

pub async fn stat(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<Json<FileStat>, ApiError> {
    Ok(Json(app.control.stat(&caller, &id, &q.path, q.user).await?))
}

pub async fn mkdir(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MkdirRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let st = app
        .control
        .mkdir(&caller, &id, &req.path, req.user, if req.parents { MkdirMode::Parents } else { MkdirMode::Single })
        .await?;
    Ok((StatusCode::CREATED, Json(st)))
}

pub async fn remove(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> Result<StatusCode, ApiError> {
    app.control.remove_file(&caller, &id, &q.path, q.user, q.recursive.unwrap_or(false)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn rename(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MoveRequest>,
) -> Result<Json<FileStat>, ApiError> {
    Ok(Json(app.control.move_file(&caller, &id, &req.from, &req.to, req.user, req.overwrite).await?))
}
