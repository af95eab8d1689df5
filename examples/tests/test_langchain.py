"""examples/langchain_tool.py: its tools called the way LangChain calls them (`BaseTool.invoke`, with
arguments or with a model's ToolCall, which answers a ToolMessage)."""

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.utils.function_calling import convert_to_openai_tool

import langchain_tool as ex


def tools(session):
    return {t.name: t for t in session.tools()}


def test_python_stdout_one_sandbox_deleted_at_close(env, sandbox_state):
    with ex.SandboxSession() as session:
        t = tools(session)
        assert session.sandbox_id is None  # nothing is made before the first tool call
        out = t["run_python"].invoke({"code": "print(6 * 7)"})
        assert out == "status: exited, exit code: 0\n--- stdout: 3 bytes ---\n42\n--- stderr: empty ---\n"
        first = session.sandbox_id
        # A model's tool call: the answer is a ToolMessage for that call.
        msg = t["run_shell"].invoke(
            {"type": "tool_call", "id": "call_9", "name": "run_shell", "args": {"command": "cat snippet.py"}}
        )
        assert isinstance(msg, ToolMessage) and msg.tool_call_id == "call_9"
        assert "print(6 * 7)" in msg.content  # the same sandbox: the last call's file is there
        assert [s.id for s in env.list_sandboxes()] == [first]
    assert sandbox_state(first) == "deleted"
    assert env.list_sandboxes() == []


def test_exception_traceback_comes_back_as_text(env):
    with ex.SandboxSession() as session:
        out = tools(session)["run_python"].invoke({"code": "import json\njson.loads('{oops')\n"})
    assert out.startswith("status: exited, exit code: 1\n"), out
    assert "Traceback (most recent call last):" in out
    assert 'snippet.py", line 2, in <module>' in out
    assert "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes" in out


def test_shell_exit_code_and_both_streams(env):
    with ex.SandboxSession() as session:
        out = tools(session)["run_shell"].invoke({"command": "echo out; echo err >&2; exit 3"})
    assert out == "status: exited, exit code: 3\n--- stdout: 4 bytes ---\nout\n--- stderr: 4 bytes ---\nerr\n"


def test_large_output_truncated_with_counts(env):
    with ex.SandboxSession() as session:
        out = tools(session)["run_shell"].invoke({"command": "seq 1 100000; seq 1 10 >&2"})
    half = ex.OUTPUT_LIMIT // 2
    assert f"--- stdout: 588895 bytes, only the first and last {half} shown ---\n1\n2\n3\n" in out
    assert f"[sandlot: {588895 - 2 * half} bytes omitted]" in out
    assert "99999\n100000\n--- stderr: 21 bytes ---\n1\n2\n" in out
    assert len(out) < ex.OUTPUT_LIMIT + 300


def test_schemas_convert_for_a_chat_model():
    with ex.SandboxSession() as session:
        schema = convert_to_openai_tool(tools(session)["run_python"])["function"]
    assert schema["name"] == "run_python"
    assert schema["parameters"]["required"] == ["code"]
    assert schema["parameters"]["properties"]["code"]["description"] == "The complete program."


class ScriptedChatModel(GenericFakeChatModel):
    """langchain-core's own fake chat model (canned AIMessages, in order), taking tools as a real chat
    model does and keeping what it was sent."""

    seen: list = []

    def bind_tools(self, tools, **kwargs):
        self.seen.append(("tools", [t.name for t in tools]))
        return self

    def _generate(self, messages, *args, **kwargs):
        self.seen.append(("messages", list(messages)))
        return super()._generate(messages, *args, **kwargs)


def test_run_agent_with_a_scripted_chat_model(env):
    """`run_agent`'s loop: the model's tool calls run in one sandbox, their ToolMessages go back, its
    answer ends the loop, and the sandbox is gone after."""
    replies = [
        AIMessage("", tool_calls=[{"id": "c1", "name": "run_python", "args": {"code": "print(sum(range(10)))"}}]),
        AIMessage("", tool_calls=[{"id": "c2", "name": "run_shell", "args": {"command": "exit 7"}}]),
        AIMessage("The sum is 45."),
    ]
    model = ScriptedChatModel(messages=iter(replies), seen=[])
    assert ex.run_agent(model, "Sum 0..9") == "The sum is 45."
    assert model.seen[0] == ("tools", ["run_python", "run_shell"])
    last = model.seen[-1][1]
    results = {m.tool_call_id: m.content for m in last if isinstance(m, ToolMessage)}
    assert "--- stdout: 3 bytes ---\n45\n" in results["c1"]
    assert results["c2"].startswith("status: exited, exit code: 7\n")
    assert env.list_sandboxes() == []


def test_main_without_a_model_key_says_what_to_set(env, capsys):
    assert ex.main(["task"]) == 2
    assert "OPENAI_API_KEY" in capsys.readouterr().err
