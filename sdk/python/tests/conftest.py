"""The Python SDK suite's harness: one real `sandlot serve` per test session, tenant keys made with its
admin key, and the SDK pointed at it.

The server is started by tests/support/sandlot_server.py, the suites' one launcher (SANDLOT_BIN names
the binary; its btrfs layers volume serves snapshots, forks and persistent sandboxes; SDK_PY_KEEP_LOGS=1
keeps its log).
"""

import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
import uuid

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tests" / "support"))
from sandlot_server import SandlotServer, free_port  # noqa: E402  (the one launcher of the suites)


class Server(SandlotServer):
    """A running `sandlot serve`: its URL, its admin key, and tenant keys made on demand; it may pull
    from the suite's own registry (the `registry` fixture) on `registry_port`, plain HTTP."""

    def __init__(self):
        self.registry_port = free_port()
        super().__init__(
            "sdk-py", ["--insecure-registry", f"127.0.0.1:{self.registry_port}"], keep_logs="SDK_PY_KEEP_LOGS"
        )


@pytest.fixture(scope="session")
def server():
    s = Server()
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="session")
def key(server):
    """The key of the suite's main tenant."""
    return server.tenant_key("sdk-py")


@pytest.fixture
def env(server, key, monkeypatch):
    """SANDLOT_URL / SANDLOT_API_KEY pointing at the server, as a user's shell would have them."""
    monkeypatch.setenv("SANDLOT_URL", server.url)
    monkeypatch.setenv("SANDLOT_API_KEY", key)
    return server


@pytest.fixture
def client(server, key):
    import sandlot

    with sandlot.Client(server.url, key) as c:
        yield c


@pytest.fixture
def sbx(client):
    """A fresh sandbox of the main tenant, deleted after the test."""
    import sandlot

    with sandlot.Sandbox.create(client=client, timeout=600) as s:
        yield s


def unique(prefix: str) -> str:
    """A name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def busybox_rootfs() -> bytes:
    """A root file system tar: Debian's static busybox as /bin/busybox and /bin/sh, a passwd naming
    root. Small, and enough for a Dockerfile's RUN (as the e2e build tests use it)."""
    busybox = pathlib.Path("/bin/busybox").read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:

        def add(name, data=None, mode=0o755, kind=tarfile.REGTYPE, link=""):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime, info.linkname = kind, mode, 1_700_000_000, link
            info.size = len(data) if data is not None else 0
            tar.addfile(info, io.BytesIO(data) if data is not None else None)

        for d in ("bin", "etc", "root", "tmp"):
            add(d, kind=tarfile.DIRTYPE)
        add("bin/busybox", busybox)
        add("bin/sh", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        add("bin/cat", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        add("bin/echo", kind=tarfile.SYMTYPE, link="busybox", mode=0o777)
        add("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", mode=0o644)
    return buf.getvalue()


REGISTRY_BINARY = "/usr/bin/docker-registry"


class Registry:
    """Debian's `docker-registry` (the CNCF distribution registry) on loopback, plain HTTP, with one
    image pushed through its API: `sdk/busybox:1`, the busybox root file system as one gzip layer."""

    def __init__(self, port: int):
        if not os.path.exists(REGISTRY_BINARY):
            raise RuntimeError(f"{REGISTRY_BINARY} is missing: apt-get install docker-registry (scripts/deps.sh does)")
        self.dir = tempfile.mkdtemp(prefix="sandlot-sdk-py-registry-")
        self.base = f"http://127.0.0.1:{port}"
        self.log_path = pathlib.Path(self.dir) / "registry.log"
        config = pathlib.Path(self.dir) / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {self.dir}/data\nhttp:\n  addr: 127.0.0.1:{port}\n  secret: sandlot-sdk-test\n"
        )
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen([REGISTRY_BINARY, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        try:
            self._wait_ready()
            self._push()
        except BaseException:
            self.close()
            raise
        self.ref = f"127.0.0.1:{port}/sdk/busybox:1"

    def _wait_ready(self):
        deadline = time.time() + 20
        while True:
            try:
                urllib.request.urlopen(self.base + "/v2/", timeout=1).read()
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError(f"docker-registry did not start:\n{self.log_path.read_text()[-4000:]}")
                time.sleep(0.05)

    def _request(self, method, url, body=b"", kind="application/octet-stream"):
        req = urllib.request.Request(url if url.startswith("http") else self.base + url, data=body, method=method)
        req.add_header("Content-Type", kind)
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.headers

    def _push(self):
        layer_tar = busybox_rootfs()
        layer = gzip.compress(layer_tar, mtime=0)
        config = json.dumps({
            "architecture": "amd64", "os": "linux",
            "config": {"Env": ["PATH=/bin", "FROM_IMAGE=yes"], "WorkingDir": "/etc", "Cmd": ["sh"]},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
        }).encode()  # fmt: skip
        digest = {b: "sha256:" + hashlib.sha256(b).hexdigest() for b in (layer, config)}
        for blob in (layer, config):
            # A monolithic upload: start a session, then PUT the whole blob with its digest.
            location = self._request("POST", "/v2/sdk/busybox/blobs/uploads/")["Location"]
            sep = "&" if "?" in location else "?"
            self._request("PUT", f"{location}{sep}digest={digest[blob]}", blob)
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest[config], "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": digest[layer], "size": len(layer)}],
        }).encode()  # fmt: skip
        self._request("PUT", "/v2/sdk/busybox/manifests/1", manifest, "application/vnd.oci.image.manifest.v1+json")
        self.manifest_digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        self.layer_digest = digest[layer]

    @property
    def requests(self):
        """The paths of the GET requests the registry logged, in order."""
        paths = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            # The access log's request line: `"GET /v2/... HTTP/1.1"`.
            _, sep, rest = line.partition('"GET ')
            if sep:
                paths.append(rest.split(" ", 1)[0])
        return paths

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def registry(server):
    r = Registry(server.registry_port)
    try:
        yield r
    finally:
        r.close()
