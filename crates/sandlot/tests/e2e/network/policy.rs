//! The sandbox's egress policy, enforced on the host: deny by default, allowlists by name (wildcards
//! included) and by CIDR, DNS answered by the daemon only, the HTTP Host and TLS SNI bound to the name
//! an address was resolved for, runtime changes, the CLI, `--resolve` from the config file, an IPv6
//! upstream, and a real client (pip) end to end.

use std::process::Command;
use std::time::{Duration, Instant};

use sandlot_client::api::ExecRequest;

use super::{
    assert_no_dial_bug, audit_actions, http_server, http_server_on, net, package_index, server, wheel, with_net, SECRET,
};
use crate::harness::sh;

/// Deny by default: curl, Python and a raw socket fail fast, and names do not resolve.
#[test]
fn deny_by_default_fails_fast() {
    let srv = server(&[], &[]);
    let sb = srv.sandbox();
    let t0 = Instant::now();
    let r = sb
        .shell(
            "curl -sS -m 5 http://1.1.1.1/ ; echo curl=$?; \
             python3 -c 'import socket; s=socket.socket(); s.settimeout(5)\ntry: s.connect((\"8.8.8.8\", 53)); print(\"raw=connected\")\nexcept OSError as e: print(\"raw=\", e.errno)'; \
             getent hosts example.com; echo dns=$?",
        )
        .unwrap();
    assert!(t0.elapsed() < Duration::from_secs(4), "took {:?}: {r:?}", t0.elapsed());
    assert!(r.stdout.contains("curl=7"), "{r:?}");
    assert!(r.stdout.contains("raw= 101"), "ENETUNREACH expected: {r:?}");
    assert!(r.stdout.contains("dns=2"), "{r:?}");
}

/// An allowlisted name works over HTTP (curl and Python), its decisions are audited, bytes are counted.
#[test]
fn allowlisted_name_works_and_is_audited() {
    let port = http_server("hello from web.test");
    let srv = server(&["web.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["web.test"]}"#));
    let out = sb
        .shell(&format!(
            "curl -sS -m 5 http://web.test:{port}/; echo; python3 -c 'import urllib.request; print(urllib.request.urlopen(\"http://web.test:{port}/\").read().decode())'"
        ))
        .unwrap();
    assert_eq!(out.stdout, "hello from web.test\nhello from web.test\n", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.allow" && d["kind"] == "tcp" && d["name"] == "web.test"), "{rows:?}");
    assert!(rows.iter().any(|(a, d)| a == "net.allow" && d["kind"] == "dns"), "{rows:?}");
    // Counted when a proxied connection ends, which may be just after curl returned.
    let counted = crate::harness::eventually(Duration::from_secs(5), || {
        let n = sb.info().unwrap().network;
        n.bytes_in > 0 && n.bytes_out > 0
    });
    assert!(counted, "{:?}", sb.info().unwrap().network);
    assert_no_dial_bug(&srv);
}

/// A wildcard admits subdomains only; the apex and any other name get NXDOMAIN, audited as denied.
#[test]
fn wildcard_admits_subdomains_and_others_get_nxdomain() {
    let srv = server(&["a.web.test=127.0.0.1", "web.test=127.0.0.1", "evil.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["*.web.test"]}"#));
    let out = sb.shell("getent hosts a.web.test >/dev/null; echo sub=$?; getent hosts web.test; echo apex=$?; getent hosts evil.test; echo other=$?").unwrap();
    assert_eq!(out.stdout, "sub=0\napex=2\nother=2\n", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.deny" && d["kind"] == "dns" && d["dst"] == "evil.test"), "{rows:?}");
}

/// The HTTP Host must name the host the address was resolved for (Host spoofing).
#[test]
fn host_spoofing_is_refused() {
    let port = http_server("secret internal page");
    let srv = server(&["web.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["web.test"]}"#));
    // Port 80 is where the Host binding applies; nothing listens there, so only the decision matters.
    let out = sb.shell("curl -sS -m 5 -H 'Host: internal.test' http://web.test/; echo rc=$?").unwrap();
    assert!(!out.stdout.contains("secret"), "{out:?}");
    let rows = audit_actions(&client, sb.id());
    let deny = rows.iter().find(|(a, d)| a == "net.deny" && d["kind"] == "tcp").expect("a denied connection");
    assert!(deny.1["reason"].as_str().unwrap().contains("internal.test"), "{deny:?}");
    let _ = port;
    assert_no_dial_bug(&srv);
}

/// The TLS SNI must name the host the address was resolved for (SNI spoofing).
#[test]
fn sni_spoofing_is_refused() {
    let srv = server(&["web.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["web.test"]}"#));
    let out = sb
        .shell("ip=$(getent hosts web.test | cut -d' ' -f1); curl -sSk -m 5 --resolve evil.test:443:$ip https://evil.test/; echo rc=$?")
        .unwrap();
    assert!(!out.stdout.contains("rc=0"), "{out:?}");
    let rows = audit_actions(&client, sb.id());
    let deny = rows.iter().find(|(a, d)| a == "net.deny" && d["kind"] == "tcp").expect("a denied connection");
    assert_eq!(deny.1["name"], "evil.test", "{deny:?}");
    assert!(deny.1["reason"].as_str().unwrap().contains("SNI"), "{deny:?}");
}

/// A `deny` CIDR wins over an allowed CIDR.
#[test]
fn deny_cidr_beats_allow() {
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["203.0.113.0/24"],"deny":["203.0.113.128/25"]}"#));
    let out = sb.shell("curl -sS -m 3 http://203.0.113.200/ >/dev/null 2>&1; echo rc=$?").unwrap();
    assert!(!out.stdout.contains("rc=0"), "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.deny" && d["rule"] == "deny 203.0.113.128/25"), "{rows:?}");
    assert_no_dial_bug(&srv);
}

/// DNS to a resolver of the sandbox's choosing (tunnelling) gets nothing; the attempt is audited.
#[test]
fn dns_to_another_resolver_is_refused() {
    let srv = server(&[], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allow-all"}"#));
    let out = sb
        .shell("python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(2); s.sendto(b\"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x01a\\x04test\\x00\\x00\\x01\\x00\\x01\", (\"8.8.8.8\", 53))\ntry: print(\"answer\", s.recv(512))\nexcept socket.timeout: print(\"no answer\")'")
        .unwrap();
    assert_eq!(out.stdout.trim(), "no answer", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.deny" && d["kind"] == "udp" && d["dst"] == "8.8.8.8:53"), "{rows:?}");
}

/// PATCH /network switches behaviour for new connections, without a restart.
#[test]
fn runtime_policy_update_takes_effect() {
    let port = http_server("ok");
    let srv = server(&["web.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = srv.sandbox();
    let cmd = format!("curl -sS -m 5 http://web.test:{port}/; echo \" rc=$?\"");
    assert!(sb.shell(&cmd).unwrap().stdout.contains("rc=6"), "denied by default");
    let patch = |spec: &str| {
        let r = srv.raw(
            "PATCH",
            &format!("/v1/sandboxes/{}/network", sb.id()),
            Some(srv.admin_key()),
            &[("content-type", "application/json")],
            spec.as_bytes(),
        );
        assert_eq!(r.status, 200, "{r:?}");
    };
    patch(r#"{"mode":"allowlist","allow":["web.test"]}"#);
    assert!(sb.shell(&cmd).unwrap().stdout.starts_with("ok rc=0"), "allowed after PATCH");
    patch(r#"{"mode":"deny"}"#);
    assert!(sb.shell(&cmd).unwrap().stdout.contains("rc=6"), "denied again");
    let bad = srv.raw(
        "PATCH",
        &format!("/v1/sandboxes/{}/network", sb.id()),
        Some(srv.admin_key()),
        &[("content-type", "application/json")],
        br#"{"mode":"allowlist","allow":["not a name"]}"#,
    );
    assert_eq!(bad.status, 400, "{bad:?}");
    let _ = client;
}

/// A real client end to end: pip installs a package from an index allowlisted by name, and the same
/// pip cannot reach an index that is not on the list.
#[test]
fn pip_installs_from_an_allowlisted_index() {
    let port = package_index(wheel("sandlot-probe", "sandlot_probe", "VALUE = 42\n"));
    let srv = server(&["pypi.test=127.0.0.1", "other-index.test=127.0.0.1"], &[]);
    let sb = with_net(&srv.client(), net(r#"{"mode":"allowlist","allow":["pypi.test"]}"#));
    let pip = |host: &str| {
        format!(
            "python3 -m pip install --quiet --no-cache-dir --user --break-system-packages --disable-pip-version-check \
             --retries 0 --timeout 5 --trusted-host {host} --index-url http://{host}:{port}/simple/ sandlot-probe"
        )
    };
    let refused = sb.exec(&ExecRequest { timeout_s: Some(60.0), ..sh(&pip("other-index.test")) }).unwrap();
    assert_ne!(refused.exit_code, 0, "an index off the list must be unreachable: {refused:?}");
    let ok = sb.exec(&ExecRequest { timeout_s: Some(60.0), ..sh(&pip("pypi.test")) }).unwrap();
    assert_eq!(ok.exit_code, 0, "{ok:?}");
    let out = sb.shell("python3 -c 'import sandlot_probe; print(sandlot_probe.VALUE)'").unwrap();
    assert_eq!(out.stdout, "42\n", "{out:?}");
}

/// The CLI sets a policy at create and replaces it later; injected values are never printed.
#[test]
fn cli_sets_and_replaces_the_network_policy() {
    let srv = server(&[], &[]);
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
            .args(args)
            .env("SANDLOT_URL", srv.url())
            .env("SANDLOT_API_KEY", srv.admin_key())
            .env("CLI_TEST_TOKEN", SECRET)
            .output()
            .unwrap();
        assert!(out.status.success(), "sandlot {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let id = cli(&["sandbox", "create", "--allow", "*.pypi.test", "--deny", "203.0.113.0/24"]);
    let id = id.trim();
    let shown: serde_json::Value = serde_json::from_str(&cli(&["sandbox", "network", id, "--json"])).unwrap();
    assert_eq!(shown["mode"], "allowlist");
    assert_eq!(shown["allow"], serde_json::json!(["*.pypi.test"]));
    assert_eq!(shown["deny"], serde_json::json!(["203.0.113.0/24"]));

    let text = cli(&["sandbox", "network", id, "--inject", "api.test:authorization=env:CLI_TEST_TOKEN"]);
    assert!(text.contains("inject:    api.test: authorization (values hidden)"), "{text}");
    assert!(!text.contains(SECRET), "{text}");
    let shown: serde_json::Value = serde_json::from_str(&cli(&["sandbox", "network", id, "--json"])).unwrap();
    assert_eq!(shown["allow"], serde_json::json!(["api.test"]), "an injected host is allowed: {shown}");
    assert!(!shown.to_string().contains(SECRET));

    let text = cli(&["sandbox", "network", id, "--deny-all"]);
    assert!(text.starts_with("mode:      deny"), "{text}");
    // A bad flag says what shape it wants, without contacting the server.
    let out = Command::new(env!("CARGO_BIN_EXE_sandlot"))
        .args(["sandbox", "network", id, "--inject", "authorization=x"])
        .env("SANDLOT_URL", srv.url())
        .env("SANDLOT_API_KEY", srv.admin_key())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("HOST:HEADER=VALUE"));
}

/// A name the admin maps to an IPv6 address is dialled over IPv6 (the sandbox sees the name's virtual
/// IPv4 address; the daemon connects to the real one).
#[test]
fn an_ipv6_upstream_is_reached_through_its_name() {
    let port = http_server_on("[::1]:0", "over6");
    let srv = server(&["six.test=::1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["six.test"]}"#));
    let out = sb.shell(&format!("curl -sS -m 5 http://six.test:{port}/")).unwrap();
    assert_eq!(out.stdout, "over6", "{out:?}");
    let rows = audit_actions(&client, sb.id());
    assert!(rows.iter().any(|(a, d)| a == "net.allow" && d["dst"] == format!("[::1]:{port}")), "{rows:?}");
}

/// `--resolve` mappings (like every `serve` option) can come from the config file.
#[test]
fn resolve_mappings_can_come_from_the_config_file() {
    let port = http_server("from config");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sandlot.toml");
    std::fs::write(&config, "resolve = [\"cfg.test=127.0.0.1\"]\ntest-loopback-only = true\n").unwrap();
    let srv = crate::harness::Server::start_with(&["--config", config.to_str().unwrap()]);
    let client = srv.client();
    let sb = with_net(&client, net(r#"{"mode":"allowlist","allow":["cfg.test"]}"#));
    let out = sb.shell(&format!("curl -sS -m 5 http://cfg.test:{port}/")).unwrap();
    assert_eq!(out.stdout, "from config", "{out:?}");
}
