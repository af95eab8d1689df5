//! The launcher: one `sandlot serve` per test, on a fresh state dir and a free loopback port.
//!
//! Each server writes its admin key to `<state>/admin.key`, names its cgroups after a random instance id
//! kept in the state dir (so parallel servers never sweep each other's sandboxes), and mounts its layers
//! volume in a mount namespace of its own. Dropping a [`Server`] sends SIGTERM (the server deletes its
//! sandboxes) and waits for it; a server that does not exit in time is killed.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

use sandlot_client::api::CreateSandbox;
use sandlot_client::{Client, Sandbox};

use crate::common::{free_port, serve_command, stop_daemon};

const START_TIMEOUT: Duration = Duration::from_secs(15);

/// How to start a server.
#[derive(Default)]
pub struct Options {
    /// Defence layers switched off with `--insecure-disable-layer` (`seccomp`, `landlock`).
    pub disabled_layers: Vec<&'static str>,
    /// A host directory the daemon inherits, opened without close-on-exec, at this descriptor number
    /// (as a daemon started from a script, a CI runner or a service manager may inherit descriptors).
    pub inherited_dir: Option<(PathBuf, i32)>,
    /// Extra `serve` options.
    pub args: Vec<String>,
    /// The daemon's descriptor limit (soft and hard), set before exec; the daemon cannot raise it.
    pub fd_limit: Option<u64>,
}

/// A running `sandlot serve` owned by one test.
pub struct Server {
    dir: tempfile::TempDir,
    child: Option<Child>,
    port: u16,
    key: String,
}

/// A sandbox's pid 1 seen from the host.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// Host pid.
    pub pid: i32,
    /// Host uids from `/proc/<pid>/status`: real, effective, saved, filesystem.
    pub uids: [u32; 4],
    /// Host cgroup paths of the process (`/proc/<pid>/cgroup`), which name its sandbox.
    pub cgroup: String,
}

impl Server {
    /// A server with every defence layer on.
    pub fn start() -> Server {
        Server::with(Options::default())
    }

    /// A server with `layers` switched off (test-only flag of the server).
    pub fn without(layers: &[&'static str]) -> Server {
        Server::with(Options { disabled_layers: layers.to_vec(), ..Options::default() })
    }

    /// A server started as `options` say.
    pub fn with(options: Options) -> Server {
        let dir = tempfile::Builder::new().prefix("sandlot-escape-").tempdir().expect("tempdir");
        // Sandbox ids (a private host uid range) must traverse it to reach their layers.
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o711)).expect("chmod tempdir");
        let inherited = options.inherited_dir.as_ref().map(|(path, fd)| {
            let file = File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
            (OwnedFd::from(file), *fd)
        });
        let mut server = Server { dir, child: None, port: 0, key: String::new() };
        let mut last_log = String::new();
        // A port found by bind-and-drop can be taken by a parallel test before the server binds it.
        for _attempt in 0..3 {
            server.port = free_port();
            server.child = Some(server.spawn(&options, inherited.as_ref()));
            match server.wait_healthy() {
                Ok(()) => {
                    let path = server.state_dir().join("admin.key");
                    server.key = fs::read_to_string(&path)
                        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
                        .trim()
                        .to_string();
                    return server;
                }
                Err(why) => {
                    server.stop();
                    last_log = server.log();
                    if !last_log.contains("Address already in use") {
                        panic!("sandlot serve did not become ready: {why}\n--- server log ---\n{last_log}");
                    }
                }
            }
        }
        panic!("sandlot serve could not bind a port\n--- server log ---\n{last_log}");
    }

    fn spawn(&self, options: &Options, inherited: Option<&(OwnedFd, i32)>) -> Child {
        let mut cmd = serve_command(&self.state_dir(), self.port, &self.log_path());
        // No attack needs to reach anything: the proxy refuses (and logs) any non-loopback dial.
        cmd.arg("--test-loopback-only");
        for layer in &options.disabled_layers {
            cmd.arg("--insecure-disable-layer").arg(layer);
        }
        cmd.args(&options.args);
        if let Some(limit) = options.fd_limit {
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
        if let Some((fd, target)) = inherited {
            let (source, target) = (fd.as_raw_fd(), *target);
            // SAFETY: between fork and exec the closure only calls dup2 on descriptors that stay open
            // for the whole spawn (owned by the caller), and reads errno on failure.
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
        cmd.spawn().expect("spawning sandlot serve (the escape suite must run as root)")
    }

    fn wait_healthy(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                return Err(format!("the server exited early with {status}"));
            }
            if self.healthz().is_ok_and(|ok| ok) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("/healthz did not answer 200 within {START_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn healthz(&self) -> std::io::Result<bool> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(stream, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer)?;
        Ok(answer.starts_with("HTTP/1.1 200"))
    }

    fn stop(&mut self) {
        if let Some(Err(why)) = self.child.take().map(stop_daemon) {
            eprintln!("{why}; killed it");
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
    pub fn state_dir(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// The temporary directory holding the state dir and the log.
    pub fn temp_dir(&self) -> &Path {
        self.dir.path()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Everything the server logged so far.
    pub fn log(&self) -> String {
        fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Host pid of the daemon.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("server is running").id() as i32
    }

    /// The admin key (for raw requests).
    pub fn admin_key(&self) -> &str {
        &self.key
    }

    /// Asks for a download of `path` from `sb` with `key` over a raw connection that never reads the
    /// answer: the server's side of it fills and waits (a slow or stalled client).
    pub fn unread_download(&self, key: &str, sb: &Sandbox, path: &str) -> TcpStream {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).expect("connecting to the server");
        write!(
            s,
            "GET /v1/sandboxes/{}/files?path={path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n\r\n",
            sb.id()
        )
        .expect("sending the request");
        s
    }

    /// A client with the admin key.
    pub fn client(&self) -> Client {
        Client::new(self.url(), self.key.clone())
    }

    /// A sandbox with the server's default limits.
    pub fn sandbox(&self) -> Sandbox {
        self.create(&CreateSandbox::default())
    }

    /// A sandbox made from `spec`.
    pub fn create(&self, spec: &CreateSandbox) -> Sandbox {
        self.client()
            .create(spec)
            .unwrap_or_else(|e| panic!("create {spec:?}: {e:?}\n--- server log ---\n{}", self.log()))
    }

    /// The supervisors (pid 1 of each sandbox) this daemon started, read from the host's /proc.
    pub fn supervisors(&self) -> Vec<Supervisor> {
        let daemon = self.pid();
        let mut found = Vec::new();
        for entry in fs::read_dir("/proc").expect("reading /proc").flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline != b"sandlot\0__supervisor\0" {
                continue;
            }
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let field = |name: &str| -> Vec<u32> {
                status
                    .lines()
                    .find_map(|l| l.strip_prefix(name))
                    .map(|rest| rest.split_whitespace().filter_map(|n| n.parse().ok()).collect())
                    .unwrap_or_default()
            };
            if field("PPid:") != [daemon as u32] {
                continue;
            }
            let uid = field("Uid:");
            let uids = [uid[0], uid[1], uid[2], uid[3]];
            let cgroup = fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            found.push(Supervisor { pid, uids, cgroup });
        }
        found
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}
