//! Image routes: pull (progress as NDJSON when asked for), import (the archive as the body), list,
//! inspect, delete.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures_util::TryStreamExt;
use sandlot_api::{ErrorDetail, ImageInfo, ImageList, PullEvent, PullImage, NDJSON};
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use sandlot_control::{UPLOAD_DEADLINE, UPLOAD_IDLE};

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth, Leased};
use super::stream::{channel_body, leased};

pub(super) fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(NDJSON))
}

fn line(ev: &PullEvent) -> Result<Bytes, Infallible> {
    let mut v = serde_json::to_vec(ev).expect("events serialise");
    v.push(b'\n');
    Ok(Bytes::from(v))
}

fn error_event(e: sandlot_control::Error) -> PullEvent {
    PullEvent::Error {
        error: ErrorDetail { code: e.code().into(), message: e.message.clone(), retryable: e.retryable() },
    }
}

/// Runs `work` (a pull or an import) in a task of its own, so a client that goes away does not cut
/// the work short; with NDJSON, its progress goes to the client as it comes, at the client's pace
/// (progress lines a slow client has no room for are dropped; the last line never is).
async fn stream_or_wait<F>(
    ndjson: bool,
    work: impl FnOnce(tokio::sync::mpsc::UnboundedSender<PullEvent>) -> F,
) -> Result<Response, ApiError>
where
    F: std::future::Future<Output = sandlot_control::Result<Vec<ImageInfo>>> + Send + 'static,
{
    let (events_tx, mut events_rx) = tokio::sync::mpsc::unbounded_channel();
    let task = tokio::spawn(work(events_tx));
    if !ndjson {
        drop(events_rx);
        let mut images = task.await.map_err(|e| ApiError::from(sandlot_control::Error::internal(e.to_string())))??;
        return Ok(match images.len() {
            1 => Json(images.remove(0)).into_response(),
            _ => Json(ImageList { images }).into_response(),
        });
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(64);
    tokio::spawn(async move {
        while let Some(ev) = events_rx.recv().await {
            let _ = tx.try_send(line(&ev));
        }
        let last = match task.await {
            Ok(Ok(images)) => images.into_iter().map(|i| PullEvent::Done { image: Box::new(i) }).collect(),
            Ok(Err(e)) => vec![error_event(e)],
            Err(e) => vec![error_event(sandlot_control::Error::internal(e.to_string()))],
        };
        for ev in last {
            if tx.send(line(&ev)).await.is_err() {
                return;
            }
        }
    });
    Ok(([(header::CONTENT_TYPE, NDJSON)], channel_body(rx)).into_response())
}

pub async fn pull(
    State(app): State<AppState>,
    Leased(caller, lease): Leased,
    headers: HeaderMap,
    ApiJson(req): ApiJson<PullImage>,
) -> Result<Response, ApiError> {
    // What can be refused before anything is fetched is an error status, not a line of a stream.
    app.control.check_pull(&caller, &req)?;
    let control = std::sync::Arc::clone(&app.control);
    let ndjson = wants_ndjson(&headers);
    let resp =
        stream_or_wait(
            ndjson,
            move |events| async move { control.pull_image(&caller, req, events).await.map(|i| vec![i]) },
        )
        .await?;
    Ok(lease_stream(&app, lease, ndjson, resp))
}

/// A progress stream lasts no longer than its key; a plain answer is sent whole when the work is done.
fn lease_stream(app: &AppState, lease: sandlot_control::KeyLease, ndjson: bool, resp: Response) -> Response {
    if ndjson {
        leased(app, lease, resp)
    } else {
        resp
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    name: Option<String>,
    #[serde(default)]
    public: bool,
}

pub async fn import(
    State(app): State<AppState>,
    Leased(caller, lease): Leased,
    ApiQuery(q): ApiQuery<ImportQuery>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // Admitted (the tenant's turn, its quota, the server's spool budget) before a byte is read.
    let mut upload = match app.control.begin_import(&caller, q.name.as_deref(), q.public).await {
        Ok(u) => u,
        Err(e) => return Err(super::files::refused(body, e).await),
    };
    let spool = spool(&app, body, &mut upload).await?;
    let control = std::sync::Arc::clone(&app.control);
    let ndjson = wants_ndjson(&headers);
    let resp = stream_or_wait(ndjson, move |events| async move {
        control.import_image(&caller, upload, spool, q.name, q.public, events).await
    })
    .await?;
    Ok(lease_stream(&app, lease, ndjson, resp))
}

/// Writes the request body to an unlinked file in the state directory (the archive may be read in any
/// order, and memory is no place for gigabytes), each chunk charged to `upload` before it is written.
/// A body that stalls for [`UPLOAD_IDLE`] or is still arriving after [`UPLOAD_DEADLINE`] is cut off.
pub(super) async fn spool(
    app: &AppState,
    body: Body,
    upload: &mut sandlot_control::ImageUpload,
) -> Result<std::fs::File, ApiError> {
    let file = tempfile::tempfile_in(&app.spool_dir)
        .map_err(|e| sandlot_control::Error::internal(format!("spooling the upload: {e}")))?;
    let mut out =
        tokio::fs::File::from_std(file.try_clone().map_err(|e| sandlot_control::Error::internal(e.to_string()))?);
    let mut stream = body.into_data_stream();
    let deadline = tokio::time::Instant::now() + UPLOAD_DEADLINE;
    loop {
        let next = tokio::time::timeout(UPLOAD_IDLE, tokio::time::timeout_at(deadline, stream.try_next()));
        let chunk = match next.await {
            Err(_) => {
                return Err(ApiError::invalid(format!(
                    "the upload sent nothing for {} s after {} bytes; send the body without pauses",
                    UPLOAD_IDLE.as_secs(),
                    upload.written()
                )))
            }
            Ok(Err(_)) => {
                return Err(ApiError::invalid(format!(
                    "the upload took longer than {} s; send a smaller body or a faster connection",
                    UPLOAD_DEADLINE.as_secs()
                )))
            }
            Ok(Ok(chunk)) => chunk.map_err(|e| ApiError::invalid(format!("reading the upload: {e}")))?,
        };
        let Some(chunk) = chunk else { break };
        upload.take(chunk.len() as u64)?;
        out.write_all(&chunk)
            .await
            .map_err(|e| sandlot_control::Error::internal(format!("spooling the upload: {e}")))?;
    }
    out.flush().await.map_err(|e| sandlot_control::Error::internal(e.to_string()))?;
    let mut file = file;
    std::io::Seek::rewind(&mut file).map_err(|e| sandlot_control::Error::internal(e.to_string()))?;
    Ok(file)
}

pub async fn list(State(app): State<AppState>, Auth(caller): Auth) -> Result<Json<ImageList>, ApiError> {
    Ok(Json(app.control.list_images(&caller)?))
}

pub async fn get(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<ImageInfo>, ApiError> {
    Ok(Json(app.control.get_image(&caller, &name)?))
}

pub async fn delete(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(name): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.control.delete_image(&caller, &name).await?;
    Ok(StatusCode::NO_CONTENT)
}
