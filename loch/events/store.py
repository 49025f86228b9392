"""The notification store: subscriptions, per-subscription deliveries and their attempts.

It lives in the same database as the version store (its own tables, its own code) and
reads the outbox that reference changes write (:meth:`loch.store.Persist.read_events`).

A delivery is one event for one notification. For each notification only its oldest
pending delivery may be attempted (head of line), so events arrive in commit order; a
claimed delivery carries a lease, so a dispatcher that dies mid-delivery has its claim
taken over when the lease runs out.
"""

from __future__ import annotations

import abc
import enum
import time
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from loch.store import Persist, StoredEvent

__all__ = [
    "DELIVERY_COLUMNS",
    "NOTIFICATION_COLUMNS",
    "Attempt",
    "Claim",
    "Delivery",
    "DeliveryStatus",
    "Notification",
    "NotificationStore",
    "Outcome",
    "SqlNotificationStore",
    "delivery_from_row",
]


class DeliveryStatus(enum.StrEnum):
    """Where a delivery stands."""

    PENDING = "PENDING"
    DELIVERED = "DELIVERED"
    FAILED = "FAILED"


@dataclass(frozen=True)
class Notification:
    """A subscription: events of ``event_type`` are POSTed to ``url``.

    ``after_seq`` is the outbox position when it was created: only later events are
    delivered to it.
    """

    id: str
    event_type: str
    type: str
    url: str
    secret: str | None
    created_at: float
    after_seq: int


@dataclass(frozen=True)
class Delivery:
    """One event for one notification, and how its delivery went."""

    id: int
    notification_id: str
    event_seq: int
    event_id: str
    event_type: str
    status: DeliveryStatus
    attempts: int
    created_at: float
    next_attempt_at: float
    last_attempt_at: float | None
    last_status_code: int | None
    last_error: str | None
    delivered_at: float | None


@dataclass(frozen=True)
class Attempt:
    """One HTTP attempt of a delivery."""

    delivery_id: int
    attempt: int
    at: float
    status_code: int | None
    error: str | None
    duration_ms: float


@dataclass(frozen=True)
class Claim:
    """A delivery claimed for an attempt, with what is needed to make it."""

    delivery: Delivery
    notification: Notification
    payload: bytes


@dataclass(frozen=True)
class Outcome:
    """The result of an attempt: delivered, retry at ``retry_at``, or failed for good."""

    status: DeliveryStatus
    status_code: int | None
    error: str | None
    duration_ms: float
    retry_at: float | None = None


class NotificationStore(abc.ABC):
    """Persistence of notifications and deliveries (one implementation per backend)."""

    # -- subscriptions ------------------------------------------------------------------

    @abc.abstractmethod
    def add(self, event_type: str, type: str, url: str, secret: str | None) -> Notification:
        """Create a notification; it receives events recorded from now on."""

    @abc.abstractmethod
    def get(self, notification_id: str) -> Notification | None:
        """A notification by id."""

    @abc.abstractmethod
    def list_all(self) -> list[Notification]:
        """All notifications, oldest first."""

    @abc.abstractmethod
    def update(
        self, notification_id: str, type: str, url: str, secret: str | None
    ) -> Notification | None:
        """Change a notification's target (None if it does not exist)."""

    @abc.abstractmethod
    def delete(self, notification_id: str) -> bool:
        """Delete a notification and its pending deliveries (its log is kept)."""

    # -- fan-out ---------------------------------------------------------------------------

    @abc.abstractmethod
    def cursor(self) -> int:
        """The outbox position up to which events have been fanned out."""

    @abc.abstractmethod
    def fan_out(self, events: Sequence[StoredEvent]) -> int:
        """Create the deliveries of ``events`` and advance the cursor past them, atomically
        and only from the current cursor on (so that two dispatchers never fan out an event
        twice). Returns the number of deliveries created."""

    def fan_out_new(self, persist: Persist, batch: int = 500) -> int:
        """Fan out every event recorded since the cursor; returns deliveries created.

        Events at or before every notification's ``after_seq`` concern none of them:
        with no notification nothing is read or written (the dispatcher wakes after
        every commit, and its cursor update would compete with the commits' writes),
        and the cursor then skips ahead to the oldest notification's start.
        """
        created = 0
        while True:
            subs = self.list_all()
            if not subs:
                return created
            start = max(self.cursor(), min(n.after_seq for n in subs))
            events = persist.read_events(start, batch)
            if not events:
                return created
            created += self.fan_out(events)

    # -- deliveries ------------------------------------------------------------------------

    @abc.abstractmethod
    def claim_due(self, now: float, lease_seconds: float, limit: int, owner: str) -> list[Claim]:
        """Claim the head-of-line pending delivery of each notification that is due and
        not leased by another attempt."""

    @abc.abstractmethod
    def record(self, delivery_id: int, owner: str, attempt_at: float, outcome: Outcome) -> None:
        """Record an attempt's outcome and release the claim."""

    @abc.abstractmethod
    def deliveries(
        self, notification_id: str, limit: int, status: DeliveryStatus | None = None
    ) -> list[Delivery]:
        """A notification's deliveries, newest first."""

    @abc.abstractmethod
    def attempts(self, delivery_id: int) -> list[Attempt]:
        """A delivery's attempts, oldest first."""

    @abc.abstractmethod
    def redeliver(self, notification_id: str, delivery_id: int, now: float) -> Delivery | None:
        """Put a delivery back in line to be sent again (None if it does not exist)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""


# Column lists and row mapping shared by the SQL notification stores.
DELIVERY_COLUMNS = (
    "d.id, d.notification_id, d.event_seq, e.id, e.type, d.status, d.attempts, d.created_at, "
    "d.next_attempt_at, d.last_attempt_at, d.last_status_code, d.last_error, d.delivered_at"
)
NOTIFICATION_COLUMNS = "id, event_type, type, url, secret, created_at, after_seq"


def delivery_from_row(row: Sequence[Any]) -> Delivery:
    """A :class:`Delivery` from a row selected with :data:`DELIVERY_COLUMNS`."""
    return Delivery(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        DeliveryStatus(row[5]),
        row[6],
        row[7],
        row[8],
        row[9],
        row[10],
        row[11],
        row[12],
    )


class SqlNotificationStore(NotificationStore):
    """The statements both SQL stores run alike (subscriptions, delivery log, redeliver),
    written once with ``?`` placeholders; a store whose driver wants another style
    rewrites them in :meth:`_sql`. Fan-out, claims and attempt results differ per
    database (locking) and stay in each store."""

    @abc.abstractmethod
    def _tx(self) -> AbstractContextManager[Any]:
        """A write transaction; yields a connection whose ``execute`` returns a cursor."""

    @abc.abstractmethod
    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read-only statement (``sql`` already in the driver's style)."""

    def _sql(self, sql: str) -> str:
        """``sql`` in the driver's placeholder style (qmark here)."""
        return sql

    def add(self, event_type: str, type: str, url: str, secret: str | None) -> Notification:
        nid = str(uuid.uuid4())
        now = time.time()
        with self._tx() as conn:
            row = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
            seq = int(row[0]) if row else 0
            conn.execute(
                self._sql(
                    f"INSERT INTO notifications ({NOTIFICATION_COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                (nid, event_type, type, url, secret, now, seq),
            )
        return Notification(nid, event_type, type, url, secret, now, seq)

    def get(self, notification_id: str) -> Notification | None:
        rows = self._read(
            self._sql(f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = ?"),
            (notification_id,),
        )
        return Notification(*rows[0]) if rows else None

    def list_all(self) -> list[Notification]:
        rows = self._read(f"SELECT {NOTIFICATION_COLUMNS} FROM notifications ORDER BY created_at")
        return [Notification(*r) for r in rows]

    def update(
        self, notification_id: str, type: str, url: str, secret: str | None
    ) -> Notification | None:
        with self._tx() as conn:
            cur = conn.execute(
                self._sql("UPDATE notifications SET type = ?, url = ?, secret = ? WHERE id = ?"),
                (type, url, secret, notification_id),
            )
            if cur.rowcount != 1:
                return None
        return self.get(notification_id)

    def delete(self, notification_id: str) -> bool:
        with self._tx() as conn:
            cur = conn.execute(
                self._sql("DELETE FROM notifications WHERE id = ?"), (notification_id,)
            )
            conn.execute(
                self._sql(
                    "DELETE FROM deliveries WHERE notification_id = ? AND status = 'PENDING'"
                ),
                (notification_id,),
            )
            deleted: bool = cur.rowcount == 1
            return deleted

    def deliveries(
        self, notification_id: str, limit: int, status: DeliveryStatus | None = None
    ) -> list[Delivery]:
        sql = (
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq "
            "WHERE d.notification_id = ?"
        )
        params: list[Any] = [notification_id]
        if status is not None:
            sql += " AND d.status = ?"
            params.append(status.value)
        sql += " ORDER BY d.event_seq DESC LIMIT ?"
        params.append(limit)
        return [delivery_from_row(r) for r in self._read(self._sql(sql), params)]

    def attempts(self, delivery_id: int) -> list[Attempt]:
        rows = self._read(
            self._sql(
                "SELECT delivery_id, attempt, at, status_code, error, duration_ms "
                "FROM delivery_attempts WHERE delivery_id = ? ORDER BY attempt"
            ),
            (delivery_id,),
        )
        return [Attempt(*r) for r in rows]

    def redeliver(self, notification_id: str, delivery_id: int, now: float) -> Delivery | None:
        with self._tx() as conn:
            cur = conn.execute(
                self._sql(
                    "UPDATE deliveries SET status = 'PENDING', next_attempt_at = ?, "
                    "created_at = ?, lease_owner = NULL, lease_until = NULL "
                    "WHERE id = ? AND notification_id = ?"
                ),
                (now, now, delivery_id, notification_id),
            )
            if cur.rowcount != 1:
                return None
            row = conn.execute(
                self._sql(
                    f"SELECT {DELIVERY_COLUMNS} FROM deliveries d "
                    "JOIN events e ON e.seq = d.event_seq WHERE d.id = ?"
                ),
                (delivery_id,),
            ).fetchone()
        assert row is not None
        return delivery_from_row(row)
