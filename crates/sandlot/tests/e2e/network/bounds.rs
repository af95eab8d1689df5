//! What one sandbox's network costs the daemon is bounded: open connections, audit rows of a DNS
//! flood, socket buffers.

use std::net::TcpListener;

use super::{audit_actions, net, server, with_net};

/// One sandbox cannot spend the daemon's descriptors: past 512 open connections, new ones are reset
/// (and audited), while the first 512 stay up.
#[test]
fn open_connections_per_sandbox_are_capped() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in l.incoming().flatten() {
            held.push(s);
        }
    });
    let srv = server(&["hold.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["hold.test"]}"#));
    let probe = format!(
        r#"
import select, socket, time
socks = [socket.create_connection(("hold.test", {port})) for _ in range(530)]
time.sleep(1)
closed, _, _ = select.select(socks, [], [], 0.5)
print(len(socks) - len(closed), len(closed))
"#
    );
    let out = sb.shell(&format!("python3 -c '{probe}'")).unwrap();
    assert_eq!(out.stdout.trim(), "512 18", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.deny" && d["rule"] == "connection-limit"), "{rows:?}");
}

/// A flood of lookups does not flood the audit log: past a burst, decisions are counted into a
/// summary row instead of one row each.
#[test]
fn a_dns_flood_is_summarised_in_the_audit_log() {
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["only.test"]}"#));
    let flood = r#"
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
def ask(i):
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00" + bytes([5]) + b"n%04d" % i + b"\x04test\x00\x00\x01\x00\x01"
    s.sendto(q, ("10.200.0.1", 53))
    s.recv(512)
for i in range(2000):
    ask(i)
time.sleep(0.2)
ask(9999)
print("done")
"#;
    let out = sb.shell(&format!("python3 -c '{flood}'")).unwrap();
    assert_eq!(out.stdout.trim(), "done", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    let dns_rows = rows.iter().filter(|(a, d)| a == "net.deny" && d["kind"] == "dns").count();
    assert!(dns_rows < 1000, "{dns_rows} rows for 2001 lookups");
    assert!(
        rows.iter().any(|(_, d)| d["rule"] == "audit-rate-limit"
            && d["reason"].as_str().unwrap_or_default().contains("were not recorded")),
        "no summary row"
    );
}

/// A sandbox with network has 1 MiB socket buffers at most (both ends of its connections live in its
/// namespace, the daemon's accepted one too), not the kernel's 6 MiB / 4 MiB, and cannot raise them.
#[test]
fn socket_buffers_in_a_sandbox_namespace_are_bounded() {
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["nothing.test"]}"#));
    let out = sb
        .as_user(sandlot_client::api::User::Root)
        .shell("cat /proc/sys/net/ipv4/tcp_rmem /proc/sys/net/ipv4/tcp_wmem; echo 4096 131072 8388608 > /proc/sys/net/ipv4/tcp_rmem; echo rc=$?")
        .unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[..2], ["4096\t131072\t1048576", "4096\t16384\t1048576"], "{out:?}");
    assert_ne!(lines.get(2), Some(&"rc=0"), "sandbox root raised its buffers: {out:?}");
}
