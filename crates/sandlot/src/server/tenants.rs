//! Tenant settings an admin controls (which always-denied network ranges a tenant's sandboxes may
//! reach), and the audit log.

use axum::extract::State;
use axum::Json;
use sandlot_api::{AuditList, TenantNetwork, TenantUsage};
use serde::Deserialize;

use super::app::AppState;
use super::error::ApiError;
use super::extract::{ApiJson, ApiPath, ApiQuery, Auth};

pub async fn get_network(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(tenant): ApiPath<String>,
) -> Result<Json<TenantNetwork>, ApiError> {
    Ok(Json(app.control.tenant_network(&caller, &tenant)?))
}

/// Replaces a tenant's exemptions; its running sandboxes apply them to new connections at once.
pub async fn set_network(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(req): ApiJson<TenantNetwork>,
) -> Result<Json<TenantNetwork>, ApiError> {
    Ok(Json(app.control.set_tenant_network(&caller, &tenant, req).await?))
}

/// What the caller's tenant holds: sandboxes, snapshots, images and their bytes.
pub async fn usage(State(app): State<AppState>, Auth(caller): Auth) -> Result<Json<TenantUsage>, ApiError> {
    Ok(Json(app.control.usage(&caller, None)?))
}

/// What `tenant` holds (an admin's key, or the tenant's own).
pub async fn tenant_usage(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiPath(tenant): ApiPath<String>,
) -> Result<Json<TenantUsage>, ApiError> {
    Ok(Json(app.control.usage(&caller, Some(&tenant))?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    sandbox_id: Option<String>,
    limit: Option<u32>,
}

pub async fn audit(
    State(app): State<AppState>,
    Auth(caller): Auth,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    Ok(Json(app.control.audit_log(&caller, q.sandbox_id.as_deref(), q.limit)?))
}
