//! Tenant settings an admin controls: which always-denied network ranges a tenant's sandboxes may reach.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use sandlot_api::{NetworkSpec, TenantNetwork};
use sandlot_netproxy::policy::Policy;
use serde_json::json;
use std::sync::Arc;

use super::extract::{ApiJson, ApiPath, Caller};
use super::{ApiError, App, AppState};

/// Most exemptions one tenant may hold (each is checked on every connection its sandboxes open).
const MAX_EXEMPT: usize = 64;

/// Compiles a sandbox's network spec for `tenant`, with the exemptions an admin gave the tenant.
pub fn policy_for(app: &App, tenant: &str, spec: &NetworkSpec) -> Result<Policy, ApiError> {
    let exempt = app.store.tenant_exemptions(tenant)?.unwrap_or_default();
    app.engine.compile_network(spec, &exempt).map_err(|e| ApiError::invalid(format!("network: {e}")))
}

fn admin_only(caller: &Caller) -> Result<(), ApiError> {
    if caller.admin {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        sandlot_api::codes::FORBIDDEN,
        "only an admin key may read or change a tenant's network exemptions (see <state-dir>/admin.key)",
    ))
}

pub async fn get_network(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(tenant): ApiPath<String>,
) -> Result<Json<TenantNetwork>, ApiError> {
    admin_only(&caller)?;
    let exempt = app.store.tenant_exemptions(&tenant)?.ok_or_else(|| ApiError::not_found("tenant"))?;
    Ok(Json(TenantNetwork { exempt }))
}

/// Replaces a tenant's exemptions; its running sandboxes apply them to new connections at once.
pub async fn set_network(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(req): ApiJson<TenantNetwork>,
) -> Result<Json<TenantNetwork>, ApiError> {
    admin_only(&caller)?;
    if req.exempt.len() > MAX_EXEMPT {
        return Err(ApiError::invalid(format!("exempt: at most {MAX_EXEMPT} ranges")));
    }
    // Validate before storing: a bad entry would make every later policy of the tenant fail to compile.
    app.engine
        .compile_network(&NetworkSpec::default(), &req.exempt)
        .map_err(|e| ApiError::invalid(format!("exempt: {e}")))?;
    if !app.store.set_tenant_exemptions(&tenant, &req.exempt)? {
        return Err(ApiError::not_found("tenant"));
    }
    app.store.audit(&caller.tenant, None, "tenant.network", &json!({"tenant": tenant, "exempt": req.exempt}))?;
    // Every running sandbox is updated even if one fails (it may be ending right now), and even if the
    // client goes away meanwhile (the update runs as a task of its own): a narrowed list must not stay
    // wide on some sandboxes.
    let update = tokio::spawn(apply_to_running(Arc::clone(&app), tenant));
    let failed = update.await.map_err(|e| ApiError::internal(format!("updating sandboxes: {e}")))??;
    if !failed.is_empty() {
        return Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            sandlot_api::codes::INTERNAL,
            format!(
                "the exemptions are stored, but these running sandboxes could not be updated: {}; \
                 they pick the exemptions up when resumed",
                failed.join(", ")
            ),
        ));
    }
    Ok(Json(req))
}

/// Recompiles the policy of each of `tenant`'s running sandboxes with the stored exemptions; returns
/// the ids it could not update.
async fn apply_to_running(app: AppState, tenant: String) -> Result<Vec<String>, ApiError> {
    let mut failed = Vec::new();
    for listed in app.store.list_sandboxes(&tenant)? {
        let id = listed.info.id;
        // Under the sandbox's lock, with its policy re-read: a concurrent PATCH is not undone.
        let _g = super::lifecycle::lock(&app, &id).await;
        let Some(rec) = app.store.get_sandbox(&tenant, &id)? else { continue };
        let Some(running) = app.engine.get(&id) else { continue };
        if running.net().is_none() {
            continue; // no network link (deny): nothing to update until a PATCH gives it one
        }
        let applied = match policy_for(&app, &tenant, &rec.network) {
            Ok(policy) => app.engine.set_network(&id, policy).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.message),
        };
        if let Err(e) = applied {
            tracing::warn!(sandbox = %id, "applying tenant {tenant}'s network exemptions: {e}");
            failed.push(id);
        }
    }
    Ok(failed)
}
