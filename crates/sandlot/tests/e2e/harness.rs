//! The harness: one `sandlot serve` per test, with its own state dir, loopback port and cgroup.
//!
//! Each server runs in a cgroup of its own (one per v1 controller the daemon uses; on a pure v2 host, the
//! test's own), so that a daemon's start-up sweep of `<its cgroup>/sandlot-*/` can never touch the
//! sandboxes of another test's server (or of a developer's daemon on the same machine), and so that
//! leftovers can be attributed to exactly one server. Dropping a [`Server`] stops it with SIGTERM and then
//! checks that nothing of its sandboxes is left on the host: no cgroup, no layer directory, no mount.
//!
//! Layers live on the server's btrfs layers volume, mounted only in the daemon's private mount namespace;
//! the harness looks at them through `/proc/<daemon>/root` while the daemon runs ([`Server::assert_clean`]).
//! Once the daemon has exited that volume is out of sight, so a clean shutdown is checked by restarting on
//! the same state dir and finding that the start-up sweep has nothing to remove.

use std::fs;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest};
use sandlot_client::{Client, Sandbox};

pub use crate::common::{alive, eventually, signal};
use crate::common::{cgroup_dirs, free_port, kill9_daemon, serve_command, stop_daemon};
pub use crate::common::{expect_error, sh, sh_ok};

const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Test cgroups made by this process so far.
static CGROUPS: AtomicU32 = AtomicU32::new(0);

/// A running `sandlot serve` owned by one test.
pub struct Server {
    /// `None` once handed over to a restart.
    parts: Option<Parts>,
    port: u16,
    child: Option<Child>,
    admin_key: String,
}

/// What a server runs on, kept across a restart.
struct Parts {
    /// Temporary directory holding `state/` and `server.log`, removed when the parts are dropped.
    _root: tempfile::TempDir,
    state: PathBuf,
    log: PathBuf,
    /// The cgroup this server owns (removed with it), if any.
    cgroup: Option<TestCgroup>,
    /// `cgroup.procs` files the daemon joins before exec.
    join: Vec<std::ffi::CString>,
    /// Extra `serve` options.
    args: Vec<String>,
}

impl Parts {
    fn fresh(args: &[&str]) -> Parts {
        let root = tempfile::Builder::new().prefix("sandlot-e2e-").tempdir().expect("tempdir");
        // Sandbox ids (a private host uid range) must traverse it to reach their layers.
        fs::set_permissions(root.path(), fs::Permissions::from_mode(0o711)).expect("chmod tempdir");
        Parts {
            state: root.path().join("state"),
            log: root.path().join("server.log"),
            _root: root,
            cgroup: None,
            join: Vec::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }
}

impl Server {
    /// Starts a server with its default options (so the btrfs layers volume, in the daemon's private
    /// mount namespace) on a fresh state dir, and waits until `/healthz` answers.
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// Starts a server with `args` added to `serve` (`&[]`: the server's defaults).
    pub fn start_with(args: &[&str]) -> Server {
        let mut parts = Parts::fresh(args);
        parts.cgroup = TestCgroup::create();
        parts.join = parts.cgroup.as_ref().map(|c| c.procs.clone()).unwrap_or_default();
        Server::launch(parts)
    }

    /// Starts a second server with its own state dir in the *same* cgroup as `other` (as two daemons
    /// started from one service or shell would be). Its sandboxes' cgroups are not checked on drop.
    pub fn start_beside(other: &Server) -> Server {
        let mut parts = Parts::fresh(&[]);
        parts.join = other.parts().join.clone();
        Server::launch(parts)
    }

    /// Starts a new server on the state dir, cgroup and options of `previous`, which must have been
    /// stopped (see [`Server::kill9`] and [`Server::terminate`]).
    pub fn restart_on(mut previous: Server) -> Server {
        assert!(previous.child.is_none(), "restart_on needs a stopped server; call kill9() or terminate() first");
        // The new server owns the state dir now; leftovers of a crash are its start-up sweep's to find.
        let parts = previous.parts.take().expect("parts");
        Server::launch(parts)
    }

    fn parts(&self) -> &Parts {
        self.parts.as_ref().expect("a live server has its parts")
    }

    fn launch(mut parts: Parts) -> Server {
        // A port picked by bind-and-drop can be taken by a parallel test before the server binds it.
        for _attempt in 0..3 {
            let port = free_port();
            let child = spawn_daemon(&parts, port);
            let mut server = Server { parts: Some(parts), port, child: Some(child), admin_key: String::new() };
            match server.wait_healthy() {
                Ok(()) => {
                    let key_path = server.parts().state.join("admin.key");
                    server.admin_key = fs::read_to_string(&key_path)
                        .unwrap_or_else(|e| panic!("reading {}: {e}", key_path.display()))
                        .trim()
                        .to_string();
                    assert!(!server.admin_key.is_empty(), "admin.key is empty");
                    return server;
                }
                Err(why) => {
                    let log = server.log_text();
                    if let Some(mut c) = server.child.take() {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    // Nothing was started: take the parts back, leaving the guard nothing to check.
                    parts = server.parts.take().expect("parts");
                    if !log.contains("Address already in use") {
                        if let Some(cg) = parts.cgroup.take() {
                            cg.remove();
                        }
                        panic!("sandlot serve did not become ready: {why}\n--- server log ---\n{log}");
                    }
                    eprintln!("lost a port race, retrying:\n{log}");
                }
            }
        }
        panic!("sandlot serve could not bind a free port in 3 attempts");
    }

    fn wait_healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("the server exited early with {status}"));
            }
            if let Ok(r) = self.try_raw("GET", "/healthz", None, &[], b"") {
                if r.status == 200 {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("/healthz did not answer 200 within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
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
        &self.parts().state
    }

    /// The temporary directory that holds the state dir and the log.
    pub fn temp_dir(&self) -> &Path {
        self.parts().state.parent().expect("state dir has a parent")
    }

    /// The bootstrap admin key read from `admin.key`.
    pub fn admin_key(&self) -> &str {
        &self.admin_key
    }

    /// Host pid of the daemon.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server is running").id() as i32
    }

    /// Everything the server logged so far.
    pub fn log_text(&self) -> String {
        fs::read_to_string(&self.parts().log).unwrap_or_default()
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

    /// Creates a sandbox with default limits as the admin tenant.
    pub fn sandbox(&self) -> Sandbox {
        self.create(&CreateSandbox::default())
    }

    /// Creates a sandbox from `spec` as the admin tenant.
    pub fn create(&self, spec: &CreateSandbox) -> Sandbox {
        self.client()
            .create(spec)
            .unwrap_or_else(|e| panic!("create {spec:?}: {e:?}\n--- server log ---\n{}", self.log_text()))
    }

    /// Directories that hold sandbox layers, as seen from the host: `<state>/sandboxes` and, while the
    /// daemon runs, the btrfs layers volume it mounts in its private mount namespace.
    fn layer_parents(&self) -> Vec<PathBuf> {
        let mut parents = vec![self.parts().state.join("sandboxes")];
        if let Some(child) = &self.child {
            let inside = self.parts().state.join("layers").join("sandboxes");
            let via_proc = format!("/proc/{}/root{}", child.id(), inside.display());
            parents.push(PathBuf::from(via_proc));
        }
        parents
    }

    /// The layer directory of sandbox `id`, as reachable from the host.
    pub fn layer_dir(&self, id: &str) -> PathBuf {
        let parents = self.layer_parents();
        parents.iter().map(|p| p.join(id)).find(|p| p.exists()).unwrap_or_else(|| parents[0].join(id))
    }

    /// `(controller, base)`: the directories the daemon keeps its sandbox cgroups in, beneath its own
    /// cgroup (`sandlot-<instance>`, named by `<state>/instance-id`; plain `sandlot` in older builds).
    fn cgroup_bases(&self) -> Vec<(String, PathBuf)> {
        let Some(cg) = self.parts().cgroup.as_ref() else { return Vec::new() };
        let instance = fs::read_to_string(self.parts().state.join("instance-id")).ok().map(|s| s.trim().to_string());
        cg.dirs
            .iter()
            .flat_map(|(ctrl, d)| {
                subdirs(d)
                    .into_iter()
                    .filter(|n| match &instance {
                        Some(i) => *n == format!("sandlot-{i}"),
                        None => n == "sandlot" || n.starts_with("sandlot-"),
                    })
                    .map(move |n| (ctrl.clone(), d.join(n)))
            })
            .collect()
    }

    /// The cgroup directories of sandbox `id`, one per controller.
    pub fn cgroup_dirs(&self, id: &str) -> Vec<PathBuf> {
        self.cgroup_bases().into_iter().map(|(_, base)| base.join(id)).collect()
    }

    /// The cgroup directory of sandbox `id` for `controller` (`memory`, `pids`, `cpu`; `unified` on v2).
    pub fn cgroup_dir(&self, id: &str, controller: &str) -> Option<PathBuf> {
        self.cgroup_bases().into_iter().find(|(c, _)| c == controller || c == "unified").map(|(_, b)| b.join(id))
    }

    /// Host pids of every process in sandbox `id`'s cgroup right now.
    pub fn sandbox_pids(&self, id: &str) -> Vec<i32> {
        let mut pids: Vec<i32> = self
            .cgroup_dirs(id)
            .iter()
            .filter_map(|d| fs::read_to_string(d.join("cgroup.procs")).ok())
            .flat_map(|s| s.lines().filter_map(|l| l.trim().parse().ok()).collect::<Vec<i32>>())
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    }

    /// What the host still holds for this server's sandboxes.
    pub fn leftovers(&self) -> Leftovers {
        let mut cgroups: Vec<String> = self
            .cgroup_bases()
            .into_iter()
            .flat_map(|(ctrl, base)| subdirs(&base).into_iter().map(move |n| format!("{ctrl}:{n}")))
            .collect();
        cgroups.sort();
        let layers = self
            .layer_parents()
            .iter()
            .filter_map(|p| fs::read_dir(p).ok())
            .flat_map(|rd| rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect();
        let state = self.parts().state.to_string_lossy().into_owned();
        let mounts = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains(&state))
            .map(str::to_string)
            .collect();
        Leftovers { cgroups, layers, mounts }
    }

    /// Asserts that no sandbox of this server left a cgroup, a layer directory or a host mount.
    #[track_caller]
    pub fn assert_clean(&self) {
        let left = self.leftovers();
        assert!(left.is_empty(), "leftovers on the host: {left:#?}\n--- server log ---\n{}", self.log_text());
    }

    /// Sends SIGTERM and waits (up to 10 s) for the server to exit; panics if it does not.
    pub fn terminate(&mut self) -> ExitStatus {
        let child = self.child.take().expect("server is running");
        stop_daemon(child).unwrap_or_else(|why| panic!("{why}\n--- server log ---\n{}", self.log_text()))
    }

    /// Kills the server with SIGKILL (a crash) and reaps it.
    pub fn kill9(&mut self) {
        kill9_daemon(self.child.take().expect("server is running"));
    }

    /// Sends a raw HTTP/1.1 request; `key` becomes a Bearer header.
    pub fn raw(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> RawResponse {
        self.try_raw(method, path, key, headers, body).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// `GET path_and_query` over raw HTTP with the admin key.
    pub fn get(&self, path_and_query: &str) -> RawResponse {
        self.raw("GET", path_and_query, Some(&self.admin_key), &[], b"")
    }

    /// Sends `request` verbatim (head and any body) and reads the answer.
    pub fn raw_request(&self, request: &[u8]) -> RawResponse {
        let attempt = || -> std::io::Result<RawResponse> {
            let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
            stream.set_read_timeout(Some(Duration::from_secs(30)))?;
            stream.write_all(request)?;
            let mut raw = Vec::new();
            stream.read_to_end(&mut raw)?;
            RawResponse::parse(&raw)
        };
        attempt().unwrap_or_else(|e| panic!("raw request: {e}"))
    }

    fn try_raw(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<RawResponse> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        // A `host` among `headers` replaces ours (preview origins are chosen by Host).
        let host = headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case("host"))
            .map_or_else(|| format!("127.0.0.1:{}", self.port), |(_, v)| v.to_string());
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        if let Some(key) = key {
            req.push_str(&format!("Authorization: Bearer {key}\r\n"));
        }
        for (name, value) in headers.iter().filter(|(n, _)| !n.eq_ignore_ascii_case("host")) {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        req.push_str("\r\n");
        stream.write_all(req.as_bytes())?;
        stream.write_all(body)?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw)?;
        RawResponse::parse(&raw)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.parts.is_none() {
            return; // handed over to a restart
        }
        let mut failure = self.child.take().and_then(|child| stop_daemon(child).err());
        let left = self.leftovers();
        if failure.is_none() && !left.is_empty() {
            failure = Some(format!("leftovers on the host after shutdown: {left:#?}"));
        }
        if let Some(cg) = self.parts.as_mut().and_then(|p| p.cgroup.take()) {
            cg.remove();
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

/// What a server's sandboxes left on the host.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// `controller:sandbox-id` of every sandbox cgroup still present.
    pub cgroups: Vec<String>,
    /// Entries of `<state>/sandboxes`.
    pub layers: Vec<String>,
    /// Host mountinfo lines that mention the state dir.
    pub mounts: Vec<String>,
}

impl Leftovers {
    /// Nothing is left.
    pub fn is_empty(&self) -> bool {
        self.cgroups.is_empty() && self.layers.is_empty() && self.mounts.is_empty()
    }
}

/// The cgroup(s) one test server runs in: `<test's own cgroup>/sandlot-e2e-<pid>-<n>` per controller.
struct TestCgroup {
    /// `(controller, directory)`: the daemon's own cgroup per controller.
    dirs: Vec<(String, PathBuf)>,
    /// `cgroup.procs` of each, for the child to join between fork and exec.
    procs: Vec<std::ffi::CString>,
    /// Whether we created the directories (and so remove them).
    owned: bool,
}

impl TestCgroup {
    fn create() -> Option<TestCgroup> {
        let own = fs::read_to_string("/proc/self/cgroup").ok()?;
        let mine = cgroup_dirs(&own);
        if mine.iter().any(|(c, _)| c == "memory") {
            // Unique per process and per call: `cargo test` runs many servers in one process.
            let name = format!("sandlot-e2e-{}-{}", std::process::id(), CGROUPS.fetch_add(1, Ordering::Relaxed));
            let dirs: Vec<(String, PathBuf)> = mine.into_iter().map(|(c, d)| (c, d.join(&name))).collect();
            for (_, d) in &dirs {
                fs::create_dir_all(d).unwrap_or_else(|e| panic!("creating test cgroup {}: {e}", d.display()));
            }
            let procs = dirs
                .iter()
                .map(|(_, d)| {
                    std::ffi::CString::new(d.join("cgroup.procs").to_string_lossy().as_bytes())
                        .expect("no NUL in cgroup path")
                })
                .collect();
            return Some(TestCgroup { dirs, procs, owned: true });
        }
        // Pure cgroup v2: the daemon manages its own cgroup (it may move itself to a leaf); we only
        // look at `<own>/sandlot` and do not isolate.
        let unified = mine.into_iter().find(|(c, _)| c == "unified")?;
        Some(TestCgroup { dirs: vec![unified], procs: Vec::new(), owned: false })
    }

    /// Kills whatever is left in sandbox cgroups and removes the test's cgroup directories.
    fn remove(self) {
        if !self.owned {
            return;
        }
        for (_, dir) in &self.dirs {
            for base in subdirs(dir).into_iter().filter(|n| n.starts_with("sandlot")).map(|n| dir.join(n)) {
                for name in subdirs(&base) {
                    let cg = base.join(name);
                    for _ in 0..200 {
                        for pid in fs::read_to_string(cg.join("cgroup.procs"))
                            .unwrap_or_default()
                            .lines()
                            .filter_map(|l| l.trim().parse::<i32>().ok())
                        {
                            signal(pid, libc::SIGKILL);
                        }
                        if fs::remove_dir(&cg).is_ok() || !cg.exists() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(10));
                    }
                }
                let _ = fs::remove_dir(&base);
            }
            for _ in 0..100 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

fn subdirs(dir: &Path) -> Vec<String> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn spawn_daemon(parts: &Parts, port: u16) -> Child {
    let procs = parts.join.clone();
    let mut cmd = serve_command(&parts.state, port, &parts.log);
    cmd.args(&parts.args);
    // SAFETY: between fork and exec the closure only calls open/write/close on paths prepared before
    // the fork, and builds an io::Error from errno; none of these allocate or take locks.
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
    cmd.spawn().expect("spawning sandlot serve")
}

/// An answer read off a raw socket.
#[derive(Debug)]
pub struct RawResponse {
    /// HTTP status.
    pub status: u16,
    /// Header block, lower-cased names as sent.
    pub head: String,
    /// Body (de-chunked).
    pub body: String,
}

impl RawResponse {
    fn parse(raw: &[u8]) -> std::io::Result<RawResponse> {
        let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
        let split = raw.windows(4).position(|w| w == b"\r\n\r\n").ok_or_else(|| bad("no end of headers"))?;
        let head = String::from_utf8_lossy(&raw[..split]).into_owned();
        let mut body = raw[split + 4..].to_vec();
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status"))?;
        if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
            body = dechunk(&body);
        }
        Ok(RawResponse { status, head, body: String::from_utf8_lossy(&body).into_owned() })
    }

    /// The body as JSON (panics with the body if it is not).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("body is not JSON ({e}): {:?}", self.body))
    }

    /// Asserts a JSON error answer `{"error":{"code","message"}}` and returns its message.
    #[track_caller]
    pub fn assert_error(&self, status: u16, code: &str) -> String {
        assert_eq!(self.status, status, "unexpected answer: {self:?}");
        let v = self.json();
        assert_eq!(v["error"]["code"], code, "unexpected error body: {}", self.body);
        let message = v["error"]["message"]
            .as_str()
            .unwrap_or_else(|| panic!("error without a message: {}", self.body))
            .to_string();
        assert!(!message.trim().is_empty(), "empty error message: {}", self.body);
        message
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&b[..eol]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}

/// An exec request for `argv` (no shell).
pub fn argv(args: &[&str]) -> ExecRequest {
    ExecRequest { argv: Some(args.iter().map(|s| s.to_string()).collect()), ..ExecRequest::default() }
}

/// Asserts that sandbox `id` is gone for `client`: `get` is 404 or reports `deleted`, and commands and
/// file operations are refused (404 `not_found`, or 409 `conflict` naming the deleted state).
#[track_caller]
pub fn assert_deleted(client: &Client, id: &str) {
    match client.get(id) {
        Err(e) => assert_eq!((e.status(), e.code()), (Some(404), Some("not_found")), "{e:?}"),
        Ok(info) => assert_eq!(info.state, sandlot_client::api::SandboxState::Deleted, "{info:?}"),
    }
    let sb = client.sandbox(id);
    for err in [sb.run(&["true"]).map(|_| ()).unwrap_err(), sb.read_file("/etc/hostname").map(|_| ()).unwrap_err()] {
        match err.status() {
            Some(404) => assert_eq!(err.code(), Some("not_found"), "{err:?}"),
            Some(409) => {
                assert_eq!(err.code(), Some("conflict"), "{err:?}");
                assert!(err.to_string().contains("deleted"), "{err:?}");
            }
            _ => panic!("a deleted sandbox answered {err:?}"),
        }
    }
    assert!(client.list().unwrap().iter().all(|s| s.id != id), "a deleted sandbox is listed");
}
