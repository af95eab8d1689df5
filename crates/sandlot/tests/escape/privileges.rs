//! Privilege inside the sandbox: capabilities, no_new_privs, ptrace, device nodes, chroot, and the
//! supervisor (pid 1) that sandbox code must not be able to kill, read or replace.

use sandlot_client::api::User;

use crate::probe::{assert_answers, assert_lines, python, sh};
use crate::server::Server;

/// Capability masks: root keeps CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID SETPCAP
/// NET_BIND_SERVICE SYS_CHROOT (0x405fb) and nothing else; `user` has none; no_new_privs and seccomp are on.
#[test]
fn caps_are_the_documented_sets() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines() if ":" in l)
for k in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp"]:
    print(k, status[k].strip())
"#;
    let root = [
        "CapInh 0000000000000000",
        "CapPrm 00000000000405fb",
        "CapEff 00000000000405fb",
        "CapBnd 00000000000405fb",
        "CapAmb 0000000000000000",
        "NoNewPrivs 1",
        "Seccomp 2",
    ];
    assert_lines(&python(&sb, User::Root, body), &root);
    let user = [
        "CapInh 0000000000000000",
        "CapPrm 0000000000000000",
        "CapEff 0000000000000000",
        "CapBnd 0000000000000000",
        "CapAmb 0000000000000000",
        "NoNewPrivs 1",
        "Seccomp 2",
    ];
    assert_lines(&python(&sb, User::User, body), &user);
}

/// Raw and packet sockets (spoofing, sniffing) are refused, even for sandbox root: a raw ICMP socket by
/// the missing CAP_NET_RAW, IPPROTO_RAW and packet sockets already by seccomp (the capabilities layer
/// alone refuses them too: escape `layers::layer_capabilities_alone_*`).
#[test]
fn caps_raw_and_packet_sockets_are_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("raw icmp socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))
op("raw ip socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW))
op("packet socket", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0))
"#;
    let expected = [
        "raw icmp socket: errno=1 EPERM",
        "raw ip socket: errno=93 EPROTONOSUPPORT",
        "packet socket: errno=97 EAFNOSUPPORT",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    assert_lines(&python(&sb, User::User, body), &expected);
}

/// ptrace attach or seize of a sibling process (to read its secrets or inject code) is EPERM.
#[test]
fn caps_ptrace_of_a_sibling_is_refused() {
    let server = Server::start();
    let sb = server.sandbox();
    for user in [User::User, User::Root] {
        let r = sh(
            &sb,
            user,
            r#"sleep 30 & python3 -c '
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
for name, req in [("PTRACE_ATTACH", 16), ("PTRACE_SEIZE", 0x4206)]:
    r = libc.ptrace(req, int(sys.argv[1]), 0, 0)
    print(name, r, errno.errorcode.get(ctypes.get_errno()))
' $!; kill $!"#,
        );
        assert_lines(&r, &["PTRACE_ATTACH -1 EPERM", "PTRACE_SEIZE -1 EPERM"]);
    }
}

/// Character and block device nodes (a private /dev/mem or disk) cannot be made: EACCES from Landlock.
#[test]
fn caps_device_nodes_cannot_be_created() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("mknod /tmp/mem c 1 1", lambda: os.mknod("/tmp/mem", 0o600 | 0o020000, os.makedev(1, 1)))
op("mknod /home/user/vda b 254 0", lambda: os.mknod("/home/user/vda", 0o600 | 0o060000, os.makedev(254, 0)))
op("mknod /tmp/fifo p", lambda: os.mknod("/tmp/fifo", 0o600 | 0o010000))
"#;
    let expected = [
        "mknod /tmp/mem c 1 1: errno=13 EACCES",
        "mknod /home/user/vda b 254 0: errno=13 EACCES",
        "mknod /tmp/fifo p: ok",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
}

/// A set-uid-root copy of a binary gives `user` nothing: no_new_privs (and nosuid on /tmp) keep euid 1000.
#[test]
fn nnp_setuid_binary_gives_no_privilege() {
    let server = Server::start();
    let sb = server.sandbox();
    let r = sh(
        &sb,
        User::Root,
        "for d in /home/user /tmp; do cp /usr/bin/id $d/id-suid && chown root:root $d/id-suid && chmod 4755 $d/id-suid; done; \
         stat -c '%A %U' /home/user/id-suid /tmp/id-suid",
    );
    assert_lines(&r, &["-rwsr-xr-x root", "-rwsr-xr-x root"]);
    let r = sh(&sb, User::User, "/home/user/id-suid -u; /tmp/id-suid -u; /home/user/id-suid -un");
    assert_lines(&r, &["1000", "1000", "user"]);
}

/// The classic chroot breakout (chroot into a subdirectory, climb out with `..`, chroot `.`) only
/// reaches the sandbox's own root: the old root was detached after pivot_root.
#[test]
fn chroot_breakout_reaches_only_the_sandbox_root() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
before = sorted(os.listdir("/"))
os.makedirs("/tmp/jail", exist_ok=True)
fd = os.open("/", os.O_RDONLY)
os.chroot("/tmp/jail")
os.fchdir(fd)
for _ in range(64):
    os.chdir("..")
os.chroot(".")
print("same root:", sorted(os.listdir("/")) == before)
op("stat /work", lambda: os.stat("/work"))
print("hostname file:", open("/etc/hostname").read().startswith("sandlot-"))
"#;
    assert_lines(
        &python(&sb, User::Root, body),
        &["same root: True", "stat /work: errno=2 ENOENT", "hostname file: True"],
    );
}

/// Signals to pid 1 from inside (KILL, TERM, STOP, INT, HUP, SEGV, and kill(-1)) leave the supervisor
/// running: the sandbox keeps answering. `user` may not signal it at all.
#[test]
fn supervisor_survives_signals_from_inside() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
for sig in ["SIGKILL", "SIGTERM", "SIGSTOP", "SIGINT", "SIGHUP", "SIGSEGV", "SIGUSR1", "SIGQUIT"]:
    op("kill 1 " + sig, lambda: os.kill(1, getattr(__import__("signal"), sig)))
"#;
    let sigs = ["SIGKILL", "SIGTERM", "SIGSTOP", "SIGINT", "SIGHUP", "SIGSEGV", "SIGUSR1", "SIGQUIT"];
    let root: Vec<String> = sigs.iter().map(|s| format!("kill 1 {s}: ok")).collect();
    assert_lines(&python(&sb, User::Root, body), &root);
    let user: Vec<String> = sigs.iter().map(|s| format!("kill 1 {s}: errno=1 EPERM")).collect();
    assert_lines(&python(&sb, User::User, body), &user);
    // kill(-1) reaches every process the caller may signal, except itself and pid 1.
    let r = sh(&sb, User::Root, "sleep 60 & kill -9 -1; echo after");
    assert_lines(&r, &["after"]);
    assert_answers(&sb);
    let r = sh(&sb, User::User, "tr '\\0' ' ' < /proc/1/cmdline; echo; ps -o stat= -p 1");
    assert_eq!(r.stdout.lines().next(), Some("sandlot __supervisor "), "{r:?}");
    assert!(!r.stdout.contains('T'), "the supervisor is stopped: {r:?}");
}

/// The supervisor's binary (the host's `sandlot` executable) cannot be read or overwritten through
/// /proc/1/exe (the runc CVE-2019-5736 pattern), and its environment is closed.
#[test]
fn supervisor_binary_cannot_be_read_or_replaced() {
    let server = Server::start();
    let sb = server.sandbox();
    let body = r#"
op("open /proc/1/exe for reading", lambda: os.open("/proc/1/exe", os.O_RDONLY))
op("open /proc/1/exe for writing", lambda: os.open("/proc/1/exe", os.O_WRONLY))
op("readlink /proc/1/exe", lambda: os.readlink("/proc/1/exe"))
op("read /proc/1/environ", lambda: open("/proc/1/environ", "rb").read())
op("read /proc/1/mem", lambda: open("/proc/1/mem", "rb").read(1))
"#;
    let expected = [
        "open /proc/1/exe for reading: errno=13 EACCES",
        "open /proc/1/exe for writing: errno=13 EACCES",
        "readlink /proc/1/exe: errno=13 EACCES",
        "read /proc/1/environ: errno=13 EACCES",
        "read /proc/1/mem: errno=13 EACCES",
    ];
    assert_lines(&python(&sb, User::Root, body), &expected);
    assert_lines(&python(&sb, User::User, body), &expected);
}
