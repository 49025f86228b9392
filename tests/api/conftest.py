"""Fixtures of the REST API tests: an in-process app on every backend, and helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from loch.api import create_app
from loch.config import Settings

from .helpers import Api


def api_store_url(backend: str, tmp_path: Path) -> str:
    """A fresh store URL for ``backend`` (``memory`` or ``sqlite``)."""
    if backend == "memory":
        return "memory://"
    return f"sqlite:///{tmp_path / 'api.db'}"


@pytest.fixture
def client(backend: str, tmp_path: Path) -> Iterator[TestClient]:
    """A TestClient over a fresh repository, once per backend (``backend`` fixture).

    Server exceptions are not re-raised: the test sees the HTTP response a client would.
    """
    app = create_app(Settings(store_url=api_store_url(backend, tmp_path)))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def api(client: TestClient) -> Api:
    """Helpers over :func:`client`."""
    return Api(client)
