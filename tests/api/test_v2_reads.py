"""API v2 reads and branch operations: entries, contents (key path forms), history, diff,
reference syntax in paths, merge and transplant.

Contract: nessie-api.md sections 2 (ContentKey path forms, response objects,
MergeResponse), 3 (reference syntax), 4 and 4.2 (endpoints, CEL filters), 5 (merge,
transplant, reads) and 6; clients.md A.4, A.6.
"""

from __future__ import annotations

import math
import time
from datetime import datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient

from .helpers import (
    NO_ANCESTOR,
    SPEC2,
    UNKNOWN_HASH,
    V2,
    Api,
    assert_error,
    check_commit_meta_v2,
    delete,
    enc,
    key,
    namespace,
    put,
    table,
    view,
)

ENTRIES_FIELDS = {"entries", "effectiveReference", "hasMore", "token"}
MERGE_FIELDS_V2 = {
    "wasApplied",
    "wasSuccessful",
    "resultantTargetHash",
    "commonAncestor",
    "targetBranch",
    "effectiveTargetHash",
    "expectedHash",
    "details",
}


def elements(entries: list[dict[str, Any]], field: str = "name") -> list[tuple[str, ...]]:
    return [tuple(e[field]["elements"]) for e in entries]


def populate(api: Api) -> dict[tuple[str, ...], str]:
    """A small tree: namespaces a, a.b, x; tables and a view. Key → content id."""
    r = api.commit(
        "main",
        put(["a"], namespace("a")),
        put(["a", "b"], namespace("a", "b")),
        put(["a", "b", "t1"], table("s3://t1")),
        put(["a", "b", "t2"], table("s3://t2")),
        put(["a", "v"], view()),
        put(["ab"], table("s3://ab")),
        put(["x"], namespace("x")),
        put(["x", "y.z"], table("s3://dotted")),
        message="populate",
    )
    return {tuple(a["key"]["elements"]): a["contentId"] for a in r["addedContents"]}


ALL_KEYS = [
    ("a",),
    ("a", "b"),
    ("a", "b", "t1"),
    ("a", "b", "t2"),
    ("a", "v"),
    ("ab",),
    ("x",),
    ("x", "y.z"),
]


# -- entries -------------------------------------------------------------------------------------


def test_entries_all_sorted_with_exact_fields(api: Api) -> None:
    ids = populate(api)
    head = api.head()
    body = api.entries()
    assert set(body) == ENTRIES_FIELDS
    assert body["effectiveReference"] == {"type": "BRANCH", "name": "main", "hash": head}
    assert body["hasMore"] is False and body["token"] is None
    assert elements(body["entries"]) == ALL_KEYS
    for e in body["entries"]:
        assert set(e) == {"name", "type", "contentId"}
        assert e["contentId"] == ids[tuple(e["name"]["elements"])]
    types = {tuple(e["name"]["elements"]): e["type"] for e in body["entries"]}
    assert types[("a", "v")] == "ICEBERG_VIEW"
    assert types[("x",)] == "NAMESPACE"


def test_entries_without_max_records_return_everything(api: Api) -> None:
    api.commit("main", *[put([f"t{i:04d}"], table(f"s3://{i}")) for i in range(600)])
    body = api.entries()
    assert len(body["entries"]) == 600
    assert body["hasMore"] is False


def test_entries_paging(api: Api) -> None:
    populate(api)
    seen: list[tuple[str, ...]] = []
    params: dict[str, Any] = {"max-records": 3}
    pages = 0
    while True:
        body = api.entries(**params)
        assert len(body["entries"]) <= 3
        seen += elements(body["entries"])
        pages += 1
        if not body["hasMore"]:
            assert body["token"] is None
            break
        params["page-token"] = body["token"]
    assert seen == ALL_KEYS
    assert pages == 3
    assert_error(
        api.c.get(f"{V2}/trees/main/entries", params={"page-token": "zz"}), 400, "BAD_REQUEST"
    )


def test_entries_key_ranges(api: Api) -> None:
    populate(api)

    def keys(**params: Any) -> list[tuple[str, ...]]:
        return elements(api.entries(**params)["entries"])

    assert keys(key=["a.b", "x", "nope"]) == [("a", "b"), ("x",)]
    assert keys(**{"prefix-key": "a"}) == [
        ("a",),
        ("a", "b"),
        ("a", "b", "t1"),
        ("a", "b", "t2"),
        ("a", "v"),
    ]
    assert keys(**{"prefix-key": "a.b"}) == [("a", "b"), ("a", "b", "t1"), ("a", "b", "t2")]
    assert keys(**{"min-key": "a.v"}) == [("a", "v"), ("ab",), ("x",), ("x", "y.z")]
    assert keys(**{"max-key": "a.b"}) == [("a",), ("a", "b")]
    assert keys(**{"min-key": "a.b.t2", "max-key": "ab"}) == [("a", "b", "t2"), ("a", "v"), ("ab",)]
    assert keys(key=["a", "x"], **{"min-key": "ab"}) == [("x",)]
    # legacy key form in query parameters: inner dot as U+001D
    assert keys(key=["x.y\u001dz"]) == [("x", "y.z")]
    resp = api.c.get(f"{V2}/trees/main/entries", params={"prefix-key": "a", "min-key": "a"})
    assert_error(resp, 400, "BAD_REQUEST")


def test_entries_with_content(api: Api) -> None:
    populate(api)
    body = api.entries(content="true")
    for e in body["entries"]:
        assert set(e) == {"name", "type", "contentId", "content"}
        assert e["content"]["type"] == e["type"]
        assert e["content"]["id"] == e["contentId"]
    t1 = next(e for e in body["entries"] if e["name"] == key("a", "b", "t1"))
    assert t1["content"]["metadataLocation"] == "s3://t1"
    assert all("content" not in e for e in api.entries(content="false")["entries"])


def test_entries_cel_filters(api: Api) -> None:
    populate(api)

    def keys(expr: str) -> list[tuple[str, ...]]:
        return elements(api.entries(filter=expr)["entries"])

    assert keys("entry.contentType == 'NAMESPACE' && size(entry.keyElements) == 1") == [
        ("a",),
        ("x",),
    ]
    assert keys(
        "entry.contentType == 'NAMESPACE' && size(entry.keyElements) == 2 "
        "&& entry.encodedKey.startsWith('a.')"
    ) == [("a", "b")]
    assert keys("entry.encodedKey.startsWith('a.b.')") == [("a", "b", "t1"), ("a", "b", "t2")]
    assert keys("entry.encodedKey == 'a.b'") == [("a", "b")]
    assert keys("entry.encodedKey == 'x.y\u001dz'") == [("x", "y.z")]
    assert keys("entry.contentType in ['ICEBERG_VIEW']") == [("a", "v")]
    assert keys("entry.name.startsWith('t')") == [("a", "b", "t1"), ("a", "b", "t2")]
    assert keys("entry.namespace == 'a.b'") == [("a", "b", "t1"), ("a", "b", "t2")]
    resp = api.c.get(f"{V2}/trees/main/entries", params={"filter": "entry.name ==="})
    assert_error(resp, 400, "BAD_REQUEST")


def test_entries_of_unknown_ref_is_404(client: TestClient) -> None:
    assert_error(client.get(f"{V2}/trees/nope/entries"), 404, "REFERENCE_NOT_FOUND")
    assert_error(client.get(f"{V2}/trees/%40{UNKNOWN_HASH}/entries"), 404, "REFERENCE_NOT_FOUND")


# -- contents ------------------------------------------------------------------------------------


def test_get_content_response(api: Api) -> None:
    ids = populate(api)
    head = api.head()
    resp = api.c.get(f"{V2}/trees/main/contents/a.b.t1")
    body = api.ok(resp)
    assert set(body) == {"content", "effectiveReference"}
    assert body["content"] == {**table("s3://t1"), "id": ids[("a", "b", "t1")]}
    assert body["effectiveReference"] == {"type": "BRANCH", "name": "main", "hash": head}


@pytest.mark.parametrize(
    "path",
    [
        "x.y%1Dz",  # legacy: inner dot as U+001D
        "x.y%00z",  # legacy: U+0000 also accepted
        ".x.y*.z",  # escaped form
        "%2Ex%2Ey%2A%2Ez",  # escaped form, fully percent-encoded
    ],
)
def test_content_key_path_forms(api: Api, path: str) -> None:
    populate(api)
    body = api.ok(api.c.get(f"{V2}/trees/main/contents/{path}"))
    assert body["content"]["metadataLocation"] == "s3://dotted"


def test_escaped_key_forms_with_slash_percent_and_star(api: Api) -> None:
    odd = ["we/ird", "p%c", "st*r", "back\\slash"]
    ops = [put([e], table(f"s3://{i}")) for i, e in enumerate(odd)]
    api.commit("main", *ops)
    escaped = {
        "we/ird": ".we*{ird",
        "p%c": ".p*[c",
        "st*r": ".st**r",
        "back\\slash": ".back*}slash",
    }
    for i, e in enumerate(odd):
        body = api.ok(api.c.get(f"{V2}/trees/main/contents/{enc(escaped[e])}"))
        assert body["content"]["metadataLocation"] == f"s3://{i}", e
    # '/' and '%' inside a legacy key, percent-encoded in the path
    body = api.ok(api.c.get(f"{V2}/trees/main/contents/{enc('we/ird')}"))
    assert body["content"]["metadataLocation"] == "s3://0"
    assert_error(api.c.get(f"{V2}/trees/main/contents/.a*qb"), 400, "BAD_REQUEST")


def test_content_not_found(api: Api) -> None:
    populate(api)
    resp = api.c.get(f"{V2}/trees/main/contents/a.b.nope")
    assert_error(
        resp,
        404,
        "CONTENT_NOT_FOUND",
        "Could not find content for key 'a.b.nope' in reference 'main'.",
    )
    resp = api.c.get(f"{V2}/trees/main/contents/a.b.nope", headers=SPEC2)
    body = assert_error(resp, 404, "CONTENT_NOT_FOUND", details=True)
    assert body["errorDetails"] == {"type": "CONTENT_KEY", "contentKey": key("a", "b", "nope")}
    assert_error(api.c.get(f"{V2}/trees/nope/contents/a"), 404, "REFERENCE_NOT_FOUND")


def test_get_multiple_contents_by_query(api: Api) -> None:
    ids = populate(api)
    resp = api.c.get(f"{V2}/trees/main/contents", params={"key": ["a.b.t2", "nope", "x.y\u001dz"]})
    body = api.ok(resp)
    assert set(body) == {"contents", "effectiveReference"}
    got = {tuple(c["key"]["elements"]): c for c in body["contents"]}
    assert set(got) == {("a", "b", "t2"), ("x", "y.z")}
    for k, c in got.items():
        assert set(c) == {"key", "content"}
        assert c["content"]["id"] == ids[k]


def test_post_contents_leaves_missing_keys_out(api: Api) -> None:
    head = api.head()
    resp = api.c.post(f"{V2}/trees/main/contents", json={"requestedKeys": [key("db")]})
    assert resp.status_code == 200
    assert resp.json() == {
        "contents": [],
        "effectiveReference": {"type": "BRANCH", "name": "main", "hash": head},
    }
    populate(api)
    resp = api.c.post(
        f"{V2}/trees/{enc('main@' + api.head())}/contents",
        json={"requestedKeys": [key("a"), key("missing"), key("a", "v")]},
    )
    body = api.ok(resp)
    assert sorted(elements(body["contents"], "key")) == [("a",), ("a", "v")]
    assert_error(
        api.c.post(f"{V2}/trees/nope/contents", json={"requestedKeys": [key("a")]}),
        404,
        "REFERENCE_NOT_FOUND",
    )


def test_documentation_is_returned_with_doc(api: Api) -> None:
    doc = {"mimeType": "text/markdown", "text": "# t"}
    api.commit("main", put(["t"], table(), documentation=doc))
    plain = api.ok(api.c.get(f"{V2}/trees/main/contents/t"))
    assert "documentation" not in plain
    body = api.ok(api.c.get(f"{V2}/trees/main/contents/t", params={"with-doc": "true"}))
    assert body["documentation"] == doc
    body = api.ok(
        api.c.post(
            f"{V2}/trees/main/contents",
            params={"with-doc": "true"},
            json={"requestedKeys": [key("t")]},
        )
    )
    assert body["contents"][0]["documentation"] == doc


# -- history -------------------------------------------------------------------------------------


def linear(api: Api, n: int, branch: str = "main") -> list[str]:
    """``n`` commits adding ``c0``..; their hashes, oldest first."""
    return [api.add(branch, [f"c{i}"], table(f"s3://{i}"))[0] for i in range(n)]


def test_history_newest_first_with_exact_fields(api: Api) -> None:
    hashes = linear(api, 3)
    resp = api.c.get(f"{V2}/trees/main/history")
    body = api.ok(resp)
    assert set(body) == {"logEntries", "hasMore", "token"}
    assert body["hasMore"] is False and body["token"] is None
    entries = body["logEntries"]
    assert [e["commitMeta"]["hash"] for e in entries] == hashes[::-1]
    parents = [NO_ANCESTOR, *hashes[:-1]]
    for e, parent in zip(entries, parents[::-1], strict=True):
        assert set(e) == {"commitMeta", "parentCommitHash", "operations"}
        assert e["operations"] is None
        assert e["parentCommitHash"] == parent
        check_commit_meta_v2(e["commitMeta"])
        assert e["commitMeta"]["parentCommitHashes"] == [parent]


def test_history_of_empty_branch(client: TestClient) -> None:
    body = client.get(f"{V2}/trees/main/history").json()
    assert body == {"logEntries": [], "hasMore": False, "token": None}


def test_history_fetch_all_operations(api: Api) -> None:
    _, tid = api.add("main", ["a"], table("s3://a"))
    api.commit("main", delete(["a"]), put(["b"], table("s3://a", id=tid)), message="rename")
    ops = api.log(fetch="ALL")[0]["operations"]
    by_type = {o["type"]: o for o in ops}
    assert set(by_type) == {"PUT", "DELETE"}
    assert by_type["DELETE"] == {"type": "DELETE", "key": key("a")}
    p = by_type["PUT"]
    assert (
        {"type", "key", "content"}
        <= set(p)
        <= {"type", "key", "content", "metadata", "documentation"}
    )
    assert p["key"] == key("b")
    assert p["content"] == {**table("s3://a"), "id": tid}
    assert api.log(fetch="MINIMAL")[0]["operations"] is None


def test_history_limit_hash_and_paging(api: Api) -> None:
    hashes = linear(api, 6)
    got = [e["commitMeta"]["hash"] for e in api.log(**{"limit-hash": hashes[2]})]
    assert got == hashes[:1:-1]  # newest down to hashes[2] inclusive

    seen: list[str] = []
    params: dict[str, Any] = {"max-records": 4}
    while True:
        body = api.ok(api.c.get(f"{V2}/trees/main/history", params=params))
        assert len(body["logEntries"]) <= 4
        seen += [e["commitMeta"]["hash"] for e in body["logEntries"]]
        if not body["hasMore"]:
            break
        params["page-token"] = body["token"]
    assert seen == hashes[::-1]


def test_history_page_is_capped_at_250(api: Api) -> None:
    h = api.head()
    for i in range(255):
        h = api.commit("main", put([f"k{i}"], table(f"s3://{i}")), expected=h)["targetBranch"][
            "hash"
        ]
    body = api.ok(api.c.get(f"{V2}/trees/main/history"))
    assert len(body["logEntries"]) == 250
    assert body["hasMore"] is True
    rest = api.ok(api.c.get(f"{V2}/trees/main/history", params={"page-token": body["token"]}))
    assert len(rest["logEntries"]) == 5 and rest["hasMore"] is False
    big = api.ok(api.c.get(f"{V2}/trees/main/history", params={"max-records": 1000}))
    assert len(big["logEntries"]) == 250


def test_history_cel_filters(api: Api) -> None:
    api.commit(
        "main", put(["a"], table()), message="first", headers={"Nessie-Commit-Authors": "ann"}
    )
    api.commit(
        "main", put(["b"], table()), message="second", headers={"Nessie-Commit-Authors": "ben"}
    )

    def messages(expr: str) -> list[str]:
        return [e["commitMeta"]["message"] for e in api.log(filter=expr)]

    assert messages("commit.author=='ann'") == ["first"]
    assert messages("commit.author=='ann' || commit.author=='ben'") == ["second", "first"]
    assert messages("'ben' in commit.authors") == ["second"]
    assert messages("commit.committer == ''") == ["second", "first"]
    assert messages("timestamp(commit.commitTime) > timestamp('2001-01-01T00:00:00+00:00')") == [
        "second",
        "first",
    ]
    assert messages("timestamp(commit.commitTime) < timestamp('2001-01-01T00:00:00+00:00')") == []
    assert messages("commit.message.startsWith('sec')") == ["second"]
    assert messages("operations.exists(op, op.key == 'a')") == ["first"]
    resp = api.c.get(f"{V2}/trees/main/history", params={"filter": "commit.author =="})
    assert_error(resp, 400, "BAD_REQUEST")


# -- diff ----------------------------------------------------------------------------------------


def test_diff(api: Api) -> None:
    ids = populate(api)
    api.create("dev")
    tid = ids[("ab",)]
    api.commit(
        "dev",
        put(["ab"], table("s3://ab2", id=tid)),
        delete(["x", "y.z"]),
        put(["new"], table("s3://new")),
    )
    main, dev = api.head(), api.head("dev")
    resp = api.c.get(f"{V2}/trees/main/diff/dev")
    body = api.ok(resp)
    assert set(body) == {
        "diffs",
        "effectiveFromReference",
        "effectiveToReference",
        "hasMore",
        "token",
    }
    assert body["effectiveFromReference"] == {"type": "BRANCH", "name": "main", "hash": main}
    assert body["effectiveToReference"] == {"type": "BRANCH", "name": "dev", "hash": dev}
    diffs = {tuple(d["key"]["elements"]): d for d in body["diffs"]}
    assert list(diffs) == [("ab",), ("new",), ("x", "y.z")]
    for d in body["diffs"]:
        assert set(d) == {"key", "from", "to"}
    assert diffs[("ab",)]["from"]["metadataLocation"] == "s3://ab"
    assert diffs[("ab",)]["to"]["metadataLocation"] == "s3://ab2"
    assert diffs[("new",)]["from"] is None
    assert diffs[("new",)]["to"]["metadataLocation"] == "s3://new"
    assert diffs[("x", "y.z")]["to"] is None

    # reverse direction, and same ref
    back = api.ok(api.c.get(f"{V2}/trees/dev/diff/main"))
    assert back["diffs"][1] == {"key": key("new"), "from": diffs[("new",)]["to"], "to": None}
    same = api.ok(api.c.get(f"{V2}/trees/main/diff/main"))
    assert same["diffs"] == [] and same["hasMore"] is False


def test_diff_paging_keys_and_detached_sides(api: Api) -> None:
    h0 = api.head()
    populate(api)
    h1 = api.head()
    seen: list[tuple[str, ...]] = []
    params: dict[str, Any] = {"max-records": 3}
    while True:
        body = api.ok(api.c.get(f"{V2}/trees/%40{h0}/diff/main", params=params))
        assert body["effectiveFromReference"] == {"type": "DETACHED", "hash": h0}
        seen += elements(body["diffs"], "key")
        if not body["hasMore"]:
            break
        params["page-token"] = body["token"]
    assert seen == ALL_KEYS
    body = api.ok(
        api.c.get(
            f"{V2}/trees/{enc('main@' + h0)}/diff/{enc('@' + h1)}", params={"prefix-key": "x"}
        )
    )
    assert elements(body["diffs"], "key") == [("x",), ("x", "y.z")]
    assert body["effectiveFromReference"] == {"type": "BRANCH", "name": "main", "hash": h0}
    assert body["effectiveToReference"] == {"type": "DETACHED", "hash": h1}
    body = api.ok(
        api.c.get(f"{V2}/trees/{enc('main~1')}/diff/main", params={"filter": "key.name == 't1'"})
    )
    assert elements(body["diffs"], "key") == [("a", "b", "t1")]
    assert_error(api.c.get(f"{V2}/trees/main/diff/nope"), 404, "REFERENCE_NOT_FOUND")


# -- reference syntax in paths -------------------------------------------------------------------


def test_relative_and_detached_refs(api: Api) -> None:
    h1, _ = api.add("main", ["a"], table("s3://a"))
    time.sleep(0.005)
    h2, _ = api.add("main", ["b"], table("s3://b"))

    def eff(ref: str) -> tuple[dict[str, Any], list[tuple[str, ...]]]:
        body = api.ok(api.c.get(f"{V2}/trees/{ref}/entries"))
        return body["effectiveReference"], elements(body["entries"])

    assert eff("main~1") == ({"type": "BRANCH", "name": "main", "hash": h1}, [("a",)])
    assert eff("main%7E2")[1] == []
    assert eff(f"main%40{h1}") == ({"type": "BRANCH", "name": "main", "hash": h1}, [("a",)])
    assert eff(f"main@{h1}")[0]["hash"] == h1
    assert eff(f"%40{h1}") == ({"type": "DETACHED", "hash": h1}, [("a",)])
    assert eff(f"@{h2}") == ({"type": "DETACHED", "hash": h2}, [("a",), ("b",)])
    assert eff(f"%40{h2}~1")[0] == {"type": "DETACHED", "hash": h1}
    assert eff("-") == ({"type": "BRANCH", "name": "main", "hash": h2}, [("a",), ("b",)])
    assert eff("-~1")[0]["hash"] == h1
    assert eff(f"main%40{h2}%5E1")[0]["hash"] == h1
    # a named read at a hash only checks that the commit exists
    api.create("other", hash_=NO_ANCESTOR)
    assert eff(f"other%40{h2}")[0] == {"type": "BRANCH", "name": "other", "hash": h2}


def test_time_travel_refs(api: Api) -> None:
    h1, _ = api.add("main", ["a"], table("s3://a"))
    time.sleep(0.01)
    h2, _ = api.add("main", ["b"], table("s3://b"))
    t1 = api.log()[1]["commitMeta"]["commitTime"]
    assert api.log()[1]["commitMeta"]["hash"] == h1

    def at(ref: str) -> str:
        h = api.ok(api.c.get(f"{V2}/trees/{ref}/entries"))["effectiveReference"]["hash"]
        assert isinstance(h, str)
        return h

    assert at(f"main*{t1}") == h1
    assert at(f"main%2A{enc(t1)}") == h1
    assert at("main*2999-01-01T00:00:00Z") == h2
    ms = math.ceil(datetime.fromisoformat(t1.replace("Z", "+00:00")).timestamp() * 1000)
    t2 = api.log()[0]["commitMeta"]["commitTime"]
    if datetime.fromisoformat(t2.replace("Z", "+00:00")).timestamp() * 1000 > ms:
        assert at(f"main*{ms}") == h1
    assert_error(
        api.c.get(f"{V2}/trees/main*2000-01-01T00:00:00Z/entries"), 404, "REFERENCE_NOT_FOUND"
    )


def test_merge_parent_ref(api: Api) -> None:
    h1, _ = api.add("main", ["a"], table())
    api.create("dev")
    d1, _ = api.add("dev", ["d"], table())
    m2, _ = api.add("main", ["m"], table())
    r = api.ok(
        api.c.post(
            f"{V2}/trees/main%40{m2}/history/merge",
            json={"fromRefName": "dev", "fromHash": d1},
        )
    )
    merge = r["resultantTargetHash"]
    assert api.log()[0]["commitMeta"]["parentCommitHashes"] == [m2, d1]

    def at(ref: str) -> str:
        h = api.ok(api.c.get(f"{V2}/trees/{ref}/entries"))["effectiveReference"]["hash"]
        assert isinstance(h, str)
        return h

    assert at(f"%40{merge}%5E2") == d1
    assert at(f"%40{merge}%5E1") == m2
    assert at(f"%40{merge}~1") == m2
    assert at(f"%40{merge}%5E2~1") == h1
    assert_error(api.c.get(f"{V2}/trees/%40{merge}%5E3/entries"), 404, "REFERENCE_NOT_FOUND")


@pytest.mark.parametrize(
    "ref",
    ["main~", "main~x", "main%40xyz", "main%40123", "a..b", "1abc~1", "main*yesterday"],
)
def test_malformed_refs_are_400(client: TestClient, ref: str) -> None:
    assert_error(client.get(f"{V2}/trees/{ref}/entries"), 400, "BAD_REQUEST")


def test_ref_past_the_root_is_404(api: Api) -> None:
    api.add("main", ["a"], table())
    assert_error(api.c.get(f"{V2}/trees/{enc('main~5')}/entries"), 404, "REFERENCE_NOT_FOUND")


# -- merge ---------------------------------------------------------------------------------------


def merge_url(branch: str, h: str) -> str:
    return f"{V2}/trees/{enc(branch + '@' + h)}/history/merge"


def transplant_url(branch: str, h: str) -> str:
    return f"{V2}/trees/{enc(branch + '@' + h)}/history/transplant"


def test_merge_response_and_commit(api: Api) -> None:
    api.commit("main", put(["db"], namespace("db")))
    base = api.head()
    api.create("dev")
    api.commit("dev", put(["db", "t"], table("s3://t")))
    src, _ = api.add("dev", ["u"], table("s3://u"))
    m1, _ = api.add("main", ["m"], table("s3://m"))

    resp = api.c.post(merge_url("main", m1), json={"fromRefName": "dev", "fromHash": src})
    body = api.ok(resp)
    assert set(body) == MERGE_FIELDS_V2
    assert body["wasApplied"] is True and body["wasSuccessful"] is True
    assert body["commonAncestor"] == base
    assert body["targetBranch"] == "main"
    assert body["effectiveTargetHash"] == m1
    assert body["expectedHash"] == m1
    merged = body["resultantTargetHash"]
    assert merged == api.head()
    assert sorted(elements(body["details"], "key")) == [("db", "t"), ("u",)]
    for d in body["details"]:
        assert set(d) == {"key", "mergeBehavior"}
        assert d["mergeBehavior"] == "NORMAL"

    meta = api.log()[0]["commitMeta"]
    assert meta["parentCommitHashes"] == [m1, src]
    assert meta["message"] == f"Merged dev at {src} into main at {m1}"
    assert api.key_list() == [("db",), ("db", "t"), ("m",), ("u",)]
    assert len(api.log()) == 3  # one squashed commit

    # re-merging the same source is not an error
    again = api.ok(
        api.c.post(merge_url("main", merged), json={"fromRefName": "dev", "fromHash": src})
    )
    assert again["wasApplied"] is False and again["wasSuccessful"] is True
    assert again["resultantTargetHash"] == merged
    assert again["commonAncestor"] == src
    assert api.head() == merged


def test_merge_message_from_commit_meta(api: Api) -> None:
    api.create("dev")
    src, _ = api.add("dev", ["a"], table())
    body = {
        "fromRefName": "dev",
        "fromHash": src,
        "message": "deprecated message",
        "commitMeta": {"message": "meta message", "authors": ["ann"]},
    }
    api.ok(api.c.post(merge_url("main", api.head()), json=body))
    meta = api.log()[0]["commitMeta"]
    assert meta["message"] == "meta message"
    assert meta["authors"] == ["ann"]
    src2, _ = api.add("dev", ["b"], table())
    body = {"fromRefName": "dev", "fromHash": src2, "message": "plain message"}
    api.ok(api.c.post(merge_url("main", api.head()), json=body))
    assert api.log()[0]["commitMeta"]["message"] == "plain message"


def _conflicting_branches(api: Api) -> tuple[str, str]:
    """main and dev both change key ``t`` (and dev adds ``u``); (main head, dev head)."""
    _, tid = api.add("main", ["t"], table("s3://0"))
    api.create("dev")
    api.commit("dev", put(["t"], table("s3://dev", id=tid)), put(["u"], table("s3://u")))
    api.commit("main", put(["t"], table("s3://main", id=tid)))
    return api.head(), api.head("dev")


def test_merge_conflict_409(api: Api) -> None:
    main, dev = _conflicting_branches(api)
    resp = api.c.post(
        merge_url("main", main), json={"fromRefName": "dev", "fromHash": dev}, headers=SPEC2
    )
    body = assert_error(
        resp,
        409,
        "REFERENCE_CONFLICT",
        "The following keys have been changed in conflict: 't'",
        details=True,
    )
    (c,) = body["errorDetails"]["conflicts"]
    assert c["key"] == key("t")
    assert c["conflictType"] in {"VALUE_DIFFERS", "KEY_CONFLICT"}
    assert api.head() == main

    # dry run conflicts too
    resp = api.c.post(
        merge_url("main", main), json={"fromRefName": "dev", "fromHash": dev, "isDryRun": True}
    )
    assert_error(resp, 409, "REFERENCE_CONFLICT")


def test_merge_conflict_as_result(api: Api) -> None:
    main, dev = _conflicting_branches(api)
    body = api.ok(
        api.c.post(
            merge_url("main", main),
            json={"fromRefName": "dev", "fromHash": dev, "isReturnConflictAsResult": True},
        )
    )
    assert set(body) == MERGE_FIELDS_V2
    assert body["wasSuccessful"] is False and body["wasApplied"] is False
    assert body["resultantTargetHash"] is None
    details = {tuple(d["key"]["elements"]): d for d in body["details"]}
    assert set(details) == {("t",), ("u",)}
    assert set(details[("t",)]) == {"key", "mergeBehavior", "conflict"}
    conflict = details[("t",)]["conflict"]
    assert set(conflict) == {"conflictType", "key", "message"}
    assert conflict["key"] == key("t")
    assert "conflict" not in details[("u",)]
    assert api.head() == main


def test_merge_dry_run(api: Api) -> None:
    api.create("dev")
    src, _ = api.add("dev", ["a"], table())
    head = api.head()
    for flag in ("isDryRun", "dryRun"):
        body = api.ok(
            api.c.post(
                merge_url("main", head), json={"fromRefName": "dev", "fromHash": src, flag: True}
            )
        )
        assert body["wasApplied"] is False and body["wasSuccessful"] is True
        assert body["resultantTargetHash"] is None
        assert elements(body["details"], "key") == [("a",)]
        assert api.head() == head


def test_merge_key_modes(api: Api) -> None:
    main, dev = _conflicting_branches(api)
    body = {
        "fromRefName": "dev",
        "fromHash": dev,
        "keyMergeModes": [{"key": key("t"), "mergeBehavior": "FORCE"}],
    }
    r = api.ok(api.c.post(merge_url("main", main), json=body))
    assert r["wasApplied"] is True
    modes = {tuple(d["key"]["elements"]): d["mergeBehavior"] for d in r["details"]}
    assert modes == {("t",): "FORCE", ("u",): "NORMAL"}
    assert api.content("main", "t")["metadataLocation"] == "s3://dev"

    # DROP skips a key even without conflict
    api.add("dev", ["w"], table("s3://w"))
    api.add("dev", ["z"], table("s3://z"))
    body = {
        "fromRefName": "dev",
        "fromHash": api.head("dev"),
        "keyMergeModes": [{"key": key("w"), "mergeBehavior": "DROP"}],
    }
    api.ok(api.c.post(merge_url("main", api.head()), json=body))
    assert ("w",) not in api.key_list() and ("z",) in api.key_list()

    # a mode for a key outside the merge is 400
    api.add("dev", ["q"], table())
    body = {
        "fromRefName": "dev",
        "fromHash": api.head("dev"),
        "keyMergeModes": [{"key": key("elsewhere"), "mergeBehavior": "FORCE"}],
    }
    assert_error(api.c.post(merge_url("main", api.head()), json=body), 400, "BAD_REQUEST")
    body = {"fromRefName": "dev", "fromHash": api.head("dev"), "defaultKeyMergeMode": "SOMETIMES"}
    assert_error(api.c.post(merge_url("main", api.head()), json=body), 400, "BAD_REQUEST")


def test_merge_request_errors(api: Api) -> None:
    api.create("dev")
    src, _ = api.add("dev", ["a"], table())
    head = api.head()
    assert_error(
        api.c.post(merge_url("main", head), json={"fromRefName": "dev"}), 400, "BAD_REQUEST"
    )
    assert_error(api.c.post(merge_url("main", head), json={"fromHash": src}), 400, "BAD_REQUEST")
    resp = api.c.post(
        merge_url("main", head), json={"fromRefName": "dev", "fromHash": UNKNOWN_HASH}
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = api.c.post(merge_url("main", head), json={"fromRefName": "nope", "fromHash": src})
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = api.c.post(
        f"{V2}/trees/main/history/merge", json={"fromRefName": "dev", "fromHash": src}
    )
    assert_error(resp, 400, "BAD_REQUEST")
    api.create("v1", "TAG")
    resp = api.c.post(merge_url("v1", head), json={"fromRefName": "dev", "fromHash": src})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = api.c.post(
        merge_url("main", head), json={"fromRefName": "dev", "fromHash": src, "isDryRun": "yes"}
    )
    assert_error(resp, 400, "BAD_REQUEST")
    # DETACHED source
    body = api.ok(
        api.c.post(merge_url("main", head), json={"fromRefName": "DETACHED", "fromHash": src})
    )
    assert body["wasApplied"] is True
    assert api.log()[0]["commitMeta"]["message"].startswith("Merged DETACHED at ")


@pytest.mark.parametrize(
    "extra",
    [
        {"fromRefName": 5},
        {"fromRefName": ["dev"]},
        {"defaultKeyMergeMode": 5},
        {"keyMergeModes": [{"key": {"elements": ["a"]}, "mergeBehavior": 5}]},
        {"keyMergeModes": [{"key": {"elements": ["a"]}, "mergeBehavior": ["FORCE"]}]},
    ],
    ids=["fromRefName int", "fromRefName list", "default mode int", "mode int", "mode list"],
)
def test_merge_wrong_types_are_400(api: Api, extra: dict[str, Any]) -> None:
    api.create("dev")
    src, _ = api.add("dev", ["a"], table())
    body = {"fromRefName": "dev", "fromHash": src, **extra}
    assert_error(api.c.post(merge_url("main", api.head()), json=body), 400, "BAD_REQUEST")
    assert api.key_list() == []


def test_merge_namespace_added_on_both_sides(api: Api) -> None:
    api.create("dev")
    api.commit("dev", put(["db"], namespace("db")), put(["db", "t"], table()))
    api.commit("main", put(["db"], namespace("db")))
    body = api.ok(
        api.c.post(
            merge_url("main", api.head()), json={"fromRefName": "dev", "fromHash": api.head("dev")}
        )
    )
    assert body["wasSuccessful"] is True
    assert ("db", "t") in api.key_list()


# -- transplant ----------------------------------------------------------------------------------


def test_transplant(api: Api) -> None:
    api.create("dev")
    d1, _ = api.add("dev", ["a"], table("s3://a"))
    d2, _ = api.add("dev", ["b"], table("s3://b"))
    m1, _ = api.add("main", ["m"], table("s3://m"))
    body = api.ok(
        api.c.post(
            transplant_url("main", m1),
            json={"fromRefName": "dev", "hashesToTransplant": [d1, d2]},
        )
    )
    assert set(body) == MERGE_FIELDS_V2
    assert body["wasApplied"] is True and body["wasSuccessful"] is True
    assert body["commonAncestor"] is None
    assert body["targetBranch"] == "main"
    assert body["effectiveTargetHash"] == m1 and body["expectedHash"] == m1
    assert body["resultantTargetHash"] == api.head()
    log = api.log()
    assert [e["commitMeta"]["message"] for e in log[:2]] == ["add b", "add a"]
    assert log[0]["commitMeta"]["parentCommitHashes"] == [log[1]["commitMeta"]["hash"]]
    assert log[1]["commitMeta"]["parentCommitHashes"] == [m1]
    assert api.key_list() == [("a",), ("b",), ("m",)]


def test_transplant_single_with_message_and_errors(api: Api) -> None:
    api.create("dev")
    d1, _ = api.add("dev", ["a"], table("s3://a"))
    api.add("dev", ["b"], table("s3://b"))
    d3, _ = api.add("dev", ["c"], table("s3://c"))
    head = api.head()
    resp = api.c.post(
        transplant_url("main", head),
        json={"fromRefName": "dev", "hashesToTransplant": [d1, d3]},
    )
    assert_error(resp, 400, "BAD_REQUEST", "Sequence of hashes is not contiguous.")
    resp = api.c.post(
        transplant_url("main", head), json={"fromRefName": "dev", "hashesToTransplant": []}
    )
    assert_error(resp, 400, "BAD_REQUEST")
    resp = api.c.post(transplant_url("main", head), json={"fromRefName": "dev"})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = api.c.post(
        transplant_url("main", head),
        json={"fromRefName": "dev", "hashesToTransplant": [UNKNOWN_HASH]},
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")

    body = api.ok(
        api.c.post(
            transplant_url("main", head),
            json={"fromRefName": "dev", "hashesToTransplant": [d3], "message": "picked"},
        )
    )
    assert body["wasApplied"] is True
    assert api.log()[0]["commitMeta"]["message"] == "picked"
    assert api.key_list() == [("c",)]


def test_transplant_conflicts(api: Api) -> None:
    main, _ = _conflicting_branches(api)
    dev_commit = api.log("dev")[0]["commitMeta"]["hash"]
    payload = {"fromRefName": "dev", "hashesToTransplant": [dev_commit]}
    resp = api.c.post(transplant_url("main", main), json=payload, headers=SPEC2)
    body = assert_error(resp, 409, "REFERENCE_CONFLICT", details=True)
    assert [c["key"] for c in body["errorDetails"]["conflicts"]] == [key("t")]
    body = api.ok(
        api.c.post(transplant_url("main", main), json={**payload, "isReturnConflictAsResult": True})
    )
    assert body["wasSuccessful"] is False and body["resultantTargetHash"] is None
    assert any("conflict" in d for d in body["details"])
    dry = api.ok(
        api.c.post(
            transplant_url("main", main),
            json={
                **payload,
                "isDryRun": True,
                "keyMergeModes": [{"key": key("t"), "mergeBehavior": "FORCE"}],
            },
        )
    )
    assert dry["wasSuccessful"] is True and dry["wasApplied"] is False
    assert dry["resultantTargetHash"] is None
    assert api.head() == main
