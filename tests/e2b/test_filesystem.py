"""envd's filesystem service and /files as the official SDK drives them, sync and async."""

import asyncio
import hashlib
import io
import os
import urllib.error
import urllib.request

import pytest
from e2b import AsyncSandbox, FileType, FilesystemEventType, Sandbox
from e2b.exceptions import FileNotFoundException


@pytest.fixture
def sbx(server):
    s = Sandbox.create(timeout=120)
    yield s
    s.kill()


def test_write_and_read_text_bytes_and_stream(sbx):
    info = sbx.files.write("/home/user/hello.txt", "héllo\n")
    assert (info.name, info.path, info.type) == ("hello.txt", "/home/user/hello.txt", FileType.FILE)
    assert sbx.files.read("/home/user/hello.txt") == "héllo\n"
    sbx.files.write("/tmp/bin", bytes(range(256)))
    assert sbx.files.read("/tmp/bin", format="bytes") == bytearray(range(256))
    # A file-like object goes up as a stream (octet-stream), and comes back as one.
    sbx.files.write("/tmp/streamed", io.BytesIO(b"x" * 100_000))
    assert b"".join(sbx.files.read("/tmp/streamed", format="stream")) == b"x" * 100_000


def test_relative_paths_are_in_the_users_home_and_root_writes_as_root(sbx):
    sbx.files.write("rel.txt", "r")
    assert sbx.commands.run("cat /home/user/rel.txt").stdout == "r"
    sbx.files.write("/root/only-root", "secret", user="root")
    assert sbx.files.get_info("/root/only-root", user="root").owner == "root"
    assert sbx.files.get_info("/home/user/rel.txt").owner == "user"


def test_write_files_writes_several_in_one_multipart_upload(sbx):
    infos = sbx.files.write_files(
        [{"path": "/tmp/many/a.txt", "data": "A"}, {"path": "/tmp/many/b.bin", "data": b"B"}]
    )
    assert sorted(i.path for i in infos) == ["/tmp/many/a.txt", "/tmp/many/b.bin"]
    assert sbx.commands.run("cat /tmp/many/a.txt /tmp/many/b.bin").stdout == "AB"


def test_list_with_depth_exists_get_info(sbx):
    sbx.files.make_dir("/tmp/tree/sub/deeper")
    sbx.files.write("/tmp/tree/top.txt", "1234")
    sbx.files.write("/tmp/tree/sub/mid.txt", "x")
    one = sbx.files.list("/tmp/tree")
    assert sorted(e.name for e in one) == ["sub", "top.txt"]
    two = sbx.files.list("/tmp/tree", depth=2)
    assert sorted(e.path for e in two) == ["/tmp/tree/sub", "/tmp/tree/sub/deeper", "/tmp/tree/sub/mid.txt", "/tmp/tree/top.txt"]
    info = sbx.files.get_info("/tmp/tree/top.txt")
    assert (info.type, info.size, info.permissions) == (FileType.FILE, 4, "-rw-r--r--")
    assert info.modified_time.year >= 2024
    d = sbx.files.get_info("/tmp/tree/sub")
    assert d.type == FileType.DIR and d.permissions.startswith("d")
    assert sbx.files.exists("/tmp/tree/top.txt")
    assert not sbx.files.exists("/tmp/tree/nope")


def test_make_dir_says_whether_it_made_one(sbx):
    assert sbx.files.make_dir("/tmp/made/a/b") is True
    assert sbx.files.make_dir("/tmp/made/a/b") is False
    assert sbx.files.get_info("/tmp/made/a").type == FileType.DIR


def test_rename_and_remove(sbx):
    sbx.files.write("/tmp/old.txt", "moved")
    info = sbx.files.rename("/tmp/old.txt", "/tmp/new.txt")
    assert info.path == "/tmp/new.txt"
    assert sbx.files.read("/tmp/new.txt") == "moved"
    assert not sbx.files.exists("/tmp/old.txt")
    sbx.files.make_dir("/tmp/gone/inner")
    sbx.files.write("/tmp/gone/inner/f", "f")
    sbx.files.remove("/tmp/gone")
    assert not sbx.files.exists("/tmp/gone")


def test_missing_files_are_file_not_found(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/tmp/does-not-exist")
    with pytest.raises(FileNotFoundException):
        sbx.files.get_info("/tmp/does-not-exist")
    with pytest.raises(FileNotFoundException):
        sbx.files.list("/tmp/does-not-exist")


def test_a_user_cannot_write_where_only_root_may(sbx):
    with pytest.raises(Exception) as e:
        sbx.files.write("/root/nope", "x")
    assert "permission" in str(e.value).lower() or "denied" in str(e.value).lower()


def _rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:")) / 1024


def test_a_100_mib_file_round_trips_intact_and_streamed(server, sbx, tmp_path):
    size = 100 << 20
    rss_before = _rss_mib(server.proc.pid)
    peak = rss_before
    src = tmp_path / "big"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        for i in range(size // (1 << 20)):
            chunk = hashlib.sha256(str(i).encode()).digest() * (1 << 15)
            h.update(chunk)
            f.write(chunk)
    with open(src, "rb") as f:
        sbx.files.write("/tmp/big", f)
    assert sbx.commands.run("sha256sum /tmp/big | cut -d' ' -f1", timeout=60).stdout.strip() == h.hexdigest()
    back = hashlib.sha256()
    n = 0
    peak = max(peak, _rss_mib(server.proc.pid))
    for chunk in sbx.files.read("/tmp/big", format="stream"):
        back.update(chunk)
        n += len(chunk)
        if n % (16 << 20) < len(chunk):
            peak = max(peak, _rss_mib(server.proc.pid))
    assert n == size
    assert back.hexdigest() == h.hexdigest()
    print(f"\n100 MiB round trip: sandlot serve RSS {rss_before:.0f} -> peak {peak:.0f} MiB")
    # Streamed, not held: the daemon did not grow by anything like the file's size.
    assert peak - rss_before < 48, f"sandlot serve grew from {rss_before:.0f} to {peak:.0f} MiB"


def test_async_client_files(server):
    async def main():
        sbx = await AsyncSandbox.create(timeout=120)
        try:
            await sbx.files.write("/tmp/a.txt", "async text")
            assert await sbx.files.read("/tmp/a.txt") == "async text"
            await sbx.files.write_files([{"path": "/tmp/x1", "data": b"1"}, {"path": "/tmp/x2", "data": "2"}])
            names = sorted(e.name for e in await sbx.files.list("/tmp"))
            assert {"a.txt", "x1", "x2"} <= set(names)
            assert await sbx.files.make_dir("/tmp/adir") is True
            assert (await sbx.files.rename("/tmp/x1", "/tmp/adir/x1")).path == "/tmp/adir/x1"
            await sbx.files.remove("/tmp/adir")
            assert not await sbx.files.exists("/tmp/adir")
            with pytest.raises(FileNotFoundException):
                await sbx.files.read("/tmp/adir/x1")
        finally:
            await sbx.kill()

    asyncio.run(main())


def _fetch(url, sandbox_id, data=None):
    """A request carrying only the routing header: no access token, no API key. (Host routing,
    `--e2b-domain`, would carry the id in the host name instead.)"""
    req = urllib.request.Request(url, data=data, headers={"E2b-Sandbox-Id": sandbox_id}, method="POST" if data else "GET")
    if data is not None:
        req.add_header("Content-Type", "application/octet-stream")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_signed_urls_need_no_token_and_a_wrong_or_expired_one_is_refused(sbx):
    assert sbx._envd_access_token, "sandlot gives every sandbox an access token"
    sbx.files.write("/home/user/signed.txt", "via a signed url")
    status, body = _fetch(sbx.download_url("/home/user/signed.txt"), sbx.sandbox_id)
    assert (status, body) == (200, b"via a signed url")
    status, _ = _fetch(sbx.download_url("/home/user/signed.txt", use_signature_expiration=60), sbx.sandbox_id)
    assert status == 200
    # The signature covers the path: another path with the same signature is refused.
    url = sbx.download_url("/home/user/signed.txt").replace("signed.txt", "other.txt")
    assert _fetch(url, sbx.sandbox_id)[0] == 404
    # And the operation: a read signature does not allow a write.
    assert _fetch(sbx.download_url("/home/user/up.txt"), sbx.sandbox_id, data=b"x")[0] == 404
    status, body = _fetch(sbx.upload_url("/home/user/up.txt"), sbx.sandbox_id, data=b"uploaded")
    assert status == 200, body
    assert sbx.files.read("/home/user/up.txt") == "uploaded"
    expired = sbx.download_url("/home/user/signed.txt", use_signature_expiration=-10)
    assert _fetch(expired, sbx.sandbox_id)[0] == 401
    # Without a signature, the routing header alone gets nothing.
    assert _fetch(sbx.envd_direct_url + "/files?path=/home/user/signed.txt", sbx.sandbox_id)[0] == 401


def _multipart(*parts):
    """A multipart/form-data body of `file` parts, (filename, data) each."""
    body = b""
    for name, data in parts:
        body += b'--x\r\nContent-Disposition: form-data; name="file"; filename="' + name.encode() + b'"\r\n\r\n' + data + b"\r\n"
    return body + b"--x--\r\n"


def test_a_signed_upload_url_writes_its_one_path_only(sbx):
    url = sbx.upload_url("/home/user/signed-up.txt")
    two = _multipart(("ignored", b"first"), ("/home/user/elsewhere.txt", b"second"))
    req = urllib.request.Request(url, data=two, method="POST", headers={"E2b-Sandbox-Id": sbx.sandbox_id, "Content-Type": "multipart/form-data; boundary=x"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=30)
    assert refused.value.code == 400
    assert b"one file" in refused.value.read()
    assert not sbx.files.exists("/home/user/elsewhere.txt")
    # One part goes to the signed path, whatever its filename says.
    req = urllib.request.Request(url, data=_multipart(("/home/user/elsewhere.txt", b"one")), method="POST", headers={"E2b-Sandbox-Id": sbx.sandbox_id, "Content-Type": "multipart/form-data; boundary=x"})
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 200
    assert sbx.files.read("/home/user/signed-up.txt") == "one"
    assert not sbx.files.exists("/home/user/elsewhere.txt")
    # The SDK signs "" when given no path: such a URL would allow any file, so it is refused.
    status, body = _fetch(sbx.upload_url(""), sbx.sandbox_id, data=b"x")
    assert status == 400 and b"must name its file" in body, body


def test_a_multipart_body_without_its_boundary_is_refused_early(server, sbx):
    import socket

    rss_before = _rss_mib(server.proc.pid)

    host, port = sbx.envd_direct_url.split("//")[1].split(":")
    # A token holder's request that never delimits a part: 16 MiB of preamble, announced as 1 GiB.
    s = socket.create_connection((host, int(port.split("/")[0])), timeout=30)
    s.sendall(
        f"POST /files?path=/tmp/x HTTP/1.1\r\nHost: {host}\r\nE2b-Sandbox-Id: {sbx.sandbox_id}\r\n"
        f"X-Access-Token: {sbx._envd_access_token}\r\nContent-Type: multipart/form-data; boundary=x\r\n"
        f"Content-Length: {1 << 30}\r\n\r\n".encode()
    )
    reply = b""
    try:
        for _ in range(16 * 16):
            s.sendall(b"a" * 65536)
    except OSError:
        pass  # the server stopped reading: what matters is what it answered
    s.settimeout(10)
    try:
        while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            reply += chunk
    except OSError:
        pass
    s.close()
    assert reply.startswith(b"HTTP/1.1 400"), reply[:300]
    assert b"outside file data" in reply and b"boundary" in reply, reply
    # The daemon did not keep the 16 MiB it was sent (it would have buffered all of it, and more).
    assert _rss_mib(server.proc.pid) - rss_before < 8, (rss_before, _rss_mib(server.proc.pid))


def _wait_for(get, want, seconds=10):
    """Collects events from `get()` until `want(events)` holds or time is up."""
    import time

    events, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        events += get()
        if want(events):
            break
        time.sleep(0.2)
    return events


def test_watch_dir_reports_create_write_rename_remove_relative_names(sbx):
    sbx.files.make_dir("/tmp/watched/sub")
    w = sbx.files.watch_dir("/tmp/watched", recursive=True)
    # (files.write lands a file by renaming a temporary one into place: a shell write shows WRITE.)
    sbx.commands.run("echo 1 > /tmp/watched/a.txt")
    sbx.commands.run("mv /tmp/watched/a.txt /tmp/watched/b.txt && echo x > /tmp/watched/sub/deep && rm /tmp/watched/b.txt")
    events = _wait_for(w.get_new_events, lambda ev: any(e.name == "sub/deep" for e in ev) and any(e.type == FilesystemEventType.REMOVE for e in ev))
    seen = {(e.name, e.type) for e in events}
    assert ("a.txt", FilesystemEventType.CREATE) in seen
    assert ("a.txt", FilesystemEventType.WRITE) in seen
    assert ("a.txt", FilesystemEventType.RENAME) in seen
    assert ("b.txt", FilesystemEventType.CREATE) in seen
    assert ("b.txt", FilesystemEventType.REMOVE) in seen
    assert ("sub/deep", FilesystemEventType.CREATE) in seen
    w.stop()
    # A stopped watcher is gone.
    with pytest.raises(Exception):
        w.get_new_events()


def test_a_non_recursive_watch_misses_subdirectories(sbx):
    sbx.files.make_dir("/tmp/flat/sub")
    w = sbx.files.watch_dir("/tmp/flat")
    sbx.files.write("/tmp/flat/sub/hidden", "x")
    sbx.files.write("/tmp/flat/top", "x")
    events = _wait_for(w.get_new_events, lambda ev: any(e.name == "top" for e in ev))
    assert "top" in {e.name for e in events}
    assert "sub/hidden" not in {e.name for e in events}
    w.stop()


def test_watching_a_missing_directory_is_not_found(sbx):
    with pytest.raises(FileNotFoundException):
        sbx.files.watch_dir("/tmp/no-such-dir")


def test_async_watch_dir_streams_events(server):
    async def main():
        sbx = await AsyncSandbox.create(timeout=120)
        try:
            await sbx.files.make_dir("/tmp/aw")
            seen = []
            got = asyncio.Event()

            def on_event(e):
                seen.append((e.name, e.type))
                if e.name == "done":
                    got.set()

            with pytest.raises(FileNotFoundException):
                await sbx.files.watch_dir("/tmp/aw-missing", on_event=on_event)
            h = await sbx.files.watch_dir("/tmp/aw", on_event=on_event)
            await sbx.files.write("/tmp/aw/f", "x")
            await sbx.files.write("/tmp/aw/done", "x")
            await asyncio.wait_for(got.wait(), 10)
            assert ("f", FilesystemEventType.CREATE) in seen
            await h.stop()
        finally:
            await sbx.kill()

    asyncio.run(main())
