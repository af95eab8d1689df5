"""Python SDK for sandlot, the self-hosted sandbox server.

Quickstart (``SANDLOT_URL`` and ``SANDLOT_API_KEY`` set)::

    from sandlot import Sandbox

    with Sandbox.create() as sbx:
        print(sbx.commands.run("echo hello").stdout)

:class:`Sandbox` and :class:`Client` block; :class:`AsyncSandbox` and :class:`AsyncClient` are the same
calls for asyncio. Errors are :class:`SandlotError` subclasses named after the API's error codes.
"""

from .client import DEFAULT_URL, ENV_API_KEY, ENV_URL, AsyncClient, Client
from .commands import AsyncCommandHandle, AsyncCommands, CommandHandle, Commands
from .errors import (
    AlreadyExists,
    AuthError,
    ConfigError,
    Conflict,
    ConnectError,
    DirectoryNotEmpty,
    FileNotFound,
    Forbidden,
    InternalError,
    InvalidRequest,
    LimitReached,
    NotFound,
    PermissionDenied,
    PortUnreachable,
    ProtocolError,
    RegistryDenied,
    RegistryUnavailable,
    SandlotError,
    ServerFull,
    Timeout,
    TooLarge,
    Unavailable,
    WrongFileKind,
)
from .files import AsyncByteStream, AsyncFiles, ByteStream, Files
from .images import AsyncImages, Images
from .models import (
    CommandResult,
    ExecEvent,
    Exited,
    FileStat,
    Health,
    ImageInfo,
    ImageLayer,
    KeyCreated,
    Limits,
    NetworkInfo,
    NetworkPolicy,
    Output,
    PortInfo,
    ProcessInfo,
    ProgressEvent,
    SandboxInfo,
    SnapshotInfo,
    Started,
    Truncated,
    WriteResult,
)
from .sandbox import AsyncSandbox, Sandbox

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_URL", "ENV_API_KEY", "ENV_URL", "AsyncClient", "Client",
    "AsyncCommandHandle", "AsyncCommands", "CommandHandle", "Commands",
    "AlreadyExists", "AuthError", "ConfigError", "Conflict", "ConnectError", "DirectoryNotEmpty",
    "FileNotFound", "Forbidden", "InternalError", "InvalidRequest", "LimitReached", "NotFound",
    "PermissionDenied", "PortUnreachable", "ProtocolError", "RegistryDenied", "RegistryUnavailable",
    "SandlotError", "ServerFull", "Timeout", "TooLarge", "Unavailable", "WrongFileKind",
    "AsyncByteStream", "AsyncFiles", "ByteStream", "Files", "AsyncImages", "Images",
    "CommandResult", "ExecEvent", "Exited", "FileStat", "Health", "ImageInfo", "ImageLayer", "KeyCreated",
    "Limits", "NetworkInfo", "NetworkPolicy", "Output", "PortInfo", "ProcessInfo", "ProgressEvent",
    "SandboxInfo", "SnapshotInfo", "Started", "Truncated", "WriteResult",
    "AsyncSandbox", "Sandbox", "__version__",
]  # fmt: skip
