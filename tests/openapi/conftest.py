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
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pure_cgroup_v2() -> bool:
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return False
    with open("/proc/self/mountinfo") as f:
        return not any(" - cgroup cgroup " in line and "memory" in line for line in f)


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


class Server:
    """A running `sandlot serve` and its admin key."""

    def __init__(self, extra_args=()):
        binary = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no sandlot binary at {binary}: run `cargo build -p sandlot` or set SANDLOT_BIN")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tempfile.mkdtemp(prefix="sandlot-openapi-")
        self.cgroup = None
        preexec = None
        if _pure_cgroup_v2():
            with open("/proc/self/cgroup") as f:
                own = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
            parent = pathlib.Path("/sys/fs/cgroup" + own).parent
            self.cgroup = parent / f"sandlot-openapi-test-{os.getpid()}-{self.port}"
            self.cgroup.mkdir()
            procs = str(self.cgroup / "cgroup.procs")

            def preexec():
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        self.log_path = pathlib.Path(self.state + ".log")
        self.log = open(self.log_path, "wb")
        cmd = [
            binary, "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--state-dir", self.state,
            "--layers-volume-gb", "16",
            "--test-loopback-only",
            *extra_args,
        ]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sandlot serve exited {self.proc.returncode}:\n{self.log_path.read_text()[-4000:]}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline:
                    raise RuntimeError(f"sandlot serve did not answer in 60 s:\n{self.log_path.read_text()[-4000:]}")
                time.sleep(0.1)
        self.admin_key = (pathlib.Path(self.state) / "admin.key").read_text().strip()

    def call(self, method, path, body=None, key=None, timeout=60):
        """A raw call: (status, body bytes)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {key or self.admin_key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def native(self, method, path, body=None, key=None):
        """A call that must succeed, answered as parsed JSON (None when empty)."""
        status, text = self.call(method, path, body, key)
        assert 200 <= status < 300, (method, path, status, text)
        return json.loads(text) if text else None

    def log_tail(self, n=4000):
        self.log.flush()
        return self.log_path.read_text(errors="replace")[-n:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:
                pass
        if not os.environ.get("OPENAPI_KEEP_LOGS"):
            self.log_path.unlink(missing_ok=True)


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
