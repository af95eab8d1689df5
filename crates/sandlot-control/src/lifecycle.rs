//! Sandboxes: create (and get-or-create), read, list, the transitions (stop, resume, pause, delete),
//! lifetimes, and `ensure_running`, which every operation on a sandbox's inside goes through.
//!
//! Every transition of one sandbox runs under that sandbox's own lock, with its record read again
//! under it, so two concurrent resumes (say, two execs auto-resuming a stopped sandbox) start it once.

use std::sync::Arc;

use sandlot_api::{CreateSandbox, EventKind, SandboxInfo, SandboxList, SandboxState};
use sandlot_engine::{LayerSource, Resources, Sandbox, StartSpec};
use sandlot_store::{now_ms, SandboxRecord};
use serde_json::json;

use crate::capacity::Claim;
use crate::network::CompiledPolicy;
use crate::plan::{check_name, Plan};
use crate::transitions::{refusal, step, Step, Transition};
use crate::{Caller, Control, Error, Kind, Result};

/// What a create answered.
#[derive(Debug, Clone)]
pub struct Created {
    /// The sandbox.
    pub info: SandboxInfo,
    /// Whether it existed already (`get_or_create` found it) rather than being made now.
    pub existed: bool,
}

/// A sandbox's place in the capacity ledger.
pub(crate) fn claim(rec: &SandboxRecord) -> Claim<'_> {
    Claim { tenant: &rec.tenant, persistent: rec.info.persistent, limits: &rec.info.limits }
}

fn name_taken(name: &str) -> Error {
    Error::new(
        Kind::AlreadyExists,
        format!("a sandbox named {name:?} exists; pass get_or_create: true to reuse it, or delete it first"),
    )
}

impl Control {
    /// The caller's live sandbox `id`; another tenant's is simply not found (never forbidden).
    pub(crate) fn record(&self, caller: &Caller, id: &str) -> Result<SandboxRecord> {
        self.store.get_sandbox(&caller.tenant, id)?.ok_or_else(|| Error::not_found(&format!("sandbox {id}")))
    }

    /// The record again, read under the sandbox's lock (its state may have changed while waiting).
    pub(crate) fn fresh(&self, rec: &SandboxRecord) -> Result<SandboxRecord> {
        self.store
            .get_sandbox_any(&rec.tenant, &rec.info.id)?
            .ok_or_else(|| Error::not_found(&format!("sandbox {}", rec.info.id)))
    }

    /// Starts a sandbox's supervisor on a fresh, existing or snapshot layer and records its slot.
    /// Called under the sandbox's lock with its record stored: the network policy is the tenant's
    /// exemptions as they are now (`compiled` kept only if they are the ones it was compiled with), so
    /// an admin's change to them is either seen here or applied to this sandbox after it
    /// (`apply_to_running` lists it and waits for its lock).
    async fn boot(
        &self,
        rec: &SandboxRecord,
        source: LayerSource,
        compiled: Option<CompiledPolicy>,
    ) -> Result<Arc<Sandbox>> {
        let l = &rec.info.limits;
        let policy = match compiled {
            Some(c) => self.current_policy(&rec.tenant, &rec.network, c)?,
            None => self.policy_for(&rec.tenant, &rec.network)?,
        };
        let spec = StartSpec {
            image: rec.image_key.clone().unwrap_or_else(|| crate::images::HOST_IMAGE.to_string()),
            resources: Resources {
                memory_bytes: l.memory_mb << 20,
                pids: l.pids,
                cpu: l.cpu,
                disk_bytes: l.disk_mb.unwrap_or(0) << 20,
            },
            preferred_slot: (source == LayerSource::Existing).then_some(rec.slot),
            source,
            network: Some(policy),
            build_step: rec.info.metadata.contains_key("build"),
        };
        let sb = self.engine.start(&rec.info.id, spec).await?;
        self.store.set_slot(&rec.info.id, sb.slot())?;
        // A build step's sandbox runs its RUN line and nothing else, whatever its base image starts.
        if !rec.info.metadata.contains_key("build") {
            self.run_start_command(rec, &sb).await;
        }
        Ok(sb)
    }

    /// Creates a sandbox; with `get_or_create` and a name that exists, returns that one (resumed if
    /// stopped or paused, once its own creation has finished if it is in flight).
    pub async fn create(&self, caller: &Caller, req: CreateSandbox) -> Result<Created> {
        if let Some(name) = &req.name {
            check_name(name)?;
            if let Some(existing) = self.store.get_by_name(&caller.tenant, name)? {
                if !req.get_or_create {
                    return Err(name_taken(name));
                }
                return Ok(Created { info: self.get_existing(existing).await?.info, existed: true });
            }
        } else if req.get_or_create {
            return Err(Error::invalid("get_or_create needs a `name`"));
        }
        let plan = self.plan(caller, &req)?;
        match self.start_record(plan).await {
            Ok(info) => Ok(Created { info, existed: false }),
            // Another call created the name between our check and our insert.
            Err(e) if e.kind == Kind::AlreadyExists && req.get_or_create => {
                let name = req.name.as_deref().unwrap_or_default();
                let existing = self.store.get_by_name(&caller.tenant, name)?.ok_or(e)?;
                Ok(Created { info: self.get_existing(existing).await?.info, existed: true })
            }
            Err(e) => Err(e),
        }
    }

    /// `get_or_create` found the sandbox: wait out its creation if it is in flight, resume it if needed.
    async fn get_existing(&self, existing: SandboxRecord) -> Result<SandboxRecord> {
        let existing = if existing.info.state == SandboxState::Creating {
            // The creating call holds the sandbox's transition lock until it has booted.
            drop(self.entries.lock(&existing.info.id).await);
            self.fresh(&existing)?
        } else {
            existing
        };
        Ok(match existing.info.state {
            SandboxState::Stopped | SandboxState::Paused => self.resume(&existing, "get_or_create").await?,
            _ => existing,
        })
    }

    /// Inserts the plan's record and starts it; on failure the record ends `failed` with the reason.
    pub(crate) async fn start_record(&self, plan: Plan) -> Result<SandboxInfo> {
        let Plan { mut rec, source, policy } = plan;
        let id = rec.info.id.clone();
        // Reserved before the boot is awaited: concurrent creates cannot all pass the check and all boot.
        self.ledger.reserve(&id, claim(&rec))?;
        // Locked before the row exists, so a concurrent get_or_create waits for the boot to finish.
        let _g = self.entries.lock(&id).await;
        if let Err(e) = self.store.insert_sandbox(&rec) {
            self.ledger.release(&id);
            self.entries.remove(&id);
            if let Some(name) = &rec.info.name {
                if self.store.get_by_name(&rec.tenant, name)?.is_some() {
                    return Err(name_taken(name));
                }
            }
            return Err(e.into());
        }
        let t0 = std::time::Instant::now();
        match self.boot(&rec, source, policy).await {
            Ok(_) => {
                self.store.set_state(&id, SandboxState::Running, None)?;
                rec.info.state = SandboxState::Running;
                self.audit(
                    &rec.tenant,
                    Some(&id),
                    "sandbox.create",
                    &json!({"image": rec.info.image, "name": rec.info.name, "limits": rec.info.limits,
                            "snapshot": rec.info.snapshot, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
                )?;
                self.emit(&rec, EventKind::Created, json!({"image": rec.info.image, "name": rec.info.name}));
                Ok(rec.info)
            }
            Err(e) => {
                let _ = self.engine.destroy(&id).await;
                self.ledger.release(&id);
                self.store.set_state(&id, SandboxState::Failed, Some(&e.message))?;
                self.audit(&rec.tenant, Some(&id), "sandbox.create_failed", &json!({"reason": e.message}))?;
                self.emit(&rec, EventKind::Failed, json!({"during": "create", "reason": e.message}));
                Err(e)
            }
        }
    }

    /// The caller's sandboxes that have not been deleted.
    pub fn list(&self, caller: &Caller) -> Result<SandboxList> {
        let sandboxes = self.store.list_sandboxes(&caller.tenant)?.into_iter().map(|r| r.info).collect();
        Ok(SandboxList { sandboxes })
    }

    /// The caller's sandbox `id`, deleted ones included (so a caller learns why one ended), with its
    /// live figures (network bytes, last activity).
    pub fn get(&self, caller: &Caller, id: &str) -> Result<SandboxInfo> {
        let rec = self.store.get_sandbox_any(&caller.tenant, id)?;
        let mut info = rec.map(|r| r.info).ok_or_else(|| Error::not_found(&format!("sandbox {id}")))?;
        let running = self.engine.get(id);
        let output = running.as_ref().map_or(0, |sb| sb.last_output_ms());
        let (out, inn) = running.as_ref().map_or((0, 0), |sb| sb.net_bytes());
        info.network.bytes_out = out;
        info.network.bytes_in = inn;
        info.last_active_at_ms = info.last_active_at_ms.max(output).max(self.entries.last_activity(id));
        Ok(info)
    }

    /// The caller's sandbox `id`, which must be running — or is resumed first when it is stopped or
    /// paused and has `auto_resume`. Counts as activity for its idle timeout.
    pub async fn ensure_running(&self, caller: &Caller, id: &str) -> Result<(SandboxRecord, Arc<Sandbox>)> {
        // Deleted ones too, so the error can say how the sandbox ended.
        let mut rec = self
            .store
            .get_sandbox_any(&caller.tenant, id)?
            .ok_or_else(|| Error::not_found(&format!("sandbox {id}")))?;
        if matches!(rec.info.state, SandboxState::Stopped | SandboxState::Paused) && rec.info.auto_resume {
            rec = self.resume(&rec, "auto_resume").await?;
        }
        match (rec.info.state, self.engine.get(id)) {
            (SandboxState::Running, Some(sb)) if sb.alive() => {
                self.entries.touch(id, now_ms());
                Ok((rec, sb))
            }
            (state, _) => Err(Error::conflict(format!(
                "sandbox {id} is {}{}; only a running sandbox accepts commands and file operations{}",
                state.as_str(),
                rec.info.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
                match state {
                    SandboxState::Stopped | SandboxState::Paused => " (POST …/resume, or create it with auto_resume)",
                    _ => "",
                }
            ))),
        }
    }

    /// Stops the caller's sandbox `id`.
    pub async fn stop_sandbox(&self, caller: &Caller, id: &str) -> Result<SandboxInfo> {
        let rec = self.record(caller, id)?;
        Ok(self.stop(&rec, None).await?.info)
    }

    /// Resumes the caller's sandbox `id`.
    pub async fn resume_sandbox(&self, caller: &Caller, id: &str) -> Result<SandboxInfo> {
        let rec = self.record(caller, id)?;
        Ok(self.resume(&rec, "api").await?.info)
    }

    /// Pauses the caller's sandbox `id`.
    pub async fn pause_sandbox(&self, caller: &Caller, id: &str) -> Result<SandboxInfo> {
        let rec = self.record(caller, id)?;
        Ok(self.pause(&rec, None).await?.info)
    }

    /// Pauses the caller's sandbox `id` (`keep_memory`: frozen, as [`Self::pause_sandbox`]) or stops
    /// it (files kept, processes gone), unless it is paused or stopped already: then `None` and
    /// nothing changes. Decided under the sandbox's lock (E2B's pause, which refuses a second one).
    pub async fn pause_unless_paused(
        &self,
        caller: &Caller,
        id: &str,
        keep_memory: bool,
    ) -> Result<Option<SandboxInfo>> {
        let rec = self.record(caller, id)?;
        let _g = self.entries.lock(id).await;
        let rec = self.fresh(&rec)?;
        if matches!(rec.info.state, SandboxState::Paused | SandboxState::Stopped) {
            return Ok(None);
        }
        let rec = if keep_memory { self.pause_held(rec, None).await? } else { self.stop_held(rec, None).await? };
        Ok(Some(rec.info))
    }

    /// Connects to the caller's sandbox `id`: a paused or stopped one is resumed (`cold`: a paused
    /// one is stopped first and boots again from its files), a running one is left as it is. With
    /// `timeout_s`, a resumed sandbox lives that long from now and a running one only ever gains time
    /// (a connect never cuts short what its owner set). Returns the sandbox and whether it was
    /// resumed; all of it under the sandbox's lock.
    pub async fn connect(
        &self,
        caller: &Caller,
        id: &str,
        cold: bool,
        timeout_s: Option<u64>,
    ) -> Result<(SandboxInfo, bool)> {
        if let Some(t) = timeout_s {
            self.check_timeout(t)?;
        }
        let rec = self.record(caller, id)?;
        let _g = self.entries.lock(id).await;
        let mut rec = self.fresh(&rec)?;
        let resumed = matches!(rec.info.state, SandboxState::Paused | SandboxState::Stopped);
        if rec.info.state == SandboxState::Paused && cold {
            rec = self.stop_held(rec, None).await?;
        }
        if resumed {
            rec = self.resume_held(rec, "api").await?;
        }
        if let Some(t) = timeout_s {
            self.lifetime_held(&mut rec, t, resumed)?;
        }
        Ok((rec.info, resumed))
    }

    /// Makes `rec`'s sandbox end `timeout_s` from now: always when `set`, else only if that is later
    /// than its end now (a lifetime is only ever extended). Under the sandbox's lock.
    fn lifetime_held(&self, rec: &mut SandboxRecord, timeout_s: u64, set: bool) -> Result<()> {
        let expires = now_ms() + timeout_s as i64 * 1000;
        if set || rec.info.expires_at_ms < expires {
            self.store.set_expiry(&rec.info.id, expires)?;
            self.audit(&rec.tenant, Some(&rec.info.id), "sandbox.timeout", &json!({"timeout_s": timeout_s}))?;
            rec.info.expires_at_ms = expires;
        }
        Ok(())
    }

    /// Extends the caller's sandbox `id` to end no sooner than `timeout_s` from now; one that ends
    /// later already keeps its end (E2B's refresh). Under the sandbox's lock, so a concurrent resume
    /// or timeout change is not undone.
    pub async fn extend_timeout(&self, caller: &Caller, id: &str, timeout_s: u64) -> Result<SandboxInfo> {
        self.check_timeout(timeout_s)?;
        let rec = self.record(caller, id)?;
        let _g = self.entries.lock(id).await;
        let mut rec = self.fresh(&rec)?;
        self.lifetime_held(&mut rec, timeout_s, false)?;
        Ok(rec.info)
    }

    /// Deletes the caller's sandbox `id` in any state but `creating`.
    pub async fn delete(&self, caller: &Caller, id: &str) -> Result<()> {
        let rec = self.record(caller, id)?;
        if step(rec.info.state, Transition::Delete) == Step::Refused {
            return Err(refusal(id, rec.info.state, Transition::Delete));
        }
        self.remove(&rec, "sandbox.delete", None).await
    }

    /// Gives the caller's sandbox `id` a new lifetime of `timeout_s` from now.
    pub fn set_timeout(&self, caller: &Caller, id: &str, timeout_s: u64) -> Result<SandboxInfo> {
        let mut rec = self.record(caller, id)?;
        self.check_timeout(timeout_s)?;
        let expires = now_ms() + timeout_s as i64 * 1000;
        self.store.set_expiry(id, expires)?;
        self.audit(&rec.tenant, Some(id), "sandbox.timeout", &json!({"timeout_s": timeout_s}))?;
        rec.info.expires_at_ms = expires;
        Ok(rec.info)
    }

    /// stopped → running (fresh supervisor, same layer) or paused → running (thaw).
    pub(crate) async fn resume(&self, rec: &SandboxRecord, why: &str) -> Result<SandboxRecord> {
        let _g = self.entries.lock(&rec.info.id).await;
        self.resume_held(self.fresh(rec)?, why).await
    }

    /// [`Self::resume`] with the sandbox's lock held and `rec` read under it.
    async fn resume_held(&self, mut rec: SandboxRecord, why: &str) -> Result<SandboxRecord> {
        let id = rec.info.id.clone();
        let t0 = std::time::Instant::now();
        match step(rec.info.state, Transition::Resume) {
            Step::Already => return Ok(rec),
            Step::Refused => return Err(refusal(&id, rec.info.state, Transition::Resume)),
            Step::Go => {}
        }
        if rec.info.state == SandboxState::Paused {
            self.engine.freeze(&id, false).await?;
        } else {
            self.ledger.reserve(&id, claim(&rec))?;
            if let Err(e) = self.boot(&rec, LayerSource::Existing, None).await {
                // Still stopped, its layer still on the volume.
                self.ledger.park(&id, claim(&rec));
                self.audit(&rec.tenant, Some(&id), "sandbox.resume_failed", &json!({"reason": e.message}))?;
                return Err(e);
            }
        }
        self.entries.set_paused(&id, false);
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
        self.store.set_expiry(&id, expires)?;
        self.store.set_state(&id, SandboxState::Running, None)?;
        self.store.touch(&id, now_ms())?;
        self.audit(
            &rec.tenant,
            Some(&id),
            "sandbox.resume",
            &json!({"from": from.as_str(), "why": why, "ms": t0.elapsed().as_secs_f64() * 1000.0}),
        )?;
        let kind = if from == SandboxState::Paused { EventKind::Resumed } else { EventKind::Started };
        self.emit(&rec, kind, json!({"why": why}));
        rec.info.state = SandboxState::Running;
        rec.info.expires_at_ms = expires;
        rec.info.reason = None;
        Ok(rec)
    }

    /// running/paused → stopped: processes end, files stay (synced before this returns).
    pub(crate) async fn stop(&self, rec: &SandboxRecord, why: Option<&str>) -> Result<SandboxRecord> {
        let _g = self.entries.lock(&rec.info.id).await;
        self.stop_held(self.fresh(rec)?, why).await
    }

    /// [`Self::stop`] with the sandbox's lock held and `rec` read under it.
    async fn stop_held(&self, mut rec: SandboxRecord, why: Option<&str>) -> Result<SandboxRecord> {
        let id = rec.info.id.clone();
        match step(rec.info.state, Transition::Stop) {
            Step::Already => return Ok(rec),
            Step::Refused => return Err(refusal(&id, rec.info.state, Transition::Stop)),
            Step::Go => {}
        }
        self.engine.stop(&id).await?;
        // Its processes' share goes back; its layer stays on the volume, and so does its place.
        self.ledger.park(&id, claim(&rec));
        self.store.set_state(&id, SandboxState::Stopped, why)?;
        self.audit(&rec.tenant, Some(&id), "sandbox.stop", &json!({"from": rec.info.state.as_str(), "why": why}))?;
        self.emit(&rec, EventKind::Stopped, json!({"from": rec.info.state.as_str(), "why": why}));
        rec.info.state = SandboxState::Stopped;
        rec.info.reason = why.map(str::to_string);
        Ok(rec)
    }

    /// running → paused: every process frozen, memory kept, no CPU.
    pub(crate) async fn pause(&self, rec: &SandboxRecord, why: Option<&str>) -> Result<SandboxRecord> {
        let _g = self.entries.lock(&rec.info.id).await;
        self.pause_held(self.fresh(rec)?, why).await
    }

    /// [`Self::pause`] with the sandbox's lock held and `rec` read under it.
    async fn pause_held(&self, mut rec: SandboxRecord, why: Option<&str>) -> Result<SandboxRecord> {
        let id = rec.info.id.clone();
        match step(rec.info.state, Transition::Pause) {
            // Paused by its owner when its lifetime ends: from now on it counts as paused by expiry, so
            // it is stopped after `stop_after_s`.
            Step::Already if why.is_some() && rec.info.reason.is_none() => {
                self.store.set_state(&id, SandboxState::Paused, why)?;
                self.store.touch(&id, now_ms())?;
                rec.info.reason = why.map(str::to_string);
                return Ok(rec);
            }
            Step::Already => return Ok(rec),
            Step::Refused => return Err(refusal(&id, rec.info.state, Transition::Pause)),
            Step::Go => {}
        }
        self.engine.freeze(&id, true).await?;
        self.entries.set_paused(&id, true);
        self.store.set_state(&id, SandboxState::Paused, why)?;
        // For a pause by expiry, `stop_after_s` counts from now.
        self.store.touch(&id, now_ms())?;
        self.audit(&rec.tenant, Some(&id), "sandbox.pause", &json!({"why": why}))?;
        self.emit(&rec, EventKind::Paused, json!({"why": why}));
        rec.info.state = SandboxState::Paused;
        rec.info.reason = why.map(str::to_string);
        Ok(rec)
    }

    /// Deletes a sandbox in any state: processes killed, cgroup and layer removed, record kept as
    /// `deleted` (with the reason) for audit and for reads; its in-memory entry goes.
    pub(crate) async fn remove(&self, rec: &SandboxRecord, action: &str, reason: Option<&str>) -> Result<()> {
        let id = &rec.info.id;
        let _g = self.entries.lock(id).await;
        // Read again under the lock: a concurrent delete (the owner's, an expiry's) finished first.
        if self.fresh(rec)?.info.state == SandboxState::Deleted {
            self.entries.remove(id);
            return Ok(());
        }
        let entry = self.entries.existing(id);
        if let Some(e) = &entry {
            e.removing.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let destroyed = self.engine.destroy(id).await;
        if let (Err(_), Some(e)) = (&destroyed, &entry) {
            e.removing.store(false, std::sync::atomic::Ordering::SeqCst);
        }
        destroyed?;
        self.ledger.release(id);
        self.store.set_state(id, SandboxState::Deleted, reason)?;
        self.entries.remove(id);
        self.audit(&rec.tenant, Some(id), action, &json!({"reason": reason}))?;
        self.emit(rec, EventKind::Deleted, json!({"reason": reason}));
        Ok(())
    }

    /// Whether sandbox `id` is being deleted now (its processes dying, its record not yet `deleted`):
    /// a client that lost a connection to it then learns it was killed, not that it still runs.
    pub fn being_removed(&self, id: &str) -> bool {
        self.entries.existing(id).is_some_and(|e| e.removing.load(std::sync::atomic::Ordering::SeqCst))
    }

    /// Whether sandbox `id` is gone: unknown, deleted, failed or being deleted. What E2B's proxy tells
    /// any caller of a gone sandbox's port (502, "not found"): the id alone opens nothing.
    pub fn sandbox_gone(&self, id: &str) -> Result<bool> {
        if self.being_removed(id) {
            return Ok(true);
        }
        let Some(tenant) = self.store.tenant_of(id)? else { return Ok(true) };
        Ok(match self.store.get_sandbox(&tenant, id)? {
            None => true,
            Some(r) => matches!(r.info.state, SandboxState::Deleted | SandboxState::Failed),
        })
    }

    /// Stops persistent sandboxes and deletes ephemeral ones, then the engine (graceful shutdown).
    pub async fn shutdown(&self) {
        for rec in self.store.live_sandboxes().unwrap_or_default() {
            let running = matches!(rec.info.state, SandboxState::Running | SandboxState::Paused);
            let r = if rec.info.persistent && running {
                self.stop(&rec, Some("server shut down")).await.map(|_| ())
            } else if !rec.info.persistent {
                self.remove(&rec, "sandbox.delete", Some("server shut down")).await
            } else {
                Ok(())
            };
            if let Err(e) = r {
                tracing::error!(sandbox = %rec.info.id, "shutdown: {}", e.message);
            }
        }
        self.engine.shutdown().await;
    }
}
