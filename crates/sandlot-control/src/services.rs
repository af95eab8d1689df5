//! The control layer's background services: expiry, supervisor deaths, the network audit and the
//! host-network watcher (plus audit retention, in `audit`; OOM events and event pruning, in `events`;
//! webhook delivery, in `delivery`; the metrics sampler, in `sampler`). Each ends on a signal (see
//! [`Services`]).

use std::sync::Arc;
use std::time::Duration;

use sandlot_api::{EventKind, SandboxState, TimeoutAction};
use sandlot_engine::{Death, NetEvent};
use sandlot_store::now_ms;
use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::audit::Class;
use crate::Control;

/// How often lifetimes and idle timeouts are checked.
const EXPIRY_EVERY: Duration = Duration::from_millis(250);
/// How often the host's addresses are read again: a new interface, a DHCP lease on another subnet or
/// a changed default route is denied to sandboxes within this long.
const HOST_NETWORKS_EVERY: Duration = Duration::from_secs(10);
/// Network audit rows handed to one blocking task at most: a burst of decisions is written off the
/// runtime's workers without one task per row.
const NET_AUDIT_BATCH: usize = 256;

/// The running services. Expiry, audit retention, the metrics sampler and the host-network watcher end
/// when the shutdown signal comes; supervisor deaths and the network audit go on until [`Services::finish`], so the
/// sandboxes that stop during shutdown still have their deaths handled and their last network
/// decisions written.
pub struct Services {
    timers: Vec<JoinHandle<()>>,
    drains: Vec<JoinHandle<()>>,
    drain: watch::Sender<bool>,
}

impl Services {
    /// Ends the draining services (after the network audit has written what is queued) and waits for
    /// every service to end. Call it after [`Control::shutdown`].
    pub async fn finish(self) {
        let _ = self.drain.send(true);
        for service in self.timers.into_iter().chain(self.drains) {
            let _ = service.await;
        }
    }

    /// How many services run.
    pub fn len(&self) -> usize {
        self.timers.len() + self.drains.len()
    }

    /// Whether none runs.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Control {
    /// Starts every service; see [`Services`] for when each ends.
    pub fn start_services(self: &Arc<Self>, shutdown: watch::Receiver<bool>) -> Services {
        let timers = vec![
            tokio::spawn(expiry_service(Arc::clone(self), shutdown.clone())),
            tokio::spawn(host_networks_service(Arc::clone(self), shutdown.clone())),
            tokio::spawn(crate::audit::retention_service(Arc::clone(self), shutdown.clone())),
            tokio::spawn(crate::events::events_service(Arc::clone(self), shutdown.clone())),
            tokio::spawn(crate::delivery::webhook_service(Arc::clone(self), shutdown.clone())),
            tokio::spawn(crate::sampler::sampler_service(Arc::clone(self), shutdown)),
        ];
        let (drain, draining) = watch::channel(false);
        let mut drains = Vec::new();
        if let Some(events) = self.engine.take_net_events() {
            drains.push(tokio::spawn(net_audit_service(Arc::clone(self), events, draining.clone())));
        }
        if let Some(deaths) = self.engine.take_deaths() {
            drains.push(tokio::spawn(death_service(Arc::clone(self), deaths, draining)));
        }
        Services { timers, drains, drain }
    }

    /// Applies every lifetime and idle timeout due at `now` (Unix ms): `delete`, `stop` or `pause`
    /// (then `stop` after `stop_after_s`).
    pub async fn expire_due(&self, now: i64) {
        let Ok(live) = self.store.live_sandboxes() else { return };
        for rec in live {
            let i = &rec.info;
            let output = self.engine.get(&i.id).map_or(0, |sb| sb.last_output_ms());
            let active = i.last_active_at_ms.max(output).max(self.entries.last_activity(&i.id));
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
                TimeoutAction::Delete => self.remove(&rec, "sandbox.expire", Some(&why)).await,
                TimeoutAction::Stop => self.stop(&rec, Some(&why)).await.map(|_| ()),
                TimeoutAction::Pause => self.pause(&rec, Some(&why)).await.map(|_| ()),
            };
            match r {
                Ok(()) => {
                    let _ = self.store.audit(
                        &rec.tenant,
                        Some(&i.id),
                        "sandbox.timeout_fired",
                        &json!({"why": why, "action": action}),
                    );
                    self.emit(&rec, EventKind::Expired, json!({"why": why, "action": action}));
                }
                Err(e) => tracing::error!(sandbox = %i.id, "expiry ({why}) failed: {}", e.message),
            }
        }
    }

    /// A sandbox whose supervisor died unexpectedly (killed from the host, or a crash of pid 1): an
    /// ephemeral one is marked `failed` and freed; a persistent one is `stopped` with its writable
    /// layer kept, so its owner resumes it with every file it had. A death never deletes a persistent
    /// sandbox's files.
    pub(crate) async fn supervisor_died(&self, death: Death) {
        let Death { id, pid, why } = death;
        let reason = format!("supervisor ended: {why}");
        // Under the sandbox's lock, record read after it: a transition in flight (a stop, a snapshot)
        // finishes first.
        let _g = self.entries.lock(&id).await;
        // A transition that won the lock may have stopped and resumed the sandbox since: a newer
        // supervisor runs it now, and this death is not its.
        if self.engine.get(&id).is_some_and(|sb| sb.supervisor_pid() != pid) {
            return;
        }
        let live = match self.store.live_sandboxes() {
            Ok(live) => live,
            Err(e) => {
                // Not knowing whether it is persistent, delete nothing: its layer stays for the next start.
                tracing::error!(sandbox = %id, "after its supervisor died, the store could not be read ({e}); leaving it as it is");
                let _ = self.engine.stop(&id).await;
                return;
            }
        };
        let Some(rec) = live.into_iter().find(|r| r.info.id == id) else {
            // Deleted meanwhile: nothing to keep.
            let _ = self.engine.destroy(&id).await;
            self.ledger.release(&id);
            self.entries.remove(&id);
            return;
        };
        if !matches!(rec.info.state, SandboxState::Running | SandboxState::Paused) {
            // Already stopped (or failed) by a transition that won the lock: its layer is not ours to touch.
            return;
        }
        if rec.info.persistent {
            // Its processes' share goes back; its layer stays on the volume, and so does its place.
            self.ledger.park(&id, crate::lifecycle::claim(&rec));
            let kept = self.engine.stop(&id).await;
            let reason = format!("{reason}; files kept, resume to start it again");
            let _ = self.store.set_state(&id, SandboxState::Stopped, Some(&reason));
            let detail =
                json!({"reason": reason, "files_kept": kept.is_ok(), "sync_error": kept.err().map(|e| e.to_string())});
            let _ = self.store.audit(&rec.tenant, Some(&id), "sandbox.failed", &detail);
            let mut detail = detail;
            detail["state"] = json!("stopped");
            self.emit(&rec, EventKind::Failed, detail);
        } else {
            self.ledger.release(&id);
            let _ = self.engine.destroy(&id).await;
            let _ = self.store.set_state(&id, SandboxState::Failed, Some(&reason));
            let _ = self.store.audit(&rec.tenant, Some(&id), "sandbox.failed", &json!({"reason": reason}));
            self.emit(&rec, EventKind::Failed, json!({"reason": reason, "state": "failed"}));
        }
    }

    /// Writes network decisions to the audit log (rate-limited per tenant).
    fn audit_net(&self, events: Vec<NetEvent>) {
        for ev in events {
            let tenant = self.store.tenant_of(&ev.sandbox).ok().flatten().unwrap_or_default();
            let (action, class) = match ev.decision.allow {
                true => ("net.allow", Class::NetAllow),
                false => ("net.deny", Class::NetDeny),
            };
            self.audit_limited(class, &tenant, Some(&ev.sandbox), action, &json!(ev));
        }
    }
}

async fn expiry_service(control: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(EXPIRY_EVERY);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => return,
        }
        control.expire_due(now_ms()).await;
    }
}

async fn death_service(
    control: Arc<Control>,
    mut deaths: tokio::sync::mpsc::UnboundedReceiver<Death>,
    mut drain: watch::Receiver<bool>,
) {
    loop {
        let death = tokio::select! {
            d = deaths.recv() => match d { Some(d) => d, None => return },
            _ = drain.changed() => return,
        };
        tracing::warn!(sandbox = %death.id, "supervisor ended unexpectedly: {}", death.why);
        // One task per death: waiting for this sandbox's lock must not hold up the next death.
        let control = Arc::clone(&control);
        tokio::spawn(async move { control.supervisor_died(death).await });
    }
}

/// The SQLite writes block: each batch is written off the runtime's workers, where it would stall
/// the DNS answers and connections that produce the events. When told to drain, it writes what is
/// queued and ends.
async fn net_audit_service(
    control: Arc<Control>,
    mut events: tokio::sync::mpsc::UnboundedReceiver<NetEvent>,
    mut drain: watch::Receiver<bool>,
) {
    let mut draining = false;
    loop {
        let first = if draining {
            match events.try_recv() {
                Ok(e) => e,
                Err(_) => return,
            }
        } else {
            tokio::select! {
                e = events.recv() => match e { Some(e) => e, None => return },
                _ = drain.changed() => {
                    draining = true;
                    continue;
                }
            }
        };
        let mut batch = vec![first];
        while batch.len() < NET_AUDIT_BATCH {
            match events.try_recv() {
                Ok(e) => batch.push(e),
                Err(_) => break,
            }
        }
        let control = Arc::clone(&control);
        let _ = tokio::task::spawn_blocking(move || control.audit_net(batch)).await;
    }
}

async fn host_networks_service(control: Arc<Control>, mut shutdown: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(HOST_NETWORKS_EVERY) => {}
            _ = shutdown.changed() => return,
        }
        if let Some(now) = control.engine.refresh_host_networks().await {
            tracing::info!("the host's networks changed; always denied now: {}", now.join(", "));
        }
    }
}
