//! The launcher: one `sandlot serve` per test, on a fresh state dir and loopback port, that can be
//! crashed (`kill9`), stopped gracefully (`terminate`) and started again on the same state (`restart`).
//!
//! Servers run with their defaults, so sandbox layers live on the btrfs layers volume that persistence,
//! snapshots and forks need. That volume is mounted in the daemon's private mount namespace: from here
//! it is reached through `/proc/<daemon pid>/root`, and it vanishes with the daemon.
//!
//! Sandbox cgroups are `<daemon cgroup>/sandlot-<instance>/<id>` per controller; the instance name comes
//! from `<state>/instance-id`, so parallel test servers never see each other's sandboxes.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

use sandlot_client::api::CreateSandbox;
use sandlot_client::{Client, ErrorKind, Sandbox};

use crate::common::{cgroup_dirs, free_port, kill9_daemon, serve_command, signal, stop_daemon};

const START_TIMEOUT: Duration = Duration::from_secs(20);

/// A `sandlot serve` owned by one test. Dropping it stops the daemon with SIGTERM.
pub struct Server {
    _root: tempfile::TempDir,
    state: PathBuf,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
    admin_key: String,
    /// `<mount>/<daemon cgroup>/sandlot-<instance>` per controller.
    cgroup_bases: Vec<PathBuf>,
}

impl Server {
    /// Starts a server on a fresh state dir and a free loopback port, and waits until it serves.
    pub fn start() -> Server {
        let root = tempfile::Builder::new().prefix("sandlot-persist-").tempdir().expect("tempdir");
        // Sandbox uids (a private host range) must traverse it to reach their layers.
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o711)).expect("chmod tempdir");
        let mut server = Server {
            state: root.path().join("state"),
            log: root.path().join("server.log"),
            _root: root,
            port: 0,
            child: None,
            admin_key: String::new(),
            cgroup_bases: Vec::new(),
        };
        // A port picked by bind-and-drop can be taken by another process before the daemon binds it.
        for _attempt in 0..5 {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(why) if server.log_text().contains("Address already in use") => {
                    eprintln!("lost a port race ({why}), retrying on another port");
                }
                Err(why) => panic!("sandlot serve did not start: {why}\n--- server log ---\n{}", server.log_text()),
            }
        }
        panic!("sandlot serve could not bind a free port in 5 attempts");
    }

    /// Starts the daemon again on the same state dir and port, after [`Server::kill9`] or
    /// [`Server::terminate`].
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart needs a stopped server: call kill9() or terminate() first");
        let mut last = String::new();
        // The old listening socket is gone with the old process; retry only a lost race for the port.
        for _attempt in 0..10 {
            match self.launch() {
                Ok(()) => return,
                Err(why) => last = why,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("sandlot serve did not restart on port {}: {last}\n--- server log ---\n{}", self.port, self.log_text());
    }

    /// Spawns the daemon and waits until it answers, with our admin key, on our port.
    fn launch(&mut self) -> Result<(), String> {
        let child = serve_command(&self.state, self.port, &self.log).spawn().expect("spawning sandlot serve");
        self.child = Some(child);
        let ready = self.wait_ready();
        if ready.is_err() {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return ready;
        }
        let instance = fs::read_to_string(self.state.join("instance-id")).expect("reading instance-id");
        self.cgroup_bases = cgroup_bases(self.pid(), instance.trim());
        Ok(())
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("the server exited early with {status}"));
            }
            if self.admin_key.is_empty() {
                if let Ok(key) = fs::read_to_string(self.state.join("admin.key")) {
                    self.admin_key = key.trim().to_string();
                }
            }
            // An authenticated call: another process on this port would not know our key.
            if !self.admin_key.is_empty() {
                match self.client().list() {
                    Ok(_) => return Ok(()),
                    Err(e) if e.kind() == ErrorKind::Unauthenticated => {
                        return Err(format!("another server answers on port {}", self.port))
                    }
                    Err(_) => {}
                }
            }
            if Instant::now() > deadline {
                return Err(format!("the server did not answer within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the daemon with SIGKILL (no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        kill9_daemon(self.child.take().expect("kill9 needs a running server"));
    }

    /// Stops the daemon with SIGTERM and waits for it; returns its exit status. Panics (after killing
    /// it) if it has not exited within 10 s.
    pub fn terminate(&mut self) -> ExitStatus {
        let child = self.child.take().expect("terminate needs a running server");
        stop_daemon(child).unwrap_or_else(|why| panic!("{why}\n{}", self.log_text()))
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A client with the admin key.
    pub fn client(&self) -> Client {
        Client::new(self.url(), self.admin_key.clone())
    }

    /// A client with a fresh key for `tenant`.
    pub fn tenant_client(&self, tenant: &str) -> Client {
        let key = self.client().create_key(tenant).unwrap_or_else(|e| panic!("key for {tenant}: {e:?}"));
        Client::new(self.url(), key.key)
    }

    /// Creates a sandbox as the admin tenant, or panics with the server log.
    pub fn create(&self, spec: &CreateSandbox) -> Sandbox {
        self.client()
            .create(spec)
            .unwrap_or_else(|e| panic!("create {spec:?}: {e:?}\n--- log ---\n{}", self.log_text()))
    }

    /// Host pid of the running daemon.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("the server is running").id() as i32
    }

    /// Everything the daemon logged so far (all its runs).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The layers volume as the running daemon sees it (its private mount namespace).
    fn volume(&self) -> PathBuf {
        let rel = self.state.strip_prefix("/").expect("absolute state dir");
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
        self.cgroup_bases.iter().map(|b| b.join(id)).collect()
    }

    /// Host mount table lines that mention the state dir (the volume must never show on the host).
    pub fn host_mounts(&self) -> Vec<String> {
        let needle = self.state.to_string_lossy().into_owned();
        fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&needle))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(Err(why)) = self.child.take().map(stop_daemon) {
            eprintln!("{why}; killed it");
        }
        // The daemon leaves its (empty) cgroup base behind, and a crashed or hung one its sandboxes'
        // cgroups: remove what this server made. Thaw first (frozen tasks do not die), then kill what is
        // left of its sandboxes, then remove the directories deepest first.
        let mut dirs: Vec<PathBuf> = self.cgroup_bases.iter().flat_map(|b| dirs_under(b)).collect();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for dir in dirs.iter().filter(|d| d.join("freezer.state").exists()) {
            let _ = fs::write(dir.join("freezer.state"), "THAWED");
        }
        for dir in &dirs {
            for _ in 0..200 {
                for pid in fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default().lines() {
                    if let Ok(pid) = pid.trim().parse::<i32>() {
                        signal(pid, libc::SIGKILL);
                    }
                }
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// `dir` and every directory below it.
fn dirs_under(dir: &Path) -> Vec<PathBuf> {
    if !dir.is_dir() {
        return Vec::new();
    }
    let mut all = vec![dir.to_path_buf()];
    for ent in fs::read_dir(dir).into_iter().flatten().flatten() {
        if ent.file_type().is_ok_and(|t| t.is_dir()) {
            all.extend(dirs_under(&ent.path()));
        }
    }
    all
}

/// Where the daemon makes sandbox cgroups: its own cgroup per controller, plus `sandlot-<instance>`.
fn cgroup_bases(pid: i32, instance: &str) -> Vec<PathBuf> {
    let own = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    cgroup_dirs(&own)
        .into_iter()
        .map(|(ctrl, dir)| {
            // On v2 the daemon may have moved itself into a `daemon` leaf of its cgroup.
            let dir = match dir.parent() {
                Some(parent) if ctrl == "unified" && dir.ends_with("daemon") => parent.to_path_buf(),
                _ => dir,
            };
            dir.join(format!("sandlot-{instance}"))
        })
        .collect()
}
