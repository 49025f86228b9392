"""OpenAPI document, docs page, health and readiness probes, and the error format of
failures outside the Nessie handlers: unknown paths, wrong methods, malformed
percent-encoding, a broken store. Every error is a NessieError JSON body
(nessie-api.md section 6), never HTML or plain text.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from loch.api import create_app
from loch.config import Settings

from .helpers import V1, V2, Api, assert_error, put, table

V2_PATHS = {
    "/api/v2/config",
    "/api/v2/config/repository",
    "/api/v2/trees",
    "/api/v2/trees/{ref}",
    "/api/v2/trees/{ref}/recent-changes",
    "/api/v2/trees/{ref}/entries",
    "/api/v2/trees/{ref}/history",
    "/api/v2/trees/{from_ref}/diff/{to_ref}",
    "/api/v2/trees/{ref}/contents/{key}",
    "/api/v2/trees/{ref}/contents",
    "/api/v2/trees/{ref}/history/commit",
    "/api/v2/trees/{ref}/history/merge",
    "/api/v2/trees/{ref}/history/transplant",
}


def test_openapi_document(client: TestClient) -> None:
    resp = client.get("/openapi.json")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    doc = json.loads(resp.content)
    assert doc["openapi"].startswith("3.")
    assert doc["info"]["title"] and doc["info"]["version"]
    assert set(doc["paths"]) >= V2_PATHS
    assert "/api/v1/trees/tree" in doc["paths"]
    assert {"get", "put", "delete"} <= set(doc["paths"]["/api/v2/trees/{ref}"])
    assert "post" in doc["paths"]["/api/v2/trees/{ref}/history/commit"]


def test_docs_page(client: TestClient) -> None:
    resp = client.get("/docs")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/html")
    assert "openapi.json" in resp.text


def test_health_and_readiness(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "UP"}
    resp = client.get("/readyz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "UP"}


def test_readiness_without_an_open_store(tmp_path: Path) -> None:
    # without the lifespan (no `with`), the store is never opened
    app = create_app(Settings(store_url=f"sqlite:///{tmp_path / 'never.db'}"))
    client = TestClient(app, raise_server_exceptions=False)
    assert client.get("/healthz").status_code == 200
    assert_error(client.get("/readyz"), 503, "SERVICE_UNAVAILABLE")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/nope"),
        ("get", "/api/v2/nope"),
        ("get", "/api/v3/config"),
        ("get", "/api/v2/trees/main/nope"),
        ("post", "/api/v1/nope"),
        ("get", "/api/v2/trees/main/history/commit/extra"),
    ],
)
def test_unknown_path_is_404_nessie_error(client: TestClient, method: str, path: str) -> None:
    assert_error(client.request(method, path), 404, None)


def test_wrong_method_is_nessie_error(client: TestClient) -> None:
    assert_error(client.patch(f"{V2}/trees"), 405, None)
    assert_error(client.delete(f"{V2}/config"), 405, None)


INVALID_UTF8_PATHS = [
    f"{V2}/trees/%FF",
    f"{V2}/trees/%C3%28/entries",
    f"{V2}/trees/main/contents/%FF",
    f"{V2}/trees/main/diff/%FE",
    f"{V1}/trees/tree/%FF",
    f"{V1}/contents/%FF",
    f"{V1}/diffs/main...%FF",
    f"{V1}/namespaces/namespace/main/%FF",
]


def test_invalid_utf8_in_path_is_400(client: TestClient) -> None:
    """A path parameter whose percent-encoding is not UTF-8 is a bad request."""
    got = {path: client.get(path) for path in INVALID_UTF8_PATHS}
    for resp in got.values():
        assert_error(resp, resp.status_code, None)  # at least in Nessie's format
    assert {p: r.status_code for p, r in got.items()} == dict.fromkeys(INVALID_UTF8_PATHS, 400)


def test_unsupported_content_encoding_is_415(api: Api) -> None:
    resp = api.c.post(
        f"{V2}/trees/main/history/commit",
        content=b"{}",
        headers={"Content-Type": "application/json", "Content-Encoding": "br"},
    )
    assert_error(resp, 415, "UNSUPPORTED_MEDIA_TYPE")


@pytest.fixture
def broken_client(tmp_path: Path) -> Iterator[TestClient]:
    """A server whose SQLite file lost its ``refs`` table after the first commit."""
    db = tmp_path / "broken.db"
    app = create_app(Settings(store_url=f"sqlite:///{db}"))
    with TestClient(app, raise_server_exceptions=False) as client:
        Api(client).add("main", ["t"], table())
        conn = sqlite3.connect(db)
        try:
            conn.execute("DROP TABLE refs")
            conn.commit()
        finally:
            conn.close()
        yield client


def test_broken_store_gives_json_errors(broken_client: TestClient) -> None:
    client = broken_client
    for resp in (
        client.get(f"{V2}/trees/main"),
        client.get(f"{V2}/trees"),
        Api(client).commit_resp("main", put(["u"], table()), expected="ab" * 32),
        client.get(f"{V1}/trees/tree"),
    ):
        assert resp.status_code >= 500, resp.text
        body = assert_error(resp, resp.status_code, None)
        assert body["errorCode"] in {"UNKNOWN", "SERVICE_UNAVAILABLE"}
        assert "Traceback" not in body["message"]
    assert client.get("/healthz").status_code == 200


def test_readiness_reports_a_broken_store(broken_client: TestClient) -> None:
    assert_error(broken_client.get("/readyz"), 503, "SERVICE_UNAVAILABLE")
