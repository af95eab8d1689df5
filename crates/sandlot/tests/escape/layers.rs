//! Layer by layer: with one defence switched off (`--insecure-disable-layer`, test-only), what each of the
//! others still stops on its own; and the host uid ranges that keep sandboxes apart.

use std::time::{Duration, Instant};

use sandlot_client::api::{ExecRequest, User};

use crate::probe::{assert_lines, python, sh};
use crate::server::Server;

/// Seccomp alone (Landlock off): bpf and a nested user namespace are still EPERM.
#[test]
fn layer_seccomp_alone_denies_bpf_and_nested_namespaces() {
    let server = Server::without(&["landlock"]);
    let sb = server.sandbox();
    let body = r#"
sc("bpf", 321, 0, 0, 0)
sc("unshare NEWUSER", 272, 0x10000000)
sc("perf_event_open", 298, 0, 0, -1, -1, 0)
"#;
    let expected = ["bpf: errno=1 EPERM", "unshare NEWUSER: errno=1 EPERM", "perf_event_open: errno=1 EPERM"];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// Landlock alone (seccomp off): creating a character device is still EACCES, before any capability check.
#[test]
fn layer_landlock_alone_refuses_device_nodes() {
    let server = Server::without(&["seccomp"]);
    let sb = server.sandbox();
    let body = r#"
print("seccomp mode:", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
op("mknod /tmp/mem c 1 1", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
"#;
    assert_lines(&python(&sb, User::Root, body), &["seccomp mode: 0", "mknod /tmp/mem c 1 1: errno=13 EACCES"]);
}

/// Landlock alone (seccomp off): even root of a nested user + mount namespace cannot mount, and the
/// /proc masks stay locked in place.
#[test]
fn layer_landlock_alone_refuses_mounts_in_a_nested_namespace() {
    let server = Server::without(&["seccomp"]);
    let sb = server.sandbox();
    let body = r#"
r = libc.unshare(0x10000000 | 0x20000)
sys.stderr.write("unshare(NEWUSER|NEWNS) without seccomp: %s\n" % ("ok" if r == 0 else _err(ctypes.get_errno())))
sc("mount tmpfs", 165, b"none", b"/mnt", b"tmpfs", 0, 0)
sc("mount proc", 165, b"proc", b"/mnt", b"proc", 0, 0)
sc("umount /proc/kallsyms mask", 166, b"/proc/kallsyms", 2)
"#;
    let r = python(&sb, User::Root, body);
    println!("{}", r.stderr.trim());
    let umount = if r.stderr.contains(": ok") { "errno=22 EINVAL" } else { "errno=1 EPERM" };
    assert_lines(
        &r,
        &[
            "mount tmpfs: errno=1 EPERM".to_string(),
            "mount proc: errno=1 EPERM".to_string(),
            format!("umount /proc/kallsyms mask: {umount}"),
        ],
    );
}

/// Capabilities alone (seccomp off): sandbox root cannot unshare a network or mount namespace (no
/// CAP_SYS_ADMIN) nor open raw or packet sockets (no CAP_NET_RAW).
#[test]
fn layer_capabilities_alone_refuse_namespaces_and_raw_sockets() {
    let server = Server::without(&["seccomp"]);
    let sb = server.sandbox();
    let body = r#"
sc("unshare NEWNET", 272, 0x40000000)
sc("unshare NEWNS", 272, 0x20000)
op("raw icmp socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
op("packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
"#;
    let expected = [
        "unshare NEWNET: errno=1 EPERM",
        "unshare NEWNS: errno=1 EPERM",
        "raw icmp socket: errno=1 EPERM",
        "packet socket: errno=1 EPERM",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    let r = sh(&sb, User::Root, "unshare -n true 2>&1; echo rc=$?");
    assert_lines(&r, &["unshare: unshare failed: Operation not permitted", "rc=1"]);
}

/// Capabilities alone (seccomp off): a nested user namespace cannot map its root onto sandbox root
/// (the kernel wants CAP_SETFCAP, which sandbox root lacks).
#[test]
fn layer_capabilities_alone_refuse_mapping_root_in_a_nested_user_namespace() {
    let server = Server::without(&["seccomp"]);
    let sb = server.sandbox();
    let body = r#"
r = libc.unshare(0x10000000)
print("unshare NEWUSER:", "ok" if r == 0 else _err(ctypes.get_errno()))
if r == 0:
    op("map nested root to sandbox root", lambda: os.write(os.open("/proc/self/uid_map", os.O_WRONLY), b"0 0 1"))
"#;
    let r = python(&sb, User::Root, body);
    if r.stdout.starts_with("unshare NEWUSER: ok") {
        assert_lines(&r, &["unshare NEWUSER: ok", "map nested root to sandbox root: errno=1 EPERM"]);
    } else {
        assert_lines(&r, &["unshare NEWUSER: errno=1 EPERM"]);
    }
}

/// Capabilities alone (Landlock off): creating a character device is still EPERM (no CAP_MKNOD).
#[test]
fn layer_capabilities_alone_refuse_device_nodes() {
    let server = Server::without(&["landlock"]);
    let sb = server.sandbox();
    let body = r#"op("mknod /tmp/mem c 1 1", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))"#;
    assert_lines(&python(&sb, User::Root, body), &["mknod /tmp/mem c 1 1: errno=1 EPERM"]);
}

/// Host uid ranges: two sandboxes' supervisors run as different host uids, both far from host root;
/// a command of `user` runs as the range's base + 1000; inside, the map shows the same base.
#[test]
fn uid_ranges_differ_per_sandbox_and_exclude_host_root() {
    let server = Server::start();
    let a = server.sandbox();
    let b = server.sandbox();
    let supervisors = server.supervisors();
    assert_eq!(supervisors.len(), 2, "{supervisors:?}");
    let base_of = |id: &str| -> u32 {
        let sup = supervisors
            .iter()
            // v1 cpu and freezer: `<id>`; v2 (and v1 memory, pids): the supervisor's leaf `<id>/sup`.
            .find(|s| s.cgroup.lines().any(|l| l.ends_with(&format!("/{id}")) || l.ends_with(&format!("/{id}/sup"))))
            .unwrap_or_else(|| panic!("no supervisor in a cgroup of {id}: {supervisors:?}"));
        let [real, effective, saved, fs] = sup.uids;
        assert!(
            real == effective && effective == saved && saved == fs,
            "mixed uids of pid {}: {:?}",
            sup.pid,
            sup.uids
        );
        real
    };
    let (base_a, base_b) = (base_of(a.id()), base_of(b.id()));
    println!("host uid of sandbox root: A {base_a:#x}, B {base_b:#x}");
    assert_ne!(base_a, base_b, "two sandboxes share a host uid");
    for base in [base_a, base_b] {
        assert!(base >= 0x1000_0000, "sandbox root is host uid {base}");
    }
    assert!(base_a.abs_diff(base_b) >= 65536, "uid ranges overlap: {base_a:#x} {base_b:#x}");
    for (sb, base) in [(&a, base_a), (&b, base_b)] {
        let r = sh(sb, User::User, "cat /proc/self/uid_map /proc/self/gid_map");
        let expected = format!("0 {base} 65536");
        let maps: Vec<String> = r.stdout.lines().map(|l| l.split_whitespace().collect::<Vec<_>>().join(" ")).collect();
        assert_eq!(maps, [expected.clone(), expected], "{r:?}");
    }
    // A `user` command of A, seen from the host.
    let pid = a
        .spawn(&ExecRequest { argv: Some(vec!["sleep".into(), "30".into()]), ..ExecRequest::default() })
        .expect("starting sleep");
    let deadline = Instant::now() + Duration::from_secs(5);
    let uid = loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|e| {
            let p = e.file_name().to_string_lossy().parse::<u32>().ok()?;
            let status = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let cgroup = std::fs::read_to_string(format!("/proc/{p}/cgroup")).ok()?;
            let is_sleep = status.lines().next() == Some("Name:\tsleep");
            (is_sleep && cgroup.contains(a.id())).then(|| {
                let uid = status.lines().find_map(|l| l.strip_prefix("Uid:")).unwrap();
                uid.split_whitespace().next().unwrap().parse::<u32>().unwrap()
            })
        });
        match found {
            Some(uid) => break uid,
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            None => panic!("the sleep of sandbox A never showed on the host"),
        }
    };
    a.kill_process(pid, Some(9)).unwrap();
    assert_eq!(uid, base_a + 1000, "`user` of A runs as host uid {uid}");
}
