//! Lifecycle transitions (stop, resume, pause, timeout), snapshots and forks.
//!
//! Every transition of one sandbox runs under that sandbox's own async lock, so two concurrent resumes
//! (say, two execs auto-resuming a stopped sandbox) start it once. Illegal transitions are a 409 that
//! names the current state.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{
    CreateSnapshot, ForkRequest, ForkResult, SandboxInfo, SandboxState, SetTimeout, SnapshotInfo, SnapshotList,
};
use sandlot_engine::{LayerSource, Sandbox, StartSpec};
use sandlot_linux::cgroup::CgroupLimits;
use sandlot_store::{now_ms, SandboxRecord};
use serde_json::json;

use super::extract::{record, ApiJson, ApiPath, Caller};
use super::{ApiError, App, AppState};

const MAX_FORK: u32 = 32;

/// The per-sandbox transition lock.
pub async fn lock(app: &App, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
    let m = {
        let mut locks = app.locks.lock().unwrap_or_else(|p| p.into_inner());
        Arc::clone(locks.entry(id.to_string()).or_default())
    };
    m.lock_owned().await
}

/// Starts a sandbox's supervisor on a fresh, existing or snapshot layer and records the slot.
pub async fn boot(app: &App, rec: &SandboxRecord, source: LayerSource) -> Result<Arc<Sandbox>, ApiError> {
    let l = &rec.info.limits;
    let spec = StartSpec {
        image: rec.info.image.clone(),
        limits: CgroupLimits { memory_bytes: l.memory_mb << 20, pids: l.pids, cpu: l.cpu },
        preferred_slot: (source == LayerSource::Existing).then_some(rec.slot),
        disk_bytes: l.disk_mb.unwrap_or(0) << 20,
        source,
        network: Some(super::tenants::policy_for(app, &rec.tenant, &rec.network)?),
    };
    let sb = app.engine.start(&rec.info.id, spec).await?;
    app.store.set_slot(&rec.info.id, sb.slot())?;
    Ok(sb)
}

fn illegal(rec: &SandboxRecord, what: &str) -> ApiError {
    ApiError::conflict(format!("cannot {what} sandbox {}: it is {}", rec.info.id, rec.info.state.as_str()))
}

/// Re-reads the record under the lock (the state may have changed while waiting for it).
fn fresh(app: &App, rec: &SandboxRecord) -> Result<SandboxRecord, ApiError> {
    app.store
        .get_sandbox_any(&rec.tenant, &rec.info.id)?
        .ok_or_else(|| ApiError::not_found(&format!("sandbox {}", rec.info.id)))
}

/// stopped → running (fresh supervisor, same layer) or paused → running (thaw).
pub async fn resume(app: &App, rec: &SandboxRecord, why: &str) -> Result<SandboxRecord, ApiError> {
    let _g = lock(app, &rec.info.id).await;
    let mut rec = fresh(app, rec)?;
    let id = rec.info.id.clone();
    let t0 = std::time::Instant::now();
    match rec.info.state {
        SandboxState::Running => return Ok(rec),
        SandboxState::Paused => app.engine.freeze(&id, false).await?,
        SandboxState::Stopped => {
            app.ledger.reserve(&id, &rec.info.limits)?;
            if let Err(e) = boot(app, &rec, LayerSource::Existing).await {
                app.ledger.release(&id);
                app.store.audit(&rec.tenant, Some(&id), "sandbox.resume_failed", &json!({"reason": e.message}))?;
                return Err(e);
            }
        }
        _ => return Err(illegal(&rec, "resume")),
    }
    let from = rec.info.state;
    // A lifetime is wall-clock: resuming keeps the deadline, so pause/resume cannot extend it. Only a
    // sandbox whose lifetime already ended (paused or stopped by expiry, resumed by its owner) starts
    // a new one.
    let now = now_ms();
    let expires = if rec.info.expires_at_ms > now {
        rec.info.expires_at_ms
    } else {
        now + rec.info.limits.timeout_s as i64 * 1000
    };
    app.store.set_expiry(&id, expires)?;
    app.store.set_state(&id, SandboxState::Running, None)?;
    app.store.touch(&id, now_ms())?;
    app.store.audit(
        &rec.tenant,
        Some(&id),
        "sandbox.resume",
        &json!({"from": from.as_str(), "why": why, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
    )?;
    rec.info.state = SandboxState::Running;
    rec.info.expires_at_ms = expires;
    rec.info.reason = None;
    Ok(rec)
}

/// running/paused → stopped: processes end, files stay (synced before this returns).
pub async fn stop(app: &App, rec: &SandboxRecord, why: Option<&str>) -> Result<SandboxRecord, ApiError> {
    let _g = lock(app, &rec.info.id).await;
    let mut rec = fresh(app, rec)?;
    let id = rec.info.id.clone();
    match rec.info.state {
        SandboxState::Running | SandboxState::Paused => {}
        SandboxState::Stopped => return Ok(rec),
        _ => return Err(illegal(&rec, "stop")),
    }
    app.engine.stop(&id).await?;
    app.ledger.release(&id);
    app.store.set_state(&id, SandboxState::Stopped, why)?;
    app.store.audit(&rec.tenant, Some(&id), "sandbox.stop", &json!({"from": rec.info.state.as_str(), "why": why}))?;
    rec.info.state = SandboxState::Stopped;
    rec.info.reason = why.map(str::to_string);
    Ok(rec)
}

/// running → paused: every process frozen, memory kept, no CPU.
pub async fn pause(app: &App, rec: &SandboxRecord, why: Option<&str>) -> Result<SandboxRecord, ApiError> {
    let _g = lock(app, &rec.info.id).await;
    let mut rec = fresh(app, rec)?;
    let id = rec.info.id.clone();
    match rec.info.state {
        SandboxState::Running => {}
        // Paused by its owner when its lifetime ends: from now on it counts as paused by expiry, so it
        // is stopped after `stop_after_s`.
        SandboxState::Paused if why.is_some() && rec.info.reason.is_none() => {
            app.store.set_state(&id, SandboxState::Paused, why)?;
            app.store.touch(&id, now_ms())?;
            rec.info.reason = why.map(str::to_string);
            return Ok(rec);
        }
        SandboxState::Paused => return Ok(rec),
        _ => return Err(illegal(&rec, "pause")),
    }
    app.engine.freeze(&id, true).await?;
    app.store.set_state(&id, SandboxState::Paused, why)?;
    // For a pause by expiry, `stop_after_s` counts from now.
    app.store.touch(&id, now_ms())?;
    app.store.audit(&rec.tenant, Some(&id), "sandbox.pause", &json!({"why": why}))?;
    rec.info.state = SandboxState::Paused;
    rec.info.reason = why.map(str::to_string);
    Ok(rec)
}

pub async fn stop_route(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let rec = record(&app, &caller, &id)?;
    Ok(Json(stop(&app, &rec, None).await?.info))
}

pub async fn resume_route(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let rec = record(&app, &caller, &id)?;
    Ok(Json(resume(&app, &rec, "api").await?.info))
}

pub async fn pause_route(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let rec = record(&app, &caller, &id)?;
    Ok(Json(pause(&app, &rec, None).await?.info))
}

pub async fn set_timeout(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<SetTimeout>,
) -> Result<Json<SandboxInfo>, ApiError> {
    let mut rec = record(&app, &caller, &id)?;
    if req.timeout_s == 0 || req.timeout_s > app.cfg.max_timeout_s {
        return Err(ApiError::invalid(format!(
            "timeout_s must be between 1 and {} (the server's --max-timeout-s), got {}",
            app.cfg.max_timeout_s, req.timeout_s
        )));
    }
    let expires = now_ms() + req.timeout_s as i64 * 1000;
    app.store.set_expiry(&id, expires)?;
    app.store.audit(&rec.tenant, Some(&id), "sandbox.timeout", &json!({"timeout_s": req.timeout_s}))?;
    rec.info.expires_at_ms = expires;
    Ok(Json(rec.info))
}

fn new_snapshot_id() -> String {
    super::sandboxes::random_id("snap_")
}

/// Whether a snapshot counts against its tenant's snapshot limits: the ones a caller keeps, not the
/// one a fork takes and deletes once its copies exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Charge {
    Tenant,
    Transient,
}

fn snapshot_limit(message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, sandlot_api::codes::LIMIT_REACHED, message)
}

/// Takes a snapshot of `rec` and records it for `tenant`.
async fn take_snapshot(
    app: &App,
    rec: &SandboxRecord,
    name: Option<String>,
    charge: Charge,
) -> Result<SnapshotInfo, ApiError> {
    match rec.info.state {
        SandboxState::Running | SandboxState::Paused | SandboxState::Stopped => {}
        _ => return Err(illegal(rec, "snapshot")),
    }
    // One check-take-record at a time per tenant, so two sandboxes of one tenant cannot both pass
    // the check on the same room.
    let _tenant = lock(app, &format!("snapshots@{}", rec.tenant)).await;
    let (count, charged) = app.store.snapshot_usage(&rec.tenant)?;
    if charge == Charge::Tenant && count >= app.cfg.max_snapshots_per_tenant {
        return Err(snapshot_limit(format!(
            "tenant {} keeps {count} snapshots, the most this server allows (--max-snapshots-per-tenant); \
             delete one (DELETE /v1/snapshots/ID) and retry",
            rec.tenant
        )));
    }
    let mut snap = SnapshotInfo {
        id: new_snapshot_id(),
        name,
        sandbox_id: rec.info.id.clone(),
        image: rec.info.image.clone(),
        created_at_ms: now_ms(),
        bytes: 0,
    };
    let t0 = std::time::Instant::now();
    snap.bytes = app.engine.snapshot(&rec.info.id, &snap.id).await?;
    let quota = app.cfg.snapshot_quota_mb << 20;
    if charge == Charge::Tenant && charged + snap.bytes > quota {
        let _ = app.engine.delete_snapshot(&snap.id).await;
        return Err(snapshot_limit(format!(
            "this snapshot would hold {} MiB; tenant {}'s snapshots already hold {} MiB of {} MiB \
             (--snapshot-quota-mb): delete snapshots (DELETE /v1/snapshots/ID) and retry",
            snap.bytes.div_ceil(1 << 20),
            rec.tenant,
            charged.div_ceil(1 << 20),
            app.cfg.snapshot_quota_mb
        )));
    }
    let base = sandlot_linux::IdRange::for_slot(rec.slot).base;
    app.store.insert_snapshot(&rec.tenant, &snap, base)?;
    app.store.audit(
        &rec.tenant,
        Some(&rec.info.id),
        "snapshot.create",
        &json!({"snapshot": snap.id, "name": snap.name, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
    )?;
    Ok(snap)
}

pub async fn snapshot(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let req: CreateSnapshot = if body.iter().all(u8::is_ascii_whitespace) {
        CreateSnapshot::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| ApiError::invalid(format!("invalid JSON body: {e}")))?
    };
    if let Some(n) = &req.name {
        super::sandboxes::check_name(n)?;
        if app.store.get_snapshot(&caller.tenant, n)?.is_some() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                sandlot_api::codes::ALREADY_EXISTS,
                format!("a snapshot named {n:?} exists"),
            ));
        }
    }
    let rec = record(&app, &caller, &id)?;
    // Detached: a client that goes away mid-snapshot must not leave a snapshot on disk that the store
    // (and so the tenant's quota) never learns of.
    let snap = tokio::spawn(async move {
        let _g = lock(&app, &id).await;
        let rec = fresh(&app, &rec)?;
        take_snapshot(&app, &rec, req.name, Charge::Tenant).await
    })
    .await
    .map_err(|e| ApiError::internal(format!("the snapshot task failed: {e}")))??;
    Ok((StatusCode::CREATED, Json(snap)))
}

pub async fn list_snapshots(State(app): State<AppState>, caller: Caller) -> Result<Json<SnapshotList>, ApiError> {
    Ok(Json(SnapshotList { snapshots: app.store.list_snapshots(&caller.tenant)? }))
}

pub async fn delete_snapshot(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<StatusCode, ApiError> {
    let (snap, _) =
        app.store.get_snapshot(&caller.tenant, &id)?.ok_or_else(|| ApiError::not_found(&format!("snapshot {id}")))?;
    // Sandboxes made from a snapshot hold copy-on-write copies, not references: deleting it never
    // affects them, so there is no "in use" state to refuse.
    app.engine.delete_snapshot(&snap.id).await?;
    app.store.delete_snapshot(&snap.id)?;
    app.store.audit(&caller.tenant, Some(&snap.sandbox_id), "snapshot.delete", &json!({"snapshot": snap.id}))?;
    Ok(StatusCode::NO_CONTENT)
}

pub async fn fork(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<ForkRequest>,
) -> Result<impl IntoResponse, ApiError> {
    if !(1..=MAX_FORK).contains(&req.count) {
        return Err(ApiError::invalid(format!("count must be between 1 and {MAX_FORK}, got {}", req.count)));
    }
    let rec = record(&app, &caller, &id)?;
    // Detached, like a snapshot: a client that goes away mid-fork must not leave its transient
    // snapshot (never charged) behind, nor copies half-recorded.
    let made = tokio::spawn(fork_copies(app, rec, id, req.count))
        .await
        .map_err(|e| ApiError::internal(format!("the fork task failed: {e}")))??;
    Ok((StatusCode::CREATED, Json(ForkResult { sandboxes: made })))
}

/// Takes a transient snapshot of `rec` and starts `count` sandboxes from it, then deletes it.
async fn fork_copies(app: AppState, rec: SandboxRecord, id: String, count: u32) -> Result<Vec<SandboxInfo>, ApiError> {
    let snap = {
        let _g = lock(&app, &id).await;
        let rec = fresh(&app, &rec)?;
        take_snapshot(&app, &rec, None, Charge::Transient).await?
    };
    let base = sandlot_linux::IdRange::for_slot(rec.slot).base;
    let mut made = Vec::new();
    let mut failure = None;
    for _ in 0..count {
        let mut copy = super::sandboxes::new_record(&rec.tenant, &rec.info.image, rec.info.limits.clone(), &rec.env);
        copy.info.metadata = rec.info.metadata.clone();
        copy.network = rec.network.clone();
        copy.info.metadata.insert("forked_from".into(), id.clone());
        copy.info.snapshot = Some(snap.id.clone());
        match super::sandboxes::start_record(&app, copy, LayerSource::Snapshot { id: snap.id.clone(), base }).await {
            Ok(info) => made.push(info),
            Err(e) => {
                failure = Some(e);
                break;
            }
        }
    }
    // The implicit snapshot was only the source of the copies, which do not depend on it.
    let _ = app.engine.delete_snapshot(&snap.id).await;
    let _ = app.store.delete_snapshot(&snap.id);
    app.store.audit(
        &rec.tenant,
        Some(&id),
        "sandbox.fork",
        &json!({"count": made.len(), "sandboxes": made.iter().map(|s| &s.id).collect::<Vec<_>>()}),
    )?;
    if let Some(e) = failure {
        return Err(ApiError::new(
            e.status,
            e.code,
            format!(
                "{} of {} copies made ({}) before: {}",
                made.len(),
                count,
                made.iter().map(|s| s.id.as_str()).collect::<Vec<_>>().join(", "),
                e.message
            ),
        ));
    }
    Ok(made)
}
