"""The harness of the schemathesis run (test_schemathesis.py): one real `sandlot serve` per session,
and one loopback HTTP server that stands in for an image registry and a webhook receiver
(docs/TESTING.md, "The OpenAPI checks").

SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). Everything listens on
127.0.0.1 only; the server's state is a temporary directory removed at the end. On a pure cgroup v2
host the daemon gets a cgroup of its own beside this process's (a daemon refuses to share one).
test_openapi.py needs none of this: the fixtures start only when a test asks for them.
"""

import http.server
import json
import pathlib
import sys
import threading

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


class _Loopback(http.server.BaseHTTPRequestHandler):
    """An image registry that holds nothing (`/v2/` answers, every manifest and blob is unknown, as
    the distribution spec words it) and a webhook receiver that takes every POST."""

    def _answer(self, status, body=b"", content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Docker-Distribution-API-Version", "registry/2.0")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self):
        if self.path.split("?")[0] in ("/v2", "/v2/"):
            self._answer(200, b"{}")
            return
        code = "BLOB_UNKNOWN" if "/blobs/" in self.path else "MANIFEST_UNKNOWN"
        body = json.dumps({"errors": [{"code": code, "message": "unknown", "detail": {}}]}).encode()
        self._answer(404, body)

    do_HEAD = do_GET

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer(204)

    def log_message(self, *args):
        pass


class Loopback:
    """The registry and webhook receiver on 127.0.0.1:port."""

    def __init__(self):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Loopback)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve` and its admin key (OPENAPI_KEEP_LOGS=1 keeps its log)."""

    def __init__(self, extra_args=()):
        super().__init__("openapi", extra_args, keep_logs="OPENAPI_KEEP_LOGS")

    def call(self, method, path, body=None, key=None, timeout=60):
        """A raw call with the admin key unless `key` is given: (status, body bytes)."""
        status, text, _ = super().call(method, path, body, key=key or self.admin_key, timeout=timeout)
        return status, text


@pytest.fixture(scope="session")
def loopback():
    lb = Loopback()
    try:
        yield lb
    finally:
        lb.stop()


@pytest.fixture(scope="session")
def server(loopback):
    registry = f"127.0.0.1:{loopback.port}"
    s = Server(
        extra_args=(
            # Pulls go to the loopback registry above, over plain HTTP.
            "--insecure-registry", registry,
            # Webhooks go to the loopback receiver above.
            "--webhook-allow-private",
            "--webhook-attempts", "1",
            # Sandboxes the run leaves behind end soon.
            "--default-timeout-s", "120",
        )
    )
    try:
        yield s
    finally:
        s.stop()
