"""Typed exceptions of the host SDK.

Every failure is an :class:`AbxError` with

- ``status``: the HTTP status (0 when no response arrived, or the check was client-side),
- ``type``: the server's ``type`` when the command server sent one (``InvalidArgument``,
  ``NotFound``, or the class of the exception a command raised, e.g. ``ValueError`` or
  ``std::domain_error``), else a name derived from the status (``Unauthenticated``,
  ``NotFound``, ``Unavailable``, …) or from the client-side failure (``MissingCapability``,
  ``Timeout``),
- ``message``: the server's own message (``str(e)`` is the same text),
- ``body``: the parsed JSON error body, when there was one.

The classes mirror the C++ SDK's error codes and ``js/abx-commands``' error classes.
"""

from __future__ import annotations

import json
import re
from typing import Any, List, Optional

_STATUS_TYPES = {
    400: "InvalidArgument",
    401: "Unauthenticated",
    403: "PermissionDenied",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "FailedPrecondition",
    413: "PayloadTooLarge",
    415: "UnsupportedMediaType",
    429: "ResourceExhausted",
    500: "Internal",
    502: "Unavailable",
    503: "Unavailable",
    504: "DeadlineExceeded",
}


class AbxError(Exception):
    """Base class of every error the SDK raises."""

    def __init__(self, message: str, *, status: int = 0, type: str = "", body: Any = None,
                 command: Optional[str] = None):
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type or _STATUS_TYPES.get(status, f"HTTP{status}" if status else "Error")
        self.body = body
        self.command = command

    def __repr__(self) -> str:
        return (f"{self.__class__.__name__}({self.message!r}, status={self.status}, "
                f"type={self.type!r})")


class InvalidArguments(AbxError, ValueError):
    """400: arguments refused (unknown, missing or mistyped), by the server or — for a
    template's custom command — by the client before anything is sent. ``field`` is the first
    argument named in the message, ``fields`` all of them."""

    def __init__(self, message: str, **kw):
        super().__init__(message, **kw)
        self.fields: List[str] = _argument_names(message)
        self.field: Optional[str] = self.fields[0] if self.fields else None


class AuthError(AbxError, PermissionError):
    """401 (missing, wrong, expired or foreign key, token or signature) or 403."""


class NotFound(AbxError, LookupError):
    """404: no such sandbox, template, file or command."""


class CommandNotFound(NotFound):
    """404 from the command server: no such command, or one outside a scoped token's list
    (the server does not tell them apart). Also a template without that custom command."""


class CapabilityError(AbxError):
    """The sandbox's template lacks a capability the call needs; raised before any request."""


class Timeout(AbxError, TimeoutError):
    """The call ran too long: the client's timeout (status 0) or the server's deadline (504).
    A command that timed out may still be running in the sandbox."""


class Unavailable(AbxError, ConnectionError):
    """Nothing answered: connection failed, 502/503, or abxd's 403 for a template that has no
    command server."""


class CommandFailed(AbxError):
    """500 from the command server: the command ran and raised; ``type`` is its class."""


class Conflict(AbxError):
    """409: the platform refused in the sandbox's current state (paused, not secure, …)."""


def _argument_names(message: str) -> List[str]:
    m = re.search(r"arguments? ((?:'[^']*'(?:, )?)+)", message)
    if not m:
        return []
    return re.findall(r"'([^']*)'", m.group(1))


def error_from_response(status: int, body: bytes, *, plane: str, what: str,
                        command: Optional[str] = None) -> AbxError:
    """Maps an HTTP error response to a typed exception. ``plane`` is ``"server"`` (the
    command server), ``"envd"`` or ``"api"`` (the control plane)."""
    parsed: Any = None
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except (UnicodeDecodeError, ValueError):
        parsed = None
    obj = parsed if isinstance(parsed, dict) else {}
    from_server = isinstance(obj.get("type"), str) and isinstance(obj.get("error"), str)
    if isinstance(obj.get("error"), str):
        message = obj["error"]
    elif isinstance(obj.get("message"), str):
        message = obj["message"]
    else:
        text = body.decode("utf-8", "replace").strip() if body and len(body) < 512 else ""
        message = text or f"HTTP {status}"
    etype = obj["type"] if from_server else ""
    if not from_server:
        message = f"{what}: {status} {message}"
    kw = dict(status=status, type=etype, body=parsed, command=command)
    if status == 400:
        return InvalidArguments(message, **kw)
    if status == 401:
        return AuthError(message, **kw)
    if status == 403:
        # abxd keeps a port private (no command server in the template) with 403.
        if plane == "server" and not from_server:
            return Unavailable(message, **kw)
        return AuthError(message, **kw)
    if status == 404:
        if plane == "server" and (from_server or command is not None):
            return CommandNotFound(message, **kw)
        return NotFound(message, **kw)
    if status == 409:
        return Conflict(message, **kw)
    if status == 504:
        return Timeout(message, **kw)
    if status in (502, 503):
        return Unavailable(message, **kw)
    if status == 500 and plane == "server" and from_server:
        return CommandFailed(message, **kw)
    return AbxError(message, **kw)
