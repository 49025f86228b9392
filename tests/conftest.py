"""Shared fixtures: every versioning and contract test runs against every backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.store import Persist
from loch.versioning import VersionStore

BACKENDS = ["memory", "sqlite"]


def store_url(kind: str, tmp_path: Path) -> str:
    """A fresh store URL of the given backend kind."""
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'loch.db'}"
    raise ValueError(kind)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend kind under test."""
    return str(request.param)


@pytest.fixture
def persist(backend: str, tmp_path: Path) -> Iterator[Persist]:
    """A fresh, empty Persist of each backend."""
    p = open_store(store_url(backend, tmp_path))
    yield p
    p.close()


@pytest.fixture
def vs(persist: Persist) -> VersionStore:
    """A fresh repository (default branch ``main``) on each backend."""
    return VersionStore(persist)
