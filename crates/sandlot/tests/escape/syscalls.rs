//! The seccomp profile: the kernel interfaces sandbox code must never reach, each refused by number.
//!
//! Syscall numbers are x86_64's. Most attempts run as sandbox root, the identity with the most left to
//! lose; arguments are junk on purpose: a refusal must come before the kernel looks at them.

use sandlot_client::api::{ExitStatus, User};

use crate::probe::{assert_lines, python, sh};
use crate::server::Server;

/// Runs `calls` (one `sc(...)` per line) as sandbox root and expects each to print `errno`.
#[track_caller]
fn assert_denied(calls: &[(&str, &str)], errno: &str) {
    let server = Server::start();
    let sb = server.sandbox();
    let body: String = calls.iter().map(|(name, call)| format!("sc({name:?}, {call})\n")).collect();
    let expected: Vec<String> = calls.iter().map(|(name, _)| format!("{name}: {errno}")).collect();
    assert_lines(&python(&sb, User::Root, &body), &expected);
}

/// Remounting the filesystem view (the usual first step of an escape): the whole mount family is EPERM.
#[test]
fn seccomp_mount_family_is_denied() {
    assert_denied(
        &[
            ("mount tmpfs", "165, b'none', b'/mnt', b'tmpfs', 0, 0"),
            ("umount2 /proc/kallsyms mask", "166, b'/proc/kallsyms', 2"),
            ("pivot_root", "155, b'/tmp', b'/tmp'"),
            ("open_tree", "428, -100, b'/', 1"),
            ("move_mount", "429, -1, b'', -100, b'/mnt', 0"),
            ("fsopen", "430, b'tmpfs', 0"),
            ("fspick", "433, -100, b'/', 0"),
            ("mount_setattr", "442, -100, b'/', 0, 0, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// Loading code into the kernel: init_module, finit_module and delete_module are EPERM.
#[test]
fn seccomp_kernel_modules_are_denied() {
    assert_denied(
        &[("init_module", "175, 0, 0, b''"), ("finit_module", "313, 0, b'', 0"), ("delete_module", "176, b'ext4', 0")],
        "errno=1 EPERM",
    );
}

/// Replacing the running kernel: kexec_load and kexec_file_load are EPERM.
#[test]
fn seccomp_kexec_is_denied() {
    assert_denied(&[("kexec_load", "246, 0, 0, 0, 0"), ("kexec_file_load", "320, 0, 0, 0, b'', 0")], "errno=1 EPERM");
}

/// eBPF and perf, kernel attack surface with a history of privilege escalation, are EPERM.
#[test]
fn seccomp_bpf_and_perf_are_denied() {
    assert_denied(&[("bpf", "321, 0, 0, 0"), ("perf_event_open", "298, 0, 0, -1, -1, 0")], "errno=1 EPERM");
}

/// Socket families that reach past the network namespace (vsock to the hypervisor or the host, packet
/// sockets) fail with EAFNOSUPPORT, and IP protocols that load kernel modules on first use (SCTP, DCCP,
/// UDP-Lite) with EPROTONOSUPPORT; TCP, UDP, ping sockets and Unix sockets still work.
#[test]
fn seccomp_refuses_exotic_socket_families_and_protocols() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("vsock stream", lambda: socket.socket(40, socket.SOCK_STREAM, 0))
op("vsock dgram", lambda: socket.socket(40, socket.SOCK_DGRAM, 0))
op("packet", lambda: socket.socket(17, socket.SOCK_DGRAM, 0))
op("bluetooth", lambda: socket.socket(31, socket.SOCK_STREAM, 0))
op("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
op("dccp", lambda: socket.socket(socket.AF_INET6, 6, 33))
op("udplite", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM, 136))
op("tcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 6))
op("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM, 0))
op("unix pair", lambda: socket.socketpair())
"#;
    let expected = [
        "vsock stream: errno=97 EAFNOSUPPORT",
        "vsock dgram: errno=97 EAFNOSUPPORT",
        "packet: errno=97 EAFNOSUPPORT",
        "bluetooth: errno=97 EAFNOSUPPORT",
        "sctp: errno=93 EPROTONOSUPPORT",
        "dccp: errno=93 EPROTONOSUPPORT",
        "udplite: errno=93 EPROTONOSUPPORT",
        "tcp: ok",
        "udp6: ok",
        "unix pair: ok",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// The kernel keyring (shared kernel object, frequent CVE source): keyctl, add_key, request_key are EPERM.
#[test]
fn seccomp_keyrings_are_denied() {
    assert_denied(
        &[
            ("keyctl", "250, 0, 0, 0, 0, 0"),
            ("add_key", "248, b'user', b'escape', b'x', 1, -3"),
            ("request_key", "249, b'user', b'escape', 0, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// userfaultfd (race widening for kernel exploits) and io_uring (its own syscall surface) are EPERM.
#[test]
fn seccomp_userfaultfd_and_io_uring_are_denied() {
    assert_denied(
        &[
            ("userfaultfd", "323, 0"),
            ("io_uring_setup", "425, 1, 0"),
            ("io_uring_enter", "426, 0, 0, 0, 0, 0, 0"),
            ("io_uring_register", "427, 0, 0, 0, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// Legacy AIO contexts come out of the host-wide `fs.aio-max-nr` budget, which no cgroup bounds: one
/// sandbox taking it all would leave the host's databases without. io_setup and the rest of the family
/// are EPERM.
#[test]
fn seccomp_legacy_aio_is_denied() {
    assert_denied(
        &[
            ("io_setup", "206, 1, ctypes.byref(ctypes.c_ulong(0))"),
            ("io_destroy", "207, 0"),
            ("io_getevents", "208, 0, 0, 0, 0, 0"),
            ("io_submit", "209, 0, 0, 0"),
            ("io_cancel", "210, 0, 0, 0"),
            ("io_pgetevents", "333, 0, 0, 0, 0, 0, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// An x32-ABI syscall number (getpid | 0x40000000), a way around deny lists, kills the process (SIGSYS).
#[test]
fn seccomp_x32_syscall_kills_the_process() {
    let server = Server::start();
    let sb = server.sandbox();
    for user in [User::User, User::Root] {
        let r = python(
            &sb,
            user,
            "print('before', flush=True)\nlibc.syscall(ctypes.c_long(39 | 0x40000000))\nprint('after')\n",
        );
        assert_eq!((r.status, r.signal), (ExitStatus::Signaled, Some(31)), "not killed by SIGSYS: {r:?}");
        assert_eq!(r.stdout, "before\n", "{r:?}");
    }
}

/// Nested namespaces (a nested user namespace is the classic route to root-only kernel code): every
/// CLONE_NEW* flag to unshare or clone, and setns, is EPERM; the unshare(1) tool fails the same way.
#[test]
fn seccomp_nested_namespaces_are_denied() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
for name, flag in [("NEWUSER", 0x10000000), ("NEWNS", 0x20000), ("NEWNET", 0x40000000), ("NEWPID", 0x20000000),
                   ("NEWIPC", 0x8000000), ("NEWUTS", 0x4000000), ("NEWCGROUP", 0x2000000), ("NEWTIME", 0x80)]:
    sc("unshare " + name, 272, flag)
sc("clone NEWUSER", 56, 0x10000000 | 17, 0, 0, 0, 0)
sc("clone NEWNET", 56, 0x40000000 | 17, 0, 0, 0, 0)
sc("setns", 308, 0, 0)
"#;
    let mut expected: Vec<String> =
        ["NEWUSER", "NEWNS", "NEWNET", "NEWPID", "NEWIPC", "NEWUTS", "NEWCGROUP", "NEWTIME"]
            .iter()
            .map(|n| format!("unshare {n}: errno=1 EPERM"))
            .collect();
    expected.extend(
        ["clone NEWUSER: errno=1 EPERM", "clone NEWNET: errno=1 EPERM", "setns: errno=1 EPERM"].map(String::from),
    );
    assert_lines(&python(&sb, User::Root, body), &expected);
    assert_lines(&python(&sb, User::User, body), &expected);
    let r = sh(&sb, User::Root, "unshare -Ur true 2>&1; echo rc=$?");
    assert_lines(&r, &["unshare: unshare failed: Operation not permitted", "rc=1"]);
}

/// clone3 (flags behind a pointer seccomp cannot read) is ENOSYS, and plain fork still works.
#[test]
fn seccomp_clone3_is_enosys_and_fork_still_works() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
sc("clone3 NEWUSER", 435, ctypes.addressof(args), 88)
sc("clone3 plain", 435, 0, 0)
pid = os.fork()
if pid == 0:
    os._exit(7)
print("fork: child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"#;
    assert_lines(
        &python(&sb, User::Root, body),
        &["clone3 NEWUSER: errno=38 ENOSYS", "clone3 plain: errno=38 ENOSYS", "fork: child exit 7"],
    );
}

/// The host clock is one per machine: settimeofday, clock_settime, clock_adjtime and adjtimex are EPERM.
#[test]
fn seccomp_clock_setting_is_denied() {
    assert_denied(
        &[
            ("settimeofday", "164, 0, 0"),
            ("clock_settime", "227, 0, 0"),
            ("clock_adjtime", "305, 0, 0"),
            ("adjtimex", "159, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// personality flags that weaken memory layout (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC) are EPERM;
/// querying and PER_LINUX are allowed.
#[test]
fn seccomp_personality_allows_only_safe_values() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
sc("personality ADDR_NO_RANDOMIZE", 135, 0x0040000)
sc("personality READ_IMPLIES_EXEC", 135, 0x0400000)
sc("personality ADDR_COMPAT_LAYOUT", 135, 0x0200000)
sc("personality query", 135, 0xffffffff)
sc("personality PER_LINUX", 135, 0)
"#;
    let expected = [
        "personality ADDR_NO_RANDOMIZE: errno=1 EPERM",
        "personality READ_IMPLIES_EXEC: errno=1 EPERM",
        "personality ADDR_COMPAT_LAYOUT: errno=1 EPERM",
        "personality query: ok",
        "personality PER_LINUX: ok",
    ];
    assert_lines(&python(&sb, User::User, body), &expected);
    let r = sh(&sb, User::User, "setarch x86_64 -R true 2>&1; echo rc=$?");
    assert!(r.stdout.contains("Operation not permitted") && r.stdout.ends_with("rc=1\n"), "setarch -R worked: {r:?}");
}

/// Pushing keystrokes into a terminal another process reads: TIOCSTI and TIOCLINUX are EPERM.
#[test]
fn seccomp_tty_injection_is_denied() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
import fcntl, termios
m = os.open("/dev/ptmx", os.O_RDWR | os.O_NOCTTY)
op("TIOCSTI", lambda: fcntl.ioctl(m, termios.TIOCSTI, b"x"))
op("TIOCLINUX", lambda: fcntl.ioctl(m, 0x541C, b"\x06"))
op("TIOCGWINSZ", lambda: fcntl.ioctl(m, termios.TIOCGWINSZ, b"\0" * 8))
"#;
    let expected = ["TIOCSTI: errno=1 EPERM", "TIOCLINUX: errno=1 EPERM", "TIOCGWINSZ: ok"];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// Reading or writing another process's memory or descriptors: process_vm_*, kcmp, pidfd_getfd are EPERM.
#[test]
fn seccomp_cross_process_memory_is_denied() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
buf = ctypes.create_string_buffer(16)
iov = (ctypes.c_uint64 * 2)(ctypes.addressof(buf), 16)
sc("process_vm_readv pid 1", 310, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)
sc("process_vm_writev pid 1", 311, 1, ctypes.addressof(iov), 1, ctypes.addressof(iov), 1, 0)
sc("kcmp", 312, 1, os.getpid(), 0, 0, 0)
pidfd = libc.syscall(ctypes.c_long(434), ctypes.c_long(1), ctypes.c_long(0))
sc("pidfd_getfd pid 1 fd 3", 438, pidfd, 3, 0)
"#;
    let expected = [
        "process_vm_readv pid 1: errno=1 EPERM",
        "process_vm_writev pid 1: errno=1 EPERM",
        "kcmp: errno=1 EPERM",
        "pidfd_getfd pid 1 fd 3: errno=1 EPERM",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// File handles bypass path-based confinement (the "shocker" escape): open_by_handle_at and
/// name_to_handle_at are EPERM.
#[test]
fn seccomp_file_handles_are_denied() {
    assert_denied(
        &[("open_by_handle_at", "304, -100, 0, 0"), ("name_to_handle_at", "303, -100, b'/etc', 0, 0, 0")],
        "errno=1 EPERM",
    );
}

/// Host administration: swapon/swapoff, reboot, acct, sethostname, setdomainname, syslog, quotactl are EPERM.
#[test]
fn seccomp_host_administration_is_denied() {
    assert_denied(
        &[
            ("swapon", "167, b'/tmp/swap', 0"),
            ("swapoff", "168, b'/tmp/swap'"),
            ("reboot", "169, 0xfee1dead, 672274793, 0x1234567, 0"),
            ("acct", "163, b'/tmp/acct'"),
            ("sethostname", "170, b'escaped', 7"),
            ("setdomainname", "171, b'escaped', 7"),
            ("syslog read", "103, 3, 0, 0"),
            ("quotactl", "179, 0, 0, 0, 0"),
        ],
        "errno=1 EPERM",
    );
}

/// Raw port I/O: iopl and ioperm are EPERM.
#[test]
fn seccomp_port_io_is_denied() {
    assert_denied(&[("iopl 3", "172, 3"), ("ioperm 0x70", "173, 0x70, 2, 1")], "errno=1 EPERM");
}
