"""envd's process service as the official SDK drives it: commands.run, background commands and
reattaching, stdin, signals, both the sync and the async client."""

import asyncio
import time

import pytest
from e2b import AsyncSandbox, CommandExitException, ConnectionConfig, NotFoundException, Sandbox, TimeoutException


@pytest.fixture
def sbx(server):
    s = Sandbox.create(timeout=120)
    yield s
    s.kill()


def test_run_returns_stdout_stderr_and_exit_code_zero(sbx):
    r = sbx.commands.run("echo out; echo err >&2")
    assert (r.stdout, r.stderr, r.exit_code) == ("out\n", "err\n", 0)


def test_a_failing_command_raises_with_its_exit_code_and_output(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo partial; exit 3")
    assert e.value.exit_code == 3
    assert e.value.stdout == "partial\n"
    assert e.value.error in (None, "")


def test_envs_and_cwd_reach_the_command(sbx):
    r = sbx.commands.run('echo "$GREETING"; pwd', envs={"GREETING": "hello there"}, cwd="/tmp")
    assert r.stdout == "hello there\n/tmp\n"


def test_user_root_and_user_are_different_uids(sbx):
    assert sbx.commands.run("id -u").stdout.strip() == "1000"
    assert sbx.commands.run("id -u", user="root").stdout.strip() == "0"
    assert sbx.commands.run("id -u", user="user").stdout.strip() == "1000"


def test_timeout_raises_and_kills_the_command(sbx):
    started = time.monotonic()
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)
    assert time.monotonic() - started < 10
    # The deadline killed it: no `sleep 30` is left running (SIGKILL takes a moment to land).
    deadline = time.monotonic() + 5
    while [p for p in sbx.commands.list() if "sleep 30" in p.args] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in sbx.commands.list() if "sleep 30" in p.args] == []


def test_callbacks_see_output_as_it_comes(sbx):
    out, err = [], []
    sbx.commands.run("echo a; echo b >&2; echo c", on_stdout=out.append, on_stderr=err.append)
    assert "".join(out) == "a\nc\n"
    assert "".join(err) == "b\n"


def test_background_command_reattached_by_pid_replays_earlier_output(server):
    sbx = Sandbox.create(timeout=120)
    try:
        h = sbx.commands.run("echo before; sleep 2; echo after", background=True)
        pid = h.pid
        time.sleep(0.5)
        # The first client goes away entirely; the process lives on.
        h.disconnect()
        # A second client of its own (its own connections), from what the first was given at create.
        other = Sandbox(
            sandbox_id=sbx.sandbox_id,
            sandbox_domain=sbx.sandbox_domain,
            envd_version=sbx._envd_version,
            envd_access_token=sbx._envd_access_token,
            traffic_access_token=None,
            connection_config=ConnectionConfig(
                extra_sandbox_headers={"E2b-Sandbox-Id": sbx.sandbox_id, "X-Access-Token": sbx._envd_access_token}
            ),
        )
        assert pid in [p.pid for p in other.commands.list()]
        r = other.commands.connect(pid).wait()
        assert r.stdout == "before\nafter\n"
        assert r.exit_code == 0
        assert pid not in [p.pid for p in other.commands.list()]
    finally:
        sbx.kill()


def test_send_stdin_to_a_command_started_with_stdin(sbx):
    h = sbx.commands.run("head -n 2", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "one\n")
    sbx.commands.send_stdin(h.pid, "two\nthree\n")
    r = h.wait()
    assert r.stdout == "one\ntwo\n"


def test_close_stdin_gives_end_of_file(sbx):
    h = sbx.commands.run("wc -c", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "12345")
    sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout.strip() == "5"


def test_without_stdin_a_reader_sees_end_of_file_at_once(sbx):
    assert sbx.commands.run("cat; echo done", timeout=10).stdout == "done\n"


def test_kill_ends_a_command_with_a_signal_and_a_second_kill_finds_nothing(sbx):
    h = sbx.commands.run("sleep 60", background=True)
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException) as e:
        h.wait()
    assert e.value.exit_code == -1
    assert e.value.error in (None, "")
    assert sbx.commands.kill(h.pid) is False


def test_list_names_running_commands_with_their_argv(sbx):
    h = sbx.commands.run("sleep 30", background=True)
    procs = {p.pid: p for p in sbx.commands.list()}
    assert procs[h.pid].cmd == "/bin/bash"
    assert procs[h.pid].args == ["-l", "-c", "sleep 30"]
    h.kill()


def test_async_client_runs_streams_and_reattaches(server):
    async def main():
        sbx = await AsyncSandbox.create(timeout=120)
        try:
            r = await sbx.commands.run("echo async; id -un", user="root")
            assert r.stdout == "async\nroot\n"
            with pytest.raises(CommandExitException) as e:
                await sbx.commands.run("exit 7")
            assert e.value.exit_code == 7
            seen = []
            h = await sbx.commands.run("echo x; sleep 1; echo y", background=True, on_stdout=seen.append)
            again = await sbx.commands.connect(h.pid)
            r = await again.wait()
            assert r.stdout == "x\ny\n"
            await h.wait()
            assert "".join(seen) == "x\ny\n"
            h = await sbx.commands.run("cat", background=True, stdin=True)
            await sbx.commands.send_stdin(h.pid, "piped")
            await sbx.commands.close_stdin(h.pid)
            assert (await h.wait()).stdout == "piped"
        finally:
            await sbx.kill()

    asyncio.run(main())


def test_connecting_to_an_unknown_pid_is_not_found(sbx):
    with pytest.raises(NotFoundException):
        sbx.commands.connect(4000000)
