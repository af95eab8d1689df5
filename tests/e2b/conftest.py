"""The E2B-compatibility suite's harness: one real `sandlot serve` per test session (started by
tests/support/sandlot_server.py, the suites' one launcher), and the environment the official E2B SDKs
read pointed at it (docs/TESTING.md, "The E2B suite").
"""

import contextlib
import json
import os
import pathlib
import socket
import subprocess
import sys
import threading

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer, binary, free_port  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve` and the keys to reach it, sandlot's and E2B's (E2B_KEEP_LOGS=1 keeps
    its log)."""

    def __init__(self, extra_args=()):
        super().__init__("e2b", extra_args, keep_logs="E2B_KEEP_LOGS")
        self.e2b_key = e2b_key(self.admin_key)

    def exec(self, e2b_id: str, shell: str, key=None) -> dict:
        """Runs `shell` in E2B sandbox `e2b_id` through sandlot's own API (the E2B surface is what is
        under test; this is the independent way in). Answers the ExecResult."""
        return self.native("POST", f"/v1/sandboxes/sb_{e2b_id}/exec", {"shell": shell}, key=key)

    def e2b(self, method, path, body=None, key=None):
        """A raw call to the E2B control plane: (status, parsed JSON body or None, headers)."""
        status, text, headers = self.call(method, "/e2b" + path, body, headers={"X-API-Key": key or self.e2b_key})
        return status, (json.loads(text) if text else None), headers

    def tenant_key(self, tenant: str) -> str:
        """A new E2B-format API key of `tenant`."""
        return e2b_key(super().tenant_key(tenant))


def e2b_key(sandlot_key: str) -> str:
    """The E2B-format key of a sandlot key: `e2b_` and its bytes in hex (what `sandlot e2b env` prints)."""
    return "e2b_" + sandlot_key.encode().hex()


_E2B_ENV = ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DOMAIN")


@contextlib.contextmanager
def _sdk_env(s: Server):
    """Points the SDKs' environment at `s` while the block runs, then restores what was there."""
    saved = {k: os.environ.get(k) for k in _E2B_ENV}
    os.environ["E2B_API_URL"] = s.url + "/e2b"
    os.environ["E2B_SANDBOX_URL"] = s.url
    os.environ["E2B_API_KEY"] = s.e2b_key
    os.environ["E2B_DOMAIN"] = "sandlot.test"
    try:
        yield s
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        with _sdk_env(s):
            yield s
    finally:
        s.stop()


#: Names the `net_server` resolves to 127.0.0.1 for its sandboxes (the tests' loopback "internet").
NET_NAMES = ("api.e2b.test", "other.e2b.test")


@pytest.fixture(scope="module")
def net_server():
    """A server whose sandboxes reach NET_NAMES on loopback (`--resolve`; `--test-loopback-only`
    keeps every other dial off the network), with the SDKs pointed at it for the module."""
    args = [a for name in NET_NAMES for a in ("--resolve", f"{name}=127.0.0.1")]
    s = Server(extra_args=args)
    try:
        with _sdk_env(s):
            yield s
    finally:
        s.stop()


#: The E2B domain of `tls_server`; the test process reaches `*.DOMAIN` through `LoopbackConnectProxy`.
TLS_DOMAIN = "e2b.test"


class LoopbackConnectProxy:
    """An HTTP CONNECT proxy of the test process that sends every `*.TLS_DOMAIN` tunnel to the TLS
    listener on loopback and refuses anything else: the test harness's stand-in for DNS that points
    `*.TLS_DOMAIN` at the server (the SDKs take a proxy as an ordinary option; nothing in them changes).
    TLS stays end to end, so the client checks the server's certificate for the name it asked for."""

    def __init__(self, target_port: int):
        self.target_port = target_port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.tunnels = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, conn):
        conn.settimeout(30)
        try:
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 16384:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            method, target = head.split(b"\r\n", 1)[0].decode().split(" ")[:2]
            host = target.rsplit(":", 1)[0].lower()
            if method != "CONNECT" or not (host == TLS_DOMAIN or host.endswith("." + TLS_DOMAIN)):
                conn.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
                return
            self.tunnels.append(target)
            up = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            rest = head.split(b"\r\n\r\n", 1)[1]
            if rest:
                up.sendall(rest)

            def pipe(a, b):
                try:
                    while True:
                        d = a.recv(65536)
                        if not d:
                            break
                        b.sendall(d)
                except OSError:
                    pass
                finally:
                    for s in (a, b):
                        try:
                            s.shutdown(socket.SHUT_RDWR)
                        except OSError:
                            pass

            t = threading.Thread(target=pipe, args=(up, conn), daemon=True)
            t.start()
            pipe(conn, up)
            t.join(30)
            up.close()
        except (OSError, ValueError):
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A server with `--e2b-domain TLS_DOMAIN` and a TLS listener whose certificate its own CA
    issued; the SDK environment is what `sandlot e2b env` prints for it (E2B_DOMAIN with the TLS
    port, the CA bundle in SSL_CERT_FILE), the control plane over TLS too. `.proxy` is the test
    process's way to `*.TLS_DOMAIN` (pass it as the SDKs' `proxy` option)."""
    tls_port = free_port()
    s = Server(extra_args=["--e2b-domain", TLS_DOMAIN, "--e2b-tls-listen", f"127.0.0.1:{tls_port}"])
    s.tls_port = tls_port
    proxy = LoopbackConnectProxy(tls_port)
    s.proxy = proxy.url
    s.proxy_tunnels = proxy.tunnels
    env_keys = (*_E2B_ENV, "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS")
    saved = {k: os.environ.get(k) for k in env_keys}
    try:
        ca_dir = tmp_path_factory.mktemp("e2b-ca")
        out = subprocess.run(
            [binary(), "e2b", "env", "--url", s.url, "--api-key", s.admin_key, "--ca-dir", str(ca_dir)],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout
        s.env_lines = out
        s.env = {}
        for line in out.splitlines():
            if line.startswith("export "):
                k, v = line[len("export "):].split("=", 1)
                s.env[k] = v.strip("'")
        for k in env_keys:
            os.environ.pop(k, None)
        os.environ.update(s.env)
        # No E2B_API_URL: the control plane is `https://api.{TLS_DOMAIN}:{tls_port}/`, at its root.
        assert "E2B_API_URL" not in s.env, s.env
        yield s
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        proxy.close()
        s.stop()
