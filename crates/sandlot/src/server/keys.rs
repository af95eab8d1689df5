//! API key routes (admin only): create (optionally expiring), list, revoke.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{CreateKey, KeyList};
use serde::Deserialize;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth};

pub async fn create(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiJson(req): ApiJson<CreateKey>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(app.control.create_key(&caller, &req)?)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    tenant: Option<String>,
}

pub async fn list(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<KeyList>, ApiError> {
    Ok(Json(app.control.list_keys(&caller, q.tenant.as_deref())?))
}

pub async fn revoke(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.control.revoke_key(&caller, &id)?;
    Ok(StatusCode::NO_CONTENT)
}
