//! The launcher: one `sandlot serve` per test, on a fresh state dir and loopback port, that can be
//! crashed (`kill9`), stopped gracefully (`terminate`) and started again on the same state and port
//! (`restart`).
//!
//! Servers run with their defaults, so sandbox layers live on the btrfs layers volume that persistence,
//! snapshots and forks need. That volume is mounted in the daemon's private mount namespace: from here
//! it is reached through `/proc/<daemon pid>/root`, and it vanishes with the daemon.
//!
//! Sandbox cgroups are `<daemon cgroup>/sandlot-<instance>/<id>` per controller; the instance name comes
//! from `<state>/instance-id`, so parallel test servers never see each other's sandboxes. The launcher
//! itself is the shared [`crate::common::server`]; this file adds what the suite inspects.

use std::fs;
use std::path::PathBuf;

use crate::common::server::Builder;
pub use crate::common::server::TestServer as Server;

impl Server {
    /// A server of this suite: the server's defaults.
    pub fn builder() -> Builder {
        Builder::new("persist")
    }

    /// Starts a server on a fresh state dir and a free loopback port, and waits until it serves.
    pub fn start() -> Server {
        Server::builder().start()
    }

    /// The layers volume as the running daemon sees it (its private mount namespace).
    fn volume(&self) -> PathBuf {
        let rel = self.state_dir().strip_prefix("/").expect("absolute state dir");
        PathBuf::from(format!("/proc/{}/root", self.pid())).join(rel).join("layers")
    }

    /// The writable layer of sandbox `id` on the layers volume.
    pub fn layer_dir(&self, id: &str) -> PathBuf {
        self.volume().join("sandboxes").join(id)
    }

    /// The directory of snapshot subvolumes on the layers volume.
    pub fn snapshots_path(&self) -> PathBuf {
        self.volume().join("snapshots")
    }

    /// Names of the snapshot subvolumes on the layers volume.
    pub fn snapshot_dirs(&self) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.snapshots_path())
            .map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
            .unwrap_or_default();
        names.sort();
        names
    }

    /// The cgroup directories sandbox `id` has (or would have), one per controller.
    pub fn cgroup_dirs(&self, id: &str) -> Vec<PathBuf> {
        self.sandbox_cgroup_bases().iter().map(|b| b.join(id)).collect()
    }

    /// Host mount table lines that mention the state dir (the volume must never show on the host).
    pub fn host_mounts(&self) -> Vec<String> {
        let needle = self.state_dir().to_string_lossy().into_owned();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle))
            .map(str::to_string)
            .collect()
    }
}
