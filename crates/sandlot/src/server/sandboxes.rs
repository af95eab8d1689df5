//! Sandbox lifecycle routes, API keys, audit, and the expiry and death watchers.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{AuditList, CreateKey, CreateSandbox, KeyCreated, Limits, SandboxInfo, SandboxList, SandboxState};
use sandlot_engine::StartSpec;
use sandlot_linux::cgroup::CgroupLimits;
use sandlot_store::{now_ms, SandboxRecord};
use serde::Deserialize;
use serde_json::json;

use super::extract::{no_nul, record, ApiJson, ApiPath, ApiQuery, Caller};
use super::{ApiError, App, AppState};

const MAX_METADATA: usize = 64;
const MAX_ENV: usize = 256;

fn new_id() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    format!("sb_{body}")
}

/// Checks environment names and values (shared by create and exec).
pub fn check_env(env: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if env.len() > MAX_ENV {
        return Err(ApiError::invalid(format!("env: at most {MAX_ENV} variables")));
    }
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(ApiError::invalid(format!("env: invalid variable name {k:?} (no `=`, no NUL, not empty)")));
        }
        no_nul(&format!("env {k}"), v)?;
    }
    Ok(())
}

fn limits(app: &App, req: &CreateSandbox) -> Result<Limits, ApiError> {
    let cfg = &app.cfg;
    let cpu = req.cpu.unwrap_or(cfg.default_cpu);
    let host_cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    if !(cpu.is_finite() && cpu >= 0.01 && cpu <= host_cpus) {
        return Err(ApiError::invalid(format!(
            "cpu must be between 0.01 and {host_cpus} (this host's cores), got {cpu}"
        )));
    }
    let memory_mb = req.memory_mb.unwrap_or(cfg.default_memory_mb);
    if !(16..=1 << 20).contains(&memory_mb) {
        return Err(ApiError::invalid(format!("memory_mb must be between 16 and 1048576, got {memory_mb}")));
    }
    let pids = req.pids.unwrap_or(cfg.default_pids);
    if !(8..=65536).contains(&pids) {
        return Err(ApiError::invalid(format!("pids must be between 8 and 65536, got {pids}")));
    }
    let disk_mb = match (req.disk_mb, app.engine.disk_limits()) {
        (_, false) => None,
        (d, true) => {
            let d = d.unwrap_or(cfg.default_disk_mb);
            let max = cfg.layers_volume_gb << 10;
            if !(16..=max).contains(&d) {
                return Err(ApiError::invalid(format!(
                    "disk_mb must be between 16 and {max} (the layers volume), got {d}"
                )));
            }
            Some(d)
        }
    };
    let timeout_s = req.timeout_s.unwrap_or(cfg.default_timeout_s);
    if timeout_s == 0 || timeout_s > cfg.max_timeout_s {
        return Err(ApiError::invalid(format!(
            "timeout_s must be between 1 and {} (the server's --max-timeout-s), got {timeout_s}",
            cfg.max_timeout_s
        )));
    }
    Ok(Limits { cpu, memory_mb, pids, disk_mb, timeout_s })
}

fn validate(app: &App, req: &CreateSandbox) -> Result<(String, Limits), ApiError> {
    let image = req.image.clone().unwrap_or_else(|| "host".into());
    if !app.engine.has_image(&image) {
        return Err(ApiError::invalid(format!("unknown image {image:?}; available images: host")));
    }
    let limits = limits(app, req)?;
    check_env(&req.env)?;
    if req.metadata.len() > MAX_METADATA {
        return Err(ApiError::invalid(format!("metadata: at most {MAX_METADATA} entries")));
    }
    for (k, v) in &req.metadata {
        if k.is_empty() || k.len() > 256 || v.len() > 4096 {
            return Err(ApiError::invalid("metadata: keys must be 1-256 bytes and values at most 4096 bytes"));
        }
    }
    Ok((image, limits))
}

pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateSandbox>,
) -> Result<impl IntoResponse, ApiError> {
    let (image, limits) = validate(&app, &req)?;
    if app.engine.running_ids().len() >= app.cfg.max_sandboxes {
        return Err(ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            sandlot_api::codes::LIMIT_REACHED,
            format!("this server runs at most {} sandboxes at once; delete one and retry", app.cfg.max_sandboxes),
        ));
    }
    let now = now_ms();
    let id = new_id();
    let mut rec = SandboxRecord {
        info: SandboxInfo {
            id: id.clone(),
            state: SandboxState::Creating,
            reason: None,
            image: image.clone(),
            limits: limits.clone(),
            metadata: req.metadata.clone(),
            created_at_ms: now,
            expires_at_ms: now + limits.timeout_s as i64 * 1000,
        },
        tenant: caller.tenant.clone(),
        env: req.env.clone(),
        slot: 0,
    };
    app.store.insert_sandbox(&rec)?;
    let spec = StartSpec {
        image,
        limits: CgroupLimits { memory_bytes: limits.memory_mb << 20, pids: limits.pids, cpu: limits.cpu },
        preferred_slot: None,
        disk_bytes: limits.disk_mb.unwrap_or(0) << 20,
    };
    let started = std::time::Instant::now();
    match app.engine.start(&id, spec).await {
        Ok(sb) => {
            app.store.set_slot(&id, sb.slot())?;
            app.store.set_state(&id, SandboxState::Running, None)?;
            rec.info.state = SandboxState::Running;
            app.store.audit(
                &caller.tenant,
                Some(&id),
                "sandbox.create",
                &json!({"image": rec.info.image, "limits": limits, "ms": started.elapsed().as_millis() as u64}),
            )?;
            Ok((StatusCode::CREATED, Json(rec.info)))
        }
        Err(e) => {
            let reason = e.to_string();
            let _ = app.engine.destroy(&id).await;
            app.store.set_state(&id, SandboxState::Failed, Some(&reason))?;
            app.store.audit(&caller.tenant, Some(&id), "sandbox.create_failed", &json!({"reason": reason}))?;
            Err(e.into())
        }
    }
}

pub async fn list(State(app): State<AppState>, caller: Caller) -> Result<Json<SandboxList>, ApiError> {
    let sandboxes = app.store.list_sandboxes(&caller.tenant)?.into_iter().map(|r| r.info).collect();
    Ok(Json(SandboxList { sandboxes }))
}

pub async fn get(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    // Deleted sandboxes stay readable, so a caller can learn why one ended (expiry, failure).
    let rec = app.store.get_sandbox_any(&caller.tenant, &id)?;
    rec.map(|r| Json(r.info)).ok_or_else(|| ApiError::not_found(&format!("sandbox {id}")))
}

/// Deletes a sandbox: processes killed, cgroup and layer removed, record kept as `deleted` for audit.
pub async fn remove_sandbox(
    app: &App,
    rec: &SandboxRecord,
    action: &str,
    reason: Option<&str>,
) -> Result<(), ApiError> {
    let id = &rec.info.id;
    app.engine.destroy(id).await?;
    app.store.set_state(id, SandboxState::Deleted, reason)?;
    app.store.audit(&rec.tenant, Some(id), action, &json!({"reason": reason}))?;
    Ok(())
}

pub async fn delete(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let rec = record(&app, &caller, &id)?;
    if rec.info.state == SandboxState::Creating {
        return Err(ApiError::conflict(format!(
            "sandbox {id} is still being created; delete it once its create call has returned"
        )));
    }
    remove_sandbox(&app, &rec, "sandbox.delete", None).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn create_key(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateKey>,
) -> Result<impl IntoResponse, ApiError> {
    if !caller.admin {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            sandlot_api::codes::FORBIDDEN,
            "only an admin key may create keys (see <state-dir>/admin.key)",
        ));
    }
    let t = &req.tenant;
    if t == "admin" {
        return Err(ApiError::invalid("the tenant name `admin` is reserved for the bootstrap admin key"));
    }
    if t.is_empty() || t.len() > 64 || !t.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(ApiError::invalid("tenant must be 1-64 characters of A-Z a-z 0-9 - _ ."));
    }
    let key = app.store.create_key(t, false)?;
    app.store.audit(&caller.tenant, None, "key.create", &json!({"tenant": t}))?;
    Ok((StatusCode::CREATED, Json(KeyCreated { tenant: t.clone(), key })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    sandbox_id: Option<String>,
    limit: Option<u32>,
}

pub async fn audit(
    State(app): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let limit = q.limit.unwrap_or(100).clamp(1, 10_000);
    let tenant = if caller.admin { None } else { Some(caller.tenant.as_str()) };
    let entries = app.store.list_audit(tenant, q.sandbox_id.as_deref(), limit)?;
    Ok(Json(AuditList { entries }))
}

/// Deletes sandboxes whose lifetime has passed.
pub async fn expiry_loop(app: AppState, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Ok(live) = app.store.live_sandboxes() else {
            continue;
        };
        let now = now_ms();
        for rec in live.into_iter().filter(|r| r.info.expires_at_ms <= now && r.info.state == SandboxState::Running) {
            let reason = format!("lifetime of {} s ended", rec.info.limits.timeout_s);
            if let Err(e) = remove_sandbox(&app, &rec, "sandbox.expire", Some(&reason)).await {
                tracing::error!(sandbox = %rec.info.id, "expiry failed: {}", e.message);
            }
        }
    }
}

/// Marks sandboxes whose supervisor died unexpectedly as failed, and frees their host resources.
pub async fn death_loop(app: AppState, mut deaths: tokio::sync::mpsc::UnboundedReceiver<(String, String)>) {
    while let Some((id, why)) = deaths.recv().await {
        tracing::warn!(sandbox = %id, "supervisor ended unexpectedly: {why}");
        let reason = format!("supervisor ended: {why}");
        let _ = app.engine.destroy(&id).await;
        let recs = app.store.live_sandboxes().unwrap_or_default();
        if let Some(rec) = recs.into_iter().find(|r| r.info.id == id) {
            let _ = app.store.set_state(&id, SandboxState::Failed, Some(&reason));
            let _ = app.store.audit(&rec.tenant, Some(&id), "sandbox.failed", &json!({"reason": reason}));
        }
    }
}
