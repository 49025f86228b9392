"""Fixtures of the REST API tests: an in-process app on every backend, and helpers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from loch.api import create_app
from loch.config import Settings

from .helpers import Api


@pytest.fixture
def client(fresh_store_url: str) -> Iterator[TestClient]:
    """A TestClient over a fresh repository, once per backend (``backend`` fixture).

    Server exceptions are not re-raised: the test sees the HTTP response a client would.
    """
    app = create_app(Settings(store_url=fresh_store_url))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.fixture
def api(client: TestClient) -> Api:
    """Helpers over :func:`client`."""
    return Api(client)
