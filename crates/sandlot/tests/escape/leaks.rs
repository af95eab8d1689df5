//! Descriptors that must not cross the line: the supervisor's control socket to the daemon, and
//! descriptors the daemon itself inherited. And what Landlock still stops when one does cross.

use std::fs;
use std::os::unix::fs::PermissionsExt;

use sandlot_client::api::{ExecRequest, ExitStatus, User};

use crate::probe::{assert_lines, exec, python};
use crate::server::Server;

/// Descriptor number at which the daemon inherits a host directory in these tests.
const LEAKED_FD: i32 = 77;

/// A host directory with a world-readable secret, for the leaked-descriptor tests.
fn host_dir_with_secret() -> (tempfile::TempDir, String) {
    let dir = tempfile::Builder::new().prefix("sandlot-escape-host-").tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let secret = format!("host-secret-{}", std::process::id());
    fs::write(dir.path().join("secret.txt"), &secret).unwrap();
    fs::set_permissions(dir.path().join("secret.txt"), fs::Permissions::from_mode(0o644)).unwrap();
    (dir, secret)
}

/// A sandbox command holds only stdin, stdout and stderr: in particular not fd 3, the supervisor's
/// control socket to the daemon. (Regression: until the supervisor marked it close-on-exec, every
/// command inherited it.)
#[test]
fn leak_control_socket_is_not_inherited_by_commands() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("fstat fd 3", lambda: os.fstat(3))
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
print("open beyond stdio:", [fd for fd in range(3, 1024) if is_open(fd)])
"#;
    for user in [User::User, User::Root] {
        assert_lines(&python(&sb, user, body), &["fstat fd 3: errno=9 EBADF", "open beyond stdio: []"]);
    }
}

/// A command cannot forge its own result (exit code, output) by writing protocol frames on fd 3.
/// (Regression: with the control socket inherited, a `user` command made the API report exit 42 and
/// stdout "FORGED" at once while it was still running.)
#[test]
fn leak_commands_cannot_forge_their_own_result() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
def frame(header, payload=b""):
    h = __import__("json").dumps(header).encode()
    return struct.pack("<II", len(h), len(payload)) + h + payload
try:
    for handle in range(1, 64):
        os.write(3, frame({"ev": "output", "proc": handle, "fd": 1}, b"FORGED by uid %d\n" % os.getuid()))
        os.write(3, frame({"ev": "exited", "proc": handle, "end": {"how": "exited", "code": 42}}))
except OSError:
    pass
time.sleep(2)
print("real output")
"#;
    let r = python(&sb, User::User, body);
    assert_eq!((r.status, r.exit_code, r.stdout.as_str()), (ExitStatus::Exited, 0, "real output\n"), "{r:?}");
}

/// A `user` command cannot read what the daemon sends the supervisor: argv and env of other commands
/// (secrets given to root's), stdin, file uploads. (Regression: peeking on the inherited control socket
/// showed every root exec's env and the bytes of files written as root.)
#[test]
fn leak_commands_cannot_eavesdrop_on_the_supervisor() {
    let server = Server::start();
    let sb = server.sandbox();
    let spy = r#"
try:
    s = socket.socket(fileno=3)
except OSError as e:
    print("no control socket:", _err(e.errno))
    sys.exit(0)
seen = set()
end = time.time() + 4
while time.time() < end:
    try:
        d = s.recv(1 << 20, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        if d and d not in seen:
            seen.add(d)
            print(repr(d[:400]), flush=True)
    except BlockingIOError:
        pass
    except OSError as e:
        print("peek:", _err(e.errno))
        break
s.detach()
"#;
    let request = ExecRequest {
        argv: Some(vec!["python3".into(), "-c".into(), format!("{}\n{spy}", crate::probe::PRELUDE)]),
        ..ExecRequest::default()
    };
    let pid = sb.spawn(&request).expect("starting the spy");
    std::thread::sleep(std::time::Duration::from_millis(700));
    let secret = format!("sk-escape-{}", std::process::id());
    for i in 0..5 {
        let env = [("API_TOKEN".to_string(), format!("{secret}-{i}"))].into();
        let r = exec(
            &sb,
            ExecRequest { shell: Some("true".into()), user: Some(User::Root), env, ..ExecRequest::default() },
        );
        assert_eq!(r.exit_code, 0, "{r:?}");
    }
    sb.as_user(User::Root).write_file("/root/private.txt", format!("{secret}-file").as_bytes()).unwrap();
    let spied = sb.wait(pid).expect("waiting for the spy");
    assert!(!spied.stdout.contains(&secret), "a `user` process read root's requests:\n{}", spied.stdout);
}

/// A descriptor the daemon inherited (here a host directory at fd 77) does not reach sandbox commands.
/// (Regression: it did, through the supervisor's exec and every spawn; see also the supervisor test below.)
#[test]
fn leak_daemon_descriptors_do_not_reach_commands() {
    let (dir, _secret) = host_dir_with_secret();
    let server = Server::builder().inherit_dir(dir.path(), LEAKED_FD).start();
    let sb = server.sandbox();
    let body = format!(
        "op('fstat fd {LEAKED_FD}', lambda: os.fstat({LEAKED_FD}))\nop('readlink fd {LEAKED_FD}', lambda: os.readlink('/proc/self/fd/{LEAKED_FD}'))\n"
    );
    let expected = [format!("fstat fd {LEAKED_FD}: errno=9 EBADF"), format!("readlink fd {LEAKED_FD}: errno=2 ENOENT")];
    assert_lines(&python(&sb, User::User, &body), &expected);
}

/// Symlinks sandbox code plants into the supervisor's descriptors, for the file API to follow: the
/// supervisor resolves `/proc/self` to itself.
const PLANTED: [(&str, &str); 3] = [
    ("/home/user/report.txt", "/proc/self/fd/77/secret.txt"),
    ("/home/user/passwd.txt", "/proc/self/fd/77/../../etc/passwd"),
    ("/home/user/hostdir", "/proc/1/fd/77"),
];

/// Plants [`PLANTED`] as `user`, then reads each through the file API as `user` and as root; returns
/// what each read gave (the text, or the error code).
fn read_planted(sb: &sandlot_client::Sandbox) -> Vec<String> {
    let links: String = PLANTED.iter().map(|(link, target)| format!("ln -s {target} {link} && ")).collect();
    let r = crate::probe::sh(sb, User::User, &format!("{links} echo planted"));
    assert_eq!(r.stdout, "planted\n", "{r:?}");
    let mut got = Vec::new();
    for user in [User::User, User::Root] {
        let handle = sb.as_user(user);
        for (link, _) in &PLANTED[..2] {
            got.push(match handle.read_file(link) {
                Ok(bytes) => format!("{link} as {user:?}: read {:?}", String::from_utf8_lossy(&bytes)),
                Err(e) => format!("{link} as {user:?}: {}", e.code().unwrap_or("no code")),
            });
        }
    }
    got.push(match sb.list("/home/user/hostdir/../..", 1) {
        Ok(entries) => format!("list hostdir/../..: {:?}", entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>()),
        Err(e) => format!("list hostdir/../..: {}", e.code().unwrap_or("no code")),
    });
    got
}

/// Landlock confines the host directory descriptor the supervisor still holds: the file API, led there by
/// symlinks sandbox code planted, reads nothing of the host (permission_denied).
#[test]
fn landlock_confines_the_supervisors_leaked_descriptor() {
    let (dir, secret) = host_dir_with_secret();
    let server = Server::builder().inherit_dir(dir.path(), LEAKED_FD).start();
    let sb = server.sandbox();
    for line in read_planted(&sb) {
        assert!(!line.contains(&secret) && !line.contains("root:x:0:0"), "the host leaked: {line}");
        assert!(line.ends_with(": permission_denied") || line.ends_with(": file_not_found"), "not refused: {line}");
    }
}

/// The supervisor (pid 1) holds no descriptor the daemon inherited: /proc/1/fd/77 does not exist.
#[test]
fn leak_daemon_descriptors_do_not_reach_the_supervisor() {
    let (dir, _secret) = host_dir_with_secret();
    let server = Server::builder().inherit_dir(dir.path(), LEAKED_FD).start();
    let sb = server.sandbox();
    match sb.stat(&format!("/proc/1/fd/{LEAKED_FD}")) {
        Ok(stat) => panic!("the supervisor holds fd {LEAKED_FD}: {stat:?}"),
        Err(e) => assert_eq!(e.code(), Some("file_not_found"), "{e:?}"),
    }
}

/// Without Landlock (a kernel that lacks it: sandlot then only warns), symlinks planted by sandbox code
/// still cannot make the file API read host files through a descriptor the supervisor holds.
#[test]
fn leak_without_landlock_planted_symlinks_cannot_reach_host_files() {
    let (dir, secret) = host_dir_with_secret();
    let server = Server::builder().disable_layer("landlock").inherit_dir(dir.path(), LEAKED_FD).start();
    let sb = server.sandbox();
    for line in read_planted(&sb) {
        assert!(!line.contains(&secret) && !line.contains("root:x:0:0"), "the host leaked: {line}");
        assert!(!line.contains("read \"") && !line.contains("hostdir/../..: ["), "read something: {line}");
    }
}
