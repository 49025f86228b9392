"""Shared fixtures: every versioning and contract test runs against every backend.

PostgreSQL runs for real: a throwaway cluster is started once per test session (or
``LOCH_TEST_POSTGRES_URL`` names an existing database), and each test gets a fresh schema.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.store import Persist
from loch.testing.postgres import PostgresCluster, find_pg_bin
from loch.versioning import VersionStore

BACKENDS = ["memory", "sqlite", "postgres"]


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """URL of a PostgreSQL database for the tests (a cluster started for the session)."""
    given = os.environ.get("LOCH_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    if find_pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed; `make test` installs it")
        pytest.skip("PostgreSQL is not installed")
    cluster = PostgresCluster().start()
    try:
        yield cluster.url
    finally:
        cluster.stop()


def reset_postgres(url: str) -> None:
    """Drop every table: the next store opened on ``url`` starts from an empty schema."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def store_url(kind: str, tmp_path: Path, request: pytest.FixtureRequest | None = None) -> str:
    """A fresh store URL of the given backend kind."""
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'loch.db'}"
    if kind == "postgres":
        assert request is not None
        url = str(request.getfixturevalue("postgres_url"))
        reset_postgres(url)
        return url
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend kind under test."""
    return str(request.param)


@pytest.fixture
def fresh_store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of a fresh, empty store of each backend."""
    return store_url(backend, tmp_path, request)


@pytest.fixture
def persist(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Persist]:
    """A fresh, empty Persist of each backend."""
    p = open_store(store_url(backend, tmp_path, request))
    yield p
    p.close()


@pytest.fixture
def vs(persist: Persist) -> VersionStore:
    """A fresh repository (default branch ``main``) on each backend."""
    return VersionStore(persist)
