"""A plain "LLM loop", no framework: ask a model for code, run it in a sandlot sandbox, feed back the
exit code, stdout and stderr, and repeat until the model answers without code or N turns pass.

The model is any OpenAI-compatible chat endpoint, reached with plain httpx (OPENAI_API_KEY, and
OPENAI_BASE_URL / OPENAI_MODEL optionally). `--script FILE` replays canned model replies instead
(separated by lines of `---`), so the loop runs end to end with no model at all:

    SANDLOT_URL=... SANDLOT_API_KEY=... python3 examples/llm_loop.py --script examples/llm_loop_script.txt
    SANDLOT_URL=... SANDLOT_API_KEY=... OPENAI_API_KEY=... python3 examples/llm_loop.py "task"
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Callable, Dict, Iterator, List, Optional

import httpx

from sandlot import Sandbox

OUTPUT_LIMIT = 4096
"""Bytes of each stream the model sees: the server keeps the first and last half, cuts the middle."""
COMMAND_TIMEOUT_S = 60
SYSTEM = (
    "You solve tasks by running Python 3 code in a Linux sandbox without network. To run code, reply "
    "with one ```python fenced block; you will get its exit code, stdout and stderr. When you know the "
    "answer, reply with it and no code block."
)
CODE_BLOCK = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)

Messages = List[Dict[str, str]]
Model = Callable[[Messages], str]


def run_in_sandbox(sbx: Sandbox, code: str) -> str:
    """Runs `code` as a Python program in `sbx`; answers the exit code and both streams (each capped at
    OUTPUT_LIMIT bytes, head and tail, with the full byte counts said), as the model reads them."""
    sbx.files.write("snippet.py", code)
    r = sbx.commands.run(["python3", "snippet.py"], timeout=COMMAND_TIMEOUT_S, max_output_bytes=OUTPUT_LIMIT)
    parts = [f"status: {r.status}, exit code: {r.exit_code}"]
    for name, text, size in (("stdout", r.stdout, r.stdout_bytes), ("stderr", r.stderr, r.stderr_bytes)):
        if size > OUTPUT_LIMIT:
            parts.append(f"--- {name}: {size} bytes, only the first and last {OUTPUT_LIMIT // 2} shown ---")
        else:
            parts.append(f"--- {name}: {size} bytes ---" if size else f"--- {name}: empty ---")
        if text:
            parts.append(text.removesuffix("\n"))
    return "\n".join(parts) + "\n"


def openai_model(api_key: str, base_url: str, model: str) -> Model:
    """A chat completion call per turn against an OpenAI-compatible endpoint."""
    http = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=120)

    def ask(messages: Messages) -> str:
        r = http.post("/chat/completions", json={"model": model, "messages": messages})
        r.raise_for_status()
        return str(r.json()["choices"][0]["message"]["content"] or "")

    return ask


def scripted_model(path: str) -> Model:
    """Canned replies from a file, in order, one per turn (separated by lines of `---`)."""
    with open(path, encoding="utf-8") as f:
        replies: Iterator[str] = iter(re.split(r"^---[ \t]*$\n?", f.read(), flags=re.MULTILINE))
    return lambda messages: next(replies, "(the script has no more replies)").strip()


def solve(task: str, ask: Model, max_turns: int = 5, log: Callable[[str], None] = print) -> Optional[str]:
    """The loop, in one sandbox deleted at the end: the model's final answer, or None when the turns
    run out first."""
    messages: Messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    with Sandbox.create() as sbx:
        log(f"[sandbox {sbx.id}]")
        for turn in range(1, max_turns + 1):
            reply = ask(messages)
            messages.append({"role": "assistant", "content": reply})
            log(f"[turn {turn}] model:\n{reply}")
            block = CODE_BLOCK.search(reply)
            if block is None:
                return reply
            feedback = run_in_sandbox(sbx, block.group(1))
            log(f"[turn {turn}] sandbox:\n{feedback}")
            messages.append({"role": "user", "content": feedback})
    return None


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("task", nargs="?", default="What is the 30th Fibonacci number? Compute it.")
    p.add_argument("--script", metavar="FILE", help="canned model replies, separated by lines of ---")
    p.add_argument("--max-turns", type=int, default=5)
    args = p.parse_args(argv)
    if args.script:
        ask = scripted_model(args.script)
    elif os.environ.get("OPENAI_API_KEY"):
        ask = openai_model(
            os.environ["OPENAI_API_KEY"],
            os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1"),
            os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        )
    else:
        print("set OPENAI_API_KEY (OPENAI_BASE_URL, OPENAI_MODEL optionally), or give --script FILE", file=sys.stderr)
        return 2
    answer = solve(args.task, ask, args.max_turns)
    if answer is None:
        print(f"no answer in {args.max_turns} turns", file=sys.stderr)
        return 1
    print(f"answer: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
