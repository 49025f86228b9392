"""The Persist contract (:mod:`loch.testing.contract`) against every backend.

:class:`TestPersistContract` runs the generic contract on each backend of the conftest
``persist`` fixture (memory and SQLite). :class:`TestSqliteDurable` runs the durable,
multi-handle contract on SQLite files, where each :class:`SqlitePersist` stands for a
server process. The remaining tests cover what only SQLite has: its migration table,
real separate processes on one file, and ``open_store`` URL parsing.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.backends.memory import MemoryPersist
from loch.backends.sqlite import MIGRATIONS, SqlitePersist
from loch.errors import BadRequestError
from loch.store import Persist, RefConditionFailed, RefRecord
from loch.testing import DurablePersistContract, PersistContract, PersistFactory
from loch.testing.contract import commit_hash, counter_hash, increment, make_objects


class TestPersistContract(PersistContract):
    """The generic contract on every backend (``persist`` comes from conftest)."""


class TestSqliteDurable(DurablePersistContract):
    """The durable contract on one SQLite file opened by several handles."""

    @pytest.fixture
    def persist_factory(self, tmp_path: Path) -> Iterator[PersistFactory]:
        """Opens a new :class:`SqlitePersist` on the same file each call."""
        opened: list[Persist] = []
        path = tmp_path / "shared.db"

        def factory() -> Persist:
            p = open_store(f"sqlite:///{path}")
            opened.append(p)
            return p

        yield factory
        for p in opened:
            p.close()


# -- SQLite only ---------------------------------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Where the SQLite store of a test lives."""
    return tmp_path / "loch.db"


def _migration_rows(path: Path) -> list[tuple[int, float]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT version, applied_at FROM schema_migrations ORDER BY version"
        ).fetchall()
    finally:
        conn.close()
    return [(int(v), float(t)) for v, t in rows]


def test_schema_migrations_records_version_1(db_path: Path) -> None:
    """A new file records every migration once, starting at version 1, and reopening
    adds nothing."""
    latest = len(MIGRATIONS)
    p = SqlitePersist(str(db_path))
    try:
        assert p.schema_version() == latest
    finally:
        p.close()
    rows = _migration_rows(db_path)
    assert [v for v, _ in rows] == list(range(1, latest + 1))
    assert rows[0][0] == 1
    assert all(t > 0 for _, t in rows)
    for _ in range(2):
        again = SqlitePersist(str(db_path))
        try:
            assert again.schema_version() == latest
        finally:
            again.close()
    assert _migration_rows(db_path) == rows


def test_old_schema_is_migrated_in_place(db_path: Path) -> None:
    """A file left at schema version 1 is brought to the latest version on open,
    keeping its objects, references and settings."""
    objs = make_objects("old", 3)
    conn = sqlite3.connect(db_path, isolation_level=None)
    try:
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)"
        )
        for statement in MIGRATIONS[0].split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations VALUES (1, 1.0)")
        conn.executemany(
            "INSERT INTO objects (id, data) VALUES (?, ?)",
            [(bytes.fromhex(k), v) for k, v in objs.items()],
        )
        conn.execute("INSERT INTO refs VALUES ('main', 'BRANCH', ?)", (commit_hash("0"),))
        conn.execute("INSERT INTO repo_meta VALUES ('created', 'long ago')")
    finally:
        conn.close()
    p = SqlitePersist(str(db_path))
    try:
        assert p.schema_version() == len(MIGRATIONS)
        assert p.get_objects(list(objs)) == objs
        assert p.list_refs() == [RefRecord("main", "BRANCH", commit_hash("0"))]
        assert p.get_meta("created") == "long ago"
        p.update_ref("main", commit_hash("0"), commit_hash("1"))
        assert p.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))
    finally:
        p.close()
    assert [v for v, _ in _migration_rows(db_path)] == list(range(1, len(MIGRATIONS) + 1))


def test_schema_tables_exist(db_path: Path) -> None:
    """Migration 1 creates the objects, refs and repo_meta tables."""
    SqlitePersist(str(db_path)).close()
    conn = sqlite3.connect(db_path)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()
    assert {"schema_migrations", "objects", "refs", "repo_meta"} <= tables
    assert mode == "wal"


def test_sqlite_creates_parent_directories(tmp_path: Path) -> None:
    """Opening a file in directories that do not exist yet creates them."""
    path = tmp_path / "a" / "b" / "c" / "loch.db"
    p = open_store(f"sqlite:///{path}")
    try:
        p.set_meta("k", "v")
    finally:
        p.close()
    assert path.is_file()


def test_failed_update_ref_rolls_back_on_file(db_path: Path) -> None:
    """After a failed CAS, the objects it carried are absent from the file itself."""
    p = SqlitePersist(str(db_path))
    try:
        p.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        lost = make_objects("lost", 600)
        with pytest.raises(RefConditionFailed):
            p.update_ref("main", commit_hash("x"), commit_hash("1"), lost)
    finally:
        p.close()
    conn = sqlite3.connect(db_path)
    try:
        count = conn.execute("SELECT count(*) FROM objects").fetchone()[0]
        in_tx = conn.in_transaction
    finally:
        conn.close()
    assert count == 0
    assert not in_tx


_CHILD = textwrap.dedent(
    """
    import sys
    from loch.backends import open_store
    from loch.testing.contract import increment

    p = open_store(sys.argv[1])
    try:
        print(increment(p, "counter", int(sys.argv[2])))
    finally:
        p.close()
    """
)


def test_separate_processes_cas_correctly(db_path: Path) -> None:
    """Real processes incrementing one counter by CAS on one file lose no increment."""
    url = f"sqlite:///{db_path}"
    p = open_store(url)
    try:
        p.create_ref(RefRecord("counter", "BRANCH", counter_hash(0)))
        procs, times = 3, 15
        children = [
            subprocess.Popen(
                [sys.executable, "-c", _CHILD, url, str(times)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(procs)
        ]
        # This process competes too, through its own handle.
        increment(p, "counter", times)
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err
            int(out.strip())  # number of lost CAS attempts, any value is fine
        assert p.get_ref("counter") == RefRecord(
            "counter", "BRANCH", counter_hash((procs + 1) * times)
        )
    finally:
        p.close()


def test_other_process_sees_writes(db_path: Path) -> None:
    """A second process reads what this one published, and its stale CAS fails."""
    url = f"sqlite:///{db_path}"
    objs = make_objects("cross", 3)
    p = open_store(url)
    try:
        p.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        p.update_ref("main", commit_hash("0"), commit_hash("1"), objs)
        p.set_meta("created", "t0")
        script = textwrap.dedent(
            f"""
            from loch.backends import open_store
            from loch.store import RefConditionFailed
            p = open_store({url!r})
            try:
                assert p.get_ref("main").hash == {commit_hash("1")!r}
                assert p.get_objects({list(objs)!r}) == {objs!r}
                assert p.get_meta("created") == "t0"
                try:
                    p.update_ref("main", {commit_hash("0")!r}, "stale")
                except RefConditionFailed as e:
                    assert e.actual == {commit_hash("1")!r}
                else:
                    raise AssertionError("stale CAS succeeded")
                p.update_ref("main", {commit_hash("1")!r}, {commit_hash("2")!r})
            finally:
                p.close()
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert p.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("2"))
    finally:
        p.close()


# -- open_store ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory",
        "loch.db",
        "/abs/loch.db",
        "sqlite:/x.db",
        "sqlite://",
        "sqlite:///",
        "sqlite://relative.db",
        "sqlite://host/x.db",
        "ftp://host/x",
        "mysql://localhost/db",
        "://x",
    ],
)
def test_open_store_rejects_bad_urls(url: str) -> None:
    """Unknown schemes and malformed URLs are a BadRequestError, not a crash."""
    with pytest.raises(BadRequestError):
        open_store(url)


def test_open_store_memory() -> None:
    """memory:// gives a fresh, empty in-memory store each time."""
    a, b = open_store("memory://"), open_store("memory://")
    assert isinstance(a, MemoryPersist) and isinstance(b, MemoryPersist)
    a.set_meta("k", "v")
    assert b.get_meta("k") is None


def test_open_store_sqlite_absolute(db_path: Path) -> None:
    """sqlite:////abs/path opens that absolute path."""
    p = open_store(f"sqlite:///{db_path}")
    try:
        assert isinstance(p, SqlitePersist)
        assert Path(p.path) == db_path
    finally:
        p.close()
    assert db_path.is_file()


def test_open_store_sqlite_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sqlite:///rel/path opens a path relative to the working directory."""
    monkeypatch.chdir(tmp_path)
    p = open_store("sqlite:///rel/dir/loch.db")
    try:
        assert isinstance(p, SqlitePersist)
    finally:
        p.close()
    assert (tmp_path / "rel" / "dir" / "loch.db").is_file()
