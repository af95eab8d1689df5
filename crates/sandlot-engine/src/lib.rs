//! The sandlot engine: sandbox lifecycle, processes and file operations, over the supervisor protocol.
//!
//! The engine never sees HTTP or SQL and holds no `unsafe`. The HTTP layer validates requests, records
//! them in the store and calls in here; the Linux driver (`sandlot-linux`) does the privileged work.

pub mod budget;
mod files;
mod output;
mod process;
mod sandbox;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sandlot_linux::cgroup::{CgroupError, CgroupLimits, Cgroups};
use sandlot_linux::launch::{LaunchRequest, Launcher};
use sandlot_linux::layers::Layer;
use sandlot_linux::{image, ContainerSpec};
/// Categories of file-operation failure, in [`EngineError::File`].
pub use sandlot_protocol::FileErrorKind;

pub use process::{Follow, Process};
pub use sandbox::{ExecSpec, FileStream, Sandbox};

/// Engine configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Root of the daemon's state (layers, images).
    pub state_dir: PathBuf,
    /// How long a sandbox may take from clone to its supervisor's `Ready`.
    pub start_timeout: Duration,
    /// Defence layers in force (all, except in the escape suite's layer-by-layer tests).
    pub layers: sandlot_linux::Layers,
    /// Network settings shared by every sandbox (resolver overrides, host addresses, dialer).
    pub net: Arc<sandlot_netproxy::egress::Shared>,
    /// Size of the btrfs layers volume in GiB; `None` keeps layers on the state filesystem with no disk
    /// limit (an explicit opt-out for hosts without btrfs).
    pub layers_volume_gb: Option<u64>,
}

/// What a sandbox is started with.
#[derive(Debug, Clone)]
pub struct StartSpec {
    /// Image name.
    pub image: String,
    /// cgroup limits.
    pub limits: CgroupLimits,
    /// Host uid-range slot to reuse if free (a restarted sandbox keeps its file owners).
    pub preferred_slot: Option<u32>,
    /// Cap on the writable layer, in bytes (ignored without a layers volume).
    pub disk_bytes: u64,
    /// Where the writable layer comes from.
    pub source: LayerSource,
    /// Egress policy; `None` (or mode deny) leaves the sandbox with loopback only.
    pub network: Option<sandlot_netproxy::policy::Policy>,
}

/// Origin of a sandbox's writable layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerSource {
    /// A new, empty layer.
    Fresh,
    /// The layer the sandbox already has (resume after stop); files were owned by `preferred_slot`.
    Existing,
    /// A copy-on-write copy of snapshot `id`, whose files are owned by host ids from `base`.
    Snapshot {
        /// Snapshot id.
        id: String,
        /// Host id of the snapshotted sandbox's root.
        base: u32,
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
    #[error("unknown image {0:?}; available: host")]
    UnknownImage(String),
    /// A host-side failure (cgroups, layers).
    #[error("host: {0}")]
    Host(String),
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

impl From<CgroupError> for EngineError {
    fn from(e: CgroupError) -> Self {
        EngineError::Host(e.to_string())
    }
}

impl From<io::Error> for EngineError {
    fn from(e: io::Error) -> Self {
        EngineError::Host(e.to_string())
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
    cgroups: Cgroups,
    launcher: Launcher,
    volume: Option<sandlot_linux::volume::Volume>,
    sandboxes: Mutex<HashMap<String, Arc<Sandbox>>>,
    deaths_tx: tokio::sync::mpsc::UnboundedSender<Death>,
    /// Process output all sandboxes together may hold in the daemon.
    output_budget: Arc<budget::Budget>,
    deaths_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Death>>>,
    net_tx: tokio::sync::mpsc::UnboundedSender<sandlot_netproxy::egress::NetEvent>,
    net_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<sandlot_netproxy::egress::NetEvent>>>,
    /// Held open for the daemon's lifetime: its closing tells the thaw watchdog (cgroup v1) to thaw
    /// whatever is still frozen.
    _thaw_watchdog: Option<std::os::fd::OwnedFd>,
    /// The exclusive lock on the state directory (shared with the thaw watchdog, which releases it last).
    _state_lock: std::os::fd::OwnedFd,
}

impl Engine {
    /// Detects cgroups, prepares directories and starts the launcher thread.
    pub fn new(cfg: EngineConfig) -> Result<Arc<Self>, EngineError> {
        // First: nothing below may touch the state of a daemon already running on it.
        let state_lock = sandlot_linux::lock_state_dir(&cfg.state_dir, std::time::Duration::from_secs(5))?;
        let instance = instance_id(&cfg.state_dir)?;
        let cgroups = Cgroups::detect(&instance)?;
        let volume = match cfg.layers_volume_gb {
            Some(gb) => Some(sandlot_linux::volume::Volume::open(&cfg.state_dir, gb)?),
            None => None,
        };
        std::fs::create_dir_all(cfg.state_dir.join("images"))?;
        // Build the default image now, once, rather than racing to build it in concurrent first creates.
        image::open(&cfg.state_dir.join("images"), "host")?;
        if let Some(broker) = &cfg.net.broker {
            image::install_ca(&cfg.state_dir.join("images"), broker.ca_pem())?;
        }
        let launcher = Launcher::start()?;
        // Last of the fallible steps: a start that fails before this point never thaws anything.
        let thaw_watchdog = match cgroups.freezer_base() {
            Some(base) => Some(sandlot_linux::cgroup::spawn_thaw_watchdog(base, &state_lock)?),
            None => None,
        };
        let (deaths_tx, deaths_rx) = tokio::sync::mpsc::unbounded_channel();
        let (net_tx, net_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(Arc::new(Engine {
            cfg,
            cgroups,
            launcher,
            volume,
            sandboxes: Mutex::new(HashMap::new()),
            deaths_tx,
            output_budget: budget::Budget::new(daemon_output_bytes()),
            deaths_rx: Mutex::new(Some(deaths_rx)),
            net_tx,
            net_rx: Mutex::new(Some(net_rx)),
            _thaw_watchdog: thaw_watchdog,
            _state_lock: state_lock,
        }))
    }

    /// Network decisions of every sandbox (for the audit log); taken once.
    pub fn take_net_events(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<sandlot_netproxy::egress::NetEvent>> {
        self.net_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Compiles a network spec against this host (its own addresses are always denied), with the
    /// always-denied ranges `exempt` lifted (an admin's opt-in for the sandbox's tenant).
    pub fn compile_network(
        &self,
        spec: &sandlot_api::NetworkSpec,
        exempt: &[String],
    ) -> Result<sandlot_netproxy::policy::Policy, String> {
        sandlot_netproxy::policy::Policy::compile(spec, &self.cfg.net.host_nets, exempt)
    }

    /// Applies `policy` to running sandbox `id` (new connections and lookups), creating its network
    /// link on first use.
    pub async fn set_network(&self, id: &str, policy: sandlot_netproxy::policy::Policy) -> Result<(), EngineError> {
        let sb = self.get(id).ok_or(EngineError::NotRunning)?;
        self.attach_network(&sb, policy).await
    }

    async fn attach_network(
        &self,
        sb: &Arc<Sandbox>,
        policy: sandlot_netproxy::policy::Policy,
    ) -> Result<(), EngineError> {
        if let Some(net) = sb.net() {
            net.set_policy(policy);
            return Ok(());
        }
        let pid = sb.pid();
        let egress = tokio::task::spawn_blocking(move || sandlot_linux::net::attach_egress(pid))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        let sandlot_linux::net::EgressSockets { tcp4, tcp6, udp4, udp6, steering } = egress;
        let fds = sandlot_netproxy::egress::EgressFds { tcp4, tcp6, udp4, udp6 };
        let net =
            sandlot_netproxy::egress::SandboxNet::new(&sb.id, policy, Arc::clone(&self.cfg.net), self.net_tx.clone());
        let task = net.start(fds, steering)?;
        sb.set_net(net, task);
        Ok(())
    }

    /// Sandboxes whose supervisor ended without being asked to, with the reason; taken once.
    pub fn take_deaths(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Death>> {
        self.deaths_rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn sandboxes_dir(&self) -> PathBuf {
        match &self.volume {
            Some(v) => v.sandboxes(),
            None => self.cfg.state_dir.join("sandboxes"),
        }
    }

    /// Whether writable layers have an enforced size limit.
    pub fn disk_limits(&self) -> bool {
        self.volume.is_some()
    }

    fn images_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("images")
    }

    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Sandbox>>> {
        self.sandboxes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `name` is an image this engine can boot.
    pub fn has_image(&self, name: &str) -> bool {
        image::IMAGES.contains(&name)
    }

    /// Removes cgroups and layers of sandboxes not in `keep` (sandboxes the store says still exist).
    /// Processes are already gone: they died with the previous daemon (PDEATHSIG).
    pub fn sweep(&self, keep: &HashSet<String>) -> SweepReport {
        let mut report = SweepReport::default();
        for name in self.cgroups.existing() {
            if self.map().contains_key(&name) {
                continue;
            }
            if self.cgroups.handle(&name).destroy().is_ok() {
                report.cgroups.push(name);
            }
        }
        if let Ok(rd) = std::fs::read_dir(self.sandboxes_dir()) {
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                if keep.contains(&name) || self.map().contains_key(&name) {
                    continue;
                }
                if Layer::at(&self.sandboxes_dir(), &name).remove().is_ok() {
                    report.layers.push(name);
                }
            }
        }
        report
    }

    /// Starts sandbox `id` and waits until its supervisor is ready.
    pub async fn start(self: &Arc<Self>, id: &str, spec: StartSpec) -> Result<Arc<Sandbox>, EngineError> {
        if !self.has_image(&spec.image) {
            return Err(EngineError::UnknownImage(spec.image));
        }
        let this = Arc::clone(self);
        let id_owned = id.to_string();
        let limits = spec.limits;
        let resumed = spec.source == LayerSource::Existing;
        let network = spec.network.clone();
        let t0 = std::time::Instant::now();
        let prepared = tokio::task::spawn_blocking(move || this.prepare(&id_owned, &spec))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        let sb =
            Sandbox::attach(id.to_string(), prepared, limits, self.deaths_tx.clone(), Arc::clone(&self.output_budget));
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

    /// Host-side preparation and clone (blocking work).
    fn prepare(&self, id: &str, spec: &StartSpec) -> Result<Prepared, EngineError> {
        let img = image::open(&self.images_dir(), &spec.image)?;
        let slot = sandlot_linux::ids::claim(spec.preferred_slot)?;
        let ids = slot.ids();
        let layer = Layer::at(&self.sandboxes_dir(), id);
        let disk = self.volume.as_ref().map(|_| spec.disk_bytes);
        let fresh = spec.source != LayerSource::Existing;
        let cleanup = |layer: &Layer| {
            if fresh {
                let _ = layer.remove();
            }
        };
        match &spec.source {
            LayerSource::Fresh => layer.create(ids, &hostname(id), disk)?,
            LayerSource::Existing => {
                if !layer.upper.is_dir() {
                    return Err(EngineError::Host(format!("the writable layer of {id} is missing")));
                }
                if let Ok(n) = layer.remove_partial_uploads() {
                    if n > 0 {
                        tracing::info!(sandbox = id, "removed {n} partial upload(s) cut short by a crash");
                    }
                }
                let old = spec.preferred_slot.map(|s| sandlot_linux::IdRange::for_slot(s).base);
                if let Some(old) = old.filter(|b| *b != ids.base) {
                    // Its old host id range is taken by another sandbox now: re-own the files.
                    sandlot_linux::volume::shift_owners(&layer.dir, old, ids.base)?;
                }
            }
            LayerSource::Snapshot { id: snap, base } => {
                let result = (|| -> std::io::Result<()> {
                    std::fs::create_dir_all(self.sandboxes_dir())?;
                    sandlot_linux::volume::snapshot(&self.snapshots_dir().join(snap), &layer.dir, false)?;
                    sandlot_linux::volume::shift_owners(&layer.dir, *base, ids.base)?;
                    if let Some(bytes) = disk {
                        sandlot_linux::volume::limit_subvolume(&layer.dir, bytes)?;
                    }
                    layer.rename_host(ids, &hostname(id))
                })();
                if let Err(e) = result {
                    cleanup(&layer);
                    return Err(e.into());
                }
            }
        }
        let cgroup = match self.cgroups.create(id, spec.limits) {
            Ok(c) => c,
            Err(e) => {
                cleanup(&layer);
                return Err(e.into());
            }
        };
        let container = ContainerSpec {
            root: layer.root.clone(),
            lower: img.lower.clone(),
            upper: layer.upper.clone(),
            work: layer.work.clone(),
            ro_binds: img.ro_binds.clone(),
            hostname: hostname(id),
            // Half the memory limit: filling /tmp (whose pages count as memory) then ends in ENOSPC,
            // not in the OOM killer.
            tmp_mb: (spec.limits.memory_bytes >> 21).max(8),
            layers: self.cfg.layers,
            work_cgroup_fds: cgroup.work_procs().len() as u32,
            max_file_bytes: disk.unwrap_or(0),
        };
        match self.launcher.launch(LaunchRequest { spec: container, ids, cgroup: cgroup.clone() }) {
            Ok(launched) => Ok(Prepared { launched, layer, cgroup, slot }),
            Err(e) => {
                let _ = cgroup.destroy();
                cleanup(&layer);
                Err(EngineError::StartFailed(format!("launch: {e}")))
            }
        }
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
                let cg = self.cgroups.handle(id);
                let dir = self.sandboxes_dir();
                let id = id.to_string();
                tokio::task::spawn_blocking(move || {
                    let _ = cg.destroy();
                    let _ = Layer::at(&dir, &id).remove();
                })
                .await
                .map_err(|e| EngineError::Host(e.to_string()))?;
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
        let layer = Layer::at(&self.sandboxes_dir(), id);
        tokio::task::spawn_blocking(move || sandlot_linux::volume::sync(&layer.dir))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        Ok(())
    }

    /// Freezes (`true`) or thaws every process of running sandbox `id` (cgroup freezer).
    pub async fn freeze(&self, id: &str, frozen: bool) -> Result<(), EngineError> {
        let sb = self.get(id).ok_or(EngineError::NotRunning)?;
        let cg = sb.cgroup().clone();
        tokio::task::spawn_blocking(move || cg.freeze(frozen))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        Ok(())
    }

    fn snapshots_dir(&self) -> PathBuf {
        match &self.volume {
            Some(v) => v.root.join("snapshots"),
            None => self.cfg.state_dir.join("snapshots"),
        }
    }

    /// Makes read-only snapshot `snap` of sandbox `id`'s writable layer (running or stopped). O(1) on
    /// the layers volume: a btrfs snapshot after a syncfs. Returns the bytes the snapshot references.
    pub async fn snapshot(&self, id: &str, snap: &str) -> Result<u64, EngineError> {
        if self.volume.is_none() {
            return Err(EngineError::Host(
                "snapshots need the layers volume (the server runs with --no-disk-quota)".into(),
            ));
        }
        let src = Layer::at(&self.sandboxes_dir(), id).dir;
        let dst = self.snapshots_dir().join(snap);
        let bytes = tokio::task::spawn_blocking(move || -> std::io::Result<u64> {
            std::fs::create_dir_all(dst.parent().expect("has a parent"))?;
            sandlot_linux::volume::sync(&src)?;
            sandlot_linux::volume::snapshot(&src, &dst, true)?;
            sandlot_linux::volume::sync(&dst)?;
            let bytes = sandlot_linux::volume::referenced_bytes(&dst);
            if bytes.is_err() {
                let _ = sandlot_linux::volume::remove_subvolume(&dst);
            }
            bytes
        })
        .await
        .map_err(|e| EngineError::Host(e.to_string()))??;
        Ok(bytes)
    }

    /// Deletes snapshot `snap`.
    pub async fn delete_snapshot(&self, snap: &str) -> Result<(), EngineError> {
        let dir = self.snapshots_dir().join(snap);
        tokio::task::spawn_blocking(move || sandlot_linux::volume::remove_subvolume(&dir))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        Ok(())
    }

    /// Removes snapshots not in `keep` (start-up garbage collection).
    pub fn sweep_snapshots(&self, keep: &HashSet<String>) -> Vec<String> {
        let mut removed = Vec::new();
        if let Ok(rd) = std::fs::read_dir(self.snapshots_dir()) {
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                if !keep.contains(&name) && sandlot_linux::volume::remove_subvolume(&ent.path()).is_ok() {
                    removed.push(name);
                }
            }
        }
        removed
    }

    /// Destroys every sandbox and removes this daemon's cgroup base (graceful shutdown).
    pub async fn shutdown(&self) {
        let ids = self.running_ids();
        for id in ids {
            let _ = self.destroy(&id).await;
        }
        self.cgroups.remove_base();
    }

    /// Path of the state directory.
    pub fn state_dir(&self) -> &Path {
        &self.cfg.state_dir
    }
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

/// What `prepare` made for a sandbox on the host, handed to its [`Sandbox`].
pub(crate) struct Prepared {
    /// The cloned first process and its control socket.
    pub launched: sandlot_linux::launch::Launched,
    /// Its writable layer.
    pub layer: Layer,
    /// Its cgroup.
    pub cgroup: sandlot_linux::cgroup::SandboxCgroup,
    /// Its host uid range, held while it exists.
    pub slot: sandlot_linux::ids::Slot,
}

/// Process output every sandbox together may hold in the daemon: an eighth of the host's memory
/// (2.9 GiB on a 23 GiB host), at least one sandbox's full budget.
fn daemon_output_bytes() -> u64 {
    (sandlot_linux::host_memory_bytes().unwrap_or(0) / 8).max(budget::SANDBOX_OUTPUT_BYTES)
}

/// This state directory's instance name (random, made on first start), which names its cgroup base.
fn instance_id(state_dir: &Path) -> Result<String, EngineError> {
    let path = state_dir.join("instance-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim().to_string();
        if !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Ok(id);
        }
    }
    use rand::Rng;
    let id: String = (0..8).map(|_| format!("{:x}", rand::thread_rng().gen_range(0..16u8))).collect();
    std::fs::write(&path, &id)?;
    Ok(id)
}

/// Hostname of a sandbox: `sandlot-` and the first characters of its id.
fn hostname(id: &str) -> String {
    let short: String = id.trim_start_matches("sb_").chars().take(12).collect();
    format!("sandlot-{short}")
}
