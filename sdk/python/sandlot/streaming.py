"""NDJSON streams of the API (``Accept: application/x-ndjson``): exec and logs events, and the progress
lines of pulls, imports and builds. An ``error`` line becomes the matching :class:`SandlotError`."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Dict, Iterator, Optional

import httpx

from .errors import ProtocolError, SandlotError, error_from_detail
from .models import ExecEvent, Exited, Output, Started, Truncated

#: The media type that switches exec, pull, import and build answers to NDJSON.
NDJSON = "application/x-ndjson"


def parse_line(line: str) -> Optional[Dict[str, Any]]:
    """One NDJSON line as an object, ``None`` for a blank line."""
    line = line.strip()
    if not line:
        return None
    try:
        value = json.loads(line)
    except ValueError as e:
        raise ProtocolError(f"unreadable stream line from the server: {line[:200]!r}") from e
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise ProtocolError(f"stream line without a type: {line[:200]!r}")
    return value


def exec_event(d: Dict[str, Any]) -> ExecEvent:
    """The typed event of an exec or logs line; an ``error`` line is raised."""
    kind = d["type"]
    if kind == "started":
        return Started(pid=int(d["pid"]))
    if kind in ("stdout", "stderr"):
        return Output(stream=kind, data=d.get("data", ""))
    if kind == "truncated":
        return Truncated(stream=d.get("stream", ""))
    if kind == "exited":
        return Exited(
            status=d["status"],
            exit_code=int(d["exit_code"]),
            stdout_bytes=int(d.get("stdout_bytes", 0)),
            stderr_bytes=int(d.get("stderr_bytes", 0)),
            truncated=bool(d.get("truncated", False)),
            duration_ms=int(d.get("duration_ms", 0)),
            signal=None if d.get("signal") is None else int(d["signal"]),
        )
    if kind == "error":
        # A server-side break mid-stream: the process state is unknown.
        raise error_from_detail(d)
    raise ProtocolError(f"unknown exec event type {kind!r}")


def progress_error(d: Dict[str, Any]) -> SandlotError:
    """The exception of a pull, import or build ``error`` line (``{"error": {...}, "line"?, "tail"?}``)."""
    detail = d.get("error")
    if not isinstance(detail, dict):
        detail = {"code": "internal", "message": str(detail)}
    line = d.get("line")
    tail = d.get("tail")
    err = error_from_detail(detail, line=None if line is None else int(line), tail=tail)
    if tail:
        # The failed RUN's output is what says why; keep it in the text a traceback shows.
        err.message = f"{err.message}\n--- last output ---\n{tail}"
        err.args = (err.message,)
    return err


def lines(response: httpx.Response) -> Iterator[Dict[str, Any]]:
    """The objects of a streamed NDJSON answer, as they come."""
    for text in response.iter_lines():
        d = parse_line(text)
        if d is not None:
            yield d


async def alines(response: httpx.Response) -> AsyncIterator[Dict[str, Any]]:
    """The objects of a streamed NDJSON answer, as they come (async)."""
    async for text in response.aiter_lines():
        d = parse_line(text)
        if d is not None:
            yield d
