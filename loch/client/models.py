"""Typed results of the Python client (API v2 wire objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loch.model.keys import Key

__all__ = [
    "DELIVERY_STATUSES",
    "NOTIFICATION_KINDS",
    "CommitMeta",
    "CommitResponse",
    "Delivery",
    "DeliveryAttempt",
    "DiffEntry",
    "Entry",
    "KeyDetail",
    "LogEntry",
    "MergeResponse",
    "Notification",
    "Reference",
]

NOTIFICATION_KINDS = (
    "commits",
    "merges",
    "transplants",
    "references-created",
    "references-deleted",
    "references-assigned",
)
"""What a notification can subscribe to (``POST /notifications/{kind}``)."""

DELIVERY_STATUSES = ("PENDING", "DELIVERED", "FAILED")
"""Where a delivery stands: waiting (or retrying), delivered, or given up."""


@dataclass(frozen=True)
class Reference:
    """A branch, tag or detached commit."""

    type: str
    name: str | None
    hash: str | None
    metadata: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Reference:
        return cls(obj["type"], obj.get("name"), obj.get("hash"), obj.get("metadata"))

    def to_json(self) -> dict[str, Any]:
        if self.type == "DETACHED":
            return {"type": "DETACHED", "hash": self.hash}
        return {"type": self.type, "name": self.name, "hash": self.hash}


@dataclass(frozen=True)
class CommitMeta:
    """Commit metadata (v2 view)."""

    hash: str | None
    committer: str | None
    authors: list[str]
    signed_off_by: list[str]
    message: str
    commit_time: str | None
    author_time: str | None
    properties: dict[str, list[str]]
    parents: list[str]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CommitMeta:
        return cls(
            obj.get("hash"),
            obj.get("committer"),
            list(obj.get("authors") or []),
            list(obj.get("allSignedOffBy") or []),
            obj.get("message") or "",
            obj.get("commitTime"),
            obj.get("authorTime"),
            dict(obj.get("allProperties") or {}),
            list(obj.get("parentCommitHashes") or []),
        )


@dataclass(frozen=True)
class LogEntry:
    """One commit of a log, with its operations when fetched."""

    meta: CommitMeta
    parent: str | None
    operations: list[dict[str, Any]] | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LogEntry:
        return cls(
            CommitMeta.from_json(obj["commitMeta"]),
            obj.get("parentCommitHash"),
            obj.get("operations"),
        )


@dataclass(frozen=True)
class Entry:
    """A live key: its type, content id and (when asked) content."""

    key: Key
    type: str
    content_id: str | None
    content: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Entry:
        return cls(
            tuple(obj["name"]["elements"]), obj["type"], obj.get("contentId"), obj.get("content")
        )


@dataclass(frozen=True)
class DiffEntry:
    """A key whose content differs; ``before``/``after`` None where absent."""

    key: Key
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DiffEntry:
        return cls(tuple(obj["key"]["elements"]), obj.get("from"), obj.get("to"))


@dataclass(frozen=True)
class CommitResponse:
    """A landed commit: the branch at its new hash and the content ids assigned."""

    branch: Reference
    added_contents: dict[Key, str]

    @property
    def hash(self) -> str:
        assert self.branch.hash is not None
        return self.branch.hash

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CommitResponse:
        added = {
            tuple(a["key"]["elements"]): a["contentId"] for a in obj.get("addedContents") or []
        }
        return cls(Reference.from_json(obj["targetBranch"]), added)


@dataclass(frozen=True)
class KeyDetail:
    """What a merge or transplant did with one key."""

    key: Key
    merge_behavior: str
    conflict: dict[str, Any] | None


@dataclass(frozen=True)
class MergeResponse:
    """Outcome of a merge or transplant."""

    was_applied: bool
    was_successful: bool
    resultant_target_hash: str | None
    common_ancestor: str | None
    target_branch: str
    effective_target_hash: str | None
    details: list[KeyDetail] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MergeResponse:
        return cls(
            bool(obj.get("wasApplied")),
            bool(obj.get("wasSuccessful")),
            obj.get("resultantTargetHash"),
            obj.get("commonAncestor"),
            obj.get("targetBranch") or "",
            obj.get("effectiveTargetHash"),
            [
                KeyDetail(
                    tuple(d["key"]["elements"]), d.get("mergeBehavior", ""), d.get("conflict")
                )
                for d in obj.get("details") or []
            ],
        )


@dataclass(frozen=True)
class Notification:
    """A webhook subscription: events of one type are POSTed to ``url``.

    Attributes:
        id: The notification's id (a UUID).
        type: How events are sent: ``WEBHOOK``.
        url: Where they are POSTed.
        event_type: ``COMMIT``, ``MERGE``, ``TRANSPLANT``, ``REFERENCE_CREATED``,
            ``REFERENCE_DELETED`` or ``REFERENCE_ASSIGNED``.
        has_secret: Deliveries are signed (``Loch-Signature`` header); the secret itself
            is never shown.
        created_at: ISO instant of its creation.
    """

    id: str
    type: str
    url: str
    event_type: str
    has_secret: bool
    created_at: str | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Notification:
        return cls(
            str(obj["id"]),
            str(obj.get("type") or "WEBHOOK"),
            str(obj.get("url") or ""),
            str(obj.get("eventType") or ""),
            bool(obj.get("hasSecret")),
            obj.get("createdAt"),
        )

    def to_json(self) -> dict[str, Any]:
        """The wire form, as the server answers it."""
        return {
            "id": self.id,
            "type": self.type,
            "url": self.url,
            "eventType": self.event_type,
            "hasSecret": self.has_secret,
            "createdAt": self.created_at,
        }


@dataclass(frozen=True)
class DeliveryAttempt:
    """One HTTP attempt of a delivery: its answer's status code, or the error."""

    attempt: int
    at: str | None
    status_code: int | None
    error: str | None
    duration_ms: float | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DeliveryAttempt:
        return cls(
            int(obj.get("attempt") or 0),
            obj.get("at"),
            obj.get("statusCode"),
            obj.get("error"),
            obj.get("durationMs"),
        )

    def to_json(self) -> dict[str, Any]:
        """The wire form."""
        return {
            "attempt": self.attempt,
            "at": self.at,
            "statusCode": self.status_code,
            "error": self.error,
            "durationMs": self.duration_ms,
        }


@dataclass(frozen=True)
class Delivery:
    """One event for one notification, and how its delivery went.

    Attributes:
        id: The delivery's id (what ``redeliver`` takes).
        event_id: The event's id (``Loch-Event-Id`` header; the same on every attempt).
        event_type: The event's type, e.g. ``COMMIT``.
        event_seq: The event's position in the server's outbox.
        status: ``PENDING``, ``DELIVERED`` or ``FAILED``.
        attempts: How many attempts were made.
        created_at: When the delivery was queued (again, after a redelivery).
        last_attempt_at: When it was last attempted, if ever.
        next_attempt_at: When it is retried (pending deliveries only).
        last_status_code: HTTP status of the last answer (None if none came).
        last_error: Why the last attempt failed, if it did.
        delivered_at: When it was delivered, if it was.
        attempt_log: Every attempt, oldest first (None where the server does not list
            them, as in the answer to a redelivery).
    """

    id: int
    event_id: str
    event_type: str
    event_seq: int | None
    status: str
    attempts: int
    created_at: str | None
    last_attempt_at: str | None
    next_attempt_at: str | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: str | None
    attempt_log: list[DeliveryAttempt] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Delivery:
        log = obj.get("attemptLog")
        return cls(
            int(obj["id"]),
            str(obj.get("eventId") or ""),
            str(obj.get("eventType") or ""),
            obj.get("eventSeq"),
            str(obj.get("status") or ""),
            int(obj.get("attempts") or 0),
            obj.get("createdAt"),
            obj.get("lastAttemptAt"),
            obj.get("nextAttemptAt"),
            obj.get("lastStatusCode"),
            obj.get("lastError"),
            obj.get("deliveredAt"),
            None if log is None else [DeliveryAttempt.from_json(a) for a in log],
        )

    def to_json(self) -> dict[str, Any]:
        """The wire form (``attemptLog`` only when known)."""
        obj: dict[str, Any] = {
            "id": self.id,
            "eventId": self.event_id,
            "eventType": self.event_type,
            "eventSeq": self.event_seq,
            "status": self.status,
            "attempts": self.attempts,
            "createdAt": self.created_at,
            "lastAttemptAt": self.last_attempt_at,
            "nextAttemptAt": self.next_attempt_at,
            "lastStatusCode": self.last_status_code,
            "lastError": self.last_error,
            "deliveredAt": self.delivered_at,
        }
        if self.attempt_log is not None:
            obj["attemptLog"] = [a.to_json() for a in self.attempt_log]
        return obj
