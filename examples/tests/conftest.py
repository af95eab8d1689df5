"""The examples suite's harness: one real `sandlot serve` per test session, a fresh tenant (its own key)
per test, and the environment an example reads (SANDLOT_URL / SANDLOT_API_KEY) pointed at it.

The server is started by tests/support/sandlot_server.py, the suites' one launcher (SANDLOT_BIN names
the binary; EXAMPLES_KEEP_LOGS=1 keeps its log). No test reaches a model (see below).
"""

import os
import pathlib
import socket
import sys
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))  # the examples are scripts, imported by file name
# No test reaches a model or a tracing service: no model key in this process, the Agents SDK's trace
# export off (it reads the variable once, on first use) and LangSmith's tracing off.
for _var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2"):
    os.environ.pop(_var, None)
os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve`: its URL, its admin key, and tenant keys made on demand."""

    def __init__(self):
        super().__init__("examples", keep_logs="EXAMPLES_KEEP_LOGS")


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
