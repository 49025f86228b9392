"""API v1 (pynessie's API): exact v1 views, references, commits, log ranges, contents,
diffs, merge/transplant responses and the namespace endpoints.

Contract: nessie-api.md sections 2 (v1 views), 7 (API v1) and 6; clients.md B.2-B.6
(pynessie rejects any unknown field, so every object is compared field by field).
"""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from .helpers import (
    NO_ANCESTOR,
    UNKNOWN_HASH,
    V1,
    Api,
    assert_error,
    check_commit_meta_v1,
    delete,
    enc,
    key,
    namespace,
    put,
    table,
)

MERGE_FIELDS_V1 = {
    "wasApplied",
    "wasSuccessful",
    "resultantTargetHash",
    "commonAncestor",
    "targetBranch",
    "effectiveTargetHash",
    "expectedHash",
    "details",
    "sourceCommits",
    "targetCommits",
}
DETAIL_FIELDS_V1 = {"key", "mergeBehavior", "conflictType", "sourceCommits", "targetCommits"}


def v1_meta(message: str, author: str | None = "pat") -> dict[str, Any]:
    """pynessie's CommitMeta: v1 fields, all null except author and message."""
    return {
        "hash": None,
        "committer": None,
        "author": author,
        "signedOffBy": None,
        "message": message,
        "commitTime": None,
        "authorTime": None,
        "properties": None,
    }


def v1_put(elements: list[str], content: dict[str, Any]) -> dict[str, Any]:
    """pynessie's PUT operation (``expectedContent: null``)."""
    return {"type": "PUT", "key": key(*elements), "content": content, "expectedContent": None}


def v1_commit(
    client: TestClient, branch: str, expected: str, *ops: dict[str, Any], message: str = "m"
) -> Any:
    return client.post(
        f"{V1}/trees/branch/{enc(branch)}/commit",
        params={"expectedHash": expected},
        json={"commitMeta": v1_meta(message), "operations": list(ops)},
    )


def v1_head(client: TestClient, name: str) -> str:
    h = client.get(f"{V1}/trees/tree/{enc(name)}").json()["hash"]
    assert isinstance(h, str)
    return h


def v1_add(client: TestClient, branch: str, elements: list[str], content: dict[str, Any]) -> str:
    resp = v1_commit(client, branch, v1_head(client, branch), v1_put(elements, content))
    assert resp.status_code == 200, resp.text
    h = resp.json()["hash"]
    assert isinstance(h, str)
    return h


def v1_create(client: TestClient, name: str, ref_type: str = "BRANCH", source: str = "main") -> Any:
    """pynessie's create_branch/create_tag: POST /trees/tree?sourceRefName=."""
    body = {"name": name, "hash": v1_head(client, source), "metadata": None, "type": ref_type}
    return client.post(f"{V1}/trees/tree", params={"sourceRefName": source}, json=body)


# -- references --------------------------------------------------------------------------------


def test_default_branch_and_references(client: TestClient) -> None:
    assert client.get(f"{V1}/trees/tree").json() == {
        "type": "BRANCH",
        "name": "main",
        "hash": NO_ANCESTOR,
    }
    assert client.get(f"{V1}/trees/tree/main").json() == client.get(f"{V1}/trees/tree").json()
    body = client.get(f"{V1}/trees").json()
    assert body == {
        "references": [{"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}],
        "hasMore": False,
        "token": None,
    }
    assert_error(client.get(f"{V1}/trees/tree/nope"), 404, "REFERENCE_NOT_FOUND")


def test_create_reference(client: TestClient) -> None:
    h = v1_add(client, "main", ["t"], table())
    resp = v1_create(client, "branch/name_env-dev.1")
    assert resp.status_code == 200
    assert resp.json() == {"type": "BRANCH", "name": "branch/name_env-dev.1", "hash": h}
    assert client.get(f"{V1}/trees/tree/{enc('branch/name_env-dev.1')}").json()["hash"] == h
    resp = v1_create(client, "v1", "TAG")
    assert resp.json() == {"type": "TAG", "name": "v1", "hash": h}

    # null hash with a source name: the source's HEAD
    resp = client.post(
        f"{V1}/trees/tree",
        params={"sourceRefName": "main"},
        json={"name": "nohash", "hash": None, "metadata": None, "type": "BRANCH"},
    )
    assert resp.json() == {"type": "BRANCH", "name": "nohash", "hash": h}
    # DETACHED source with a hash
    resp = client.post(
        f"{V1}/trees/tree",
        params={"sourceRefName": "DETACHED"},
        json={"name": "det", "hash": NO_ANCESTOR, "metadata": None, "type": "BRANCH"},
    )
    assert resp.json() == {"type": "BRANCH", "name": "det", "hash": NO_ANCESTOR}

    assert_error(v1_create(client, "v1", "TAG"), 409, "REFERENCE_ALREADY_EXISTS")
    assert_error(v1_create(client, "main"), 409, "REFERENCE_ALREADY_EXISTS")
    body = {"name": "x", "hash": UNKNOWN_HASH, "metadata": None, "type": "BRANCH"}
    assert_error(client.post(f"{V1}/trees/tree", json=body), 404, "REFERENCE_NOT_FOUND")
    resp = client.post(
        f"{V1}/trees/tree", params={"sourceRefName": "nope"}, json={**body, "hash": None}
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    assert_error(client.post(f"{V1}/trees/tree", json={"hash": h}), 400, "BAD_REQUEST")


def test_references_fetch_all_v1_view(client: TestClient) -> None:
    h = v1_add(client, "main", ["t"], table())
    v1_create(client, "dev")
    v1_add(client, "dev", ["u"], table())
    v1_create(client, "tag", "TAG")
    body = client.get(f"{V1}/trees", params={"fetch": "ALL"}).json()
    refs = {r["name"]: r for r in body["references"]}
    dev = refs["dev"]["metadata"]
    assert dev["numCommitsAhead"] == 1 and dev["numCommitsBehind"] == 0
    assert dev["commonAncestorHash"] == h
    check_commit_meta_v1(dev["commitMetaOfHEAD"])
    tag = refs["tag"]["metadata"]
    assert tag["numCommitsAhead"] is None and tag["commonAncestorHash"] is None
    check_commit_meta_v1(tag["commitMetaOfHEAD"])
    single = client.get(f"{V1}/trees/tree/dev", params={"fetch": "ALL"}).json()
    check_commit_meta_v1(single["metadata"]["commitMetaOfHEAD"])


def test_assign_and_delete_are_204(client: TestClient) -> None:
    h = v1_add(client, "main", ["t"], table())
    v1_create(client, "dev", source="main")
    v1_create(client, "tag", "TAG")
    resp = client.put(
        f"{V1}/trees/branch/dev",
        params={"expectedHash": h},
        json={"name": "main", "hash": NO_ANCESTOR, "metadata": None, "type": "BRANCH"},
    )
    assert resp.status_code == 204 and resp.content == b""
    assert v1_head(client, "dev") == NO_ANCESTOR
    resp = client.put(
        f"{V1}/trees/tag/tag",
        params={"expectedHash": h},
        json={"name": "DETACHED", "hash": NO_ANCESTOR, "metadata": None, "type": "DETACHED"},
    )
    assert resp.status_code == 204
    # stale expected hash
    resp = client.put(
        f"{V1}/trees/branch/dev",
        params={"expectedHash": h},
        json={"name": "main", "hash": h, "metadata": None, "type": "BRANCH"},
    )
    assert_error(resp, 409, "REFERENCE_CONFLICT")

    # pynessie resets main to the empty state
    resp = client.put(
        f"{V1}/trees/branch/main",
        params={"expectedHash": h},
        json={"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR},
    )
    assert resp.status_code == 204
    assert v1_head(client, "main") == NO_ANCESTOR

    resp = client.delete(f"{V1}/trees/branch/dev", params={"expectedHash": NO_ANCESTOR})
    assert resp.status_code == 204 and resp.content == b""
    resp = client.delete(f"{V1}/trees/tag/tag", params={"expectedHash": NO_ANCESTOR})
    assert resp.status_code == 204
    assert [r["name"] for r in client.get(f"{V1}/trees").json()["references"]] == ["main"]
    resp = client.delete(f"{V1}/trees/branch/main", params={"expectedHash": NO_ANCESTOR})
    assert_error(resp, 400, "BAD_REQUEST", "Default branch 'main' cannot be deleted.")
    resp = client.delete(f"{V1}/trees/branch/nope", params={"expectedHash": NO_ANCESTOR})
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")


# -- commits and log -----------------------------------------------------------------------------


def test_commit_returns_bare_branch(client: TestClient) -> None:
    resp = v1_commit(client, "main", NO_ANCESTOR, v1_put(["t"], table()), message="hello")
    assert resp.status_code == 200
    body = resp.json()
    assert set(body) == {"type", "name", "hash"}
    assert body["type"] == "BRANCH" and body["name"] == "main"
    assert body["hash"] == v1_head(client, "main")
    resp = v1_commit(client, "main", NO_ANCESTOR, v1_put(["t"], table()))
    assert_error(resp, 409, "REFERENCE_CONFLICT")
    resp = client.post(
        f"{V1}/trees/branch/main/commit",
        json={"commitMeta": v1_meta("m"), "operations": [v1_put(["u"], table())]},
    )
    assert_error(resp, 400, "BAD_REQUEST")  # expectedHash is required


def test_log_v1_view_and_ranges(client: TestClient) -> None:
    c1 = v1_add(client, "main", ["a"], table("s3://a"))
    c2 = v1_add(client, "main", ["b"], table("s3://b"))
    c3 = v1_add(client, "main", ["c"], table("s3://c"))

    def log(**params: Any) -> list[str]:
        body = client.get(f"{V1}/trees/tree/main/log", params=params).json()
        return [e["commitMeta"]["hash"] for e in body["logEntries"]]

    body = client.get(f"{V1}/trees/tree/main/log").json()
    assert set(body) == {"logEntries", "hasMore", "token"}
    for e in body["logEntries"]:
        assert set(e) == {"commitMeta", "parentCommitHash", "operations"}
        check_commit_meta_v1(e["commitMeta"])
        assert e["commitMeta"]["author"] == "pat"
        assert e["commitMeta"]["committer"] == ""
        assert e["commitMeta"]["signedOffBy"] is None
        assert e["commitMeta"]["properties"] == {}
        assert e["operations"] is None
    assert log() == [c3, c2, c1]
    assert log(endHash=c2) == [c2, c1]
    assert log(startHash=c2) == [c3, c2]
    assert log(startHash=c2, endHash=c1) == [c1]  # startHash never reached
    assert log(startHash=c1, endHash=c3, maxRecords=2) == [c3, c2]
    assert (
        client.get(f"{V1}/trees/tree/DETACHED/log", params={"endHash": c2}).json()["logEntries"][0][
            "commitMeta"
        ]["hash"]
        == c2
    )

    full = client.get(f"{V1}/trees/tree/main/log", params={"fetch": "ALL"}).json()["logEntries"]
    assert full[0]["parentCommitHash"] == c2
    (op,) = full[0]["operations"]
    assert op["type"] == "PUT" and op["key"] == key("c")
    assert op["content"]["metadataLocation"] == "s3://c"

    filtered = client.get(
        f"{V1}/trees/tree/main/log",
        params={"filter": "commit.author=='pat' && commit.committer==''"},
    ).json()
    assert len(filtered["logEntries"]) == 3


def test_log_paging(client: TestClient) -> None:
    hashes = [v1_add(client, "main", [f"k{i}"], table()) for i in range(5)]
    seen: list[str] = []
    params: dict[str, Any] = {"maxRecords": 2}
    while True:
        body = client.get(f"{V1}/trees/tree/main/log", params=params).json()
        seen += [e["commitMeta"]["hash"] for e in body["logEntries"]]
        if not body["hasMore"]:
            break
        params["pageToken"] = body["token"]
    assert seen == hashes[::-1]


def test_v1_properties_roundtrip(api: Api) -> None:
    api.commit("main", put(["a"], table()), headers={"Nessie-Commit-Property-k": "v"})
    meta = api.c.get(f"{V1}/trees/tree/main/log").json()["logEntries"][0]["commitMeta"]
    check_commit_meta_v1(meta)
    assert meta["properties"] == {
        "application-type": "iceberg",
        "app-id": "local-1700000000000",
        "k": "v",
    }
    assert meta["author"] == "alice"


# -- entries and contents ------------------------------------------------------------------------


def test_entries_v1_view(api: Api) -> None:
    c = api.c
    api.commit(
        "main",
        put(["db"], namespace("db")),
        put(["db", "t.x"], table()),
        put(["db", "u"], table()),
        put(["z"], table()),
    )
    h = api.head()
    body = c.get(f"{V1}/trees/tree/main/entries").json()
    assert set(body) == {"entries", "hasMore", "token"}
    for e in body["entries"]:
        assert set(e) == {"name", "type"}
    assert [e["name"]["elements"] for e in body["entries"]] == [
        ["db"],
        ["db", "t.x"],
        ["db", "u"],
        ["z"],
    ]

    api.commit("main", delete(["z"]))
    old = c.get(f"{V1}/trees/tree/main/entries", params={"hashOnRef": h}).json()
    assert len(old["entries"]) == 4
    det = c.get(f"{V1}/trees/tree/DETACHED/entries", params={"hashOnRef": h}).json()
    assert det == old
    filtered = c.get(
        f"{V1}/trees/tree/main/entries", params={"filter": "entry.contentType in ['ICEBERG_TABLE']"}
    ).json()
    assert [e["name"]["elements"] for e in filtered["entries"]] == [["db", "t.x"], ["db", "u"]]
    paged = c.get(f"{V1}/trees/tree/main/entries", params={"maxRecords": 2}).json()
    assert len(paged["entries"]) == 2 and paged["hasMore"] is True
    rest = c.get(
        f"{V1}/trees/tree/main/entries", params={"maxRecords": 2, "pageToken": paged["token"]}
    ).json()
    assert [e["name"]["elements"] for e in rest["entries"]] == [["db", "u"]]
    depth = c.get(f"{V1}/trees/tree/main/entries", params={"namespaceDepth": 1}).json()
    assert [e["name"]["elements"] for e in depth["entries"]] == [["db"]]


def test_contents_v1(api: Api) -> None:
    c = api.c
    api.commit("main", put(["db"], namespace("db")), put(["db", "t.x"], table("s3://tx")))
    h = api.head()
    tid = api.content("main", "db", "t.x")["id"]
    resp = c.get(f"{V1}/contents/db.t%1Dx", params={"ref": "main"})
    assert resp.status_code == 200
    assert resp.json() == {**table("s3://tx"), "id": tid}
    assert c.get(f"{V1}/contents/db.t%1Dx").json()["id"] == tid  # default branch
    api.commit("main", delete(["db", "t.x"]))
    resp = c.get(f"{V1}/contents/db.t%1Dx", params={"ref": "main"})
    assert_error(resp, 404, "CONTENT_NOT_FOUND")
    assert "errorDetails" not in resp.json()
    resp = c.get(f"{V1}/contents/db.t%1Dx", params={"ref": "main", "hashOnRef": h})
    assert resp.json()["id"] == tid
    resp = c.get(f"{V1}/contents/db.t%1Dx", params={"ref": "DETACHED", "hashOnRef": h})
    assert resp.json()["id"] == tid
    assert_error(c.get(f"{V1}/contents/db", params={"ref": "nope"}), 404, "REFERENCE_NOT_FOUND")

    body = c.post(
        f"{V1}/contents",
        params={"ref": "main", "hashOnRef": h},
        json={"requestedKeys": [key("db", "t.x"), key("missing")]},
    ).json()
    assert set(body) == {"contents"}
    (item,) = body["contents"]
    assert set(item) == {"key", "content"}
    assert item["key"] == key("db", "t.x") and item["content"]["id"] == tid


def test_namespace_content_without_properties_for_pynessie(api: Api) -> None:
    api.commit("main", put(["ns"], namespace("ns")))
    body = api.c.get(f"{V1}/contents/ns", params={"ref": "main"}).json()
    assert set(body) == {"type", "id", "elements"}  # no empty "properties"


# -- diffs ---------------------------------------------------------------------------------------


def test_diffs_v1(api: Api) -> None:
    c = api.c
    h0 = api.head()
    api.create("dev")
    h1, _ = api.add("dev", ["t"], table("s3://t"))
    body = c.get(f"{V1}/diffs/main...dev").json()
    assert set(body) == {"diffs", "hasMore", "token"}
    (d,) = body["diffs"]
    assert set(d) == {"key", "from", "to"}
    assert d["key"] == key("t") and d["from"] is None
    assert d["to"]["metadataLocation"] == "s3://t"
    assert c.get(f"{V1}/diffs/main...main").json()["diffs"] == []
    assert c.get(f"{V1}/diffs/{enc('main...dev')}").json() == body
    assert c.get(f"{V1}/diffs/{enc(f'DETACHED*{h0}')}...{enc(f'DETACHED*{h1}')}").json() == body
    assert c.get(f"{V1}/diffs/main*{h0}...dev*{h1}").json() == body
    assert c.get(f"{V1}/diffs/dev...main").json()["diffs"][0]["to"] is None
    assert_error(c.get(f"{V1}/diffs/main...nope"), 404, "REFERENCE_NOT_FOUND")


# -- merge and transplant --------------------------------------------------------------------------


def check_merge_v1(body: dict[str, Any]) -> None:
    assert set(body) == MERGE_FIELDS_V1
    assert body["sourceCommits"] == []
    assert body["targetCommits"] is None
    for d in body["details"]:
        assert set(d) == DETAIL_FIELDS_V1
        assert d["conflictType"] in {"NONE", "UNRESOLVABLE"}
        assert d["sourceCommits"] == [] and d["targetCommits"] == []


def test_merge_v1(client: TestClient) -> None:
    base = v1_add(client, "main", ["t"], table())
    v1_create(client, "dev")
    src = v1_add(client, "dev", ["u"], table())
    resp = client.post(
        f"{V1}/trees/branch/main/merge",
        params={"expectedHash": base},
        json={"fromRefName": "dev", "fromHash": src},
    )
    assert resp.status_code == 200
    body = resp.json()
    check_merge_v1(body)
    assert body["wasApplied"] is True and body["wasSuccessful"] is True
    assert body["effectiveTargetHash"] == base and body["expectedHash"] == base
    assert body["commonAncestor"] == base
    assert body["targetBranch"] == "main"
    assert body["resultantTargetHash"] == v1_head(client, "main")
    assert [(d["key"], d["conflictType"]) for d in body["details"]] == [(key("u"), "NONE")]
    log = client.get(f"{V1}/trees/tree/main/log").json()["logEntries"]
    assert log[0]["commitMeta"]["message"].startswith("Merged dev at ")

    again = client.post(
        f"{V1}/trees/branch/main/merge",
        params={"expectedHash": body["resultantTargetHash"]},
        json={"fromRefName": "dev", "fromHash": src},
    )
    assert again.status_code == 200
    check_merge_v1(again.json())
    assert again.json()["wasApplied"] is False


def test_merge_v1_conflicts(api: Api) -> None:
    c = api.c
    _, tid = api.add("main", ["t"], table("s3://0"))
    api.create("dev")
    src = api.commit("dev", put(["t"], table("s3://dev", id=tid)))["targetBranch"]["hash"]
    head = api.commit("main", put(["t"], table("s3://main", id=tid)))["targetBranch"]["hash"]
    payload = {"fromRefName": "dev", "fromHash": src}
    resp = c.post(f"{V1}/trees/branch/main/merge", params={"expectedHash": head}, json=payload)
    assert "errorDetails" not in assert_error(resp, 409, "REFERENCE_CONFLICT")
    resp = c.post(
        f"{V1}/trees/branch/main/merge",
        params={"expectedHash": head},
        json={**payload, "isReturnConflictAsResult": True},
    )
    body = resp.json()
    check_merge_v1(body)
    assert body["wasSuccessful"] is False
    assert [(d["key"], d["conflictType"]) for d in body["details"]] == [(key("t"), "UNRESOLVABLE")]


def test_transplant_v1(client: TestClient) -> None:
    v1_create(client, "dev")
    d1 = v1_add(client, "dev", ["a"], table())
    resp = client.post(
        f"{V1}/trees/branch/main/transplant",
        params={"expectedHash": NO_ANCESTOR, "message": "picked"},
        json={"fromRefName": "dev", "hashesToTransplant": [d1], "keepIndividualCommits": True},
    )
    assert resp.status_code == 200
    body = resp.json()
    check_merge_v1(body)
    assert body["wasApplied"] is True and body["commonAncestor"] is None
    log = client.get(f"{V1}/trees/tree/main/log").json()["logEntries"]
    assert log[0]["commitMeta"]["message"] == "picked"


def test_transplant_v1_several_commits(client: TestClient) -> None:
    v1_create(client, "dev")
    d1 = v1_add(client, "dev", ["a"], table("s3://a"))
    d2 = v1_add(client, "dev", ["b"], table("s3://b"))
    resp = client.post(
        f"{V1}/trees/branch/main/transplant",
        params={"expectedHash": NO_ANCESTOR},
        json={"fromRefName": "dev", "hashesToTransplant": [d1, d2], "keepIndividualCommits": True},
    )
    assert resp.status_code == 200, resp.text
    check_merge_v1(resp.json())
    log = client.get(f"{V1}/trees/tree/main/log").json()["logEntries"]
    assert [e["commitMeta"]["message"] for e in log] == ["m", "m"]
    assert len(client.get(f"{V1}/trees/tree/main/entries").json()["entries"]) == 2


# -- namespaces ----------------------------------------------------------------------------------


def ns_url(name: str, ref: str = "main") -> str:
    return f"{V1}/namespaces/namespace/{enc(ref)}/{name}"


def test_namespace_create_get_conflicts(client: TestClient) -> None:
    body = {"type": "NAMESPACE", "elements": ["a"], "properties": {"owner": "me"}}
    resp = client.put(ns_url("a"), json=body)
    assert resp.status_code == 200
    ns = resp.json()
    assert ns["type"] == "NAMESPACE" and ns["elements"] == ["a"]
    assert ns["properties"] == {"owner": "me"}
    assert isinstance(ns["id"], str) and ns["id"]
    assert client.get(ns_url("a")).json() == ns

    resp = client.put(ns_url("a"), json=body)
    assert_error(resp, 409, "NAMESPACE_ALREADY_EXISTS")
    resp = client.put(ns_url("a.b%1Dc"), json={"type": "NAMESPACE", "elements": ["a", "b.c"]})
    assert resp.status_code == 200
    assert resp.json()["elements"] == ["a", "b.c"]
    assert "properties" not in resp.json()  # empty properties omitted

    assert_error(client.get(ns_url("nope")), 404, "NAMESPACE_NOT_FOUND")
    assert_error(client.put(ns_url("x", ref="nope"), json={}), 404, "REFERENCE_NOT_FOUND")


def test_namespace_get_of_a_table_is_not_found(api: Api) -> None:
    api.add("main", ["t"], table())
    assert_error(api.c.get(ns_url("t")), 404, "NAMESPACE_NOT_FOUND")
    assert_error(api.c.put(ns_url("t"), json={}), 409, "NAMESPACE_ALREADY_EXISTS")


def test_namespace_delete(api: Api) -> None:
    c = api.c
    c.put(ns_url("a"), json={})
    c.put(ns_url("a.b"), json={})
    api.add("main", ["a", "b", "t"], table())
    assert_error(c.delete(ns_url("a.b")), 409, "NAMESPACE_NOT_EMPTY")
    assert_error(c.delete(ns_url("a")), 409, "NAMESPACE_NOT_EMPTY")
    assert_error(c.delete(ns_url("nope")), 404, "NAMESPACE_NOT_FOUND")
    api.commit("main", delete(["a", "b", "t"]))
    resp = c.delete(ns_url("a.b"))
    assert resp.status_code == 204 and resp.content == b""
    assert_error(c.get(ns_url("a.b")), 404, "NAMESPACE_NOT_FOUND")


def test_namespace_update_properties(client: TestClient) -> None:
    client.put(ns_url("a"), json={"properties": {"k": "v", "drop": "me"}})
    resp = client.post(
        ns_url("a"), json={"propertyUpdates": {"new": "1", "k": "v2"}, "propertyRemovals": ["drop"]}
    )
    assert resp.status_code == 204 and resp.content == b""
    assert client.get(ns_url("a")).json()["properties"] == {"k": "v2", "new": "1"}
    resp = client.post(ns_url("nope"), json={"propertyUpdates": {"x": "1"}})
    assert_error(resp, 404, "NAMESPACE_NOT_FOUND")


def test_namespace_list_with_prefix(api: Api) -> None:
    c = api.c
    for name in ("a", "a.b", "a.b.c", "ab", "x"):
        assert c.put(ns_url(name), json={}).status_code == 200
    api.add("main", ["a", "t"], table())

    def names(**params: Any) -> list[list[str]]:
        body = c.get(f"{V1}/namespaces/main", params=params).json()
        assert set(body) == {"namespaces"}
        return sorted(n["elements"] for n in body["namespaces"])

    assert names() == [["a"], ["a", "b"], ["a", "b", "c"], ["ab"], ["x"]]
    assert names(name="a") == [["a"], ["a", "b"], ["a", "b", "c"]]
    assert names(name="a.b") == [["a", "b"], ["a", "b", "c"]]
    assert names(name="zz") == []
    h = api.head()
    c.put(ns_url("late"), json={})
    assert ["late"] not in names(hashOnRef=h)
    assert_error(c.get(f"{V1}/namespaces/nope"), 404, "REFERENCE_NOT_FOUND")


@pytest.mark.parametrize("path", ["/trees/tree/main/log", "/trees/tree/main/entries"])
def test_bad_max_records_is_400(client: TestClient, path: str) -> None:
    assert_error(client.get(f"{V1}{path}", params={"maxRecords": 0}), 400, "BAD_REQUEST")
