"""examples/openai_agents_tool.py: its tools called the way the Agents SDK calls them
(`FunctionTool.on_invoke_tool` with a `ToolContext` whose context is the run's SandboxSession), and a
whole `Runner.run` driven by the SDK's own ScriptedModel (no model service)."""

import json

import pytest
from agents.testing import ScriptedModel, assistant_message, function_call
from agents.tool_context import ToolContext

import openai_agents_tool as ex


async def invoke(tool, session, **args):
    raw = json.dumps(args)
    ctx = ToolContext(context=session, tool_name=tool.name, tool_call_id="call_1", tool_arguments=raw)
    return await tool.on_invoke_tool(ctx, raw)


@pytest.mark.asyncio
async def test_python_stdout_one_sandbox_deleted_at_close(env, sandbox_state):
    session = ex.SandboxSession()
    assert session.sandbox_id is None  # nothing is made before the first tool call
    try:
        out = await invoke(ex.run_python, session, code="import sys\nprint(6 * 7)\nprint(sys.version_info[0])")
        assert out.startswith("status: exited, exit code: 0\n"), out
        assert "--- stdout: 5 bytes ---\n42\n3\n" in out
        assert "--- stderr: empty ---" in out
        first = session.sandbox_id
        # The same sandbox for the run's next call: the program file the last call wrote is there.
        out = await invoke(ex.run_shell, session, command="cat snippet.py; hostname")
        assert "print(6 * 7)" in out
        assert session.sandbox_id == first
        assert [s.id for s in env.list_sandboxes()] == [first]
    finally:
        await session.close()
    assert sandbox_state(first) == "deleted"
    assert env.list_sandboxes() == []


@pytest.mark.asyncio
async def test_exception_traceback_comes_back_as_text(env):
    session = ex.SandboxSession()
    try:
        code = "def parse(s):\n    return int(s)\n\nparse('forty-two')\n"
        out = await invoke(ex.run_python, session, code=code)
    finally:
        await session.close()
    assert out.startswith("status: exited, exit code: 1\n"), out
    assert "Traceback (most recent call last):" in out
    assert 'snippet.py", line 2, in parse' in out
    assert "ValueError: invalid literal for int() with base 10: 'forty-two'" in out


@pytest.mark.asyncio
async def test_shell_exit_code_and_both_streams(env):
    session = ex.SandboxSession()
    try:
        out = await invoke(ex.run_shell, session, command="echo out; echo err >&2; exit 3")
    finally:
        await session.close()
    assert out == "status: exited, exit code: 3\n--- stdout: 4 bytes ---\nout\n--- stderr: 4 bytes ---\nerr\n"


@pytest.mark.asyncio
async def test_large_output_truncated_with_counts(env):
    session = ex.SandboxSession()
    try:
        out = await invoke(ex.run_python, session, code="print('a' * 100000 + 'END')")
    finally:
        await session.close()
    half = ex.OUTPUT_LIMIT // 2
    assert f"--- stdout: 100004 bytes, only the first and last {half} shown ---" in out
    assert f"[sandlot: {100004 - 2 * half} bytes omitted]" in out
    assert out.endswith("aaaEND\n--- stderr: empty ---\n")
    assert len(out) < ex.OUTPUT_LIMIT + 300


@pytest.mark.asyncio
async def test_sandlot_error_is_told_to_the_model(env):
    """A failure in the tool reaches the model as sandlot's message (the SDK's default hides it)."""
    session = ex.SandboxSession(image="no-such-image")
    try:
        out = await invoke(ex.run_shell, session, command="true")
    finally:
        await session.close()
    assert out.startswith("sandbox error ("), out
    assert "no-such-image" in out
    assert env.list_sandboxes() == []


@pytest.mark.asyncio
async def test_runner_run_with_a_scripted_model(env, sandbox_state):
    """The whole agent loop: the model asks for both tools, reads their results, answers; the run's
    sandbox is deleted when it ends."""
    model = ScriptedModel(
        [
            [function_call("run_python", {"code": "print(sum(range(10)))"}, call_id="c1")],
            [function_call("run_shell", {"command": "exit 7"}, call_id="c2")],
            [assistant_message("The sum is 45.")],
        ]
    )
    session = ex.SandboxSession()
    answer = await ex.run_agent("Sum 0..9", model=model, session=session)
    assert answer == "The sum is 45."
    model.assert_complete()
    outputs = {
        item["call_id"]: item["output"]
        for item in model.calls[2].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert "--- stdout: 3 bytes ---\n45\n" in outputs["c1"]
    assert outputs["c2"].startswith("status: exited, exit code: 7\n")
    assert sandbox_state(session.sandbox_id) == "deleted"
    assert env.list_sandboxes() == []


def test_tool_schemas():
    assert ex.run_python.params_json_schema["required"] == ["code"]
    assert ex.run_shell.params_json_schema["required"] == ["command"]
    assert ex.run_python.params_json_schema["properties"]["code"]["description"] == "The complete program."


def test_main_without_a_model_key_says_what_to_set(env, capsys):
    assert ex.main(["task"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
