//! The sandlot engine: sandbox lifecycle, processes and file operations, over the supervisor protocol.
//!
//! The engine never sees HTTP or SQL and holds no `unsafe`. The HTTP layer validates requests, records
//! them in the store and calls in here; the Linux driver (`sandlot-linux`) does the privileged work.

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
use sandlot_protocol::FileErrorKind;

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
    /// Unknown image.
    #[error("unknown image {0:?}; available: host")]
    UnknownImage(String),
    /// A host-side failure (cgroups, layers).
    #[error("host: {0}")]
    Host(String),
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
    deaths_tx: tokio::sync::mpsc::UnboundedSender<(String, String)>,
    deaths_rx: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<(String, String)>>>,
}

impl Engine {
    /// Detects cgroups, prepares directories and starts the launcher thread.
    pub fn new(cfg: EngineConfig) -> Result<Arc<Self>, EngineError> {
        let instance = instance_id(&cfg.state_dir)?;
        let cgroups = Cgroups::detect(&instance)?;
        let volume = match cfg.layers_volume_gb {
            Some(gb) => Some(sandlot_linux::volume::Volume::open(&cfg.state_dir, gb)?),
            None => None,
        };
        std::fs::create_dir_all(cfg.state_dir.join("images"))?;
        let launcher = Launcher::start()?;
        let (deaths_tx, deaths_rx) = tokio::sync::mpsc::unbounded_channel();
        Ok(Arc::new(Engine {
            cfg,
            cgroups,
            launcher,
            volume,
            sandboxes: Mutex::new(HashMap::new()),
            deaths_tx,
            deaths_rx: Mutex::new(Some(deaths_rx)),
        }))
    }

    /// Sandboxes whose supervisor ended without being asked to, with the reason; taken once.
    pub fn take_deaths(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<(String, String)>> {
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
        let t0 = std::time::Instant::now();
        let prepared = tokio::task::spawn_blocking(move || this.prepare(&id_owned, &spec))
            .await
            .map_err(|e| EngineError::Host(e.to_string()))??;
        let (launched, layer, cgroup, slot) = prepared;
        let sb = Sandbox::attach(id.to_string(), launched, layer, cgroup, limits, slot, self.deaths_tx.clone());
        let t_launched = t0.elapsed();
        match tokio::time::timeout(self.cfg.start_timeout, sb.ready()).await {
            Ok(Ok(())) => {
                tracing::debug!(sandbox = id, ?t_launched, ready = ?t0.elapsed(), "sandbox started");
            }
            Ok(Err(reason)) => {
                sb.destroy().await;
                return Err(EngineError::StartFailed(reason));
            }
            Err(_) => {
                sb.destroy().await;
                return Err(EngineError::StartFailed(format!(
                    "supervisor not ready within {:?}",
                    self.cfg.start_timeout
                )));
            }
        }
        self.map().insert(id.to_string(), Arc::clone(&sb));
        Ok(sb)
    }

    /// Host-side preparation and clone (blocking work).
    fn prepare(
        &self,
        id: &str,
        spec: &StartSpec,
    ) -> Result<
        (sandlot_linux::launch::Launched, Layer, sandlot_linux::cgroup::SandboxCgroup, sandlot_linux::ids::Slot),
        EngineError,
    > {
        let img = image::open(&self.images_dir(), &spec.image)?;
        let slot = sandlot_linux::ids::claim(spec.preferred_slot)?;
        let ids = slot.ids();
        let layer = Layer::at(&self.sandboxes_dir(), id);
        let disk = self.volume.as_ref().map(|_| spec.disk_bytes);
        layer.create(ids, &hostname(id), disk)?;
        let cgroup = match self.cgroups.create(id, spec.limits) {
            Ok(c) => c,
            Err(e) => {
                let _ = layer.remove();
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
            tmp_mb: (spec.limits.memory_bytes >> 20).max(16),
            layers: self.cfg.layers,
        };
        match self.launcher.launch(LaunchRequest { spec: container, ids, cgroup: cgroup.clone() }) {
            Ok(l) => Ok((l, layer, cgroup, slot)),
            Err(e) => {
                let _ = cgroup.destroy();
                let _ = layer.remove();
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
            Some(sb) => sb.destroy().await,
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
