//! Snapshot and fork routes.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{CreateSnapshot, ForkRequest, ForkResult, SnapshotList};

use super::app::AppState;
use super::error::ApiError;
use super::extract::{optional_json, ApiJson, ApiPath, Auth};

pub async fn snapshot(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let req: CreateSnapshot = optional_json(&body)?;
    let snap = app.control.snapshot(&caller, &id, req.name).await?;
    Ok((StatusCode::CREATED, Json(snap)))
}

pub async fn list(State(app): State<AppState>, Auth(caller): Auth) -> Result<Json<SnapshotList>, ApiError> {
    Ok(Json(app.control.list_snapshots(&caller)?))
}

pub async fn delete(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.control.delete_snapshot(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn fork(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<ForkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let sandboxes = app.control.fork(&caller, &id, req.count).await?;
    Ok((StatusCode::CREATED, Json(ForkResult { sandboxes })))
}
