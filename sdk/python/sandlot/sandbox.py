"""Sandboxes: :class:`Sandbox` (blocking) and :class:`AsyncSandbox` (asyncio), with the same calls.

``Sandbox.create(...)`` boots one and answers a handle; ``Sandbox.connect(id)`` and
``Sandbox.get_or_create(name)`` find one again. As a context manager a sandbox is deleted when the block
ends. ``sbx.commands`` runs commands, ``sbx.files`` moves files; the lifecycle calls (pause, resume,
stop, snapshot, fork, set_timeout, set_network, expose) are methods.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .client import AsyncClient, Client
from .commands import AsyncCommands, Commands
from .errors import NotFound
from .files import AsyncFiles, Files
from .models import NetworkInfo, NetworkMode, NetworkPolicy, PortInfo, SandboxInfo, SnapshotInfo

#: A network policy: a :class:`NetworkPolicy`, or the API's ``network`` object as a mapping.
Network = Union[NetworkPolicy, Mapping[str, Any]]


def _network_json(network: Network) -> Dict[str, Any]:
    return network.to_json() if isinstance(network, NetworkPolicy) else dict(network)


def _policy(
    policy: Optional[Network],
    mode: Optional[NetworkMode],
    allow: Optional[Sequence[str]],
    deny: Optional[Sequence[str]],
    rules: Optional[Mapping[str, Mapping[str, str]]],
) -> Dict[str, Any]:
    if policy is not None:
        if mode is not None or allow is not None or deny is not None or rules is not None:
            raise TypeError("give either a policy or mode/allow/deny/rules, not both")
        return _network_json(policy)
    return NetworkPolicy(mode=mode or "deny", allow=allow or (), deny=deny or (), rules=rules or {}).to_json()


def _check_not_deleted(info: SandboxInfo) -> None:
    """A deleted sandbox's record still answers ``GET`` (state ``deleted``, for the audit trail), but
    there is nothing left to connect to."""
    if info.state == "deleted":
        reason = f" ({info.reason})" if info.reason else ""
        raise NotFound(f"sandbox {info.id} was deleted{reason}", code="not_found", status=404)


def _create_body(
    image: Optional[str],
    cpu: Optional[float],
    memory_mb: Optional[int],
    pids: Optional[int],
    disk_mb: Optional[int],
    timeout: Optional[int],
    env: Optional[Mapping[str, str]],
    metadata: Optional[Mapping[str, str]],
    network: Optional[Network],
    name: Optional[str],
    persistent: Optional[bool],
    auto_resume: Optional[bool],
    idle_timeout: Optional[int],
    on_timeout: Optional[str],
    stop_after: Optional[int],
    snapshot: Optional[str],
    get_or_create: bool,
) -> Dict[str, Any]:
    body: Dict[str, Any] = {
        "image": image,
        "cpu": cpu,
        "memory_mb": memory_mb,
        "pids": pids,
        "disk_mb": disk_mb,
        "timeout_s": timeout,
        "name": name,
        "persistent": persistent,
        "auto_resume": auto_resume,
        "idle_timeout_s": idle_timeout,
        "on_timeout": on_timeout,
        "stop_after_s": stop_after,
        "snapshot": snapshot,
    }
    body = {k: v for k, v in body.items() if v is not None}
    if env:
        body["env"] = dict(env)
    if metadata:
        body["metadata"] = dict(metadata)
    if network is not None:
        body["network"] = _network_json(network)
    if get_or_create:
        body["get_or_create"] = True
    return body


class Sandbox:
    """A handle to one sandbox. Made by :meth:`create`, :meth:`connect` or :meth:`get_or_create`.

    ``with Sandbox.create() as sbx:`` deletes the sandbox when the block ends; :meth:`close` only
    releases the connection.
    """

    def __init__(self, client: Client, info: SandboxInfo, *, owns_client: bool = False) -> None:
        self._client = client
        self._owns_client = owns_client
        self.info = info
        """The sandbox as last reported (refresh with :meth:`get_info`)."""
        self.id = info.id
        """The sandbox id (``sb_…``)."""
        self.commands = Commands(client, info.id)
        """Runs commands and reaches processes."""
        self.files = Files(client, info.id)
        """The sandbox's file system."""

    @property
    def client(self) -> Client:
        """The client this sandbox talks through."""
        return self._client

    @staticmethod
    def _client_for(client: Optional[Client], url: Optional[str], api_key: Optional[str]) -> tuple[Client, bool]:
        if client is not None:
            return client, False
        return Client(url, api_key), True

    @classmethod
    def create(
        cls,
        image: Optional[str] = None,
        *,
        cpu: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        name: Optional[str] = None,
        persistent: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
        idle_timeout: Optional[int] = None,
        on_timeout: Optional[str] = None,
        stop_after: Optional[int] = None,
        snapshot: Optional[str] = None,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Sandbox:
        """Creates a sandbox and answers it once it runs (``POST /v1/sandboxes``).

        Args:
            image: Image to boot (default: the server's ``--default-image``, normally ``host``).
            cpu: CPU limit in cores (fractional allowed).
            memory_mb: Memory limit in MiB (no swap).
            pids: Most processes and threads at once.
            disk_mb: Writable-layer cap in MiB.
            timeout: Lifetime in seconds (default 300); then ``on_timeout`` applies.
            env: Environment of every command.
            metadata: Labels, returned as given.
            network: Egress policy (default: deny, loopback only).
            name: A name unique among the tenant's live sandboxes.
            persistent: Keep it (files and all) across stop, expiry and server restarts.
            auto_resume: Commands and file operations resume it when stopped or paused.
            idle_timeout: Expire after this many seconds without API calls or process output.
            on_timeout: ``delete``, ``stop`` or ``pause`` at expiry.
            stop_after: Seconds an expiry-paused sandbox waits before it is stopped.
            snapshot: Start from this snapshot's files (id or name).
            client: The client to use (else one is made from ``url``/``api_key`` or the environment,
                and closed with the sandbox).
            url: Server URL (default ``SANDLOT_URL``).
            api_key: API key (default ``SANDLOT_API_KEY``).
        """
        body = _create_body(
            image, cpu, memory_mb, pids, disk_mb, timeout, env, metadata, network, name, persistent,
            auto_resume, idle_timeout, on_timeout, stop_after, snapshot, False,
        )  # fmt: skip
        return cls._post(body, client, url, api_key)

    @classmethod
    def get_or_create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        cpu: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        persistent: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
        idle_timeout: Optional[int] = None,
        on_timeout: Optional[str] = None,
        stop_after: Optional[int] = None,
        snapshot: Optional[str] = None,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Sandbox:
        """The tenant's live sandbox named ``name`` (resumed if stopped or paused), or a new one made
        with the other arguments (as :meth:`create` takes them)."""
        body = _create_body(
            image, cpu, memory_mb, pids, disk_mb, timeout, env, metadata, network, name, persistent,
            auto_resume, idle_timeout, on_timeout, stop_after, snapshot, True,
        )  # fmt: skip
        return cls._post(body, client, url, api_key)

    @classmethod
    def _post(cls, body: Dict[str, Any], client: Optional[Client], url: Optional[str], api_key: Optional[str]) -> Sandbox:
        c, owns = cls._client_for(client, url, api_key)
        try:
            info = SandboxInfo.from_json(c.call("POST", "/v1/sandboxes", json=body, wait=True))
        except BaseException:
            if owns:
                c.close()
            raise
        return cls(c, info, owns_client=owns)

    @classmethod
    def connect(
        cls,
        sandbox_id: str,
        *,
        resume: bool = True,
        client: Optional[Client] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> Sandbox:
        """A handle to existing sandbox ``sandbox_id``; a paused or stopped one is resumed unless
        ``resume=False``. :class:`~sandlot.errors.NotFound` for an unknown id, another tenant's, or a
        deleted one."""
        c, owns = cls._client_for(client, url, api_key)
        try:
            info = SandboxInfo.from_json(c.call("GET", f"/v1/sandboxes/{sandbox_id}"))
            _check_not_deleted(info)
            if resume and info.state in ("paused", "stopped"):
                info = SandboxInfo.from_json(c.call("POST", f"/v1/sandboxes/{sandbox_id}/resume", wait=True))
        except BaseException:
            if owns:
                c.close()
            raise
        return cls(c, info, owns_client=owns)

    @staticmethod
    def list(
        *, client: Optional[Client] = None, url: Optional[str] = None, api_key: Optional[str] = None
    ) -> List[SandboxInfo]:
        """The tenant's sandboxes that are not deleted, newest first."""
        if client is not None:
            return client.list_sandboxes()
        with Client(url, api_key) as c:
            return c.list_sandboxes()

    def _path(self, what: str = "") -> str:
        return f"/v1/sandboxes/{self.id}" + (f"/{what}" if what else "")

    def _transition(self, what: str, body: Any = None) -> SandboxInfo:
        self.info = SandboxInfo.from_json(self._client.call("POST", self._path(what), json=body, wait=True))
        return self.info

    def get_info(self) -> SandboxInfo:
        """The sandbox as the server reports it now (state, limits, network, expiry)."""
        self.info = SandboxInfo.from_json(self._client.call("GET", self._path()))
        return self.info

    def is_running(self) -> bool:
        """Whether the sandbox is ``running`` now."""
        return self.get_info().state == "running"

    def delete(self) -> None:
        """Deletes the sandbox: every process killed, its files removed. The record stays readable with
        state ``deleted``; anything else on it is :class:`Conflict`, a second delete :class:`NotFound`."""
        self._client.request("DELETE", self._path(), wait=True)

    def kill(self) -> None:
        """Deletes the sandbox (E2B's name for :meth:`delete`)."""
        self.delete()

    def pause(self) -> SandboxInfo:
        """Freezes every process in memory (no CPU) until :meth:`resume`; the lifetime keeps running."""
        return self._transition("pause")

    def resume(self) -> SandboxInfo:
        """Thaws a paused sandbox, or boots a stopped one again on its files."""
        return self._transition("resume")

    def stop(self) -> SandboxInfo:
        """Ends every process and keeps the files (synced first); :meth:`resume` boots it again."""
        return self._transition("stop")

    def set_timeout(self, seconds: int) -> SandboxInfo:
        """Ends the sandbox's lifetime ``seconds`` from now."""
        return self._transition("timeout", {"timeout_s": seconds})

    def snapshot(self, name: Optional[str] = None) -> SnapshotInfo:
        """A read-only copy-on-write snapshot of the files; ``Sandbox.create(snapshot=...)`` starts from it."""
        body = {"name": name} if name is not None else None
        return SnapshotInfo.from_json(self._client.call("POST", self._path("snapshot"), json=body, wait=True))

    def fork(self, count: int = 1) -> List[Sandbox]:
        """``count`` (1–32) running copies, each with a copy-on-write copy of the files. Each fork has its
        own client when this sandbox has (a client passed in is shared)."""
        d = self._client.call("POST", self._path("fork"), json={"count": count}, wait=True)
        forks: List[Sandbox] = []
        for s in d["sandboxes"]:
            info = SandboxInfo.from_json(s)
            if self._owns_client:
                forks.append(Sandbox(Client(self._client.url, self._client.api_key), info, owns_client=True))
            else:
                forks.append(Sandbox(self._client, info))
        return forks

    def set_network(
        self,
        policy: Optional[Network] = None,
        *,
        mode: Optional[NetworkMode] = None,
        allow: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        rules: Optional[Mapping[str, Mapping[str, str]]] = None,
    ) -> NetworkInfo:
        """Replaces the egress policy (for new connections, without a restart): a ``policy``, or
        ``mode``/``allow``/``deny``/``rules``. Answers the policy as the server now holds it."""
        body = _policy(policy, mode, allow, deny, rules)
        self.info = SandboxInfo.from_json(self._client.call("PATCH", self._path("network"), json=body))
        return self.info.network

    def expose(self, port: int) -> PortInfo:
        """Exposes sandbox port ``port``: a preview URL on an origin of its own (with its token)."""
        return PortInfo.from_json(self._client.call("POST", self._path("ports"), json={"port": port}))

    def close(self) -> None:
        """Releases the connection if this sandbox made it; the sandbox itself keeps running."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.delete()
        except NotFound:
            pass  # already deleted or expired: what the block's end wanted
        finally:
            self.close()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, state={self.info.state!r})"



class AsyncSandbox:
    """A handle to one sandbox (asyncio); the same calls as :class:`Sandbox`, awaited.

    ``async with await AsyncSandbox.create() as sbx:`` deletes it when the block ends.
    """

    def __init__(self, client: AsyncClient, info: SandboxInfo, *, owns_client: bool = False) -> None:
        self._client = client
        self._owns_client = owns_client
        self.info = info
        """The sandbox as last reported (refresh with :meth:`get_info`)."""
        self.id = info.id
        """The sandbox id (``sb_…``)."""
        self.commands = AsyncCommands(client, info.id)
        """Runs commands and reaches processes."""
        self.files = AsyncFiles(client, info.id)
        """The sandbox's file system."""

    @property
    def client(self) -> AsyncClient:
        """The client this sandbox talks through."""
        return self._client

    @staticmethod
    def _client_for(
        client: Optional[AsyncClient], url: Optional[str], api_key: Optional[str]
    ) -> tuple[AsyncClient, bool]:
        if client is not None:
            return client, False
        return AsyncClient(url, api_key), True

    @classmethod
    async def create(
        cls,
        image: Optional[str] = None,
        *,
        cpu: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        name: Optional[str] = None,
        persistent: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
        idle_timeout: Optional[int] = None,
        on_timeout: Optional[str] = None,
        stop_after: Optional[int] = None,
        snapshot: Optional[str] = None,
        client: Optional[AsyncClient] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AsyncSandbox:
        """Creates a sandbox and answers it once it runs; see :meth:`Sandbox.create`."""
        body = _create_body(
            image, cpu, memory_mb, pids, disk_mb, timeout, env, metadata, network, name, persistent,
            auto_resume, idle_timeout, on_timeout, stop_after, snapshot, False,
        )  # fmt: skip
        return await cls._post(body, client, url, api_key)

    @classmethod
    async def get_or_create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        cpu: Optional[float] = None,
        memory_mb: Optional[int] = None,
        pids: Optional[int] = None,
        disk_mb: Optional[int] = None,
        timeout: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        network: Optional[Network] = None,
        persistent: Optional[bool] = None,
        auto_resume: Optional[bool] = None,
        idle_timeout: Optional[int] = None,
        on_timeout: Optional[str] = None,
        stop_after: Optional[int] = None,
        snapshot: Optional[str] = None,
        client: Optional[AsyncClient] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AsyncSandbox:
        """The tenant's live sandbox named ``name``, or a new one; see :meth:`Sandbox.get_or_create`."""
        body = _create_body(
            image, cpu, memory_mb, pids, disk_mb, timeout, env, metadata, network, name, persistent,
            auto_resume, idle_timeout, on_timeout, stop_after, snapshot, True,
        )  # fmt: skip
        return await cls._post(body, client, url, api_key)

    @classmethod
    async def _post(
        cls, body: Dict[str, Any], client: Optional[AsyncClient], url: Optional[str], api_key: Optional[str]
    ) -> AsyncSandbox:
        c, owns = cls._client_for(client, url, api_key)
        try:
            info = SandboxInfo.from_json(await c.call("POST", "/v1/sandboxes", json=body, wait=True))
        except BaseException:
            if owns:
                await c.close()
            raise
        return cls(c, info, owns_client=owns)

    @classmethod
    async def connect(
        cls,
        sandbox_id: str,
        *,
        resume: bool = True,
        client: Optional[AsyncClient] = None,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
    ) -> AsyncSandbox:
        """A handle to existing sandbox ``sandbox_id``; see :meth:`Sandbox.connect`."""
        c, owns = cls._client_for(client, url, api_key)
        try:
            info = SandboxInfo.from_json(await c.call("GET", f"/v1/sandboxes/{sandbox_id}"))
            _check_not_deleted(info)
            if resume and info.state in ("paused", "stopped"):
                info = SandboxInfo.from_json(await c.call("POST", f"/v1/sandboxes/{sandbox_id}/resume", wait=True))
        except BaseException:
            if owns:
                await c.close()
            raise
        return cls(c, info, owns_client=owns)

    @staticmethod
    async def list(
        *, client: Optional[AsyncClient] = None, url: Optional[str] = None, api_key: Optional[str] = None
    ) -> List[SandboxInfo]:
        """The tenant's sandboxes that are not deleted, newest first."""
        if client is not None:
            return await client.list_sandboxes()
        async with AsyncClient(url, api_key) as c:
            return await c.list_sandboxes()

    def _path(self, what: str = "") -> str:
        return f"/v1/sandboxes/{self.id}" + (f"/{what}" if what else "")

    async def _transition(self, what: str, body: Any = None) -> SandboxInfo:
        self.info = SandboxInfo.from_json(await self._client.call("POST", self._path(what), json=body, wait=True))
        return self.info

    async def get_info(self) -> SandboxInfo:
        """The sandbox as the server reports it now."""
        self.info = SandboxInfo.from_json(await self._client.call("GET", self._path()))
        return self.info

    async def is_running(self) -> bool:
        """Whether the sandbox is ``running`` now."""
        return (await self.get_info()).state == "running"

    async def delete(self) -> None:
        """Deletes the sandbox: every process killed, its files removed."""
        await self._client.request("DELETE", self._path(), wait=True)

    async def kill(self) -> None:
        """Deletes the sandbox (E2B's name for :meth:`delete`)."""
        await self.delete()

    async def pause(self) -> SandboxInfo:
        """Freezes every process in memory until :meth:`resume`."""
        return await self._transition("pause")

    async def resume(self) -> SandboxInfo:
        """Thaws a paused sandbox, or boots a stopped one again on its files."""
        return await self._transition("resume")

    async def stop(self) -> SandboxInfo:
        """Ends every process and keeps the files."""
        return await self._transition("stop")

    async def set_timeout(self, seconds: int) -> SandboxInfo:
        """Ends the sandbox's lifetime ``seconds`` from now."""
        return await self._transition("timeout", {"timeout_s": seconds})

    async def snapshot(self, name: Optional[str] = None) -> SnapshotInfo:
        """A read-only copy-on-write snapshot of the files."""
        body = {"name": name} if name is not None else None
        return SnapshotInfo.from_json(await self._client.call("POST", self._path("snapshot"), json=body, wait=True))

    async def fork(self, count: int = 1) -> List[AsyncSandbox]:
        """``count`` running copies; see :meth:`Sandbox.fork`."""
        d = await self._client.call("POST", self._path("fork"), json={"count": count}, wait=True)
        forks: List[AsyncSandbox] = []
        for s in d["sandboxes"]:
            info = SandboxInfo.from_json(s)
            if self._owns_client:
                client = AsyncClient(self._client.url, self._client.api_key)
                forks.append(AsyncSandbox(client, info, owns_client=True))
            else:
                forks.append(AsyncSandbox(self._client, info))
        return forks

    async def set_network(
        self,
        policy: Optional[Network] = None,
        *,
        mode: Optional[NetworkMode] = None,
        allow: Optional[Sequence[str]] = None,
        deny: Optional[Sequence[str]] = None,
        rules: Optional[Mapping[str, Mapping[str, str]]] = None,
    ) -> NetworkInfo:
        """Replaces the egress policy; see :meth:`Sandbox.set_network`."""
        body = _policy(policy, mode, allow, deny, rules)
        self.info = SandboxInfo.from_json(await self._client.call("PATCH", self._path("network"), json=body))
        return self.info.network

    async def expose(self, port: int) -> PortInfo:
        """Exposes sandbox port ``port`` behind a preview URL."""
        return PortInfo.from_json(await self._client.call("POST", self._path("ports"), json={"port": port}))

    async def close(self) -> None:
        """Releases the connection if this sandbox made it; the sandbox keeps running."""
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> AsyncSandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.delete()
        except NotFound:
            pass  # already deleted or expired
        finally:
            await self.close()

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, state={self.info.state!r})"
