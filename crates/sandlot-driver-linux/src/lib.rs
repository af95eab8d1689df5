//! The Linux driver: namespaces, cgroups, overlay layers on the btrfs volume and host uid ranges, all
//! from `sandlot-linux`, behind the engine's [`Driver`] trait. The engine reaches the host only
//! through a driver, and this is the one that maps `sandlot-linux`'s own types onto the seam's.
//!
//! The binary builds it (with [`LinuxConfig`]) and hands it to the engine; what the daemon needs of
//! the host before a driver exists (its networks, memory, the checks of `sandlot doctor`) is here too.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use sandlot_linux::cgroup::{CgroupLimits, Cgroups, SandboxCgroup};
use sandlot_linux::image_store::{self, ImageStore, RootExtras};
use sandlot_linux::launch::ImageMount;
use sandlot_linux::launch::{LaunchRequest, Launcher};
use sandlot_linux::layers::Layer;
use sandlot_linux::{image, ContainerSpec};

use sandlot_engine::driver::{
    Driver, Egress, ExportFrom, Exported, HostCapacity, ImageUser, Instance, LaunchSpec, Launched, LayerBlob,
    PrepareEvent, SnapshotTaken, UnpackReport, Usage,
};
use sandlot_engine::{EngineError, LayerSource, SweepReport};

/// Process-wide host set-up the daemon does before it starts anything.
pub mod host {
    pub use sandlot_linux::volume::enter_private_mount_namespace;
    pub use sandlot_linux::{host_memory_bytes, raise_fd_limit, running_as_root};
}

/// The gateway address inside every sandbox, where the daemon answers DNS.
pub const GATEWAY_ADDR: std::net::Ipv4Addr = sandlot_linux::net::GATEWAY_ADDR;

pub use sandlot_linux::DefenceLayers;

/// The host checks of `sandlot doctor`, which `sandlot serve` also runs before it starts anything.
pub use sandlot_linux::doctor;

/// Settings of the Linux driver.
#[derive(Debug, Clone)]
pub struct LinuxConfig {
    /// Root of the daemon's state (layers, images, snapshots).
    pub state_dir: PathBuf,
    /// Defence layers in force (all, except in the escape suite's layer-by-layer tests).
    pub layers: DefenceLayers,
    /// Size of the btrfs layers volume in GiB; `None` keeps layers on the state filesystem with no disk
    /// limit (an explicit opt-out for hosts without btrfs).
    pub layers_volume_gb: Option<u64>,
    /// The egress CA's certificate (PEM), installed in every image's trust bundle.
    pub ca_pem: Option<String>,
}

/// The Linux driver.
pub struct LinuxDriver {
    cfg: LinuxConfig,
    cgroups: Cgroups,
    launcher: Launcher,
    volume: Option<sandlot_linux::volume::Volume>,
    /// Unpacked images (on the layers volume; none without it).
    images: Option<ImageStore>,
    /// Held open for the daemon's lifetime: its closing tells the thaw watchdog (cgroup v1) to thaw
    /// whatever is still frozen.
    _thaw_watchdog: Option<std::os::fd::OwnedFd>,
    /// The exclusive lock on the state directory (shared with the thaw watchdog, which releases it last).
    _state_lock: std::os::fd::OwnedFd,
}

impl LinuxDriver {
    /// Locks the state directory, detects cgroups, opens the layers volume, builds the default image
    /// and starts the launcher thread.
    pub fn new(cfg: LinuxConfig) -> Result<Self, EngineError> {
        // First: nothing below may touch the state of a daemon already running on it.
        let state_lock = sandlot_linux::lock_state_dir(&cfg.state_dir, std::time::Duration::from_secs(5))?;
        let instance = instance_id(&cfg.state_dir)?;
        sandlot_linux::kmod::filesystem("overlay", "")?;
        let cgroups = Cgroups::detect(&instance).map_err(EngineError::host)?;
        let rest = || -> Result<_, EngineError> {
            let volume = match cfg.layers_volume_gb {
                Some(gb) => Some(sandlot_linux::volume::Volume::open(&cfg.state_dir, gb)?),
                None => None,
            };
            std::fs::create_dir_all(cfg.state_dir.join("images"))?;
            // Build the default image now, once, rather than racing to build it in concurrent first creates.
            image::open(&cfg.state_dir.join("images"), "host")?;
            if let Some(pem) = &cfg.ca_pem {
                image::install_ca(&cfg.state_dir.join("images"), pem)?;
            }
            let images = match &volume {
                Some(v) => Some(ImageStore::open(&v.root)?),
                None => None,
            };
            let launcher = Launcher::start()?;
            // Last of the fallible steps: a start that fails before this point never thaws anything.
            let thaw_watchdog = match cgroups.freezer_base() {
                Some(base) => Some(sandlot_linux::cgroup::spawn_thaw_watchdog(base, &state_lock)?),
                None => None,
            };
            Ok((volume, images, launcher, thaw_watchdog))
        };
        // A start that fails past this point leaves no empty base cgroup behind (one that still holds a
        // crashed run's sandboxes stays, for the next start's sweep).
        let (volume, images, launcher, thaw_watchdog) = rest().inspect_err(|_| cgroups.remove_base())?;
        Ok(LinuxDriver {
            cfg,
            cgroups,
            launcher,
            volume,
            images,
            _thaw_watchdog: thaw_watchdog,
            _state_lock: state_lock,
        })
    }

    fn sandboxes_dir(&self) -> PathBuf {
        match &self.volume {
            Some(v) => v.sandboxes(),
            None => self.cfg.state_dir.join("sandboxes"),
        }
    }

    fn images_dir(&self) -> PathBuf {
        self.cfg.state_dir.join("images")
    }

    fn snapshots_dir(&self) -> PathBuf {
        match &self.volume {
            Some(v) => v.root.join("snapshots"),
            None => self.cfg.state_dir.join("snapshots"),
        }
    }
}

impl Driver for LinuxDriver {
    fn has_image(&self, name: &str) -> bool {
        image::IMAGES.contains(&name) || self.images.as_ref().is_some_and(|s| s.has_root(name))
    }

    fn prepare_image(
        &self,
        key: &str,
        layers: &[LayerBlob],
        max_bytes: u64,
        deadline: std::time::Instant,
        events: &mut dyn FnMut(PrepareEvent),
    ) -> Result<u64, EngineError> {
        let store = self.images.as_ref().ok_or(EngineError::NoLayersVolume("images"))?;
        let extras = RootExtras { ca_pem: self.cfg.ca_pem.clone() };
        let defaults = sandlot_linux::unpack::UnpackLimits::default();
        let limits = sandlot_linux::unpack::UnpackLimits {
            max_bytes: max_bytes.min(defaults.max_bytes),
            deadline: Some(deadline),
            ..defaults
        };
        let blobs: Vec<image_store::LayerBlob> = layers
            .iter()
            .map(|l| image_store::LayerBlob { path: l.path.clone(), diff_id: l.diff_id.clone() })
            .collect();
        let chains = sandlot_engine::driver::chain_ids(&layers.iter().map(|l| l.diff_id.clone()).collect::<Vec<_>>());
        let mut seam_events = |e: image_store::PrepareEvent| events(prepare_event(e));
        let (_, unpacked) = store.prepare(key, &blobs, &chains, &extras, &limits, &mut seam_events)?;
        Ok(unpacked)
    }

    fn image_user(&self, key: &str, spec: &str) -> Result<ImageUser, EngineError> {
        let store = self.images.as_ref().ok_or(EngineError::NoLayersVolume("images"))?;
        let image_store::ImageUser { uid, gid, name, home } = store.resolve_user(key, spec)?;
        Ok(ImageUser { uid, gid, name, home })
    }

    fn remove_unused_images(
        &self,
        keep_roots: &HashSet<String>,
        keep_chains: &HashSet<String>,
        keep_blobs: &HashSet<String>,
    ) -> Vec<String> {
        let Some(store) = &self.images else { return Vec::new() };
        store.remove_unused(keep_roots, keep_chains, keep_blobs).unwrap_or_else(|e| {
            tracing::warn!("removing unused images: {e}");
            Vec::new()
        })
    }

    fn disk_limits(&self) -> bool {
        self.volume.is_some()
    }

    fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Launched, EngineError> {
        let id = spec.id;
        // `host`, or an image root seen through an idmapped mount at `<layer>/image`.
        let (img, image_root) = match &self.images {
            Some(store) if spec.image != "host" => {
                let root = store.root(spec.image)?;
                (image::Image { name: spec.image.to_string(), lower: vec![], ro_binds: vec![] }, Some(root))
            }
            _ => (image::open(&self.images_dir(), spec.image)?, None),
        };
        let slot = sandlot_linux::ids::claim(spec.preferred_slot)?;
        let ids = slot.ids();
        let layer = Layer::at(&self.sandboxes_dir(), id);
        let disk = self.volume.as_ref().map(|_| spec.resources.disk_bytes);
        let fresh = *spec.source != LayerSource::Existing;
        let cleanup = |layer: &Layer| {
            if fresh {
                let _ = layer.remove();
            }
        };
        match spec.source {
            LayerSource::Fresh => {
                let base = match &image_root {
                    None => sandlot_linux::layers::Base::Host,
                    Some(root) => sandlot_linux::layers::Base::Image { root, build_step: spec.build_step },
                };
                layer.create(ids, &hostname(id), disk, base)?
            }
            LayerSource::Existing => {
                if !layer.upper.is_dir() {
                    return Err(EngineError::LayerMissing(id.to_string()));
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
            LayerSource::Snapshot { id: snap, owner } => {
                let result = (|| -> std::io::Result<()> {
                    std::fs::create_dir_all(self.sandboxes_dir())?;
                    sandlot_linux::volume::snapshot(&self.snapshots_dir().join(snap), &layer.dir, false)?;
                    sandlot_linux::volume::shift_owners(&layer.dir, *owner, ids.base)?;
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
        let r = spec.resources;
        let limits = CgroupLimits { memory_bytes: r.memory_bytes, pids: r.pids, cpu: r.cpu };
        let cgroup = match self.cgroups.create(id, limits) {
            Ok(c) => c,
            Err(e) => {
                cleanup(&layer);
                return Err(EngineError::host(e));
            }
        };
        let image_mount = image_root.map(|root| ImageMount { root, at: layer.dir.join("image") });
        let container = ContainerSpec {
            root: layer.root.clone(),
            lower: match &image_mount {
                Some(m) => vec![m.at.clone()],
                None => img.lower.clone(),
            },
            upper: layer.upper.clone(),
            work: layer.work.clone(),
            ro_binds: img.ro_binds.clone(),
            hostname: hostname(id),
            // Half the memory limit: filling /tmp (whose pages count as memory) then ends in ENOSPC,
            // not in the OOM killer.
            tmp_mb: (r.memory_bytes >> 21).max(8),
            build_step: spec.build_step,
            layers: self.cfg.layers,
            work_cgroup_fds: cgroup.work_procs().len() as u32,
            max_file_bytes: disk.unwrap_or(0),
        };
        match self.launcher.launch(LaunchRequest { spec: container, ids, cgroup: cgroup.clone(), image: image_mount }) {
            Ok(launched) => Ok(Launched {
                pid: launched.pid,
                control: std::os::unix::net::UnixStream::from(launched.control),
                log: Some(launched.log),
                instance: Box::new(LinuxInstance {
                    pid: launched.pid,
                    cgroup,
                    layer,
                    slot,
                    has_volume: self.volume.is_some(),
                }),
            }),
            Err(e) => {
                let _ = cgroup.destroy();
                cleanup(&layer);
                Err(EngineError::StartFailed(format!("launch: {e}")))
            }
        }
    }

    fn remove(&self, id: &str) -> Result<(), EngineError> {
        // Best effort, as for a running sandbox's teardown: what cannot go now (a busy subvolume) is
        // swept at the next start, and the sandbox is deleted all the same.
        if let Err(e) = self.cgroups.handle(id).destroy() {
            tracing::debug!(sandbox = id, "removing a leftover cgroup: {e}");
        }
        if let Err(e) = Layer::at(&self.sandboxes_dir(), id).remove() {
            tracing::warn!(sandbox = id, "removing its layer failed ({e}); the next start sweeps it");
        }
        Ok(())
    }

    fn sync(&self, id: &str) -> Result<(), EngineError> {
        sandlot_linux::volume::sync(&Layer::at(&self.sandboxes_dir(), id).dir)?;
        Ok(())
    }

    fn snapshot(&self, id: &str, slot: u32, snap: &str) -> Result<SnapshotTaken, EngineError> {
        if self.volume.is_none() {
            return Err(EngineError::NoLayersVolume("snapshots"));
        }
        let src = Layer::at(&self.sandboxes_dir(), id).dir;
        let dst = self.snapshots_dir().join(snap);
        std::fs::create_dir_all(self.snapshots_dir())?;
        sandlot_linux::volume::sync(&src)?;
        sandlot_linux::volume::snapshot(&src, &dst, true)?;
        sandlot_linux::volume::sync(&dst)?;
        match sandlot_linux::volume::referenced_bytes(&dst) {
            Ok(bytes) => Ok(SnapshotTaken { bytes, owner: sandlot_linux::IdRange::for_slot(slot).base }),
            Err(e) => {
                let _ = sandlot_linux::volume::remove_subvolume(&dst);
                Err(e.into())
            }
        }
    }

    fn delete_snapshot(&self, snap: &str) -> Result<(), EngineError> {
        sandlot_linux::volume::remove_subvolume(&self.snapshots_dir().join(snap))?;
        Ok(())
    }

    fn export_layer(&self, from: &ExportFrom, out: &mut dyn std::io::Write) -> Result<Exported, EngineError> {
        let (upper, base) = match from {
            ExportFrom::Sandbox { id, slot } => {
                (Layer::at(&self.sandboxes_dir(), id).upper, sandlot_linux::IdRange::for_slot(*slot).base)
            }
            // A snapshot is a copy of the layer's directory, `upper` and all.
            ExportFrom::Snapshot { id, owner } => (self.snapshots_dir().join(id).join("upper"), *owner),
        };
        if !upper.is_dir() {
            // The host path stays in the daemon's log; the caller learns only what is missing.
            tracing::warn!("the layer to export ({}) is not on this host", upper.display());
            let what = match from {
                ExportFrom::Sandbox { id, .. } => format!("sandbox {id}"),
                ExportFrom::Snapshot { id, .. } => format!("snapshot {id}"),
            };
            return Err(EngineError::Io(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("the writable layer of {what} is not on this host"),
            )));
        }
        let sandlot_linux::layer_export::Exported { entries, bytes, skipped, remapped } =
            sandlot_linux::layer_export::export_upper(&upper, sandlot_linux::IdRange { base }, out)?;
        Ok(Exported { entries, bytes, skipped, remapped })
    }

    fn sweep(&self, keep: &HashSet<String>, running: &HashSet<String>) -> SweepReport {
        let mut report = SweepReport::default();
        for name in self.cgroups.existing() {
            if running.contains(&name) {
                continue;
            }
            if self.cgroups.handle(&name).destroy().is_ok() {
                report.cgroups.push(name);
            }
        }
        if let Ok(rd) = std::fs::read_dir(self.sandboxes_dir()) {
            for ent in rd.flatten() {
                let name = ent.file_name().to_string_lossy().into_owned();
                if keep.contains(&name) || running.contains(&name) {
                    continue;
                }
                if Layer::at(&self.sandboxes_dir(), &name).remove().is_ok() {
                    report.layers.push(name);
                }
            }
        }
        report
    }

    fn sweep_snapshots(&self, keep: &HashSet<String>) -> Vec<String> {
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

    fn capacity(&self) -> std::io::Result<HostCapacity> {
        read_capacity(&self.cfg.state_dir, self.cfg.layers_volume_gb)
    }

    fn supervisor_pids(&self) -> u64 {
        sandlot_linux::cgroup::SUPERVISOR_PIDS
    }

    fn tls_env(&self) -> &'static [(&'static str, &'static str)] {
        &TLS_ENV
    }

    fn host_networks(&self) -> Vec<(std::net::IpAddr, u8)> {
        host_networks()
    }

    fn shutdown(&self) {
        self.cgroups.remove_base();
    }
}

/// One sandbox on Linux: its pid 1, cgroup, layer and uid range.
struct LinuxInstance {
    pid: i32,
    cgroup: SandboxCgroup,
    layer: Layer,
    /// Held while the sandbox exists: its host uid range.
    slot: sandlot_linux::ids::UidSlot,
    /// Its layer is a subvolume of the layers volume (so btrfs accounts its size).
    has_volume: bool,
}

impl Instance for LinuxInstance {
    fn slot(&self) -> u32 {
        self.slot.n
    }

    fn oom_kills(&self) -> u64 {
        self.cgroup.oom_kills()
    }

    fn usage(&self, disk: bool) -> Usage {
        let cg = self.cgroup.stats();
        Usage {
            cpu_usec: cg.cpu_usec,
            memory_bytes: cg.memory_bytes,
            cache_bytes: cg.cache_bytes,
            // As btrfs accounted it at its last commit (at most 30 s old); without the layers volume
            // the layer is a plain directory whose size nothing tracks.
            disk_bytes: (disk && self.has_volume)
                .then(|| sandlot_linux::volume::referenced_bytes(&self.layer.dir).ok())
                .flatten(),
            cpu_periods: cg.cpu_periods,
            cpu_throttled_periods: cg.cpu_throttled_periods,
            cpu_throttled_usec: cg.cpu_throttled_usec,
            memory_peak_bytes: cg.memory_peak_bytes,
            memory_limit_bytes: cg.memory_limit_bytes,
            oom_kills: cg.oom_kills,
            pids: cg.pids,
            pids_limit: cg.pids_limit,
        }
    }

    fn freeze(&self, frozen: bool) -> Result<(), EngineError> {
        self.cgroup.freeze(frozen).map_err(EngineError::host)
    }

    fn kill(&self) {
        // A frozen (paused) process cannot die on cgroup v1 until it is thawed.
        let _ = self.cgroup.freeze(false);
        // SIGKILL to pid 1 of a pid namespace kills every process in it.
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid), nix::sys::signal::Signal::SIGKILL);
    }

    fn wait(&self) -> String {
        match sandlot_linux::launch::wait(self.pid) {
            Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => format!("exit status {code}"),
            Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _)) => format!("killed by {sig}"),
            Ok(other) => format!("{other:?}"),
            Err(e) => format!("wait failed: {e}"),
        }
    }

    fn teardown(&self, remove_layer: bool) {
        let _ = self.cgroup.destroy();
        if remove_layer {
            let _ = self.layer.remove();
        }
    }

    fn attach_egress(&self) -> Result<Egress, EngineError> {
        let sandlot_linux::net::EgressSockets { tcp4, tcp6, udp4, udp6, steering } =
            sandlot_linux::net::attach_egress(self.pid)?;
        Ok(Egress {
            tcp4: tcp4.into(),
            tcp6: tcp6.map(Into::into),
            udp4: udp4.into(),
            udp6: udp6.map(Into::into),
            keep: Box::new(steering),
        })
    }
}

/// The seam's form of an image store's progress report.
fn prepare_event(e: image_store::PrepareEvent) -> PrepareEvent {
    match e {
        image_store::PrepareEvent::Unpacking { index, diff_id } => PrepareEvent::Unpacking { index, diff_id },
        image_store::PrepareEvent::Unpacked { index, report } => PrepareEvent::Unpacked {
            index,
            report: report.map(|r| UnpackReport {
                entries: r.entries,
                bytes: r.bytes,
                charged: r.charged,
                dropped: r.dropped,
                dropped_count: r.dropped_count,
            }),
        },
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

/// The host's capacity: `MemTotal`, `kernel.pid_max`, and with a layers volume of `layers_volume_gb`
/// that size, or less if the file system holding the state directory (and the volume's sparse file)
/// is smaller.
fn read_capacity(state_dir: &Path, layers_volume_gb: Option<u64>) -> std::io::Result<HostCapacity> {
    let memory_bytes = sandlot_linux::host_memory_bytes()?;
    let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")?
        .trim()
        .parse::<u64>()
        .map_err(|e| std::io::Error::other(format!("/proc/sys/kernel/pid_max: {e}")))?;
    let layers_bytes = match layers_volume_gb {
        None => None,
        Some(gb) => {
            let fs = nix::sys::statvfs::statvfs(state_dir).map_err(std::io::Error::from)?;
            Some((gb << 30).min(fs.blocks() * fs.fragment_size()))
        }
    };
    Ok(HostCapacity { memory_bytes, pid_max, layers_bytes })
}

/// Process output every sandbox together may hold in the daemon: an eighth of the host's memory
/// (2.9 GiB on a 23 GiB host).
pub fn daemon_output_bytes() -> u64 {
    sandlot_linux::host_memory_bytes().unwrap_or(0) / 8
}

/// Environment that points every common TLS stack at the image's trust bundle, which holds the
/// daemon's egress CA (for brokered hosts) besides the system roots.
const TLS_ENV: [(&str, &str); 5] = [
    ("SSL_CERT_FILE", image::CA_BUNDLE),
    ("REQUESTS_CA_BUNDLE", image::CA_BUNDLE),
    ("CURL_CA_BUNDLE", image::CA_BUNDLE),
    ("PIP_CERT", image::CA_BUNDLE),
    ("NODE_EXTRA_CA_CERTS", image::CA_CERT),
];

/// The host's own addresses, networks and default gateways `(address, prefix)`, always denied to
/// sandboxes (read before the driver exists: the network is set up first).
pub fn host_networks() -> Vec<(std::net::IpAddr, u8)> {
    sandlot_linux::net::host_networks()
}
