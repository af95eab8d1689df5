"""What the reference tests compare: a root filesystem walked by busybox inside it, parsed into
{path: {field: value}}, and the differences between two such walks. Also the small base root the
build and pull cases start from (make_base)."""

import io
import os
import pathlib
import subprocess
import tarfile

# What is not the image's but the runtime's: the kernel's file systems, and the per-container files a
# runtime writes (sandlot's sandbox has its own; buildah leaves empty placeholders of them in a RUN's
# layer, Docker none).
RUNTIME = ("/proc", "/sys", "/dev", "/etc/hostname", "/etc/hosts", "/etc/resolv.conf")
PRUNE = "find / -xdev \\( -path /proc -o -path /sys -o -path /dev \\) -prune -o"
# Busybox's find, stat, readlink and sha256sum, in the image (the same binary on both sides).
WALK = (
    f"{PRUNE} -exec stat -c '%n|%F|%a|%u|%g|%s|%h' {{}} + && echo -- && "
    f"{PRUNE} -type l -exec sh -c 'for f; do printf \"%s|%s\\n\" \"$f\" \"$(readlink \"$f\")\"; done' sh {{}} + && "
    f"echo -- && {PRUNE} -type f -exec sha256sum {{}} +"
)

def parse_walk(text: str) -> dict:
    """The walk's output as {path: {field: value}}."""
    listing, links, hashes = text.split("--\n")
    tree = {}
    for line in listing.splitlines():
        path, kind, mode, uid, gid, size, nlink = line.split("|")
        if path in RUNTIME:
            continue
        entry = {"type": kind, "mode": mode, "uid": uid, "gid": gid}
        if kind.startswith("regular"):
            entry.update(size=size, nlink=nlink)
        tree[path] = entry
    for line in links.splitlines():
        path, target = line.split("|", 1)
        if path not in RUNTIME:
            tree.setdefault(path, {})["target"] = target
    for line in hashes.splitlines():
        digest, path = line.split("  ", 1)
        if path not in RUNTIME:
            tree.setdefault(path, {})["sha256"] = digest
    return tree


def xattrs(root: str) -> dict:
    """{path: "name=value;…"} of every entry under `root` that has extended attributes, read from the
    host without following a link and without leaving `root`'s file system (as the walk's -xdev)."""
    out = {}
    # The root itself is followed: a sandbox's is /proc/PID/root, a link into its mount namespace.
    dev = os.stat(root).st_dev

    def visit(path: str):
        inside = path[len(root):] or "/"
        if inside in ("/proc", "/sys", "/dev") or (inside != "/" and os.lstat(path).st_dev != dev):
            return
        try:
            names = sorted(os.listxattr(path, follow_symlinks=False))
        except OSError:
            names = []
        if names:
            out[inside] = ";".join(
                f"{n}={os.getxattr(path, n, follow_symlinks=False).decode(errors='replace')}" for n in names)
        if inside == "/" or (os.path.isdir(path) and not os.path.islink(path)):
            for name in sorted(os.listdir(path)):
                visit(os.path.join(path, name))

    visit(root)
    return out


def with_xattrs(tree: dict, found: dict) -> dict:
    """The walk's tree with each entry's xattrs (from `xattrs`) as a field of its own."""
    for path, value in found.items():
        if path not in RUNTIME:
            tree.setdefault(path, {})["xattrs"] = value
    return tree


def make_base(path: pathlib.Path):
    """The base image's root filesystem as a tar: Debian's static busybox with its applets linked in
    /usr/bin, /bin /sbin /lib as links into /usr (a merged-/usr system, as Debian's), and the files the
    cases copy onto, delete or read (accounts, /etc/motd, a doc directory, a debconf cache)."""
    busybox = pathlib.Path("/bin/busybox").read_bytes()
    applets = subprocess.run(["/bin/busybox", "--list"], capture_output=True, text=True, check=True).stdout.split()

    def add(tar, name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link=""):
        info = tarfile.TarInfo(name)
        info.type, info.mode, info.mtime, info.linkname = kind, mode, 1700000000, link
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        tar.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)

    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tar:
        for d, mode in [(".", 0o755), ("usr", 0o755), ("usr/bin", 0o755), ("usr/sbin", 0o755), ("usr/lib", 0o755),
                        ("usr/local", 0o755), ("usr/local/bin", 0o755), ("usr/local/lib", 0o755),
                        ("usr/share", 0o755), ("usr/share/doc", 0o755), ("usr/share/doc/bash", 0o755),
                        ("etc", 0o755), ("opt", 0o755), ("root", 0o700), ("home", 0o755), ("tmp", 0o1777),
                        ("var", 0o755), ("var/tmp", 0o1777), ("var/cache", 0o755), ("var/cache/debconf", 0o755), ("var/lib", 0o755),
                        ("proc", 0o555), ("sys", 0o555), ("dev", 0o755), ("boot", 0o755)]:
            add(tar, d, tarfile.DIRTYPE, mode=mode)
        for link, target in [("bin", "usr/bin"), ("sbin", "usr/sbin"), ("lib", "usr/lib")]:
            add(tar, link, tarfile.SYMTYPE, mode=0o777, link=target)
        add(tar, "usr/bin/busybox", data=busybox, mode=0o755)
        for a in sorted(set(applets) - {"busybox"}):
            add(tar, f"usr/bin/{a}", tarfile.SYMTYPE, mode=0o777, link="busybox")
        for name, text, mode in [
            ("etc/passwd", "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n", 0o644),
            ("etc/group", "root:x:0:\nnogroup:x:65534:\n", 0o644),
            ("etc/shadow", "root:*:19000:0:99999:7:::\n", 0o640),
            ("etc/motd", "base\n", 0o644),
            ("etc/hostname", "base\n", 0o644),
            ("etc/debian_version", "12.0\n", 0o644),
            ("usr/share/doc/bash/README", "bash docs\n", 0o644),
            ("usr/share/doc/bash/copyright", "GPL\n", 0o644),
            ("var/cache/debconf/config.dat", "x\n", 0o644),
            ("root/.profile", "# root\n", 0o644),
        ]:
            add(tar, name, data=text.encode(), mode=mode)


def compare(ours: dict, theirs: dict) -> set:
    """(path, field, ours, theirs) for every difference; field `entry` when one side lacks the path."""
    out = set()
    for path in ours.keys() | theirs.keys():
        a, b = ours.get(path), theirs.get(path)
        if a is None or b is None:
            out.add((path, "entry", "present" if a else "absent", "present" if b else "absent"))
            continue
        for field in a.keys() | b.keys():
            if a.get(field) != b.get(field):
                out.add((path, field, str(a.get(field)), str(b.get(field))))
    return out


def expected_differences(path: pathlib.Path) -> dict:
    """{case: {(path, field)}} from a differences file (`CASE PATH FIELD` lines, `#` comments)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        case, entry, field = line.split()
        out.setdefault(case, set()).add((entry, field))
    return out


def server_binary() -> str:
    return os.environ.get("SANDLOT_BIN") or str(pathlib.Path(__file__).resolve().parents[2] / "target" / "debug" / "sandlot")


def check(case: str, found: set, listed: set, differences: pathlib.Path):
    """Fails on a difference `listed` lacks, and on a listed one that is gone."""
    unlisted = sorted(d for d in found if (d[0], d[1]) not in listed)
    gone = sorted(listed - {(d[0], d[1]) for d in found})
    report = "\n".join(f"  {p} {f}: sandlot {a!r}, reference {b!r}" for p, f, a, b in unlisted[:100])
    assert not unlisted, f"{case}: {len(unlisted)} difference(s) not in {differences.name}:\n{report}"
    assert not gone, f"{case}: listed in {differences.name} but no longer differ: {gone}"
