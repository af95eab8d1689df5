//! Egress: deny by default, allowlists enforced on the host, DNS answered by the daemon, SNI/Host
//! binding, always-denied ranges, runtime policy changes, credential brokering, and the audit trail.
//!
//! All traffic stays on this machine: "the internet" is a server on 127.0.0.1 reached through
//! `--resolve NAME=127.0.0.1`, and every server runs with `--test-loopback-only`, so the proxy refuses
//! (and logs as a bug) any attempt to dial a non-loopback address.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandlot_client::api::{CreateSandbox, ExecRequest, Mode, NetworkSpec};
use sandlot_client::Client;

use crate::harness::{sh, Server};

const SECRET: &str = "sk-test-4f1b9c2e7d3a";

/// A plain HTTP server on 127.0.0.1 answering every request with `body`.
fn http_server(body: &'static str) -> u16 {
    http_server_on("127.0.0.1:0", body)
}

/// A plain HTTP server on `addr` answering every request with `body`; returns its port.
fn http_server_on(addr: &str, body: &'static str) -> u16 {
    let l = TcpListener::bind(addr).unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        }
    });
    port
}

fn server(resolve: &[&str], extra: &[&str]) -> Server {
    let mut args = vec!["--test-loopback-only"];
    for r in resolve {
        args.push("--resolve");
        args.push(r);
    }
    args.extend_from_slice(extra);
    Server::start_with(&args)
}

fn net(json: &str) -> NetworkSpec {
    serde_json::from_str(json).unwrap()
}

fn with_net(client: &Client, spec: NetworkSpec) -> sandlot_client::Sandbox {
    client.create(&CreateSandbox { network: Some(spec), ..Default::default() }).unwrap()
}

/// The sandbox's audit rows, newest first, once they have settled: network decisions are written by a
/// thread of their own just after the fact, so the rows are read until two reads 50 ms apart agree.
fn audit_actions(client: &Client, id: &str) -> Vec<(String, serde_json::Value)> {
    let read = || -> Vec<(String, serde_json::Value)> {
        client.audit(Some(id), Some(5000)).unwrap().into_iter().map(|e| (e.action, e.detail)).collect()
    };
    let mut rows = read();
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(50));
        let again = read();
        if again.len() == rows.len() {
            return again;
        }
        rows = again;
    }
    rows
}

fn assert_no_dial_bug(srv: &Server) {
    assert!(
        !srv.log_text().contains("BUG: the proxy tried to dial"),
        "a non-loopback address was dialled:\n{}",
        srv.log_text()
    );
}

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

struct TlsUpstream {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTPS server for `host` (certificate from a test CA) that answers 200 `authorized` only when
/// the request carries `Authorization: Bearer SECRET`, 401 otherwise, and never echoes headers.
fn tls_upstream(host: &str) -> TlsUpstream {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = |args: &[&str]| {
        let st = Command::new("openssl").args(args).current_dir(d).stderr(Stdio::null()).status().unwrap();
        assert!(st.success(), "openssl {args:?}");
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sandlot test CA",
    ]);
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        &format!("/CN={host}"),
    ]);
    std::fs::write(d.join("ext.cnf"), format!("subjectAltName=DNS:{host}\n")).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "srv.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "srv.pem",
        "-days",
        "2",
        "-extfile",
        "ext.cnf",
    ]);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let script = format!(
        r#"
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.headers.get("Authorization") == "Bearer {SECRET}"
        body = b"authorized\n" if ok else b"missing credential\n"
        self.send_response(200 if ok else 401); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", {port}), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain("srv.pem", "srv.key")
s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#
    );
    let child = Command::new("python3").arg("-c").arg(script).current_dir(d).stdout(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "TLS upstream did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    TlsUpstream { child, port, dir }
}

/// Credential brokering: the injected header reaches the upstream over verified TLS, while the
/// sandbox's environment, /proc, files, API answers and audit rows never hold the secret.
#[test]
fn brokered_credential_reaches_upstream_and_never_the_sandbox() {
    let up = tls_upstream("api.secret.test");
    let ca = up.dir.path().join("ca.pem");
    let srv = server(&["api.secret.test=127.0.0.1"], &["--extra-ca", ca.to_str().unwrap()]);
    let client = srv.client();
    let spec = net(&format!(
        r#"{{"mode":"allowlist","allow":["api.secret.test"],"rules":{{"api.secret.test":{{"headers":{{"authorization":"Bearer {SECRET}"}}}}}}}}"#
    ));
    assert_eq!(spec.mode, Mode::Allowlist);
    let sb = with_net(&client, spec);
    let p = up.port;
    let out = sb
        .shell(&format!(
            "curl -sS -m 10 https://api.secret.test:{p}/; \
             python3 -c 'import urllib.request; print(urllib.request.urlopen(\"https://api.secret.test:{p}/v1\").read().decode(), end=\"\")'"
        ))
        .unwrap();
    assert_eq!(out.stdout, "authorized\nauthorized\n", "{out:?}");
    // The secret is nowhere inside: environment, /proc, files.
    let look = sb
        .as_user(sandlot_client::api::User::Root)
        .exec(&sandlot_client::api::ExecRequest {
            user: sandlot_client::api::User::Root,
            // The pattern is assembled inside, so the command line (which is audited) does not hold it.
            ..sh(&format!(
                "s={}; s=\"${{s}}{}\"; env | grep -c \"$s\"; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c \"$s\"; \
                 grep -rIl \"$s\" / --exclude-dir=proc --exclude-dir=sys --exclude-dir=usr 2>/dev/null | wc -l",
                &SECRET[..8],
                &SECRET[8..]
            ))
        })
        .unwrap();
    assert_eq!(look.stdout, "0\n0\n0\n", "{look:?}");
    // Nor in what the API says about the sandbox, nor in the audit log.
    let info = serde_json::to_string(&sb.info().unwrap()).unwrap();
    assert!(!info.contains(SECRET) && info.contains("authorization"), "{info}");
    let audit = serde_json::to_string(&client.audit(Some(sb.id()), Some(500)).unwrap()).unwrap();
    assert!(!audit.contains(SECRET), "secret in the audit log");
    // The state database holds it (it must, to inject it) only in a file nobody else can read.
    let mode = std::fs::metadata(srv.state_dir().join("sandlot.db")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o077, 0);
    let key = std::fs::metadata(srv.state_dir().join("ca/ca.key")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o077, 0);
    assert_no_dial_bug(&srv);
}

/// Without a rule, TLS to an allowed host passes through untouched (end-to-end TLS, no header).
#[test]
fn tls_without_a_rule_is_not_intercepted() {
    let up = tls_upstream("plain.secret.test");
    let srv = server(&["plain.secret.test=127.0.0.1"], &[]);
    let sb = with_net(&srv.client(), net(r#"{"mode":"allowlist","allow":["plain.secret.test"]}"#));
    let ca = std::fs::read(up.dir.path().join("ca.pem")).unwrap();
    sb.write_file("/home/user/upstream-ca.pem", &ca).unwrap();
    let mut out = String::new();
    let r = sb
        .shell(&format!("curl -sS -m 10 --cacert upstream-ca.pem https://plain.secret.test:{}/; echo rc=$?", up.port))
        .unwrap();
    r.stdout.as_bytes().read_to_string(&mut out).unwrap();
    // The sandbox verified the upstream's own certificate (no interception), and no header was added.
    assert_eq!(out, "missing credential\nrc=0\n", "{r:?}");
}

/// A wheel with one module, `sandlot_probe`, whose `VALUE` is 42.
fn probe_wheel() -> Vec<u8> {
    let script = r#"
import io, sys, zipfile
b = io.BytesIO()
with zipfile.ZipFile(b, "w") as z:
    files = {
        "sandlot_probe/__init__.py": "VALUE = 42\n",
        "sandlot_probe-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: sandlot-probe\nVersion: 1.0\n",
        "sandlot_probe-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: sandlot-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    for name, body in files.items():
        z.writestr(name, body)
    z.writestr("sandlot_probe-1.0.dist-info/RECORD", "".join(f"{n},,\n" for n in files) + "sandlot_probe-1.0.dist-info/RECORD,,\n")
sys.stdout.buffer.write(b.getvalue())
"#;
    let out = Command::new("python3").arg("-c").arg(script).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    out.stdout
}

/// A package index (PEP 503 "simple") on loopback serving the probe wheel.
fn package_index() -> u16 {
    let wheel = probe_wheel();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut s in l.incoming().flatten() {
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut first = String::new();
            let _ = r.read_line(&mut first);
            let mut line = String::new();
            while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                line.clear();
            }
            let path = first.split_whitespace().nth(1).unwrap_or("/").to_string();
            let name = "sandlot_probe-1.0-py3-none-any.whl";
            let (status, ctype, body): (&str, &str, Vec<u8>) = if path.ends_with(".whl") {
                ("200 OK", "application/octet-stream", wheel.clone())
            } else if path.starts_with("/simple/sandlot-probe") {
                let html = format!("<!DOCTYPE html><html><body><a href=\"/files/{name}\">{name}</a></body></html>");
                ("200 OK", "text/html", html.into_bytes())
            } else {
                ("404 Not Found", "text/plain", b"not found".to_vec())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s.write_all(&body);
        }
    });
    port
}

/// A real client end to end: pip installs a package from an index allowlisted by name, and the same
/// pip cannot reach an index that is not on the list.
#[test]
fn pip_installs_from_an_allowlisted_index() {
    let port = package_index();
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

/// A server on port 8000 that answers every request with the Cookie header it received and sets a
/// cookie of its own for the whole preview domain.
const COOKIE_SERVER: &str = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("cookie=" + self.headers.get("Cookie", "")).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "theirs=1; Domain=localhost; Path=/")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("127.0.0.1", 8000), H).serve_forever()
"#;

/// GETs `path` with `headers` until the server inside the sandbox has started (502 until then).
fn get_preview(srv: &Server, path: &str, headers: &[(&str, &str)]) -> crate::harness::RawResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = srv.raw("GET", path, None, headers, b"");
        if r.status != 502 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn set_cookies(r: &crate::harness::RawResponse) -> Vec<String> {
    r.head.lines().filter_map(|l| l.strip_prefix("set-cookie: ")).map(str::to_string).collect()
}

/// Inbound: each exposed port is an origin of its own, `{port}-{id}.localhost` on a loopback server.
/// Its preview URL admits a browser by token (then by a host-only cookie), the owner's key admits a
/// program; nothing else does, neither another sandbox's host with this token nor the shared API
/// origin with a token (the review: one sandbox's page could read another's preview there). The
/// sandbox's own cookie loses its `Domain` (it would reach every sibling), and our token never
/// reaches the sandbox's server. A closed port is a 502.
#[test]
fn exposed_port_is_an_origin_of_its_own_reachable_with_its_token_or_the_key_only() {
    let srv = server(&[], &[]);
    let sb = srv.sandbox();
    let other = srv.sandbox();
    sb.write_file("/home/user/srv.py", COOKIE_SERVER.as_bytes()).unwrap();
    sb.spawn(&sh("exec python3 /home/user/srv.py")).unwrap();
    let port = sb.expose_port(8000).unwrap();
    let host = format!("8000-{}.localhost:{}", sb.id(), srv.port());
    assert_eq!(port.url, format!("http://{host}/?sandlot_token={}", port.token), "{port:?}");

    let with_token = get_preview(&srv, &format!("/?sandlot_token={}", port.token), &[("host", &host)]);
    assert_eq!((with_token.status, with_token.body.as_str()), (200, "cookie="), "{with_token:?}");
    let cookies = set_cookies(&with_token);
    let ours = cookies.iter().find(|c| c.starts_with("sandlot_token=")).expect("our cookie");
    assert!(ours.contains("Path=/;") && !ours.contains("Domain"), "{cookies:?}");
    let theirs = cookies.iter().find(|c| c.starts_with("theirs=")).expect("their cookie");
    assert!(!theirs.to_ascii_lowercase().contains("domain"), "their cookie still names a domain: {theirs}");

    let pair = ours.split(';').next().unwrap();
    let both = format!("{pair}; theirs=1");
    let by_cookie = get_preview(&srv, "/page", &[("host", &host), ("cookie", &both)]);
    assert_eq!((by_cookie.status, by_cookie.body.as_str()), (200, "cookie=theirs=1"), "{by_cookie:?}");
    let key = format!("Bearer {}", srv.admin_key());
    assert_eq!(get_preview(&srv, "/page", &[("host", &host), ("authorization", &key)]).status, 200);
    let none = get_preview(&srv, "/page", &[("host", &host)]);
    assert_eq!((none.status, none.body.contains("not_found")), (404, true), "{none:?}");
    // This token on another sandbox's origin, and on the shared API origin: nothing.
    let elsewhere = format!("8000-{}.localhost:{}", other.id(), srv.port());
    assert_eq!(get_preview(&srv, "/", &[("host", &elsewhere), ("cookie", pair)]).status, 404);
    let shared = format!("/v1/sandboxes/{}/ports/8000/?sandlot_token={}", sb.id(), port.token);
    assert_eq!(get_preview(&srv, &shared, &[]).status, 404);
    // The owner's key still reaches it by path (programs), and a closed port is a 502.
    assert_eq!(
        get_preview(&srv, &format!("/v1/sandboxes/{}/ports/8000/", sb.id()), &[("authorization", &key)]).status,
        200
    );
    let closed =
        srv.raw("GET", &format!("/v1/sandboxes/{}/ports/9999/", sb.id()), None, &[("authorization", &key)], b"");
    assert_eq!(closed.status, 502, "{closed:?}");
}

/// With host routing off (`--preview-domain=`, as on a non-loopback listener without a domain), a
/// preview shares the API's origin, so a token-admitted response is sandboxed by CSP (an opaque origin
/// that can read nothing of the API's) and the sandbox's cookies are dropped; the owner's key gets the
/// response as the server sent it.
#[test]
fn a_path_routed_preview_is_csp_sandboxed_and_sets_no_cookie() {
    let srv = server(&[], &["--preview-domain="]);
    let sb = srv.sandbox();
    sb.write_file("/home/user/srv.py", COOKIE_SERVER.as_bytes()).unwrap();
    sb.spawn(&sh("exec python3 /home/user/srv.py")).unwrap();
    let port = sb.expose_port(8000).unwrap();
    let path = format!("/v1/sandboxes/{}/ports/8000/?sandlot_token={}", sb.id(), port.token);
    assert_eq!(port.url, format!("http://127.0.0.1:{}{path}", srv.port()), "{port:?}");
    let r = get_preview(&srv, &path, &[]);
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.head.contains("content-security-policy: sandbox allow-scripts"), "{}", r.head);
    let cookies = set_cookies(&r);
    assert!(cookies.iter().all(|c| c.starts_with("sandlot_token=")), "{cookies:?}");
    let key = format!("Bearer {}", srv.admin_key());
    let by_key = get_preview(&srv, &format!("/v1/sandboxes/{}/ports/8000/", sb.id()), &[("authorization", &key)]);
    assert!(!by_key.head.contains("content-security-policy"), "{}", by_key.head);
    assert!(set_cookies(&by_key).iter().any(|c| c.starts_with("theirs=")), "{}", by_key.head);
}

/// Inbound protocol upgrades (the WebSocket handshake): after the server inside answers 101, bytes flow
/// both ways through the preview URL.
#[test]
fn exposed_port_passes_protocol_upgrades() {
    let srv = server(&[], &[]);
    let sb = srv.sandbox();
    // A server that upgrades every request to an echo protocol.
    let echo = r#"
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 8001)); s.listen(4)
while True:
    c, _ = s.accept(); data = b""
    while b"\r\n\r\n" not in data:
        data += c.recv(4096)
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
    while True:
        b = c.recv(4096)
        if not b: break
        c.sendall(b.upper())
    c.close()
"#;
    sb.write_file("/home/user/echo.py", echo.as_bytes()).unwrap();
    sb.spawn(&sh("exec python3 /home/user/echo.py")).unwrap();
    let port = sb.expose_port(8001).unwrap();
    // http://{port}-{id}.localhost:{api port}/?sandlot_token=…
    let (host, path) = port.url.strip_prefix("http://").and_then(|u| u.split_once('/')).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stream = loop {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n").unwrap();
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).to_string();
        if head.starts_with("HTTP/1.1 101") {
            break s;
        }
        assert!(Instant::now() < deadline, "no upgrade: {head}");
        std::thread::sleep(Duration::from_millis(100));
    };
    stream.write_all(b"hello through the tunnel").unwrap();
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"HELLO THROUGH THE TUNNEL");
}

/// A brokered host that cannot be reached answers the sandbox with a 502 that says so (over the
/// session the sandbox trusts), not with a bare reset.
#[test]
fn unreachable_brokered_host_is_a_502_with_a_reason() {
    let closed = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let srv = server(&["down.test=127.0.0.1"], &[]);
    let spec = net(r#"{"mode":"allowlist","allow":["down.test"],"rules":{"down.test":{"headers":{"x-key":"v"}}}}"#);
    let sb = with_net(&srv.client(), spec);
    let out = sb.shell(&format!("curl -sS -m 10 -w ' status=%{{http_code}}' https://down.test:{closed}/")).unwrap();
    assert!(out.stdout.contains("status=502") && out.stdout.contains("down.test"), "{out:?}");
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

/// A keep-alive HTTP upstream that counts its connections, records each request's Host header, and
/// answers whether the brokered credential arrived.
struct KeptUpstream {
    port: u16,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    hosts: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

fn kept_upstream() -> KeptUpstream {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let up = KeptUpstream { port, connections: Default::default(), hosts: Default::default() };
    let (count, hosts) = (std::sync::Arc::clone(&up.connections), std::sync::Arc::clone(&up.hosts));
    std::thread::spawn(move || {
        for s in l.incoming().flatten() {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let hosts = std::sync::Arc::clone(&hosts);
            std::thread::spawn(move || {
                let mut w = s.try_clone().unwrap();
                let mut r = BufReader::new(s);
                loop {
                    let (mut line, mut authorized, mut any) = (String::new(), false, false);
                    while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) && line != "\r\n" {
                        any = true;
                        authorized |= line.eq_ignore_ascii_case(&format!("authorization: Bearer {SECRET}\r\n"));
                        if let Some(h) = line.to_ascii_lowercase().strip_prefix("host: ") {
                            hosts.lock().unwrap().push(h.trim().to_string());
                        }
                        line.clear();
                    }
                    if !any {
                        return;
                    }
                    let body = if authorized { "authorized\n" } else { "missing credential\n" };
                    if write!(w, "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}", body.len()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    up
}

fn kept_rule() -> NetworkSpec {
    net(&format!(
        r#"{{"mode":"allowlist","allow":["kept.test"],"rules":{{"kept.test":{{"headers":{{"authorization":"Bearer {SECRET}"}}}}}}}}"#
    ))
}

/// A brokered upstream connection is kept for the next connection of the same sandbox (a client
/// opening one connection per request pays no upstream handshake), and never serves another sandbox.
#[test]
fn brokered_upstream_connections_are_reused_within_a_sandbox_only() {
    let up = kept_upstream();
    let (port, accepted) = (up.port, &up.connections);
    let srv = server(&["kept.test=127.0.0.1"], &[]);
    let client = srv.client();
    let a = with_net(&client, kept_rule());
    let b = with_net(&client, kept_rule());
    let get = format!("curl -sS -m 5 http://kept.test:{port}/");
    let out = a.shell(&format!("{get}; {get}; {get}")).unwrap();
    assert_eq!(out.stdout, "authorized\n".repeat(3), "{out:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1, "three sandbox connections, one upstream");
    // Brokered traffic counts in the sandbox's accounting (three requests out, three answers in).
    let counted = a.info().unwrap().network;
    assert!(counted.bytes_out > 3 * 40 && counted.bytes_in > 3 * 40, "{counted:?}");
    let out = b.shell(&get).unwrap();
    assert_eq!(out.stdout, "authorized\n", "{out:?}");
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2, "another sandbox gets its own upstream");
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

/// A brokered credential follows only the host it is for: a request for another host on a brokered
/// connection is refused (421) and never forwarded, nor is one with two Host headers (400), and a Host
/// header the sandbox writes on a
/// connection to a bare IP does not engage the broker at all.
#[test]
fn a_brokered_credential_never_follows_another_host() {
    let up = kept_upstream();
    let srv = server(&["kept.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, kept_rule());
    let probe = format!(
        r#"
import socket
s = socket.create_connection(("kept.test", {port}))
s.sendall(b"GET /a HTTP/1.1\r\nHost: kept.test\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n")
data = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    data += d
print(data.decode().count("authorized"), data.decode().split("\r\n")[0], "421" in data.decode())
"#,
        port = up.port
    );
    let out = sb.shell(&format!("python3 -c '{probe}'")).unwrap();
    assert_eq!(out.stdout.trim(), "1 HTTP/1.1 200 OK True", "{out:?}");
    assert_eq!(*up.hosts.lock().unwrap(), ["kept.test"], "the misdirected request reached the upstream");

    // On a brokered keep-alive connection, a second request with two Host headers (the brokered one
    // first): refused (400), never forwarded with the credential. (As a connection's first request it
    // is not brokered at all: the sniffer finds no single name.)
    let twice = format!(
        r#"
import socket
s = socket.create_connection(("kept.test", {port}))
s.sendall(b"GET /a HTTP/1.1\r\nHost: kept.test\r\n\r\nGET /c HTTP/1.1\r\nHost: kept.test\r\nHost: evil.test\r\n\r\n")
s.settimeout(10)
data = b""
while True:
    try:
        d = s.recv(65536)
    except socket.timeout:
        print("timeout", data)
        break
    if not d:
        break
    data += d
text = data.decode()
print(text.count("authorized"), text.count("HTTP/1.1 200 OK"), "HTTP/1.1 400 Bad Request" in text)
"#,
        port = up.port
    );
    let out = sb.shell(&format!("python3 -c '{twice}'")).unwrap();
    assert_eq!(out.stdout.trim(), "1 1 True", "{out:?}");
    assert_eq!(
        *up.hosts.lock().unwrap(),
        ["kept.test", "kept.test"],
        "a request with two Host headers reached the upstream"
    );

    // allow-all: a bare IP with the brokered host's name in Host passes through without the broker.
    let open = net(&format!(
        r#"{{"mode":"allow-all","rules":{{"kept.test":{{"headers":{{"authorization":"Bearer {SECRET}"}}}}}}}}"#
    ));
    let sb = with_net(&client, open);
    let out = sb.shell("curl -s -m 5 -H 'Host: kept.test' http://203.0.113.9/; echo rc=$?").unwrap();
    assert!(!out.stdout.contains("sandlot: upstream kept.test"), "the broker took a bare-IP connection: {out:?}");
    assert!(out.stdout.contains("rc=") && !out.stdout.contains("rc=0"), "{out:?}");
}

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

/// A policy change reaches requests on an already open brokered connection: a rotated credential is
/// used from the next request on, and once the host is no longer allowed the request is refused (403)
/// instead of carrying the old credential.
#[test]
fn a_policy_change_reaches_open_brokered_connections() {
    let up = kept_upstream();
    let srv = server(&["kept.test=127.0.0.1"], &[]);
    let client = srv.client();
    let sb = with_net(&client, kept_rule());
    let script = format!(
        r#"
import os, socket, time
s = socket.create_connection(("kept.test", {port}))
f = s.makefile("rb")
def get():
    s.sendall(b"GET / HTTP/1.1\r\nHost: kept.test\r\n\r\n")
    status = f.readline().decode().split()[1]
    n = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            break
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    return status + " " + f.read(n).decode().strip()
def step(name):
    open("/tmp/" + name, "w").close()
    for _ in range(1000):
        if os.path.exists("/tmp/go-" + name):
            return
        time.sleep(0.01)
print(get(), flush=True)
step("one")
print(get(), flush=True)
step("two")
print(get(), flush=True)
"#,
        port = up.port
    );
    sb.write_file("/tmp/keep.py", script.as_bytes()).unwrap();
    let runner = sb.clone();
    let run = std::thread::spawn(move || runner.shell("python3 /tmp/keep.py").unwrap());
    let reached = |name: &str| {
        crate::harness::eventually(Duration::from_secs(10), || {
            sb.shell(&format!("test -e /tmp/{name} && echo y")).unwrap().stdout == "y\n"
        })
    };
    assert!(reached("one"));
    let rotated = net(
        r#"{"mode":"allowlist","allow":["kept.test"],"rules":{"kept.test":{"headers":{"authorization":"Bearer rotated"}}}}"#,
    );
    sb.set_network(&rotated).unwrap();
    sb.write_file("/tmp/go-one", b"").unwrap();
    assert!(reached("two"));
    sb.set_network(&net(r#"{"mode":"deny"}"#)).unwrap();
    sb.write_file("/tmp/go-two", b"").unwrap();
    let out = run.join().unwrap();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{out:?}");
    assert_eq!(lines[0], "200 authorized");
    assert_eq!(lines[1], "200 missing credential", "the rotated credential replaced the old one");
    assert!(lines[2].starts_with("403 sandlot: the sandbox's network policy no longer allows"), "{out:?}");
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
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
