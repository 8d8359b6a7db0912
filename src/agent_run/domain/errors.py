"""Domain errors: values with a stable code, a message a person can act on, and a field path."""

from typing import Any


class DomainError(Exception):
    """Base of every error a caller can match on by `code`."""

    code = "DomainError"

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.details = details

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            data["field"] = self.field
        if self.details:
            data["details"] = self.details
        return data


class AgentNotFound(DomainError):
    code = "AgentNotFound"


class Conflict(DomainError):
    code = "Conflict"


class InvalidRequest(DomainError):
    code = "InvalidRequest"


class UnknownRuntime(DomainError):
    code = "UnknownRuntime"


class NotRunning(DomainError):
    code = "NotRunning"


class NotResumable(DomainError):
    code = "NotResumable"


class AnswerNotReady(DomainError):
    code = "AnswerNotReady"


class AnswerIntegrity(DomainError):
    code = "AnswerIntegrity"


class ConfigInvalid(DomainError):
    code = "ConfigInvalid"


class SpawnFailed(DomainError):
    code = "SpawnFailed"


class DaemonUnavailable(DomainError):
    code = "DaemonUnavailable"


class BatchNotFound(DomainError):
    code = "BatchNotFound"


class RunNotFound(DomainError):
    code = "RunNotFound"


class RunLocked(DomainError):
    code = "RunLocked"


class GitError(DomainError):
    code = "GitError"


class StorageFull(DomainError):
    """The filesystem holding the home is full (ENOSPC / SQLITE_FULL); `details.writing` names
    what could not be written. Nothing partial was kept: retry once space is freed."""

    code = "StorageFull"


class HostUnreachable(DomainError):
    """A `[hosts.NAME]` cannot be reached over ssh now (`details.host`, ssh's last words in the
    message). Nothing was started there; its agents are `unreachable`, never lost."""

    code = "HostUnreachable"


class HostVersionMismatch(DomainError):
    """The host runs another agent-run version than this daemon (`details.local`,
    `details.remote`): refused at connect, before anything is started there."""

    code = "HostVersionMismatch"


class DaemonVersionMismatch(DomainError):
    """The home's running daemon is another agent-run version than this CLI (`details.local`,
    `details.remote`, `details.pid`): refused before any call; `agent-run api restart` starts
    the installed version (running agents keep running)."""

    code = "DaemonVersionMismatch"


class LineTooLong(DomainError):
    """A request that would exceed the daemon's line limit; `field` names the biggest param."""

    code = "LineTooLong"


class NoCapacity(DomainError):
    """`--route auto` found no route with fresh capacity above `min_remaining`; `details` lists
    what was set aside and why (omitted, deferred, unavailable)."""

    code = "NoCapacity"


class InternalError(DomainError):
    """The daemon hit a bug (-32603); `details.log` says where its log is."""

    code = "InternalError"


class PermissionDenied(DomainError):
    """The socket's peer is another user than the daemon's."""

    code = "PermissionDenied"


class ProtocolError(DomainError):
    """A JSON-RPC level error (not about the operation): `details.rpc_code` when the reply gave
    no typed `data`. Its subclasses are the codes the daemon sends."""

    code = "ProtocolError"


class ParseError(ProtocolError):
    """-32700: the line was not JSON."""

    code = "ParseError"


class InvalidUnicode(ParseError):
    """-32700: a string held a lone UTF-16 surrogate."""

    code = "InvalidUnicode"


class MalformedRequest(ProtocolError):
    """-32600: JSON, but not a JSON-RPC 2.0 request object."""

    code = "MalformedRequest"


class NestingTooDeep(MalformedRequest):
    """-32600: arrays / objects nested deeper than the daemon allows."""

    code = "NestingTooDeep"


class MethodNotFound(ProtocolError):
    """-32601: no tool of that name; `field` is `method`."""

    code = "MethodNotFound"


class InvalidParams(ProtocolError):
    """-32602: the params failed validation; `field` is the dotted path of the first culprit."""

    code = "InvalidParams"


ERRORS_BY_CODE: dict[str, type[DomainError]] = {
    cls.code: cls
    for cls in (
        DomainError,
        AgentNotFound,
        Conflict,
        InvalidRequest,
        UnknownRuntime,
        NotRunning,
        NotResumable,
        AnswerNotReady,
        AnswerIntegrity,
        ConfigInvalid,
        SpawnFailed,
        NoCapacity,
        DaemonUnavailable,
        BatchNotFound,
        RunNotFound,
        RunLocked,
        GitError,
        StorageFull,
        HostUnreachable,
        HostVersionMismatch,
        DaemonVersionMismatch,
        LineTooLong,
        InternalError,
        PermissionDenied,
        ProtocolError,
        ParseError,
        InvalidUnicode,
        MalformedRequest,
        NestingTooDeep,
        MethodNotFound,
        InvalidParams,
    )
}


def error_from_data(data: dict[str, Any]) -> DomainError:
    """Rebuild a typed error on the client side of a transport."""
    cls = ERRORS_BY_CODE.get(data.get("code", ""), DomainError)
    err = cls(
        data.get("message", "unknown error"), field=data.get("field"), **data.get("details", {})
    )
    err.code = data.get("code", cls.code)
    return err
