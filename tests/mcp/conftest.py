"""The MCP suite's harness: one real `sandlot serve` per test session, tenant keys, and MCP sessions
over both transports, stdio (`sandlot mcp`) and streamable HTTP (`/mcp`), opened with the official
MCP Python client (docs/TESTING.md, "The MCP suite").

The server is started by tests/support/sandlot_server.py, the suites' one launcher (SANDLOT_BIN names
the binary).
"""

import contextlib
import os
import pathlib
import sys
import time
import urllib.parse

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = pathlib.Path(__file__).resolve().parents[2]
BINARY = os.environ.get("SANDLOT_BIN") or str(REPO / "target" / "debug" / "sandlot")
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve` and the keys to reach it (MCP_KEEP_LOGS=1 keeps its log)."""

    def __init__(self, extra_args=()):
        super().__init__("mcp", extra_args, keep_logs="MCP_KEEP_LOGS")

    def status(self, method, path, body=None, key=None, headers=None):
        """A raw call: (status, body bytes)."""
        status, text, _ = self.call(method, path, body, key=key, headers=headers)
        return status, text

    def read(self, sandbox_id, path, key=None) -> bytes:
        """A file's bytes through the native API (`GET /v1/sandboxes/{id}/files?path=`)."""
        q = urllib.parse.urlencode({"path": path})
        status, body = self.status("GET", f"/v1/sandboxes/{sandbox_id}/files?{q}", key=key or self.admin_key)
        assert status == 200, (status, body)
        return body

    def wait_state(self, sandbox_id, state, key, timeout=30.0) -> dict:
        """The sandbox's info once its state is `state` (fails after `timeout` seconds)."""
        deadline = time.time() + timeout
        while True:
            info = self.native("GET", f"/v1/sandboxes/{sandbox_id}", key=key)
            if info["state"] == state or time.time() > deadline:
                assert info["state"] == state, info
                return info
            time.sleep(0.2)


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
