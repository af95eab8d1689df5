"""The examples suite's harness: one real `sandlot serve` per test session, a fresh tenant (its own key)
per test, and the environment an example reads (SANDLOT_URL / SANDLOT_API_KEY) pointed at it.

SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). The server listens on
loopback only (`--test-loopback-only`); its state is a temporary directory removed at the end. On a pure
cgroup v2 host the daemon gets a cgroup of its own beside this process's (a daemon refuses to share one),
removed after. No test reaches a model (see below).
EXAMPLES_KEEP_LOGS=1 keeps the server's log to read a failure.
"""

import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))  # the examples are scripts, imported by file name
# No test reaches a model or a tracing service: no model key in this process, the Agents SDK's trace
# export off (it reads the variable once, on first use) and LangSmith's tracing off.
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
    os.environ.pop(_var, None)
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"


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
    """A running `sandlot serve`: its URL, its admin key, and tenant keys made on demand."""

    def __init__(self):
        binary = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no sandlot binary at {binary}: run `cargo build -p sandlot` or set SANDLOT_BIN")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tempfile.mkdtemp(prefix="sandlot-examples-")
        self.cgroup = None
        preexec = None
        if _pure_cgroup_v2():
            with open("/proc/self/cgroup") as f:
                own = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
            parent = pathlib.Path("/sys/fs/cgroup" + own).parent
            self.cgroup = parent / f"sandlot-examples-test-{os.getpid()}-{self.port}"
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
        ]  # fmt: skip
        try:
            self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, preexec_fn=preexec)
            deadline = time.time() + 60
            while True:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"sandlot serve exited {self.proc.returncode}:\n{self._log_tail()}")
                try:
                    urllib.request.urlopen(self.url + "/healthz", timeout=1).read()
                    break
                except OSError:
                    if time.time() > deadline:
                        raise RuntimeError(f"sandlot serve did not answer in 60 s:\n{self._log_tail()}")
                    time.sleep(0.1)
            self.admin_key = (pathlib.Path(self.state) / "admin.key").read_text().strip()
        except BaseException:
            self.stop()
            raise

    def _log_tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def tenant_key(self, tenant: str) -> str:
        """A new API key of `tenant`, made with the admin key over plain HTTP."""
        req = urllib.request.Request(
            self.url + "/v1/keys", data=json.dumps({"tenant": tenant}).encode(), method="POST"
        )
        req.add_header("Authorization", f"Bearer {self.admin_key}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())["key"]

    def stop(self):
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.log.close()
        shutil.rmtree(self.state, ignore_errors=True)
        if not os.environ.get("EXAMPLES_KEEP_LOGS"):
            self.log_path.unlink(missing_ok=True)
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)


@pytest.fixture(autouse=True, scope="session")
def loopback_only():
    """Refuses, in this process, any connection that is not to loopback: the suite's promise that no
    test calls a model or anything else off this machine, kept rather than hoped."""
    original = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in ("127.0.0.1", "::1", "localhost"):
            raise ConnectionRefusedError(f"examples tests are loopback only, refused {address!r}")
        return original(self, address)

    socket.socket.connect = connect
    try:
        yield
    finally:
        socket.socket.connect = original


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture
def env(server, monkeypatch):
    """A fresh tenant's SANDLOT_URL / SANDLOT_API_KEY, as a user's shell would have them. Answers a
    `sandlot.Client` of that tenant, to check what the example left behind."""
    import sandlot

    key = server.tenant_key(f"examples-{uuid.uuid4().hex[:10]}")
    monkeypatch.setenv("SANDLOT_URL", server.url)
    monkeypatch.setenv("SANDLOT_API_KEY", key)
    with sandlot.Client(server.url, key) as client:
        yield client


@pytest.fixture
def sandbox_state(env):
    """The state the server reports for a sandbox id of the test's tenant (a deleted sandbox's record
    still answers, with state `deleted`)."""
    import sandlot

    return lambda sandbox_id: sandlot.SandboxInfo.from_json(env.call("GET", f"/v1/sandboxes/{sandbox_id}")).state
