"""sandlot's MCP tools through the official MCP Python client, over stdio (`sandlot mcp`) and streamable
HTTP (`/mcp`): every test that takes `transport` runs on both. Effects are checked through sandlot's
native API, not through the tools themselves."""

import hashlib
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request

import anyio
import mcp.shared.exceptions
import mcp.types
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from conftest import BINARY, open_mcp

TOOLS = {
    "create_sandbox", "list_sandboxes", "delete_sandbox", "run_command", "run_code", "read_file",
    "write_file", "list_files", "set_network", "snapshot", "expose_port",
}
#: Offered over stdio only: `sandlot mcp` runs on the user's machine; the HTTP server has no client files.
LOCAL_FILE_TOOLS = {"upload_file", "download_file"}


def sandbox_of(text: str) -> str:
    m = re.search(r"sandbox (sb_[a-z0-9]+)", text)
    assert m, text
    return m.group(1)


def test_tools_are_listed_with_their_schemas(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            tools = {t.name: t for t in (await m.session.list_tools()).tools}
            assert set(tools) == (TOOLS | LOCAL_FILE_TOOLS if transport == "stdio" else TOOLS)
            for t in tools.values():
                assert len(t.description) > 40, t
                assert t.inputSchema["type"] == "object", t
            props = tools["run_command"].inputSchema["properties"]
            assert {"command", "argv", "cwd", "env", "user", "timeout_s", "sandbox_id"} <= set(props)
            assert tools["read_file"].inputSchema["required"] == ["path"]
            assert set(tools["run_code"].inputSchema["required"]) == {"code"}
            assert "allow" in tools["create_sandbox"].inputSchema["properties"]

    anyio.run(main)


def test_the_sessions_sandbox_is_reused_then_deleted_when_the_session_ends(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            first = sandbox_of(await m.ok("write_file", path="notes/a.txt", content="kept between calls"))
            out = await m.ok("run_command", command="cat notes/a.txt")
            assert sandbox_of(out) == first
            assert "kept between calls" in out
            assert first in await m.ok("list_sandboxes")
        return first

    sid = anyio.run(main)
    info = server.wait_state(sid, "deleted", key=alice)
    assert info["metadata"] == {"sandlot.mcp": "session"}


def test_each_tool_acts_on_the_sandbox(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            sid = sandbox_of(await m.ok("create_sandbox", memory_mb=256, cpu=0.5, allow=["pkgs.example.test"]))
            info = server.native("GET", f"/v1/sandboxes/{sid}", key=alice)
            assert info["limits"]["memory_mb"] == 256 and info["limits"]["cpu"] == 0.5
            assert info["network"]["mode"] == "allowlist" and info["network"]["allow"] == ["pkgs.example.test"]
            assert f"* {sid} running" in await m.ok("list_sandboxes")

            # write_file, read back through the native API; read_file of a file written natively.
            await m.ok("write_file", path="/home/user/dir/hello.py", content="print('hi from a file')\n")
            assert server.read(sid, "/home/user/dir/hello.py", key=alice) == b"print('hi from a file')\n"
            out = await m.ok("run_command", argv=["python3", "dir/hello.py"])
            assert "hi from a file" in out and sandbox_of(out) == sid
            assert "print('hi from a file')" in await m.ok("read_file", path="dir/hello.py")
            assert "/home/user/dir/hello.py" in await m.ok("list_files", path="/home/user", depth=2)

            out = await m.ok("run_command", command='id -u; echo "$GREETING"; pwd; cat', env={"GREETING": "hej"},
                             user="root", cwd="/tmp", stdin="from stdin")
            assert "exit code 0" in out and "0\nhej\n/tmp\nfrom stdin" in out
            out = await m.ok("run_command", command="exit 3")
            assert out.startswith("exit code 3")
            assert "timed out" in await m.ok("run_command", command="sleep 5", timeout_s=0.5)

            out = await m.ok("run_code", code="import sys; print(sum(range(10))); print('err', file=sys.stderr)")
            assert "--- stdout (3 bytes) ---\n45\n" in out and "--- stderr (4 bytes) ---\nerr\n" in out
            assert "bash 5" in await m.ok("run_code", language="bash", code='echo "bash ${BASH_VERSINFO[0]}"')

            await m.ok("set_network", mode="deny")
            assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["network"]["mode"] == "deny"
            await m.ok("set_network", mode="allowlist", allow=["a.example.test"])
            assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["network"]["allow"] == ["a.example.test"]

            snap = re.search(r"snapshot (snap_[a-z0-9]+)", await m.ok("snapshot", name=f"mcp-{transport}")).group(1)
            snaps = server.native("GET", "/v1/snapshots", key=alice)["snapshots"]
            assert any(s["id"] == snap and s["sandbox_id"] == sid for s in snaps), snaps

            # A server in the sandbox, reached through the preview URL expose_port returns.
            await m.ok("write_file", path="www/index.html", content="preview works")
            await m.ok("run_command", command="cd www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
            url = (await m.ok("expose_port", port=8000)).split(": ", 1)[1]
            assert url.startswith(f"http://8000-{sid}.localhost:{server.port}/")
            body = await anyio.to_thread.run_sync(fetch_preview, server, url)
            assert body == b"preview works"

            await m.ok("delete_sandbox", sandbox_id=sid)
            assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["state"] == "deleted"
            # The next call makes a fresh session sandbox.
            assert sandbox_of(await m.ok("run_code", code="print(1)")) != sid

    anyio.run(main)


def fetch_preview(server, url: str) -> bytes:
    """GET a host-routed preview URL through the server's loopback address (`*.localhost` names)."""
    host, rest = url.removeprefix("http://").split("/", 1)
    for _ in range(50):
        req = urllib.request.Request(f"{server.url}/{rest}", headers={"Host": host})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.read()
        except urllib.error.HTTPError as e:
            if e.code != 502:  # the server in the sandbox is still starting
                raise
        time.sleep(0.2)
    raise AssertionError("the preview never answered")


def test_stdio_files_go_up_and_back_binary_and_whole(server, alice, tmp_path):
    src = tmp_path / "random.bin"
    data = os.urandom(5 << 20)
    src.write_bytes(data)
    back = tmp_path / "sub" / "back.bin"

    async def main():
        async with open_mcp(server, "stdio", alice) as m:
            out = await m.ok("upload_file", local_path=str(src), path="data/random.bin")
            sid = sandbox_of(out)
            assert f"uploaded {5 << 20} bytes from {src} to /home/user/data/random.bin" in out, out
            stored = server.read(sid, "/home/user/data/random.bin", key=alice)
            assert hashlib.sha256(stored).digest() == hashlib.sha256(data).digest()
            out = await m.ok("download_file", path="data/random.bin", local_path=str(back))
            assert f"downloaded {5 << 20} bytes from data/random.bin in sandbox {sid} to {back}" in out, out
            assert hashlib.sha256(back.read_bytes()).digest() == hashlib.sha256(data).digest()
            assert sorted(p.name for p in back.parent.iterdir()) == ["back.bin"]  # no partial file left

            is_error, text = await m.call("upload_file", local_path=str(tmp_path / "missing.bin"), path="x.bin")
            assert is_error and "file_not_found" in text and "missing.bin" in text and "this machine" in text, text
            is_error, text = await m.call("download_file", path="no/such.bin", local_path=str(tmp_path / "n.bin"))
            assert is_error and "file_not_found" in text, text
            assert not (tmp_path / "n.bin").exists() and not list(tmp_path.glob(".n.bin.*"))

    anyio.run(main)


def test_http_offers_no_client_file_tools(server, alice):
    async def main():
        async with open_mcp(server, "http", alice) as m:
            names = {t.name for t in (await m.session.list_tools()).tools}
            assert not names & LOCAL_FILE_TOOLS, names
            # An unknown tool to this server: a protocol error, as for any name it does not offer.
            with pytest.raises(mcp.shared.exceptions.McpError) as e:
                await m.call("upload_file", local_path="/etc/hostname", path="h")
            assert "tool not found" in str(e.value), e.value

    anyio.run(main)


def test_a_kept_sandbox_outlives_the_session(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            return sandbox_of(await m.ok("create_sandbox", keep=True))

    sid = anyio.run(main)
    try:
        # The session's end has been handled once another session can see the sandbox still running.
        assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["state"] == "running"
        anyio.run(anyio.sleep, 2)
        assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["state"] == "running"
    finally:
        server.native("DELETE", f"/v1/sandboxes/{sid}", key=alice)


def test_large_output_is_cut_with_the_counts(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            out = await m.ok("run_code", code="print('a' * 100000 + 'END')")
            assert "--- stdout (100004 bytes, 83620 omitted from the middle) ---" in out
            assert "[sandlot: 83620 bytes omitted]" in out and "END" in out
            assert len(out) < 17000
            out = await m.ok("run_command", command="head -c 50000 /dev/zero | tr '\\0' b", max_output_bytes=2048)
            assert "(50000 bytes, 47952 omitted from the middle)" in out
            await m.ok("write_file", path="big.txt", content="z" * 100000)
            out = await m.ok("read_file", path="big.txt")
            assert out.endswith("[sandlot: 16384 of 100000 bytes shown, 83616 bytes omitted]")
            assert out.startswith("z" * 16384 + "\n")
            assert (await m.ok("read_file", path="big.txt", max_bytes=10)).startswith("z" * 10 + "\n[sandlot: 10 of")

    anyio.run(main)


def test_errors_are_tool_results_with_the_servers_message(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            is_error, text = await m.call("read_file", path="/no/such/file.txt")
            assert is_error and "file_not_found" in text and "/no/such/file.txt" in text, text
            is_error, text = await m.call("run_code", code="print(1)", sandbox_id="sb_doesnotexist")
            assert is_error and "not_found" in text, text
            is_error, text = await m.call("run_command")
            assert is_error and "give exactly one of `command`" in text, text
            is_error, text = await m.call("create_sandbox", memory_mb=10_000_000)
            assert is_error and "memory" in text, text
            # The session still works after errors.
            assert "exit code 0" in await m.ok("run_code", code="print(2)")

    anyio.run(main)


def test_another_tenants_sandbox_is_not_found(server, alice, bob, transport):
    async def main():
        async with open_mcp(server, transport, alice) as a, open_mcp(server, transport, bob) as b:
            sid = sandbox_of(await a.ok("write_file", path="secret.txt", content="alice's"))
            for tool, args in [("read_file", {"path": "secret.txt"}), ("run_code", {"code": "print(1)"}),
                               ("delete_sandbox", {}), ("snapshot", {}), ("expose_port", {"port": 80})]:
                is_error, text = await b.call(tool, sandbox_id=sid, **args)
                assert is_error and "not_found" in text and "alice's" not in text, (tool, text)
            assert sid not in await b.ok("list_sandboxes")
            assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["state"] == "running"

    anyio.run(main)


def test_http_a_session_refuses_another_tenants_key(server, alice, bob):
    async def main():
        async with open_mcp(server, "http", alice) as a:
            await a.ok("run_code", code="print(1)")
            call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                    "params": {"name": "read_file", "arguments": {"path": "/etc/hostname"}}}
            headers = {"Mcp-Session-Id": a.session_id, "Content-Type": "application/json",
                       "Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
            status, body = await anyio.to_thread.run_sync(
                lambda: server.status("POST", "/mcp", call, key=bob, headers=headers))
            assert status == 404 and json.loads(body)["error"]["code"] == "not_found", (status, body)
            status, _ = await anyio.to_thread.run_sync(
                lambda: server.status("DELETE", "/mcp", key=bob, headers=headers))
            assert status == 404
            # alice's session is untouched.
            assert "exit code 0" in await a.ok("run_code", code="print(3)")

    anyio.run(main)


def test_the_sessions_sandbox_is_replaced_when_it_is_gone(server, alice, transport):
    async def main():
        async with open_mcp(server, transport, alice) as m:
            first = sandbox_of(await m.ok("run_code", code="print(1)"))
            # Gone behind the session's back (another client, or its lifetime ran out).
            server.native("DELETE", f"/v1/sandboxes/{first}", key=alice)
            out = await m.ok("run_code", code="print(2)")
            second = sandbox_of(out)
            assert second != first and "2" in out
            assert sandbox_of(await m.ok("run_command", command="true")) == second
        return second

    second = anyio.run(main)
    server.wait_state(second, "deleted", key=alice)


def _open_http_session(server, key):
    """A raw `initialize`: (status, the session id or None, body)."""
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    req = urllib.request.Request(server.url + "/mcp", data=json.dumps(init).encode(), method="POST")
    for k, v in {"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                 "Accept": "application/json, text/event-stream"}.items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.headers.get("Mcp-Session-Id"), r.read()
    except urllib.error.HTTPError as e:
        return e.code, None, e.read()


def test_http_open_sessions_are_capped_per_tenant(server):
    key = server.tenant_key("capped")
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    opened = []
    try:
        for _ in range(16):
            status, sid, body = _open_http_session(server, key)
            assert status == 200 and sid, (status, body)
            opened.append(sid)
        status, sid, body = _open_http_session(server, key)
        assert status == 429 and sid is None, (status, body)
        err = json.loads(body)["error"]
        assert err["code"] == "limit_reached" and "16 of 16" in err["message"], err
        # Another tenant is not held up by this one.
        other_key = server.tenant_key("uncapped")
        status, other, _ = _open_http_session(server, other_key)
        assert status == 200 and other
        server.status("DELETE", "/mcp", key=other_key, headers={**headers, "Mcp-Session-Id": other})
        # Closing one makes room for one.
        status, _ = server.status("DELETE", "/mcp", key=key, headers={**headers, "Mcp-Session-Id": opened.pop()})
        # 204, not rmcp's 202: the official client warns on anything but 200 and 204.
        assert status == 204, status
        status, sid, body = _open_http_session(server, key)
        assert status == 200 and sid, (status, body)
        opened.append(sid)
    finally:
        for sid in opened:
            server.status("DELETE", "/mcp", key=key, headers={**headers, "Mcp-Session-Id": sid})


def test_concurrent_initializes_never_open_more_sessions_than_the_cap(server):
    """The cap is reserved before rmcp opens a session: 60 `initialize`s at once open at most 16."""
    import concurrent.futures

    key = server.tenant_key("racing")
    headers = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2025-06-18"}
    with concurrent.futures.ThreadPoolExecutor(max_workers=60) as pool:
        results = list(pool.map(lambda _: _open_http_session(server, key), range(60)))
    opened = [sid for status, sid, _ in results if status == 200 and sid]
    try:
        assert len(opened) == 16, [r[0] for r in results]
        assert all(status in (200, 429) for status, _, _ in results), [r[0] for r in results]
    finally:
        for sid in opened:
            server.status("DELETE", "/mcp", key=key, headers={**headers, "Mcp-Session-Id": sid})


def test_http_without_a_valid_key_is_401(server):
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    for key in (None, "sk_not_a_key"):
        status, body = server.status("POST", "/mcp", init, key=key, headers=headers)
        assert status == 401, (status, body)
        assert json.loads(body)["error"]["code"] == "unauthenticated"

    async def client_refused():
        with pytest.raises(Exception) as e, anyio.fail_after(30):
            async with streamable_http_client(server.url + "/mcp") as (read, write, _):
                async with ClientSession(read, write) as session:
                    await session.initialize()
        assert "401 Unauthorized" in repr(e.value), repr(e.value)

    anyio.run(client_refused)


def test_stdio_with_a_refused_key_exits_with_the_reason(server):
    env = dict(os.environ, SANDLOT_URL=server.url, SANDLOT_API_KEY="sk_not_a_key")
    p = subprocess.run([BINARY, "mcp"], env=env, input=b"", capture_output=True, timeout=30)
    assert p.returncode == 1, p
    assert b"unknown API key" in p.stderr and b"SANDLOT_API_KEY" in p.stderr, p.stderr
    assert p.stdout == b""


def test_stdio_help_teaches(server):
    out = subprocess.run([BINARY, "mcp", "--help"], capture_output=True, timeout=30, check=True).stdout.decode()
    for needle in ("SANDLOT_URL", "SANDLOT_API_KEY", '"mcpServers"', '"args": ["mcp"]', "deleted when it ends"):
        assert needle in out, needle


def test_stdio_session_end_deletes_on_sigterm_too(server, alice):
    """An MCP client that stops its server with SIGTERM instead of closing stdin."""
    env = dict(os.environ, SANDLOT_URL=server.url, SANDLOT_API_KEY=alice)
    p = subprocess.Popen([BINARY, "mcp"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        def send(msg):
            p.stdin.write(json.dumps(msg).encode() + b"\n")
            p.stdin.flush()

        send({"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": mcp.types.LATEST_PROTOCOL_VERSION, "capabilities": {},
                         "clientInfo": {"name": "t", "version": "0"}}})
        assert json.loads(p.stdout.readline())["id"] == 1
        send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
              "params": {"name": "run_code", "arguments": {"code": "print(5)"}}})
        answer = json.loads(p.stdout.readline())
        sid = sandbox_of(answer["result"]["content"][0]["text"])
        p.terminate()
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert server.native("GET", f"/v1/sandboxes/{sid}", key=alice)["state"] == "deleted"


def test_http_an_open_event_stream_ends_when_its_key_is_revoked(server):
    """A session's GET event stream lasts no longer than the key that opened it (as the native API's
    watch, log and exec streams): revoking the key ends it within the lease's recheck (5 s), not at the
    session's idle expiry (5 minutes)."""
    import http.client

    made = server.native("POST", "/v1/keys", {"tenant": "revoked-mcp"})
    key = made["key"]
    status, sid, body = _open_http_session(server, key)
    assert status == 200 and sid, (status, body)
    headers = {"Authorization": f"Bearer {key}", "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18",
               "Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    status, body = server.status("POST", "/mcp", note, key=key, headers=headers)
    assert 200 <= status < 300, (status, body)
    host = server.url.removeprefix("http://")
    conn = http.client.HTTPConnection(host, timeout=30)
    conn.request("GET", "/mcp", headers={**headers, "Accept": "text/event-stream"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type", "").startswith("text/event-stream"), resp.status
    server.native("DELETE", f"/v1/keys/{made['id']}")
    start = time.time()
    # Keepalives (every 15 s) may come first; the stream must end well before the session would.
    while resp.read1(4096):
        assert time.time() - start < 25, "the event stream outlived its key by 25 s"
    assert time.time() - start < 25
    conn.close()
