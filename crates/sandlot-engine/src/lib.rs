//! The sandlot engine: sandbox lifecycle, processes and file operations, over the supervisor protocol.
//!
//! The engine never sees HTTP or SQL and holds no `unsafe`. The control layer (`sandlot-control`)
//! decides what to do and records it; the engine does it, through a [`Driver`] that does the host's
//! part: `sandlot_driver_linux::LinuxDriver` in the daemon, `fake::FakeDriver` in tests (feature
//! `fake`). Nothing here knows which host it runs on.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod budget;
pub mod driver;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
mod files;
pub mod network;
mod output;
mod process;
mod sandbox;

use std::collections::{HashMap, HashSet};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use driver::{Driver, HostCapacity, Resources, SnapshotTaken, Usage};
pub use files::WriteOptions;
pub use network::{NetEvent, NetworkSettings, Policy, PolicyError};
pub use process::{Follow, Process, ProcessMeta, RawEvent};
pub use sandbox::{ExecSpec, FileStream, NetCounters, Sandbox, WatchStream};
/// Categories of file-operation failure, in [`EngineError::File`].
pub use sandlot_protocol::{FileErrorKind, MkdirMode};

/// Engine configuration.
#[derive(Clone)]
pub struct EngineConfig {
    /// How long a sandbox may take from clone to its supervisor's `Ready`.
    pub start_timeout: Duration,
    /// Network settings shared by every sandbox (resolver overrides, host addresses, dialer).
    pub net: Arc<sandlot_netproxy::egress::EgressShared>,
}

/// What a sandbox is started with.
#[derive(Debug, Clone)]
pub struct StartSpec {
    /// Image to boot: `host` or an image root's key (see [`driver::LaunchSpec::image`]).
    pub image: String,
    /// Its limits.
    pub resources: Resources,
    /// Host slot (uid range) to reuse if free (a restarted sandbox keeps its file owners).
    pub preferred_slot: Option<u32>,
    /// Where the writable layer comes from.
    pub source: LayerSource,
    /// Egress policy; `None` (or mode deny) leaves the sandbox with loopback only.
    pub network: Option<Policy>,
    /// A build step's sandbox, whose writable layer becomes an image layer: `/tmp` is the image's
    /// directory, not a tmpfs (`COPY x /tmp/` then `RUN sh /tmp/x`, as in Docker), and nothing of a
    /// sandbox's own (`/home/user`, `/run`, …) is added to the tree.
    pub build_step: bool,
}

/// Origin of a sandbox's writable layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerSource {
    /// A new, empty layer.
    Fresh,
    /// The layer the sandbox already has (resume after stop); files were owned by `preferred_slot`.
    Existing,
    /// A copy-on-write copy of snapshot `id`.
    Snapshot {
        /// Snapshot id.
        id: String,
        /// Who owns the snapshot's files, as the driver noted it ([`SnapshotTaken::owner`]).
        owner: u32,
    },
}

/// Engine failures, by who is at fault.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No running sandbox with this id in the engine.
    #[error("sandbox is not running")]
    NotRunning,
    /// The sandbox's supervisor is gone (it was stopped, killed or crashed).
    #[error("sandbox {0} is no longer running")]
    Gone(String),
    /// The sandbox could not be started; the reason names the failed step.
    #[error("sandbox failed to start: {0}")]
    StartFailed(String),
    /// Nothing accepts connections on the asked port inside the sandbox.
    #[error("{0}")]
    PortUnreachable(String),
    /// The sandbox's supervisor is at one of its concurrency limits (connections, file operations,
    /// threads); retrying later may work.
    #[error("{0}")]
    Busy(String),
    /// Unknown image.
    #[error("image {0:?} is not on this host (pull or import it again)")]
    UnknownImage(String),
    /// A stopped sandbox's writable layer is gone from the host.
    #[error("host: the writable layer of {0} is missing")]
    LayerMissing(String),
    /// The operation needs the btrfs layers volume, which this server runs without.
    #[error("host: {0} need the layers volume (the server runs with --no-disk-quota)")]
    NoLayersVolume(&'static str),
    /// A host-side step failed (layers, uid ranges, snapshots).
    #[error("host: {0}")]
    Io(#[from] io::Error),
    /// A driver's own host step failed (a cgroup's, on Linux).
    #[error("host: {0}")]
    Host(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A blocking host step panicked or was cancelled.
    #[error("host: {0}")]
    Task(#[from] tokio::task::JoinError),
    /// A frame to or from the supervisor could not be encoded or read.
    #[error("supervisor protocol: {0}")]
    Protocol(#[from] sandlot_protocol::FrameError),
    /// The supervisor answered what was not asked (it is untrusted: the answer is refused).
    #[error("{0}")]
    Violation(String),
    /// Holding this process's output would pass the sandbox's or the daemon's output budget.
    #[error("{0}")]
    OutputBudget(String),
    /// A file operation failed inside the sandbox.
    #[error("{message}")]
    File {
        /// Category.
        kind: FileErrorKind,
        /// Message with the sandbox path.
        message: String,
    },
}

impl EngineError {
    /// A driver's own host failure, with its cause kept.
    pub fn host(e: impl std::error::Error + Send + Sync + 'static) -> EngineError {
        EngineError::Host(Box::new(e))
    }
}

/// What a start-up sweep removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct SweepReport {
    /// Cgroups not explained by a live sandbox.
    pub cgroups: Vec<String>,
    /// Layer directories not explained by a kept sandbox.
    pub layers: Vec<String>,
}

/// The engine: all running sandboxes of this daemon.
pub struct Engine {
    cfg: EngineConfig,
    driver: Arc<dyn Driver>,
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    deaths_tx: tokio::sync::mpsc::UnboundedSender<Death>,
    /// Process output all sandboxes together may hold in the daemon.
    output_budget: Arc<budget::Budget>,
    deaths_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Death>>>,
    net_tx: tokio::sync::mpsc::UnboundedSender<NetEvent>,
    net_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<NetEvent>>>,
}

impl Engine {
    /// An engine over `driver`; `output_bytes` is what all sandboxes' process output together may
    /// hold in the daemon.
    pub fn new(driver: Arc<dyn Driver>, cfg: EngineConfig, output_bytes: u64) -> Arc<Self> {
        let (deaths_tx, deaths_rx) = tokio::sync::mpsc::unbounded_channel();
        let (net_tx, net_rx) = tokio::sync::mpsc::unbounded_channel();
        Arc::new(Engine {
            cfg,
            driver,
            sandboxes: Mutex::new(HashMap::new()),
            deaths_tx,
            output_budget: budget::Budget::new(output_bytes.max(budget::SANDBOX_OUTPUT_BYTES)),
            deaths_rx: Mutex::new(Some(deaths_rx)),
            net_tx,
            net_rx: Mutex::new(Some(net_rx)),
        })
    }

    /// Bytes of process output all sandboxes hold or have reserved in the daemon-wide pool.
    pub fn output_used(&self) -> u64 {
        self.output_budget.used()
    }

    /// Network decisions of every sandbox (for the audit log); taken once.
    pub fn take_net_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<NetEvent>> {
        lock(&self.net_rx).take()
    }

    /// Compiles a network spec against this host (its own addresses are always denied), with the
    /// always-denied ranges `exempt` lifted (an admin's opt-in for the sandbox's tenant).
    pub fn compile_network(&self, spec: &sandlot_api::NetworkSpec, exempt: &[String]) -> Result<Policy, PolicyError> {
        Policy::compile(spec, &self.cfg.net.host_nets, exempt)
    }

    /// Reads the host's networks again; returns the new always-denied list when it changed.
    pub async fn refresh_host_networks(&self) -> Option<Vec<String>> {
        let driver = Arc::clone(&self.driver);
        let now = tokio::task::spawn_blocking(move || network::cidrs(driver.host_networks())).await.ok()?;
        let nets = &self.cfg.net.host_nets;
        (!now.is_empty() && nets.replace(now)).then(|| nets.list())
    }

    /// The host network (its own address, an on-link network or a default gateway) holding `ip`,
    /// as CIDR text: what sandboxes are always denied, and webhooks too.
    pub fn host_network_of(&self, ip: std::net::IpAddr) -> Option<String> {
        self.cfg.net.host_nets.find(ip).map(|c| c.to_string())
    }

    /// The host networks always denied to sandboxes, for the log.
    pub fn host_networks(&self) -> Vec<String> {
        self.cfg.net.host_nets.list()
    }

    /// What the host can give sandboxes, as the driver reads it. Blocking (start-up).
    pub fn host_capacity(&self) -> io::Result<HostCapacity> {
        self.driver.capacity()
    }

    /// Process ids each sandbox holds beyond its own limit, for what the driver runs in it.
    pub fn supervisor_pids(&self) -> u64 {
        self.driver.supervisor_pids()
    }

    /// Environment every command gets so that its TLS stacks trust the image's bundle.
    pub fn tls_env(&self) -> &'static [(&'static str, &'static str)] {
        self.driver.tls_env()
    }

    /// Applies `policy` to running sandbox `id` (new connections and lookups), creating its network
    /// link on first use.
    pub async fn set_network(&self, id: &str, policy: Policy) -> Result<(), EngineError> {
        let sb = self.get(id).ok_or(EngineError::NotRunning)?;
        self.attach_network(&sb, policy).await
    }

    async fn attach_network(&self, sb: &Arc<Sandbox>, policy: Policy) -> Result<(), EngineError> {
        if let Some(net) = sb.net() {
            net.set_policy(policy);
            return Ok(());
        }
        let instance = sb.instance();
        let egress = tokio::task::spawn_blocking(move || instance.attach_egress()).await??;
        let net =
            sandlot_netproxy::egress::SandboxNet::new(&sb.id, policy, Arc::clone(&self.cfg.net), self.net_tx.clone());
        let task = net.start(egress.tcp4, egress.tcp6, egress.udp4, egress.udp6, egress.keep)?;
        sb.set_net(net, task);
        Ok(())
    }

    /// Sandboxes whose supervisor ended without being asked to, with the reason; taken once.
    pub fn take_deaths(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Death>> {
        lock(&self.deaths_rx).take()
    }

    /// Whether writable layers have an enforced size limit.
    pub fn disk_limits(&self) -> bool {
        self.driver.disk_limits()
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Sandbox>>> {
        lock(&self.sandboxes)
    }

    /// Whether `name` is an image this engine can boot.
    pub fn has_image(&self, name: &str) -> bool {
        self.driver.has_image(name)
    }

    /// Makes the root of image `key` from `layers` (bottom first) unless it exists, sending progress
    /// on `events`; what it unpacks may add `max_bytes` to the layers volume and take until `deadline`.
    pub async fn prepare_image(
        &self,
        key: String,
        layers: Vec<driver::LayerBlob>,
        max_bytes: u64,
        deadline: std::time::Instant,
        events: tokio::sync::mpsc::UnboundedSender<driver::PrepareEvent>,
    ) -> Result<u64, EngineError> {
        let driver = Arc::clone(&self.driver);
        tokio::task::spawn_blocking(move || {
            driver.prepare_image(&key, &layers, max_bytes, deadline, &mut |e| {
                let _ = events.send(e);
            })
        })
        .await?
    }

    /// Resolves image root `key`'s `USER` (`spec`) in its own account files.
    pub async fn image_user(&self, key: String, spec: String) -> Result<driver::ImageUser, EngineError> {
        let driver = Arc::clone(&self.driver);
        tokio::task::spawn_blocking(move || driver.image_user(&key, &spec)).await?
    }

    /// Removes image roots and layer chains that nothing keeps; returns the digests that went.
    pub async fn remove_unused_images(
        &self,
        keep_roots: HashSet<String>,
        keep_chains: HashSet<String>,
        keep_blobs: HashSet<String>,
    ) -> Result<Vec<String>, EngineError> {
        let driver = Arc::clone(&self.driver);
        Ok(tokio::task::spawn_blocking(move || driver.remove_unused_images(&keep_roots, &keep_chains, &keep_blobs))
            .await?)
    }

    /// Removes cgroups and layers of sandboxes not in `keep` (sandboxes the store says still exist).
    /// Processes are already gone: they died with the previous daemon (PDEATHSIG).
    pub async fn sweep(&self, keep: HashSet<String>) -> Result<SweepReport, EngineError> {
        let running: HashSet<String> = self.running_ids().into_iter().collect();
        let driver = Arc::clone(&self.driver);
        Ok(tokio::task::spawn_blocking(move || driver.sweep(&keep, &running)).await?)
    }

    /// Starts sandbox `id` and waits until its supervisor is ready.
    pub async fn start(self: &Arc<Self>, id: &str, spec: StartSpec) -> Result<Arc<Sandbox>, EngineError> {
        if !self.has_image(&spec.image) {
            return Err(EngineError::UnknownImage(spec.image));
        }
        let resumed = spec.source == LayerSource::Existing;
        let network = spec.network.clone();
        let t0 = std::time::Instant::now();
        let (driver, id_owned, resources) = (Arc::clone(&self.driver), id.to_string(), spec.resources);
        let launched = tokio::task::spawn_blocking(move || {
            driver.launch(&driver::LaunchSpec {
                id: &id_owned,
                image: &spec.image,
                resources: spec.resources,
                preferred_slot: spec.preferred_slot,
                source: &spec.source,
                build_step: spec.build_step,
            })
        })
        .await??;
        let sb = Sandbox::attach(
            id.to_string(),
            launched,
            resources,
            self.deaths_tx.clone(),
            Arc::clone(&self.output_budget),
        );
        let t_launched = t0.elapsed();
        match tokio::time::timeout(self.cfg.start_timeout, sb.ready()).await {
            Ok(Ok(())) => {
                tracing::debug!(sandbox = id, ?t_launched, ready = ?t0.elapsed(), "sandbox started");
            }
            Ok(Err(reason)) => {
                sb.destroy(!resumed).await;
                return Err(EngineError::StartFailed(reason));
            }
            Err(_) => {
                sb.destroy(!resumed).await;
                return Err(EngineError::StartFailed(format!(
                    "supervisor not ready within {:?}",
                    self.cfg.start_timeout
                )));
            }
        }
        if let Some(policy) = network.filter(|p| !p.denies_all()) {
            if let Err(e) = self.attach_network(&sb, policy).await {
                sb.destroy(!resumed).await;
                return Err(EngineError::StartFailed(format!("network: {e}")));
            }
        }
        self.map().insert(id.to_string(), Arc::clone(&sb));
        Ok(sb)
    }

    /// The running sandbox `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.map().get(id).cloned()
    }

    /// Ids of every sandbox the engine runs.
    pub fn running_ids(&self) -> Vec<String> {
        self.map().keys().cloned().collect()
    }

    /// Kills sandbox `id`'s processes and removes its cgroup and layer. Idempotent.
    pub async fn destroy(&self, id: &str) -> Result<(), EngineError> {
        let sb = self.map().remove(id);
        match sb {
            Some(sb) => sb.destroy(true).await,
            None => {
                // Not running here (failed start, or a previous daemon's): clear what may remain on disk.
                let (driver, id) = (Arc::clone(&self.driver), id.to_string());
                tokio::task::spawn_blocking(move || driver.remove(&id)).await??;
            }
        }
        Ok(())
    }

    /// Stops sandbox `id`: every process ends, the cgroup goes, the writable layer stays (synced to disk
    /// before this returns).
    pub async fn stop(&self, id: &str) -> Result<(), EngineError> {
        let sb = self.map().remove(id);
        if let Some(sb) = sb {
            sb.destroy(false).await;
        }
        let (driver, id) = (Arc::clone(&self.driver), id.to_string());
        tokio::task::spawn_blocking(move || driver.sync(&id)).await??;
        Ok(())
    }

    /// What running sandbox `id` uses now.
    pub async fn usage(&self, id: &str) -> Result<Usage, EngineError> {
        let sb = self.get(id).ok_or(EngineError::NotRunning)?;
        let instance = sb.instance();
        Ok(tokio::task::spawn_blocking(move || instance.usage(true)).await?)
    }

    /// What every running sandbox uses now, with its network's counters: one blocking task reads them
    /// all, one after the other (the sampler's pass; it never holds the sandbox map while reading).
    /// The writable layer's size is read only for the sandboxes `disk` names.
    pub async fn usage_all(&self, disk: impl Fn(&str) -> bool) -> Vec<(String, Usage, NetCounters)> {
        type Reading = (String, Arc<dyn driver::Instance>, NetCounters, bool);
        let running: Vec<Reading> =
            self.map().values().map(|sb| (sb.id.clone(), sb.instance(), sb.net_counters(), disk(&sb.id))).collect();
        tokio::task::spawn_blocking(move || {
            running.into_iter().map(|(id, instance, net, disk)| (id, instance.usage(disk), net)).collect()
        })
        .await
        .unwrap_or_default()
    }

    /// Freezes (`true`) or thaws every process of running sandbox `id`.
    pub async fn freeze(&self, id: &str, frozen: bool) -> Result<(), EngineError> {
        let sb = self.get(id).ok_or(EngineError::NotRunning)?;
        let instance = sb.instance();
        tokio::task::spawn_blocking(move || instance.freeze(frozen)).await??;
        Ok(())
    }

    /// Makes read-only snapshot `snap` of sandbox `id`'s writable layer (running or stopped), whose
    /// files belong to host slot `slot`. O(1) on the layers volume: a btrfs snapshot after a syncfs.
    pub async fn snapshot(&self, id: &str, slot: u32, snap: &str) -> Result<SnapshotTaken, EngineError> {
        let (driver, id, snap) = (Arc::clone(&self.driver), id.to_string(), snap.to_string());
        tokio::task::spawn_blocking(move || driver.snapshot(&id, slot, &snap)).await?
    }

    /// Deletes snapshot `snap`.
    pub async fn delete_snapshot(&self, snap: &str) -> Result<(), EngineError> {
        let (driver, snap) = (Arc::clone(&self.driver), snap.to_string());
        tokio::task::spawn_blocking(move || driver.delete_snapshot(&snap)).await?
    }

    /// Writes the writable layer `from` names to `out` as an OCI layer tar and closes `out` (a pipe's
    /// reader sees the end of the layer as its end of file).
    pub async fn export_layer(
        &self,
        from: driver::ExportFrom,
        out: std::fs::File,
    ) -> Result<driver::Exported, EngineError> {
        let driver = Arc::clone(&self.driver);
        tokio::task::spawn_blocking(move || {
            let mut buf = io::BufWriter::with_capacity(1 << 20, out);
            let report = driver.export_layer(&from, &mut buf)?;
            io::Write::flush(&mut buf)?;
            Ok(report)
        })
        .await?
    }

    /// Removes snapshots not in `keep` (start-up garbage collection).
    pub async fn sweep_snapshots(&self, keep: HashSet<String>) -> Result<Vec<String>, EngineError> {
        let driver = Arc::clone(&self.driver);
        Ok(tokio::task::spawn_blocking(move || driver.sweep_snapshots(&keep)).await?)
    }

    /// Destroys every sandbox and releases what the driver holds (graceful shutdown).
    pub async fn shutdown(&self) {
        let ids = self.running_ids();
        for id in ids {
            let _ = self.destroy(&id).await;
        }
        let driver = Arc::clone(&self.driver);
        let _ = tokio::task::spawn_blocking(move || driver.shutdown()).await;
    }
}

/// Locks `m`, going on with the data of a holder that panicked: every value kept under these locks
/// is whole after each statement (maps, counters), so a panic elsewhere never leaves it half-changed.
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Waits on `cv` with `guard`, as [`lock`] does with poison (the fake driver's peer state is whole
/// after each statement too).
#[cfg(any(test, feature = "fake"))]
pub(crate) fn wait<'a, T>(
    cv: &std::sync::Condvar,
    guard: std::sync::MutexGuard<'a, T>,
) -> std::sync::MutexGuard<'a, T> {
    cv.wait(guard).unwrap_or_else(|p| p.into_inner())
}

/// A supervisor that ended without being asked to.
#[derive(Debug, Clone)]
pub struct Death {
    /// The sandbox.
    pub id: String,
    /// Host pid of the supervisor that died: tells this instance from a later one of the same sandbox.
    pub pid: i32,
    /// What ended it.
    pub why: String,
}
