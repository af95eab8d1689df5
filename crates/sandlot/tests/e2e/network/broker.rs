//! Credential brokering and TLS: an injected header reaches only its upstream over verified TLS and
//! never the sandbox; TLS without a rule is not intercepted; brokered connections are kept per
//! sandbox, follow only their host, and follow policy changes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sandlot_client::api::{Mode, NetworkSpec};

use super::{assert_no_dial_bug, net, server, with_net, SECRET};
use crate::harness::{sh, Server};

/// An HTTPS server on 127.0.0.1 (see [`tls_upstream`]), stopped when dropped.
pub(crate) struct TlsUpstream {
    child: Child,
    /// Its port.
    pub(crate) port: u16,
    /// Holds `ca.pem`, the test CA its certificate is signed by.
    pub(crate) dir: tempfile::TempDir,
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTPS server for `host` (certificate from a test CA) that answers 200 `authorized` only when
/// the request carries `Authorization: Bearer SECRET`, 401 otherwise, and never echoes headers.
pub(crate) fn tls_upstream(host: &str) -> TlsUpstream {
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
    let srv = Server::builder().loopback_only().resolve("api.secret.test=127.0.0.1").extra_ca(&ca).start();
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
            user: Some(sandlot_client::api::User::Root),
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
