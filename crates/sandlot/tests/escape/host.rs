//! The host is out of reach: its files, processes, devices, IPC, sockets, network and cgroup tree.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

use sandlot_client::api::User;

use crate::probe::{assert_lines, python, sh};
use crate::server::Server;

/// Reading the project checkout or the server's state dir by their host paths finds nothing.
#[test]
fn host_checkout_and_state_dir_are_absent() {
    let server = Server::start();
    let sb = server.sandbox();
    let paths = [
        "/work".to_string(),
        "/work/main".to_string(),
        env!("CARGO_MANIFEST_DIR").to_string(),
        server.temp_dir().display().to_string(),
        server.state_dir().join("admin.key").display().to_string(),
        "/var/lib/sandlot".to_string(),
        "/proc/self/root/work".to_string(),
    ];
    let body: String = paths.iter().map(|p| format!("op({p:?}, lambda: os.stat({p:?}))\n")).collect();
    let expected: Vec<String> = paths.iter().map(|p| format!("{p}: errno=2 ENOENT")).collect();
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// The host's /etc/shadow is never readable: /etc/shadow inside is the sandbox's own generated file.
#[test]
fn host_shadow_is_never_readable() {
    let host = std::fs::read_to_string("/etc/shadow").expect("reading the host's /etc/shadow (run as root)");
    let host_first = host.lines().next().expect("host shadow has a line");
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(&sb, User::Root, "cat /etc/shadow");
    assert_eq!(r.exit_code, 0, "{r:?}");
    assert!(r.stdout.contains("user:*:"), "not the sandbox's own shadow: {:?}", r.stdout);
    assert!(!r.stdout.contains(host_first), "the host's shadow leaked: {:?}", r.stdout);
    let r = sh(&sb, User::User, "cat /etc/shadow");
    assert!(r.stderr.contains("Permission denied"), "user read the shadow file: {r:?}");
    let api = sb.as_user(User::Root).read_file("/etc/shadow").expect("reading the sandbox's shadow through the API");
    assert!(!String::from_utf8_lossy(&api).contains(host_first), "the host's shadow leaked through the file API");
}

/// /proc/1/root (the supervisor's root) is closed to sandbox code, and /proc/self/root is the sandbox's root.
#[test]
fn host_proc_root_links_lead_only_to_the_sandbox_root() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("readlink /proc/1/root", lambda: os.readlink("/proc/1/root"))
op("listdir /proc/1/root", lambda: os.listdir("/proc/1/root"))
op("listdir /proc/1/cwd", lambda: os.listdir("/proc/1/cwd"))
val("self root is /", lambda: sorted(os.listdir("/proc/self/root")) == sorted(os.listdir("/")))
val("readlink /proc/self/root", lambda: os.readlink("/proc/self/root"))
op("stat /proc/self/root/work", lambda: os.stat("/proc/self/root/work"))
"#;
    let expected = [
        "readlink /proc/1/root: errno=13 EACCES",
        "listdir /proc/1/root: errno=13 EACCES",
        "listdir /proc/1/cwd: errno=13 EACCES",
        "self root is /: ok True",
        "readlink /proc/self/root: ok /",
        "stat /proc/self/root/work: errno=2 ENOENT",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    assert_lines(&python(&sb, User::User, body), &expected);
}

/// The sandbox's mount table names no host directory (state dir, checkout, layer paths); other host
/// details it shows are printed for the report.
#[test]
fn host_paths_do_not_show_in_mountinfo() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(&sb, User::User, "cat /proc/self/mountinfo");
    assert_eq!(r.exit_code, 0, "{r:?}");
    let mountinfo = r.stdout;
    let forbidden = [
        server.temp_dir().display().to_string(),
        "sandlot-escape-".to_string(),
        "/work".to_string(),
        "/var/lib/sandlot".to_string(),
        sb.id().to_string(),
        "layers.btrfs".to_string(),
    ];
    for needle in &forbidden {
        assert!(!mountinfo.contains(needle.as_str()), "mountinfo shows {needle:?}:\n{mountinfo}");
    }
    let overlay = mountinfo.lines().find(|l| l.contains(" - overlay ")).expect("an overlay root");
    for opt in overlay.rsplit(' ').next().unwrap_or("").split(',') {
        if let Some((key @ ("lowerdir" | "upperdir" | "workdir"), value)) = opt.split_once('=') {
            assert!(!value.starts_with('/'), "overlay {key} is an absolute host path: {overlay}");
        }
    }
    // Not a path, but host facts all the same: record them so the report can list what leaks.
    let mut details: Vec<&str> = mountinfo
        .lines()
        .filter_map(|line| line.split_once(" - ").map(|(_, post)| post))
        .filter(|post| {
            let options = post.rsplit(' ').next().unwrap_or("");
            post.split(' ').nth(1).is_some_and(|source| source.starts_with("/dev/"))
                || post.starts_with("devtmpfs")
                || options.split(',').any(|o| o.starts_with("uid=") || o.starts_with("gid="))
        })
        .collect();
    details.sort_unstable();
    details.dedup();
    for detail in details {
        println!("mountinfo shows host detail: {detail}");
    }
}

/// Host processes are invisible: /proc lists only the supervisor and the attack program itself.
#[test]
fn host_processes_are_invisible() {
    let server = Server::start();
    let sb = server.sandbox();
    let daemon = server.pid();
    let body = format!(
        r#"
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print("comms:", sorted(open("/proc/%d/comm" % p).read().strip() for p in pids))
print("pid 1:", open("/proc/1/cmdline").read().replace("\0", " ").strip())
print("daemon visible:", os.path.exists("/proc/{daemon}"))
"#
    );
    assert_lines(
        &python(&sb, User::Root, &body),
        // pid 1 was exec'd through /proc/self/exe, hence its comm `exe`.
        &["comms: ['exe', 'python3']", "pid 1: sandlot __supervisor", "daemon visible: False"],
    );
}

/// SIGKILL to a host pid read from outside (the daemon's) reaches nothing: ESRCH, and the daemon lives.
#[test]
fn host_pid_cannot_be_signalled() {
    let server = Server::start();
    let sb = server.sandbox();
    let daemon = server.pid();
    let me = std::process::id();
    let body = format!(
        "op('kill -9 daemon', lambda: os.kill({daemon}, 9))\nop('kill -9 test process', lambda: os.kill({me}, 9))\n"
    );
    let expected = ["kill -9 daemon: errno=3 ESRCH", "kill -9 test process: errno=3 ESRCH"];
    assert_lines(&python(&sb, User::Root, &body), &expected);
    server.client().health().expect("the daemon still answers");
}

/// An abstract unix socket the host listens on cannot be reached from inside (own network namespace).
#[test]
fn host_abstract_unix_socket_is_unreachable() {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let name = format!("sandlot-escape-{}-{nanos}", std::process::id());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract address");
    let listener = UnixListener::bind_addr(&addr).expect("binding the host's abstract socket");
    // The socket works from the host, so a refusal inside is the namespace's doing.
    drop(UnixStream::connect_addr(&addr).expect("connecting from the host"));
    drop(listener.accept().expect("accepting the host's own connection"));
    let server = Server::start();
    let sb = server.sandbox();
    let body = format!(
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\nop('connect @{name}', lambda: s.connect('\\0{name}'))\n"
    );
    for user in [User::User, User::Root] {
        assert_lines(&python(&sb, user, &body), &[format!("connect @{name}: errno=111 ECONNREFUSED")]);
    }
    listener.set_nonblocking(true).unwrap();
    assert!(listener.accept().is_err(), "a connection from the sandbox arrived");
}

/// A System V shared-memory segment of the host is invisible inside (own IPC namespace).
#[test]
fn host_sysv_shared_memory_is_invisible() {
    let key = 0x5e5c_0000 | (std::process::id() as i32 & 0xffff);
    // SAFETY: shmget has no memory-safety preconditions; the segment is never attached.
    let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o666) };
    assert!(id >= 0, "shmget on the host: {}", std::io::Error::last_os_error());
    struct Remove(i32);
    impl Drop for Remove {
        fn drop(&mut self) {
            // SAFETY: IPC_RMID on a segment id this test created; the buffer may be null for IPC_RMID.
            unsafe { libc::shmctl(self.0, libc::IPC_RMID, std::ptr::null_mut()) };
        }
    }
    let _remove = Remove(id);
    let server = Server::start();
    let sb = server.sandbox();
    let body = format!("sc('shmget host key', 29, {key}, 0, 0o666)\nsc('shmat host id', 30, {id}, 0, 0)\n");
    let expected = ["shmget host key: errno=2 ENOENT", "shmat host id: errno=22 EINVAL"];
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// The host's loopback (where the sandlot API listens) and the outside world are unreachable.
#[test]
fn host_network_is_unreachable() {
    let server = Server::start();
    let sb = server.sandbox();
    let port = server.port();
    // 192.0.2.1 is TEST-NET-1: even a broken sandbox would send nothing anywhere real.
    let body = format!(
        r#"
def connect(addr):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(addr)
op("connect sandlot api 127.0.0.1:{port}", lambda: connect(("127.0.0.1", {port})))
op("connect 192.0.2.1:80", lambda: connect(("192.0.2.1", 80)))
print("interfaces:", sorted(n for _, n in socket.if_nameindex()))
"#
    );
    let expected = [
        format!("connect sandlot api 127.0.0.1:{port}: errno=111 ECONNREFUSED"),
        "connect 192.0.2.1:80: errno=101 ENETUNREACH".to_string(),
        "interfaces: ['lo']".to_string(),
    ];
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// Netlink changes to links, addresses and routes fail for sandbox root (no CAP_NET_ADMIN).
#[test]
fn host_netlink_changes_are_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(
        &sb,
        User::Root,
        "ip link add escape0 type dummy 2>&1; ip route add 10.99.0.0/24 dev lo 2>&1; \
         ip addr add 10.99.0.1/24 dev lo 2>&1; ip link set lo down 2>&1; true",
    );
    assert_lines(&r, &["RTNETLINK answers: Operation not permitted"; 4]);
}

/// With a network policy, sandbox root can neither undo the steering of its traffic to the daemon
/// (routes, addresses) nor capture it: a listener of its own on port 80 does not receive its outgoing
/// connections, the DNS socket cannot be taken over, and the daemon's own listener refuses it.
#[test]
fn host_network_steering_cannot_be_undone_or_captured() {
    let server = Server::start();
    let spec = sandlot_client::api::CreateSandbox {
        network: Some(serde_json::from_str(r#"{"mode":"allow-all"}"#).unwrap()),
        ..Default::default()
    };
    let sb = server.create(&spec);
    let r = sh(
        &sb,
        User::Root,
        "ip route del local 0.0.0.0/0 dev lo table local 2>&1; ip -6 route del local ::/0 dev lo table local 2>&1; \
         ip addr del 10.200.0.2/32 dev lo 2>&1; true",
    );
    assert_lines(&r, &["RTNETLINK answers: Operation not permitted"; 3]);
    let body = r#"
own = socket.socket(); own.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
own.bind(("0.0.0.0", 80)); own.listen(8); own.setblocking(False)
def fetch(addr):
    s = socket.create_connection(addr, timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    if s.recv(1) == b"":
        raise OSError(errno.ECONNRESET, "closed")
op("connect 192.168.7.7:80", lambda: fetch(("192.168.7.7", 80)))
op("own listener got it", lambda: own.accept())
op("connect the daemon listener 10.200.0.1:1", lambda: fetch(("10.200.0.1", 1)))
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
op("bind 10.200.0.1:53", lambda: u.bind(("10.200.0.1", 53)))
"#;
    let expected = [
        "connect 192.168.7.7:80: errno=104 ECONNRESET",
        "own listener got it: errno=11 EAGAIN",
        "connect the daemon listener 10.200.0.1:1: errno=104 ECONNRESET",
        "bind 10.200.0.1:53: errno=98 EADDRINUSE",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    assert!(!server.log_text().contains("BUG: the proxy tried to dial"), "{}", server.log_text());
}

/// The cgroup tree is absent (no /sys content) and cannot be mounted; /proc/self/cgroup shows only `/`.
#[test]
fn host_cgroup_tree_is_absent() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
val("listdir /sys", lambda: os.listdir("/sys"))
op("write /sys/fs/cgroup/cgroup.procs", lambda: open("/sys/fs/cgroup/cgroup.procs", "w"))
sc("mount cgroup2", 165, b"none", b"/mnt", b"cgroup2", 0, 0)
sc("mount cgroup v1 pids", 165, b"none", b"/mnt", b"cgroup", 0, b"pids")
print("cgroup paths:", sorted({l.strip().split(":", 2)[2] for l in open("/proc/self/cgroup")}))
"#;
    // The namespace is rooted at the supervisor's leaf; commands run in its sibling, the command leaf.
    // On v1 the controllers without leaves (cpu, freezer) show the sandbox's own cgroup, `/`.
    let paths = if crate::common::server::pure_cgroup_v2() {
        "cgroup paths: ['/../work']"
    } else {
        "cgroup paths: ['/', '/../work']"
    };
    let expected = [
        "listdir /sys: ok []",
        "write /sys/fs/cgroup/cgroup.procs: errno=2 ENOENT",
        "mount cgroup2: errno=1 EPERM",
        "mount cgroup v1 pids: errno=1 EPERM",
        paths,
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// Kernel tunables are read-only: core_pattern (a classic host-root escape), suid_dumpable, drop_caches.
/// (Opened as a shell's `>` does, with O_TRUNC: the read-only mount answers EROFS before DAC's EACCES.)
#[test]
fn host_proc_sys_is_read_only() {
    let server = Server::start();
    let sb = server.sandbox();
    let files = [
        "/proc/sys/kernel/core_pattern",
        "/proc/sys/fs/suid_dumpable",
        "/proc/sys/vm/drop_caches",
        "/proc/sys/net/ipv4/ip_forward",
    ];
    let body: String =
        files.iter().map(|f| format!("op('write {f}', lambda: open('{f}', 'w').write('1'))\n")).collect();
    let expected: Vec<String> = files.iter().map(|f| format!("write {f}: errno=30 EROFS")).collect();
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// Kernel memory, symbols, keys and timers in /proc are absent or empty; the kernel log is closed.
#[test]
fn host_kernel_memory_and_symbols_are_masked() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
def content(p):
    try:
        with open(p, "rb") as f:
            n = len(f.read(4096))
        return "empty" if n == 0 else "%d bytes" % n
    except FileNotFoundError:
        return "empty"
    except OSError as e:
        return _err(e.errno)
for p in ["/proc/kcore", "/proc/kallsyms", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
          "/proc/sysrq-trigger", "/proc/kpagecount", "/proc/kpageflags", "/proc/latency_stats"]:
    print(p, content(p))
op("read /proc/kmsg", lambda: open("/proc/kmsg", "rb").read(1))
"#;
    let expected = [
        "/proc/kcore empty",
        "/proc/kallsyms empty",
        "/proc/keys empty",
        "/proc/timer_list empty",
        "/proc/sched_debug empty",
        "/proc/sysrq-trigger empty",
        "/proc/kpagecount empty",
        "/proc/kpageflags empty",
        "/proc/latency_stats empty",
        "read /proc/kmsg: errno=13 EACCES",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// Host devices (/dev/mem, /dev/kvm, disks, loop, tun, fuse) do not exist; /dev holds only the harmless set.
#[test]
fn host_devices_are_absent() {
    let server = Server::start();
    let sb = server.sandbox();
    let devices = [
        "/dev/mem",
        "/dev/kmem",
        "/dev/port",
        "/dev/kvm",
        "/dev/vda",
        "/dev/sda",
        "/dev/loop0",
        "/dev/loop-control",
        "/dev/fuse",
        "/dev/net/tun",
        "/dev/kmsg",
    ];
    let mut body: String =
        devices.iter().map(|d| format!("op('open {d}', lambda: os.open('{d}', os.O_RDONLY))\n")).collect();
    body.push_str("print('dev:', ' '.join(sorted(os.listdir('/dev'))))\n");
    let mut expected: Vec<String> = devices.iter().map(|d| format!("open {d}: errno=2 ENOENT")).collect();
    expected.push("dev: fd full null ptmx pts random shm stderr stdin stdout tty urandom zero".into());
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// The host device nodes bound into /dev cannot be re-permissioned, re-owned or removed by sandbox root.
#[test]
fn host_device_nodes_cannot_be_tampered_with() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("chmod 0777 /dev/null", lambda: os.chmod("/dev/null", 0o777))
op("chown /dev/null", lambda: os.chown("/dev/null", 0, 0))
op("unlink /dev/null", lambda: os.unlink("/dev/null"))
op("rename /dev/urandom", lambda: os.rename("/dev/urandom", "/dev/x"))
"#;
    let expected = [
        "chmod 0777 /dev/null: errno=1 EPERM",
        "chown /dev/null: errno=1 EPERM",
        "unlink /dev/null: errno=16 EBUSY",
        "rename /dev/urandom: errno=16 EBUSY",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// The image's /usr (the host's own, bound in) is read-only and owned by nobody, even to sandbox root.
#[test]
fn host_usr_is_read_only() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("create /usr/escape", lambda: open("/usr/escape", "w"))
op("append /usr/bin/id", lambda: open("/usr/bin/id", "ab"))
op("chmod /usr/bin/id", lambda: os.chmod("/usr/bin/id", 0o4777))
op("unlink /usr/bin/id", lambda: os.unlink("/usr/bin/id"))
print("owner of /usr/bin/id:", os.stat("/usr/bin/id").st_uid)
"#;
    let expected = [
        "create /usr/escape: errno=30 EROFS",
        // The file's owner (host root) is unmapped, so DAC refuses before the read-only mount is checked.
        "append /usr/bin/id: errno=13 EACCES",
        "chmod /usr/bin/id: errno=30 EROFS",
        "unlink /usr/bin/id: errno=30 EROFS",
        "owner of /usr/bin/id: 65534",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    let err = sb.as_user(User::Root).write_file("/usr/escape", b"x").expect_err("the file API wrote into /usr");
    assert_eq!(err.code(), Some("permission_denied"), "{err:?}");
}

/// A hard link to a host binary (to keep or tamper with it) fails: EXDEV across mounts, EROFS within /usr.
#[test]
fn host_binary_cannot_be_hard_linked() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("link /usr/bin/id -> /home/user/id", lambda: os.link("/usr/bin/id", "/home/user/id"))
op("link /usr/bin/id -> /tmp/id", lambda: os.link("/usr/bin/id", "/tmp/id"))
op("link /usr/bin/id -> /usr/bin/id2", lambda: os.link("/usr/bin/id", "/usr/bin/id2"))
"#;
    let expected = [
        "link /usr/bin/id -> /home/user/id: errno=18 EXDEV",
        "link /usr/bin/id -> /tmp/id: errno=18 EXDEV",
        "link /usr/bin/id -> /usr/bin/id2: errno=30 EROFS",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}
