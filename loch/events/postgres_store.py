"""Notification store in the PostgreSQL database of the version store, for several replicas.

Fan-out takes outbox events with ``FOR UPDATE SKIP LOCKED`` and marks them, so each event
is fanned out by exactly one replica and none is skipped when transactions commit out of
sequence order. Claims lock the head-of-line deliveries with ``SKIP LOCKED`` and set a
lease, so each delivery is attempted by one replica at a time and a dead replica's claims
are taken over when their lease expires.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from loch.backends.postgres import PostgresPersist
from loch.events.store import (
    DELIVERY_COLUMNS,
    Claim,
    Notification,
    Outcome,
    SqlNotificationStore,
    delivery_from_row,
)
from loch.store import Persist, StoredEvent

__all__ = ["NOTIFICATION_MIGRATIONS", "PostgresNotificationStore"]

NOTIFICATION_LOCK = 0x6C6F6E6F  # advisory lock key of the notification migrations

NOTIFICATION_MIGRATIONS: list[str] = [
    """
    CREATE TABLE notifications (
        id TEXT PRIMARY KEY,
        event_type TEXT NOT NULL,
        type TEXT NOT NULL,
        url TEXT NOT NULL,
        secret TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        after_seq BIGINT NOT NULL
    );
    CREATE TABLE deliveries (
        id BIGSERIAL PRIMARY KEY,
        notification_id TEXT NOT NULL,
        event_seq BIGINT NOT NULL,
        status TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        created_at DOUBLE PRECISION NOT NULL,
        next_attempt_at DOUBLE PRECISION NOT NULL,
        last_attempt_at DOUBLE PRECISION,
        last_status_code INTEGER,
        last_error TEXT,
        delivered_at DOUBLE PRECISION,
        lease_owner TEXT,
        lease_until DOUBLE PRECISION,
        UNIQUE (notification_id, event_seq)
    );
    CREATE INDEX deliveries_line ON deliveries (notification_id, event_seq)
        WHERE status = 'PENDING';
    CREATE TABLE delivery_attempts (
        delivery_id BIGINT NOT NULL,
        attempt INTEGER NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        status_code INTEGER,
        error TEXT,
        duration_ms DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (delivery_id, attempt)
    );
    """,
]

_N_COLUMNS = "n.id, n.event_type, n.type, n.url, n.secret, n.created_at, n.after_seq"
Conn = psycopg.Connection[Any]


class PostgresNotificationStore(SqlNotificationStore):
    """Notifications and deliveries in the version store's PostgreSQL database."""

    def __init__(self, persist: PostgresPersist) -> None:
        self._db = persist
        with persist.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (NOTIFICATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS notification_migrations ("
                "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            row = conn.execute("SELECT max(version) FROM notification_migrations").fetchone()
            done = row[0] if row and row[0] is not None else 0
            for version, script in enumerate(NOTIFICATION_MIGRATIONS, start=1):
                if version <= done:
                    continue
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO notification_migrations (version, applied_at) VALUES (%s, %s)",
                    (version, time.time()),
                )

    @contextmanager
    def _tx(self) -> Iterator[Conn]:
        with self._db.connection() as conn, conn.transaction():
            yield conn

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._db.connection() as conn:
            return conn.execute(sql, params).fetchall()

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s")

    # -- fan-out ---------------------------------------------------------------------------

    def cursor(self) -> int:
        rows = self._read(
            "SELECT coalesce(min(seq) - 1, (SELECT coalesce(max(seq), 0) FROM events)) "
            "FROM events WHERE NOT fanned_out"
        )
        return int(rows[0][0])

    def fan_out(self, events: Sequence[StoredEvent]) -> int:
        with self._db.connection() as conn, conn.transaction():
            rows = conn.execute(
                "SELECT seq, type FROM events WHERE seq = ANY(%s) AND NOT fanned_out "
                "ORDER BY seq FOR UPDATE SKIP LOCKED",
                ([e.seq for e in events],),
            ).fetchall()
            return self._insert_deliveries(conn, rows) if rows else 0

    def fan_out_new(self, persist: Persist, batch: int = 500) -> int:
        created = 0
        while True:
            made, seen = self._fan_out_batch(batch)
            created += made
            if seen < batch:
                return created

    def _fan_out_batch(self, batch: int) -> tuple[int, int]:
        with self._db.connection() as conn, conn.transaction():
            rows = conn.execute(
                "SELECT seq, type FROM events WHERE NOT fanned_out ORDER BY seq "
                "LIMIT %s FOR UPDATE SKIP LOCKED",
                (batch,),
            ).fetchall()
            if not rows:
                return 0, 0
            return self._insert_deliveries(conn, rows), len(rows)

    @staticmethod
    def _insert_deliveries(conn: Conn, events: Sequence[Any]) -> int:
        now = time.time()
        subs = conn.execute("SELECT id, event_type, after_seq FROM notifications").fetchall()
        rows = [
            (nid, seq, now, now)
            for seq, etype in events
            for nid, n_type, after in subs
            if n_type == etype and seq > after
        ]
        if rows:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO deliveries "
                    "(notification_id, event_seq, status, created_at, next_attempt_at) "
                    "VALUES (%s, %s, 'PENDING', %s, %s) ON CONFLICT DO NOTHING",
                    rows,
                )
        conn.execute(
            "UPDATE events SET fanned_out = TRUE WHERE seq = ANY(%s)",
            ([e[0] for e in events],),
        )
        return len(rows)

    # -- deliveries ------------------------------------------------------------------------

    def claim_due(self, now: float, lease_seconds: float, limit: int, owner: str) -> list[Claim]:
        with self._db.connection() as conn, conn.transaction():
            heads = conn.execute(
                "SELECT d.id FROM deliveries d "
                "JOIN (SELECT notification_id, min(event_seq) AS seq FROM deliveries "
                "      WHERE status = 'PENDING' GROUP BY notification_id) h "
                "  ON h.notification_id = d.notification_id AND h.seq = d.event_seq "
                "WHERE d.next_attempt_at <= %s AND (d.lease_until IS NULL OR d.lease_until < %s) "
                "ORDER BY d.event_seq LIMIT %s FOR UPDATE OF d SKIP LOCKED",
                (now, now, limit),
            ).fetchall()
            ids = [r[0] for r in heads]
            if not ids:
                return []
            conn.execute(
                "UPDATE deliveries SET lease_owner = %s, lease_until = %s WHERE id = ANY(%s)",
                (owner, now + lease_seconds, ids),
            )
            rows = conn.execute(
                f"SELECT {DELIVERY_COLUMNS}, e.payload, {_N_COLUMNS} "
                "FROM deliveries d JOIN events e ON e.seq = d.event_seq "
                "JOIN notifications n ON n.id = d.notification_id "
                "WHERE d.id = ANY(%s) ORDER BY d.event_seq",
                (ids,),
            ).fetchall()
        return [Claim(delivery_from_row(r[:13]), Notification(*r[14:]), bytes(r[13])) for r in rows]

    def record(self, delivery_id: int, owner: str, attempt_at: float, outcome: Outcome) -> None:
        with self._db.connection() as conn, conn.transaction():
            row = conn.execute(
                "SELECT attempts FROM deliveries WHERE id = %s FOR UPDATE", (delivery_id,)
            ).fetchone()
            if row is None:
                return
            attempt = row[0] + 1
            conn.execute(
                "INSERT INTO delivery_attempts "
                "(delivery_id, attempt, at, status_code, error, duration_ms) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
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
                "UPDATE deliveries SET status = %s, attempts = %s, last_attempt_at = %s, "
                "last_status_code = %s, last_error = %s, next_attempt_at = %s, "
                "delivered_at = CASE WHEN %s = 'DELIVERED' THEN %s ELSE delivered_at END, "
                "lease_owner = NULL, lease_until = NULL WHERE id = %s",
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
