//! Sandbox lifecycle routes, API keys, audit, and the expiry and death watchers.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use sandlot_api::{AuditList, CreateSandbox, Limits, SandboxInfo, SandboxList, SandboxState, TimeoutAction};
use sandlot_engine::LayerSource;
use sandlot_store::{now_ms, SandboxRecord};
use serde::Deserialize;
use serde_json::json;

use super::extract::{no_nul, record, ApiJson, ApiPath, ApiQuery, Caller};
use super::{ApiError, App, AppState};

const MAX_METADATA: usize = 64;
/// Seconds a sandbox paused by expiry stays paused before it is stopped, by default.
const DEFAULT_STOP_AFTER_S: u64 = 600;
/// Longest idle timeout.
const MAX_IDLE_S: u64 = 7 * 86_400;
const MAX_ENV: usize = 256;

/// A random id with `prefix` (20 characters of [a-z0-9] from the OS RNG: 103 bits).
pub fn random_id(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::rngs::OsRng;
    let body: String = (0..20).map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char).collect();
    format!("{prefix}{body}")
}

/// Names of sandboxes and snapshots: 1-64 characters of letters, digits, `-`, `_`, `.`.
pub fn check_name(n: &str) -> Result<(), ApiError> {
    if n.is_empty() || n.len() > 64 || !n.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(ApiError::invalid(format!("name {n:?}: use 1-64 characters of A-Z a-z 0-9 - _ .")));
    }
    Ok(())
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
    // The upper bounds are the host's (checked below, with the maximum in the message).
    let memory_mb = req.memory_mb.unwrap_or(cfg.default_memory_mb);
    if memory_mb < 16 {
        return Err(ApiError::invalid(format!("memory_mb must be at least 16, got {memory_mb}")));
    }
    let pids = req.pids.unwrap_or(cfg.default_pids);
    if pids < 8 {
        return Err(ApiError::invalid(format!("pids must be at least 8, got {pids}")));
    }
    let disk_mb = match (req.disk_mb, app.engine.disk_limits()) {
        (_, false) => None,
        (d, true) => {
            let d = d.unwrap_or(cfg.default_disk_mb);
            if d < 16 {
                return Err(ApiError::invalid(format!("disk_mb must be at least 16, got {d}")));
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
    let limits = Limits { cpu, memory_mb, pids, disk_mb, timeout_s };
    super::capacity::check_against_host(app.ledger.host(), &limits)?;
    Ok(limits)
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
    if req.idle_timeout_s.is_some_and(|t| t == 0 || t > MAX_IDLE_S) {
        return Err(ApiError::invalid(format!("idle_timeout_s must be between 1 and {MAX_IDLE_S}")));
    }
    if req.stop_after_s.is_some_and(|t| t > MAX_IDLE_S) {
        return Err(ApiError::invalid(format!("stop_after_s must be at most {MAX_IDLE_S}")));
    }
    if req.persistent == Some(true) && !app.engine.disk_limits() {
        return Err(ApiError::invalid(
            "persistent sandboxes need the layers volume; this server runs with --no-disk-quota",
        ));
    }
    Ok((image, limits))
}

/// A new record in state `creating`.
pub fn new_record(tenant: &str, image: &str, limits: Limits, env: &BTreeMap<String, String>) -> SandboxRecord {
    let now = now_ms();
    SandboxRecord {
        info: SandboxInfo {
            id: random_id("sb_"),
            state: SandboxState::Creating,
            reason: None,
            image: image.to_string(),
            expires_at_ms: now + limits.timeout_s as i64 * 1000,
            limits,
            metadata: BTreeMap::new(),
            created_at_ms: now,
            name: None,
            persistent: false,
            auto_resume: false,
            idle_timeout_s: None,
            on_timeout: TimeoutAction::Delete,
            stop_after_s: DEFAULT_STOP_AFTER_S,
            last_active_at_ms: now,
            snapshot: None,
            network: Default::default(),
        },
        tenant: tenant.to_string(),
        env: env.clone(),
        slot: 0,
        network: Default::default(),
    }
}

/// Inserts `rec` and starts it; on failure the record ends `failed` with the reason.
pub async fn start_record(app: &App, mut rec: SandboxRecord, source: LayerSource) -> Result<SandboxInfo, ApiError> {
    let id = rec.info.id.clone();
    // Reserved before the boot is awaited: concurrent creates cannot all pass the check and all boot.
    app.ledger.reserve(&id, &rec.info.limits)?;
    // Locked before the row exists, so a concurrent get_or_create waits for the boot to finish.
    let _g = super::lifecycle::lock(app, &id).await;
    if let Err(e) = app.store.insert_sandbox(&rec) {
        app.ledger.release(&id);
        if let Some(name) = &rec.info.name {
            if app.store.get_by_name(&rec.tenant, name)?.is_some() {
                return Err(name_taken(name));
            }
        }
        return Err(e.into());
    }
    let t0 = std::time::Instant::now();
    match super::lifecycle::boot(app, &rec, source).await {
        Ok(_) => {
            app.store.set_state(&id, SandboxState::Running, None)?;
            rec.info.state = SandboxState::Running;
            app.store.audit(
                &rec.tenant,
                Some(&id),
                "sandbox.create",
                &json!({"image": rec.info.image, "name": rec.info.name, "limits": rec.info.limits,
                        "snapshot": rec.info.snapshot, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
            )?;
            Ok(rec.info)
        }
        Err(e) => {
            let _ = app.engine.destroy(&id).await;
            app.ledger.release(&id);
            app.store.set_state(&id, SandboxState::Failed, Some(&e.message))?;
            app.store.audit(&rec.tenant, Some(&id), "sandbox.create_failed", &json!({"reason": e.message}))?;
            Err(e)
        }
    }
}

fn name_taken(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        sandlot_api::codes::ALREADY_EXISTS,
        format!("a sandbox named {name:?} exists; pass get_or_create: true to reuse it, or delete it first"),
    )
}

pub async fn create(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<CreateSandbox>,
) -> Result<axum::response::Response, ApiError> {
    if let Some(name) = &req.name {
        check_name(name)?;
        if let Some(existing) = app.store.get_by_name(&caller.tenant, name)? {
            if !req.get_or_create {
                return Err(name_taken(name));
            }
            return Ok((StatusCode::OK, Json(get_existing(&app, existing).await?.info)).into_response());
        }
    } else if req.get_or_create {
        return Err(ApiError::invalid("get_or_create needs a `name`"));
    }
    create_new(&app, &caller, req).await
}

/// `get_or_create` found the sandbox: wait out its creation if it is in flight, resume it if needed.
async fn get_existing(app: &App, existing: SandboxRecord) -> Result<SandboxRecord, ApiError> {
    let existing = if existing.info.state == SandboxState::Creating {
        // The creating call holds the sandbox's transition lock until it has booted.
        drop(super::lifecycle::lock(app, &existing.info.id).await);
        app.store
            .get_sandbox_any(&existing.tenant, &existing.info.id)?
            .ok_or_else(|| ApiError::not_found(&format!("sandbox {}", existing.info.id)))?
    } else {
        existing
    };
    Ok(match existing.info.state {
        SandboxState::Stopped | SandboxState::Paused => {
            super::lifecycle::resume(app, &existing, "get_or_create").await?
        }
        _ => existing,
    })
}

async fn create_new(app: &AppState, caller: &Caller, req: CreateSandbox) -> Result<axum::response::Response, ApiError> {
    let (mut image, limits) = validate(app, &req)?;
    let mut source = LayerSource::Fresh;
    if let Some(snap) = &req.snapshot {
        let (info, base) = app
            .store
            .get_snapshot(&caller.tenant, snap)?
            .ok_or_else(|| ApiError::not_found(&format!("snapshot {snap}")))?;
        if req.image.as_ref().is_some_and(|i| *i != info.image) {
            return Err(ApiError::invalid(format!("snapshot {snap} is of image {:?}; leave `image` out", info.image)));
        }
        image = info.image;
        source = LayerSource::Snapshot { id: info.id, base };
    }
    let persistent = req.persistent.unwrap_or(false);
    let mut rec = new_record(&caller.tenant, &image, limits, &req.env);
    rec.info.metadata = req.metadata.clone();
    rec.info.name = req.name.clone();
    rec.info.persistent = persistent;
    rec.info.auto_resume = req.auto_resume.unwrap_or(persistent);
    rec.info.idle_timeout_s = req.idle_timeout_s;
    rec.info.on_timeout =
        req.on_timeout.unwrap_or(if persistent { TimeoutAction::Pause } else { TimeoutAction::Delete });
    rec.info.stop_after_s = req.stop_after_s.unwrap_or(DEFAULT_STOP_AFTER_S);
    if let Some(net) = &req.network {
        super::tenants::policy_for(app, &caller.tenant, net)?;
        rec.network = net.clone();
        rec.info.network = net.info(0, 0);
    }
    rec.info.snapshot = match &source {
        LayerSource::Snapshot { id, .. } => Some(id.clone()),
        _ => None,
    };
    match start_record(app, rec, source).await {
        Ok(info) => Ok((StatusCode::CREATED, Json(info)).into_response()),
        // Another call created the name between our check and our insert.
        Err(e) if e.code == sandlot_api::codes::ALREADY_EXISTS && req.get_or_create => {
            let name = req.name.as_deref().unwrap_or_default();
            let existing = app.store.get_by_name(&caller.tenant, name)?.ok_or(e)?;
            Ok((StatusCode::OK, Json(get_existing(app, existing).await?.info)).into_response())
        }
        Err(e) => Err(e),
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
    let mut info = rec.map(|r| r.info).ok_or_else(|| ApiError::not_found(&format!("sandbox {id}")))?;
    let output = app.engine.get(&id).map_or(0, |sb| sb.last_output_ms());
    let (out, inn) = app.engine.get(&id).map_or((0, 0), |sb| sb.net_bytes());
    info.network.bytes_out = out;
    info.network.bytes_in = inn;
    info.last_active_at_ms = info.last_active_at_ms.max(output).max(app.last_activity(&id));
    Ok(Json(info))
}

/// Deletes a sandbox in any state: processes killed, cgroup and layer removed, record kept as
/// `deleted` (with the reason) for audit and for `GET`.
pub async fn remove_sandbox(
    app: &App,
    rec: &SandboxRecord,
    action: &str,
    reason: Option<&str>,
) -> Result<(), ApiError> {
    let id = &rec.info.id;
    let _g = super::lifecycle::lock(app, id).await;
    app.engine.destroy(id).await?;
    app.ledger.release(id);
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

/// Applies lifetimes and idle timeouts: `delete`, `stop` or `pause` (then `stop` after `stop_after_s`).
pub async fn expiry_loop(app: AppState, mut shutdown: tokio::sync::watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        let Ok(live) = app.store.live_sandboxes() else { continue };
        let now = now_ms();
        for rec in live {
            let i = &rec.info;
            let output = app.engine.get(&i.id).map_or(0, |sb| sb.last_output_ms());
            let active = i.last_active_at_ms.max(output).max(app.last_activity(&i.id));
            let why = match i.state {
                SandboxState::Running | SandboxState::Stopped if i.expires_at_ms <= now => {
                    Some(format!("lifetime of {} s ended", i.limits.timeout_s))
                }
                // Paused by its owner: the lifetime is wall-clock and ends all the same.
                SandboxState::Paused if i.reason.is_none() && i.expires_at_ms <= now => {
                    Some(format!("lifetime of {} s ended while paused", i.limits.timeout_s))
                }
                SandboxState::Running => i
                    .idle_timeout_s
                    .filter(|idle| active + *idle as i64 * 1000 <= now)
                    .map(|idle| format!("idle for {idle} s")),
                SandboxState::Paused if i.reason.is_some() && active + i.stop_after_s as i64 * 1000 <= now => {
                    Some(format!("paused by expiry for {} s", i.stop_after_s))
                }
                _ => None,
            };
            let Some(why) = why else { continue };
            let action = match (i.state, i.on_timeout) {
                // Its lifetime ended while its owner had it paused: what `on_timeout` says (`pause`
                // marks it paused by expiry, to be stopped after `stop_after_s`).
                (SandboxState::Paused, a) if i.reason.is_none() => a,
                (SandboxState::Paused, _) => TimeoutAction::Stop,
                (SandboxState::Stopped, TimeoutAction::Delete) => TimeoutAction::Delete,
                (SandboxState::Stopped, _) => continue, // a stopped persistent sandbox waits for its owner
                (_, a) => a,
            };
            let r = match action {
                TimeoutAction::Delete => remove_sandbox(&app, &rec, "sandbox.expire", Some(&why)).await,
                TimeoutAction::Stop => super::lifecycle::stop(&app, &rec, Some(&why)).await.map(|_| ()),
                TimeoutAction::Pause => super::lifecycle::pause(&app, &rec, Some(&why)).await.map(|_| ()),
            };
            match r {
                Ok(()) => {
                    let _ = app.store.audit(
                        &rec.tenant,
                        Some(&i.id),
                        "sandbox.timeout_fired",
                        &json!({"why": why, "action": action}),
                    );
                }
                Err(e) => tracing::error!(sandbox = %i.id, "expiry ({why}) failed: {}", e.message),
            }
        }
    }
}

/// Handles sandboxes whose supervisor died unexpectedly (killed from the host, or a crash of pid 1):
/// an ephemeral one is marked `failed` and freed; a persistent one is `stopped` with its writable
/// layer kept, so its owner resumes it with every file it had. A death never deletes a persistent
/// sandbox's files.
pub async fn death_loop(app: AppState, mut deaths: tokio::sync::mpsc::UnboundedReceiver<sandlot_engine::Death>) {
    while let Some(death) = deaths.recv().await {
        tracing::warn!(sandbox = %death.id, "supervisor ended unexpectedly: {}", death.why);
        // One task per death: waiting for this sandbox's lock must not hold up the next death.
        tokio::spawn(supervisor_died(app.clone(), death));
    }
}

async fn supervisor_died(app: AppState, death: sandlot_engine::Death) {
    let sandlot_engine::Death { id, pid, why } = death;
    let reason = format!("supervisor ended: {why}");
    // Under the sandbox's lock, record read after it: a transition in flight (a stop, a snapshot)
    // finishes first.
    let _g = super::lifecycle::lock(&app, &id).await;
    // A transition that won the lock may have stopped and resumed the sandbox since: a newer
    // supervisor runs it now, and this death is not its.
    if app.engine.get(&id).is_some_and(|sb| sb.pid() != pid) {
        return;
    }
    let live = match app.store.live_sandboxes() {
        Ok(live) => live,
        Err(e) => {
            // Not knowing whether it is persistent, delete nothing: its layer stays for the next start.
            tracing::error!(sandbox = %id, "after its supervisor died, the store could not be read ({e}); leaving it as it is");
            let _ = app.engine.stop(&id).await;
            return;
        }
    };
    let rec = live.into_iter().find(|r| r.info.id == id);
    let Some(rec) = rec else {
        // Deleted meanwhile: nothing to keep.
        let _ = app.engine.destroy(&id).await;
        app.ledger.release(&id);
        return;
    };
    if !matches!(rec.info.state, SandboxState::Running | SandboxState::Paused) {
        // Already stopped (or failed) by a transition that won the lock: its layer is not ours to touch.
        return;
    }
    app.ledger.release(&id);
    if rec.info.persistent {
        let kept = app.engine.stop(&id).await;
        let reason = format!("{reason}; files kept, resume to start it again");
        let _ = app.store.set_state(&id, SandboxState::Stopped, Some(&reason));
        let detail =
            json!({"reason": reason, "files_kept": kept.is_ok(), "sync_error": kept.err().map(|e| e.to_string())});
        let _ = app.store.audit(&rec.tenant, Some(&id), "sandbox.failed", &detail);
    } else {
        let _ = app.engine.destroy(&id).await;
        let _ = app.store.set_state(&id, SandboxState::Failed, Some(&reason));
        let _ = app.store.audit(&rec.tenant, Some(&id), "sandbox.failed", &json!({"reason": reason}));
    }
}

/// `PATCH /v1/sandboxes/{id}/network`: a new policy, effective for new connections and lookups.
pub async fn set_network(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(spec): ApiJson<sandlot_api::NetworkSpec>,
) -> Result<Json<SandboxInfo>, ApiError> {
    // Looked up before the lock too: a lock is made per id, and ids the caller does not own must not
    // make any.
    record(&app, &caller, &id)?;
    // Under the sandbox's lock, with the record read again (it may have been deleted meanwhile) and the
    // tenant's exemptions as they are now: an admin's concurrent change to them is then either seen
    // here or applied after this, never undone by it.
    let _g = super::lifecycle::lock(&app, &id).await;
    let rec = record(&app, &caller, &id)?;
    let policy = super::tenants::policy_for(&app, &rec.tenant, &spec)?;
    // The running sandbox first: if that fails, nothing is stored and the old policy stays in force.
    if app.engine.get(&id).is_some() {
        app.engine.set_network(&id, policy).await?;
    }
    app.store.set_network(&id, &spec)?;
    // Header values are secrets: the audit row names the headers only.
    app.store.audit(&rec.tenant, Some(&id), "network.update", &json!(spec.info(0, 0)))?;
    let (bytes_out, bytes_in) = app.engine.get(&id).map_or((0, 0), |sb| sb.net_bytes());
    let mut info = rec.info;
    info.network = spec.info(bytes_out, bytes_in);
    Ok(Json(info))
}

/// Writes every network decision to the audit log. Runs on a thread of its own: the SQLite writes
/// block, and on a runtime worker they would stall the DNS answers and connections that produce them.
pub fn net_audit_loop(
    app: AppState,
    mut events: tokio::sync::mpsc::UnboundedReceiver<sandlot_netproxy::egress::NetEvent>,
) {
    while let Some(ev) = events.blocking_recv() {
        let tenant = app.store.tenant_of(&ev.sandbox).ok().flatten().unwrap_or_default();
        let (action, class) = match ev.decision.allow {
            true => ("net.allow", super::audit::Class::NetAllow),
            false => ("net.deny", super::audit::Class::NetDeny),
        };
        app.audit_limited(class, &tenant, Some(&ev.sandbox), action, &json!(ev));
    }
}
