//! Exec and process routes: a command's answer as one JSON result, as NDJSON events while it runs, or
//! as its pid when it runs in the background.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use sandlot_api::{ExecEvent, ExecRequest, ExecResult, KillRequest, ProcessList, ProcessStarted, StdinRequest, NDJSON};
use sandlot_control::{Process, Started};

use super::app::{channel_body, AppState};
use super::error::ApiError;
use super::extract::{optional_json, ApiJson, ApiPath, Auth};

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(NDJSON))
}

pub async fn exec(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecRequest>,
) -> Result<Response, ApiError> {
    Ok(match app.control.exec(&caller, &id, req, wants_ndjson(&headers)).await? {
        Started::Background { pid } => (StatusCode::ACCEPTED, Json(ProcessStarted { pid })).into_response(),
        Started::Streaming(proc) => ndjson(proc),
        Started::Finished(r) => Json(r).into_response(),
    })
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
    ([(header::CONTENT_TYPE, NDJSON)], channel_body(rx)).into_response()
}

pub async fn list(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ProcessList>, ApiError> {
    Ok(Json(app.control.processes(&caller, &id).await?))
}

pub async fn wait(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
) -> Result<Json<ExecResult>, ApiError> {
    let proc = app.control.process(&caller, &id, pid).await?;
    Ok(Json(proc.wait().await))
}

pub async fn kill(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    body: Bytes,
) -> Result<StatusCode, ApiError> {
    // The body is optional: empty means SIGKILL.
    let req: KillRequest = optional_json(&body)?;
    app.control.kill(&caller, &id, pid, req.signal).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn stdin(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    ApiJson(req): ApiJson<StdinRequest>,
) -> Result<StatusCode, ApiError> {
    app.control.stdin(&caller, &id, pid, req.data.as_bytes(), req.eof).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn logs(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
) -> Result<Response, ApiError> {
    Ok(ndjson(app.control.process(&caller, &id, pid).await?))
}
