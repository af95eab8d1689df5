"""The metrics suite's harness: one real `sandlot serve` per session, sampling every second, with a
scrape token (docs/TESTING.md, "The metrics suite").

SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). The server listens on
loopback only; its state is a temporary directory removed at the end. On a pure cgroup v2 host the
daemon gets a cgroup of its own beside this process's (a daemon refuses to share one).
"""

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
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


class Server:
    """A running `sandlot serve`, its admin key and its scrape token."""

    def __init__(self):
        binary = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no sandlot binary at {binary}: run `cargo build -p sandlot` or set SANDLOT_BIN")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tempfile.mkdtemp(prefix="sandlot-metrics-")
        self.token = secrets.token_hex(24)
        token_file = pathlib.Path(self.state + ".token")
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        self.token_file = token_file
        self.cgroup = None
        preexec = None
        if _pure_cgroup_v2():
            with open("/proc/self/cgroup") as f:
                own = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
            parent = pathlib.Path("/sys/fs/cgroup" + own).parent
            self.cgroup = parent / f"sandlot-metrics-test-{os.getpid()}-{self.port}"
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
            "--metrics-interval-s", "1",
            "--metrics-token-file", str(token_file),
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

    def call(self, method, path, body=None, key=None):
        """A raw call: (status, body bytes, content type)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read(), r.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", "")

    def native(self, method, path, body=None, key=None):
        """A call to the native API that must succeed, answered as parsed JSON (None when empty)."""
        status, text, _ = self.call(method, path, body, key or self.admin_key)
        assert 200 <= status < 300, (method, path, status, text)
        return json.loads(text) if text else None

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
        self.token_file.unlink(missing_ok=True)
        if self.cgroup is not None:
            try:
                self.cgroup.rmdir()
            except OSError:
                pass
        if not os.environ.get("METRICS_KEEP_LOGS"):
            self.log_path.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        yield s
    finally:
        s.stop()
