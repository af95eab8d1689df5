"""The connection to a sandlot server: :class:`Client` (blocking) and :class:`AsyncClient` (asyncio).

Both read ``SANDLOT_URL`` (default ``http://127.0.0.1:7423``) and ``SANDLOT_API_KEY`` unless given the
``url`` and ``api_key`` arguments, send ``Authorization: Bearer <key>`` on every call, and raise the
:mod:`sandlot.errors` class of any error the server answers.
"""

from __future__ import annotations

import contextlib
import os
from typing import (
    TYPE_CHECKING,
    Any,
    AsyncIterator,
    Dict,
    Iterator,
    List,
    Mapping,
    Optional,
    Tuple,
    Union,
)

import httpx

from .errors import ConfigError, ConnectError, ProtocolError, SandlotError, Timeout, error_from_response
from .models import Health, KeyCreated, SandboxInfo, SnapshotInfo

if TYPE_CHECKING:
    from .images import AsyncImages, Images

#: Where the CLI and the SDKs find the server unless told otherwise.
DEFAULT_URL = "http://127.0.0.1:7423"
#: Environment variable naming the server URL.
ENV_URL = "SANDLOT_URL"
#: Environment variable holding the API key.
ENV_API_KEY = "SANDLOT_API_KEY"

#: Seconds a plain call may take before :class:`~sandlot.errors.Timeout`.
DEFAULT_TIMEOUT = 60.0
# Calls that wait on the sandbox's work (a command, a wait, a stream, a transfer, a build) take as long
# as that work: no read timeout, only a bound on connecting.
_WAITING = httpx.Timeout(None, connect=10.0)

Params = Optional[Union[Mapping[str, Any], List[Tuple[str, Any]]]]
TimeoutArg = Union[float, httpx.Timeout, None]


def resolve_config(url: Optional[str], api_key: Optional[str]) -> Tuple[str, str]:
    """The server URL and API key: the arguments, else ``SANDLOT_URL`` / ``SANDLOT_API_KEY``."""
    url = (url or os.environ.get(ENV_URL) or DEFAULT_URL).rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"server URL {url!r} must start with http:// or https:// (e.g. {DEFAULT_URL})")
    key = api_key or os.environ.get(ENV_API_KEY)
    if not key:
        raise ConfigError(
            f"no API key: pass api_key= or set {ENV_API_KEY} "
            "(the admin key is <state-dir>/admin.key; `sandlot keys create --tenant NAME` makes others)"
        )
    return url, key


def _timeout(timeout: TimeoutArg) -> httpx.Timeout:
    if isinstance(timeout, httpx.Timeout):
        return timeout
    return httpx.Timeout(timeout, connect=min(10.0, timeout) if timeout else 10.0)


def _params(params: Params) -> Any:
    """Drops ``None`` values and writes booleans as the API reads them."""
    if params is None:
        return None
    pairs = params.items() if isinstance(params, Mapping) else params
    return [(k, ("true" if v else "false") if isinstance(v, bool) else v) for k, v in pairs if v is not None]


@contextlib.contextmanager
def transport_errors(url: str) -> Iterator[None]:
    """Turns httpx's transport failures into the SDK's exceptions, naming the server."""
    try:
        yield
    except httpx.TimeoutException as e:
        raise Timeout(f"request to sandlot at {url} timed out: {e}") from e
    except httpx.ConnectError as e:
        raise ConnectError(
            f"cannot reach sandlot at {url}: {e}; start a server with `sudo sandlot serve` or set {ENV_URL}"
        ) from e
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
        raise ProtocolError(f"the connection to sandlot at {url} broke: {e}") from e
    except httpx.HTTPError as e:
        raise SandlotError(f"request to sandlot at {url} failed: {e}") from e


def _json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError as e:
        raise ProtocolError(f"unreadable answer from the server: {response.text[:200]!r}") from e


class Client:
    """A blocking connection to a sandlot server.

    Args:
        url: Server URL; default ``SANDLOT_URL``, else ``http://127.0.0.1:7423``.
        api_key: API key (``sl_…``); default ``SANDLOT_API_KEY``.
        timeout: Seconds a plain call may take (calls that wait on a command or stream have no read
            timeout).

    Use it as a context manager, or call :meth:`close`, to release its connections. ``client.images``
    manages images.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url, self.api_key = resolve_config(url, api_key)
        self._http = httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=_timeout(timeout),
        )
        from .images import Images

        self.images: Images = Images(self)
        """Images: list, get, delete, pull, import, build."""

    def close(self) -> None:
        """Closes the connections (sandboxes are not touched)."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        wait: bool = False,
    ) -> httpx.Response:
        """Sends one call and answers its response; raises the SDK's exception for an error status.
        ``wait`` lifts the read timeout (for calls that last as long as the sandbox's work)."""
        with transport_errors(self.url):
            response = self._http.request(
                method,
                path,
                json=json,
                params=_params(params),
                content=content,
                headers=headers,
                timeout=_WAITING if wait else httpx.USE_CLIENT_DEFAULT,
            )
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response

    def call(self, method: str, path: str, *, json: Any = None, params: Params = None, wait: bool = False) -> Any:
        """Like :meth:`request`, answering the parsed JSON body (``None`` when empty)."""
        response = self.request(method, path, json=json, params=params, wait=wait)
        return _json(response) if response.content else None

    @contextlib.contextmanager
    def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> Iterator[httpx.Response]:
        """A streamed call (no read timeout): the response, its body not yet read; an error status is
        raised before the block runs."""
        with transport_errors(self.url):
            with self._http.stream(
                method,
                path,
                json=json,
                params=_params(params),
                content=content,
                headers=headers,
                timeout=_WAITING,
            ) as response:
                if response.status_code >= 400:
                    raise error_from_response(response.status_code, response.read())
                yield response

    def health(self) -> Health:
        """``GET /healthz``: the server answers, and which host features it runs without."""
        d = self.call("GET", "/healthz")
        return Health(status=d["status"], degraded=list(d.get("degraded", [])))

    def list_sandboxes(self) -> List[SandboxInfo]:
        """The caller's tenant's sandboxes that are not deleted, newest first."""
        return [SandboxInfo.from_json(s) for s in self.call("GET", "/v1/sandboxes")["sandboxes"]]

    def list_snapshots(self) -> List[SnapshotInfo]:
        """The caller's tenant's snapshots, newest first."""
        return [SnapshotInfo.from_json(s) for s in self.call("GET", "/v1/snapshots")["snapshots"]]

    def delete_snapshot(self, snapshot: str) -> None:
        """Deletes a snapshot by id or name (sandboxes made from it keep their files)."""
        self.request("DELETE", f"/v1/snapshots/{snapshot}")

    def create_key(self, tenant: str, *, expires_in_s: Optional[int] = None) -> KeyCreated:
        """Makes an API key for ``tenant`` (created if new). Needs the admin key."""
        d = self.call("POST", "/v1/keys", json=drop_none({"tenant": tenant, "expires_in_s": expires_in_s}))
        return KeyCreated(tenant=d["tenant"], key=d["key"], id=d.get("id", ""), expires_at_ms=d.get("expires_at_ms"))

    def audit(self, *, sandbox_id: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Audit records, newest first: ``seq``, ``at_ms``, ``tenant``, ``sandbox_id``, ``action``, ``detail``."""
        entries: List[Dict[str, Any]] = self.call(
            "GET", "/v1/audit", params={"sandbox_id": sandbox_id, "limit": limit}
        )["entries"]
        return entries


class AsyncClient:
    """An asyncio connection to a sandlot server; the same calls as :class:`Client`, awaited.

    Args:
        url: Server URL; default ``SANDLOT_URL``, else ``http://127.0.0.1:7423``.
        api_key: API key (``sl_…``); default ``SANDLOT_API_KEY``.
        timeout: Seconds a plain call may take.

    Use ``async with``, or await :meth:`close`. ``client.images`` manages images.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.url, self.api_key = resolve_config(url, api_key)
        self._http = httpx.AsyncClient(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=_timeout(timeout),
        )
        from .images import AsyncImages

        self.images: AsyncImages = AsyncImages(self)
        """Images: list, get, delete, pull, import, build."""

    async def close(self) -> None:
        """Closes the connections (sandboxes are not touched)."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
        wait: bool = False,
    ) -> httpx.Response:
        """Sends one call and answers its response; raises the SDK's exception for an error status."""
        with transport_errors(self.url):
            response = await self._http.request(
                method,
                path,
                json=json,
                params=_params(params),
                content=content,
                headers=headers,
                timeout=_WAITING if wait else httpx.USE_CLIENT_DEFAULT,
            )
        if response.status_code >= 400:
            raise error_from_response(response.status_code, response.content)
        return response

    async def call(
        self, method: str, path: str, *, json: Any = None, params: Params = None, wait: bool = False
    ) -> Any:
        """Like :meth:`request`, answering the parsed JSON body (``None`` when empty)."""
        response = await self.request(method, path, json=json, params=params, wait=wait)
        return _json(response) if response.content else None

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Params = None,
        content: Any = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> AsyncIterator[httpx.Response]:
        """A streamed call (no read timeout); an error status is raised before the block runs."""
        with transport_errors(self.url):
            async with self._http.stream(
                method,
                path,
                json=json,
                params=_params(params),
                content=content,
                headers=headers,
                timeout=_WAITING,
            ) as response:
                if response.status_code >= 400:
                    raise error_from_response(response.status_code, await response.aread())
                yield response

    async def health(self) -> Health:
        """``GET /healthz``: the server answers, and which host features it runs without."""
        d = await self.call("GET", "/healthz")
        return Health(status=d["status"], degraded=list(d.get("degraded", [])))

    async def list_sandboxes(self) -> List[SandboxInfo]:
        """The caller's tenant's sandboxes that are not deleted, newest first."""
        return [SandboxInfo.from_json(s) for s in (await self.call("GET", "/v1/sandboxes"))["sandboxes"]]

    async def list_snapshots(self) -> List[SnapshotInfo]:
        """The caller's tenant's snapshots, newest first."""
        return [SnapshotInfo.from_json(s) for s in (await self.call("GET", "/v1/snapshots"))["snapshots"]]

    async def delete_snapshot(self, snapshot: str) -> None:
        """Deletes a snapshot by id or name (sandboxes made from it keep their files)."""
        await self.request("DELETE", f"/v1/snapshots/{snapshot}")

    async def create_key(self, tenant: str, *, expires_in_s: Optional[int] = None) -> KeyCreated:
        """Makes an API key for ``tenant`` (created if new). Needs the admin key."""
        d = await self.call("POST", "/v1/keys", json=drop_none({"tenant": tenant, "expires_in_s": expires_in_s}))
        return KeyCreated(tenant=d["tenant"], key=d["key"], id=d.get("id", ""), expires_at_ms=d.get("expires_at_ms"))

    async def audit(self, *, sandbox_id: Optional[str] = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """Audit records, newest first: ``seq``, ``at_ms``, ``tenant``, ``sandbox_id``, ``action``, ``detail``."""
        d = await self.call("GET", "/v1/audit", params={"sandbox_id": sandbox_id, "limit": limit})
        entries: List[Dict[str, Any]] = d["entries"]
        return entries


def drop_none(d: Dict[str, Any]) -> Dict[str, Any]:
    """A JSON body without its unset fields (the API rejects unknown fields, not missing ones)."""
    return {k: v for k, v in d.items() if v is not None}

