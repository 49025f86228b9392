"""Notification store in the SQLite file of the version store (its own tables)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from loch.backends.sqlite import connect
from loch.events.store import (
    DELIVERY_COLUMNS,
    Claim,
    Notification,
    Outcome,
    SqlNotificationStore,
    delivery_from_row,
)
from loch.store import StoredEvent
from loch.store.persist import StoreUnavailable

__all__ = ["NOTIFICATION_MIGRATIONS", "SqliteNotificationStore"]

NOTIFICATION_MIGRATIONS: list[str] = [
    """
    CREATE TABLE notifications (
        id TEXT PRIMARY KEY,
        event_type TEXT NOT NULL,
        type TEXT NOT NULL,
        url TEXT NOT NULL,
        secret TEXT,
        created_at REAL NOT NULL,
        after_seq INTEGER NOT NULL
    );
    CREATE TABLE deliveries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        notification_id TEXT NOT NULL,
        event_seq INTEGER NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at REAL NOT NULL,
        next_attempt_at REAL NOT NULL,
        last_attempt_at REAL,
        last_status_code INTEGER,
        last_error TEXT,
        delivered_at REAL,
        lease_owner TEXT,
        lease_until REAL,
        UNIQUE (notification_id, event_seq)
    );
    CREATE INDEX deliveries_line ON deliveries (status, notification_id, event_seq);
    CREATE TABLE delivery_attempts (
        delivery_id INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        at REAL NOT NULL,
        status_code INTEGER,
        error TEXT,
        duration_ms REAL NOT NULL,
        PRIMARY KEY (delivery_id, attempt)
    );
    CREATE TABLE notification_state (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
    INSERT INTO notification_state (key, value) VALUES ('cursor', 0);
    """,
]
"""Numbered migrations of the notification tables (recorded apart from the store's)."""


class SqliteNotificationStore(SqlNotificationStore):
    """Notifications and deliveries in the version store's SQLite file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._conn = connect(path)
        # The dispatcher's own bookkeeping (fan-out, leases, attempt results) needs no
        # sync to disk per transaction: after a power loss it is at worst redone, which
        # only resends a delivery (deliveries are at-least-once). WAL with
        # synchronous=NORMAL still survives a process crash.
        self._dispatch_lock = threading.Lock()
        self._dispatch_conn = connect(path)
        self._dispatch_conn.execute("PRAGMA synchronous=NORMAL")
        self._migrate()

    @contextmanager
    def _tx(self, dispatch: bool = False) -> Iterator[sqlite3.Connection]:
        lock = self._dispatch_lock if dispatch else self._lock
        with lock:
            conn = self._dispatch_conn if dispatch else self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as e:
                raise StoreUnavailable(f"Notification store unavailable: {e}") from e
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self._tx() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS notification_migrations ("
                "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            current = conn.execute("SELECT max(version) FROM notification_migrations").fetchone()
            done = current[0] or 0
            for version, script in enumerate(NOTIFICATION_MIGRATIONS, start=1):
                if version <= done:
                    continue
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO notification_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._lock:
            return self._conn.execute(sql, params).fetchall()

    # -- fan-out ---------------------------------------------------------------------------

    def cursor(self) -> int:
        rows = self._read("SELECT value FROM notification_state WHERE key = 'cursor'")
        return int(rows[0][0])

    def fan_out(self, events: Sequence[StoredEvent]) -> int:
        if not events:
            return 0
        now = time.time()
        with self._tx(dispatch=True) as conn:
            cursor = conn.execute(
                "SELECT value FROM notification_state WHERE key = 'cursor'"
            ).fetchone()[0]
            fresh = [e for e in events if e.seq > cursor]
            if not fresh:
                return 0
            subs = conn.execute("SELECT id, event_type, after_seq FROM notifications").fetchall()
            rows = [
                (nid, e.seq, now, now)
                for e in fresh
                for nid, etype, after in subs
                if etype == e.type and e.seq > after
            ]
            conn.executemany(
                "INSERT OR IGNORE INTO deliveries "
                "(notification_id, event_seq, status, created_at, next_attempt_at) "
                "VALUES (?, ?, 'PENDING', ?, ?)",
                rows,
            )
            conn.execute(
                "UPDATE notification_state SET value = ? WHERE key = 'cursor'", (fresh[-1].seq,)
            )
        return len(rows)

    # -- deliveries ------------------------------------------------------------------------

    def claim_due(self, now: float, lease_seconds: float, limit: int, owner: str) -> list[Claim]:
        with self._tx(dispatch=True) as conn:
            heads = conn.execute(
                "SELECT d.id FROM deliveries d "
                "JOIN (SELECT notification_id, min(event_seq) AS seq FROM deliveries "
                "      WHERE status = 'PENDING' GROUP BY notification_id) h "
                "  ON h.notification_id = d.notification_id AND h.seq = d.event_seq "
                "WHERE d.next_attempt_at <= ? AND (d.lease_until IS NULL OR d.lease_until < ?) "
                "ORDER BY d.event_seq LIMIT ?",
                (now, now, limit),
            ).fetchall()
            ids = [r[0] for r in heads]
            if not ids:
                return []
            conn.executemany(
                "UPDATE deliveries SET lease_owner = ?, lease_until = ? WHERE id = ?",
                [(owner, now + lease_seconds, i) for i in ids],
            )
            marks = ",".join("?" * len(ids))
            rows = conn.execute(
                f"SELECT {DELIVERY_COLUMNS}, e.payload, n.id, n.event_type, n.type, n.url, "
                "n.secret, n.created_at, n.after_seq "
                "FROM deliveries d JOIN events e ON e.seq = d.event_seq "
                "JOIN notifications n ON n.id = d.notification_id "
                f"WHERE d.id IN ({marks}) ORDER BY d.event_seq",
                ids,
            ).fetchall()
        return [Claim(delivery_from_row(r[:13]), Notification(*r[14:]), bytes(r[13])) for r in rows]

    def record(self, delivery_id: int, owner: str, attempt_at: float, outcome: Outcome) -> None:
        with self._tx(dispatch=True) as conn:
            row = conn.execute(
                "SELECT attempts, lease_owner FROM deliveries WHERE id = ?", (delivery_id,)
            ).fetchone()
            if row is None:
                return  # the notification was deleted meanwhile
            attempt = row[0] + 1
            conn.execute(
                "INSERT OR REPLACE INTO delivery_attempts "
                "(delivery_id, attempt, at, status_code, error, duration_ms) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    delivery_id,
                    attempt,
                    attempt_at,
                    outcome.status_code,
                    outcome.error,
                    outcome.duration_ms,
                ),
            )
            conn.execute(
                "UPDATE deliveries SET status = ?, attempts = ?, last_attempt_at = ?, "
                "last_status_code = ?, last_error = ?, next_attempt_at = ?, "
                "delivered_at = CASE WHEN ? = 'DELIVERED' THEN ? ELSE delivered_at END, "
                "lease_owner = NULL, lease_until = NULL WHERE id = ?",
                (
                    outcome.status.value,
                    attempt,
                    attempt_at,
                    outcome.status_code,
                    outcome.error,
                    outcome.retry_at if outcome.retry_at is not None else attempt_at,
                    outcome.status.value,
                    time.time(),
                    delivery_id,
                ),
            )

    def close(self) -> None:
        with self._lock, self._dispatch_lock:
            self._conn.close()
            self._dispatch_conn.close()
