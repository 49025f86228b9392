"""Loch's one exception hierarchy and the table of Nessie error codes.

Every error that crosses a layer boundary is a :class:`LochError`. Each subclass names
an :class:`ErrorCode`, which carries the HTTP status that the REST layer answers with,
so that the server's handlers and the client's exception mapping are both generated
from :data:`ERROR_CLASSES` instead of chains of status checks::

    LochError
    ├── BadRequestError            BAD_REQUEST              400
    ├── ForbiddenError             FORBIDDEN                403
    ├── NotFoundError
    │   ├── ReferenceNotFoundError REFERENCE_NOT_FOUND      404
    │   ├── ContentNotFoundError   CONTENT_NOT_FOUND        404
    │   ├── NamespaceNotFoundError NAMESPACE_NOT_FOUND      404
    │   └── NotificationNotFoundError NOTIFICATION_NOT_FOUND 404 (Loch's webhooks)
    ├── ReferenceAlreadyExistsError REFERENCE_ALREADY_EXISTS 409
    ├── ReferenceConflictError     REFERENCE_CONFLICT       409  (carries Conflicts)
    ├── NamespaceAlreadyExistsError NAMESPACE_ALREADY_EXISTS 409
    ├── NamespaceNotEmptyError     NAMESPACE_NOT_EMPTY      409
    ├── UnsupportedMediaTypeError  UNSUPPORTED_MEDIA_TYPE   415
    ├── TooManyRequestsError       TOO_MANY_REQUESTS        429
    ├── ServiceUnavailableError    SERVICE_UNAVAILABLE      503
    └── UnknownError               UNKNOWN                  500
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "ERROR_CLASSES",
    "BadRequestError",
    "Conflict",
    "ConflictType",
    "ContentNotFoundError",
    "ErrorCode",
    "ForbiddenError",
    "LochError",
    "NamespaceAlreadyExistsError",
    "NamespaceNotEmptyError",
    "NamespaceNotFoundError",
    "NotFoundError",
    "NotificationNotFoundError",
    "ReferenceAlreadyExistsError",
    "ReferenceConflictError",
    "ReferenceNotFoundError",
    "ServiceUnavailableError",
    "TooManyRequestsError",
    "UnknownError",
    "UnsupportedMediaTypeError",
    "error_for_code",
    "error_from_json",
]


class ErrorCode(enum.Enum):
    """Nessie's error codes, each with its HTTP status and reason phrase.

    Values are ``(status, reason, name)``: the name keeps members with the same status
    distinct (an Enum merges members of equal value into aliases).
    """

    BAD_REQUEST = (400, "Bad Request", "BAD_REQUEST")
    FORBIDDEN = (403, "Forbidden", "FORBIDDEN")
    REFERENCE_NOT_FOUND = (404, "Not Found", "REFERENCE_NOT_FOUND")
    CONTENT_NOT_FOUND = (404, "Not Found", "CONTENT_NOT_FOUND")
    NAMESPACE_NOT_FOUND = (404, "Not Found", "NAMESPACE_NOT_FOUND")
    NOTIFICATION_NOT_FOUND = (404, "Not Found", "NOTIFICATION_NOT_FOUND")
    REFERENCE_ALREADY_EXISTS = (409, "Conflict", "REFERENCE_ALREADY_EXISTS")
    REFERENCE_CONFLICT = (409, "Conflict", "REFERENCE_CONFLICT")
    NAMESPACE_ALREADY_EXISTS = (409, "Conflict", "NAMESPACE_ALREADY_EXISTS")
    NAMESPACE_NOT_EMPTY = (409, "Conflict", "NAMESPACE_NOT_EMPTY")
    UNSUPPORTED_MEDIA_TYPE = (415, "Unsupported Media Type", "UNSUPPORTED_MEDIA_TYPE")
    TOO_MANY_REQUESTS = (429, "Too Many Requests", "TOO_MANY_REQUESTS")
    UNKNOWN = (500, "Internal Server Error", "UNKNOWN")
    SERVICE_UNAVAILABLE = (503, "Service Unavailable", "SERVICE_UNAVAILABLE")

    @property
    def status(self) -> int:
        """The HTTP status answered for this code."""
        return self.value[0]

    @property
    def reason(self) -> str:
        """The HTTP reason phrase of :attr:`status`."""
        return self.value[1]


class ConflictType(enum.StrEnum):
    """Why one key (or reference) of a write conflicts, as Nessie names it."""

    UNKNOWN = "UNKNOWN"
    KEY_EXISTS = "KEY_EXISTS"
    KEY_DOES_NOT_EXIST = "KEY_DOES_NOT_EXIST"
    PAYLOAD_DIFFERS = "PAYLOAD_DIFFERS"
    CONTENT_ID_DIFFERS = "CONTENT_ID_DIFFERS"
    VALUE_DIFFERS = "VALUE_DIFFERS"
    NAMESPACE_ABSENT = "NAMESPACE_ABSENT"
    NOT_A_NAMESPACE = "NOT_A_NAMESPACE"
    NAMESPACE_NOT_EMPTY = "NAMESPACE_NOT_EMPTY"
    UNEXPECTED_HASH = "UNEXPECTED_HASH"
    KEY_CONFLICT = "KEY_CONFLICT"
    DOCUMENTATION_DIFFERS = "DOCUMENTATION_DIFFERS"


@dataclass(frozen=True)
class Conflict:
    """One conflict: its type, the key it concerns (elements, or None) and a message."""

    conflict_type: ConflictType
    key: tuple[str, ...] | None
    message: str

    def to_json(self) -> dict[str, Any]:
        """The Nessie wire form of this conflict."""
        return {
            "conflictType": self.conflict_type.value,
            "key": None if self.key is None else {"elements": list(self.key)},
            "message": self.message,
        }


class LochError(Exception):
    """Root of every error Loch raises on purpose."""

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def status(self) -> int:
        """HTTP status for this error."""
        return self.code.status

    def details(self) -> dict[str, Any] | None:
        """Nessie ``errorDetails`` for this error, or None."""
        return None


class BadRequestError(LochError):
    """Invalid input: names, keys, hashes, operations, filters."""

    code = ErrorCode.BAD_REQUEST


class ForbiddenError(LochError):
    """The caller may not do this."""

    code = ErrorCode.FORBIDDEN


class NotFoundError(LochError):
    """Base of the 404 errors."""

    code = ErrorCode.REFERENCE_NOT_FOUND


class ReferenceNotFoundError(NotFoundError):
    """A reference, a commit or a hash does not exist (or has no common ancestor)."""

    code = ErrorCode.REFERENCE_NOT_FOUND


class ContentNotFoundError(NotFoundError):
    """No content under a key."""

    code = ErrorCode.CONTENT_NOT_FOUND

    def __init__(self, message: str, key: tuple[str, ...] | None = None) -> None:
        super().__init__(message)
        self.key = key

    def details(self) -> dict[str, Any] | None:
        if self.key is None:
            return None
        return {"type": "CONTENT_KEY", "contentKey": {"elements": list(self.key)}}


class NamespaceNotFoundError(NotFoundError):
    """No namespace under a key (API v1 namespace endpoints)."""

    code = ErrorCode.NAMESPACE_NOT_FOUND


class NotificationNotFoundError(NotFoundError):
    """No notification (webhook subscription) or delivery with that id."""

    code = ErrorCode.NOTIFICATION_NOT_FOUND


class ReferenceAlreadyExistsError(LochError):
    """A reference of that name exists already."""

    code = ErrorCode.REFERENCE_ALREADY_EXISTS


class ReferenceConflictError(LochError):
    """A write conflicts: keys changed, namespace rules, or an unexpected hash."""

    code = ErrorCode.REFERENCE_CONFLICT

    def __init__(self, message: str, conflicts: list[Conflict] | None = None) -> None:
        super().__init__(message)
        self.conflicts: list[Conflict] = list(conflicts or [])

    @classmethod
    def from_conflicts(cls, conflicts: list[Conflict]) -> ReferenceConflictError:
        """Build the error with Nessie's message for a commit's conflicts."""
        if len(conflicts) == 1:
            msg = conflicts[0].message
            message = msg[:1].upper() + msg[1:] + "."
        else:
            joined = ", ".join(c.message for c in conflicts)
            message = (
                "There are multiple conflicts that prevent committing the provided "
                f"operations: {joined}."
            )
        return cls(message, conflicts)

    def details(self) -> dict[str, Any] | None:
        if not self.conflicts:
            return None
        return {
            "type": "REFERENCE_CONFLICTS",
            "conflicts": [c.to_json() for c in self.conflicts],
        }


class NamespaceAlreadyExistsError(LochError):
    """A namespace exists already (API v1)."""

    code = ErrorCode.NAMESPACE_ALREADY_EXISTS


class NamespaceNotEmptyError(LochError):
    """A namespace still holds content (API v1)."""

    code = ErrorCode.NAMESPACE_NOT_EMPTY


class UnsupportedMediaTypeError(LochError):
    """The request body's media type is not JSON."""

    code = ErrorCode.UNSUPPORTED_MEDIA_TYPE


class TooManyRequestsError(LochError):
    """The backend throttles or a write kept losing its compare-and-swap."""

    code = ErrorCode.TOO_MANY_REQUESTS


class ServiceUnavailableError(LochError):
    """The backing database cannot be reached."""

    code = ErrorCode.SERVICE_UNAVAILABLE


class UnknownError(LochError):
    """An unexpected server-side failure."""

    code = ErrorCode.UNKNOWN


ERROR_CLASSES: dict[ErrorCode, type[LochError]] = {
    ErrorCode.BAD_REQUEST: BadRequestError,
    ErrorCode.FORBIDDEN: ForbiddenError,
    ErrorCode.REFERENCE_NOT_FOUND: ReferenceNotFoundError,
    ErrorCode.CONTENT_NOT_FOUND: ContentNotFoundError,
    ErrorCode.NAMESPACE_NOT_FOUND: NamespaceNotFoundError,
    ErrorCode.NOTIFICATION_NOT_FOUND: NotificationNotFoundError,
    ErrorCode.REFERENCE_ALREADY_EXISTS: ReferenceAlreadyExistsError,
    ErrorCode.REFERENCE_CONFLICT: ReferenceConflictError,
    ErrorCode.NAMESPACE_ALREADY_EXISTS: NamespaceAlreadyExistsError,
    ErrorCode.NAMESPACE_NOT_EMPTY: NamespaceNotEmptyError,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: UnsupportedMediaTypeError,
    ErrorCode.TOO_MANY_REQUESTS: TooManyRequestsError,
    ErrorCode.UNKNOWN: UnknownError,
    ErrorCode.SERVICE_UNAVAILABLE: ServiceUnavailableError,
}
"""Error code → exception class; the client maps ``errorCode`` back through this."""


_STATUS_FALLBACK: dict[int, type[LochError]] = {
    400: BadRequestError,
    403: ForbiddenError,
    404: NotFoundError,
    409: ReferenceConflictError,
    415: UnsupportedMediaTypeError,
    429: TooManyRequestsError,
    503: ServiceUnavailableError,
}


def error_for_code(code: str, message: str) -> LochError:
    """The exception for a wire ``errorCode`` (unknown codes give :class:`UnknownError`)."""
    try:
        cls = ERROR_CLASSES[ErrorCode[code]]
    except KeyError:
        cls = UnknownError
    return cls(message)


def error_from_json(status: int, body: Any) -> LochError:
    """Rebuild the exception a server raised from its Nessie error body.

    The ``errorCode`` decides the class (the HTTP status when the code is missing or
    unknown); conflicts and the content key of ``errorDetails`` are restored.
    """
    if not isinstance(body, dict):
        body = {}
    message = str(body.get("message") or f"HTTP {status}")
    code = body.get("errorCode")
    cls: type[LochError] = UnknownError
    if isinstance(code, str) and code in ErrorCode.__members__:
        cls = ERROR_CLASSES[ErrorCode[code]]
    elif status in _STATUS_FALLBACK:
        cls = _STATUS_FALLBACK[status]
    details = body.get("errorDetails") or {}
    if cls is ReferenceConflictError:
        conflicts = []
        for c in details.get("conflicts") or []:
            try:
                ctype = ConflictType(c.get("conflictType"))
            except ValueError:
                ctype = ConflictType.UNKNOWN
            key = c.get("key")
            conflicts.append(
                Conflict(ctype, tuple(key["elements"]) if key else None, c.get("message", ""))
            )
        return ReferenceConflictError(message, conflicts)
    if cls is ContentNotFoundError:
        key = details.get("contentKey")
        return ContentNotFoundError(message, tuple(key["elements"]) if key else None)
    return cls(message)
