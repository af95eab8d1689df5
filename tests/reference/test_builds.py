"""Dockerfile builds checked against Debian's buildah (docs/TESTING.md, "The reference suite").

Every case of corpus.py is built twice from the same local base image: by a real `sandlot serve` and by
`buildah bud` (vfs storage, as root, chroot isolation, no network). Both root filesystems are walked by
the same command, the image's own busybox find and stat (in a sandbox of the sandlot image; chrooted
into buildah's mounted container), and compared entry by entry: type, mode, owner, size, link count and content hash of
files, link targets. What differs must be listed in build-differences.txt (each line a documented choice
of docs/IMAGES.md); a difference not listed fails the case, and so does a listed one that is gone.

The base image is a small root filesystem made here (make_base: Debian's static busybox, merged /usr):
buildah makes it an image (`from scratch`, `add`, `commit`) and sandlot imports the OCI archive buildah
pushes, so both builders start from the same layer bytes. Small, because buildah's vfs storage copies
the whole root for every container and layer: a Debian base made the corpus take an hour.
"""

import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "e2b"))
from conftest import Server  # noqa: E402  (the E2B suite's server harness: one real `sandlot serve`)

from corpus import CASES, Dir, File, Hard, Link  # noqa: E402
from walk import WALK, check, compare, expected_differences, make_base, parse_walk, server_binary  # noqa: E402

DIFFERENCES = HERE / "build-differences.txt"


def buildah(store, *args, **kw):
    cmd = ["buildah", "--storage-driver", "vfs", "--root", f"{store}/root", "--runroot", f"{store}/run", *map(str, args)]
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def write_context(dir: pathlib.Path, dockerfile: str, files: dict):
    dir.mkdir(parents=True)
    (dir / "Dockerfile").write_text(dockerfile)
    for name, spec in sorted(files.items(), key=lambda kv: isinstance(kv[1], Hard)):
        p = dir / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(spec, str):
            spec = File(spec)
        if isinstance(spec, File):
            p.write_text(spec.text)
            os.chmod(p, spec.mode)
        elif isinstance(spec, Link):
            os.symlink(spec.target, p)
        elif isinstance(spec, Hard):
            os.link(dir / spec.target, p)
        elif isinstance(spec, Dir):
            p.mkdir(exist_ok=True)
            os.chmod(p, spec.mode)
    # A context's directories have one mode whatever the umask of the machine that runs the test.
    for d in [dir, *[q for q in dir.rglob("*") if q.is_dir() and not q.is_symlink()]]:
        rel = str(d.relative_to(dir))
        if not isinstance(files.get(rel), Dir):
            os.chmod(d, 0o755)


@pytest.fixture(scope="session")
def world():
    work = pathlib.Path(tempfile.mkdtemp(prefix="sandlot-ref-builds-"))
    tarball = work / "rootfs.tar"
    make_base(tarball)
    store = work / "buildah"
    server = None
    try:
        ctr = buildah(store, "from", "scratch").strip()
        buildah(store, "add", ctr, tarball, "/")
        buildah(store, "commit", "--quiet", ctr, "base")
        buildah(store, "rm", ctr)
        archive = work / "base.tar"
        buildah(store, "push", "--quiet", "base", f"oci-archive:{archive}")
        server = Server()
        env = {**os.environ, "SANDLOT_URL": server.url, "SANDLOT_API_KEY": server.admin_key}
        cli = [server_binary(), "image", "import", "--name", "base", str(archive)]
        subprocess.run(cli, env=env, check=True, capture_output=True)
        yield {"work": work, "store": store, "server": server, "env": env}
    finally:
        if server is not None:
            server.stop()
        subprocess.run(["buildah", "--storage-driver", "vfs", "--root", f"{store}/root", "--runroot",
                        f"{store}/run", "rm", "--all"], capture_output=True)
        subprocess.run(["umount", "-R", f"{store}/root/vfs"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


def build_with_buildah(world, name: str, context: pathlib.Path) -> dict:
    store = world["store"]
    buildah(store, "bud", "--quiet", "--isolation", "chroot", "--layers=false",
            "-t", name, context, cwd=context)
    ctr = buildah(store, "from", "--quiet", "--pull-never", name).strip()
    try:
        mnt = buildah(store, "mount", ctr).strip()
        r = subprocess.run(["chroot", mnt, "/bin/sh", "-c", WALK], capture_output=True, text=True, check=True)
        return parse_walk(r.stdout)
    finally:
        buildah(store, "rm", ctr)
        buildah(store, "rmi", name)


def build_with_sandlot(world, name: str, context: pathlib.Path) -> dict:
    env, binary = world["env"], server_binary()
    r = subprocess.run([binary, "image", "build", "-t", name, str(context)], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"sandlot image build failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    try:
        r = subprocess.run([binary, "run", "--image", name, "--user", "root", "--shell", "--", WALK], env=env, capture_output=True,
                           text=True, check=True)
        return parse_walk(r.stdout)
    finally:
        subprocess.run([binary, "image", "rm", name], env=env, capture_output=True)


def built_both_ways(world, case: str) -> set:
    dockerfile, files = CASES[case]
    context = world["work"] / "contexts" / case
    write_context(context, dockerfile, files)
    name = f"ref-{case}"
    theirs = build_with_buildah(world, name, context)
    ours = build_with_sandlot(world, name, context)
    return compare(ours, theirs)


@pytest.fixture(scope="session")
def base_differences(world):
    """How the base alone differs (the import and the boot): counted once, taken out of every case."""
    return built_both_ways(world, "base")


@pytest.mark.parametrize("case", sorted(CASES))
def test_build_matches_buildah(world, base_differences, case):
    found = base_differences if case == "base" else built_both_ways(world, case) - base_differences
    listed = expected_differences(DIFFERENCES).get(case, set())
    check(case, found, listed, DIFFERENCES)
