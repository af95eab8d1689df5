"""Sandboxed code execution as LangChain tools (`langchain-core`).

`SandboxSession.tools()` gives two tools, `run_python` and `run_shell`, bound to one sandlot sandbox:
made on the first tool call, deleted when the session closes (`with SandboxSession() as session:`), so a
conversation's calls share files. What comes back to the model is the exit code and the output, each
stream capped at OUTPUT_LIMIT bytes by the server (head and tail kept) with the full byte counts said.

`main()` wires them to a chat model with `bind_tools` and runs the tool calls it asks for, a few rounds;
it needs `langchain-openai` and OPENAI_API_KEY (any OpenAI-compatible endpoint via OPENAI_BASE_URL).

    SANDLOT_URL=... SANDLOT_API_KEY=... OPENAI_API_KEY=... python3 examples/langchain_tool.py "task"
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any, List, Optional

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.tools import BaseTool, tool

import sandlot
from sandlot import CommandResult, Sandbox

OUTPUT_LIMIT = 4096
"""Bytes of each stream the model sees: the server keeps the first and last half, cuts the middle."""
COMMAND_TIMEOUT_S = 60
SANDBOX_LIFETIME_S = 900
"""A backstop: the sandbox expires then even if this process dies before deleting it."""


def format_result(r: CommandResult) -> str:
    """The exit code and both streams, with their byte counts, as the model reads them."""
    parts = [f"status: {r.status}, exit code: {r.exit_code}"]
    for name, text, size in (("stdout", r.stdout, r.stdout_bytes), ("stderr", r.stderr, r.stderr_bytes)):
        if size > OUTPUT_LIMIT:
            parts.append(f"--- {name}: {size} bytes, only the first and last {OUTPUT_LIMIT // 2} shown ---")
        else:
            parts.append(f"--- {name}: {size} bytes ---" if size else f"--- {name}: empty ---")
        if text:
            parts.append(text.removesuffix("\n"))
    return "\n".join(parts) + "\n"


class SandboxSession:
    """One sandbox for one conversation: made on first use, deleted by :meth:`close` (or the end of a
    ``with`` block)."""

    def __init__(self, image: Optional[str] = None) -> None:
        self.image = image
        self.sandbox_id: Optional[str] = None
        self._sbx: Optional[Sandbox] = None
        self._lock = threading.Lock()  # LangChain may run tool calls in threads

    def sandbox(self) -> Sandbox:
        with self._lock:
            if self._sbx is None:
                self._sbx = Sandbox.create(self.image, timeout=SANDBOX_LIFETIME_S)
                self.sandbox_id = self._sbx.id
            return self._sbx

    def close(self) -> None:
        sbx, self._sbx = self._sbx, None
        if sbx is not None:
            try:
                sbx.delete()
            except sandlot.NotFound:
                pass  # expired already
            finally:
                sbx.close()

    def __enter__(self) -> SandboxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tools(self) -> List[BaseTool]:
        @tool(parse_docstring=True)
        def run_python(code: str) -> str:
            """Run a Python 3 program in an isolated Linux sandbox (no network) and get its exit code,
            stdout and stderr. Files persist between calls; the program runs as /home/user/snippet.py.
            Print what you want to see.

            Args:
                code: The complete program.
            """
            sbx = self.sandbox()
            sbx.files.write("snippet.py", code)
            result = sbx.commands.run(
                ["python3", "snippet.py"], timeout=COMMAND_TIMEOUT_S, max_output_bytes=OUTPUT_LIMIT
            )
            return format_result(result)

        @tool(parse_docstring=True)
        def run_shell(command: str) -> str:
            """Run a shell command (/bin/sh -c) in the same isolated Linux sandbox (no network) and get
            its exit code, stdout and stderr.

            Args:
                command: The command line.
            """
            result = self.sandbox().commands.run(command, timeout=COMMAND_TIMEOUT_S, max_output_bytes=OUTPUT_LIMIT)
            return format_result(result)

        return [run_python, run_shell]


def run_agent(model: Any, task: str, max_rounds: int = 8) -> str:
    """A minimal tool-calling loop: the model answers, its tool calls run, their ToolMessages go back,
    until it answers without calling a tool."""
    with SandboxSession() as session:
        tools = {t.name: t for t in session.tools()}
        llm = model.bind_tools(list(tools.values()))
        messages: List[BaseMessage] = [
            SystemMessage("Solve the task by writing and running code with your tools; answer with the result."),
            HumanMessage(task),
        ]
        for _ in range(max_rounds):
            reply = llm.invoke(messages)
            messages.append(reply)
            if not reply.tool_calls:
                return str(reply.content)
            for call in reply.tool_calls:
                messages.append(tools[call["name"]].invoke(call))  # a ToolCall in, a ToolMessage out
        return "(no answer within the rounds allowed)"


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    task = " ".join(argv) or "What is the 30th Fibonacci number? Compute it."
    if not os.environ.get("OPENAI_API_KEY"):
        print(
            "set OPENAI_API_KEY to run the model (and SANDLOT_URL / SANDLOT_API_KEY for the server; "
            "OPENAI_MODEL, OPENAI_BASE_URL optionally); the tools alone run without it: see examples/tests",
            file=sys.stderr,
        )
        return 2
    try:
        from langchain_openai import ChatOpenAI
    except ImportError:
        print("the chat model needs langchain-openai: pip install langchain-openai", file=sys.stderr)
        return 2
    print(run_agent(ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini")), task))
    return 0


if __name__ == "__main__":
    sys.exit(main())
