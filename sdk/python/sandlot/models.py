"""What the API answers, as typed, frozen dataclasses (the wire types of ``crates/sandlot-api``).

Each has a ``from_json`` that reads the server's JSON object; fields a newer server adds are ignored,
fields an older one leaves out take their documented defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Sequence, Union

#: Identities inside a sandbox: ``user`` (uid 1000, home ``/home/user``) or ``root`` (of the sandbox).
User = Literal["user", "root"]
#: Egress modes: ``deny`` (loopback only, the default), ``allow-all``, ``allowlist``.
NetworkMode = Literal["deny", "allow-all", "allowlist"]

JSON = Mapping[str, Any]


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None else int(v)


@dataclass(frozen=True)
class Limits:
    """Resource limits in force for a sandbox (defaults filled in by the server)."""

    cpu: float
    memory_mb: int
    pids: int
    timeout_s: int
    disk_mb: Optional[int] = None
    """Writable-layer cap in MiB; ``None`` when the server runs without disk limits."""

    @classmethod
    def from_json(cls, d: JSON) -> Limits:
        """Reads the ``limits`` object."""
        return cls(
            cpu=float(d["cpu"]),
            memory_mb=int(d["memory_mb"]),
            pids=int(d["pids"]),
            timeout_s=int(d["timeout_s"]),
            disk_mb=_opt_int(d.get("disk_mb")),
        )


@dataclass(frozen=True)
class NetworkPolicy:
    """An egress policy to set (``Sandbox.create(network=...)``, ``sbx.set_network(...)``).

    ``mode`` is ``deny`` (default: loopback only), ``allow-all`` (all but the always-denied ranges and
    ``deny``) or ``allowlist`` (only ``allow``: names, ``*.suffix`` wildcards, CIDRs). ``rules`` maps a
    host to headers the server's proxy injects into its requests (credential brokering: the sandbox never
    sees the values, and reading the policy back shows header names only). ``public_ports`` (inbound)
    lets anyone with a port's URL reach the sandbox's servers without its token; ``None`` (the default)
    is ``False`` at create and leaves it unchanged in ``set_network``.
    """

    mode: NetworkMode = "deny"
    allow: Sequence[str] = ()
    deny: Sequence[str] = ()
    rules: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    public_ports: Optional[bool] = None

    def to_json(self) -> Dict[str, Any]:
        """The ``network`` object of the API."""
        body: Dict[str, Any] = {
            "mode": self.mode,
            "allow": list(self.allow),
            "deny": list(self.deny),
            "rules": {host: {"headers": dict(headers)} for host, headers in self.rules.items()},
        }
        if self.public_ports is not None:
            body["public_ports"] = self.public_ports
        return body


@dataclass(frozen=True)
class NetworkInfo:
    """A sandbox's egress policy as the server reports it (header values redacted) and its traffic."""

    mode: NetworkMode = "deny"
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)
    rules: Dict[str, List[str]] = field(default_factory=dict)
    """Host to the *names* of the headers injected for it."""
    public_ports: bool = False
    """Ports answer requests without a token or key."""
    bytes_out: int = 0
    bytes_in: int = 0

    @classmethod
    def from_json(cls, d: JSON) -> NetworkInfo:
        """Reads the ``network`` object of a ``SandboxInfo``."""
        return cls(
            mode=d.get("mode", "deny"),
            allow=list(d.get("allow", [])),
            deny=list(d.get("deny", [])),
            rules={k: list(v) for k, v in d.get("rules", {}).items()},
            public_ports=bool(d.get("public_ports", False)),
            bytes_out=int(d.get("bytes_out", 0)),
            bytes_in=int(d.get("bytes_in", 0)),
        )


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the API reports it (``GET /v1/sandboxes/{id}``)."""

    id: str
    state: str
    """``creating``, ``running``, ``paused``, ``stopped``, ``failed`` or ``deleted``."""
    image: str
    limits: Limits
    metadata: Dict[str, str]
    created_at_ms: int
    expires_at_ms: int
    reason: Optional[str] = None
    name: Optional[str] = None
    persistent: bool = False
    auto_resume: bool = False
    idle_timeout_s: Optional[int] = None
    on_timeout: str = "delete"
    stop_after_s: int = 600
    last_active_at_ms: int = 0
    snapshot: Optional[str] = None
    network: NetworkInfo = field(default_factory=NetworkInfo)

    @classmethod
    def from_json(cls, d: JSON) -> SandboxInfo:
        """Reads a ``SandboxInfo`` object."""
        return cls(
            id=d["id"],
            state=d["state"],
            image=d["image"],
            limits=Limits.from_json(d["limits"]),
            metadata=dict(d.get("metadata", {})),
            created_at_ms=int(d["created_at_ms"]),
            expires_at_ms=int(d["expires_at_ms"]),
            reason=d.get("reason"),
            name=d.get("name"),
            persistent=bool(d.get("persistent", False)),
            auto_resume=bool(d.get("auto_resume", False)),
            idle_timeout_s=_opt_int(d.get("idle_timeout_s")),
            on_timeout=d.get("on_timeout", "delete"),
            stop_after_s=int(d.get("stop_after_s", 600)),
            last_active_at_ms=int(d.get("last_active_at_ms", 0)),
            snapshot=d.get("snapshot"),
            network=NetworkInfo.from_json(d.get("network", {})),
        )


@dataclass(frozen=True)
class CommandResult:
    """How a command ended, with its output (head and tail when over the cap).

    ``status`` is ``exited`` (``exit_code`` is its code), ``signaled`` (128 + ``signal``), ``timeout``
    (124: its ``timeout`` passed), ``oom`` (137) or ``killed`` (137: the sandbox went away). A program
    that cannot start ends ``exited`` with 127 or 126 and a ``sandlot: …`` line on stderr.
    """

    status: str
    exit_code: int
    stdout: str
    stderr: str
    stdout_bytes: int
    """Bytes the command wrote to stdout in all (more than ``len(stdout)`` when truncated)."""
    stderr_bytes: int
    truncated: bool
    """Whether either stream passed the output cap and lost its middle."""
    duration_ms: int
    signal: Optional[int] = None
    pid: Optional[int] = None
    """The API process id, when known (streamed and background commands)."""

    @property
    def ok(self) -> bool:
        """True when the command exited with code 0."""
        return self.status == "exited" and self.exit_code == 0

    @classmethod
    def from_json(cls, d: JSON, pid: Optional[int] = None) -> CommandResult:
        """Reads an ``ExecResult`` object."""
        return cls(
            status=d["status"],
            exit_code=int(d["exit_code"]),
            stdout=d.get("stdout", ""),
            stderr=d.get("stderr", ""),
            stdout_bytes=int(d.get("stdout_bytes", 0)),
            stderr_bytes=int(d.get("stderr_bytes", 0)),
            truncated=bool(d.get("truncated", False)),
            duration_ms=int(d.get("duration_ms", 0)),
            signal=_opt_int(d.get("signal")),
            pid=pid,
        )


@dataclass(frozen=True)
class Started:
    """Stream event: the process runs under API process id ``pid``."""

    pid: int


@dataclass(frozen=True)
class Output:
    """Stream event: a chunk of output (UTF-8 text, split on character boundaries)."""

    stream: Literal["stdout", "stderr"]
    data: str


@dataclass(frozen=True)
class Truncated:
    """Stream event: ``stream`` passed its cap (the tail follows after exit), or ``events``: this
    reader fell behind and missed events."""

    stream: str


@dataclass(frozen=True)
class Exited:
    """Stream event, always the last: how the process ended (counts, no output text)."""

    status: str
    exit_code: int
    stdout_bytes: int
    stderr_bytes: int
    truncated: bool
    duration_ms: int
    signal: Optional[int] = None


#: One line of an exec or logs stream. An ``error`` line is raised as a :class:`SandlotError`.
ExecEvent = Union[Started, Output, Truncated, Exited]


@dataclass(frozen=True)
class ProcessInfo:
    """A process started through the API (``GET …/processes``)."""

    pid: int
    argv: List[str]
    running: bool
    started_at_ms: int
    status: Optional[str] = None
    exit_code: Optional[int] = None
    tag: Optional[str] = None
    cwd: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    pty: bool = False
    #: For what a finished command left running in its process group: that command's pid.
    left_by: Optional[int] = None

    @classmethod
    def from_json(cls, d: JSON) -> ProcessInfo:
        """Reads a ``ProcessInfo`` object."""
        return cls(
            pid=int(d["pid"]),
            argv=list(d["argv"]),
            running=bool(d["running"]),
            started_at_ms=int(d["started_at_ms"]),
            status=d.get("status"),
            exit_code=_opt_int(d.get("exit_code")),
            tag=d.get("tag"),
            cwd=d.get("cwd", ""),
            env=dict(d.get("env", {})),
            pty=bool(d.get("pty", False)),
            left_by=_opt_int(d.get("left_by")),
        )


@dataclass(frozen=True)
class FileStat:
    """Metadata of one path inside a sandbox (symlinks are not followed)."""

    path: str
    name: str
    kind: str
    """``file``, ``dir``, ``symlink`` or ``other``."""
    size: int
    mode: int
    """Permission bits (``0o644``)."""
    uid: int
    mtime_ms: int
    link_target: Optional[str] = None
    metadata: Dict[str, str] = field(default_factory=dict)
    """The entry's ``user.e2b.*`` extended attributes, prefix stripped (E2B's file metadata)."""

    @property
    def is_dir(self) -> bool:
        """True for a directory."""
        return self.kind == "dir"

    @property
    def is_file(self) -> bool:
        """True for a regular file."""
        return self.kind == "file"

    @classmethod
    def from_json(cls, d: JSON) -> FileStat:
        """Reads a ``FileStat`` object."""
        return cls(
            path=d["path"],
            name=d["name"],
            kind=d["kind"],
            size=int(d["size"]),
            mode=int(d["mode"]),
            uid=int(d["uid"]),
            mtime_ms=int(d["mtime_ms"]),
            link_target=d.get("link_target"),
            metadata={str(k): str(v) for k, v in (d.get("metadata") or {}).items()},
        )


@dataclass(frozen=True)
class WriteResult:
    """Answer to a file write or directory upload: where it landed and the bytes received."""

    path: str
    bytes: int
    entries: Optional[int] = None
    """Entries unpacked (directory uploads only)."""

    @classmethod
    def from_json(cls, d: JSON) -> WriteResult:
        """Reads a ``WriteResult`` object."""
        return cls(path=d["path"], bytes=int(d["bytes"]), entries=_opt_int(d.get("entries")))


@dataclass(frozen=True)
class SnapshotInfo:
    """A read-only snapshot of a sandbox's files; pass ``id`` or ``name`` as ``snapshot=`` to create."""

    id: str
    sandbox_id: str
    image: str
    created_at_ms: int
    name: Optional[str] = None
    bytes: int = 0
    """Bytes charged to the tenant's snapshot quota."""

    @classmethod
    def from_json(cls, d: JSON) -> SnapshotInfo:
        """Reads a ``SnapshotInfo`` object."""
        return cls(
            id=d["id"],
            sandbox_id=d["sandbox_id"],
            image=d["image"],
            created_at_ms=int(d["created_at_ms"]),
            name=d.get("name"),
            bytes=int(d.get("bytes", 0)),
        )


@dataclass(frozen=True)
class PortInfo:
    """An exposed sandbox port: ``url`` is its preview URL (the ``token`` in it admits a browser);
    ``api_url`` is the same port on the API's own address, for programs that send the API key
    (``requests`` does not resolve ``*.localhost``)."""

    port: int
    url: str
    token: str
    api_url: str = ""

    @classmethod
    def from_json(cls, d: JSON) -> PortInfo:
        """Reads a ``PortInfo`` object."""
        return cls(port=int(d["port"]), url=d["url"], token=d["token"], api_url=d.get("api_url", ""))


@dataclass(frozen=True)
class ImageLayer:
    """One layer of an image: its blob's digest and size."""

    digest: str
    size_bytes: int


@dataclass(frozen=True)
class ImageInfo:
    """An image sandboxes can boot (``image=`` of a create)."""

    name: str
    owner: str
    """``tenant``, ``public`` or ``builtin`` (``host``)."""
    size_bytes: int
    created_at_ms: int
    reference: Optional[str] = None
    digest: Optional[str] = None
    id: Optional[str] = None
    platform: Optional[str] = None
    layers: List[ImageLayer] = field(default_factory=list)
    config: Dict[str, Any] = field(default_factory=dict)
    """How it runs: ``env``, ``working_dir``, ``user``, ``entrypoint``, ``cmd``, ``labels``, ``exposed_ports``."""

    @classmethod
    def from_json(cls, d: JSON) -> ImageInfo:
        """Reads an image object."""
        return cls(
            name=d["name"],
            owner=d["owner"],
            size_bytes=int(d["size_bytes"]),
            created_at_ms=int(d["created_at_ms"]),
            reference=d.get("reference"),
            digest=d.get("digest"),
            id=d.get("id"),
            platform=d.get("platform"),
            layers=[ImageLayer(l["digest"], int(l["size_bytes"])) for l in d.get("layers", [])],
            config=dict(d.get("config", {})),
        )


@dataclass(frozen=True)
class ProgressEvent:
    """One line of a pull, import or build stream, as sent: ``type`` (``step``, ``output``,
    ``resolved``, ``download``, ``unpacked``, …) and the line's other fields."""

    type: str
    fields: Dict[str, Any]


@dataclass(frozen=True)
class KeyCreated:
    """A new API key (``Client.create_key``); ``key`` is the secret, shown once."""

    tenant: str
    key: str
    id: str
    expires_at_ms: Optional[int] = None


@dataclass(frozen=True)
class Health:
    """``GET /healthz``: ``status`` is ``ok`` when the server answers; ``degraded`` names host features
    the server runs without."""

    status: str
    degraded: List[str]
