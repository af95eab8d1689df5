"""envd's pty processes as the official SDK drives them: a terminal of the asked size, input,
resize, kill; sync and async."""

import asyncio
import threading

import pytest
from e2b import AsyncSandbox, CommandExitException, Sandbox
from e2b.sandbox.commands.command_handle import PtySize


@pytest.fixture
def sbx(server):
    s = Sandbox.create(timeout=120)
    yield s
    s.kill()


def test_a_pty_has_its_size_takes_input_and_follows_a_resize(sbx):
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.send_stdin(h.pid, b"stty size; tty\n")
    out = bytearray()
    events = iter(h)
    # The resize must land after the first `stty` ran: read until its answer is in.
    for _, _, pty in events:
        out.extend(pty or b"")
        if b"/dev/pts/" in out:
            break
    assert b"24 80" in out
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, b"stty size; exit 0\n")
    for _, _, pty in events:
        out.extend(pty or b"")
    assert b"30 100" in out
    r = h.wait()
    assert r.exit_code == 0
    # A terminal's output is pty data, not stdout.
    assert r.stdout == ""


def test_killing_a_pty_ends_it_with_a_signal(sbx):
    h = sbx.pty.create(PtySize(rows=10, cols=40))
    assert sbx.pty.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1


def test_async_pty(server):
    async def main():
        sbx = await AsyncSandbox.create(timeout=120)
        try:
            out = bytearray()
            h = await sbx.pty.create(PtySize(rows=12, cols=34), on_data=out.extend)
            await sbx.pty.send_stdin(h.pid, b"stty size; exit 0\n")
            r = await h.wait()
            assert r.exit_code == 0
            assert "12 34" in out.decode(errors="replace")
        finally:
            await sbx.kill()

    asyncio.run(main())


def test_a_pty_keeps_streaming_past_the_output_cap(sbx):
    # A terminal is a long session: its output streams however much is printed (a kept scrollback,
    # not a command's capped head and tail, whose live output stopped at the cap and froze the shell).
    # A reader more than the 256 KiB scrollback behind skips ahead, so not every byte need arrive.
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    # Should the stream freeze, the kill ends it and the assertion below says so.
    watchdog = threading.Timer(60, lambda: sbx.pty.kill(h.pid))
    watchdog.start()
    try:
        sbx.pty.send_stdin(h.pid, b"head -c 3000000 /dev/zero | tr '\\0' x; echo; echo done-$((6*7))\n")
        out = bytearray()
        try:
            for _, _, pty in h:
                out.extend(pty or b"")
                if b"done-42" in out:
                    break
        except CommandExitException:
            pass
    finally:
        watchdog.cancel()
    assert b"done-42" in out, f"the terminal stopped streaming after {len(out)} bytes"
    assert out.count(b"x") >= 256 << 10
    sbx.pty.kill(h.pid)
