"""The metrics suite's harness: one real `sandlot serve` per session, sampling every second, with a
scrape token (docs/TESTING.md, "The metrics suite").

The server is started by tests/support/sandlot_server.py, the suites' one launcher (SANDLOT_BIN names
the binary).
"""

import os
import pathlib
import secrets
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve`, sampling every second, its admin key and its scrape token
    (METRICS_KEEP_LOGS=1 keeps its log)."""

    def __init__(self):
        self.token = secrets.token_hex(24)
        self.token_file = pathlib.Path(tempfile.mkstemp(prefix="sandlot-metrics-", suffix=".token")[1])
        self.token_file.write_text(self.token + "\n")
        self.token_file.chmod(0o600)
        args = ["--metrics-interval-s", "1", "--metrics-token-file", str(self.token_file)]
        super().__init__("metrics", args, keep_logs="METRICS_KEEP_LOGS")

    def call(self, method, path, body=None, key=None, headers=None):
        """A raw call: (status, body bytes, content type)."""
        status, text, got = super().call(method, path, body, key=key, headers=headers)
        return status, text, got.get("Content-Type", "")

    def stop(self):
        super().stop()
        self.token_file.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        yield s
    finally:
        s.stop()
