//! Attack programs and their verdicts.
//!
//! An attack is a small Python 3 program (python3 is in every `host`-image sandbox: the host's `/usr` is the
//! image) run in a fresh sandbox. It prints one result line per attempt, e.g. `bpf: errno=1 EPERM`, and
//! the test asserts the exact lines, so a changed denial (EACCES instead of EPERM, a success) is a
//! failure that names the attempt.

use std::fs::File;
use std::path::Path;

use sandlot_client::api::{ExecRequest, ExecResult, ExitStatus, User};
use sandlot_client::Sandbox;

/// Helpers every attack program starts with.
///
/// - `sc(name, nr, *args)`: a raw x86_64 syscall; prints `name: errno=N NAME` or `name: ok`.
/// - `op(name, f)`: calls `f`; prints `name: ok` or `name: errno=N NAME` for an `OSError`.
/// - `val(name, f)`: like `op`, printing `name: ok <value>` on success.
pub const PRELUDE: &str = r#"
import ctypes, errno, os, socket, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
def _arg(a):
    return ctypes.c_long(a) if isinstance(a, int) else a
def _err(e):
    return "errno=%d %s" % (e, errno.errorcode.get(e, "?"))
def sc(name, nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[_arg(a) for a in args])
    print("%s: %s" % (name, _err(ctypes.get_errno()) if r == -1 else "ok"), flush=True)
def op(name, f):
    try:
        f()
        print("%s: ok" % name, flush=True)
    except OSError as e:
        print("%s: %s" % (name, _err(e.errno)), flush=True)
def val(name, f):
    try:
        print("%s: ok %s" % (name, f()), flush=True)
    except OSError as e:
        print("%s: %s" % (name, _err(e.errno)), flush=True)
"#;

/// Runs attack program `body` (after [`PRELUDE`]) as `user`, with a 60 s limit.
pub fn python(sandbox: &Sandbox, user: User, body: &str) -> ExecResult {
    let script = format!("{PRELUDE}\n{body}");
    exec(sandbox, ExecRequest { argv: Some(vec!["python3".into(), "-c".into(), script]), ..request(user) })
}

/// Runs `command` with `/bin/sh -c` as `user`, with a 60 s limit.
pub fn sh(sandbox: &Sandbox, user: User, command: &str) -> ExecResult {
    exec(sandbox, ExecRequest { shell: Some(command.into()), ..request(user) })
}

fn request(user: User) -> ExecRequest {
    ExecRequest { user: Some(user), timeout_s: Some(60.0), ..ExecRequest::default() }
}

/// Runs `request` and panics with the server's error if the API refused it.
pub fn exec(sandbox: &Sandbox, request: ExecRequest) -> ExecResult {
    sandbox.exec(&request).unwrap_or_else(|e| panic!("exec {:?} {:?}: {e:?}", request.argv, request.shell))
}

/// Asserts the program exited 0 and printed exactly `expected`, line by line.
#[track_caller]
pub fn assert_lines<S: AsRef<str>>(result: &ExecResult, expected: &[S]) {
    assert_eq!(
        (result.status, result.exit_code),
        (ExitStatus::Exited, 0),
        "the attack program did not run to its end\nstdout:\n{}\nstderr:\n{}",
        result.stdout,
        result.stderr
    );
    let got: Vec<&str> = result.stdout.lines().collect();
    let expected: Vec<&str> = expected.iter().map(AsRef::as_ref).collect();
    assert_eq!(got, expected, "\nstderr:\n{}", result.stderr);
}

/// Asserts the sandbox still runs commands: `echo alive` as `user` answers `alive`.
#[track_caller]
pub fn assert_answers(sandbox: &Sandbox) {
    let r = sh(sandbox, User::User, "echo alive");
    assert_eq!((r.status, r.stdout.as_str()), (ExitStatus::Exited, "alive\n"), "the sandbox stopped answering: {r:?}");
}

/// Bytes of host disk a file really occupies (its allocated blocks, not its apparent size).
pub fn allocated_bytes(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    File::open(path)
        .and_then(|f| f.metadata())
        .map(|m| m.blocks() * 512)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Serialises the tests that load the whole machine (floods, bombs, timing), across test processes
/// (nextest) and threads (cargo test) alike: an exclusive `flock` on one file, released on drop.
pub struct Heavy {
    _lock: File,
}

impl Heavy {
    /// Waits for the lock.
    pub fn lock() -> Heavy {
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(std::env::temp_dir().join("sandlot-escape-heavy.lock"))
            .expect("opening the heavy-test lock");
        use std::os::fd::AsRawFd;
        // SAFETY: flock on a descriptor we own; no memory is involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) };
        assert_eq!(rc, 0, "flock: {}", std::io::Error::last_os_error());
        Heavy { _lock: file }
    }
}

/// Resident memory of host process `pid`, in bytes (`VmRSS` of its status); 0 once it is gone.
pub fn rss_bytes(pid: i32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    kib << 10
}

/// The `Host` and the path (without its leading `/`) of a preview URL: `http://{port}-{id}.localhost:{api}/{path}`.
pub fn preview(url: &str) -> (String, String) {
    let (host, path) = url.strip_prefix("http://").and_then(|u| u.split_once('/')).expect("a preview URL");
    (host.to_string(), path.to_string())
}
