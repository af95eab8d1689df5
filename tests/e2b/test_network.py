"""E2B network options through the official SDK, onto sandlot's egress policy and credential broker:
`allow_internet_access`, `allow_out`/`deny_out`, per-host header transforms, `update_network`.

The "internet" is an HTTP server of this process on 127.0.0.1, reached by names the server resolves
to it (`--resolve`, see conftest `net_server`); the server dials loopback only.
"""

import http.server
import threading

import pytest
from e2b import Sandbox
from e2b.sandbox.network import ALL_TRAFFIC

SECRET = "Bearer e2b-net-test-credential"


class _Upstream(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        seen = self.headers.get("Authorization")
        body = (b"authorized" if seen == SECRET else b"anonymous") + b" " + self.headers.get("Host", "").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def upstream():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _get(server, sbx, host, port):
    """What curl in the sandbox gets from http://host:port/ (or `rc=N` when it fails)."""
    r = server.exec(sbx.sandbox_id, f"curl -sS -m 5 http://{host}:{port}/ || echo rc=$?")
    return r["stdout"].strip()


def test_internet_is_closed_by_default_and_opened_only_when_asked(net_server, upstream):
    # Unlike E2B's cloud: sandlot denies by default on every surface.
    sbx = Sandbox.create(timeout=60)
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream).startswith("rc=")
        assert Sandbox.get_info(sbx.sandbox_id).allow_internet_access is False
    finally:
        sbx.kill()
    sbx = Sandbox.create(timeout=60, allow_internet_access=True)
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream) == f"anonymous api.e2b.test:{upstream}"
        assert Sandbox.get_info(sbx.sandbox_id).allow_internet_access is True
    finally:
        sbx.kill()


def test_allow_internet_access_false_denies(net_server, upstream):
    sbx = Sandbox.create(timeout=60, allow_internet_access=False)
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream).startswith("rc=")
        assert Sandbox.get_info(sbx.sandbox_id).allow_internet_access is False
    finally:
        sbx.kill()


def test_allow_out_admits_only_its_hosts(net_server, upstream):
    sbx = Sandbox.create(timeout=60, network={"allow_out": ["api.e2b.test"], "deny_out": [ALL_TRAFFIC]})
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream) == f"anonymous api.e2b.test:{upstream}"
        assert _get(net_server, sbx, "other.e2b.test", upstream).startswith("rc=")
    finally:
        sbx.kill()


def test_a_header_transform_is_injected_by_the_proxy_and_never_seen_inside(net_server, upstream):
    sbx = Sandbox.create(
        timeout=60,
        network={
            "allow_out": ["api.e2b.test", "other.e2b.test"],
            "deny_out": [ALL_TRAFFIC],
            "rules": {"api.e2b.test": [{"transform": {"headers": {"Authorization": SECRET}}}]},
        },
    )
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream) == f"authorized api.e2b.test:{upstream}"
        # Only on the host of the rule.
        assert _get(net_server, sbx, "other.e2b.test", upstream) == f"anonymous other.e2b.test:{upstream}"
        inside = net_server.exec(sbx.sandbox_id, "env; cat /proc/1/environ 2>/dev/null")["stdout"]
        assert "e2b-net-test-credential" not in inside
    finally:
        sbx.kill()


def test_update_network_closes_and_reopens(net_server, upstream):
    sbx = Sandbox.create(timeout=60, allow_internet_access=True)
    try:
        assert _get(net_server, sbx, "api.e2b.test", upstream) == f"anonymous api.e2b.test:{upstream}"
        sbx.update_network({"allow_internet_access": False})
        assert _get(net_server, sbx, "api.e2b.test", upstream).startswith("rc=")
        sbx.update_network({"allow_out": ["api.e2b.test"], "deny_out": [ALL_TRAFFIC]})
        assert _get(net_server, sbx, "api.e2b.test", upstream) == f"anonymous api.e2b.test:{upstream}"
        assert _get(net_server, sbx, "other.e2b.test", upstream).startswith("rc=")
    finally:
        sbx.kill()
