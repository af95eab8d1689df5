//! Always-denied ranges: cloud metadata, private ranges and the host's own surroundings stay closed
//! even in `allow-all`, refusals are resets at once, and only an admin can open a range to one tenant.

use std::net::TcpListener;
use std::time::Duration;

use super::{assert_no_dial_bug, audit_actions, net, server, with_net};

/// Cloud metadata and private ranges are refused even in allow-all, and never dialled.
#[test]
fn metadata_and_private_ranges_are_refused_in_allow_all() {
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allow-all"}"#));
    let out = sb
        .shell("for ip in 169.254.169.254 10.0.0.1 192.168.1.1 172.16.0.1; do curl -sS -m 3 http://$ip/ >/dev/null 2>&1; echo $ip=$?; done")
        .unwrap();
    for ip in ["169.254.169.254", "10.0.0.1", "192.168.1.1", "172.16.0.1"] {
        assert!(!out.stdout.contains(&format!("{ip}=0")), "{out:?}");
    }
    let rows = audit_actions(&client, sb.id());
    let meta = rows
        .iter()
        .find(|(a, d)| a == "net.deny" && d["dst"] == "169.254.169.254:80")
        .expect("metadata decision audited");
    assert!(meta.1["rule"].as_str().unwrap().starts_with("always-deny"), "{meta:?}");
    assert_no_dial_bug(&srv);
}

/// A refused connection is reset at once, over IPv4 and IPv6 alike, and audited; the sandbox's own
/// loopback servers stay reachable (steering leaves loopback and the sandbox's address alone).
#[test]
fn refused_connections_are_reset_at_once_over_ipv4_and_ipv6() {
    let srv = server(&["closed.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["closed.test"]}"#));
    // An allowed name whose upstream refuses the connection: the sandbox sees that as a reset too.
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let probe = r#"
import socket, time
for fam, addr in ((socket.AF_INET, ("169.254.169.254", 80)), (socket.AF_INET6, ("fd00:ec2::254", 80)), (socket.AF_INET, ("closed.test", CLOSED))):
    t = time.monotonic(); s = socket.socket(fam); s.settimeout(5)
    try:
        s.connect(addr); s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"); print(addr[0], "got", s.recv(1))
    except OSError as e:
        print(addr[0], "errno", e.errno, "%.3f" % (time.monotonic() - t))
"#
    .replace("CLOSED", &closed.to_string());
    let out = sb.shell(&format!("python3 -c '{probe}'")).unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    for line in lines {
        let f: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(f[1], "errno", "{out:?}");
        assert!(["104", "111", "32"].contains(&f[2]), "not a reset or refusal: {out:?}");
        assert!(f[3].parse::<f64>().unwrap() < 1.0, "not at once: {out:?}");
    }
    let rows = audit_actions(&client, sb.id());
    let v6 = rows
        .iter()
        .find(|(a, d)| a == "net.deny" && d["dst"] == "[fd00:ec2::254]:80")
        .unwrap_or_else(|| panic!("IPv6 metadata decision audited: {rows:?}"));
    assert!(v6.1["rule"].as_str().unwrap().starts_with("always-deny"), "{v6:?}");
    assert_no_dial_bug(&srv);
    let local = sb
        .shell(
            "python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1 &              for i in $(seq 50); do curl -s -o /dev/null http://127.0.0.1:8000/ && break; sleep 0.1; done;              curl -s -o /dev/null -w 'lo=%{http_code} ' http://127.0.0.1:8000/;              curl -s -o /dev/null -w 'own=%{http_code}' http://10.200.0.2:8000/; kill %1",
        )
        .unwrap();
    assert_eq!(local.stdout, "lo=200 own=200", "{local:?}");
}

/// An always-denied range opens to a tenant only when an admin opts that tenant in, only where the
/// sandbox's own policy allows it too, and running sandboxes follow at once. (The test dialer refuses
/// every non-loopback address, so the allowed attempt is seen as the policy's decision and one refused
/// dial of exactly that address: nothing leaves the machine.)
#[test]
fn an_admin_exemption_opens_an_always_denied_range_to_one_tenant() {
    let srv = server(&[], &[]);
    let admin = srv.client();
    let alice = srv.tenant_client("alice");
    let bob = srv.tenant_client("bob");
    let spec = r#"{"mode":"allowlist","allow":["10.20.30.0/24"]}"#;
    let a = with_net(&alice, net(spec));
    let b = with_net(&bob, net(spec));
    let probe = "curl -sS -m 3 http://10.20.30.40:8080/ >/dev/null 2>&1; echo rc=$?";
    assert!(!a.shell(probe).unwrap().stdout.contains("rc=0"));
    let rows = audit_actions(&alice, a.id());
    assert!(
        rows.iter().any(|(act, d)| act == "net.deny" && d["rule"] == "always-deny 10.0.0.0/8"),
        "before the exemption: {rows:?}"
    );

    // A tenant cannot opt itself in; bad ranges and unknown tenants are refused with a reason.
    let exempt = sandlot_client::api::TenantNetwork { exempt: vec!["10.20.30.0/24".into()] };
    crate::harness::expect_error(alice.set_tenant_network("alice", &exempt), 403, "forbidden");
    let bad = sandlot_client::api::TenantNetwork { exempt: vec!["10.20.30.0/33".into()] };
    crate::harness::expect_error(admin.set_tenant_network("alice", &bad), 400, "invalid_request");
    crate::harness::expect_error(admin.set_tenant_network("nobody", &exempt), 404, "not_found");

    assert_eq!(admin.set_tenant_network("alice", &exempt).unwrap(), exempt);
    assert_eq!(admin.tenant_network("alice").unwrap(), exempt);
    a.shell(probe).unwrap();
    b.shell(probe).unwrap();
    let rows = audit_actions(&alice, a.id());
    assert!(
        rows.iter()
            .any(|(act, d)| act == "net.allow" && d["dst"] == "10.20.30.40:8080" && d["rule"] == "10.20.30.0/24"),
        "after the exemption, alice's running sandbox is allowed: {rows:?}"
    );
    let rows = audit_actions(&bob, b.id());
    assert!(!rows.iter().any(|(act, _)| act == "net.allow"), "bob was not opted in: {rows:?}");
    let log = srv.log_text();
    let dials: Vec<&str> = log.lines().filter(|l| l.contains("BUG: the proxy tried to dial")).collect();
    assert!(!dials.is_empty() && dials.iter().all(|l| l.contains("10.20.30.40:8080")), "{dials:?}");

    // Withdrawn: denied again.
    admin.set_tenant_network("alice", &Default::default()).unwrap();
    a.shell(probe).unwrap();
    // Audit rows of network decisions are written by a thread of their own, just after the fact.
    let denied_again = crate::harness::eventually(Duration::from_secs(5), || {
        let rows = audit_actions(&alice, a.id());
        rows.iter().find(|(act, d)| act.starts_with("net.") && d["dst"] == "10.20.30.40:8080").unwrap().0 == "net.deny"
    });
    assert!(denied_again, "newest first: {:?}", audit_actions(&alice, a.id()));
}

/// `allow-all` does not open the host's surroundings: its default gateway and the network of its
/// interface are always denied (here 192.0.2.1 and 192.0.2.0/24 on the test machine; before the fix
/// only the host's own address was). The decision is the policy's; the loopback-only dialer would
/// fail the connection anyway, so the audit row is what is asserted.
#[test]
fn allow_all_never_reaches_the_hosts_gateway_or_its_network() {
    let route = std::fs::read_to_string("/proc/net/route").unwrap();
    let Some(gw) = route.lines().skip(1).find_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        (f.get(1) == Some(&"00000000")).then(|| u32::from_str_radix(f[2], 16).ok()).flatten()
    }) else {
        println!("no IPv4 default route on this host: nothing to check");
        return;
    };
    let gw = std::net::Ipv4Addr::from(u32::from_be(gw));
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allow-all"}"#));
    let out = sb.shell(&format!("curl -sS -m 3 http://{gw}:8080/ >/dev/null 2>&1; echo rc=$?")).unwrap();
    assert!(!out.stdout.contains("rc=0"), "{out:?}");
    let rows = audit_actions(&client, sb.id());
    let denied = rows
        .iter()
        .find(|(a, d)| a == "net.deny" && d["dst"].as_str().is_some_and(|t| t.starts_with(&gw.to_string())))
        .unwrap_or_else(|| panic!("no denial of {gw}: {rows:?}"));
    let rule = denied.1["rule"].as_str().unwrap();
    assert!(rule.starts_with("always-deny "), "{denied:?}");
    assert!(!rows
        .iter()
        .any(|(a, d)| a == "net.allow" && d["dst"].as_str().is_some_and(|t| t.contains(&gw.to_string()))));
    assert_no_dial_bug(&srv);
}
