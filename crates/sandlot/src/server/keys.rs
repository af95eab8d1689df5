//! API keys (admin only): create (optionally expiring), list, revoke.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{CreateKey, KeyCreated, KeyList};
use sandlot_store::now_ms;
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiJson, ApiPath, ApiQuery, Caller};
use super::{ApiError, AppState};

/// Longest key lifetime that may be asked for: ten years (a bound, so the arithmetic cannot overflow).
const MAX_KEY_LIFETIME_S: u64 = 10 * 365 * 86_400;

fn admin_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.admin {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        sandlot_api::codes::FORBIDDEN,
        format!("only an admin key may {what} (see <state-dir>/admin.key)"),
    ))
}

/// When a key asked for with `req` stops working.
fn expiry(req: &CreateKey) -> Result<Option<i64>, ApiError> {
    let now = now_ms();
    match (req.expires_in_s, req.expires_at_ms) {
        (Some(_), Some(_)) => Err(ApiError::invalid("give either expires_in_s or expires_at_ms, not both")),
        (Some(s), None) if s == 0 || s > MAX_KEY_LIFETIME_S => Err(ApiError::invalid(format!(
            "expires_in_s must be between 1 and {MAX_KEY_LIFETIME_S} (ten years), got {s}"
        ))),
        (Some(s), None) => Ok(Some(now + s as i64 * 1000)),
        (None, Some(at)) if at <= now || at > now + MAX_KEY_LIFETIME_S as i64 * 1000 => Err(ApiError::invalid(
            format!("expires_at_ms must be in the future and within ten years (it is now {now}), got {at}"),
        )),
        (None, at) => Ok(at),
    }
}

pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateKey>,
) -> Result<impl IntoResponse, ApiError> {
    admin_only(&caller, "create keys")?;
    let t = &req.tenant;
    if t == "admin" {
        return Err(ApiError::invalid("the tenant name `admin` is reserved for the bootstrap admin key"));
    }
    if t.is_empty() || t.len() > 64 || !t.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(ApiError::invalid("tenant must be 1-64 characters of A-Z a-z 0-9 - _ ."));
    }
    let expires_at_ms = expiry(&req)?;
    let (key, id) = app.store.create_key_expiring(t, false, expires_at_ms)?;
    app.store.audit(
        &caller.tenant,
        None,
        "key.create",
        &json!({"tenant": t, "id": id, "expires_at_ms": expires_at_ms}),
    )?;
    Ok((StatusCode::CREATED, Json(KeyCreated { tenant: t.clone(), key, id, expires_at_ms })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    tenant: Option<String>,
}

pub async fn list(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<KeyList>, ApiError> {
    admin_only(&caller, "list keys")?;
    Ok(Json(KeyList { keys: app.store.list_keys(q.tenant.as_deref())? }))
}

pub async fn revoke(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    admin_only(&caller, "revoke keys")?;
    let Some(key) = app.store.list_keys(None)?.into_iter().find(|k| k.id == id) else {
        return Err(ApiError::not_found(&format!("key {id} (see GET /v1/keys for the ids)")));
    };
    if key.admin {
        return Err(ApiError::conflict(format!(
            "key {id} is the bootstrap admin key: it cannot be revoked, or no admin could act; keep \
             <state-dir>/admin.key secret instead"
        )));
    }
    app.store.revoke_key(&id)?;
    app.store.audit(&caller.tenant, None, "key.revoke", &json!({"id": id, "tenant": key.tenant}))?;
    Ok(StatusCode::NO_CONTENT)
}
