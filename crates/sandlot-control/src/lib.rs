//! The control layer: the one place that decides what happens to a sandbox. Every surface (the HTTP
//! API, and the E2B-compatible API, MCP server and dashboard to come) authenticates a caller, turns its
//! request into a call here, and turns the answer back into its own format. Nothing here sees HTTP.
//!
//! It owns the sandbox state machine ([`transitions`]), tenancy (a caller sees only its tenant's
//! sandboxes), the host's capacity ledger, quotas, the audit log, lifecycle events and webhooks, and
//! the background services (expiry, supervisor deaths, network audit, audit retention, events,
//! webhook delivery), and calls the engine and the store.
//!
//! Data flows one way: surface → [`Control`] → engine (→ driver) and store.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod access;
mod audit;
mod build;
pub mod capacity;
mod charges;
mod config;
mod delivery;
mod entries;
mod error;
pub mod events;
mod exec;
mod files;
pub mod images;
mod keys;
mod lease;
mod lifecycle;
mod metrics;
mod network;
mod plan;
mod ports;
mod recovery;
pub mod sampler;
mod services;
mod snapshots;
mod terminal;
pub mod transitions;
mod webhooks;

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use sandlot_engine::Engine;
use sandlot_store::Store;

pub use access::same_bytes;
pub use build::BuildFailure;
pub use charges::{ImageUpload, UPLOAD_DEADLINE, UPLOAD_IDLE};
pub use config::{Config, ConfigError, Defaults};
pub use error::{Error, Fault, Kind, Result};
pub use exec::Started;
pub use files::{SandboxPath, Upload};
pub use lease::{KeyLease, LEASE_FULL_CHECK, LEASE_RECHECK};
pub use lifecycle::Created;
pub use ports::{Ports, Preview};
pub use recovery::Recovered;
pub use sampler::{MetricsConfig, MetricsReport};
pub use sandlot_engine::WriteOptions;
pub use sandlot_engine::{FileStream, Follow, MkdirMode, Process, RawEvent, WatchStream};
pub use services::Services;
pub use terminal::{
    TerminalSlot, MAX_TERMINALS, MAX_TERMINALS_PER_SANDBOX, MAX_TERMINALS_PER_TENANT, TERMINAL_SCROLLBACK_BYTES,
};

/// Who is calling: the tenant an API key stands for. Surfaces get one from [`Control::authenticate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant whose sandboxes the caller sees.
    pub tenant: String,
    /// Whether the key is the admin's (keys, tenants, the whole audit log).
    pub admin: bool,
}

/// The control layer (see the crate's documentation).
pub struct Control {
    store: Box<dyn Store>,
    engine: Arc<Engine>,
    cfg: Config,
    entries: entries::Entries,
    ledger: capacity::Ledger,
    audit_gate: audit::Gate,
    images: Option<images::Images>,
    /// The access tokens' server secret, read from the store once (on first use): credential checks
    /// then cost no store write.
    access_secret: std::sync::OnceLock<[u8; 32]>,
    /// Lifecycle events: the newest id (wakes the webhook deliveries) and the OOM counts seen.
    events: Arc<events::Hub>,
    /// Every sandbox's recent metrics samples (the sampler service fills them).
    samples: sampler::Samples,
    /// This control layer itself, for work that outlives the call that starts it (watching a start
    /// command started from `boot`, which borrows `self`).
    me: Weak<Control>,
    /// Keys revoked through this control layer so far: a connection holding a key ([`KeyLease`])
    /// reads its key again when this moves.
    key_revocations: std::sync::atomic::AtomicU64,
    /// Each tenant's pool for its watches' queued events, over all its sandboxes.
    watch_pools: files::WatchPools,
}

impl Control {
    /// The control layer over `engine` and `store`, with the host's capacity `host` and, when the
    /// server keeps images, their store and registry client.
    pub fn new(
        engine: Arc<Engine>,
        store: Box<dyn Store>,
        cfg: Config,
        host: capacity::Host,
        images: Option<images::Images>,
    ) -> Arc<Control> {
        let ledger = capacity::Ledger::new(host, cfg.overcommit, cfg.max_sandboxes)
            .with_pids_overhead(engine.supervisor_pids())
            .with_persistent_quota(cfg.persistent);
        Arc::new_cyclic(|me| Control {
            store,
            engine,
            cfg,
            entries: Default::default(),
            ledger,
            audit_gate: Default::default(),
            images,
            access_secret: std::sync::OnceLock::new(),
            events: Default::default(),
            samples: Default::default(),
            me: me.clone(),
            key_revocations: Default::default(),
            watch_pools: Default::default(),
        })
    }

    /// The validated configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Whether sandboxes can be persistent on this server (it has the layers volume, not
    /// `--no-disk-quota`): surfaces whose pause keeps files across stops and restarts ask first.
    pub fn can_persist(&self) -> bool {
        self.engine.disk_limits()
    }

    /// `GET /healthz`: up, and the host features it runs without (checked once, at start-up).
    pub fn health(&self) -> sandlot_api::Health {
        sandlot_api::Health { status: "ok".into(), degraded: self.cfg.degraded.clone() }
    }
}

/// Locks `m`, going on with the data of a holder that panicked: every value kept under these locks
/// (the entry maps, preview tokens, audit budgets, capacity reservations) is whole after each statement,
/// so a panic elsewhere never leaves it half-changed.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests;
