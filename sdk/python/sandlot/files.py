"""Files inside a sandbox: ``sbx.files.write/read/list/stat/mkdir/remove/move/upload_dir/download_dir``.

Paths are absolute, or relative to the user's home (``/home/user``, or ``/root`` with ``user="root"``).
Every operation runs inside the sandbox as that identity, so the kernel's permission checks apply.
Bodies stream both ways: a file object or an iterator of chunks is sent without being read whole, and
``read(..., format="stream")`` yields chunks as they arrive. Directories travel as tar archives; what a
sandbox sends back is untrusted, so ``download_dir`` refuses entries that would land outside the target.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import tarfile
import tempfile
from typing import (
    IO,
    TYPE_CHECKING,
    Any,
    AsyncIterable,
    AsyncIterator,
    ContextManager,
    Dict,
    Iterable,
    Iterator,
    List,
    Literal,
    Optional,
    Union,
    overload,
)

import httpx

from .client import transport_errors
from .errors import ProtocolError
from .models import FileStat, User, WriteResult

if TYPE_CHECKING:
    from .client import AsyncClient, Client

#: Bytes per chunk when streaming a file object.
CHUNK = 1 << 20

#: What ``write`` sends: text (UTF-8), bytes, a binary file object, or an iterator of chunks.
Data = Union[str, bytes, IO[bytes], Iterable[bytes]]
#: What the async ``write`` sends: the same, or an async iterator of chunks.
AsyncData = Union[str, bytes, IO[bytes], Iterable[bytes], AsyncIterable[bytes]]
PathLike = Union[str, "os.PathLike[str]"]


def _mode(mode: Union[int, str, None]) -> Optional[str]:
    """Permission bits as the API reads them: octal text (``0644``)."""
    if mode is None or isinstance(mode, str):
        return mode
    return format(mode, "04o")


def _chunks(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        chunk = f.read(CHUNK)
        if not chunk:
            return
        yield chunk


def _body(data: Any) -> tuple[Any, Dict[str, str]]:
    """The request content and, when the size is known up front, its ``Content-Length`` (so the server
    can refuse an upload over its limit before any byte is sent)."""
    if isinstance(data, str):
        return data.encode("utf-8"), {}
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), {}
    if hasattr(data, "read"):
        headers: Dict[str, str] = {}
        with contextlib.suppress(OSError, AttributeError, io.UnsupportedOperation):
            size = os.fstat(data.fileno()).st_size - data.tell()
            if size >= 0:
                headers["Content-Length"] = str(size)
        return _chunks(data), headers
    return data, {}


def _tar_dir(local_dir: PathLike) -> IO[bytes]:
    """``local_dir``'s contents as an uncompressed tar in a temporary file (spooled on disk, not in
    memory), entry names relative to it, owners left to the server."""
    if not os.path.isdir(local_dir):
        raise NotADirectoryError(f"{os.fspath(local_dir)!r} is not a directory")
    tmp = tempfile.TemporaryFile()

    def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        return info

    with tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(local_dir)):
            tar.add(os.path.join(local_dir, name), arcname=name, filter=anonymous)
    tmp.seek(0)
    return tmp


def _inside(root: str, path: str) -> bool:
    return path == root or path.startswith(root + os.sep)


def _extract(tar: tarfile.TarFile, dest: PathLike) -> List[str]:
    """Extracts an untrusted archive into ``dest``: regular files, directories and links only, every
    one inside ``dest`` (no absolute names, ``..``, or links leading out), no set-id bits, owned by the
    caller. Answers the extracted names."""
    os.makedirs(dest, exist_ok=True)
    root = os.path.realpath(dest)
    names: List[str] = []
    for member in tar:
        name = posixpath.normpath(member.name)
        if name in (".", ""):
            continue
        if name.startswith("/") or name == ".." or name.startswith("../"):
            raise ProtocolError(f"refusing tar entry {member.name!r}: it would land outside {root}")
        if not (member.isfile() or member.isdir() or member.issym() or member.islnk()):
            continue  # devices, fifos: nothing a download needs
        target = os.path.realpath(os.path.join(root, name))
        if not _inside(root, target):
            raise ProtocolError(f"refusing tar entry {member.name!r}: it resolves outside {root}")
        if member.issym():
            link = os.path.realpath(os.path.join(os.path.dirname(target), member.linkname))
            if os.path.isabs(member.linkname) or not _inside(root, link):
                raise ProtocolError(f"refusing symlink {member.name!r} -> {member.linkname!r}: it leads outside {root}")
        if member.islnk() and not _inside(root, os.path.realpath(os.path.join(root, member.linkname))):
            raise ProtocolError(f"refusing hard link {member.name!r} -> {member.linkname!r}: it leads outside {root}")
        member.name = name
        member.mode &= 0o777
        member.uid, member.gid, member.uname, member.gname = os.getuid(), os.getgid(), "", ""
        if hasattr(tarfile, "data_filter"):
            tar.extract(member, root, filter="data")  # type: ignore[call-arg,unused-ignore]
        else:
            tar.extract(member, root)
        names.append(name)
    return names


class _IterReader(io.RawIOBase):
    """A readable file over an iterator of byte chunks (so ``tarfile`` can stream a response)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


class ByteStream:
    """A file's bytes as they arrive: iterate it for chunks; closing it (or leaving its ``with``
    block, or reading to the end) releases the connection."""

    def __init__(self, cm: ContextManager[httpx.Response], url: str) -> None:
        self._cm = cm
        self._url = url
        self._response = cm.__enter__()
        self._chunks = self._response.iter_bytes(CHUNK)
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            with transport_errors(self._url):
                return next(self._chunks)
        except BaseException:  # the end (StopIteration) too: the connection is released either way
            self.close()
            raise

    def close(self) -> None:
        """Releases the connection (the rest of the body is not read)."""
        if not self._closed:
            self._closed = True
            self._cm.__exit__(None, None, None)

    def __enter__(self) -> ByteStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncByteStream:
    """A file's bytes as they arrive (asyncio): ``async for chunk in stream``; ``aclose`` (or its
    ``async with`` block, or reading to the end) releases the connection."""

    def __init__(self, response: httpx.Response, closer: Any, url: str) -> None:
        self._response = response
        self._closer = closer
        self._url = url
        self._chunks = response.aiter_bytes(CHUNK)
        self._closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self

    async def __anext__(self) -> bytes:
        try:
            with transport_errors(self._url):
                return await self._chunks.__anext__()
        except BaseException:  # the end (StopAsyncIteration) too
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Releases the connection."""
        if not self._closed:
            self._closed = True
            await self._closer.__aexit__(None, None, None)

    async def __aenter__(self) -> AsyncByteStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


ReadFormat = Literal["text", "bytes", "stream"]


def _q(path: str, user: Optional[User], **more: Any) -> Dict[str, Any]:
    return {"path": path, "user": user, **more}


class Files:
    """``sbx.files``: the sandbox's file system, as ``user`` unless an operation says ``user="root"``."""

    def __init__(self, client: Client, sandbox_id: str) -> None:
        self._client = client
        self._base = f"/v1/sandboxes/{sandbox_id}/files"

    def write(
        self, path: str, data: Data, *, mode: Union[int, str, None] = None, user: Optional[User] = None
    ) -> WriteResult:
        """Writes ``data`` to ``path`` (parents made, an existing file replaced atomically).

        ``data``: text (UTF-8), bytes, a binary file object (streamed in 1 MiB chunks) or an iterator
        of byte chunks (streamed). ``mode``: permission bits (``0o755`` or ``"0755"``; default 0644).
        """
        content, headers = _body(data)
        r = self._client.request(
            "PUT", self._base, params=_q(path, user, mode=_mode(mode)), content=content, headers=headers, wait=True
        )
        return WriteResult.from_json(r.json())

    @overload
    def read(self, path: str, *, format: Literal["text"] = "text", user: Optional[User] = None) -> str: ...

    @overload
    def read(self, path: str, *, format: Literal["bytes"], user: Optional[User] = None) -> bytes: ...

    @overload
    def read(self, path: str, *, format: Literal["stream"], user: Optional[User] = None) -> ByteStream: ...

    def read(
        self, path: str, *, format: ReadFormat = "text", user: Optional[User] = None
    ) -> Union[str, bytes, ByteStream]:
        """Reads the file at ``path``: as text (UTF-8), ``bytes``, or a :class:`ByteStream` of chunks
        (``format="stream"``: the file is never held whole; close the stream when done with it early)."""
        if format == "stream":
            return ByteStream(self._client.stream("GET", self._base, params=_q(path, user)), self._client.url)
        content = self._client.request("GET", self._base, params=_q(path, user), wait=True).content
        return content if format == "bytes" else content.decode("utf-8")

    def list(self, path: str, *, depth: int = 1, user: Optional[User] = None) -> List[FileStat]:
        """Entries below directory ``path`` (not itself), ``depth`` levels down (1–16), sorted by path."""
        d = self._client.call("GET", f"{self._base}/list", params=_q(path, user, depth=depth))
        return [FileStat.from_json(e) for e in d["entries"]]

    def stat(self, path: str, *, user: Optional[User] = None) -> FileStat:
        """Metadata of ``path`` (a symlink is not followed)."""
        return FileStat.from_json(self._client.call("GET", f"{self._base}/stat", params=_q(path, user)))

    def exists(self, path: str, *, user: Optional[User] = None) -> bool:
        """Whether ``path`` exists (as seen by ``user``)."""
        from .errors import FileNotFound

        try:
            self.stat(path, user=user)
        except FileNotFound:
            return False
        return True

    def mkdir(self, path: str, *, parents: bool = True, user: Optional[User] = None) -> FileStat:
        """Makes directory ``path``; with ``parents`` (default) like ``mkdir -p``, else
        :class:`~sandlot.errors.AlreadyExists` when it exists."""
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if user is not None:
            body["user"] = user
        return FileStat.from_json(self._client.call("POST", f"{self._base}/mkdir", json=body))

    def remove(self, path: str, *, recursive: bool = False, user: Optional[User] = None) -> None:
        """Removes a file, symlink or empty directory; ``recursive=True`` a directory with its contents."""
        self._client.request("DELETE", self._base, params=_q(path, user, recursive=recursive or None))

    def move(self, src: str, dst: str, *, overwrite: bool = False, user: Optional[User] = None) -> FileStat:
        """Renames ``src`` to ``dst`` atomically (same file system); :class:`~sandlot.errors.AlreadyExists`
        when ``dst`` exists unless ``overwrite``. Answers the metadata of ``dst``."""
        body: Dict[str, Any] = {"from": src, "to": dst, "overwrite": overwrite}
        if user is not None:
            body["user"] = user
        return FileStat.from_json(self._client.call("POST", f"{self._base}/move", json=body))

    def upload_dir(self, local_dir: PathLike, remote_dir: str, *, user: Optional[User] = None) -> WriteResult:
        """Copies the contents of local directory ``local_dir`` into ``remote_dir`` (made if missing;
        existing files overwritten), as one tar stream."""
        with _tar_dir(local_dir) as tar:
            content, headers = _body(tar)
            r = self._client.request(
                "PUT", f"{self._base}/tar", params=_q(remote_dir, user), content=content, headers=headers, wait=True
            )
        return WriteResult.from_json(r.json())

    def download_dir(self, remote_dir: str, local_dir: PathLike, *, user: Optional[User] = None) -> List[str]:
        """Copies the contents of ``remote_dir`` into local directory ``local_dir`` (made if missing),
        streamed; answers the entry names written. Entries that would land outside ``local_dir`` are
        refused with :class:`~sandlot.errors.ProtocolError`."""
        with self._client.stream("GET", f"{self._base}/tar", params=_q(remote_dir, user)) as response:
            reader = io.BufferedReader(_IterReader(response.iter_bytes(CHUNK)), CHUNK)
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                return _extract(tar, local_dir)


async def _achunks(f: IO[bytes]) -> AsyncIterator[bytes]:
    for chunk in _chunks(f):
        yield chunk


class AsyncFiles:
    """``sbx.files`` of an :class:`~sandlot.AsyncSandbox`; the same calls as :class:`Files`, awaited."""

    def __init__(self, client: AsyncClient, sandbox_id: str) -> None:
        self._client = client
        self._base = f"/v1/sandboxes/{sandbox_id}/files"

    async def write(
        self, path: str, data: AsyncData, *, mode: Union[int, str, None] = None, user: Optional[User] = None
    ) -> WriteResult:
        """Writes ``data`` to ``path``; see :meth:`Files.write`. Also takes an async iterator of chunks.
        A file object is read in the event loop's thread, a chunk at a time."""
        content, headers = _body(data)
        if not isinstance(content, bytes):
            # httpx's async client streams async iterables only.
            content = _aiter(content)
        r = await self._client.request(
            "PUT", self._base, params=_q(path, user, mode=_mode(mode)), content=content, headers=headers, wait=True
        )
        return WriteResult.from_json(r.json())

    @overload
    async def read(self, path: str, *, format: Literal["text"] = "text", user: Optional[User] = None) -> str: ...

    @overload
    async def read(self, path: str, *, format: Literal["bytes"], user: Optional[User] = None) -> bytes: ...

    @overload
    async def read(
        self, path: str, *, format: Literal["stream"], user: Optional[User] = None
    ) -> AsyncByteStream: ...

    async def read(
        self, path: str, *, format: ReadFormat = "text", user: Optional[User] = None
    ) -> Union[str, bytes, AsyncByteStream]:
        """Reads the file at ``path``: text, ``bytes``, or an :class:`AsyncByteStream` of chunks."""
        if format == "stream":
            cm = self._client.stream("GET", self._base, params=_q(path, user))
            response = await cm.__aenter__()
            return AsyncByteStream(response, cm, self._client.url)
        content = (await self._client.request("GET", self._base, params=_q(path, user), wait=True)).content
        return content if format == "bytes" else content.decode("utf-8")

    async def list(self, path: str, *, depth: int = 1, user: Optional[User] = None) -> List[FileStat]:
        """Entries below directory ``path``, ``depth`` levels down, sorted by path."""
        d = await self._client.call("GET", f"{self._base}/list", params=_q(path, user, depth=depth))
        return [FileStat.from_json(e) for e in d["entries"]]

    async def stat(self, path: str, *, user: Optional[User] = None) -> FileStat:
        """Metadata of ``path`` (a symlink is not followed)."""
        return FileStat.from_json(await self._client.call("GET", f"{self._base}/stat", params=_q(path, user)))

    async def exists(self, path: str, *, user: Optional[User] = None) -> bool:
        """Whether ``path`` exists (as seen by ``user``)."""
        from .errors import FileNotFound

        try:
            await self.stat(path, user=user)
        except FileNotFound:
            return False
        return True

    async def mkdir(self, path: str, *, parents: bool = True, user: Optional[User] = None) -> FileStat:
        """Makes directory ``path`` (``parents``: like ``mkdir -p``)."""
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if user is not None:
            body["user"] = user
        return FileStat.from_json(await self._client.call("POST", f"{self._base}/mkdir", json=body))

    async def remove(self, path: str, *, recursive: bool = False, user: Optional[User] = None) -> None:
        """Removes a file, symlink or empty directory; ``recursive=True`` a directory with its contents."""
        await self._client.request("DELETE", self._base, params=_q(path, user, recursive=recursive or None))

    async def move(self, src: str, dst: str, *, overwrite: bool = False, user: Optional[User] = None) -> FileStat:
        """Renames ``src`` to ``dst`` atomically; answers the metadata of ``dst``."""
        body: Dict[str, Any] = {"from": src, "to": dst, "overwrite": overwrite}
        if user is not None:
            body["user"] = user
        return FileStat.from_json(await self._client.call("POST", f"{self._base}/move", json=body))

    async def upload_dir(self, local_dir: PathLike, remote_dir: str, *, user: Optional[User] = None) -> WriteResult:
        """Copies local directory ``local_dir``'s contents into ``remote_dir`` as one tar stream."""
        with _tar_dir(local_dir) as tar:
            content, headers = _body(tar)
            r = await self._client.request(
                "PUT",
                f"{self._base}/tar",
                params=_q(remote_dir, user),
                content=_aiter(content),
                headers=headers,
                wait=True,
            )
        return WriteResult.from_json(r.json())

    async def download_dir(self, remote_dir: str, local_dir: PathLike, *, user: Optional[User] = None) -> List[str]:
        """Copies ``remote_dir``'s contents into ``local_dir``; the archive is spooled to a temporary
        file as it arrives, then extracted with the checks of :meth:`Files.download_dir`."""
        with tempfile.TemporaryFile() as spool:
            async with self._client.stream("GET", f"{self._base}/tar", params=_q(remote_dir, user)) as response:
                async for chunk in response.aiter_bytes(CHUNK):
                    spool.write(chunk)
            spool.seek(0)
            with tarfile.open(fileobj=spool, mode="r|") as tar:
                return _extract(tar, local_dir)


async def _aiter(chunks: Any) -> AsyncIterator[bytes]:
    if hasattr(chunks, "__aiter__"):
        async for chunk in chunks:
            yield chunk
    else:
        for chunk in chunks:
            yield chunk
