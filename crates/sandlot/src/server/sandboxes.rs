//! Sandbox routes: create, list, read, delete, the transitions, lifetime and network policy.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{CreateSandbox, NetworkSpec, SandboxInfo, SandboxList, SetTimeout};

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, Auth};

pub async fn create(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiJson(req): ApiJson<CreateSandbox>,
) -> Result<impl IntoResponse, ApiError> {
    let created = app.control.create(&caller, req).await?;
    let status = if created.existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(created.info)))
}

pub async fn list(State(app): State<AppState>, Auth(caller): Auth) -> Result<Json<SandboxList>, ApiError> {
    Ok(Json(app.control.list(&caller)?))
}

pub async fn get(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.get(&caller, &id)?))
}

pub async fn delete(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.control.delete(&caller, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn stop(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.stop_sandbox(&caller, &id).await?))
}

pub async fn resume(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.resume_sandbox(&caller, &id).await?))
}

pub async fn pause(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.pause_sandbox(&caller, &id).await?))
}

pub async fn set_timeout(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<SetTimeout>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.set_timeout(&caller, &id, req.timeout_s)?))
}

/// `PATCH /v1/sandboxes/{id}/network`: a new policy, effective for new connections and lookups.
pub async fn set_network(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiJson(spec): ApiJson<NetworkSpec>,
) -> Result<Json<SandboxInfo>, ApiError> {
    Ok(Json(app.control.set_network(&caller, &id, spec).await?))
}
