"""examples/llm_loop.py: `run_in_sandbox` called directly, and the loop end to end on canned model
replies (`--script`), with no model."""

import pathlib
import re

import pytest

import llm_loop as ex
from sandlot import Sandbox

SCRIPT = pathlib.Path(ex.__file__).with_name("llm_loop_script.txt")


@pytest.fixture
def sbx(env):
    with Sandbox.create() as s:
        yield s


def test_stdout(sbx):
    out = ex.run_in_sandbox(sbx, "print('hello from', __name__)")
    assert out == "status: exited, exit code: 0\n--- stdout: 20 bytes ---\nhello from __main__\n--- stderr: empty ---\n"


def test_exception_traceback(sbx):
    out = ex.run_in_sandbox(sbx, "x = {}\nx['missing']\n")
    assert out.startswith("status: exited, exit code: 1\n"), out
    assert "Traceback (most recent call last):" in out
    assert "KeyError: 'missing'" in out


def test_large_output_truncated_with_counts(sbx):
    out = ex.run_in_sandbox(sbx, "import sys\nsys.stderr.write('e' * 50000)\n")
    half = ex.OUTPUT_LIMIT // 2
    assert f"--- stderr: 50000 bytes, only the first and last {half} shown ---" in out
    assert f"[sandlot: {50000 - 2 * half} bytes omitted]" in out


def test_timeout_is_reported(sbx, monkeypatch):
    monkeypatch.setattr(ex, "COMMAND_TIMEOUT_S", 1)
    out = ex.run_in_sandbox(sbx, "import time\nprint('start', flush=True)\ntime.sleep(30)\n")
    assert out.startswith("status: timeout, exit code: 124\n--- stdout: 6 bytes ---\nstart\n"), out


def test_loop_end_to_end_with_a_script(env, sandbox_state, capsys):
    assert ex.main(["What is fib(30)?", "--script", str(SCRIPT)]) == 0
    out = capsys.readouterr().out
    # Turn 1's program fails, its traceback goes back; turn 2's runs; turn 3 answers.
    assert "[turn 1] sandbox:\nstatus: exited, exit code: 1\n" in out
    assert "ZeroDivisionError: division by zero" in out
    assert "[turn 2] sandbox:\nstatus: exited, exit code: 0\n--- stdout: " in out
    assert "fib(30) = 832040\nmean growth per step: 27734.666666666668\n" in out
    assert out.rstrip().endswith("answer: The 30th Fibonacci number is 832040.")
    sandbox_id = re.search(r"^\[sandbox (\S+)\]$", out, re.MULTILINE).group(1)
    assert sandbox_state(sandbox_id) == "deleted"
    assert env.list_sandboxes() == []


def test_loop_feeds_the_sandbox_output_back_to_the_model(env):
    seen = []

    def model(messages):
        seen.append([m["content"] for m in messages])
        return "```python\nprint(2 ** 10)\n```" if len(seen) == 1 else "1024"

    assert ex.solve("2**10?", model, log=lambda _: None) == "1024"
    assert seen[1][-2] == "```python\nprint(2 ** 10)\n```"
    assert seen[1][-1].startswith("status: exited, exit code: 0\n--- stdout: 5 bytes ---\n1024\n")


def test_loop_stops_after_max_turns(env, tmp_path, capsys):
    script = tmp_path / "replies.txt"
    script.write_text("```python\nprint(1)\n```\n---\n```python\nprint(2)\n```\n---\nnever read\n")
    assert ex.main(["--script", str(script), "--max-turns", "2"]) == 1
    assert "no answer in 2 turns" in capsys.readouterr().err
    assert env.list_sandboxes() == []


def test_main_without_a_model_or_script_says_what_to_set(env, capsys):
    assert ex.main(["task"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
