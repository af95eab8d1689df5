//! Exec and process routes: a command's answer as one JSON result, as NDJSON events while it runs, or
//! as its pid when it runs in the background.

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use sandlot_api::{
    ExecEvent, ExecRequest, ExecResult, KillRequest, ProcessList, ProcessStarted, ResizeRequest, StdinRequest, NDJSON,
};
use sandlot_control::{Follow, Started};

use super::app::AppState;
use super::error::ApiError;
use super::extract::{optional_json, ApiJson, ApiPath, ApiQuery, Auth, Leased};
use super::stream::{abandonable_queue, leased, Pace, StreamPolicy};

/// Query of `GET …/processes`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only processes started with this tag.
    tag: Option<String>,
}

/// Query of `GET …/processes/{pid}/logs`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsQuery {
    /// Follow the process until it exits (the default), or end with what it has written so far.
    #[serde(default = "yes")]
    follow: bool,
}

fn yes() -> bool {
    true
}

fn wants_ndjson(headers: &HeaderMap) -> bool {
    headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains(NDJSON))
}

pub async fn exec(
    State(app): State<AppState>,
    Leased(caller, lease): Leased,
    ApiPath(id): ApiPath<String>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ExecRequest>,
) -> Result<Response, ApiError> {
    Ok(match app.control.exec(&caller, &id, req, wants_ndjson(&headers)).await? {
        Started::Background { pid, .. } => (StatusCode::ACCEPTED, Json(ProcessStarted { pid })).into_response(),
        Started::Streaming(proc) => leased(&app, lease, ndjson(proc.follow(), app.streams)),
        Started::Finished(r) => Json(r).into_response(),
    })
}

/// Streams a process's events, from its first, as NDJSON until it exits or the client goes; a client
/// that takes no line within the stream policy's bound has its queued lines dropped and its stream
/// cut, so it keeps the process's output reservation only that long.
fn ndjson(follow: Follow, policy: StreamPolicy) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, Infallible>>(64);
    let (lines, queue) = abandonable_queue(rx);
    tokio::spawn(async move {
        if stream_lines(follow, &tx, Pace::new(policy)).await == Delivery::Stalled {
            queue.abandon();
        }
    });
    ([(header::CONTENT_TYPE, NDJSON)], Body::from_stream(lines)).into_response()
}

fn line(ev: &ExecEvent) -> Bytes {
    let mut v = serde_json::to_vec(ev).expect("events serialise");
    v.push(b'\n');
    Bytes::from(v)
}

/// How an NDJSON stream ended.
#[derive(PartialEq)]
enum Delivery {
    /// Every event was sent, or the client went.
    Done,
    /// The client took no line within the bound.
    Stalled,
}

/// The follower reads at this client's pace.
async fn stream_lines(
    mut follow: Follow,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, Infallible>>,
    mut pace: Pace,
) -> Delivery {
    let proc = follow.process();
    let mut pending: Option<Bytes> = None;
    loop {
        // While a line waits for room only its send, or an end, can fire: its bound is not restarted.
        // (select! evaluates a disabled branch's expression too: the send is made inside its future.)
        tokio::select! {
            sent = async { pace.send(tx.send(Ok(pending.clone().expect("pending")))).await }, if pending.is_some() => match sent {
                Ok(Ok(())) => pending = None,
                Ok(Err(_)) => return Delivery::Done,
                Err(_) => return Delivery::Stalled,
            },
            ev = follow.next(), if pending.is_none() => match ev {
                Some(ev) => pending = Some(line(&ev)),
                None => return Delivery::Done,
            },
            _ = tx.closed() => return Delivery::Done,
            _ = proc.sandbox_ended(), if !pace.knows_sandbox_ended() => pace.sandbox_ended(),
        }
    }
}

pub async fn list(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<ProcessList>, ApiError> {
    let mut list = app.control.processes(&caller, &id, false).await?;
    if let Some(tag) = q.tag {
        list.processes.retain(|p| p.tag.as_deref() == Some(tag.as_str()));
    }
    Ok(Json(list))
}

pub async fn resize(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    ApiJson(req): ApiJson<ResizeRequest>,
) -> Result<StatusCode, ApiError> {
    app.control.resize(&caller, &id, pid, req.rows, req.cols).await?;
    Ok(StatusCode::NO_CONTENT)
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
    Leased(caller, lease): Leased,
    ApiPath((id, pid)): ApiPath<(String, u64)>,
    ApiQuery(q): ApiQuery<LogsQuery>,
) -> Result<Response, ApiError> {
    let follow = app.control.process(&caller, &id, pid).await?.follow();
    Ok(leased(&app, lease, ndjson(if q.follow { follow } else { follow.up_to_now() }, app.streams)))
}
