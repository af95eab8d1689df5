"""Pulled images checked against skopeo and umoci (docs/IMAGES.md, "Pulls checked against umoci").

Each case is an OCI image made here, layer by layer, over the busybox base of walk.make_base: the
entries an unpacker gets wrong (whiteouts, opaque directories, hard links, long names, set-id modes
and owners, links of every kind, a file that becomes a directory and back, xattrs, FIFOs and devices).
It is pushed to Debian's `docker-registry` on loopback with skopeo, then pulled twice: by a real
`sandlot serve` (`sandlot image pull`), and by `skopeo copy` + `umoci unpack` as root, the oracle. Both
roots are walked by the image's own busybox (in a sandbox; chrooted into umoci's bundle), their
extended attributes read from the host (the sandbox's root through a process of it, /proc/PID/root),
and compared entry by entry; what differs must be listed in pull-differences.txt and explained in docs/IMAGES.md.
"""

import gzip
import hashlib
import io
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2b"))
from conftest import Server  # noqa: E402  (the E2B suite's server harness: one real `sandlot serve`)

from walk import WALK, check, compare, expected_differences, make_base, parse_walk, server_binary, with_xattrs, xattrs  # noqa: E402

DIFFERENCES = HERE / "pull-differences.txt"


def entry(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link="", uid=0, gid=0, pax=None):
    return dict(name=name, kind=kind, data=data, mode=mode, link=link, uid=uid, gid=gid, pax=pax or {})


def layer(entries) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for e in entries:
            info = tarfile.TarInfo(e["name"])
            info.type, info.mode, info.linkname = e["kind"], e["mode"], e["link"]
            info.uid, info.gid, info.mtime, info.pax_headers = e["uid"], e["gid"], 1700000000, e["pax"]
            if e["kind"] in (tarfile.CHRTYPE, tarfile.BLKTYPE):
                info.devmajor, info.devminor = 1, 3
            info.size = len(e["data"]) if e["kind"] == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(e["data"]) if e["kind"] == tarfile.REGTYPE else None)
    return buf.getvalue()


DIR, SYM, LNK = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE
CASES = {
    "base": [],
    "whiteouts": [
        [entry("a", DIR, mode=0o755), entry("a/f", data=b"f"), entry("a/g", data=b"g"), entry("b", DIR, mode=0o755),
         entry("b/x", data=b"x"), entry("c", data=b"c")],
        [entry("a/.wh.f"), entry(".wh.b"), entry(".wh.c"), entry("etc/.wh.motd")],
    ],
    "opaque-directory": [
        [entry("d", DIR, mode=0o755), entry("d/x", data=b"x"), entry("d/sub", DIR, mode=0o755), entry("d/sub/y", data=b"y")],
        [entry("d", DIR, mode=0o750), entry("d/.wh..wh..opq"), entry("d/z", data=b"z")],
    ],
    "hard-links": [
        [entry("h", DIR, mode=0o755), entry("h/one", data=b"same"), entry("h/two", LNK, link="h/one"),
         entry("h/sub", DIR, mode=0o755), entry("h/sub/three", LNK, link="h/one")],
    ],
    "long-names": [
        [entry("n" * 255, data=b"long"), entry(("d" * 60 + "/") * 3 + "f" * 200, data=b"deep"),
         entry("ünïcødé-名前", data=b"utf8")],
    ],
    "modes-and-owners": [
        [entry("m", DIR, mode=0o700, uid=1234, gid=5678), entry("m/setuid", data=b"s", mode=0o4755),
         entry("m/setgid", data=b"g", mode=0o2755), entry("m/private", data=b"p", mode=0o600, uid=1234, gid=5678),
         entry("m/none", data=b"n", mode=0o000), entry("sticky", DIR, mode=0o1777), entry("nobody", data=b"x", uid=65534, gid=65534)],
    ],
    "links": [
        [entry("l", DIR, mode=0o755), entry("l/target", data=b"t"), entry("l/rel", SYM, mode=0o777, link="target"),
         entry("l/abs", SYM, mode=0o777, link="/etc/passwd"), entry("l/dir", SYM, mode=0o777, link="/usr/share"),
         entry("l/dangling", SYM, mode=0o777, link="nowhere"), entry("l/chain", SYM, mode=0o777, link="rel"),
         entry("l/up", SYM, mode=0o777, link="../../../../etc/hostname")],
    ],
    "replaced-kinds": [
        [entry("p", DIR, mode=0o755), entry("p/inside", data=b"i"), entry("q", data=b"q"), entry("r", SYM, mode=0o777, link="p")],
        [entry("p", data=b"now a file"), entry("q", DIR, mode=0o755), entry("q/inside", data=b"now a dir"),
         entry("r", data=b"was a link")],
    ],
    "xattrs": [
        [entry("x", data=b"x", pax={"SCHILY.xattr.user.note": "hello"}),
         entry("d", DIR, mode=0o755, pax={"SCHILY.xattr.user.dir": "yes"}),
         entry("d/two", data=b"2", pax={"SCHILY.xattr.user.a": "1", "SCHILY.xattr.user.b": "2"}),
         entry("trusted", data=b"t", pax={"SCHILY.xattr.trusted.note": "host-only"})],
        # A file a later layer replaces takes the new entry's xattrs only.
        [entry("d/two", data=b"2 again", pax={"SCHILY.xattr.user.c": "3"})],
    ],
    "fifo-and-device": [
        [entry("fifo", tarfile.FIFOTYPE, mode=0o644), entry("null-device", tarfile.CHRTYPE, mode=0o666)],
    ],
}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def oci_layout(dir: pathlib.Path, layers: list):
    """An OCI image layout at `dir` with `layers` (tars), gzip-compressed, tagged `v1`."""
    blobs = dir / "blobs" / "sha256"
    blobs.mkdir(parents=True)

    def put(data: bytes) -> dict:
        d = sha(data)
        (blobs / d.split(":")[1]).write_bytes(data)
        return {"digest": d, "size": len(data)}

    diff_ids, descs = [], []
    for tar in layers:
        diff_ids.append(sha(tar))
        descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                      **put(gzip.compress(tar, mtime=0))})
    config = {"architecture": "amd64", "os": "linux", "config": {"Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cdesc = {"mediaType": "application/vnd.oci.image.config.v1+json", **put(json.dumps(config).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": cdesc, "layers": descs}
    mdesc = {"mediaType": "application/vnd.oci.image.manifest.v1+json", **put(json.dumps(manifest).encode()),
             "annotations": {"org.opencontainers.image.ref.name": "v1"}}
    (dir / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [mdesc]}))
    (dir / "oci-layout").write_text('{"imageLayoutVersion": "1.0.0"}')


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def world():
    for tool in ("skopeo", "umoci", "docker-registry"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is the reference here: apt-get install {tool}")
    work = pathlib.Path(tempfile.mkdtemp(prefix="sandlot-ref-pulls-"))
    registry = server = None
    try:
        port = free_port()
        (work / "registry.yml").write_text(
            f"version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {work}/registry\nhttp:\n  addr: 127.0.0.1:{port}\n")
        registry = subprocess.Popen(["docker-registry", "serve", str(work / "registry.yml")],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        host = f"127.0.0.1:{port}"
        for _ in range(100):
            try:
                urllib.request.urlopen(f"http://{host}/v2/", timeout=1).read()
                break
            except OSError:
                time.sleep(0.1)
        base = work / "rootfs.tar"
        make_base(base)
        base_layer = base.read_bytes()
        for case, layers in CASES.items():
            oci_layout(work / "layouts" / case, [base_layer, *(layer(entries) for entries in layers)])
            subprocess.run(["skopeo", "copy", "--quiet", "--dest-tls-verify=false", f"oci:{work}/layouts/{case}:v1",
                            f"docker://{host}/ref/{case}:v1"], check=True, capture_output=True)
        server = Server(extra_args=["--insecure-registry", host])
        env = {**os.environ, "SANDLOT_URL": server.url, "SANDLOT_API_KEY": server.admin_key}
        yield {"work": work, "host": host, "env": env}
    finally:
        if server is not None:
            server.stop()
        if registry is not None:
            registry.kill()
            registry.wait()
        shutil.rmtree(work, ignore_errors=True)


def pulled_by_umoci(world, case: str) -> dict:
    work = world["work"]
    oci, bundle = work / "umoci" / case, work / "bundles" / case
    oci.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{world['host']}/ref/{case}:v1",
                    f"oci:{oci}:v1"], check=True, capture_output=True)
    subprocess.run(["umoci", "unpack", "--image", f"{oci}:v1", str(bundle)], check=True, capture_output=True)
    r = subprocess.run(["chroot", str(bundle / "rootfs"), "/bin/sh", "-c", WALK], capture_output=True, text=True,
                       check=True)
    return with_xattrs(parse_walk(r.stdout), xattrs(str(bundle / "rootfs")))


def pid_of(argv: list) -> int:
    """The host pid of the one process whose command line is `argv`."""
    want = b"\0".join(a.encode() for a in argv) + b"\0"
    for _ in range(100):
        for proc in pathlib.Path("/proc").iterdir():
            try:
                if proc.name.isdigit() and (proc / "cmdline").read_bytes() == want:
                    return int(proc.name)
            except OSError:
                continue
        time.sleep(0.1)
    raise AssertionError(f"no process runs {argv}")


def pulled_by_sandlot(world, case: str) -> dict:
    ref, env, binary = f"{world['host']}/ref/{case}:v1", world["env"], server_binary()
    r = subprocess.run([binary, "image", "pull", ref], env=env, capture_output=True, text=True)
    assert r.returncode == 0, f"sandlot image pull {ref} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    sid = subprocess.run([binary, "sandbox", "create", "--image", ref], env=env, capture_output=True, text=True,
                         check=True).stdout.strip()
    try:
        r = subprocess.run([binary, "sandbox", "exec", sid, "--user", "root", "--shell", "--", WALK], env=env,
                           capture_output=True, text=True, check=True)
        tree = parse_walk(r.stdout)
        # A process of the sandbox whose root the host can read its xattrs through (busybox has no
        # getfattr): its sleep's argument makes its command line unique on this host.
        holder = ["sleep", f"{4000 + os.getpid() % 1000}.{len(case)}{sum(map(ord, case))}"]
        subprocess.run([binary, "sandbox", "exec", "-d", sid, "--", *holder], env=env, capture_output=True, check=True)
        return with_xattrs(tree, xattrs(f"/proc/{pid_of(holder)}/root"))
    finally:
        subprocess.run([binary, "sandbox", "rm", sid], env=env, capture_output=True)


@pytest.fixture(scope="session")
def base_differences(world):
    """How the base alone differs (what a sandbox adds): taken out of every case."""
    return compare(pulled_by_sandlot(world, "base"), pulled_by_umoci(world, "base"))


@pytest.mark.parametrize("case", sorted(CASES))
def test_pull_matches_umoci(world, base_differences, case):
    if case == "base":
        found = base_differences
    else:
        found = compare(pulled_by_sandlot(world, case), pulled_by_umoci(world, case)) - base_differences
    check(case, found, expected_differences(DIFFERENCES).get(case, set()), DIFFERENCES)
