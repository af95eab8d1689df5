//! The seam between the engine and the host: what the engine asks for, and the trait a driver
//! implements to do it.
//!
//! The engine keeps the state that is the same on every host (the supervisor link, processes, output
//! budgets, transfers, the network proxy); a driver does the host-specific work (namespaces, cgroups,
//! layers, uid ranges). `sandlot_driver_linux::LinuxDriver` is the real one; `crate::fake::FakeDriver`
//! (feature `fake`) runs an in-process supervisor over a socketpair so the layers above can be tested
//! without root. The types here are the seam's: a driver maps its host's own onto them.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use sha2::{Digest, Sha256};

use crate::{EngineError, LayerSource};

/// One layer of an image: its blob on the host and what it must hold.
#[derive(Debug, Clone)]
pub struct LayerBlob {
    /// The blob's file.
    pub path: std::path::PathBuf,
    /// `sha256:<hex>` of the uncompressed tar (the image config's `rootfs.diff_ids` entry).
    pub diff_id: String,
}

/// A progress report while an image root is made.
#[derive(Debug, Clone)]
pub enum PrepareEvent {
    /// Layer `index` (bottom first) is being applied.
    Unpacking {
        /// Position in the image's layers.
        index: usize,
        /// Its diff id.
        diff_id: String,
    },
    /// Layer `index` is applied (or was already, in a shared chain).
    Unpacked {
        /// Position in the image's layers.
        index: usize,
        /// What the unpacker did; `None` when the chain already existed.
        report: Option<UnpackReport>,
    },
}

/// What applying one layer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnpackReport {
    /// Tar entries applied (including whiteouts).
    pub entries: u64,
    /// File bytes written (apparent sizes).
    pub bytes: u64,
    /// What the layer is charged on the layers volume (file bytes and each entry's metadata cost).
    pub charged: u64,
    /// The first entries (or parts of entries, such as an xattr) skipped on purpose, each
    /// "PATH: why" with the path escaped for printing.
    pub dropped: Vec<String>,
    /// How many were skipped in all.
    pub dropped_count: u64,
}

/// Who an image's `USER` names, as its own `/etc/passwd` and `/etc/group` say.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageUser {
    /// Uid inside the sandbox.
    pub uid: u32,
    /// Gid inside the sandbox.
    pub gid: u32,
    /// Login name (the uid as text when the image's passwd has none).
    pub name: String,
    /// Home directory (`/` when the image's passwd has none, as Docker does).
    pub home: String,
}

/// What an export of a writable layer wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exported {
    /// Entries written.
    pub entries: u64,
    /// Bytes of file data written.
    pub bytes: u64,
    /// Devices and sockets left out (the first few paths).
    pub skipped: Vec<String>,
    /// Entries whose owner was outside the sandbox's range and became 65534 (the first few paths).
    pub remapped: Vec<String>,
}

/// What the host can give sandboxes, read once at start-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostCapacity {
    /// Physical memory, bytes.
    pub memory_bytes: u64,
    /// Most process ids the host hands out (`kernel.pid_max` on Linux).
    pub pid_max: u64,
    /// Space for writable layers, bytes; `None` when layers have no size limit.
    pub layers_bytes: Option<u64>,
}

/// The OCI ChainIDs of a stack of layers (bottom first): ChainID(1) = DiffID(1), ChainID(n) =
/// sha256(ChainID(n-1) + " " + DiffID(n)). Image roots and the layer chains they share are named by
/// them.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(prev) => {
                let digest = Sha256::digest(format!("{prev} {d}").as_bytes());
                format!("sha256:{}", digest.iter().map(|b| format!("{b:02x}")).collect::<String>())
            }
        };
        out.push(next);
    }
    out
}

/// Whose writable layer an export reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExportFrom {
    /// A sandbox's layer (stopped: no process writes it while it is read); its files belong to `slot`.
    Sandbox {
        /// Sandbox id.
        id: String,
        /// The host slot its files belong to.
        slot: u32,
    },
    /// A snapshot; `owner` is its [`SnapshotTaken::owner`].
    Snapshot {
        /// Snapshot id.
        id: String,
        /// The driver's note of who owns its files.
        owner: u32,
    },
}

/// What a sandbox may use of the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resources {
    /// Memory limit, bytes.
    pub memory_bytes: u64,
    /// Process (task) limit.
    pub pids: u64,
    /// CPU limit, in cores.
    pub cpu: f64,
    /// Cap on the writable layer, bytes (0: none; ignored without a layers volume).
    pub disk_bytes: u64,
}

/// One sandbox to launch.
#[derive(Debug, Clone)]
pub struct LaunchSpec<'a> {
    /// Sandbox id.
    pub id: &'a str,
    /// Image to boot: `host`, or the `sha256:` key of an image root made by [`Driver::prepare_image`]
    /// (checked with [`Driver::has_image`] first).
    pub image: &'a str,
    /// Its limits.
    pub resources: Resources,
    /// The host slot (uid range) it held before, reused if free, so its files keep their owners.
    pub preferred_slot: Option<u32>,
    /// Where its writable layer comes from.
    pub source: &'a LayerSource,
    /// A build step's sandbox ([`crate::StartSpec::build_step`]).
    pub build_step: bool,
}

/// A launched sandbox: its pid 1, the daemon's end of the control socket, and the driver's handle.
pub struct Launched {
    /// Host pid of the sandbox's pid 1 (tells one instance of a sandbox from a later one).
    pub pid: i32,
    /// The daemon's end of the supervisor protocol.
    pub control: UnixStream,
    /// Read end of the supervisor's stderr (setup errors, panics), if the driver captures it.
    pub log: Option<OwnedFd>,
    /// What only the driver can do to this sandbox.
    pub instance: Box<dyn Instance>,
}

/// A snapshot a driver took.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SnapshotTaken {
    /// Bytes the snapshot references (what it is charged).
    pub bytes: u64,
    /// The driver's note of who owns its files (the host uid base on Linux), handed back in
    /// [`LayerSource::Snapshot`] when a sandbox is made from it.
    pub owner: u32,
}

/// The host's side of a sandbox's network: the daemon's sockets inside its namespace.
pub struct Egress {
    /// Listening TCP socket (IPv4), non-blocking.
    pub tcp4: std::net::TcpListener,
    /// Listening TCP socket (IPv6 only); `None` on a host without IPv6.
    pub tcp6: Option<std::net::TcpListener>,
    /// UDP socket (IPv4) bound to the gateway's port 53.
    pub udp4: std::net::UdpSocket,
    /// UDP socket (IPv6 only); `None` without IPv6.
    pub udp6: Option<std::net::UdpSocket>,
    /// Kept alive as long as the proxy runs (the traffic-steering program on Linux).
    pub keep: Box<dyn Send>,
}

/// What a running sandbox uses at one moment (metrics).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// CPU time used since it started, microseconds (`None`: the host accounts none).
    pub cpu_usec: Option<u64>,
    /// Memory charged now, page cache included, bytes (`None`: unknown).
    pub memory_bytes: Option<u64>,
    /// Of that, page cache, bytes.
    pub cache_bytes: u64,
    /// Bytes its writable layer references (`None` without the layers volume, or not asked for).
    pub disk_bytes: Option<u64>,
    /// CPU quota periods elapsed with runnable tasks (`None`: unknown here).
    pub cpu_periods: Option<u64>,
    /// Of those, periods in which it was throttled.
    pub cpu_throttled_periods: Option<u64>,
    /// Time it spent throttled, microseconds.
    pub cpu_throttled_usec: Option<u64>,
    /// Most memory charged at once since it started, bytes.
    pub memory_peak_bytes: Option<u64>,
    /// Memory limit of its commands, bytes, as the host enforces it.
    pub memory_limit_bytes: Option<u64>,
    /// OOM kills so far.
    pub oom_kills: Option<u64>,
    /// Processes and threads now.
    pub pids: Option<u64>,
    /// Process limit of its commands, as the host enforces it.
    pub pids_limit: Option<u64>,
}

/// What the engine asks of one running sandbox.
pub trait Instance: Send + Sync {
    /// The host slot (uid range) it holds while it exists.
    fn slot(&self) -> u32;
    /// OOM kills in the sandbox so far.
    fn oom_kills(&self) -> u64;
    /// What it uses now; the writable layer's size only when `disk` (it may cost a process spawn).
    /// Blocking.
    fn usage(&self, disk: bool) -> Usage;
    /// Freezes (`true`) or thaws every process. Blocking.
    fn freeze(&self, frozen: bool) -> Result<(), EngineError>;
    /// Kills every process of the sandbox (pid 1 first). Returns at once.
    fn kill(&self);
    /// Waits until pid 1 is reaped and says how it ended. Blocking; called once, on a thread of its own.
    fn wait(&self) -> String;
    /// Removes what the sandbox held on the host (cgroup; its layer too when `remove_layer`), after
    /// [`Instance::wait`] returned. Blocking.
    fn teardown(&self, remove_layer: bool);
    /// Opens the daemon's sockets in the sandbox's network namespace. Blocking.
    fn attach_egress(&self) -> Result<Egress, EngineError>;
}

/// What the engine asks of the host. Every method may block (the engine calls them off the runtime).
pub trait Driver: Send + Sync + 'static {
    /// Whether `image` (`host` or an image root's key) can be launched.
    fn has_image(&self, image: &str) -> bool;
    /// Makes the root of image `key` (its config digest) from its layers, bottom first, unless it
    /// exists; reports each layer as it is applied. The layers it unpacks may add at most
    /// `max_bytes` to the layers volume together, and must be done by `deadline`; returns what they
    /// added. Blocking.
    fn prepare_image(
        &self,
        key: &str,
        layers: &[LayerBlob],
        max_bytes: u64,
        deadline: std::time::Instant,
        events: &mut dyn FnMut(PrepareEvent),
    ) -> Result<u64, EngineError>;
    /// Resolves an image's `USER` (`spec`) in image root `key`'s own account files.
    fn image_user(&self, key: &str, spec: &str) -> Result<ImageUser, EngineError>;
    /// Removes image roots not in `keep_roots`, layer chains not in `keep_chains` and what it knows of
    /// blobs not in `keep_blobs`; returns the roots and chains that went.
    fn remove_unused_images(
        &self,
        keep_roots: &HashSet<String>,
        keep_chains: &HashSet<String>,
        keep_blobs: &HashSet<String>,
    ) -> Vec<String>;
    /// Whether writable layers have an enforced size limit (and so persistence and snapshots work).
    fn disk_limits(&self) -> bool;
    /// Prepares the sandbox's layer, cgroup and uid range and starts its pid 1. On failure nothing it
    /// made is left, except an existing layer (`LayerSource::Existing`), which is never removed.
    fn launch(&self, spec: &LaunchSpec<'_>) -> Result<Launched, EngineError>;
    /// Removes whatever may remain of sandbox `id` that is not running (a failed start, a previous
    /// daemon's leftovers): cgroup and layer. Idempotent.
    fn remove(&self, id: &str) -> Result<(), EngineError>;
    /// Makes sandbox `id`'s writable layer durable (after its processes ended).
    fn sync(&self, id: &str) -> Result<(), EngineError>;
    /// Takes read-only snapshot `snap` of sandbox `id`'s layer; `slot` is the slot its files belong to.
    fn snapshot(&self, id: &str, slot: u32, snap: &str) -> Result<SnapshotTaken, EngineError>;
    /// Deletes snapshot `snap`.
    fn delete_snapshot(&self, snap: &str) -> Result<(), EngineError>;
    /// Writes the writable layer `from` names to `out` as an OCI layer tar (whiteouts, opaque
    /// directories, owners as image ids).
    fn export_layer(&self, from: &ExportFrom, out: &mut dyn std::io::Write) -> Result<Exported, EngineError>;
    /// Removes cgroups and layers of sandboxes that are neither in `keep` nor `running`.
    fn sweep(&self, keep: &HashSet<String>, running: &HashSet<String>) -> crate::SweepReport;
    /// Removes snapshots not in `keep`.
    fn sweep_snapshots(&self, keep: &HashSet<String>) -> Vec<String>;
    /// The host's own addresses and networks `(address, prefix)`, always denied to sandboxes.
    fn host_networks(&self) -> Vec<(std::net::IpAddr, u8)>;
    /// What the host can give sandboxes (memory, process ids, space for layers).
    fn capacity(&self) -> std::io::Result<HostCapacity>;
    /// Process ids each sandbox holds beyond its own `pids` limit, for what the driver runs in it
    /// (the supervisor and its threads); charged against the host's pids with the sandbox's own.
    fn supervisor_pids(&self) -> u64;
    /// Environment every command gets so that common TLS stacks trust the image's bundle (which
    /// holds the daemon's egress CA besides the system roots).
    fn tls_env(&self) -> &'static [(&'static str, &'static str)];
    /// Releases what the driver holds for the daemon (its cgroup base), at graceful shutdown.
    fn shutdown(&self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_ids_follow_the_oci_rule() {
        let (a, b) = (format!("sha256:{}", "a".repeat(64)), format!("sha256:{}", "b".repeat(64)));
        let ids = chain_ids(&[a.clone(), b.clone()]);
        assert_eq!(ids[0], a);
        let expected = Sha256::digest(format!("{a} {b}").as_bytes());
        assert_eq!(ids[1], format!("sha256:{}", expected.iter().map(|x| format!("{x:02x}")).collect::<String>()));
        assert_ne!(chain_ids(&[b, a])[1], ids[1], "the order of layers matters");
    }
}
