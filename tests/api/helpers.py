"""Helpers of the REST API tests: wire builders (bodies as real clients send them),
Nessie error assertions, a small v2 client over a TestClient or httpx.Client, and a
real ``loch serve`` process on a free port.

The wire contract is /work/shared/reference/nessie-api.md; client behaviour is
clients.md. Field sets are asserted exactly because the Java client and pynessie
reject unknown fields.
"""

from __future__ import annotations

from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from loch.testing.server import LochServer

__all__ = [
    "ERROR_FIELDS",
    "NO_ANCESTOR",
    "SPEC2",
    "UNKNOWN_HASH",
    "V1",
    "V2",
    "Api",
    "assert_error",
    "delete",
    "delta_table",
    "enc",
    "iceberg_meta",
    "key",
    "live_server",
    "namespace",
    "put",
    "table",
    "unchanged",
    "view",
]

NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
UNKNOWN_HASH = "ab" * 32
V1 = "/api/v1"
V2 = "/api/v2"
SPEC2 = {"Nessie-Client-Spec": "2"}
ERROR_FIELDS = {"status", "reason", "message", "errorCode", "serverStackTrace"}
ERROR_CODES = {
    "BAD_REQUEST",
    "FORBIDDEN",
    "REFERENCE_NOT_FOUND",
    "CONTENT_NOT_FOUND",
    "NAMESPACE_NOT_FOUND",
    "REFERENCE_ALREADY_EXISTS",
    "REFERENCE_CONFLICT",
    "NAMESPACE_ALREADY_EXISTS",
    "NAMESPACE_NOT_EMPTY",
    "UNSUPPORTED_MEDIA_TYPE",
    "TOO_MANY_REQUESTS",
    "UNKNOWN",
    "SERVICE_UNAVAILABLE",
}
COMMIT_META_V2 = {"hash", "committer", "authors", "allSignedOffBy", "message", "commitTime"}
COMMIT_META_V1 = {
    "hash",
    "committer",
    "author",
    "signedOffBy",
    "message",
    "commitTime",
    "authorTime",
    "properties",
}


def enc(text: str) -> str:
    """Percent-encode a path parameter like the Java client and pynessie (nothing safe)."""
    return quote(text, safe="")


def key(*elements: str) -> dict[str, Any]:
    """A ContentKey."""
    return {"elements": list(elements)}


def table(
    location: str = "s3://bucket/db/t/metadata/00000.metadata.json",
    id: str | None = None,
    snapshot_id: int = -1,
) -> dict[str, Any]:
    """ICEBERG_TABLE content as Iceberg's NessieCatalog sends it (explicit ``id``)."""
    return {
        "type": "ICEBERG_TABLE",
        "id": id,
        "metadataLocation": location,
        "snapshotId": snapshot_id,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


def view(
    location: str = "s3://bucket/db/v/metadata/00000.json", id: str | None = None
) -> dict[str, Any]:
    """ICEBERG_VIEW content as Iceberg sends it."""
    return {
        "type": "ICEBERG_VIEW",
        "id": id,
        "metadataLocation": location,
        "versionId": 1,
        "schemaId": 0,
        "sqlText": "-",
        "dialect": "-",
    }


def delta_table(id: str | None = None) -> dict[str, Any]:
    """DELTA_LAKE_TABLE content."""
    return {
        "type": "DELTA_LAKE_TABLE",
        "id": id,
        "metadataLocationHistory": ["s3://bucket/delta/_delta_log/0.json"],
        "checkpointLocationHistory": [],
        "lastCheckpoint": None,
    }


def namespace(
    *elements: str, properties: dict[str, str] | None = None, id: str | None = None
) -> dict[str, Any]:
    """NAMESPACE content as Iceberg sends it."""
    return {
        "type": "NAMESPACE",
        "id": id,
        "elements": list(elements),
        "properties": properties if properties is not None else {},
    }


def put(
    elements: list[str] | tuple[str, ...],
    content: dict[str, Any],
    documentation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A PUT operation with Iceberg's explicit ``documentation: null``."""
    return {
        "type": "PUT",
        "key": key(*elements),
        "content": content,
        "documentation": documentation,
    }


def delete(elements: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """A DELETE operation."""
    return {"type": "DELETE", "key": key(*elements)}


def unchanged(elements: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """An UNCHANGED operation."""
    return {"type": "UNCHANGED", "key": key(*elements)}


def iceberg_meta(message: str, author: str = "alice") -> dict[str, Any]:
    """CommitMeta exactly as Iceberg's client sends it (clients.md A.4)."""
    return {
        "hash": None,
        "committer": None,
        "authors": [author],
        "allSignedOffBy": [],
        "message": message,
        "commitTime": None,
        "authorTime": None,
        "allProperties": {"application-type": ["iceberg"], "app-id": ["local-1700000000000"]},
    }


def assert_error(
    resp: httpx.Response,
    status: int,
    code: str | None,
    message: str | None = None,
    details: bool = False,
) -> dict[str, Any]:
    """Check a NessieError body; returns it.

    ``code`` None only checks that the code is one of Nessie's. ``details`` says
    whether ``errorDetails`` must be present (it must be absent otherwise).
    """
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert isinstance(body, dict), body
    expected = ERROR_FIELDS | ({"errorDetails"} if details else set())
    assert set(body) == expected, body
    assert body["status"] == status
    assert body["reason"] == HTTPStatus(status).phrase
    assert isinstance(body["message"], str) and body["message"]
    assert body["serverStackTrace"] is None
    if code is None:
        assert body["errorCode"] in ERROR_CODES, body
    else:
        assert body["errorCode"] == code, body
    if message is not None:
        assert body["message"] == message, body
    return dict(body)


def check_commit_meta_v2(meta: dict[str, Any]) -> None:
    """A v2 CommitMeta: required fields, NON_EMPTY ones only when non-empty, no v1 names."""
    assert set(meta) >= COMMIT_META_V2, meta
    allowed = COMMIT_META_V2 | {"authorTime", "allProperties", "parentCommitHashes"}
    assert set(meta) <= allowed, meta
    assert isinstance(meta["authors"], list)
    assert isinstance(meta["allSignedOffBy"], list)
    if "allProperties" in meta:
        assert meta["allProperties"], meta
    if "parentCommitHashes" in meta:
        assert meta["parentCommitHashes"], meta
    for t in ("commitTime", "authorTime"):
        if meta.get(t) is not None:
            assert meta[t].endswith("Z"), meta


def check_commit_meta_v1(meta: dict[str, Any]) -> None:
    """A v1 CommitMeta: exactly the v1 fields."""
    assert set(meta) == COMMIT_META_V1, meta
    assert isinstance(meta["properties"], dict)


class Api:
    """A few v2 calls over a TestClient or an ``httpx.Client`` (base URL = server root)."""

    def __init__(self, client: httpx.Client) -> None:
        self.c = client

    @staticmethod
    def ok(resp: httpx.Response) -> dict[str, Any]:
        """The JSON body of a 200 response."""
        assert resp.status_code == 200, (resp.status_code, resp.text)
        body = resp.json()
        assert isinstance(body, dict)
        return body

    def ref(self, name: str = "main", fetch: str | None = None) -> dict[str, Any]:
        """``GET /trees/{name}``: the reference."""
        params = {"fetch": fetch} if fetch else None
        ref = self.ok(self.c.get(f"{V2}/trees/{enc(name)}", params=params))["reference"]
        assert isinstance(ref, dict)
        return ref

    def head(self, name: str = "main") -> str:
        """The hash a reference points at."""
        h = self.ref(name)["hash"]
        assert isinstance(h, str)
        return h

    def create(
        self,
        name: str,
        ref_type: str = "BRANCH",
        source: str = "main",
        hash_: str | None = None,
    ) -> dict[str, Any]:
        """Create ``name`` from ``source`` at its HEAD (or ``hash_``); the new reference."""
        h = hash_ if hash_ is not None else self.head(source)
        body = {"type": "BRANCH", "name": source, "hash": h}
        resp = self.c.post(f"{V2}/trees", params={"name": name, "type": ref_type}, json=body)
        ref = self.ok(resp)["reference"]
        assert isinstance(ref, dict)
        return ref

    def commit_resp(
        self,
        branch: str,
        *ops: dict[str, Any],
        message: str = "commit",
        expected: str | None = None,
        meta: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """POST a commit to ``branch@expected`` (HEAD when None); the raw response."""
        h = expected if expected is not None else self.head(branch)
        body = {"commitMeta": meta or iceberg_meta(message), "operations": list(ops)}
        return self.c.post(
            f"{V2}/trees/{enc(branch + '@' + h)}/history/commit", json=body, headers=headers
        )

    def commit(
        self,
        branch: str,
        *ops: dict[str, Any],
        message: str = "commit",
        expected: str | None = None,
        meta: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """Commit (must succeed); the CommitResponse."""
        return self.ok(
            self.commit_resp(
                branch, *ops, message=message, expected=expected, meta=meta, headers=headers
            )
        )

    def add(
        self, branch: str, elements: tuple[str, ...] | list[str], content: dict[str, Any]
    ) -> tuple[str, str]:
        """PUT new content at HEAD; (new commit hash, content id)."""
        r = self.commit(branch, put(elements, content), message=f"add {'.'.join(elements)}")
        added = {tuple(a["key"]["elements"]): a["contentId"] for a in r["addedContents"]}
        return r["targetBranch"]["hash"], added[tuple(elements)]

    def content(self, ref: str, *elements: str) -> dict[str, Any]:
        """The content under a key (must exist)."""
        resp = self.c.post(
            f"{V2}/trees/{enc(ref)}/contents", json={"requestedKeys": [key(*elements)]}
        )
        contents = self.ok(resp)["contents"]
        assert len(contents) == 1, contents
        c = contents[0]["content"]
        assert isinstance(c, dict)
        return c

    def log(self, ref: str = "main", **params: Any) -> list[dict[str, Any]]:
        """All log entries of ``ref`` (first page)."""
        entries = self.ok(self.c.get(f"{V2}/trees/{enc(ref)}/history", params=params))["logEntries"]
        assert isinstance(entries, list)
        return entries

    def entries(self, ref: str = "main", **params: Any) -> dict[str, Any]:
        """An EntriesResponse."""
        return self.ok(self.c.get(f"{V2}/trees/{enc(ref)}/entries", params=params))

    def key_list(self, ref: str = "main") -> list[tuple[str, ...]]:
        """The keys of ``ref``, in order."""
        return [tuple(e["name"]["elements"]) for e in self.entries(ref)["entries"]]


# -- a real server ---------------------------------------------------------------------------


def live_server(store: str, log_path: Path, log_level: str = "warning") -> LochServer:
    """A ``loch serve --host 127.0.0.1 --port <free> --store <store>`` process, not yet
    started (``LOCH_STORE`` unset): ``with live_server(…) as server`` starts it, waits for
    ``/healthz`` and stops it with SIGTERM at the end of the block; ``.start()`` starts it
    alone."""
    return LochServer(
        store,
        log_path,
        host="127.0.0.1",
        log_level=log_level,
        env={"LOCH_STORE": None},
        stop_timeout=10.0,
    )
