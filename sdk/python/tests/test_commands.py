"""Commands through the blocking SDK: results, streaming callbacks, stdin, timeouts, truncation, and
background processes (wait, kill, stdin, their event streams, reattaching from another client by pid)."""

import time

import pytest

import sandlot
from sandlot import Exited, Output, Sandbox, Started


def test_a_shell_line_answers_its_exit_code_and_both_streams(sbx):
    r = sbx.commands.run("id -un; echo oops >&2; exit 3")
    assert (r.status, r.exit_code, r.ok) == ("exited", 3, False)
    assert (r.stdout, r.stderr) == ("user\n", "oops\n")
    assert (r.stdout_bytes, r.stderr_bytes, r.truncated) == (5, 5, False)


def test_argv_cwd_env_user_and_stdin(sbx):
    sbx.files.mkdir("/tmp/work")
    r = sbx.commands.run(["sh", "-c", 'pwd; echo "$A$B"; id -u'], cwd="/tmp/work", env={"A": "x", "B": "y"}, user="root")
    assert r.ok and r.stdout == "/tmp/work\nxy\n0\n"
    assert sbx.commands.run(["wc", "-c"], stdin="hello world\n").stdout.strip() == "12"
    assert sbx.commands.run(["cat"], stdin=b"bytes in\n").stdout == "bytes in\n"
    missing = sbx.commands.run(["nosuchprog"])
    assert (missing.status, missing.exit_code) == ("exited", 127)
    assert "command not found" in missing.stderr


def test_a_timeout_ends_the_command_as_timeout(sbx):
    r = sbx.commands.run(["sleep", "30"], timeout=0.5)
    assert (r.status, r.exit_code, r.signal) == ("timeout", 124, 9)
    assert r.duration_ms < 10_000


def test_output_over_the_cap_keeps_head_and_tail(sbx):
    cmd = "head -c 5000 /dev/zero | tr '\\0' a; echo; seq 1 3 >&2"
    r = sbx.commands.run(cmd, max_output_bytes=1024)
    assert r.truncated and r.stdout_bytes == 5001 and r.stderr == "1\n2\n3\n"
    assert "[sandlot: 3977 bytes omitted]" in r.stdout
    assert r.stdout.startswith("a" * 512) and r.stdout.endswith("a" * 511 + "\n")
    # Streamed, the callbacks see head and tail; the result is the server's, marker included.
    seen = []
    streamed = sbx.commands.run(cmd, max_output_bytes=1024, on_stdout=seen.append)
    assert streamed.stdout == r.stdout and streamed.truncated and streamed.pid is not None
    assert "".join(seen) == "a" * 512 + "a" * 511 + "\n"


def test_streaming_callbacks_receive_output_as_it_comes(sbx):
    events = []
    r = sbx.commands.run(
        "echo one; sleep 1; echo two >&2; sleep 0.2; echo three",
        on_stdout=lambda d: events.append(("out", d, time.monotonic())),
        on_stderr=lambda d: events.append(("err", d, time.monotonic())),
    )
    done = time.monotonic()
    assert [(k, d) for k, d, _ in events] == [("out", "one\n"), ("err", "two\n"), ("out", "three\n")]
    assert done - events[0][2] >= 1.0, "the first chunk came while the command still ran"
    assert (r.stdout, r.stderr, r.exit_code) == ("one\nthree\n", "two\n", 0)
    assert r.pid is not None and r.pid >= 1


def test_background_stdin_then_wait(sbx):
    h = sbx.commands.run("while read l; do echo got $l; done; echo bye", background=True)
    assert isinstance(h, sandlot.CommandHandle) and h.pid >= 1
    h.send_stdin("a\n")
    h.send_stdin(b"b\n", eof=True)
    r = h.wait()
    assert (r.status, r.exit_code, r.stdout, r.pid) == ("exited", 0, "got a\ngot b\nbye\n", h.pid)
    with pytest.raises(sandlot.Conflict):
        h.send_stdin("too late")


def test_background_wait_feeds_the_callbacks_given_to_run(sbx):
    out = []
    h = sbx.commands.run("echo first; sleep 0.3; echo second", background=True, on_stdout=out.append)
    r = h.wait()
    assert "".join(out) == "first\nsecond\n" == r.stdout


def test_what_a_finished_command_leaves_is_listed_with_left_by_and_killable(sbx):
    r = sbx.commands.run("sleep 1000 & echo started", timeout=5)
    assert r.stdout == "started\n"
    command = [p for p in sbx.commands.list() if p.argv[-1] == "sleep 1000 & echo started"][-1]
    deadline = time.monotonic() + 5
    while not (left := [p for p in sbx.commands.list() if p.left_by == command.pid]):
        assert time.monotonic() < deadline, sbx.commands.list()
        time.sleep(0.05)
    assert left[0].running and left[0].argv == ["sleep", "1000"], left
    sbx.commands.kill(left[0].pid, 15)
    assert sbx.commands.connect(left[0].pid).wait().signal == 15


def test_kill_signals_the_process_and_a_second_kill_conflicts(sbx):
    h = sbx.commands.run(["sleep", "1000"], background=True, tag="sleeper")
    assert [p.pid for p in sbx.commands.list(tag="sleeper")] == [h.pid]
    assert h.info().running
    h.kill(15)
    r = h.wait()
    assert (r.status, r.signal, r.exit_code) == ("signaled", 15, 143)
    assert h.info().running is False and h.info().status == "signaled"
    with pytest.raises(sandlot.Conflict) as err:
        h.kill()
    assert err.value.status == 409
    h2 = sbx.commands.run(["sleep", "1000"], background=True)
    sbx.commands.kill(h2.pid)  # SIGKILL by default
    assert h2.wait().signal == 9


def test_iterating_a_handle_replays_then_follows(sbx):
    h = sbx.commands.run("for i in 1 2 3; do echo tick $i; sleep 0.2; done", background=True)
    events = list(h)
    assert isinstance(events[0], Started) and events[0].pid == h.pid
    assert "".join(e.data for e in events if isinstance(e, Output)) == "tick 1\ntick 2\ntick 3\n"
    assert isinstance(events[-1], Exited) and events[-1].exit_code == 0 and events[-1].stdout_bytes == 21
    # Once ended, the whole stream replays.
    assert [o.data for o in h.output()] == [e.data for e in events if isinstance(e, Output)]


def test_a_new_client_reattaches_by_pid_and_sees_the_output(server, key, sbx):
    h = sbx.commands.run("echo before; read x; echo after $x", background=True, tag="reattach")
    time.sleep(0.3)
    with sandlot.Client(server.url, key) as other:
        again = Sandbox.connect(sbx.id, client=other).commands.connect(h.pid)
        assert again.pid == h.pid and again.info().tag == "reattach"
        again.send_stdin("now\n", eof=True)
        chunks = [o.data for o in again.output()]
        assert "".join(chunks) == "before\nafter now\n"
        assert again.wait().stdout == "before\nafter now\n"
        with pytest.raises(sandlot.NotFound):
            Sandbox.connect(sbx.id, client=other).commands.connect(9999)


def test_another_tenant_cannot_reach_the_process(server, sbx):
    h = sbx.commands.run(["sleep", "30"], background=True)
    with sandlot.Client(server.url, server.tenant_key("intruder")) as other:
        with pytest.raises(sandlot.NotFound):
            other.call("POST", f"/v1/sandboxes/{sbx.id}/processes/{h.pid}/kill")
    assert h.info().running
    h.kill()
