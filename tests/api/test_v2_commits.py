"""API v2 commits: bodies as Iceberg sends them, ``addedContents``, conflict detection and
its error details, content-id and namespace rules, commit headers, request encodings
(gzip, chunked), body limits and validation errors.

Contract: nessie-api.md sections 1 (request bodies, headers), 2 (CommitMeta, ContentKey,
Operations, CommitResponse), 5 (commit and conflict detection, content ids, namespaces)
and 6 (errors); clients.md A.4-A.6.
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from loch.api import create_app
from loch.config import Settings

from .helpers import (
    NO_ANCESTOR,
    SPEC2,
    UNKNOWN_HASH,
    V2,
    Api,
    assert_error,
    check_commit_meta_v2,
    delete,
    delta_table,
    enc,
    iceberg_meta,
    key,
    namespace,
    put,
    table,
    unchanged,
    view,
)


def commit_url(branch: str, h: str) -> str:
    return f"{V2}/trees/{enc(branch + '@' + h)}/history/commit"


def conflicts(body: dict[str, Any]) -> list[tuple[str, tuple[str, ...] | None]]:
    """(conflictType, key elements) of a REFERENCE_CONFLICT body with details."""
    details = body["errorDetails"]
    assert details["type"] == "REFERENCE_CONFLICTS"
    out = []
    for c in details["conflicts"]:
        assert {"conflictType", "key", "message"} <= set(c)
        k = tuple(c["key"]["elements"]) if c["key"] is not None else None
        out.append((c["conflictType"], k))
    return out


def conflict_of(
    api: Api, branch: str, *ops: dict[str, Any], expected: str | None = None
) -> dict[str, Any]:
    """Commit that must fail with 409 REFERENCE_CONFLICT (details requested)."""
    resp = api.commit_resp(branch, *ops, expected=expected, headers=SPEC2)
    return assert_error(resp, 409, "REFERENCE_CONFLICT", details=True)


# -- bodies as Iceberg sends them -------------------------------------------------------------


def test_iceberg_namespace_and_table_commits(api: Api) -> None:
    h0 = api.head()
    ns_body = {
        "commitMeta": iceberg_meta("create namespace db"),
        "operations": [
            {
                "type": "PUT",
                "key": {"elements": ["db"]},
                "content": {
                    "type": "NAMESPACE",
                    "id": None,
                    "elements": ["db"],
                    "properties": {"owner": "root"},
                },
                "documentation": None,
            }
        ],
    }
    resp = api.c.post(commit_url("main", h0), json=ns_body, headers=SPEC2)
    body = api.ok(resp)
    assert set(body) == {"targetBranch", "addedContents"}
    h1 = body["targetBranch"]["hash"]
    assert body["targetBranch"] == {"type": "BRANCH", "name": "main", "hash": h1}
    assert len(h1) == 64 and h1 != h0
    (added,) = body["addedContents"]
    assert set(added) == {"key", "contentId"}
    assert added["key"] == {"elements": ["db"]}
    ns_id = added["contentId"]
    uuid.UUID(ns_id)
    assert api.content("main", "db") == {
        "type": "NAMESPACE",
        "id": ns_id,
        "elements": ["db"],
        "properties": {"owner": "root"},
    }

    tbl = table("s3://w/db/t_1/metadata/00000-a.metadata.json")
    body = api.commit(
        "main", put(["db", "t"], tbl), message="Iceberg table created/registered with name db.t"
    )
    h2 = body["targetBranch"]["hash"]
    (added,) = body["addedContents"]
    tid = added["contentId"]
    stored = api.content("main", "db", "t")
    assert stored == {**tbl, "id": tid}

    # table update with the existing id: no new content
    upd = table("s3://w/db/t_1/metadata/00001-b.metadata.json", id=tid, snapshot_id=42)
    body = api.commit(
        "main", put(["db", "t"], upd), message="Iceberg append against db.t", expected=h2
    )
    assert body["addedContents"] == []
    assert api.content("main", "db", "t")["snapshotId"] == 42

    # the log keeps Iceberg's meta
    entry = api.log()[0]
    meta = entry["commitMeta"]
    check_commit_meta_v2(meta)
    assert meta["message"] == "Iceberg append against db.t"
    assert meta["authors"] == ["alice"]
    assert meta["committer"] == ""
    assert meta["allProperties"] == {
        "application-type": ["iceberg"],
        "app-id": ["local-1700000000000"],
    }
    assert meta["parentCommitHashes"] == [h2]
    assert entry["parentCommitHash"] == h2


def test_view_and_delta_contents_roundtrip(api: Api) -> None:
    r = api.commit("main", put(["v"], view()), put(["d"], delta_table()))
    ids = {tuple(a["key"]["elements"]): a["contentId"] for a in r["addedContents"]}
    assert set(ids) == {("v",), ("d",)}
    assert api.content("main", "v") == {**view(), "id": ids[("v",)]}
    assert api.content("main", "d") == {**delta_table(), "id": ids[("d",)]}


def test_delete_and_rename_have_no_added_contents(api: Api) -> None:
    _, tid = api.add("main", ["a"], table())
    r = api.commit("main", delete(["a"]), put(["b"], table(id=tid)), message="rename")
    assert r["addedContents"] == []
    assert api.content("main", "b")["id"] == tid
    r = api.commit("main", delete(["b"]))
    assert r["addedContents"] == []
    assert api.key_list() == []


def test_replace_gets_a_new_id(api: Api) -> None:
    _, tid = api.add("main", ["a"], table())
    r = api.commit("main", delete(["a"]), put(["a"], table("s3://new")))
    (added,) = r["addedContents"]
    assert added["key"] == key("a") and added["contentId"] != tid


def test_identical_put_still_commits(api: Api) -> None:
    h1, tid = api.add("main", ["a"], table())
    r = api.commit("main", put(["a"], table(id=tid)))
    assert r["targetBranch"]["hash"] != h1
    assert len(api.log()) == 2


def test_unknown_request_fields_and_v1_meta_names_accepted(api: Api) -> None:
    body = {
        "commitMeta": {
            "author": "bob",
            "signedOffBy": "carol",
            "properties": {"k": "v"},
            "message": "v1 names",
            "whatever": 1,
        },
        "operations": [
            {
                "type": "PUT",
                "key": key("x"),
                "content": {**table(), "extra": True},
                "expectedContent": None,
            }
        ],
        "somethingElse": [],
    }
    resp = api.c.post(commit_url("main", api.head()), json=body)
    api.ok(resp)
    meta = api.log()[0]["commitMeta"]
    assert meta["authors"] == ["bob"]
    assert meta["allSignedOffBy"] == ["carol"]
    assert meta["allProperties"] == {"k": ["v"]}
    assert "extra" not in api.content("main", "x")


# -- conflicts ---------------------------------------------------------------------------------


def test_stale_expected_hash_on_untouched_key_succeeds(api: Api) -> None:
    h0 = api.head()
    _, tid = api.add("main", ["a"], table("s3://a"))
    h1 = api.head()
    h2, _ = api.add("main", ["b"], table("s3://b"))
    # Iceberg commits against the hash its metadata was loaded from
    r = api.commit("main", put(["a"], table("s3://a2", id=tid)), expected=h1)
    h3 = r["targetBranch"]["hash"]
    assert api.log()[0]["commitMeta"]["parentCommitHashes"] == [h2]
    assert api.head() == h3
    # even against the no-ancestor hash for a brand-new key
    r = api.commit("main", put(["c"], table("s3://c")), expected=h0)
    assert api.key_list() == [("a",), ("b",), ("c",)]
    assert api.content("main", "a")["metadataLocation"] == "s3://a2"


def test_key_exists_conflict(api: Api) -> None:
    h0 = api.head()
    api.add("main", ["t"], table("s3://first"))
    body = conflict_of(api, "main", put(["t"], table("s3://second")), expected=h0)
    assert conflicts(body) == [("KEY_EXISTS", ("t",))]
    assert body["message"] == "Key 't' already exists."
    assert body["errorDetails"]["conflicts"][0]["message"] == "key 't' already exists"
    # without the client-spec header: same error, no details
    resp = api.commit_resp("main", put(["t"], table("s3://second")), expected=h0)
    assert "errorDetails" not in assert_error(resp, 409, "REFERENCE_CONFLICT")


def test_key_does_not_exist_conflicts(api: Api) -> None:
    body = conflict_of(api, "main", delete(["nope"]))
    assert conflicts(body) == [("KEY_DOES_NOT_EXIST", ("nope",))]
    assert body["message"] == "Key 'nope' does not exist."

    h1, tid = api.add("main", ["t"], table())
    api.commit("main", delete(["t"]))
    body = conflict_of(api, "main", put(["t"], table("s3://x", id=tid)), expected=h1)
    assert conflicts(body) == [("KEY_DOES_NOT_EXIST", ("t",))]


def test_value_and_content_id_conflicts(api: Api) -> None:
    h1, tid = api.add("main", ["t"], table("s3://1"))
    api.commit("main", put(["t"], table("s3://2", id=tid)))
    body = conflict_of(api, "main", put(["t"], table("s3://3", id=tid)), expected=h1)
    assert conflicts(body) == [("VALUE_DIFFERS", ("t",))]
    assert body["message"] == "Values of existing and expected content for key 't' are different."

    # replaced in between: a new content id
    h2 = api.head()
    api.commit("main", delete(["t"]), put(["t"], table("s3://new")))
    body = conflict_of(api, "main", put(["t"], table("s3://4", id=tid)), expected=h2)
    assert conflicts(body) == [("CONTENT_ID_DIFFERS", ("t",))]

    # replaced by another content type
    h3 = api.head()
    new_id = api.content("main", "t")["id"]
    api.commit("main", delete(["t"]), put(["t"], view()))
    body = conflict_of(api, "main", put(["t"], table("s3://5", id=new_id)), expected=h3)
    ((ctype, k),) = conflicts(body)
    assert k == ("t",) and ctype in {"PAYLOAD_DIFFERS", "CONTENT_ID_DIFFERS"}


def test_unchanged_operation_checks_conflicts(api: Api) -> None:
    h1, tid = api.add("main", ["a"], table("s3://a"))
    api.commit("main", put(["a"], table("s3://a2", id=tid)))
    body = conflict_of(api, "main", unchanged(["a"]), put(["b"], table()), expected=h1)
    assert conflicts(body) == [("VALUE_DIFFERS", ("a",))]
    # not persisted when there is no conflict
    r = api.commit("main", unchanged(["a"]), put(["b"], table()))
    ops = api.log(fetch="ALL")[0]["operations"]
    assert [o["key"] for o in ops] == [key("b")]
    assert r["addedContents"][0]["key"] == key("b")


def test_namespace_rules(api: Api) -> None:
    body = conflict_of(api, "main", put(["db", "t"], table()))
    assert conflicts(body) == [("NAMESPACE_ABSENT", ("db",))]
    assert body["message"] == "Namespace 'db' must exist."

    body = conflict_of(api, "main", put(["a", "b", "c"], table()))
    assert sorted(conflicts(body)) == [
        ("NAMESPACE_ABSENT", ("a",)),
        ("NAMESPACE_ABSENT", ("a", "b")),
    ]
    assert body["message"].startswith(
        "There are multiple conflicts that prevent committing the provided operations: "
    )

    # a namespace created in the same commit is fine
    api.commit("main", put(["db"], namespace("db")), put(["db", "t"], table()))
    api.add("main", ["file"], table("s3://f"))
    body = conflict_of(api, "main", put(["file", "t"], table()))
    assert conflicts(body) == [("NOT_A_NAMESPACE", ("file",))]

    body = conflict_of(api, "main", delete(["db"]))
    assert conflicts(body) == [("NAMESPACE_NOT_EMPTY", ("db",))]
    assert body["message"] == "Namespace 'db' is not empty."
    # deleting the child in the same commit is fine
    api.commit("main", delete(["db", "t"]), delete(["db"]))
    assert api.key_list() == [("file",)]


def test_all_conflicts_reported_together(api: Api) -> None:
    h0 = api.head()
    api.commit("main", put(["x"], table("s3://x")), put(["y"], table("s3://y")))
    body = conflict_of(
        api, "main", put(["x"], table()), put(["y"], table()), delete(["z"]), expected=h0
    )
    assert sorted(conflicts(body)) == [
        ("KEY_DOES_NOT_EXIST", ("z",)),
        ("KEY_EXISTS", ("x",)),
        ("KEY_EXISTS", ("y",)),
    ]


# -- content ids -----------------------------------------------------------------------------


def test_content_id_rules_are_400(api: Api) -> None:
    resp = api.commit_resp("main", put(["a"], table(id=str(uuid.uuid4()))))
    assert_error(resp, 400, "BAD_REQUEST", "New value for key 'a' must not have a content ID")
    _, tid = api.add("main", ["a"], table())
    resp = api.commit_resp("main", put(["a"], table("s3://2")))
    assert_error(resp, 400, "BAD_REQUEST", "New value to update existing key 'a' has no content ID")
    other = str(uuid.uuid4())
    resp = api.commit_resp("main", put(["a"], table("s3://2", id=other)))
    assert_error(
        resp,
        400,
        "BAD_REQUEST",
        f"Key 'a' already exists with content ID {tid}, which is different from the content "
        f"ID {other} in the operation",
    )


def test_duplicate_keys_are_400(api: Api) -> None:
    resp = api.commit_resp("main", put(["a"], table()), put(["a"], table("s3://2")))
    body = assert_error(resp, 400, "BAD_REQUEST")
    assert "Duplicate key in commit operations" in body["message"]
    resp = api.commit_resp("main", delete(["a"]), delete(["a"]))
    assert_error(resp, 400, "BAD_REQUEST")


# -- targets ---------------------------------------------------------------------------------


def test_commit_targets(api: Api) -> None:
    api.create("v1", "TAG")
    resp = api.commit_resp("v1", put(["a"], table()), expected=NO_ANCESTOR)
    assert_error(resp, 400, "BAD_REQUEST")
    body = {"commitMeta": {"message": "m"}, "operations": [put(["a"], table())]}
    resp = api.c.post(f"{V2}/trees/%40{NO_ANCESTOR}/history/commit", json=body)
    assert_error(resp, 400, "BAD_REQUEST")
    resp = api.commit_resp("nope", put(["a"], table()), expected=NO_ANCESTOR)
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = api.commit_resp("main", put(["a"], table()), expected=UNKNOWN_HASH)
    assert_error(
        resp,
        404,
        "REFERENCE_NOT_FOUND",
        f"Could not find commit '{UNKNOWN_HASH}' in reference 'main'.",
    )
    # a commit that exists but is not in main's history
    api.create("dev")
    dev_hash, _ = api.add("dev", ["d"], table())
    resp = api.commit_resp("main", put(["a"], table()), expected=dev_hash)
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")


# -- commit headers --------------------------------------------------------------------------


def test_commit_headers_merge_into_meta(api: Api) -> None:
    headers = {
        "Nessie-Commit-Message": "from header",
        "Nessie-Commit-Authors": "ann, ben",
        "Nessie-Commit-SignedOffBy": "sig",
        "Nessie-Commit-Property-team": "data",
    }
    api.commit("main", put(["a"], table()), message="from body", headers=headers)
    meta = api.log()[0]["commitMeta"]
    assert meta["message"] == "from header"
    assert meta["authors"] == ["ann", "ben"]
    assert meta["allSignedOffBy"] == ["sig"]
    assert meta["allProperties"] == {
        "application-type": ["iceberg"],
        "app-id": ["local-1700000000000"],
        "team": ["data"],
    }


def test_server_sets_meta_fields(api: Api) -> None:
    base = {"message": "m", "authorTime": "2020-01-02T03:04:05Z"}
    api.commit("main", put(["a"], table()), meta=base)
    meta = api.log()[0]["commitMeta"]
    assert meta["committer"] == ""
    assert meta["authors"] == [""]  # [committer] when none given
    assert meta["allSignedOffBy"] == []
    assert meta["authorTime"] == "2020-01-02T03:04:05Z"
    assert meta["commitTime"].endswith("Z") and meta["commitTime"] != meta["authorTime"]
    assert "allProperties" not in meta  # NON_EMPTY
    for field, value in [
        ("committer", "eve"),
        ("commitTime", "2020-01-01T00:00:00Z"),
        ("hash", NO_ANCESTOR),
        ("parentCommitHashes", [NO_ANCESTOR]),
    ]:
        resp = api.commit_resp("main", put(["b"], table()), meta={"message": "m", field: value})
        assert_error(resp, 400, "BAD_REQUEST")


# -- request encodings and limits --------------------------------------------------------------


def _body(name: str) -> dict[str, Any]:
    return {"commitMeta": iceberg_meta(f"add {name}"), "operations": [put([name], table())]}


def test_gzip_request_body(api: Api) -> None:
    data = gzip.compress(json.dumps(_body("gz")).encode())
    resp = api.c.post(
        commit_url("main", api.head()),
        content=data,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    api.ok(resp)
    assert api.key_list() == [("gz",)]
    resp = api.c.post(
        commit_url("main", api.head()),
        content=b"not gzip",
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert_error(resp, 400, "BAD_REQUEST")


def test_chunked_gzip_request_body(api: Api) -> None:
    data = gzip.compress(json.dumps(_body("chunked")).encode())

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(data), 7):
            yield data[i : i + 7]

    resp = api.c.post(
        commit_url("main", api.head()),
        content=chunks(),
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    api.ok(resp)
    assert api.key_list() == [("chunked",)]


@pytest.fixture
def small_client() -> Iterator[TestClient]:
    """A server that accepts request bodies of at most 2 KiB."""
    app = create_app(Settings(store_url="memory://", max_body_bytes=2048))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


def test_huge_body_is_413_nessie_error(small_client: TestClient) -> None:
    api = Api(small_client)
    body = _body("big")
    body["commitMeta"]["message"] = "x" * 4096
    resp = small_client.post(commit_url("main", NO_ANCESTOR), json=body)
    assert_error(resp, 413, None)
    # a small gzip body that inflates past the limit
    bomb = gzip.compress(json.dumps(body).encode() + b" " * 100_000)
    assert len(bomb) < 2048
    resp = small_client.post(
        commit_url("main", NO_ANCESTOR),
        content=bomb,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert_error(resp, 413, None)
    assert api.head() == NO_ANCESTOR
    api.commit("main", put(["ok"], table()))


# -- validation errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"{not json",
        b"",
        b"[]",
        b'"string"',
        b"null",
    ],
    ids=["malformed", "empty", "list", "string", "null"],
)
def test_malformed_bodies_are_400(client: TestClient, raw: bytes) -> None:
    resp = client.post(
        commit_url("main", NO_ANCESTOR), content=raw, headers={"Content-Type": "application/json"}
    )
    assert_error(resp, 400, "BAD_REQUEST")


BAD_BODIES: dict[str, dict[str, Any]] = {
    "missing commitMeta": {"operations": [put(["a"], table())]},
    "null commitMeta": {"commitMeta": None, "operations": [put(["a"], table())]},
    "commitMeta not object": {"commitMeta": "m", "operations": [put(["a"], table())]},
    "commitMeta empty list": {"commitMeta": [], "operations": [put(["a"], table())]},
    "message not string": {"commitMeta": {"message": 5}, "operations": [put(["a"], table())]},
    "authors not list": {"commitMeta": {"authors": 5}, "operations": [put(["a"], table())]},
    "authorTime not an instant": {
        "commitMeta": {"message": "m", "authorTime": "yesterday"},
        "operations": [put(["a"], table())],
    },
    "no operations": {"commitMeta": {"message": "m"}},
    "empty operations": {"commitMeta": {"message": "m"}, "operations": []},
    "operations not list": {"commitMeta": {"message": "m"}, "operations": {"type": "PUT"}},
    "operation not object": {"commitMeta": {"message": "m"}, "operations": ["PUT"]},
    "unknown operation": {
        "commitMeta": {"message": "m"},
        "operations": [{"type": "MOVE", "key": key("a")}],
    },
    "unknown content type": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], {"type": "HUDI_TABLE", "id": None})],
    },
    "content without type": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], {"metadataLocation": "s3://x"})],
    },
    "put without content": {
        "commitMeta": {"message": "m"},
        "operations": [{"type": "PUT", "key": key("a")}],
    },
    "wrong field type": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], {**table(), "snapshotId": "one"})],
    },
    "snapshotId beyond a long": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], {**table(), "snapshotId": 2**63})],
    },
    "missing metadataLocation": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], {"type": "ICEBERG_TABLE", "id": None})],
    },
    "key not object": {
        "commitMeta": {"message": "m"},
        "operations": [{"type": "DELETE", "key": "a"}],
    },
    "key elements not strings": {
        "commitMeta": {"message": "m"},
        "operations": [{"type": "DELETE", "key": {"elements": [1, 2]}}],
    },
    "content id not uuid": {
        "commitMeta": {"message": "m"},
        "operations": [put(["a"], table(id="not-a-uuid"))],
    },
}


@pytest.mark.parametrize("name", list(BAD_BODIES))
def test_invalid_commit_bodies_are_400(client: TestClient, name: str) -> None:
    resp = client.post(commit_url("main", NO_ANCESTOR), json=BAD_BODIES[name])
    assert_error(resp, 400, "BAD_REQUEST")
    assert client.get(f"{V2}/trees/main").json()["reference"]["hash"] == NO_ANCESTOR


BAD_KEYS: dict[str, list[str]] = {
    "empty key": [],
    "empty element": ["a", ""],
    "21 elements": [f"e{i}" for i in range(21)],
    "longer than 500": ["a" * 250, "b" * 251],
    "control char": ["a\u0001b"],
    "DEL char": ["a\u007fb"],
    "newline": ["a\nb"],
}


@pytest.mark.parametrize("name", list(BAD_KEYS))
def test_keys_over_limits_are_400(client: TestClient, name: str) -> None:
    body = {"commitMeta": {"message": "m"}, "operations": [put(BAD_KEYS[name], table())]}
    resp = client.post(commit_url("main", NO_ANCESTOR), json=body)
    assert_error(resp, 400, "BAD_REQUEST")


def test_keys_at_limits_are_accepted(api: Api) -> None:
    twenty = [f"e{i}" for i in range(20)]
    ns_ops = [put(twenty[: i + 1], namespace(*twenty[: i + 1])) for i in range(19)]
    api.commit("main", *ns_ops, put(twenty, table()))
    assert tuple(twenty) in api.key_list()
    long = ["a" * 249, "b" * 250]  # 249 + 1 + 250 = 500
    api.commit("main", put(long[:1], namespace(long[0])), put(long, table()))
    assert tuple(long) in api.key_list()
