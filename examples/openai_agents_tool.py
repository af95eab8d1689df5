"""Sandboxed code execution as tools of the OpenAI Agents SDK (`openai-agents`).

Two tools, `run_python` and `run_shell`, run what the model writes in a sandlot sandbox: one sandbox per
agent run, made on the run's first tool call (a run that calls no tool costs nothing) and deleted when the
run ends. The sandbox travels in the run's context (`Runner.run(..., context=SandboxSession())`), so files
one call writes are there for the next. What comes back to the model is the exit code and the output,
each stream capped at OUTPUT_LIMIT bytes by the server (head and tail kept) with the full byte counts said.

    SANDLOT_URL=... SANDLOT_API_KEY=... OPENAI_API_KEY=... python3 examples/openai_agents_tool.py "task"
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any, Optional, Union

from agents import Agent, Model, RunContextWrapper, Runner, function_tool

import sandlot
from sandlot import AsyncSandbox, CommandResult

OUTPUT_LIMIT = 4096
"""Bytes of each stream the model sees: the server keeps the first and last half, cuts the middle."""
COMMAND_TIMEOUT_S = 60
SANDBOX_LIFETIME_S = 900
"""A backstop: the sandbox expires then even if this process dies before deleting it."""


class SandboxSession:
    """The run's context: one sandbox, made on first use, deleted by :meth:`close`."""

    def __init__(self, image: Optional[str] = None) -> None:
        self.image = image
        self.sandbox_id: Optional[str] = None
        self._sbx: Optional[AsyncSandbox] = None
        self._lock = asyncio.Lock()  # the model may call tools in parallel

    async def sandbox(self) -> AsyncSandbox:
        async with self._lock:
            if self._sbx is None:
                self._sbx = await AsyncSandbox.create(self.image, timeout=SANDBOX_LIFETIME_S)
                self.sandbox_id = self._sbx.id
            return self._sbx

    async def close(self) -> None:
        sbx, self._sbx = self._sbx, None
        if sbx is not None:
            try:
                await sbx.delete()
            except sandlot.NotFound:
                pass  # expired already
            finally:
                await sbx.close()


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


def sandbox_error(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What the model reads when a tool fails: sandlot's own message (it holds no secrets), else a
    generic line as the SDK's default gives."""
    if isinstance(error, sandlot.SandlotError):
        return f"sandbox error ({error.code}): {error.message}"
    return "An error occurred while running the tool. Please try again."


@function_tool(failure_error_function=sandbox_error)
async def run_python(ctx: RunContextWrapper[SandboxSession], code: str) -> str:
    """Run a Python 3 program in an isolated Linux sandbox (no network) and get its exit code, stdout
    and stderr. Files persist between calls in this conversation; the program runs as
    /home/user/snippet.py. Print what you want to see.

    Args:
        code: The complete program.
    """
    sbx = await ctx.context.sandbox()
    await sbx.files.write("snippet.py", code)
    result = await sbx.commands.run(
        ["python3", "snippet.py"], timeout=COMMAND_TIMEOUT_S, max_output_bytes=OUTPUT_LIMIT
    )
    return format_result(result)


@function_tool(failure_error_function=sandbox_error)
async def run_shell(ctx: RunContextWrapper[SandboxSession], command: str) -> str:
    """Run a shell command (/bin/sh -c) in the same isolated Linux sandbox (no network) and get its
    exit code, stdout and stderr.

    Args:
        command: The command line.
    """
    sbx = await ctx.context.sandbox()
    result = await sbx.commands.run(command, timeout=COMMAND_TIMEOUT_S, max_output_bytes=OUTPUT_LIMIT)
    return format_result(result)


def make_agent(model: Union[str, Model, None] = None) -> Agent[SandboxSession]:
    return Agent[SandboxSession](
        name="Coder",
        instructions="Solve the task by writing and running code with your tools; answer with the result.",
        tools=[run_python, run_shell],
        model=model or os.environ.get("OPENAI_MODEL"),  # None: the SDK's default model
    )


async def run_agent(
    task: str, model: Union[str, Model, None] = None, session: Optional[SandboxSession] = None
) -> str:
    """One agent run with its own sandbox (``session``, else a new one on the default image), deleted
    at the end whatever happens."""
    session = session or SandboxSession()
    try:
        result = await Runner.run(make_agent(model), task, context=session)
        return str(result.final_output)
    finally:
        await session.close()


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    task = " ".join(argv) or "What is the 30th Fibonacci number? Compute it."
    if not os.environ.get("OPENAI_API_KEY"):
        print(
            "set OPENAI_API_KEY to run the agent (and SANDLOT_URL / SANDLOT_API_KEY for the server; "
            "OPENAI_MODEL optionally); the tools alone run without it: see examples/tests",
            file=sys.stderr,
        )
        return 2
    print(asyncio.run(run_agent(task)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
