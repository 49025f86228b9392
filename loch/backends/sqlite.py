"""Embedded SQLite backend (stdlib ``sqlite3``).

WAL journal with ``synchronous=FULL``: an acknowledged reference change survives a
process crash and a power loss. One writer connection (under a lock) serialises writes
within a process; ``BEGIN IMMEDIATE`` and a busy timeout serialise writers across
processes. Readers use one connection per thread and never block the writer.
"""

from __future__ import annotations

import os
import random
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

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

__all__ = ["MIGRATIONS", "SqlitePersist", "connect"]

MIGRATIONS: list[str] = [
    # 1: objects, references and repository settings
    """
    CREATE TABLE objects (id BLOB PRIMARY KEY, data BLOB NOT NULL) WITHOUT ROWID;
    CREATE TABLE refs (
        name TEXT PRIMARY KEY,
        type TEXT NOT NULL CHECK (type IN ('BRANCH', 'TAG')),
        hash TEXT NOT NULL
    ) WITHOUT ROWID;
    CREATE TABLE repo_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
    """,
    # 2: history of reference pointers (recent-changes)
    """
    CREATE TABLE ref_log (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        hash TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX ref_log_name ON ref_log (name, seq);
    """,
    # 3: outbox of events, written in the transaction of the change they describe
    """
    CREATE TABLE events (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        type TEXT NOT NULL,
        payload BLOB NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 4: objects appended in write order (rowid table) with a unique index on the id:
    # content-addressed ids are random, and inserting them into a table clustered by id
    # touches a random data page per object once the table outgrows the page cache; the
    # index alone is small enough to stay cached.
    """
    CREATE TABLE objects_v4 (seq INTEGER PRIMARY KEY, id BLOB NOT NULL UNIQUE, data BLOB NOT NULL);
    INSERT INTO objects_v4 (id, data) SELECT id, data FROM objects;
    DROP TABLE objects;
    ALTER TABLE objects_v4 RENAME TO objects;
    """,
]
"""Numbered schema migrations: entry ``i`` brings the schema to version ``i + 1``."""

_BUSY_TIMEOUT_MS = 30_000
# Page cache (SQLite's default is 2 MiB). The writer gets 32 MiB so that the interior
# pages of a large objects table stay cached and an insert does not re-read them; the
# per-thread readers get 4 MiB each, the OS page cache backs them.
_WRITER_CACHE_KIB = 32 * 1024
_READER_CACHE_KIB = 4 * 1024


def connect(path: str, cache_kib: int = _READER_CACHE_KIB) -> sqlite3.Connection:
    """A connection in WAL mode with ``synchronous=FULL`` and a busy timeout.

    Switching a new file to WAL takes a lock that SQLite's busy handler does not wait
    for, so processes opening the same new file at once retry it here.
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
    while True:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                path,
                timeout=_BUSY_TIMEOUT_MS / 1000,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout={_BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
            return conn
        except sqlite3.OperationalError as e:
            if conn is not None:
                conn.close()
            if ("locked" not in str(e) and "busy" not in str(e)) or time.monotonic() > deadline:
                raise StoreUnavailable(f"Cannot open SQLite store '{path}': {e}") from e
            time.sleep(0.005 + random.random() * 0.02)
        except sqlite3.Error as e:
            if conn is not None:
                conn.close()
            raise StoreUnavailable(f"Cannot open SQLite store '{path}': {e}") from e


class SqlitePersist(Persist):
    """Objects and references in one SQLite database file."""

    def __init__(self, path: str) -> None:
        self.path = path
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._all_conns: list[sqlite3.Connection] = []
        self._conns_lock = threading.Lock()
        self._writer = self._connect(_WRITER_CACHE_KIB)
        self._migrate()

    # -- connections -------------------------------------------------------------------

    def _connect(self, cache_kib: int = _READER_CACHE_KIB) -> sqlite3.Connection:
        conn = connect(self.path, cache_kib)
        with self._conns_lock:
            self._all_conns.append(conn)
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
        return conn

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._write_lock:
            conn = self._writer
            self._begin_immediate(conn)
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")

    @staticmethod
    def _begin_immediate(conn: sqlite3.Connection) -> None:
        # busy_timeout covers most lock waits; this loop covers the rare
        # SQLITE_BUSY returned without waiting (e.g. during WAL recovery).
        deadline = time.monotonic() + _BUSY_TIMEOUT_MS / 1000
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise StoreUnavailable(f"SQLite store failed: {e}") from e
                if time.monotonic() > deadline:
                    raise StoreUnavailable(f"SQLite store is locked: {e}") from e
                time.sleep(0.01)

    def _migrate(self) -> None:
        with self._write() as conn:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
            )
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
            current = row[0] or 0
            for version, script in enumerate(MIGRATIONS, start=1):
                if version <= current:
                    continue
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)",
                    (version, time.time()),
                )

    def schema_version(self) -> int:
        """The schema version this database is at."""
        row = self._reader().execute("SELECT max(version) FROM schema_migrations").fetchone()
        return int(row[0] or 0)

    # -- objects -------------------------------------------------------------------------

    def get_objects(self, ids: Sequence[str]) -> dict[str, bytes]:
        if not ids:
            return {}
        conn = self._reader()
        out: dict[str, bytes] = {}
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = conn.execute(
                f"SELECT id, data FROM objects WHERE id IN ({marks})",
                [bytes.fromhex(i) for i in chunk],
            ).fetchall()
            for oid, data in rows:
                out[oid.hex()] = data
        return out

    @staticmethod
    def _insert_objects(conn: sqlite3.Connection, objects: Mapping[str, bytes] | None) -> None:
        if objects:
            conn.executemany(
                "INSERT OR IGNORE INTO objects (id, data) VALUES (?, ?)",
                [(bytes.fromhex(k), v) for k, v in objects.items()],
            )

    def put_objects(self, objects: Mapping[str, bytes]) -> None:
        with self._write() as conn:
            self._insert_objects(conn, objects)

    # -- references ----------------------------------------------------------------------

    def get_ref(self, name: str) -> RefRecord | None:
        row = (
            self._reader()
            .execute("SELECT name, type, hash FROM refs WHERE name = ?", (name,))
            .fetchone()
        )
        return RefRecord(*row) if row else None

    def list_refs(self) -> list[RefRecord]:
        rows = self._reader().execute("SELECT name, type, hash FROM refs ORDER BY name")
        return [RefRecord(*r) for r in rows]

    @staticmethod
    def _insert_events(conn: sqlite3.Connection, events: Sequence[OutboxEvent]) -> None:
        if events:
            now = time.time()
            conn.executemany(
                "INSERT INTO events (id, type, payload, created_at) VALUES (?, ?, ?, ?)",
                [(e.id, e.type, e.payload, now) for e in events],
            )

    def read_events(self, after_seq: int, limit: int) -> list[StoredEvent]:
        rows = self._reader().execute(
            "SELECT seq, id, type, payload, created_at FROM events WHERE seq > ? "
            "ORDER BY seq LIMIT ?",
            (after_seq, limit),
        )
        return [StoredEvent(*r) for r in rows]

    def create_ref(
        self,
        ref: RefRecord,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM refs WHERE name = ?", (ref.name,)).fetchone():
                raise RefAlreadyExists(ref.name)
            self._insert_objects(conn, objects)
            conn.execute(
                "INSERT INTO refs (name, type, hash) VALUES (?, ?, ?)",
                (ref.name, ref.type, ref.hash),
            )
            self._log_ref(conn, ref.name, ref.hash)
            self._insert_events(conn, events)

    def _check(self, conn: sqlite3.Connection, name: str, expected: str) -> None:
        row = conn.execute("SELECT hash FROM refs WHERE name = ?", (name,)).fetchone()
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
        with self._write() as conn:
            cur = conn.execute(
                "UPDATE refs SET hash = ? WHERE name = ? AND hash = ?", (new, name, expected)
            )
            if cur.rowcount != 1:
                self._check(conn, name, expected)
            self._insert_objects(conn, objects)
            self._log_ref(conn, name, new)
            self._insert_events(conn, events)

    @staticmethod
    def _log_ref(conn: sqlite3.Connection, name: str, hash_: str) -> None:
        conn.execute(
            "INSERT INTO ref_log (name, hash, at) VALUES (?, ?, ?)", (name, hash_, time.time())
        )

    def ref_log(self, name: str, limit: int) -> list[str]:
        rows = self._reader().execute(
            "SELECT hash FROM ref_log WHERE name = ? ORDER BY seq DESC LIMIT ?", (name, limit)
        )
        return [r[0] for r in rows]

    def delete_ref(self, name: str, expected: str, events: Sequence[OutboxEvent] = ()) -> None:
        with self._write() as conn:
            cur = conn.execute("DELETE FROM refs WHERE name = ? AND hash = ?", (name, expected))
            if cur.rowcount != 1:
                self._check(conn, name, expected)
            self._insert_events(conn, events)

    # -- repository settings -------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._reader().execute("SELECT value FROM repo_meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta_if_absent(self, key: str, value: str) -> str:
        with self._write() as conn:
            conn.execute("INSERT OR IGNORE INTO repo_meta (key, value) VALUES (?, ?)", (key, value))
            row = conn.execute("SELECT value FROM repo_meta WHERE key = ?", (key,)).fetchone()
        return str(row[0])

    def set_meta(self, key: str, value: str | None) -> None:
        with self._write() as conn:
            if value is None:
                conn.execute("DELETE FROM repo_meta WHERE key = ?", (key,))
            else:
                conn.execute(
                    "INSERT INTO repo_meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )

    def close(self) -> None:
        with self._conns_lock:
            conns, self._all_conns = self._all_conns, []
        for conn in conns:
            conn.close()
