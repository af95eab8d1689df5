//! One launcher of a real `sandlot serve` for every suite: a fresh state dir in a temporary directory,
//! a free loopback port, the admin key, a readiness wait, crashes and restarts, and cleanup on drop.
//!
//! A suite starts from [`Builder::new`] with its name and adds what it needs
//! (`TestServer::builder().flag("--no-disk-quota").start()`); its own `server.rs`/`harness.rs` adds
//! the suite's defaults and the inspections only it makes, as `impl TestServer` blocks of its own.
//!
//! Dropping a [`TestServer`] stops the daemon with SIGTERM, runs the suite's drop check (if it set one),
//! then removes what this server left in cgroups: its sandboxes' cgroups (thawed and killed first, as
//! a crashed or hung daemon leaves them) and the test cgroup it was started in, if it made one.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sandlot_client::api::CreateSandbox;
use sandlot_client::{Client, Sandbox};

use super::http;
use super::{cgroup_dirs, free_port, kill9_daemon, serve_command, signal, stop_daemon};

/// How long a daemon may take to answer an authenticated request after it was spawned.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How many fresh ports a start tries: a port found by bind-and-drop can be taken by a parallel test
/// before the daemon binds it.
const PORT_ATTEMPTS: usize = 5;

/// How many times a restart on the same port tries, 200 ms apart: the old listening socket is gone
/// with the old process, but another process may take the port in between.
const RESTART_ATTEMPTS: usize = 10;

/// Test cgroups made by this process so far.
static CGROUPS: AtomicU32 = AtomicU32::new(0);

/// A check run when a server is dropped, after the daemon was stopped; an `Err` fails the test.
pub type DropCheck = fn(&TestServer) -> Result<(), String>;

/// Where the daemon runs, as far as cgroups go.
enum CgroupChoice {
    /// In the test process's own cgroup.
    Inherit,
    /// In a test cgroup of its own, made for it and removed with it.
    Own,
    /// In the test cgroup of another server (as two daemons started from one service would be).
    Join(Vec<std::ffi::CString>),
}

/// How to start a [`TestServer`].
#[must_use]
pub struct Builder {
    suite: &'static str,
    args: Vec<String>,
    cgroup: CgroupChoice,
    fd_limit: Option<u64>,
    inherited_dir: Option<(PathBuf, i32)>,
    drop_check: Option<DropCheck>,
}

impl Builder {
    /// A server of suite `suite` (it names the temporary directory) with the server's defaults.
    pub fn new(suite: &'static str) -> Builder {
        Builder {
            suite,
            args: Vec::new(),
            cgroup: CgroupChoice::Inherit,
            fd_limit: None,
            inherited_dir: None,
            drop_check: None,
        }
    }

    /// Adds one `serve` argument (a flag, or an option's name or value).
    pub fn flag(mut self, arg: &str) -> Builder {
        self.args.push(arg.to_string());
        self
    }

    /// Adds `serve` arguments.
    pub fn args<S: AsRef<str>>(mut self, args: &[S]) -> Builder {
        self.args.extend(args.iter().map(|a| a.as_ref().to_string()));
        self
    }

    /// `--test-loopback-only`: the proxy refuses (and logs as a bug) any dial of a non-loopback address,
    /// so nothing a test does leaves the machine.
    pub fn loopback_only(self) -> Builder {
        self.flag("--test-loopback-only")
    }

    /// `--resolve NAME=ADDR`: the daemon answers the sandbox's lookups of NAME and dials ADDR.
    pub fn resolve(self, mapping: &str) -> Builder {
        self.flag("--resolve").flag(mapping)
    }

    /// `--extra-ca PEM`: the daemon also trusts this CA for brokered upstreams.
    pub fn extra_ca(self, pem: &Path) -> Builder {
        self.flag("--extra-ca").flag(pem.to_str().expect("a UTF-8 CA path"))
    }

    /// `--insecure-disable-layer LAYER` (test-only): switches one defence layer off (`seccomp`,
    /// `landlock`).
    pub fn disable_layer(self, layer: &str) -> Builder {
        self.flag("--insecure-disable-layer").flag(layer)
    }

    /// Runs the daemon in a test cgroup of its own (one per v1 controller the daemon uses), so that its
    /// start-up sweep never touches another server's sandboxes and leftovers are its alone. On a pure
    /// v2 host every server has one anyway.
    pub fn own_cgroup(mut self) -> Builder {
        self.cgroup = CgroupChoice::Own;
        self
    }

    /// Runs the daemon in the test cgroup of `other` (which must have been started with
    /// [`Builder::own_cgroup`] to have one).
    pub fn cgroup_of(mut self, other: &TestServer) -> Builder {
        self.cgroup = CgroupChoice::Join(other.join.clone());
        self
    }

    /// Sets the daemon's descriptor limit (soft and hard) before exec; the daemon cannot raise it.
    pub fn fd_limit(mut self, limit: u64) -> Builder {
        self.fd_limit = Some(limit);
        self
    }

    /// Lets the daemon inherit host directory `dir`, opened without close-on-exec, at descriptor `fd`
    /// (as a daemon started from a script, a CI runner or a service manager may inherit descriptors).
    pub fn inherit_dir(mut self, dir: &Path, fd: i32) -> Builder {
        self.inherited_dir = Some((dir.to_path_buf(), fd));
        self
    }

    /// Runs `check` when the server is dropped, after the daemon was stopped; an `Err`, or a daemon that
    /// did not exit within [`super::STOP_TIMEOUT`] of SIGTERM, then fails the test.
    pub fn check_on_drop(mut self, check: DropCheck) -> Builder {
        self.drop_check = Some(check);
        self
    }

    /// Starts the daemon on a fresh state dir and a free loopback port, and waits until it answers
    /// an authenticated request.
    pub fn start(self) -> TestServer {
        let root = tempfile::Builder::new().prefix(&format!("sandlot-{}-", self.suite)).tempdir().expect("tempdir");
        // Sandbox ids (a private host uid range) must traverse it to reach their layers.
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o711)).expect("chmod tempdir");
        let inherited = self.inherited_dir.as_ref().map(|(path, fd)| {
            let file = File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
            (OwnedFd::from(file), *fd)
        });
        let (cgroup, join) = match self.cgroup {
            // A daemon refuses to share a v2 cgroup with the test process: it gets one of its own.
            CgroupChoice::Inherit if !pure_cgroup_v2() => (None, Vec::new()),
            CgroupChoice::Inherit | CgroupChoice::Own => {
                let cgroup = TestCgroup::create();
                let join = cgroup.as_ref().map(|c| c.procs.clone()).unwrap_or_default();
                (cgroup, join)
            }
            CgroupChoice::Join(procs) => (None, procs),
        };
        let mut server = TestServer {
            state: root.path().join("state"),
            log: root.path().join("server.log"),
            _root: root,
            port: 0,
            child: None,
            admin_key: String::new(),
            args: self.args,
            fd_limit: self.fd_limit,
            inherited,
            join,
            cgroup,
            sandbox_cgroup_bases: Vec::new(),
            drop_check: self.drop_check,
        };
        server.start_on_a_free_port();
        server
    }
}

/// A running `sandlot serve` owned by one test.
pub struct TestServer {
    /// Temporary directory holding `state/` and `server.log`, removed with the server.
    _root: tempfile::TempDir,
    state: PathBuf,
    log: PathBuf,
    port: u16,
    child: Option<Child>,
    admin_key: String,
    /// Extra `serve` arguments, kept for restarts.
    args: Vec<String>,
    fd_limit: Option<u64>,
    /// A descriptor the daemon inherits, and the number it gets there.
    inherited: Option<(OwnedFd, i32)>,
    /// `cgroup.procs` files the daemon joins before exec.
    join: Vec<std::ffi::CString>,
    /// The test cgroup this server owns (removed with it), if any.
    cgroup: Option<TestCgroup>,
    /// `<mount>/<daemon cgroup>/sandlot-<instance>` per controller, where the daemon makes its
    /// sandboxes' cgroups; read after each start.
    sandbox_cgroup_bases: Vec<PathBuf>,
    drop_check: Option<DropCheck>,
}

/// Why a daemon did not become ready.
enum NotReady {
    /// The port was taken by another process before the daemon bound it.
    PortTaken(String),
    /// Anything else: the daemon failed.
    Failed(String),
}

impl TestServer {
    fn start_on_a_free_port(&mut self) {
        for _attempt in 0..PORT_ATTEMPTS {
            self.port = free_port();
            match self.launch() {
                Ok(()) => return,
                Err(NotReady::PortTaken(why)) => eprintln!("lost a port race ({why}), retrying on another port"),
                Err(NotReady::Failed(why)) => {
                    panic!("sandlot serve did not become ready: {why}\n--- server log ---\n{}", self.log_text())
                }
            }
        }
        panic!(
            "sandlot serve could not bind a free port in {PORT_ATTEMPTS} attempts\n--- server log ---\n{}",
            self.log_text()
        );
    }

    /// Starts the daemon again on the same state dir and port, with the same options, after
    /// [`TestServer::kill9`] or [`TestServer::terminate`]. Clients made before keep working.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart needs a stopped server: call kill9() or terminate() first");
        let mut last = String::new();
        for _attempt in 0..RESTART_ATTEMPTS {
            match self.launch() {
                Ok(()) => return,
                Err(NotReady::PortTaken(why) | NotReady::Failed(why)) => last = why,
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("sandlot serve did not restart on port {}: {last}\n--- server log ---\n{}", self.port, self.log_text());
    }

    /// Starts the daemon again on the same state dir, with the same options, on a fresh port, after
    /// [`TestServer::kill9`] or [`TestServer::terminate`].
    pub fn restart_on_a_new_port(&mut self) {
        assert!(self.child.is_none(), "a restart needs a stopped server: call kill9() or terminate() first");
        self.start_on_a_free_port();
    }

    /// Spawns the daemon and waits until it answers, with our admin key, on our port; a daemon that
    /// did not is killed.
    fn launch(&mut self) -> Result<(), NotReady> {
        self.child = Some(self.spawn());
        if let Err(why) = self.wait_ready() {
            if let Some(mut c) = self.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
            return Err(match why {
                NotReady::Failed(why) if self.log_text().contains("Address already in use") => NotReady::PortTaken(why),
                why => why,
            });
        }
        let instance = fs::read_to_string(self.state.join("instance-id")).unwrap_or_else(|e| {
            panic!("reading {}: {e}\n--- server log ---\n{}", self.state.join("instance-id").display(), self.log_text())
        });
        self.sandbox_cgroup_bases = sandbox_cgroup_bases(self.pid(), instance.trim());
        Ok(())
    }

    fn spawn(&self) -> Child {
        let mut cmd = serve_command(&self.state, self.port, &self.log);
        cmd.args(&self.args);
        if let Some(limit) = self.fd_limit {
            // SAFETY: between fork and exec the closure only calls setrlimit on a stack value and reads
            // errno on failure.
            unsafe {
                cmd.pre_exec(move || {
                    let r = libc::rlimit { rlim_cur: limit, rlim_max: limit };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &r) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if let Some((fd, target)) = &self.inherited {
            let (source, target) = (fd.as_raw_fd(), *target);
            // SAFETY: between fork and exec the closure only calls dup2 on descriptors that stay open
            // for the whole spawn (owned by the server), and reads errno on failure.
            unsafe {
                cmd.pre_exec(move || {
                    // dup2 leaves the new descriptor without close-on-exec: the daemon inherits it.
                    if libc::dup2(source, target) < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        if !self.join.is_empty() {
            let procs = self.join.clone();
            // SAFETY: between fork and exec the closure only calls open/write/close on paths prepared
            // before the fork, and builds an io::Error from errno; none of these allocate or take locks.
            unsafe {
                cmd.pre_exec(move || {
                    for path in &procs {
                        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                        if fd < 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        // "0" is the writing process itself.
                        let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                        libc::close(fd);
                        if n != 1 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    Ok(())
                });
            }
        }
        cmd.spawn().expect("spawning sandlot serve (the suites must run as root)")
    }

    /// Waits until the daemon has written its admin key and answers an authenticated request with it:
    /// another process on this port would not know our key.
    fn wait_ready(&mut self) -> Result<(), NotReady> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(NotReady::Failed(format!("the server exited early with {status}")));
            }
            if self.admin_key.is_empty() {
                if let Ok(key) = fs::read_to_string(self.state.join("admin.key")) {
                    self.admin_key = key.trim().to_string();
                }
            }
            if !self.admin_key.is_empty() {
                match http::request(self.port, "GET", "/v1/sandboxes", Some(&self.admin_key), &[], b"") {
                    Ok(r) if r.status == 200 => return Ok(()),
                    Ok(r) if r.status == 401 => {
                        return Err(NotReady::PortTaken(format!("another server answers on port {}", self.port)))
                    }
                    _ => {}
                }
            }
            if Instant::now() > deadline {
                return Err(NotReady::Failed(format!("the server did not answer within {START_TIMEOUT:?}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the daemon is running (not stopped by [`TestServer::kill9`] or
    /// [`TestServer::terminate`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Kills the daemon with SIGKILL (a crash: no chance to clean up) and reaps it.
    pub fn kill9(&mut self) {
        kill9_daemon(self.child.take().expect("kill9 needs a running server"));
    }

    /// Stops the daemon with SIGTERM and waits for it; returns its exit status. Panics (after killing
    /// it) if it has not exited within [`super::STOP_TIMEOUT`].
    pub fn terminate(&mut self) -> ExitStatus {
        let child = self.child.take().expect("terminate needs a running server");
        stop_daemon(child).unwrap_or_else(|why| panic!("{why}\n--- server log ---\n{}", self.log_text()))
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The loopback port the server listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The state directory (`--state-dir`).
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The temporary directory that holds the state dir and the log.
    pub fn temp_dir(&self) -> &Path {
        self._root.path()
    }

    /// The bootstrap admin key read from `admin.key`.
    pub fn admin_key(&self) -> &str {
        &self.admin_key
    }

    /// Host pid of the running daemon.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("the server is running").id() as i32
    }

    /// Everything the daemon logged so far (all its runs).
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The test cgroup's directories, `(controller, directory)`, if the server runs in one of its own
    /// ([`Builder::own_cgroup`], and always on a pure v2 host).
    pub fn test_cgroup(&self) -> Option<&[(String, PathBuf)]> {
        self.cgroup.as_ref().map(|c| c.dirs.as_slice())
    }

    /// Where the daemon makes its sandboxes' cgroups, one directory per controller.
    pub fn sandbox_cgroup_bases(&self) -> &[PathBuf] {
        &self.sandbox_cgroup_bases
    }

    /// A client with the admin key.
    pub fn client(&self) -> Client {
        Client::new(self.url(), self.admin_key.clone())
    }

    /// A client with a fresh key for `tenant` (made with the admin key).
    pub fn tenant_client(&self, tenant: &str) -> Client {
        let key = self.client().create_key(tenant).unwrap_or_else(|e| panic!("creating a key for {tenant}: {e:?}"));
        assert_eq!(key.tenant, tenant);
        Client::new(self.url(), key.key)
    }

    /// Creates a sandbox with the server's default limits as the admin tenant.
    pub fn sandbox(&self) -> Sandbox {
        self.create(&CreateSandbox::default())
    }

    /// Creates a sandbox from `spec` as the admin tenant, or panics with the server log.
    pub fn create(&self, spec: &CreateSandbox) -> Sandbox {
        self.client()
            .create(spec)
            .unwrap_or_else(|e| panic!("create {spec:?}: {e:?}\n--- server log ---\n{}", self.log_text()))
    }

    /// Sends a raw HTTP/1.1 request; `key` becomes a Bearer header.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> http::RawResponse {
        http::request(self.port, method, path, key, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let stopped = self.child.take().map(stop_daemon);
        let mut failure = None;
        if let Some(check) = self.drop_check {
            failure = match stopped {
                Some(Err(why)) => Some(why),
                _ => check(self).err(),
            };
        } else if let Some(Err(why)) = stopped {
            eprintln!("{why}; killed it");
        }
        for base in &self.sandbox_cgroup_bases {
            remove_cgroup_tree(base);
        }
        if let Some(cgroup) = self.cgroup.take() {
            cgroup.remove();
        }
        if let Some(why) = failure {
            if std::thread::panicking() {
                eprintln!("(while unwinding) {why}");
            } else {
                panic!("{why}\n--- server log ---\n{}", self.log_text());
            }
        }
    }
}

/// The cgroup(s) one test server runs in, made for it and removed with it.
///
/// v1 (or hybrid): `<test's own cgroup>/sandlot-<suite>-<pid>-<n>` per controller, which the daemon joins.
///
/// Pure v2: the test process's cgroup holds the test itself (and, under nextest, other tests), and a
/// daemon refuses to start in a cgroup it shares. So each server gets `<P>/sandlot-e2e-<pid>-<n>`, where
/// `P` is the hierarchy root or the parent of the test's cgroup if that parent delegates memory, pids and
/// cpu (`scripts/test.sh` and the VM test run the suites from such a leaf), and the daemon is started in
/// that cgroup's `sandlot-daemon` leaf, as a service manager's `DelegateSubgroup=` would start it:
/// restarts and a second daemon of the same "service" join the same leaf.
struct TestCgroup {
    /// `(controller, directory)`: the daemon's own cgroup per controller (on v2, the leaf's parent).
    dirs: Vec<(String, PathBuf)>,
    /// `cgroup.procs` files the daemon joins between fork and exec.
    procs: Vec<std::ffi::CString>,
}

impl TestCgroup {
    fn create() -> Option<TestCgroup> {
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let mine = cgroup_dirs(&own);
        // Unique per process and per call: a test binary runs many servers in one process.
        let name = format!("sandlot-e2e-{}-{}", std::process::id(), CGROUPS.fetch_add(1, Ordering::Relaxed));
        let c_path = |p: &Path| {
            std::ffi::CString::new(p.join("cgroup.procs").to_string_lossy().as_bytes()).expect("no NUL in cgroup path")
        };
        if mine.iter().any(|(c, _)| c == "memory") {
            let dirs: Vec<(String, PathBuf)> = mine.into_iter().map(|(c, d)| (c, d.join(&name))).collect();
            for (_, d) in &dirs {
                fs::create_dir_all(d).unwrap_or_else(|e| panic!("creating test cgroup {}: {e}", d.display()));
            }
            let procs = dirs.iter().map(|(_, d)| c_path(d)).collect();
            return Some(TestCgroup { dirs, procs });
        }
        let (_, test_cgroup) = mine.into_iter().find(|(c, _)| c == "unified")?;
        let parent = v2_parent_for_test_cgroups(&test_cgroup);
        let dir = parent.join(&name);
        let leaf = dir.join(sandlot_linux::cgroup::DAEMON_LEAF);
        fs::create_dir_all(&leaf).unwrap_or_else(|e| panic!("creating test cgroup {}: {e}", leaf.display()));
        Some(TestCgroup { dirs: vec![("unified".to_string(), dir)], procs: vec![c_path(&leaf)] })
    }

    /// Kills whatever is left in it and removes the test's cgroup directories.
    fn remove(self) {
        for (_, dir) in &self.dirs {
            remove_cgroup_tree(dir);
        }
    }
}

/// Whether this host has only the unified cgroup hierarchy (no v1 memory controller mounted).
pub fn pure_cgroup_v2() -> bool {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let dirs = cgroup_dirs(&own);
    !dirs.is_empty() && dirs.iter().all(|(c, _)| c == "unified")
}

/// Where test cgroups with the memory, pids and cpu controllers can be made on v2: the hierarchy root,
/// or the parent of the test's own cgroup when it hands those controllers down.
fn v2_parent_for_test_cgroups(test_cgroup: &Path) -> PathBuf {
    const NEEDED: [&str; 3] = ["memory", "pids", "cpu"];
    let delegates = |dir: &Path| {
        let enabled = fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
        NEEDED.iter().all(|c| enabled.split_whitespace().any(|e| e == *c))
    };
    // Only the true root has no `cgroup.type`; it may hold processes and hand out controllers at once.
    if !test_cgroup.join("cgroup.type").exists() {
        if !delegates(test_cgroup) {
            fs::write(test_cgroup.join("cgroup.subtree_control"), "+memory +pids +cpu")
                .unwrap_or_else(|e| panic!("enabling memory, pids, cpu in the root cgroup: {e}"));
        }
        return test_cgroup.to_path_buf();
    }
    match test_cgroup.parent() {
        Some(parent) if delegates(parent) => parent.to_path_buf(),
        _ => panic!(
            "on a pure cgroup v2 host the suites must run from a leaf cgroup whose parent delegates memory, \
             pids and cpu (the test runs in {}): run them through scripts/test.sh, which makes one",
            test_cgroup.display()
        ),
    }
}

/// Removes cgroup `dir` and everything below it, deepest first: frozen tasks are thawed first (they
/// do not die frozen), then whatever is left is killed.
fn remove_cgroup_tree(dir: &Path) {
    let mut dirs = dirs_under(dir);
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

/// Where the daemon `pid` makes sandbox cgroups: its own cgroup per controller, plus
/// `sandlot-<instance>`.
fn sandbox_cgroup_bases(pid: i32, instance: &str) -> Vec<PathBuf> {
    let own = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    cgroup_dirs(&own)
        .into_iter()
        .map(|(ctrl, dir)| {
            // On v2 the daemon runs in the `sandlot-daemon` leaf of its cgroup.
            let dir = match dir.parent() {
                Some(parent) if ctrl == "unified" && dir.ends_with(sandlot_linux::cgroup::DAEMON_LEAF) => {
                    parent.to_path_buf()
                }
                _ => dir,
            };
            dir.join(format!("sandlot-{instance}"))
        })
        .collect()
}
