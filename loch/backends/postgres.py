"""PostgreSQL backend (psycopg 3 with a connection pool), for several Loch replicas.

Objects are inserted idempotently (``ON CONFLICT DO NOTHING``); a reference change is a
conditional ``UPDATE`` in the same transaction as the objects and events it publishes.
Schema migrations run under a transaction-scoped advisory lock, so replicas starting
at once apply each migration exactly once. Connection failures surface as
:class:`~loch.store.persist.StoreUnavailable` (HTTP 503); the pool checks connections
before handing them out, so the next request after the database returns reconnects.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from loch.store import (
    OutboxEvent,
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefMissing,
    RefRecord,
    StoredEvent,
)
from loch.store.persist import StoreUnavailable

try:
    import psycopg
    from psycopg_pool import ConnectionPool, PoolTimeout
except ImportError as _e:  # pragma: no cover - depends on the installed extras
    raise ImportError("The PostgreSQL store needs psycopg 3: pip install 'loch[postgres]'") from _e

__all__ = ["MIGRATIONS", "PostgresPersist"]

T = TypeVar("T")

MIGRATION_LOCK = 0x6C6F6368  # "loch": advisory lock key of schema migrations

MIGRATIONS: list[str] = [
    # 1: objects, references, reference log, repository settings, outbox
    """
    CREATE TABLE objects (id BYTEA PRIMARY KEY, data BYTEA NOT NULL);
    CREATE TABLE refs (
        name TEXT PRIMARY KEY,
        type TEXT NOT NULL CHECK (type IN ('BRANCH', 'TAG')),
        hash TEXT NOT NULL
    );
    CREATE TABLE repo_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    CREATE TABLE ref_log (
        seq BIGSERIAL PRIMARY KEY,
        name TEXT NOT NULL,
        hash TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX ref_log_name ON ref_log (name, seq);
    CREATE TABLE events (
        seq BIGSERIAL PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        payload BYTEA NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        fanned_out BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX events_pending ON events (seq) WHERE NOT fanned_out;
    """,
]
"""Numbered schema migrations: entry ``i`` brings the schema to version ``i + 1``."""


class PostgresPersist(Persist):
    """Objects and references in a PostgreSQL database."""

    def __init__(self, url: str, min_size: int = 1, max_size: int = 10) -> None:
        self.url = url
        self._pool = ConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            check=ConnectionPool.check_connection,
            open=False,
            # A request waits at most this long for a connection, then answers 503.
            timeout=3.0,
            # Background reconnection backs off exponentially; stop it after a few
            # seconds so that requests drive reconnection (the pool grows on demand)
            # and the first request after the database returns reconnects at once.
            reconnect_timeout=5.0,
            name="loch",
        )
        self._pool.open(wait=False)
        self._run(self._migrate)

    # -- connections -------------------------------------------------------------------

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection (autocommit; use ``conn.transaction()`` to group writes)."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except PoolTimeout as e:
            raise StoreUnavailable(f"PostgreSQL store unavailable: {e}") from e
        except (psycopg.OperationalError, psycopg.InterfaceError) as e:
            raise StoreUnavailable(f"PostgreSQL store unavailable: {e}") from e

    def _run(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self.connection() as conn:
            return fn(conn)

    def _tx(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        with self.connection() as conn, conn.transaction():
            return fn(conn)

    def _migrate(self, conn: psycopg.Connection[Any]) -> None:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
            )
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
            current = row[0] if row and row[0] is not None else 0
            for version, script in enumerate(MIGRATIONS, start=1):
                if version <= current:
                    continue
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (%s, %s)",
                    (version, time.time()),
                )

    def schema_version(self) -> int:
        """The schema version this database is at."""
        row = self._run(
            lambda c: c.execute("SELECT max(version) FROM schema_migrations").fetchone()
        )
        return int(row[0] or 0) if row else 0

    # -- objects -------------------------------------------------------------------------

    def get_objects(self, ids: Sequence[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        keys = [bytes.fromhex(i) for i in ids]
        rows = self._run(
            lambda c: c.execute(
                "SELECT id, data FROM objects WHERE id = ANY(%s)", (keys,)
            ).fetchall()
        )
        return {bytes(r[0]).hex(): bytes(r[1]) for r in rows}

    @staticmethod
    def _insert_objects(conn: psycopg.Connection[Any], objects: Mapping[str, bytes] | None) -> None:
        if objects:
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO objects (id, data) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                    [(bytes.fromhex(k), v) for k, v in objects.items()],
                )

    @staticmethod
    def _insert_events(conn: psycopg.Connection[Any], events: Sequence[OutboxEvent]) -> None:
        if events:
            now = time.time()
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO events (id, type, payload, created_at) VALUES (%s, %s, %s, %s)",
                    [(e.id, e.type, e.payload, now) for e in events],
                )

    def put_objects(self, objects: Mapping[str, bytes]) -> None:
        self._tx(lambda c: self._insert_objects(c, objects))

    def read_events(self, after_seq: int, limit: int) -> list[StoredEvent]:
        rows = self._run(
            lambda c: c.execute(
                "SELECT seq, id, type, payload, created_at FROM events WHERE seq > %s "
                "ORDER BY seq LIMIT %s",
                (after_seq, limit),
            ).fetchall()
        )
        return [StoredEvent(r[0], r[1], r[2], bytes(r[3]), r[4]) for r in rows]

    # -- references ----------------------------------------------------------------------

    def get_ref(self, name: str) -> RefRecord | None:
        row = self._run(
            lambda c: c.execute(
                "SELECT name, type, hash FROM refs WHERE name = %s", (name,)
            ).fetchone()
        )
        return RefRecord(*row) if row else None

    def list_refs(self) -> list[RefRecord]:
        rows = self._run(
            lambda c: c.execute(
                'SELECT name, type, hash FROM refs ORDER BY name COLLATE "C"'
            ).fetchall()
        )
        return [RefRecord(*r) for r in rows]

    @staticmethod
    def _log_ref(conn: psycopg.Connection[Any], name: str, hash_: str) -> None:
        conn.execute(
            "INSERT INTO ref_log (name, hash, at) VALUES (%s, %s, %s)", (name, hash_, time.time())
        )

    def create_ref(
        self,
        ref: RefRecord,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        def create(conn: psycopg.Connection[Any]) -> None:
            cur = conn.execute(
                "INSERT INTO refs (name, type, hash) VALUES (%s, %s, %s) "
                "ON CONFLICT (name) DO NOTHING",
                (ref.name, ref.type, ref.hash),
            )
            if cur.rowcount != 1:
                raise RefAlreadyExists(ref.name)
            self._insert_objects(conn, objects)
            self._log_ref(conn, ref.name, ref.hash)
            self._insert_events(conn, events)

        self._tx(create)

    @staticmethod
    def _check(conn: psycopg.Connection[Any], name: str, expected: str) -> None:
        row = conn.execute("SELECT hash FROM refs WHERE name = %s", (name,)).fetchone()
        if row is None:
            raise RefMissing(name)
        raise RefConditionFailed(name, expected, row[0])

    def update_ref(
        self,
        name: str,
        expected: str,
        new: str,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        def update(conn: psycopg.Connection[Any]) -> None:
            cur = conn.execute(
                "UPDATE refs SET hash = %s WHERE name = %s AND hash = %s", (new, name, expected)
            )
            if cur.rowcount != 1:
                self._check(conn, name, expected)
            self._insert_objects(conn, objects)
            self._log_ref(conn, name, new)
            self._insert_events(conn, events)

        self._tx(update)

    def delete_ref(self, name: str, expected: str, events: Sequence[OutboxEvent] = ()) -> None:
        def delete(conn: psycopg.Connection[Any]) -> None:
            cur = conn.execute("DELETE FROM refs WHERE name = %s AND hash = %s", (name, expected))
            if cur.rowcount != 1:
                self._check(conn, name, expected)
            self._insert_events(conn, events)

        self._tx(delete)

    def ref_log(self, name: str, limit: int) -> list[str]:
        rows = self._run(
            lambda c: c.execute(
                "SELECT hash FROM ref_log WHERE name = %s ORDER BY seq DESC LIMIT %s",
                (name, max(0, limit)),
            ).fetchall()
        )
        return [r[0] for r in rows]

    # -- repository settings -------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._run(
            lambda c: c.execute("SELECT value FROM repo_meta WHERE key = %s", (key,)).fetchone()
        )
        return None if row is None else str(row[0])

    def set_meta_if_absent(self, key: str, value: str) -> str:
        def put(conn: psycopg.Connection[Any]) -> str:
            conn.execute(
                "INSERT INTO repo_meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING",
                (key, value),
            )
            row = conn.execute("SELECT value FROM repo_meta WHERE key = %s", (key,)).fetchone()
            assert row is not None
            return str(row[0])

        return self._tx(put)

    def set_meta(self, key: str, value: str | None) -> None:
        def put(conn: psycopg.Connection[Any]) -> None:
            if value is None:
                conn.execute("DELETE FROM repo_meta WHERE key = %s", (key,))
            else:
                conn.execute(
                    "INSERT INTO repo_meta (key, value) VALUES (%s, %s) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

        self._tx(put)

    def close(self) -> None:
        self._pool.close()
