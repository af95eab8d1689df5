//! Inbound: exposed ports (previews) as origins of their own, path-routed previews under CSP, and
//! protocol upgrades through a preview URL.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use super::server;
use crate::harness::{sh, RawResponse, Server};

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
fn get_preview(srv: &Server, path: &str, headers: &[(&str, &str)]) -> RawResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = srv.raw("GET", path, None, headers, b"");
        if r.status != 502 || Instant::now() > deadline {
            return r;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn set_cookies(r: &RawResponse) -> Vec<String> {
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

/// `network.public_ports: true` is the explicit opening of a sandbox's ports: a request with no token
/// and no key reaches its server (by host and by path), while a sandbox made without it still answers
/// such a request 404. A `PATCH` of the network that leaves the field out keeps it, one that sets it
/// `false` closes the ports again; `GET` reports it.
#[test]
fn public_ports_need_no_token_only_when_asked_for_and_a_patch_keeps_them() {
    use super::{net, with_net};
    let srv = server(&[], &[]);
    let client = srv.client();
    let public = with_net(&client, net(r#"{"public_ports": true}"#));
    let private = srv.sandbox();
    for sb in [&public, &private] {
        sb.write_file("/home/user/srv.py", COOKIE_SERVER.as_bytes()).unwrap();
        sb.spawn(&sh("exec python3 /home/user/srv.py")).unwrap();
    }
    assert!(public.info().unwrap().network.public_ports);
    assert!(!private.info().unwrap().network.public_ports);
    let host_of = |sb: &sandlot_client::Sandbox| format!("8000-{}.localhost:{}", sb.id(), srv.port());
    let open = get_preview(&srv, "/", &[("host", &host_of(&public))]);
    assert_eq!((open.status, open.body.as_str()), (200, "cookie="), "{open:?}");
    let closed = get_preview(&srv, "/", &[("host", &host_of(&private))]);
    assert_eq!(closed.status, 404, "{closed:?}");
    // The network replaced without naming public_ports: still public.
    public.set_network(&net(r#"{"mode": "deny"}"#)).unwrap();
    assert!(public.info().unwrap().network.public_ports);
    assert_eq!(get_preview(&srv, "/", &[("host", &host_of(&public))]).status, 200);
    public.set_network(&net(r#"{"mode": "deny", "public_ports": false}"#)).unwrap();
    assert!(!public.info().unwrap().network.public_ports);
    assert_eq!(get_preview(&srv, "/", &[("host", &host_of(&public))]).status, 404);
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
