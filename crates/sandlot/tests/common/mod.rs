//! What the three test suites (e2e, escape, persist) share: starting `sandlot serve` the same way,
//! stopping it, and looking at host processes. Each suite's launcher adds what it alone needs (e2e:
//! a cgroup per server and a leftovers check; escape: disabled layers and inherited descriptors;
//! persist: crashes and restarts on the same state).

// Each suite uses a different subset.
#![allow(dead_code)]

use std::fs::{self, File};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

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
