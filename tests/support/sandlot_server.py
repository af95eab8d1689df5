"""The one Python launcher of a real `sandlot serve` for the test suites (tests/e2b, tests/mcp,
tests/metrics, tests/openapi, tests/reference, sdk/python/tests, examples/tests): each suite's harness
subclasses `SandlotServer` for what only it needs.

SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). The server listens on
127.0.0.1 only (`--test-loopback-only`) with a 16 GiB btrfs layers volume; its state is a temporary
directory removed at the end, and so is its log unless the suite's KEEP_LOGS variable (or
SANDLOT_KEEP_LOGS) is set. On a pure cgroup v2 host the daemon gets a cgroup of its own beside this
process's (a daemon refuses to share one), removed after it.
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pure_cgroup_v2() -> bool:
    """Whether this host mounts cgroup v2 alone (no v1 memory hierarchy)."""
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        return False
    with open("/proc/self/mountinfo") as f:
        return not any(" - cgroup cgroup " in line and "memory" in line for line in f)


def binary() -> str:
    """The sandlot binary under test."""
    path = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no sandlot binary at {path}: run `cargo build -p sandlot` or set SANDLOT_BIN")
    return path


class SandlotServer:
    """A running `sandlot serve`: its URL, its admin key, and calls to its native API."""

    def __init__(self, name: str, extra_args=(), keep_logs: str = "SANDLOT_KEEP_LOGS"):
        """`name` tells the suite's state directory, log and cgroup apart; `keep_logs` is the suite's
        environment variable that keeps the daemon's log after the run."""
        self.keep_logs = keep_logs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tempfile.mkdtemp(prefix=f"sandlot-{name}-")
        self.cgroup = None
        preexec = None
        if pure_cgroup_v2():
            with open("/proc/self/cgroup") as f:
                own = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
            parent = pathlib.Path("/sys/fs/cgroup" + own).parent
            self.cgroup = parent / f"sandlot-{name}-test-{os.getpid()}-{self.port}"
            self.cgroup.mkdir()
            procs = str(self.cgroup / "cgroup.procs")

            def preexec():
                with open(procs, "w") as f:
                    f.write(str(os.getpid()))

        self.log_path = pathlib.Path(self.state + ".log")
        self.log = open(self.log_path, "wb")
        cmd = [
            binary(), "serve",
            "--listen", f"127.0.0.1:{self.port}",
            "--state-dir", self.state,
            "--layers-volume-gb", "16",
            "--test-loopback-only",
            *extra_args,
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec)
        deadline = time.time() + 60
        while True:
            if self.proc.poll() is not None:
                self._cleanup()
                raise RuntimeError(f"sandlot serve exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                break
            except OSError:
                if time.time() > deadline:
                    tail = self.log_tail()
                    self.stop()
                    raise RuntimeError(f"sandlot serve did not answer in 60 s:\n{tail}")
                time.sleep(0.1)
        self.admin_key = (pathlib.Path(self.state) / "admin.key").read_text().strip()

    def log_tail(self, size: int = 4000) -> str:
        """The end of the daemon's log."""
        try:
            return self.log_path.read_text(errors="replace")[-size:]
        except OSError:
            return ""

    def call(self, method, path, body=None, key=None, headers=None, timeout=60):
        """A raw call to the server: (status, body bytes, response headers). `key` defaults to none."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def native(self, method, path, body=None, key=None):
        """A call to sandlot's own API that must succeed (`urllib.error.HTTPError` otherwise), answered
        as parsed JSON (None when empty); the admin key unless `key` is given."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {key or self.admin_key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read()
        return json.loads(text) if text else None

    def tenant_key(self, tenant: str) -> str:
        """A new API key of `tenant`, made with the admin key over plain HTTP (not through any SDK
        under test)."""
        return self.native("POST", "/v1/keys", {"tenant": tenant})["key"]

    def stop(self):
        """Stops the daemon (SIGTERM, then SIGKILL after a minute) and removes what it left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._cleanup()

    def _cleanup(self):
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        if not (os.environ.get(self.keep_logs) or os.environ.get("SANDLOT_KEEP_LOGS")):
            self.log_path.unlink(missing_ok=True)
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)
