"""Images: ``client.images.list/get/delete/pull/import_archive/build``.

An image is what a sandbox boots (``Sandbox.create(image=NAME)``): ``host`` (the host's ``/usr``), an OCI
image pulled from a registry or imported from an archive, or one built from a Dockerfile. Pulls, imports
and builds stream their progress (NDJSON); ``on_progress`` / ``on_event`` receive every line as a
:class:`~sandlot.models.ProgressEvent`, and a build's ``on_log`` receives its steps and its ``RUN``
output as text. A failed pull, import or build raises the error it reported (a build's carries the
Dockerfile ``line`` and the failed step's output ``tail``).
"""

from __future__ import annotations

import inspect
import os
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    Awaitable,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Union,
)

from .errors import ProtocolError
from .files import PathLike, _aiter, _body, _tar_dir
from .models import ImageInfo, ProgressEvent
from .streaming import NDJSON, alines, lines, progress_error

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: Receives each progress line of a pull, import or build.
ProgressCallback = Callable[[ProgressEvent], None]
#: Receives a build's log as text: one line per step, then its ``RUN`` output as it comes.
LogCallback = Callable[[str], None]
AsyncProgressCallback = Callable[[ProgressEvent], Union[None, Awaitable[None]]]
AsyncLogCallback = Callable[[str], Union[None, Awaitable[None]]]

#: A build context: a local directory (sent as a tar), or a tar archive as bytes or a file object.
Context = Union[PathLike, bytes, IO[bytes]]


def _log_text(ev: ProgressEvent) -> Optional[str]:
    """The human log line of a build event (steps and output), ``None`` for the others."""
    f = ev.fields
    if ev.type == "step":
        cached = " (cached)" if f.get("cached") else ""
        return f"Step {int(f['index']) + 1} (line {f['line']}): {f['instruction']}{cached}\n"
    if ev.type == "output":
        return str(f.get("data", ""))
    return None


class _Outcome:
    """Reads a progress stream: every ``done`` image, or the ``error`` raised."""

    def __init__(self) -> None:
        self.images: List[ImageInfo] = []

    def feed(self, d: Dict[str, Any]) -> ProgressEvent:
        if d["type"] == "error":
            raise progress_error(d)
        if d["type"] == "done":
            self.images.append(ImageInfo.from_json(d["image"]))
        return ProgressEvent(type=d["type"], fields={k: v for k, v in d.items() if k != "type"})

    def result(self) -> List[ImageInfo]:
        if not self.images:
            raise ProtocolError("the image stream ended without `done` or `error`")
        return self.images


def _pull_body(
    ref: str, name: Optional[str], platform: Optional[str], auth: Optional[Tuple[str, str]], public: bool
) -> Dict[str, Any]:
    body: Dict[str, Any] = {"ref": ref}
    if name is not None:
        body["name"] = name
    if platform is not None:
        body["platform"] = platform
    if auth is not None:
        body["auth"] = {"username": auth[0], "password": auth[1]}
    if public:
        body["public"] = True
    return body


def _build_params(
    name: str,
    dockerfile: Optional[str],
    no_cache: bool,
    allow: Sequence[str],
    build_args: Optional[Mapping[str, str]],
    memory_mb: Optional[int],
    cpu: Optional[float],
    timeout: Optional[int],
) -> List[Tuple[str, Any]]:
    params: List[Tuple[str, Any]] = [
        ("name", name),
        ("file", dockerfile),
        ("no_cache", True if no_cache else None),
        ("memory_mb", memory_mb),
        ("cpu", cpu),
        ("timeout_s", timeout),
    ]
    params += [("allow", host) for host in allow]
    params += [("build_arg", f"{k}={v}") for k, v in (build_args or {}).items()]
    return params


def _archive(archive: Union[Context, Iterable[bytes]]) -> Tuple[Any, Dict[str, str], Optional[IO[bytes]]]:
    """Content and headers for an archive body; a directory is tarred first (the returned file is
    closed by the caller)."""
    if isinstance(archive, (str, os.PathLike)):
        if os.path.isdir(archive):
            tar = _tar_dir(archive)
        else:
            tar = open(archive, "rb")
        content, headers = _body(tar)
        return content, headers, tar
    content, headers = _body(archive)
    return content, headers, None


class Images:
    """``client.images``: the images the caller's tenant can boot."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def list(self) -> List[ImageInfo]:
        """``host``, the tenant's images and the public ones, by name."""
        return [ImageInfo.from_json(i) for i in self._client.call("GET", "/v1/images")["images"]]

    def get(self, name: str) -> ImageInfo:
        """One image by name (names may hold ``/`` and ``:``)."""
        return ImageInfo.from_json(self._client.call("GET", f"/v1/images/{name}"))

    def delete(self, name: str) -> None:
        """Deletes the tenant's image ``name``; its sandboxes and snapshots keep working."""
        self._client.request("DELETE", f"/v1/images/{name}")

    def _progress(
        self, cm: Any, on_event: Optional[ProgressCallback], on_log: Optional[LogCallback] = None
    ) -> List[ImageInfo]:
        outcome = _Outcome()
        with cm as response:
            for d in lines(response):
                ev = outcome.feed(d)
                if on_event is not None:
                    on_event(ev)
                text = _log_text(ev) if on_log is not None else None
                if on_log is not None and text is not None:
                    on_log(text)
        return outcome.result()

    def pull(
        self,
        ref: str,
        *,
        name: Optional[str] = None,
        platform: Optional[str] = None,
        auth: Optional[Tuple[str, str]] = None,
        public: bool = False,
        on_progress: Optional[ProgressCallback] = None,
    ) -> ImageInfo:
        """Pulls ``ref`` (``python:3.12-slim``, ``registry:5000/app@sha256:…``) from its registry.

        ``name``: what to store it as (default: the reference); ``platform``: ``os/arch`` (default
        ``linux/amd64``); ``auth``: ``(username, password)`` for this pull only; ``public``: publish it
        to every tenant (admin key)."""
        body = _pull_body(ref, name, platform, auth, public)
        cm = self._client.stream("POST", "/v1/images/pull", json=body, headers={"Accept": NDJSON})
        return self._progress(cm, on_progress)[0]

    def import_archive(
        self,
        archive: Union[PathLike, bytes, IO[bytes], Iterable[bytes]],
        *,
        name: Optional[str] = None,
        public: bool = False,
        on_progress: Optional[ProgressCallback] = None,
    ) -> List[ImageInfo]:
        """Imports a ``docker save`` tarball, an OCI layout tar or a root file system tar (gzip, zstd
        or plain), streamed from a path, bytes, a file object or chunks. ``name`` is needed when the
        archive names no image. Answers the images stored."""
        content, headers, opened = _archive(archive)
        try:
            cm = self._client.stream(
                "POST",
                "/v1/images/import",
                params={"name": name, "public": True if public else None},
                content=content,
                headers={**headers, "Accept": NDJSON},
            )
            return self._progress(cm, on_progress)
        finally:
            if opened is not None:
                opened.close()

    def build(
        self,
        context: Context,
        name: str,
        *,
        dockerfile: Optional[str] = None,
        no_cache: bool = False,
        allow: Sequence[str] = (),
        build_args: Optional[Mapping[str, str]] = None,
        memory_mb: Optional[int] = None,
        cpu: Optional[float] = None,
        timeout: Optional[int] = None,
        on_log: Optional[LogCallback] = None,
        on_event: Optional[ProgressCallback] = None,
    ) -> ImageInfo:
        """Builds a Dockerfile into image ``name``.

        Args:
            context: A local directory, or a tar of one (bytes or a file object).
            name: Name to store the image under.
            dockerfile: Path of the Dockerfile in the context (default ``Dockerfile``).
            no_cache: Run every step again.
            allow: Hosts (names, ``*.suffix``, CIDRs) ``RUN`` steps may reach; none by default.
            build_args: ``ARG`` values.
            memory_mb: Memory of each ``RUN`` step's build sandbox.
            cpu: CPU of each ``RUN`` step's build sandbox.
            timeout: Seconds each ``RUN`` step may take.
            on_log: Receives ``Step N (line L): INSTRUCTION`` lines and ``RUN`` output as text.
            on_event: Receives every event (``step``, ``output``, ``unpacking``, ``unpacked``, ``done``).

        ``FROM`` must name an OCI image the tenant can boot, or ``scratch`` (not ``host``).
        """
        content, headers, opened = _archive(context)
        try:
            cm = self._client.stream(
                "POST",
                "/v1/images/build",
                params=_build_params(name, dockerfile, no_cache, allow, build_args, memory_mb, cpu, timeout),
                content=content,
                headers={**headers, "Accept": NDJSON},
            )
            return self._progress(cm, on_event, on_log)[0]
        finally:
            if opened is not None:
                opened.close()


async def _call(cb: Optional[Callable[[Any], Any]], arg: Any) -> None:
    if cb is not None:
        r = cb(arg)
        if inspect.isawaitable(r):
            await r


class AsyncImages:
    """``client.images`` of an :class:`~sandlot.AsyncClient`; the same calls as :class:`Images`, awaited.
    Callbacks may be coroutine functions."""

    def __init__(self, client: AsyncClient) -> None:
        self._client = client

    async def list(self) -> List[ImageInfo]:
        """``host``, the tenant's images and the public ones, by name."""
        return [ImageInfo.from_json(i) for i in (await self._client.call("GET", "/v1/images"))["images"]]

    async def get(self, name: str) -> ImageInfo:
        """One image by name."""
        return ImageInfo.from_json(await self._client.call("GET", f"/v1/images/{name}"))

    async def delete(self, name: str) -> None:
        """Deletes the tenant's image ``name``."""
        await self._client.request("DELETE", f"/v1/images/{name}")

    async def _progress(
        self, cm: Any, on_event: Optional[AsyncProgressCallback], on_log: Optional[AsyncLogCallback] = None
    ) -> List[ImageInfo]:
        outcome = _Outcome()
        async with cm as response:
            async for d in alines(response):
                ev = outcome.feed(d)
                await _call(on_event, ev)
                text = _log_text(ev) if on_log is not None else None
                if text is not None:
                    await _call(on_log, text)
        return outcome.result()

    async def pull(
        self,
        ref: str,
        *,
        name: Optional[str] = None,
        platform: Optional[str] = None,
        auth: Optional[Tuple[str, str]] = None,
        public: bool = False,
        on_progress: Optional[AsyncProgressCallback] = None,
    ) -> ImageInfo:
        """Pulls ``ref`` from its registry; see :meth:`Images.pull`."""
        body = _pull_body(ref, name, platform, auth, public)
        cm = self._client.stream("POST", "/v1/images/pull", json=body, headers={"Accept": NDJSON})
        return (await self._progress(cm, on_progress))[0]

    async def import_archive(
        self,
        archive: Union[PathLike, bytes, IO[bytes], Iterable[bytes]],
        *,
        name: Optional[str] = None,
        public: bool = False,
        on_progress: Optional[AsyncProgressCallback] = None,
    ) -> List[ImageInfo]:
        """Imports an image archive; see :meth:`Images.import_archive`."""
        content, headers, opened = _archive(archive)
        try:
            cm = self._client.stream(
                "POST",
                "/v1/images/import",
                params={"name": name, "public": True if public else None},
                content=content if isinstance(content, bytes) else _aiter(content),
                headers={**headers, "Accept": NDJSON},
            )
            return await self._progress(cm, on_progress)
        finally:
            if opened is not None:
                opened.close()

    async def build(
        self,
        context: Context,
        name: str,
        *,
        dockerfile: Optional[str] = None,
        no_cache: bool = False,
        allow: Sequence[str] = (),
        build_args: Optional[Mapping[str, str]] = None,
        memory_mb: Optional[int] = None,
        cpu: Optional[float] = None,
        timeout: Optional[int] = None,
        on_log: Optional[AsyncLogCallback] = None,
        on_event: Optional[AsyncProgressCallback] = None,
    ) -> ImageInfo:
        """Builds a Dockerfile into image ``name``; see :meth:`Images.build`."""
        content, headers, opened = _archive(context)
        try:
            cm = self._client.stream(
                "POST",
                "/v1/images/build",
                params=_build_params(name, dockerfile, no_cache, allow, build_args, memory_mb, cpu, timeout),
                content=content if isinstance(content, bytes) else _aiter(content),
                headers={**headers, "Accept": NDJSON},
            )
            return (await self._progress(cm, on_event, on_log))[0]
        finally:
            if opened is not None:
                opened.close()

