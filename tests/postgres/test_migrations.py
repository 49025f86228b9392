"""Replicas starting at once on an empty database apply each schema migration once.

Three ``loch serve`` processes are spawned together on an emptied database (twice);
all must come up, ``schema_migrations`` and ``notification_migrations`` must
hold each version exactly once, and the repository must have been initialised once
(one ``main`` at the no-ancestor hash, one creation timestamp seen by every replica).
The same with eight stores opened by threads released by one barrier.
"""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import psycopg
import pytest

from loch.backends.postgres import MIGRATIONS, PostgresPersist
from loch.events import open_notification_store
from loch.events.postgres_store import NOTIFICATION_MIGRATIONS
from loch.versioning import VersionStore

from .harness import (
    NO_ANCESTOR,
    V2,
    commit_path,
    contents,
    head,
    ok,
    put,
    reset_database,
    run_threads,
    start_replicas,
    table,
)


def check_schema(url: str) -> None:
    """Each migration version once; one repository initialisation."""
    with psycopg.connect(url) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations ORDER BY 1")]
        assert versions == list(range(1, len(MIGRATIONS) + 1))
        versions = [
            r[0] for r in conn.execute("SELECT version FROM notification_migrations ORDER BY 1")
        ]
        assert versions == list(range(1, len(NOTIFICATION_MIGRATIONS) + 1))
        refs = conn.execute("SELECT name, type, hash FROM refs").fetchall()
        assert refs == [("main", "BRANCH", NO_ANCESTOR)]
        created = conn.execute("SELECT count(*) FROM repo_meta WHERE key = 'created'").fetchone()
        assert created == (1,)
        logged = conn.execute("SELECT name, hash FROM ref_log").fetchall()
        assert logged == [("main", NO_ANCESTOR)], "main was created more than once"


@pytest.mark.parametrize("attempt", range(2))
def test_replicas_starting_at_once_migrate_once(
    postgres_url: str, tmp_path: Path, attempt: int
) -> None:
    reset_database(postgres_url)
    replicas = start_replicas(3, postgres_url, tmp_path)
    try:
        check_schema(postgres_url)
        with httpx.Client(timeout=30.0) as http:
            created = {
                ok(http.get(f"{r.url}{V2}/config"))["repositoryCreationTimestamp"] for r in replicas
            }
            assert len(created) == 1, created
            assert {head(http, r.url, "main") for r in replicas} == {NO_ANCESTOR}
            resp = http.post(
                replicas[0].url + commit_path("main", NO_ANCESTOR),
                json={"commitMeta": {"message": "m"}, "operations": [put(["t"], table("s3://t"))]},
            )
            h = ok(resp)["targetBranch"]["hash"]
            for r in replicas[1:]:
                assert head(http, r.url, "main") == h
                assert contents(http, r.url, "main", [["t"]])["t"]["metadataLocation"] == "s3://t"
    finally:
        statuses = [r.stop() for r in replicas]
    for r in replicas:
        log = r.log_path.read_text(errors="replace")
        assert "Traceback" not in log and "ERROR" not in log, log[-4000:]
    assert statuses == [0, 0, 0]


def open_stores_at_once(url: str, n: int) -> None:
    """``n`` threads open a store, a repository and a notification store on ``url``,
    released together by a barrier."""
    barrier = threading.Barrier(n, timeout=60.0)

    def open_one(_: int) -> None:
        barrier.wait()
        persist = PostgresPersist(url, max_size=2)
        try:
            VersionStore(persist)
            open_notification_store(persist).close()
        finally:
            persist.close()

    run_threads(n, open_one, timeout=120.0)


def test_stores_opened_by_threads_at_once_migrate_once(postgres_url: str) -> None:
    for _ in range(3):
        reset_database(postgres_url)
        open_stores_at_once(postgres_url, 8)
        check_schema(postgres_url)
