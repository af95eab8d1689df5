//! One running sandbox: the [`Sandbox`] handle. What it does is split by subject: [`link`] is the
//! control connection to its supervisor (attach, the read loop, stream hand-off), [`processes`] its
//! processes, [`connections`] inbound TCP connections to its servers, [`transfers`] the file transfers
//! that the typed file methods (`crate::files`) run on, [`watches`] directory watches.

mod connections;
mod link;
mod processes;
mod transfers;
mod watches;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use sandlot_protocol::{encode, Request};
use tokio::sync::{mpsc, oneshot};

use crate::driver::{Instance, Resources};
use crate::{lock, EngineError};
use link::LinkState;

pub use processes::ExecSpec;
pub use transfers::FileStream;
pub use watches::WatchStream;

/// What a sandbox's network has carried, counted by the egress proxy as bytes move.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetCounters {
    /// Bytes from the sandbox to the outside, so far.
    pub bytes_out: u64,
    /// Bytes from the outside to the sandbox, so far.
    pub bytes_in: u64,
    /// TCP connections open through the proxy now.
    pub connections_open: u64,
    /// TCP connections the sandbox has opened so far (allowed or refused).
    pub connections: u64,
}

/// A running sandbox.
pub struct Sandbox {
    /// Its id.
    pub id: String,
    /// Limits it was started with.
    pub resources: Resources,
    /// Host pid of its supervisor (the sandbox's pid 1).
    supervisor_pid: i32,
    out: mpsc::Sender<Vec<u8>>,
    link: Arc<LinkState>,
    ready: Mutex<Option<oneshot::Receiver<Result<(), String>>>>,
    /// The sandbox's network (created on first use of a policy that allows anything).
    net: Mutex<Option<(Arc<sandlot_netproxy::egress::SandboxNet>, tokio::task::JoinHandle<()>)>>,
}

impl Sandbox {
    pub(crate) async fn ready(&self) -> Result<(), String> {
        let rx = lock(&self.ready).take();
        match rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err("supervisor connection dropped".into())),
            None => Ok(()),
        }
    }

    /// Host pid of the sandbox's pid 1 (its supervisor).
    pub fn supervisor_pid(&self) -> i32 {
        self.supervisor_pid
    }

    /// The sandbox's network, if it has one.
    pub fn net(&self) -> Option<Arc<sandlot_netproxy::egress::SandboxNet>> {
        lock(&self.net).as_ref().map(|(n, _)| Arc::clone(n))
    }

    pub(crate) fn set_net(&self, net: Arc<sandlot_netproxy::egress::SandboxNet>, task: tokio::task::JoinHandle<()>) {
        *lock(&self.net) = Some((net, task));
    }

    /// Bytes `(out, in)` through the sandbox's network so far.
    pub fn net_bytes(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        self.net().map_or((0, 0), |n| (n.bytes_out.load(Relaxed), n.bytes_in.load(Relaxed)))
    }

    /// Its network's counters now (all zero while it has none).
    pub fn net_counters(&self) -> NetCounters {
        use std::sync::atomic::Ordering::Relaxed;
        self.net().map_or_else(NetCounters::default, |n| NetCounters {
            bytes_out: n.bytes_out.load(Relaxed),
            bytes_in: n.bytes_in.load(Relaxed),
            connections_open: n.connections_open(),
            connections: n.connections.load(Relaxed),
        })
    }

    /// Unix ms of the last output of any process (0 if none yet).
    pub fn last_output_ms(&self) -> i64 {
        self.link.last_output_ms.load(Ordering::Relaxed)
    }

    /// OOM kills in the sandbox since its supervisor started. Reads the cgroup: blocking.
    pub fn oom_kills(&self) -> u64 {
        self.link.instance.oom_kills()
    }

    /// The host slot (uid range) it holds.
    pub fn slot(&self) -> u32 {
        self.link.instance.slot()
    }

    /// Whether the supervisor is still connected.
    pub fn alive(&self) -> bool {
        self.link.alive.load(Ordering::SeqCst)
    }

    async fn send(&self, req: &Request, payload: &[u8]) -> Result<(), EngineError> {
        let frame = encode(req, payload)?;
        if !self.alive() {
            return Err(EngineError::Gone(self.id.clone()));
        }
        self.out.send(frame).await.map_err(|_| EngineError::Gone(self.id.clone()))
    }

    /// What the driver does for this sandbox.
    pub(crate) fn instance(&self) -> Arc<dyn Instance> {
        Arc::clone(&self.link.instance)
    }

    /// Kills the sandbox and removes its cgroup; the writable layer too when `remove_layer`.
    pub(crate) async fn destroy(&self, remove_layer: bool) {
        self.link.destroying.store(true, Ordering::SeqCst);
        if let Some((_, task)) = lock(&self.net).take() {
            task.abort();
        }
        // Once pid 1 is reaped its pid may belong to another host process: signal it only before.
        // (What remains in the cgroup, teardown kills by the cgroup's own list.)
        if self.link.sandbox_end.borrow().is_none() {
            let instance = self.instance();
            let _ = tokio::task::spawn_blocking(move || instance.kill()).await;
        }
        let mut reaped = self.link.sandbox_end.clone();
        let _ = reaped.wait_for(|r| r.is_some()).await;
        let instance = self.instance();
        let _ = tokio::task::spawn_blocking(move || instance.teardown(remove_layer)).await;
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
