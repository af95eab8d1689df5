//! Lifecycle events and webhooks.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{CreateWebhook, DeliveryList, EventList, Webhook, WebhookList};
use sandlot_control::events::EventQuery;
use serde::Deserialize;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth};

/// Query of `GET /v1/events`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    since: Option<i64>,
    limit: Option<u32>,
    sandbox_id: Option<String>,
    kind: Option<String>,
    tenant: Option<String>,
    wait_s: Option<u64>,
}

pub async fn list(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<EventList>, ApiError> {
    let q = EventQuery {
        since: q.since,
        limit: q.limit,
        sandbox_id: q.sandbox_id,
        kind: q.kind,
        tenant: q.tenant,
        wait_s: q.wait_s,
    };
    Ok(Json(app.control.events(&caller, q).await?))
}

pub async fn create_webhook(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiJson(req): ApiJson<CreateWebhook>,
) -> Result<impl IntoResponse, ApiError> {
    Ok((StatusCode::CREATED, Json(app.control.create_webhook(&caller, req)?)))
}

pub async fn list_webhooks(State(app): State<AppState>, Auth(caller): Auth) -> Result<Json<WebhookList>, ApiError> {
    Ok(Json(app.control.list_webhooks(&caller)?))
}

pub async fn get_webhook(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Webhook>, ApiError> {
    Ok(Json(app.control.get_webhook(&caller, &id)?))
}

pub async fn delete_webhook(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    app.control.delete_webhook(&caller, &id)?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliveriesQuery {
    limit: Option<u32>,
}

pub async fn deliveries(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<DeliveriesQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    Ok(Json(app.control.webhook_deliveries(&caller, &id, q.limit)?))
}
