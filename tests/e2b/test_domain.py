"""Host routing over TLS (`--e2b-domain`, `--e2b-tls-listen`), with the certificate the server's
own CA issued and the environment `sandlot e2b env` prints: the SDK reaches the control plane and
`{port}-{id}.{domain}` hosts over verified TLS, and a sandbox port is proxied by host name.

The test process reaches `*.e2b.test` through the harness's CONNECT proxy (conftest
`LoopbackConnectProxy`), passed as the SDK's ordinary `proxy` option.
"""

import json
import ssl
import urllib.error
import urllib.request

import pytest
from e2b import AsyncSandbox, Sandbox

from conftest import TLS_DOMAIN

ECHO = r"""
import http.server, json
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"path": self.path, "host": self.headers.get("Host"), "token": self.headers.get("E2B-Traffic-Access-Token")}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", 8000), H).serve_forever()
"""


def _https(tls_server, url, cafile, **headers):
    """GET `url` through the harness's proxy, trusting only `cafile`."""
    ctx = ssl.create_default_context(cafile=cafile)
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({"https": tls_server.proxy}), urllib.request.HTTPSHandler(context=ctx)
    )
    req = urllib.request.Request(url, headers={k.replace("_", "-"): v for k, v in headers.items()})
    try:
        with opener.open(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_env_prints_host_routing_and_the_servers_ca(tls_server):
    env = tls_server.env
    assert env["E2B_DOMAIN"] == f"{TLS_DOMAIN}:{tls_server.tls_port}"
    assert "E2B_SANDBOX_URL" not in env and "unset E2B_SANDBOX_URL" in tls_server.env_lines
    ca = open(env["NODE_EXTRA_CA_CERTS"]).read()
    assert ca == open(tls_server.state + "/ca/ca.pem").read()
    assert open(env["SSL_CERT_FILE"]).read().endswith(ca)
    status, body, _ = tls_server.e2b("GET", "/connection")
    assert (status, body) == (200, {"domain": env["E2B_DOMAIN"], "caIssued": True})


def test_the_sdk_works_over_tls_host_routing_and_a_port_is_proxied_by_host(tls_server):
    sbx = Sandbox.create(timeout=90, proxy=tls_server.proxy)
    try:
        info = Sandbox.get_info(sbx.sandbox_id, proxy=tls_server.proxy)
        assert info.sandbox_domain == f"{TLS_DOMAIN}:{tls_server.tls_port}"
        host = sbx.get_host(8000)
        assert host == f"8000-{sbx.sandbox_id}.{TLS_DOMAIN}:{tls_server.tls_port}"
        assert any(t.startswith("api.") for t in tls_server.proxy_tunnels), "the SDK went around the TLS listener"
        ca = tls_server.env["NODE_EXTRA_CA_CERTS"]
        # envd by host name, its access token required.
        envd = f"https://49983-{sbx.sandbox_id}.{TLS_DOMAIN}:{tls_server.tls_port}/health"
        assert _https(tls_server, envd, ca)[0] == 401
        assert _https(tls_server, envd, ca, X_Access_Token=sbx._envd_access_token)[0] == 204
        # A user's server, by host name, with the traffic token (which it does not see).
        script = ECHO.replace("'", "'\\''")
        tls_server.native("POST", f"/v1/sandboxes/sb_{sbx.sandbox_id}/exec",
                          {"shell": f"exec python3 -c '{script}'", "background": True})
        status, body = _https(tls_server, f"https://{host}/p?q=1", ca,
                              E2B_Traffic_Access_Token=sbx.traffic_access_token)
        assert status == 200, body
        seen = json.loads(body)
        assert seen["path"] == "/p?q=1" and seen["token"] is None
        # Another sandbox id in the host name with this token: not found.
        other = Sandbox.create(timeout=60, proxy=tls_server.proxy)
        try:
            wrong = f"https://8000-{other.sandbox_id}.{TLS_DOMAIN}:{tls_server.tls_port}/"
            assert _https(tls_server, wrong, ca, E2B_Traffic_Access_Token=sbx.traffic_access_token)[0] == 404
        finally:
            other.kill(proxy=tls_server.proxy)
    finally:
        sbx.kill(proxy=tls_server.proxy)


def test_the_certificate_is_for_the_domain_only(tls_server):
    ctx = ssl.create_default_context(cafile=tls_server.env["NODE_EXTRA_CA_CERTS"])
    import socket

    for name, ok in ((f"49983-x.{TLS_DOMAIN}", True), (TLS_DOMAIN, True), ("other.test", False)):
        with socket.create_connection(("127.0.0.1", tls_server.tls_port), timeout=10) as raw:
            if ok:
                with ctx.wrap_socket(raw, server_hostname=name) as tls:
                    assert tls.version() in ("TLSv1.2", "TLSv1.3")
            else:
                with pytest.raises(ssl.SSLCertVerificationError):
                    ctx.wrap_socket(raw, server_hostname=name)


@pytest.mark.asyncio
async def test_the_async_sdk_over_tls(tls_server):
    sbx = await AsyncSandbox.create(timeout=60, proxy=tls_server.proxy)
    try:
        info = await AsyncSandbox.get_info(sbx.sandbox_id, proxy=tls_server.proxy)
        assert info.sandbox_id == sbx.sandbox_id
    finally:
        assert await sbx.kill(proxy=tls_server.proxy) is True


def test_http2_is_served_when_offered_and_routes_by_authority(tls_server):
    """A client that offers `h2` in ALPN (the SDKs' httpx does) gets HTTP/2. HTTP/2 names the host in
    `:authority`, not in a `Host` header: routing by host (envd, a user's port) must still find the
    sandbox, and a client that offers only HTTP/1.1 keeps getting it."""
    import time

    import httpx

    sbx = Sandbox.create(timeout=90, proxy=tls_server.proxy)
    try:
        ca = ssl.create_default_context(cafile=tls_server.env["NODE_EXTRA_CA_CERTS"])
        script = ECHO.replace("'", "'\\''")
        tls_server.native("POST", f"/v1/sandboxes/sb_{sbx.sandbox_id}/exec",
                          {"shell": f"exec python3 -c '{script}'", "background": True})
        envd = f"https://49983-{sbx.sandbox_id}.{TLS_DOMAIN}:{tls_server.tls_port}/health"
        port = f"https://{sbx.get_host(8000)}/h2?x=1"
        with httpx.Client(http2=True, http1=False, verify=ca, proxy=tls_server.proxy, timeout=30) as h2:
            r = h2.get(envd, headers={"X-Access-Token": sbx._envd_access_token})
            assert (r.http_version, r.status_code) == ("HTTP/2", 204)
            assert h2.get(envd).status_code == 401
            for _ in range(50):
                r = h2.get(port, headers={"E2B-Traffic-Access-Token": sbx.traffic_access_token})
                if r.status_code != 502:
                    break
                time.sleep(0.2)
            assert (r.http_version, r.status_code) == ("HTTP/2", 200), r.text
            seen = r.json()
            assert seen["path"] == "/h2?x=1" and seen["host"] == sbx.get_host(8000) and seen["token"] is None
        with httpx.Client(http2=False, verify=ca, proxy=tls_server.proxy, timeout=30) as h1:
            r = h1.get(envd, headers={"X-Access-Token": sbx._envd_access_token})
            assert (r.http_version, r.status_code) == ("HTTP/1.1", 204)
    finally:
        sbx.kill(proxy=tls_server.proxy)


def test_the_api_host_serves_e2bs_control_plane_at_its_root_and_nothing_else(tls_server):
    # E2B's SDKs default to `https://api.{E2B_DOMAIN}/` (no E2B_API_URL in the environment), and
    # E2B's own mocked tests match that URL exactly.
    assert "E2B_API_URL" not in tls_server.env and "E2B_API_URL" in tls_server.env_lines.splitlines()[0]
    ca = tls_server.env["NODE_EXTRA_CA_CERTS"]
    api = f"https://api.{TLS_DOMAIN}:{tls_server.tls_port}"
    key = tls_server.e2b_key
    status, body = _https(tls_server, api + "/sandboxes", ca, X_API_Key=key)
    assert status == 200 and isinstance(json.loads(body), list), (status, body)
    # Without the key, E2B's 401; sandlot's own API is not reached by that name.
    assert _https(tls_server, api + "/sandboxes", ca)[0] == 401
    assert _https(tls_server, api + "/v1/sandboxes", ca, Authorization=f"Bearer {tls_server.admin_key}")[0] == 404
    sbx = Sandbox.create(timeout=60, proxy=tls_server.proxy)
    try:
        assert Sandbox.get_info(sbx.sandbox_id, proxy=tls_server.proxy).sandbox_id == sbx.sandbox_id
    finally:
        sbx.kill()
