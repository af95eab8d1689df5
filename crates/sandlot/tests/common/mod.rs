//! What the test suites (e2e, escape, persist, fairness) share: one launcher of `sandlot serve`
//! ([`server::TestServer`], started from a [`server::Builder`]), raw HTTP ([`http`]), and looking at
//! host processes and cgroups. Each suite's own launcher file adds its defaults and what it alone
//! inspects (e2e: a cgroup per server and a leftovers check; escape: the supervisors; persist: the
//! layers volume).

// Each suite uses a different subset.
#![allow(dead_code)]

pub mod http;
pub mod server;

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sandlot_client::api::ExecRequest;
use sandlot_client::{Error, Sandbox};

/// How long a daemon may take to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// `sandlot serve` on state dir `state` and `127.0.0.1:port`, logging (appending) to `log`, with the
/// environment that could redirect it cleared. Callers add their own options and spawn it.
pub fn serve_command(state: &Path, port: u16, log: &Path) -> Command {
    let out = File::options().create(true).append(true).open(log).expect("opening the server log");
    let err = out.try_clone().expect("cloning the log handle");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sandlot"));
    cmd.arg("serve")
        .arg("--state-dir")
        .arg(state)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("SANDLOT_LOG", "info")
        .env_remove("SANDLOT_STATE_DIR")
        .env_remove("SANDLOT_LISTEN")
        .env_remove("SANDLOT_CONFIG")
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err);
    cmd
}

/// A loopback port free right now (bind and drop: a parallel test may take it first, so launchers
/// retry on "Address already in use").
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("binding a loopback port").port()
}

/// Sends `sig` to host process `pid`.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill has no memory-safety preconditions; pids are ones a test started or read from its own
    // sandboxes' cgroups.
    unsafe { libc::kill(pid, sig) };
}

/// Whether host process `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|state| state != 'Z' && state != 'X'),
        Err(_) => false,
    }
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits up to `timeout` for `child` to exit.
pub fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Stops a daemon with SIGTERM and reaps it. If it has not exited within [`STOP_TIMEOUT`] it is killed
/// and the answer is an error saying so.
pub fn stop_daemon(mut child: Child) -> Result<ExitStatus, String> {
    signal(child.id() as i32, libc::SIGTERM);
    match wait_timeout(&mut child, STOP_TIMEOUT) {
        Some(status) => Ok(status),
        None => {
            let _ = child.kill();
            let _ = child.wait();
            Err(format!("the server did not exit within {STOP_TIMEOUT:?} of SIGTERM"))
        }
    }
}

/// Kills a daemon with SIGKILL (a crash: no chance to clean up) and reaps it.
pub fn kill9_daemon(mut child: Child) {
    signal(child.id() as i32, libc::SIGKILL);
    child.wait().expect("reaping the killed server");
}

/// An exec request for a `/bin/sh -c` command line.
pub fn sh(command: &str) -> ExecRequest {
    ExecRequest { shell: Some(command.to_string()), ..ExecRequest::default() }
}

/// Runs a command line in `sandbox` and returns its stdout, asserting exit 0.
#[track_caller]
pub fn sh_ok(sandbox: &Sandbox, command: &str) -> String {
    let r = sandbox.shell(command).unwrap_or_else(|e| panic!("{command}: {e:?}"));
    assert_eq!((r.status.as_str(), r.exit_code), ("exited", 0), "{command}: {r:?}");
    r.stdout
}

/// Asserts that `result` failed with HTTP `status` and server code `code`, with a message; returns
/// the error.
#[track_caller]
pub fn expect_error<T: std::fmt::Debug>(result: Result<T, Error>, status: u16, code: &str) -> Error {
    let err = match result {
        Ok(v) => panic!("expected HTTP {status} {code}, got success: {v:?}"),
        Err(e) => e,
    };
    assert_eq!((err.status(), err.code()), (Some(status), Some(code)), "unexpected error: {err:?}");
    assert!(!err.to_string().trim().is_empty(), "empty message: {err:?}");
    err
}

/// One line of /proc/self/mountinfo, as far as cgroup discovery needs it.
pub struct Mount {
    /// Root of the mount within its filesystem (a cgroup path for cgroup mounts).
    pub root: String,
    /// Where it is mounted.
    pub point: PathBuf,
    /// Filesystem type (`cgroup`, `cgroup2`, …).
    pub fstype: String,
    /// Super-block options (the controllers, for a v1 cgroup mount).
    pub options: String,
}

/// The mounts of this process's mount namespace.
pub fn mounts() -> Vec<Mount> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    mountinfo
        .lines()
        .filter_map(|line| {
            let (pre, post) = line.split_once(" - ")?;
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            Some(Mount {
                root: pre.get(3)?.to_string(),
                point: PathBuf::from(pre.get(4)?),
                fstype: post.first()?.to_string(),
                options: post.get(2).unwrap_or(&"").to_string(),
            })
        })
        .collect()
}

/// Controllers the daemon uses on a v1 (or hybrid) host; mirrors `sandlot_linux::cgroup`.
pub const V1_CONTROLLERS: [&str; 5] = ["memory", "pids", "cpu", "cpuacct", "freezer"];

/// The cgroup directories of a process whose `/proc/<pid>/cgroup` reads `own`: `(controller, dir)` for
/// each v1 controller the daemon uses or, when none is mounted (a pure v2 host), `("unified", dir)`.
pub fn cgroup_dirs(own: &str) -> Vec<(String, PathBuf)> {
    let mounts = mounts();
    let own_path = |pick: &dyn Fn(&str) -> bool| {
        own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
            pick(ctrls).then(|| path.to_string())
        })
    };
    let dir = |m: &Mount, path: &str| {
        let rel = path.strip_prefix(m.root.as_str()).unwrap_or(path).trim_start_matches('/');
        m.point.join(rel)
    };
    let mut dirs = Vec::new();
    for ctrl in V1_CONTROLLERS {
        let Some(m) = mounts.iter().find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == ctrl)) else {
            continue;
        };
        if let Some(path) = own_path(&|c: &str| c.split(',').any(|x| x == ctrl)) {
            dirs.push((ctrl.to_string(), dir(m, &path)));
        }
    }
    if dirs.is_empty() {
        if let (Some(m), Some(path)) =
            (mounts.iter().find(|m| m.fstype == "cgroup2"), own_path(&|c: &str| c.is_empty()))
        {
            dirs.push(("unified".to_string(), dir(m, &path)));
        }
    }
    dirs
}

/// A tar header as real tar writers make it: owner root, a fixed mtime.
pub fn tar_header(kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(mode);
    h.set_size(size);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(1_700_000_000);
    h
}

/// A root filesystem with Debian's static busybox as `/bin/busybox` and `/bin/sh`, a passwd naming
/// root only, and whatever is added: `(path, contents)` files and `(path, target)` symlinks.
pub fn busybox_rootfs(files: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
    let busybox = fs::read("/bin/busybox").expect("Debian's busybox-static at /bin/busybox");
    let mut b = tar::Builder::new(Vec::new());
    for d in ["bin", "etc", "root"] {
        b.append_data(&mut tar_header(tar::EntryType::Directory, 0o755, 0), d, std::io::empty()).unwrap();
    }
    let mut file = |path: &str, data: &[u8], mode: u32| {
        b.append_data(&mut tar_header(tar::EntryType::Regular, mode, data.len() as u64), path, data).unwrap();
    };
    file("bin/busybox", &busybox, 0o755);
    file("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644);
    for (path, data) in files {
        file(path, data, 0o644);
    }
    for (path, target) in [("bin/sh", "busybox")].iter().chain(links) {
        b.append_link(&mut tar_header(tar::EntryType::Symlink, 0o777, 0), path, target).unwrap();
    }
    b.into_inner().unwrap()
}

/// A tar of `n` empty files (`f/000000`, ...): a layer that compresses to almost nothing yet costs
/// the layers volume ~1.3 KiB of metadata per file.
pub fn empty_files(n: usize) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..n {
        let mut h = tar_header(tar::EntryType::Regular, 0o644, 0);
        b.append_data(&mut h, format!("f/{i:06}"), std::io::empty()).unwrap();
    }
    b.into_inner().unwrap()
}
