"""The asyncio SDK: the same calls as the blocking one, against the same server — sandboxes and the
context manager, commands with (async) streaming callbacks, background stdin, kill and reattach from a
new client, files (100 MiB streamed both ways), directories, errors, lifecycle, network and images."""

import asyncio
import hashlib
import os
import time

import pytest
import pytest_asyncio

import sandlot
from sandlot import AsyncClient, AsyncSandbox

from conftest import busybox_rootfs, unique

MIB = 1 << 20


@pytest_asyncio.fixture
async def aclient(server, key):
    async with AsyncClient(server.url, key) as c:
        yield c


@pytest_asyncio.fixture
async def asbx(aclient):
    async with await AsyncSandbox.create(client=aclient, timeout=600) as s:
        yield s


@pytest.mark.asyncio
async def test_create_connect_and_the_context_manager(env):
    async with await AsyncSandbox.create(memory_mb=128, metadata={"k": "v"}) as sbx:
        sid = sbx.id
        assert (sbx.info.state, sbx.info.limits.memory_mb, sbx.info.metadata) == ("running", 128, {"k": "v"})
        assert sid in [s.id for s in await AsyncSandbox.list()]
        async with AsyncClient() as other:
            again = await AsyncSandbox.connect(sid, client=other)
            assert (await again.commands.run("echo hi")).stdout == "hi\n"
    with pytest.raises(sandlot.NotFound):
        await AsyncSandbox.connect(sid)
    name = unique("async-named")
    async with await AsyncSandbox.get_or_create(name) as first:
        second = await AsyncSandbox.get_or_create(name, client=first.client)
        assert second.id == first.id


@pytest.mark.asyncio
async def test_run_streams_to_sync_and_async_callbacks(asbx):
    out, err = [], []

    async def on_err(data):
        await asyncio.sleep(0)
        err.append((data, time.monotonic()))

    r = await asbx.commands.run(
        "echo one; sleep 1; echo two >&2; echo three",
        on_stdout=lambda d: out.append((d, time.monotonic())),
        on_stderr=on_err,
    )
    done = time.monotonic()
    assert [d for d, _ in out] == ["one\n", "three\n"] and [d for d, _ in err] == ["two\n"]
    assert done - out[0][1] >= 1.0, "the first chunk came while the command still ran"
    assert (r.stdout, r.stderr, r.exit_code, r.status) == ("one\nthree\n", "two\n", 0, "exited")
    r = await asbx.commands.run(["sh", "-c", "cat; exit 4"], stdin="in\n", user="root", cwd="/tmp", env={"X": "1"})
    assert (r.stdout, r.exit_code) == ("in\n", 4)
    t = await asbx.commands.run("sleep 20", timeout=0.5)
    assert (t.status, t.exit_code) == ("timeout", 124)
    big = await asbx.commands.run("head -c 5000 /dev/zero", max_output_bytes=1024, on_stdout=lambda d: None)
    assert big.truncated and big.stdout_bytes == 5000 and "bytes omitted" in big.stdout


@pytest.mark.asyncio
async def test_background_stdin_kill_and_reattach_from_a_new_client(server, key, asbx):
    h = await asbx.commands.run("while read l; do echo got $l; done", background=True, tag="async-bg")
    await h.send_stdin("a\n")
    async with AsyncClient(server.url, key) as other:
        again = await (await AsyncSandbox.connect(asbx.id, client=other)).commands.connect(h.pid)
        assert (await again.info()).tag == "async-bg"
        await again.send_stdin("b\n", eof=True)
        seen = [ev.data async for ev in again.output()]
        assert "".join(seen) == "got a\ngot b\n"
        assert (await again.wait()).stdout == "got a\ngot b\n"
        with pytest.raises(sandlot.NotFound):
            await (await AsyncSandbox.connect(asbx.id, client=other)).commands.connect(4242)
    sleeper = await asbx.commands.run(["sleep", "1000"], background=True)
    events = []
    await sleeper.kill(15)
    async for ev in sleeper:
        events.append(ev)
    assert isinstance(events[-1], sandlot.Exited) and events[-1].signal == 15
    assert (await sleeper.wait()).status == "signaled"
    with pytest.raises(sandlot.Conflict):
        await sleeper.kill()
    chunks = []
    bg = await asbx.commands.run("echo x; echo y >&2", background=True, on_stdout=chunks.append)
    assert (await bg.wait()).stderr == "y\n" and chunks == ["x\n"]
    assert [p.pid for p in await asbx.commands.list(tag="async-bg")] == [h.pid]


@pytest.mark.asyncio
async def test_files_round_trip_and_a_100_mib_stream(asbx, tmp_path):
    assert (await asbx.files.write("a/b.txt", "text")).path == "/home/user/a/b.txt"
    assert await asbx.files.read("a/b.txt") == "text"
    assert await asbx.files.read("a/b.txt", format="bytes") == b"text"
    st = await asbx.files.stat("a/b.txt")
    assert (st.kind, st.size) == ("file", 4)
    assert [e.name for e in await asbx.files.list("a")] == ["b.txt"]
    assert (await asbx.files.mkdir("c/d")).is_dir
    assert (await asbx.files.move("a/b.txt", "c/d/b.txt")).path == "/home/user/c/d/b.txt"
    with pytest.raises(sandlot.DirectoryNotEmpty):
        await asbx.files.remove("c")
    await asbx.files.remove("c", recursive=True)
    assert not await asbx.files.exists("c")
    with pytest.raises(sandlot.FileNotFound):
        await asbx.files.read("c/d/b.txt")

    async def chunks():
        for i in range(100):
            yield hashlib.sha256(i.to_bytes(4, "big")).digest() * (MIB // 32)

    want = hashlib.sha256()
    async for c in chunks():
        want.update(c)
    assert (await asbx.files.write("big.bin", chunks())).bytes == 100 * MIB
    got = hashlib.sha256()
    n = 0
    async with await asbx.files.read("big.bin", format="stream") as stream:
        async for c in stream:
            got.update(c)
            n += len(c)
    assert n == 100 * MIB and got.hexdigest() == want.hexdigest()
    src = tmp_path / "src.bin"
    with open(src, "wb") as f:
        f.write(os.urandom(3 * MIB + 17))
    with open(src, "rb") as f:
        assert (await asbx.files.write("from-file.bin", f)).bytes == 3 * MIB + 17
    assert await asbx.files.read("from-file.bin", format="bytes") == src.read_bytes()


@pytest.mark.asyncio
async def test_directories_up_and_down(asbx, tmp_path):
    up = tmp_path / "up"
    (up / "sub").mkdir(parents=True)
    (up / "top.txt").write_text("top\n")
    (up / "sub" / "inner.txt").write_text("inner\n")
    w = await asbx.files.upload_dir(up, "/tmp/tree")
    assert w.path == "/tmp/tree" and w.entries is not None
    await asbx.files.write("/tmp/tree/sub/added.txt", "added\n")
    down = tmp_path / "down"
    names = await asbx.files.download_dir("/tmp/tree", down)
    assert set(names) >= {"top.txt", "sub", "sub/inner.txt", "sub/added.txt"}
    assert (down / "sub" / "inner.txt").read_text() == "inner\n" and (down / "sub" / "added.txt").read_text() == "added\n"


@pytest.mark.asyncio
async def test_errors_map_to_the_same_exceptions(server, aclient, asbx):
    with pytest.raises(sandlot.NotFound) as err:
        await AsyncSandbox.connect("sb_doesnotexist00000000", client=aclient)
    assert (err.value.status, err.value.code) == (404, "not_found")
    async with AsyncClient(server.url, server.tenant_key("async-other")) as other:
        with pytest.raises(sandlot.NotFound):
            await AsyncSandbox.connect(asbx.id, client=other)
    with pytest.raises(sandlot.InvalidRequest) as err:
        await AsyncSandbox.create(client=aclient, memory_mb=1)
    assert err.value.status == 400 and "memory_mb" in err.value.message
    with pytest.raises(sandlot.PermissionDenied):
        await asbx.files.write("/usr/x", "x")
    await asbx.pause()
    with pytest.raises(sandlot.Conflict) as err:
        await asbx.files.read("/etc/hostname")
    assert err.value.status == 409
    await asbx.resume()
    async with AsyncClient(server.url, "sl_wrong") as bad:
        with pytest.raises(sandlot.AuthError):
            await bad.list_sandboxes()


@pytest.mark.asyncio
async def test_lifecycle_snapshot_fork_timeout_network_expose(aclient):
    async with await AsyncSandbox.create(client=aclient, name=unique("async-life"), persistent=True) as sbx:
        assert sbx.info.network.mode == "deny"
        await sbx.files.write("f.txt", "v1")
        assert (await sbx.pause()).state == "paused"
        assert (await sbx.resume()).state == "running"
        assert (await sbx.stop()).state == "stopped"
        assert (await sbx.resume()).state == "running"
        assert await sbx.files.read("f.txt") == "v1"
        snap = await sbx.snapshot()
        assert snap.sandbox_id == sbx.id and snap.id in [s.id for s in await aclient.list_snapshots()]
        forks = await sbx.fork(1)
        assert await forks[0].files.read("f.txt") == "v1"
        await forks[0].delete()
        async with await AsyncSandbox.create(client=aclient, snapshot=snap.id) as restored:
            assert await restored.files.read("f.txt") == "v1"
        await aclient.delete_snapshot(snap.id)
        before = time.time() * 1000
        assert (await sbx.set_timeout(7200)).expires_at_ms >= before + 7_190_000
        net = await sbx.set_network(mode="allowlist", allow=["pypi.org", "*.pypi.org"], rules={"pypi.org": {"x-token": "t"}})
        assert (net.mode, net.allow, net.rules) == ("allowlist", ["pypi.org", "*.pypi.org"], {"pypi.org": ["x-token"]})
        assert (await sbx.get_info()).network.allow == ["pypi.org", "*.pypi.org"]
        port = await sbx.expose(9000)
        assert port.port == 9000 and sbx.id in port.url


@pytest.mark.asyncio
async def test_images_list_import_and_build_with_an_async_log_callback(server, tmp_path):
    async with AsyncClient(server.url, server.tenant_key("async-images")) as c:
        assert "host" in [i.name for i in await c.images.list()]
        progress = []
        imported = await c.images.import_archive(busybox_rootfs(), name="bb", on_progress=progress.append)
        assert imported[0].name == "bb" and progress[-1].type == "done"
        (tmp_path / "Dockerfile").write_text("FROM bb\nRUN echo hello from RUN\n")
        log = []

        async def on_log(text):
            log.append(text)

        image = await c.images.build(tmp_path, "hello", on_log=on_log)
        assert image.name == "hello" and "hello from RUN\n" in log and any(l.startswith("Step 2") for l in log)
        await c.images.delete("hello")
        with pytest.raises(sandlot.NotFound):
            await c.images.get("hello")
