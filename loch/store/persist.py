"""The :class:`Persist` contract every backend implements."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loch.errors import (
    ReferenceAlreadyExistsError,
    ReferenceConflictError,
    ReferenceNotFoundError,
    ServiceUnavailableError,
)

__all__ = [
    "OutboxEvent",
    "Persist",
    "RefAlreadyExists",
    "RefConditionFailed",
    "RefMissing",
    "RefRecord",
    "StoreError",
    "StoreUnavailable",
    "StoredEvent",
]


class StoreError(Exception):
    """Marker base of the errors a backend raises on purpose."""


class RefConditionFailed(StoreError, ReferenceConflictError):
    """A compare-and-swap on a reference found another hash than the expected one."""

    def __init__(self, name: str, expected: str, actual: str) -> None:
        super().__init__(
            f"named-reference '{name}' is not at expected hash '{expected}', but at '{actual}'"
        )
        self.name = name
        self.expected = expected
        self.actual = actual


class RefAlreadyExists(StoreError, ReferenceAlreadyExistsError):
    """A reference of that name exists already."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Named reference '{name}' already exists.")
        self.name = name


class RefMissing(StoreError, ReferenceNotFoundError):
    """No reference of that name."""

    def __init__(self, name: str) -> None:
        super().__init__(f"Named reference '{name}' not found")
        self.name = name


class StoreUnavailable(StoreError, ServiceUnavailableError):
    """The database cannot be reached or failed; the request may be retried."""


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """An event to record with a reference change: its unique id, type and JSON body."""

    id: str
    type: str
    payload: bytes


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """An event in the outbox, numbered in the order its reference change committed."""

    seq: int
    id: str
    type: str
    payload: bytes
    created_at: float


@dataclass(frozen=True, slots=True)
class RefRecord:
    """A named reference as stored: its name, ``BRANCH`` or ``TAG``, and its commit hash."""

    name: str
    type: str
    hash: str


class Persist(abc.ABC):
    """Storage of immutable objects and mutable references.

    Objects are byte strings under their SHA-256 id; writing one twice is harmless.
    Every reference change is conditional on the hash the caller expects, and the objects
    a change publishes are written in the same transaction, so that a reference never
    points at an object that is not stored.
    """

    @abc.abstractmethod
    def get_objects(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The stored bytes of those ids that exist (missing ids are left out)."""

    @abc.abstractmethod
    def put_objects(self, objects: Mapping[str, bytes]) -> None:
        """Store objects outside a reference change (idempotent)."""

    @abc.abstractmethod
    def get_ref(self, name: str) -> RefRecord | None:
        """The reference called ``name``, or None."""

    @abc.abstractmethod
    def list_refs(self) -> list[RefRecord]:
        """All references, ordered by name."""

    @abc.abstractmethod
    def create_ref(
        self,
        ref: RefRecord,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        """Create a reference (with the objects it needs and its events).

        Raises:
            RefAlreadyExists: a reference of that name exists.
        """

    @abc.abstractmethod
    def update_ref(
        self,
        name: str,
        expected: str,
        new: str,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        """Move ``name`` from ``expected`` to ``new``, writing ``objects`` atomically with it.

        ``events`` are appended to the outbox in the same transaction: they exist if and
        only if the change does.

        Raises:
            RefMissing: no such reference.
            RefConditionFailed: the reference is not at ``expected``; nothing is written.
        """

    @abc.abstractmethod
    def delete_ref(self, name: str, expected: str, events: Sequence[OutboxEvent] = ()) -> None:
        """Delete ``name`` if it is at ``expected``.

        Raises:
            RefMissing: no such reference.
            RefConditionFailed: the reference is not at ``expected``.
        """

    @abc.abstractmethod
    def read_events(self, after_seq: int, limit: int) -> list[StoredEvent]:
        """Outbox events with ``seq > after_seq`` in commit order, at most ``limit``."""

    @abc.abstractmethod
    def ref_log(self, name: str, limit: int) -> list[str]:
        """Hashes ``name`` pointed at, newest first (its current hash included), at most
        ``limit``. Written with every create and update of the reference."""

    @abc.abstractmethod
    def get_meta(self, key: str) -> str | None:
        """A repository-level setting (e.g. creation time), or None."""

    @abc.abstractmethod
    def set_meta_if_absent(self, key: str, value: str) -> str:
        """Set a repository-level setting unless present; return the stored value."""

    @abc.abstractmethod
    def set_meta(self, key: str, value: str | None) -> None:
        """Set (or with None remove) a repository-level setting."""

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold resources
        """Release connections and files."""
