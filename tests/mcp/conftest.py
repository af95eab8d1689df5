"""The MCP suite's harness: one real `sandlot serve` per test session, tenant keys, and MCP sessions
over both transports, stdio (`sandlot mcp`) and streamable HTTP (`/mcp`), opened with the official
MCP Python client (docs/TESTING.md, "The MCP suite").

SANDLOT_BIN names the binary (default: target/debug/sandlot of this checkout). The server listens on
loopback only; its state is a temporary directory removed at the end. On a pure cgroup v2 host the
daemon gets a cgroup of its own beside this process's (a daemon refuses to share one).
"""

import contextlib
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
import urllib.parse
import urllib.request

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")


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
    """A running `sandlot serve` and the keys to reach it."""

    def __init__(self, extra_args=()):
        binary = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"no sandlot binary at {binary}: run `cargo build -p sandlot` or set SANDLOT_BIN")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.state = tempfile.mkdtemp(prefix="sandlot-mcp-")
        self.cgroup = None
        preexec = None
        if _pure_cgroup_v2():
            with open("/proc/self/cgroup") as f:
                own = next(l.split("::", 1)[1].strip() for l in f if l.startswith("0::"))
            parent = pathlib.Path("/sys/fs/cgroup" + own).parent
            self.cgroup = parent / f"sandlot-mcp-test-{os.getpid()}-{self.port}"
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

    def native(self, method, path, body=None, key=None):
        """A call to sandlot's own API, answered as parsed JSON (None when empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {key or self.admin_key}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=60) as r:
            text = r.read()
        return json.loads(text) if text else None

    def status(self, method, path, body=None, key=None, headers=None):
        """A raw call: (status, body bytes)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if key:
            req.add_header("Authorization", f"Bearer {key}")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def read(self, sandbox_id, path, key=None) -> bytes:
        """A file's bytes through the native API (`GET /v1/sandboxes/{id}/files?path=`)."""
        q = urllib.parse.urlencode({"path": path})
        status, body = self.status("GET", f"/v1/sandboxes/{sandbox_id}/files?{q}", key=key or self.admin_key)
        assert status == 200, (status, body)
        return body

    def tenant_key(self, tenant: str) -> str:
        """A new API key of `tenant`."""
        return self.native("POST", "/v1/keys", {"tenant": tenant})["key"]

    def wait_state(self, sandbox_id, state, key, timeout=30.0) -> dict:
        """The sandbox's info once its state is `state` (fails after `timeout` seconds)."""
        deadline = time.time() + timeout
        while True:
            info = self.native("GET", f"/v1/sandboxes/{sandbox_id}", key=key)
            if info["state"] == state or time.time() > deadline:
                assert info["state"] == state, info
                return info
            time.sleep(0.2)

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
        # The daemon's log goes with its state unless asked for (MCP_KEEP_LOGS=1, to read a failure).
        if not os.environ.get("MCP_KEEP_LOGS"):
            self.log_path.unlink(missing_ok=True)
        if self.cgroup is not None:
            for _ in range(50):
                try:
                    self.cgroup.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)



@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def alice(server):
    """A key of tenant `alice`."""
    return server.tenant_key("alice")


@pytest.fixture(scope="session")
def bob(server):
    """A key of tenant `bob`."""
    return server.tenant_key("bob")


class Mcp:
    """An initialised MCP session and, on HTTP, its session id."""

    def __init__(self, session: ClientSession, session_id=None):
        self.session = session
        self.session_id = session_id

    async def call(self, tool: str, **args):
        """Calls `tool`; answers (is_error, text)."""
        r = await self.session.call_tool(tool, args)
        text = "\n".join(c.text for c in r.content if c.type == "text")
        return bool(r.isError), text

    async def ok(self, tool: str, **args) -> str:
        """Calls `tool` and answers its text, failing the test on an error result."""
        is_error, text = await self.call(tool, **args)
        assert not is_error, f"{tool} failed: {text}"
        return text


@contextlib.asynccontextmanager
async def open_mcp(server, transport: str, key: str):
    """An MCP session of `key` with `server` over `transport` (`stdio` or `http`); it ends (stdin
    closed, or DELETE) when the block does."""
    if transport == "stdio":
        env = dict(os.environ, SANDLOT_URL=server.url, SANDLOT_API_KEY=key)
        params = StdioServerParameters(command=BINARY, args=["mcp"], env=env)
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield Mcp(session)
    else:
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60, read=300)) as http:
            async with streamable_http_client(server.url + "/mcp", http_client=http) as (read, write, session_id):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield Mcp(session, session_id())


@pytest.fixture(params=["stdio", "http"])
def transport(request):
    return request.param
