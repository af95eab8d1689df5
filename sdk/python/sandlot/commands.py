"""Running commands in a sandbox: ``sbx.commands.run(...)``, background processes and their handles.

A foreground command answers a :class:`~sandlot.models.CommandResult` once it has ended; with
``on_stdout``/``on_stderr`` its output is streamed to them as it comes (NDJSON). ``background=True``
answers a handle at once: wait for it, kill it, write to its stdin, iterate its events (replayed from its
start, then live), from this client or from another one that reattaches by pid
(``sbx.commands.connect(pid)``).
"""

from __future__ import annotations

import inspect
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Union,
    overload,
)

from .errors import NotFound, ProtocolError
from .models import CommandResult, ExecEvent, Exited, Output, ProcessInfo, Started, User
from .streaming import NDJSON, alines, exec_event, lines

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: Receives each chunk of a stream's output as text.
OutputCallback = Callable[[str], None]
#: Receives each chunk of output; may be a coroutine function.
AsyncOutputCallback = Callable[[str], Union[None, Awaitable[None]]]


def exec_body(
    cmd: Union[str, Sequence[str]],
    *,
    cwd: Optional[str],
    env: Optional[Mapping[str, str]],
    user: Optional[User],
    stdin: Union[str, bytes, None],
    timeout: Optional[float],
    background: bool,
    tag: Optional[str],
    max_output_bytes: Optional[int],
    stdin_open: Optional[bool],
) -> Dict[str, Any]:
    """The body of ``POST …/exec``: a string runs under ``/bin/sh -c``, a sequence runs as argv."""
    body: Dict[str, Any] = {}
    if isinstance(cmd, str):
        body["shell"] = cmd
    else:
        body["argv"] = list(cmd)
    if isinstance(stdin, bytes):
        # The API carries stdin as UTF-8 text; anything else would be mangled on the way.
        stdin = stdin.decode("utf-8")
    for key, value in (
        ("cwd", cwd),
        ("user", user),
        ("stdin", stdin),
        ("timeout_s", timeout),
        ("tag", tag),
        ("max_output_bytes", max_output_bytes),
        ("stdin_open", stdin_open),
    ):
        if value is not None:
            body[key] = value
    if env:
        body["env"] = dict(env)
    if background:
        body["background"] = True
    return body


class _Collector:
    """Builds a :class:`CommandResult` from a stream's events."""

    def __init__(self) -> None:
        self.pid: Optional[int] = None
        self.out: List[str] = []
        self.err: List[str] = []
        self.exited: Optional[Exited] = None

    def feed(self, ev: ExecEvent) -> None:
        if isinstance(ev, Started):
            self.pid = ev.pid
        elif isinstance(ev, Output):
            (self.out if ev.stream == "stdout" else self.err).append(ev.data)
        elif isinstance(ev, Exited):
            self.exited = ev

    def needs_wait(self) -> bool:
        """A truncated stream lacks the server's omission marker; its ``wait`` answer has the exact text."""
        return self.exited is not None and self.exited.truncated and self.pid is not None

    def result(self) -> CommandResult:
        ex = self.exited
        if ex is None:
            raise ProtocolError("the command's stream ended before its `exited` event")
        return CommandResult(
            status=ex.status,
            exit_code=ex.exit_code,
            stdout="".join(self.out),
            stderr="".join(self.err),
            stdout_bytes=ex.stdout_bytes,
            stderr_bytes=ex.stderr_bytes,
            truncated=ex.truncated,
            duration_ms=ex.duration_ms,
            signal=ex.signal,
            pid=self.pid,
        )


def _dispatch(ev: ExecEvent, on_stdout: Optional[OutputCallback], on_stderr: Optional[OutputCallback]) -> None:
    if isinstance(ev, Output):
        cb = on_stdout if ev.stream == "stdout" else on_stderr
        if cb is not None:
            cb(ev.data)


async def _adispatch(
    ev: ExecEvent, on_stdout: Optional[AsyncOutputCallback], on_stderr: Optional[AsyncOutputCallback]
) -> None:
    if isinstance(ev, Output):
        cb = on_stdout if ev.stream == "stdout" else on_stderr
        if cb is not None:
            r = cb(ev.data)
            if inspect.isawaitable(r):
                await r


def _find(processes: Iterable[ProcessInfo], pid: int, sandbox_id: str) -> ProcessInfo:
    for p in processes:
        if p.pid == pid:
            return p
    raise NotFound(f"process {pid} not found in sandbox {sandbox_id}", code="not_found", status=404)


class CommandHandle:
    """A process started through the API, by its API ``pid`` (not the kernel's).

    Iterating it yields its :data:`~sandlot.models.ExecEvent` s from its start (replayed), then live
    until it exits; any number of handles, in any client, may do so at once.
    """

    def __init__(
        self,
        client: Client,
        sandbox_id: str,
        pid: int,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> None:
        self._client = client
        self.sandbox_id = sandbox_id
        self.pid = pid
        """The API process id; ``sbx.commands.connect(pid)`` finds it again."""
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr

    def _path(self, what: str) -> str:
        return f"/v1/sandboxes/{self.sandbox_id}/processes/{self.pid}/{what}"

    def __iter__(self) -> Iterator[ExecEvent]:
        with self._client.stream("GET", self._path("logs")) as response:
            for d in lines(response):
                yield exec_event(d)

    def output(self) -> Iterator[Output]:
        """Only the output chunks of :meth:`__iter__`, stdout and stderr in the order written."""
        for ev in self:
            if isinstance(ev, Output):
                yield ev

    def wait(
        self, on_stdout: Optional[OutputCallback] = None, on_stderr: Optional[OutputCallback] = None
    ) -> CommandResult:
        """Blocks until the process ends and answers its result. The callbacks (or those given to
        ``run``) receive its output from its start while waiting."""
        on_stdout = on_stdout or self._on_stdout
        on_stderr = on_stderr or self._on_stderr
        if on_stdout is not None or on_stderr is not None:
            for ev in self:
                _dispatch(ev, on_stdout, on_stderr)
        return CommandResult.from_json(self._client.call("POST", self._path("wait"), wait=True), pid=self.pid)

    def kill(self, signal: Optional[int] = None) -> None:
        """Sends ``signal`` (default 9, SIGKILL) to the process group; it then ends ``signaled``.
        Raises :class:`~sandlot.errors.Conflict` if it has already exited."""
        self._client.request("POST", self._path("kill"), json=None if signal is None else {"signal": signal})

    def send_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Writes UTF-8 ``data`` to the process's stdin; ``eof=True`` closes stdin after it."""
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        self._client.request("POST", self._path("stdin"), json={"data": text, "eof": eof})

    def close_stdin(self) -> None:
        """Closes the process's stdin (it reads end of file)."""
        self.send_stdin("", eof=True)

    def info(self) -> ProcessInfo:
        """The process as the server lists it (running, status, exit code, argv, tag)."""
        d = self._client.call("GET", f"/v1/sandboxes/{self.sandbox_id}/processes")
        return _find((ProcessInfo.from_json(p) for p in d["processes"]), self.pid, self.sandbox_id)


class Commands:
    """``sbx.commands``: run commands in the sandbox and find its processes."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    @overload
    def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: Literal[False] = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> CommandResult: ...

    @overload
    def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: Literal[True],
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> CommandHandle: ...

    def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: bool = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> Union[CommandResult, CommandHandle]:
        """Runs a command: a string under ``/bin/sh -c``, a sequence as argv (looked up in ``PATH``).

        Args:
            cmd: The command line or argv.
            background: Answer a :class:`CommandHandle` at once instead of waiting.
            cwd: Working directory (default: the user's home, or the image's ``WorkingDir``).
            env: Variables over the sandbox's.
            user: ``"user"`` (uid 1000) or ``"root"`` (default: the image's user, else ``user``).
            stdin: UTF-8 input; closed after it unless ``stdin_open`` (background: open by default).
            timeout: Seconds until the process group is killed (status ``timeout``); foreground
                default 60, background none.
            on_stdout: Receives stdout chunks as they come (background: while ``wait`` runs).
            on_stderr: Receives stderr chunks likewise.
            tag: A label listed with the process.
            max_output_bytes: Per-stream cap (head and tail kept), default the server's 1 MiB.
            stdin_open: Keep stdin open for :meth:`CommandHandle.send_stdin`, or close it at once.

        A non-zero exit is not an exception: read ``result.exit_code`` / ``result.status``.
        """
        body = exec_body(
            cmd,
            cwd=cwd,
            env=env,
            user=user,
            stdin=stdin,
            timeout=timeout,
            background=background,
            tag=tag,
            max_output_bytes=max_output_bytes,
            stdin_open=stdin_open,
        )
        path = f"/v1/sandboxes/{self._sandbox_id}/exec"
        if background:
            pid = int(self._client.call("POST", path, json=body)["pid"])
            return CommandHandle(self._client, self._sandbox_id, pid, on_stdout, on_stderr)
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_json(self._client.call("POST", path, json=body, wait=True))
        collected = _Collector()
        with self._client.stream("POST", path, json=body, headers={"Accept": NDJSON}) as response:
            for d in lines(response):
                ev = exec_event(d)
                collected.feed(ev)
                _dispatch(ev, on_stdout, on_stderr)
        if collected.needs_wait():
            assert collected.pid is not None
            return CommandHandle(self._client, self._sandbox_id, collected.pid).wait()
        return collected.result()

    def connect(
        self,
        pid: int,
        *,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> CommandHandle:
        """Reattaches to process ``pid`` (running or ended), from this or any client of the same tenant.
        Raises :class:`~sandlot.errors.NotFound` when the sandbox does not know it."""
        _find(self.list(), pid, self._sandbox_id)
        return CommandHandle(self._client, self._sandbox_id, pid, on_stdout, on_stderr)

    def list(self, *, tag: Optional[str] = None) -> List[ProcessInfo]:
        """The processes the sandbox remembers, oldest first (only those with ``tag``, if given)."""
        d = self._client.call("GET", f"/v1/sandboxes/{self._sandbox_id}/processes", params={"tag": tag})
        return [ProcessInfo.from_json(p) for p in d["processes"]]

    def kill(self, pid: int, signal: Optional[int] = None) -> None:
        """Sends ``signal`` (default SIGKILL) to process ``pid``'s group."""
        CommandHandle(self._client, self._sandbox_id, pid).kill(signal)

    def send_stdin(self, pid: int, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Writes ``data`` to process ``pid``'s stdin (``eof=True`` closes it after)."""
        CommandHandle(self._client, self._sandbox_id, pid).send_stdin(data, eof=eof)


class AsyncCommandHandle:
    """A process started through the API (asyncio); the same calls as :class:`CommandHandle`, awaited.
    ``async for ev in handle`` yields its events from its start, then live."""

    def __init__(
        self,
        client: AsyncClient,
        sandbox_id: str,
        pid: int,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
    ) -> None:
        self._client = client
        self.sandbox_id = sandbox_id
        self.pid = pid
        """The API process id; ``sbx.commands.connect(pid)`` finds it again."""
        self._on_stdout = on_stdout
        self._on_stderr = on_stderr

    def _path(self, what: str) -> str:
        return f"/v1/sandboxes/{self.sandbox_id}/processes/{self.pid}/{what}"

    async def events(self) -> AsyncIterator[ExecEvent]:
        """The process's events from its start (replayed), then live until it exits."""
        async with self._client.stream("GET", self._path("logs")) as response:
            async for d in alines(response):
                yield exec_event(d)

    def __aiter__(self) -> AsyncIterator[ExecEvent]:
        return self.events()

    async def output(self) -> AsyncIterator[Output]:
        """Only the output chunks of :meth:`events`."""
        async for ev in self.events():
            if isinstance(ev, Output):
                yield ev

    async def wait(
        self, on_stdout: Optional[AsyncOutputCallback] = None, on_stderr: Optional[AsyncOutputCallback] = None
    ) -> CommandResult:
        """Waits until the process ends and answers its result; the callbacks receive its output
        from its start meanwhile."""
        on_stdout = on_stdout or self._on_stdout
        on_stderr = on_stderr or self._on_stderr
        if on_stdout is not None or on_stderr is not None:
            async for ev in self.events():
                await _adispatch(ev, on_stdout, on_stderr)
        d = await self._client.call("POST", self._path("wait"), wait=True)
        return CommandResult.from_json(d, pid=self.pid)

    async def kill(self, signal: Optional[int] = None) -> None:
        """Sends ``signal`` (default SIGKILL) to the process group; :class:`~sandlot.errors.Conflict`
        if it has already exited."""
        await self._client.request("POST", self._path("kill"), json=None if signal is None else {"signal": signal})

    async def send_stdin(self, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Writes UTF-8 ``data`` to the process's stdin; ``eof=True`` closes stdin after it."""
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        await self._client.request("POST", self._path("stdin"), json={"data": text, "eof": eof})

    async def close_stdin(self) -> None:
        """Closes the process's stdin."""
        await self.send_stdin("", eof=True)

    async def info(self) -> ProcessInfo:
        """The process as the server lists it."""
        d = await self._client.call("GET", f"/v1/sandboxes/{self.sandbox_id}/processes")
        return _find((ProcessInfo.from_json(p) for p in d["processes"]), self.pid, self.sandbox_id)


class AsyncCommands:
    """``sbx.commands`` of an :class:`~sandlot.AsyncSandbox`; the same calls as :class:`Commands`."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._sandbox_id = sandbox_id

    @overload
    async def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: Literal[False] = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> CommandResult: ...

    @overload
    async def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: Literal[True],
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> AsyncCommandHandle: ...

    async def run(
        self,
        cmd: Union[str, Sequence[str]],
        *,
        background: bool = False,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        user: Optional[User] = None,
        stdin: Union[str, bytes, None] = None,
        timeout: Optional[float] = None,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
        tag: Optional[str] = None,
        max_output_bytes: Optional[int] = None,
        stdin_open: Optional[bool] = None,
    ) -> Union[CommandResult, AsyncCommandHandle]:
        """Runs a command; see :meth:`Commands.run`. Callbacks may be coroutine functions."""
        body = exec_body(
            cmd,
            cwd=cwd,
            env=env,
            user=user,
            stdin=stdin,
            timeout=timeout,
            background=background,
            tag=tag,
            max_output_bytes=max_output_bytes,
            stdin_open=stdin_open,
        )
        path = f"/v1/sandboxes/{self._sandbox_id}/exec"
        if background:
            pid = int((await self._client.call("POST", path, json=body))["pid"])
            return AsyncCommandHandle(self._client, self._sandbox_id, pid, on_stdout, on_stderr)
        if on_stdout is None and on_stderr is None:
            return CommandResult.from_json(await self._client.call("POST", path, json=body, wait=True))
        collected = _Collector()
        async with self._client.stream("POST", path, json=body, headers={"Accept": NDJSON}) as response:
            async for d in alines(response):
                ev = exec_event(d)
                collected.feed(ev)
                await _adispatch(ev, on_stdout, on_stderr)
        if collected.needs_wait():
            assert collected.pid is not None
            return await AsyncCommandHandle(self._client, self._sandbox_id, collected.pid).wait()
        return collected.result()

    async def connect(
        self,
        pid: int,
        *,
        on_stdout: Optional[AsyncOutputCallback] = None,
        on_stderr: Optional[AsyncOutputCallback] = None,
    ) -> AsyncCommandHandle:
        """Reattaches to process ``pid``; :class:`~sandlot.errors.NotFound` when unknown."""
        _find(await self.list(), pid, self._sandbox_id)
        return AsyncCommandHandle(self._client, self._sandbox_id, pid, on_stdout, on_stderr)

    async def list(self, *, tag: Optional[str] = None) -> List[ProcessInfo]:
        """The processes the sandbox remembers, oldest first (only those with ``tag``, if given)."""
        d = await self._client.call("GET", f"/v1/sandboxes/{self._sandbox_id}/processes", params={"tag": tag})
        return [ProcessInfo.from_json(p) for p in d["processes"]]

    async def kill(self, pid: int, signal: Optional[int] = None) -> None:
        """Sends ``signal`` (default SIGKILL) to process ``pid``'s group."""
        await AsyncCommandHandle(self._client, self._sandbox_id, pid).kill(signal)

    async def send_stdin(self, pid: int, data: Union[str, bytes], *, eof: bool = False) -> None:
        """Writes ``data`` to process ``pid``'s stdin (``eof=True`` closes it after)."""
        await AsyncCommandHandle(self._client, self._sandbox_id, pid).send_stdin(data, eof=eof)
