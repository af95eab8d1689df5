//! What a sandbox cannot see or reach: host processes, host files, the host network, other sandboxes.

use std::time::Duration;

use sandlot_client::api::{ExecRequest, User};

use crate::harness::{alive, expect_error, sh_ok, Server};

fn as_root(command: &str) -> ExecRequest {
    ExecRequest { user: Some(User::Root), shell: Some(command.into()), ..Default::default() }
}

/// Host processes are invisible: ps lists only the sandbox's own, and pid 1 is `sandlot __supervisor`.
#[test]
fn sandbox_sees_only_its_own_processes() {
    let server = Server::start();
    let sb = server.sandbox();
    let ps = sb.run(&["ps", "-eo", "pid=,args="]).unwrap().stdout;
    let lines: Vec<(u32, &str)> = ps
        .lines()
        .map(|l| {
            let (pid, args) = l.trim().split_once(' ').unwrap();
            (pid.parse().unwrap(), args.trim())
        })
        .collect();
    assert_eq!(lines.first(), Some(&(1, "sandlot __supervisor")), "{ps}");
    assert!(lines.len() <= 3, "more than supervisor + ps:\n{ps}");
    assert!(!ps.contains("serve") && !ps.contains("cargo"), "{ps}");
    let cmdline = sh_ok(&sb, "tr '\\0' ' ' < /proc/1/cmdline");
    assert_eq!(cmdline, "sandlot __supervisor ");
    // The daemon's host pid means nothing inside: it can be neither seen nor signalled.
    let daemon = server.pid();
    let r = sb.exec(&as_root(&format!("kill -9 {daemon}"))).unwrap();
    assert_ne!(r.exit_code, 0, "{r:?}");
    assert!(r.stderr.contains("No such process"), "{r:?}");
    assert!(alive(daemon));
    server.client().health().unwrap();
    sb.delete().unwrap();
}

/// The project checkout, the host's home and the server's own files do not exist inside.
#[test]
fn host_files_are_out_of_reach() {
    let server = Server::start();
    let sb = server.sandbox();
    let checkout = env!("CARGO_MANIFEST_DIR");
    let log = server.temp_dir().join("server.log");
    let key = server.state_dir().join("admin.key");
    let db = server.state_dir().join("sandlot.db");
    for path in [
        "/work".to_string(),
        checkout.to_string(),
        log.display().to_string(),
        key.display().to_string(),
        db.display().to_string(),
    ] {
        let r = sb.exec(&as_root(&format!("ls -d '{path}'; cat '{path}'"))).unwrap();
        assert_ne!(r.exit_code, 0, "{path}: {r:?}");
        assert!(r.stderr.contains("No such file or directory"), "{path}: {r:?}");
        assert_eq!(r.stdout, "", "{path}");
        expect_error(sb.as_user(User::Root).stat(&path), 404, "file_not_found");
    }
    let r = sb.exec(&as_root("ls -A /root")).unwrap();
    assert_eq!(r.stdout, "", "the host's /root leaked in");
    // /etc is the sandbox's own: the host's machine-id, ssh keys and sudoers are absent.
    let r = sb.exec(&as_root("ls /etc/machine-id /etc/ssh /etc/sudoers 2>&1; true")).unwrap();
    assert_eq!(r.stdout.matches("No such file or directory").count(), 3, "{r:?}");
    sb.delete().unwrap();
}

/// The sandbox has its own network namespace: only `lo`, no route; the host's loopback and the
/// internet are unreachable (checked as ENETUNREACH at once, so no packet leaves).
#[test]
fn network_is_loopback_only() {
    let server = Server::start();
    let sb = server.sandbox();
    let dev = sh_ok(&sb, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '");
    assert_eq!(dev, "lo\n", "interfaces other than lo");
    let routes = sh_ok(&sb, "tail -n +2 /proc/net/route; ip -6 route show table main 2>/dev/null | grep -v '^::1 ' | grep -v '^fe80' ; true");
    assert_eq!(routes, "", "routes beyond loopback");
    let probe = format!(
        r#"
import socket, time
def probe(host, port):
    s = socket.socket()
    s.settimeout(3)
    t = time.monotonic()
    try:
        s.connect((host, port))
        return "connected"
    except OSError as e:
        return f"{{e.errno}} {{time.monotonic() - t:.3f}}"
print(probe("127.0.0.1", {port}))
print(probe("1.1.1.1", 443))
"#,
        port = server.port()
    );
    let r = sb.run(&["python3", "-c", &probe]).unwrap();
    assert_eq!(r.exit_code, 0, "{r:?}");
    let lines: Vec<(&str, f64)> = r
        .stdout
        .lines()
        .map(|l| {
            let (errno, secs) = l.split_once(' ').unwrap_or((l, "0"));
            (errno, secs.parse().unwrap())
        })
        .collect();
    // 111 ECONNREFUSED: the sandbox's own loopback, where nothing listens (the server is on the host's).
    assert_eq!(lines[0].0, "111", "{r:?}");
    // 101 ENETUNREACH: no route at all.
    assert_eq!(lines[1].0, "101", "{r:?}");
    assert!(lines[1].1 < 1.0, "not immediate: {r:?}");
    let r = sb.shell("ip -o link show | cut -d: -f2 | tr -d ' '").unwrap();
    assert_eq!(r.stdout, "lo\n");
    sb.delete().unwrap();
}

/// The hostname is the sandbox's own, derived from its id, in uname and /etc/hostname alike.
#[test]
fn hostname_is_the_sandboxs() {
    let server = Server::start();
    let sb = server.sandbox();
    let expected = format!("sandlot-{}", &sb.id()["sb_".len().."sb_".len() + 12]);
    assert_eq!(sh_ok(&sb, "hostname"), format!("{expected}\n"));
    assert_eq!(sh_ok(&sb, "cat /etc/hostname"), format!("{expected}\n"));
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_ne!(host.trim(), expected);
    // Changing it inside changes nothing outside.
    sb.exec(&as_root("hostname renamed-inside")).unwrap();
    assert_eq!(std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(), host);
    sb.delete().unwrap();
}

/// /usr is read-only for everyone inside, even the sandbox's root after trying to remount it.
#[test]
fn usr_is_read_only() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("touch /usr/bin/planted").unwrap();
    assert_ne!(r.exit_code, 0);
    assert!(r.stderr.contains("Read-only file system"), "{r:?}");
    let probe = format!("/usr/sandlot-e2e-probe-{}", sb.id());
    let r = sb.exec(&as_root("touch /usr/bin/planted")).unwrap();
    assert!(r.stderr.contains("Read-only file system"), "{r:?}");
    let r = sb.exec(&as_root(&format!("mount -o remount,bind,rw /usr 2>&1; touch {probe} && echo WROTE"))).unwrap();
    let escaped = std::path::Path::new(&probe).exists();
    if escaped {
        let _ = std::fs::remove_file(&probe);
    }
    assert!(!escaped, "sandbox root wrote {probe} on the host: {r:?}");
    assert!(!r.stdout.contains("WROTE"), "{r:?}");
    sb.delete().unwrap();
}

/// Two sandboxes share nothing: files (home, /tmp, /etc) and processes of one are absent in the other.
#[test]
fn sandboxes_cannot_see_each_other() {
    let server = Server::start();
    let a = server.sandbox();
    let b = server.sandbox();
    a.write_file("/home/user/a-secret", b"A").unwrap();
    sh_ok(&a, "echo A > /tmp/a-tmp");
    a.as_user(User::Root).write_file("/etc/a-etc", b"A").unwrap();
    let pid = a.spawn(&crate::harness::argv(&["sleep", "300"])).unwrap();
    for path in ["/home/user/a-secret", "/tmp/a-tmp", "/etc/a-etc"] {
        expect_error(b.as_user(User::Root).read_file(path), 404, "file_not_found");
        let r = b.run(&["cat", path]).unwrap();
        assert!(r.stderr.contains("No such file or directory"), "{path}: {r:?}");
    }
    let ps = sh_ok(&b, "ps -eo args=");
    assert!(!ps.contains("sleep"), "b sees a's process:\n{ps}");
    // And the reverse direction, after b writes.
    b.write_file("/home/user/b-secret", b"B").unwrap();
    expect_error(a.read_file("/home/user/b-secret"), 404, "file_not_found");
    a.kill_process(pid, None).unwrap();
    a.delete().unwrap();
    b.delete().unwrap();
}

/// The sandbox's root is an unprivileged host uid from a private range (≥ 0x10000000), distinct per sandbox.
#[test]
fn sandbox_root_maps_to_a_private_host_uid_range() {
    let server = Server::start();
    let a = server.sandbox();
    let b = server.sandbox();
    let base = |sb: &sandlot_client::Sandbox| -> u64 {
        let map = sh_ok(sb, "cat /proc/self/uid_map");
        let fields: Vec<u64> = map.split_whitespace().map(|f| f.parse().unwrap()).collect();
        assert_eq!(fields.len(), 3, "one mapping line: {map}");
        assert_eq!((fields[0], fields[2]), (0, 65536), "{map}");
        fields[1]
    };
    let (ba, bb) = (base(&a), base(&b));
    assert!(ba >= 0x1000_0000 && bb >= 0x1000_0000, "{ba:#x} {bb:#x}");
    assert!(ba.abs_diff(bb) >= 65536, "overlapping ranges {ba:#x} {bb:#x}");
    // Seen from the host, every process of the sandbox runs as a uid of its range, never as root.
    let pid = a
        .spawn(&sandlot_client::api::ExecRequest { user: Some(User::Root), ..crate::harness::argv(&["sleep", "300"]) });
    let pid = pid.unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let host_pids = server.sandbox_pids(a.id());
    assert!(host_pids.len() >= 2, "{host_pids:?}");
    for hp in host_pids {
        let status = std::fs::read_to_string(format!("/proc/{hp}/status")).unwrap_or_default();
        let Some(uids) = status.lines().find(|l| l.starts_with("Uid:")) else { continue };
        for uid in uids.split_whitespace().skip(1) {
            let uid: u64 = uid.parse().unwrap();
            assert!((ba..ba + 65536).contains(&uid), "host pid {hp} runs as uid {uid}: {uids}");
        }
    }
    a.kill_process(pid, None).unwrap();
    a.delete().unwrap();
    b.delete().unwrap();
}

/// Sandbox mounts live in the sandbox's mount namespace only: the host never sees the state dir mounted.
#[test]
fn sandbox_mounts_never_appear_on_the_host() {
    let server = Server::start();
    let a = server.sandbox();
    let b = server.sandbox();
    sh_ok(&a, "ls / > /dev/null");
    let left = server.leftovers();
    assert!(left.mounts.is_empty(), "{:#?}", left.mounts);
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts.contains(&*server.state_dir().to_string_lossy()), "{mounts}");
    // Inside, the overlay root and the tmpfs /tmp are there.
    let inside = sh_ok(&b, "cat /proc/self/mounts");
    assert!(inside.lines().any(|l| l.starts_with("overlay / overlay")), "{inside}");
    assert!(inside.lines().any(|l| l.contains(" /tmp tmpfs ")), "{inside}");
    assert!(inside.lines().any(|l| l.contains(" /usr ") && l.contains(" ro,")), "{inside}");
    a.delete().unwrap();
    b.delete().unwrap();
}

/// The sandbox's cgroup namespace hides the host's cgroup paths.
#[test]
fn host_cgroup_paths_are_hidden() {
    let server = Server::start();
    let sb = server.sandbox();
    let cgroups = sh_ok(&sb, "cat /proc/self/cgroup");
    assert!(!cgroups.contains("sandlot"), "{cgroups}");
    assert!(!cgroups.contains("process_api"), "{cgroups}");
    assert!(!cgroups.contains(sb.id()), "{cgroups}");
    sb.delete().unwrap();
}

/// The sandbox's pid 1 (the supervisor) is out of the workload's reach: the user can neither signal nor
/// inspect it, and even the sandbox's root cannot kill it.
#[test]
fn supervisor_cannot_be_killed_or_inspected_from_inside() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sb.shell("kill -9 1").unwrap();
    assert_ne!(r.exit_code, 0, "{r:?}");
    assert!(r.stderr.contains("Operation not permitted"), "{r:?}");
    for path in ["/proc/1/environ", "/proc/1/mem"] {
        let r = sb.run(&["cat", path]).unwrap();
        assert_ne!(r.exit_code, 0, "{path}: {r:?}");
        assert!(r.stderr.contains("Permission denied"), "{path}: {r:?}");
    }
    let r = sb.run(&["ls", "/proc/1/fd"]).unwrap();
    assert!(r.stderr.contains("Permission denied"), "{r:?}");
    // SIGKILL to a pid namespace's init from inside it is ignored by the kernel.
    sb.exec(&as_root("kill -9 1; sleep 0.2")).unwrap();
    assert_eq!(sb.run(&["echo", "alive"]).unwrap().stdout, "alive\n");
    sb.delete().unwrap();
}

/// Commands inherit no file descriptor beyond stdin, stdout and stderr (no control socket, no log pipe).
#[test]
fn commands_inherit_only_stdio() {
    let server = Server::start();
    let sb = server.sandbox();
    let script = r#"
import os
for f in sorted(os.listdir("/proc/self/fd"), key=int):
    try:
        print(f, os.readlink("/proc/self/fd/" + f))
    except OSError:
        pass  # the directory handle listdir used, closed by now
"#;
    let fds = sb.run(&["python3", "-c", script]).unwrap().stdout;
    let numbers: Vec<&str> = fds.lines().map(|l| l.split(' ').next().unwrap()).collect();
    assert_eq!(numbers, ["0", "1", "2"], "inherited descriptors:\n{fds}");
    assert!(!fds.contains("socket:"), "a socket leaked into the command:\n{fds}");
    sb.delete().unwrap();
}
