"""Files through the blocking SDK: text, bytes and streams both ways, 100 MiB streamed and hashed
without being held in memory, metadata, listings, mkdir/move/remove and their errors, and directories
up and down as tar streams."""

import hashlib
import os
import tracemalloc

import pytest

import sandlot

MIB = 1 << 20


def test_text_bytes_and_stream_round_trip(sbx):
    w = sbx.files.write("app/hello.py", "print('hi')\n")
    assert (w.path, w.bytes) == ("/home/user/app/hello.py", 12)
    assert sbx.files.read("app/hello.py") == "print('hi')\n"
    blob = bytes(range(256)) * 64
    sbx.files.write("/tmp/blob.bin", blob)
    assert sbx.files.read("/tmp/blob.bin", format="bytes") == blob
    with sbx.files.read("/tmp/blob.bin", format="stream") as stream:
        assert b"".join(stream) == blob
    sbx.files.write("chunks.txt", iter([b"one ", b"two ", b"three"]))
    assert sbx.files.read("chunks.txt") == "one two three"
    assert sbx.commands.run("python3 app/hello.py").stdout == "hi\n"


def test_mode_stat_list_and_exists(sbx):
    sbx.files.write("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    st = sbx.files.stat("run.sh")
    assert (st.path, st.name, st.kind, st.size, st.mode, st.uid) == ("/home/user/run.sh", "run.sh", "file", 19, 0o755, 1000)
    assert st.is_file and not st.is_dir
    assert sbx.commands.run("./run.sh").stdout == "ran\n"
    sbx.files.write("tree/a/b.txt", "b")
    sbx.files.write("tree/c.txt", "c")
    assert [e.name for e in sbx.files.list("tree")] == ["a", "c.txt"]
    deep = sbx.files.list("tree", depth=2)
    assert [(e.path, e.kind) for e in deep] == [
        ("/home/user/tree/a", "dir"),
        ("/home/user/tree/a/b.txt", "file"),
        ("/home/user/tree/c.txt", "file"),
    ]
    links = {e.name: e.link_target for e in sbx.files.list("/") if e.kind == "symlink"}
    assert links.get("bin") == "usr/bin"
    assert sbx.files.exists("tree/c.txt") and not sbx.files.exists("tree/nope")


def test_mkdir_move_remove_and_their_errors(sbx):
    d = sbx.files.mkdir("data/raw")
    assert (d.path, d.kind) == ("/home/user/data/raw", "dir")
    assert sbx.files.mkdir("data/raw").is_dir  # like mkdir -p
    with pytest.raises(sandlot.AlreadyExists):
        sbx.files.mkdir("data/raw", parents=False)
    sbx.files.write("data/raw/x.csv", "1,2\n")
    sbx.files.write("data/y.csv", "3,4\n")
    moved = sbx.files.move("data/raw/x.csv", "data/x.csv")
    assert moved.path == "/home/user/data/x.csv" and not sbx.files.exists("data/raw/x.csv")
    with pytest.raises(sandlot.AlreadyExists) as err:
        sbx.files.move("data/x.csv", "data/y.csv")
    assert err.value.status == 409
    assert sbx.files.move("data/x.csv", "data/y.csv", overwrite=True).size == 4
    assert sbx.files.read("data/y.csv") == "1,2\n"
    with pytest.raises(sandlot.DirectoryNotEmpty) as err:
        sbx.files.remove("data")
    assert (err.value.status, err.value.code) == (409, "directory_not_empty")
    assert isinstance(err.value, sandlot.Conflict) and "recursive" in err.value.message
    sbx.files.remove("data", recursive=True)
    assert not sbx.files.exists("data")
    with pytest.raises(sandlot.FileNotFound) as err:
        sbx.files.read("data/y.csv")
    assert (err.value.status, err.value.code) == (404, "file_not_found")
    assert isinstance(err.value, sandlot.NotFound)
    with pytest.raises(sandlot.WrongFileKind):
        sbx.files.read("/home/user")


def test_the_sandbox_user_meets_the_kernels_permissions(sbx):
    with pytest.raises(sandlot.PermissionDenied) as err:
        sbx.files.write("/etc/x", "x")
    assert (err.value.status, err.value.code) == (403, "permission_denied")
    sbx.files.write("notes.txt", "root only", user="root")  # relative: /root for root
    assert sbx.files.read("/root/notes.txt", user="root") == "root only"
    with pytest.raises(sandlot.PermissionDenied):
        sbx.files.read("/root/notes.txt")


def _pattern(size):
    """`size` bytes of a deterministic, incompressible-looking pattern, a MiB at a time."""
    seed = hashlib.sha256(b"sandlot").digest()
    block = b"".join(hashlib.sha256(seed + i.to_bytes(4, "big")).digest() for i in range(MIB // 32))
    for i in range(size // MIB):
        yield block[i % 97 :] + block[: i % 97]


def test_a_100_mib_file_streams_both_ways_without_being_held(sbx, tmp_path):
    size = 100 * MIB
    src = tmp_path / "big.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for chunk in _pattern(size):
            h.update(chunk)
            f.write(chunk)
    want = h.hexdigest()
    tracemalloc.start()
    try:
        with open(src, "rb") as f:
            w = sbx.files.write("big.bin", f)
        assert w.bytes == size
        got = hashlib.sha256()
        n = 0
        with sbx.files.read("big.bin", format="stream") as stream:
            for chunk in stream:
                got.update(chunk)
                n += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert n == size and got.hexdigest() == want
    assert peak < 16 * MIB, f"the transfer held {peak} bytes at once"
    inside = sbx.commands.run(["sha256sum", "big.bin"])
    assert inside.stdout.split()[0] == want


def test_a_directory_goes_up_and_comes_back_down(sbx, tmp_path):
    up = tmp_path / "up"
    (up / "src" / "pkg").mkdir(parents=True)
    (up / "Cargo.toml").write_text("[package]\n")
    (up / "src" / "main.rs").write_text("fn main() {}\n")
    (up / "src" / "pkg" / "data.bin").write_bytes(bytes(range(256)))
    (up / "run.sh").write_text("#!/bin/sh\necho ok\n")
    os.chmod(up / "run.sh", 0o755)
    os.symlink("src/main.rs", up / "link")
    w = sbx.files.upload_dir(up, "proj")
    assert w.path == "/home/user/proj" and w.entries is not None and w.entries >= 6
    assert sbx.files.read("proj/src/pkg/data.bin", format="bytes") == bytes(range(256))
    assert sbx.files.stat("proj/run.sh").mode == 0o755
    assert sbx.files.stat("proj/link").link_target == "src/main.rs"
    assert sbx.commands.run("./run.sh", cwd="/home/user/proj").stdout == "ok\n"
    sbx.files.write("proj/made-inside.txt", "new\n")
    down = tmp_path / "down"
    names = sbx.files.download_dir("proj", down)
    assert "made-inside.txt" in names and "src/pkg/data.bin" in names
    assert (down / "made-inside.txt").read_text() == "new\n"
    assert (down / "src" / "pkg" / "data.bin").read_bytes() == bytes(range(256))
    assert os.readlink(down / "link") == "src/main.rs"
    assert os.stat(down / "run.sh").st_mode & 0o777 == 0o755
    assert {str(p.relative_to(down)) for p in down.rglob("*")} == {
        str(p.relative_to(up)) for p in up.rglob("*")
    } | {"made-inside.txt"}


def test_a_download_refuses_links_that_lead_out(sbx, tmp_path):
    sbx.files.mkdir("evil")
    sbx.commands.run("ln -s /etc/passwd evil/passwd; ln -s ../../outside evil/up")
    with pytest.raises(sandlot.ProtocolError) as err:
        sbx.files.download_dir("evil", tmp_path / "down")
    assert "outside" in err.value.message
    assert not (tmp_path / "outside").exists()
    with pytest.raises(sandlot.WrongFileKind):
        sbx.files.download_dir("/etc/hostname", tmp_path / "x")
