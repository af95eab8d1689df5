"""Exceptions of the SDK, one class per error code of the sandlot API (docs/API.md, "Errors").

Every error the server answers is a :class:`SandlotError` subclass chosen by its stable ``code``; the
HTTP ``status``, the server's ``message`` and its ``retryable`` hint are kept. Codes sharing a meaning
share a base class, so ``except NotFound`` also catches :class:`FileNotFound`, and ``except Conflict``
catches :class:`AlreadyExists`, :class:`WrongFileKind` and :class:`DirectoryNotEmpty`. A code this SDK
does not know yet maps by its HTTP status. Transport failures have classes of their own
(:class:`ConnectError`, :class:`Timeout`), so "no server" reads differently from "the server said no".
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Type


class SandlotError(Exception):
    """Base of every error the SDK raises.

    Attributes:
        message: What went wrong and what to do (the server's own words when it answered).
        code: The server's stable error code (``not_found``, ``conflict``, …), ``None`` for local failures.
        status: The HTTP status of the answer, ``None`` when there was none (transport failure, or an
            error reported inside a stream after its ``200``).
        retryable: Whether the same request may succeed later unchanged (decided by the server).
        line: For a failed image build, the Dockerfile line of the failed step.
        tail: For a failed image build, the last output of the failed ``RUN``.
    """

    default_retryable = False

    def __init__(
        self,
        message: str,
        *,
        code: Optional[str] = None,
        status: Optional[int] = None,
        retryable: Optional[bool] = None,
        line: Optional[int] = None,
        tail: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.retryable = self.default_retryable if retryable is None else retryable
        self.line = line
        self.tail = tail

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class InvalidRequest(SandlotError):
    """400 ``invalid_request``: a malformed request or a value out of range; the message names the field."""


class AuthError(SandlotError):
    """401 ``unauthenticated``: the API key is missing, unknown, expired or revoked."""


class Forbidden(SandlotError):
    """403 ``forbidden``: a valid key that may not do this (admin-only routes)."""


class PermissionDenied(SandlotError):
    """403 ``permission_denied``: the sandbox user may not access the path (use ``user="root"``)."""


class RegistryDenied(SandlotError):
    """403 ``registry_denied``: an image registry refused the pull's credentials."""


class NotFound(SandlotError):
    """404 ``not_found``: no such sandbox (for this tenant), snapshot, key, process or image."""


class FileNotFound(NotFound):
    """404 ``file_not_found``: the path does not exist inside the sandbox."""


class Conflict(SandlotError):
    """409 ``conflict``: the sandbox's state does not allow this, or the process has already exited."""


class WrongFileKind(Conflict):
    """409 ``wrong_file_kind``: a directory where a file is needed, or the reverse."""


class AlreadyExists(Conflict):
    """409 ``already_exists``: the destination, sandbox name or snapshot name exists."""


class DirectoryNotEmpty(Conflict):
    """409 ``directory_not_empty``: removing a non-empty directory without ``recursive=True``."""


class TooLarge(SandlotError):
    """413 ``too_large``: over an upload, listing or disk limit."""


class LimitReached(SandlotError):
    """429 ``limit_reached``: a server, sandbox or tenant limit is reached; free something and retry."""

    default_retryable = True


class ServerFull(LimitReached):
    """429 ``server_full``: the running sandboxes hold the host's capacity; retry when some have ended."""


class PortUnreachable(SandlotError):
    """502 ``port_unreachable``: nothing answers on the sandbox port."""

    default_retryable = True


class RegistryUnavailable(SandlotError):
    """502 ``registry_unavailable``: an image registry could not be reached or sent bad data."""

    default_retryable = True


class InternalError(SandlotError):
    """500 ``internal``: a bug or host problem on the server (see its log)."""


class Unavailable(SandlotError):
    """503 ``unavailable``: the server's connection caps are reached; retry with backoff."""

    default_retryable = True


class ConnectError(SandlotError):
    """The server could not be reached (nothing listening at the URL, refused, DNS failure)."""

    default_retryable = True


class Timeout(SandlotError):
    """The HTTP request to the server timed out (the client's timeout, not a command's ``timeout``)."""

    default_retryable = True


class ProtocolError(SandlotError):
    """The server answered something this SDK does not understand, or a stream broke off."""


class ConfigError(SandlotError):
    """The client is set up wrong (no API key, an unusable URL)."""


_BY_CODE: Dict[str, Type[SandlotError]] = {
    "invalid_request": InvalidRequest,
    "unauthenticated": AuthError,
    "forbidden": Forbidden,
    "permission_denied": PermissionDenied,
    "registry_denied": RegistryDenied,
    "not_found": NotFound,
    "file_not_found": FileNotFound,
    "conflict": Conflict,
    "wrong_file_kind": WrongFileKind,
    "already_exists": AlreadyExists,
    "directory_not_empty": DirectoryNotEmpty,
    "too_large": TooLarge,
    "limit_reached": LimitReached,
    "server_full": ServerFull,
    "port_unreachable": PortUnreachable,
    "registry_unavailable": RegistryUnavailable,
    "internal": InternalError,
    "unavailable": Unavailable,
}

_BY_STATUS: Dict[int, Type[SandlotError]] = {
    400: InvalidRequest,
    401: AuthError,
    403: Forbidden,
    404: NotFound,
    405: InvalidRequest,
    409: Conflict,
    413: TooLarge,
    429: LimitReached,
    500: InternalError,
    502: PortUnreachable,
    503: Unavailable,
}


def error_from_detail(
    detail: Mapping[str, Any],
    status: Optional[int] = None,
    line: Optional[int] = None,
    tail: Optional[str] = None,
) -> SandlotError:
    """The exception for an API error object ``{"code", "message", "retryable"}``."""
    code = str(detail.get("code", ""))
    message = str(detail.get("message", "")) or f"error {code or status}"
    cls = _BY_CODE.get(code) or (_BY_STATUS.get(status, SandlotError) if status is not None else SandlotError)
    retryable = detail.get("retryable")
    return cls(
        message,
        code=code or None,
        status=status,
        retryable=bool(retryable) if isinstance(retryable, bool) else None,
        line=line,
        tail=tail,
    )


def error_from_response(status: int, body: bytes) -> SandlotError:
    """The exception for a non-2xx answer: its JSON error body, else the status and the start of the body."""
    try:
        parsed = json.loads(body)
        detail = parsed["error"]
        if not isinstance(detail, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        text = body[:300].decode("utf-8", "replace").strip()
        cls = _BY_STATUS.get(status, SandlotError)
        return cls(f"HTTP {status}: {text}" if text else f"HTTP {status} with no error body", status=status)
    return error_from_detail(detail, status)
