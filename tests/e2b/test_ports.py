"""Sandbox ports other than envd's (`E2b-Sandbox-Port`), proxied to that port inside the sandbox:
authorised by the traffic token, the access token or the API key (never by the id alone), E2B's
headers kept from the server inside, and a server that is still starting waited for.
"""

import json
import time
import urllib.error
import urllib.request

from e2b import Sandbox

# A server that answers every GET with the request's path and headers, as JSON.
ECHO = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""


def _get(server, sandbox_id, port, path="/", **headers):
    req = urllib.request.Request(server.url + path)
    req.add_header("E2b-Sandbox-Id", sandbox_id)
    req.add_header("E2b-Sandbox-Port", str(port))
    for k, v in headers.items():
        req.add_header(k.replace("_", "-"), v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_a_port_is_proxied_with_the_traffic_token_and_waited_for(server):
    sbx = Sandbox.create(timeout=120)
    try:
        assert sbx.traffic_access_token and sbx.traffic_access_token.startswith("stt_")
        # The server starts two seconds after the first request is sent: the proxy waits for it.
        script = ECHO.replace("'", "'\\''")
        server.native("POST", f"/v1/sandboxes/sb_{sbx.sandbox_id}/exec",
                      {"shell": f"sleep 2; exec python3 -c '{script}'", "background": True})
        t0 = time.monotonic()
        status, body = _get(server, sbx.sandbox_id, 8000, "/hello?x=1",
                            E2B_Traffic_Access_Token=sbx.traffic_access_token, X_Custom="kept")
        assert status == 200, body
        assert time.monotonic() - t0 >= 1.5
        seen = json.loads(body)
        assert seen["path"] == "/hello?x=1"
        assert seen["headers"]["x-custom"] == "kept"
        for h in ("e2b-traffic-access-token", "x-access-token", "x-api-key", "e2b-sandbox-id", "e2b-sandbox-port"):
            assert h not in seen["headers"], seen
        # The access token and the API key admit too; their headers are dropped as well.
        status, body = _get(server, sbx.sandbox_id, 8000, X_Access_Token=sbx._envd_access_token)
        assert status == 200 and "x-access-token" not in json.loads(body)["headers"]
        status, body = _get(server, sbx.sandbox_id, 8000, X_API_Key=server.e2b_key)
        assert status == 200 and "x-api-key" not in json.loads(body)["headers"]
        # Our key sent as a bearer token as well never reaches the sandbox's server; the app's own
        # Authorization does.
        for bearer in (server.e2b_key, server.admin_key):
            status, body = _get(server, sbx.sandbox_id, 8000, X_API_Key=server.e2b_key,
                                Authorization=f"Bearer {bearer}")
            assert status == 200 and "authorization" not in json.loads(body)["headers"], body
        status, body = _get(server, sbx.sandbox_id, 8000, X_API_Key=server.e2b_key,
                            Authorization="Bearer the-apps-own-token")
        assert json.loads(body)["headers"].get("authorization") == "Bearer the-apps-own-token", body
    finally:
        sbx.kill()


def test_no_token_a_wrong_one_or_another_sandboxs_is_refused(server):
    a = Sandbox.create(timeout=60)
    b = Sandbox.create(timeout=60)
    try:
        # E2B's answer for a port of a non-public sandbox that comes without its token.
        assert _get(server, a.sandbox_id, 8000)[0] == 403
        forged = a.traffic_access_token[:-1] + ("1" if a.traffic_access_token.endswith("0") else "0")
        assert _get(server, a.sandbox_id, 8000, E2B_Traffic_Access_Token=forged)[0] == 404
        assert _get(server, a.sandbox_id, 8000, E2B_Traffic_Access_Token=b.traffic_access_token)[0] == 404
        assert _get(server, a.sandbox_id, 8000, X_API_Key=server.tenant_key("bob"))[0] == 404
        # A traffic token opens ports, not envd.
        assert _get(server, a.sandbox_id, 49983, "/health", E2B_Traffic_Access_Token=a.traffic_access_token)[0] == 401
    finally:
        a.kill()
        b.kill()


def test_a_port_nobody_listens_on_is_a_502_after_a_bounded_wait(server):
    sbx = Sandbox.create(timeout=60)
    try:
        t0 = time.monotonic()
        status, body = _get(server, sbx.sandbox_id, 8001, E2B_Traffic_Access_Token=sbx.traffic_access_token)
        waited = time.monotonic() - t0
        assert status == 502, body
        assert 9 <= waited <= 15, waited
        assert b"8001" in body
    finally:
        sbx.kill()


def test_get_host_without_an_e2b_domain_is_a_preview_origin_of_this_server(server):
    # The server has no --e2b-domain and listens on loopback: `get_host` must name this server
    # (`{port}-{id}.localhost:{listen port}`, plain HTTP, as browsers and curl resolve it), never
    # E2B's cloud, and that host must route to the sandbox's port with E2B's credentials.
    sbx = Sandbox.create(timeout=120)
    try:
        listen_port = server.port
        host = sbx.get_host(8000)
        assert host == f"{8000}-{sbx.sandbox_id}.localhost:{listen_port}", host
        script = ECHO.replace("'", "'\\''")
        server.native("POST", f"/v1/sandboxes/sb_{sbx.sandbox_id}/exec",
                      {"shell": f"exec python3 -c '{script}'", "background": True})

        def by_host(**headers):
            # urllib does not resolve `*.localhost`: connect to the listener, name the host.
            req = urllib.request.Request(server.url + "/via-host", headers={"Host": host})
            for k, v in headers.items():
                req.add_header(k.replace("_", "-"), v)
            try:
                with urllib.request.urlopen(req, timeout=30) as r:
                    return r.status, r.read()
            except urllib.error.HTTPError as e:
                return e.code, e.read()

        status, body = by_host(E2B_Traffic_Access_Token=sbx.traffic_access_token)
        assert status == 200, body
        assert json.loads(body)["path"] == "/via-host"
        # Without a token a non-public sandbox's port is refused, as E2B's proxy refuses it.
        assert by_host()[0] == 403
        # envd stays on header routing: `sandlot e2b env` sets no E2B_DOMAIN for this server.
        with urllib.request.urlopen(server.url + "/e2b/connection", timeout=30) as r:
            assert json.loads(r.read())["domain"] is None
    finally:
        sbx.kill()
