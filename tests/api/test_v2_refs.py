"""API v2: configuration, repository configs and references (list, create, get, assign,
delete, recent changes), ETags and ``If-Match`` expected hashes.

Contract: nessie-api.md sections 1 (paging, headers), 2 (Reference), 3 (ref syntax),
4 and 4.1 (endpoints, /config), 5 (References), 6 (errors); the ``If-Match`` locking
comes from the seed spec ("Client to server locking").
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.testclient import TestClient

from .helpers import (
    NO_ANCESTOR,
    SPEC2,
    UNKNOWN_HASH,
    V1,
    V2,
    Api,
    assert_error,
    check_commit_meta_v2,
    enc,
    put,
    table,
)

ISO_INSTANT = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")
REF_META_FIELDS = {
    "numCommitsAhead",
    "numCommitsBehind",
    "commonAncestorHash",
    "commitMetaOfHEAD",
    "numTotalCommits",
}


def create_resp(client: TestClient, name: str, ref_type: str, source: dict[str, Any] | None) -> Any:
    """``POST /trees?name=..&type=..`` with a source reference body."""
    return client.post(f"{V2}/trees", params={"name": name, "type": ref_type}, json=source)


# -- /config ---------------------------------------------------------------------------------


def test_config_exact_fields(client: TestClient) -> None:
    resp = client.get(f"{V2}/config")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {
        "defaultBranch",
        "minSupportedApiVersion",
        "maxSupportedApiVersion",
        "actualApiVersion",
        "specVersion",
        "noAncestorHash",
        "repositoryCreationTimestamp",
        "oldestPossibleCommitTimestamp",
    }
    assert body["defaultBranch"] == "main"
    assert body["minSupportedApiVersion"] == 1
    assert body["maxSupportedApiVersion"] == 2
    assert body["actualApiVersion"] == 2
    assert body["specVersion"] == "2.2.0"
    assert body["noAncestorHash"] == NO_ANCESTOR
    assert ISO_INSTANT.match(body["repositoryCreationTimestamp"])
    assert ISO_INSTANT.match(body["oldestPossibleCommitTimestamp"])


def test_config_answers_json_whatever_accept_says(client: TestClient) -> None:
    for accept in ("application/json; charset=utf-8", "*/*", "text/html"):
        resp = client.get(f"{V2}/config", headers={"Accept": accept})
        assert resp.status_code == 200
        assert resp.json()["actualApiVersion"] == 2


def test_v1_config_has_no_actual_api_version_2(client: TestClient) -> None:
    body = client.get(f"{V1}/config").json()
    assert set(body) == {"defaultBranch", "maxSupportedApiVersion"}
    assert body == {"defaultBranch": "main", "maxSupportedApiVersion": 2}


# -- /config/repository ----------------------------------------------------------------------


def test_repository_config_empty_then_set_and_replaced(client: TestClient) -> None:
    resp = client.get(f"{V2}/config/repository")
    assert resp.status_code == 200
    assert resp.json().get("configs", []) == []  # configs is NON_EMPTY
    assert "configs" not in resp.json()

    gc = {"type": "GARBAGE_COLLECTOR", "defaultCutoffPolicy": "P30D", "newFilesGracePeriod": None}
    resp = client.post(f"{V2}/config/repository", json={"config": gc})
    assert resp.status_code == 200
    assert resp.json() == {"previous": None}

    got = client.get(f"{V2}/config/repository", params={"type": "GARBAGE_COLLECTOR"}).json()
    assert got == {"configs": [{"type": "GARBAGE_COLLECTOR", "defaultCutoffPolicy": "P30D"}]}

    gc2 = {"type": "GARBAGE_COLLECTOR", "defaultCutoffPolicy": "P7D"}
    resp = client.post(f"{V2}/config/repository", json={"config": gc2})
    assert resp.json() == {"previous": {"type": "GARBAGE_COLLECTOR", "defaultCutoffPolicy": "P30D"}}
    assert client.get(f"{V2}/config/repository").json()["configs"] == [gc2]


def test_repository_config_unknown_type_is_400(client: TestClient) -> None:
    resp = client.post(f"{V2}/config/repository", json={"config": {"type": "NOPE"}})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = client.get(f"{V2}/config/repository", params={"type": "NOPE"})
    assert_error(resp, 400, "BAD_REQUEST")


# -- GET /trees ------------------------------------------------------------------------------


def test_fresh_repository_has_only_main_at_no_ancestor(client: TestClient) -> None:
    body = client.get(f"{V2}/trees").json()
    assert body == {
        "references": [{"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}],
        "hasMore": False,
        "token": None,
    }


def test_list_references_paging(api: Api) -> None:
    names = [f"b{i}" for i in range(7)]
    for n in names:
        api.create(n)
    api.create("t1", "TAG")
    expected = sorted([*names, "main", "t1"])

    # without max-records: everything in one page
    body = api.ok(api.c.get(f"{V2}/trees"))
    assert [r["name"] for r in body["references"]] == expected
    assert body["hasMore"] is False and body["token"] is None

    seen: list[str] = []
    token: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"max-records": 3}
        if token:
            params["page-token"] = token
        body = api.ok(api.c.get(f"{V2}/trees", params=params))
        assert len(body["references"]) <= 3
        seen += [r["name"] for r in body["references"]]
        pages += 1
        if not body["hasMore"]:
            assert body["token"] is None
            break
        assert isinstance(body["token"], str) and body["token"]
        token = body["token"]
    assert seen == expected
    assert pages == 3  # 9 references, 3 per page, no empty trailing page


def test_list_references_bad_max_records_is_400(client: TestClient) -> None:
    assert_error(client.get(f"{V2}/trees", params={"max-records": "x"}), 400, "BAD_REQUEST")
    assert_error(client.get(f"{V2}/trees", params={"max-records": 0}), 400, "BAD_REQUEST")


def test_list_references_fetch_all_metadata(api: Api) -> None:
    base = api.head()
    h1, _ = api.add("main", ["t0"], table("s3://b/t0.json"))
    api.create("dev")
    api.create("v1", "TAG")
    h2, _ = api.add("dev", ["t1"], table("s3://b/t1.json"))

    body = api.ok(api.c.get(f"{V2}/trees", params={"fetch": "ALL"}))
    refs = {r["name"]: r for r in body["references"]}
    assert set(refs) == {"main", "dev", "v1"}
    for r in refs.values():
        assert set(r) == {"type", "name", "hash", "metadata"}
        assert set(r["metadata"]) == REF_META_FIELDS

    dev = refs["dev"]["metadata"]
    assert dev["numCommitsAhead"] == 1
    assert dev["numCommitsBehind"] == 0
    assert dev["commonAncestorHash"] == h1
    assert dev["numTotalCommits"] == 2
    check_commit_meta_v2(dev["commitMetaOfHEAD"])
    assert dev["commitMetaOfHEAD"]["hash"] == h2
    assert dev["commitMetaOfHEAD"]["parentCommitHashes"] == [h1]

    main = refs["main"]["metadata"]
    assert main["numCommitsAhead"] == 0 and main["numCommitsBehind"] == 0
    assert main["commitMetaOfHEAD"]["parentCommitHashes"] == [base]

    tag = refs["v1"]["metadata"]
    assert tag["numCommitsAhead"] is None
    assert tag["numCommitsBehind"] is None
    assert tag["commonAncestorHash"] is None
    assert tag["numTotalCommits"] == 1
    assert tag["commitMetaOfHEAD"]["hash"] == h1

    minimal = api.ok(api.c.get(f"{V2}/trees", params={"fetch": "MINIMAL"}))
    assert all("metadata" not in r for r in minimal["references"])
    assert_error(api.c.get(f"{V2}/trees", params={"fetch": "MAXIMAL"}), 400, "BAD_REQUEST")


def test_list_references_fetch_all_on_empty_main(client: TestClient) -> None:
    body = client.get(f"{V2}/trees", params={"fetch": "ALL"}).json()
    (main,) = body["references"]
    assert set(main["metadata"]) == REF_META_FIELDS
    assert main["metadata"]["commitMetaOfHEAD"] is None
    assert main["metadata"]["numTotalCommits"] == 0


def test_list_references_cel_filter(api: Api) -> None:
    api.create("feature/a")
    api.create("feature-b")
    api.create("rel", "TAG")

    def names(expr: str) -> list[str]:
        body = api.ok(api.c.get(f"{V2}/trees", params={"filter": expr}))
        return [r["name"] for r in body["references"]]

    assert names("refType == 'TAG'") == ["rel"]
    assert names("ref.name.startsWith('feature')") == ["feature-b", "feature/a"]
    assert names("refType == 'BRANCH' && ref.name == 'main'") == ["main"]
    assert_error(api.c.get(f"{V2}/trees", params={"filter": "ref.name =="}), 400, "BAD_REQUEST")


# -- POST /trees -----------------------------------------------------------------------------


def test_create_branch_and_tag_from_main_hash(api: Api) -> None:
    h, _ = api.add("main", ["t"], table())
    source = {"type": "BRANCH", "name": "main", "hash": h}
    resp = create_resp(api.c, "dev", "BRANCH", source)
    assert resp.status_code == 200
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "dev", "hash": h}}

    # the Java client sends the source as a BRANCH even when creating a tag
    resp = create_resp(api.c, "v1.0", "TAG", source)
    assert resp.json() == {"reference": {"type": "TAG", "name": "v1.0", "hash": h}}
    assert api.ref("v1.0") == {"type": "TAG", "name": "v1.0", "hash": h}

    # type is case-insensitive; a DETACHED source uses only its hash
    resp = create_resp(api.c, "orphan", "branch", {"type": "DETACHED", "hash": NO_ANCESTOR})
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "orphan", "hash": NO_ANCESTOR}}


def test_create_from_older_hash_of_source(api: Api) -> None:
    h1, _ = api.add("main", ["a"], table("s3://a"))
    api.add("main", ["b"], table("s3://b"))
    ref = api.create("old", source="main", hash_=h1)
    assert ref["hash"] == h1
    assert api.key_list("old") == [("a",)]


def test_create_slashed_name(api: Api) -> None:
    ref = api.create("feature/x/y")
    assert ref["name"] == "feature/x/y"
    resp = api.c.get(f"{V2}/trees/feature%2Fx%2Fy")
    assert resp.status_code == 200
    assert resp.json()["reference"]["name"] == "feature/x/y"
    # `name@` form (the Java client appends '@' to names with '/')
    resp = api.c.get(f"{V2}/trees/{enc('feature/x/y@')}/entries")
    assert resp.status_code == 200
    names = [r["name"] for r in api.ok(api.c.get(f"{V2}/trees"))["references"]]
    assert "feature/x/y" in names


def test_create_existing_is_409(api: Api) -> None:
    api.create("dev")
    source = {"type": "BRANCH", "name": "main", "hash": api.head()}
    resp = create_resp(api.c, "dev", "BRANCH", source)
    assert_error(resp, 409, "REFERENCE_ALREADY_EXISTS", "Named reference 'dev' already exists.")
    resp = create_resp(api.c, "main", "BRANCH", source)
    assert_error(resp, 409, "REFERENCE_ALREADY_EXISTS", "Named reference 'main' already exists.")
    resp = create_resp(api.c, "dev", "TAG", source)
    assert_error(resp, 409, "REFERENCE_ALREADY_EXISTS")


def test_create_from_unknown_hash_or_ref_is_404(client: TestClient) -> None:
    resp = create_resp(
        client, "dev", "BRANCH", {"type": "BRANCH", "name": "main", "hash": UNKNOWN_HASH}
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = create_resp(client, "dev", "BRANCH", {"type": "DETACHED", "hash": UNKNOWN_HASH})
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = create_resp(
        client, "dev", "BRANCH", {"type": "BRANCH", "name": "nope", "hash": NO_ANCESTOR}
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")


@pytest.mark.parametrize(
    "name",
    ["1abc", "a..b", "x/", "x.", "-x", "HEAD", "DETACHED", "detached", "deadbeef", "a b", "a@b"],
)
def test_create_invalid_name_is_400(client: TestClient, name: str) -> None:
    resp = create_resp(
        client, name, "BRANCH", {"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}
    )
    assert_error(resp, 400, "BAD_REQUEST")


def test_create_without_hash_or_params_is_400(client: TestClient) -> None:
    resp = create_resp(client, "dev", "BRANCH", {"type": "BRANCH", "name": "main", "hash": None})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = create_resp(client, "dev", "BRANCH", {"type": "BRANCH", "name": "main"})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = client.post(f"{V2}/trees", params={"name": "dev"}, json={"hash": NO_ANCESTOR})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = client.post(f"{V2}/trees", params={"type": "BRANCH"}, json={"hash": NO_ANCESTOR})
    assert_error(resp, 400, "BAD_REQUEST")
    resp = create_resp(
        client, "dev", "COMMIT", {"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}
    )
    assert_error(resp, 400, "BAD_REQUEST")
    resp = create_resp(client, "dev", "BRANCH", {"type": "BRANCH", "name": "main", "hash": "xyz"})
    assert_error(resp, 400, "BAD_REQUEST")


# -- GET /trees/{ref} ------------------------------------------------------------------------


def test_get_reference(api: Api) -> None:
    h, _ = api.add("main", ["t"], table())
    resp = api.c.get(f"{V2}/trees/main")
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "main", "hash": h}}
    assert api.ok(api.c.get(f"{V2}/trees/-")) == resp.json()
    ref = api.ref("main", fetch="ALL")
    assert set(ref) == {"type", "name", "hash", "metadata"}
    assert set(ref["metadata"]) == REF_META_FIELDS


def test_get_unknown_reference_is_404(client: TestClient) -> None:
    resp = client.get(f"{V2}/trees/nope")
    assert_error(resp, 404, "REFERENCE_NOT_FOUND", "Named reference 'nope' not found")
    resp = client.get(f"{V2}/trees/nope", headers=SPEC2)
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")


def test_get_reference_with_hash_is_400(api: Api) -> None:
    h, _ = api.add("main", ["t"], table())
    assert_error(api.c.get(f"{V2}/trees/{enc('main@' + h)}"), 400, "BAD_REQUEST")
    assert_error(api.c.get(f"{V2}/trees/main%40{h}"), 400, "BAD_REQUEST")
    assert_error(api.c.get(f"{V2}/trees/{enc('@' + h)}"), 400, "BAD_REQUEST")
    assert_error(api.c.get(f"{V2}/trees/{enc('main~1')}"), 400, "BAD_REQUEST")


# -- PUT /trees/{name@hash} (assign) ---------------------------------------------------------


def test_assign_branch(api: Api) -> None:
    api.create("dev")
    dev = api.head("dev")
    h, _ = api.add("main", ["t"], table())
    resp = api.c.put(f"{V2}/trees/dev%40{dev}", json={"type": "BRANCH", "name": "main", "hash": h})
    assert resp.status_code == 200
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "dev", "hash": h}}
    assert api.head("dev") == h

    # a DETACHED target, and the type check, and a reset to the no-ancestor hash
    resp = api.c.put(
        f"{V2}/trees/dev%40{h}",
        params={"type": "BRANCH"},
        json={"type": "DETACHED", "hash": NO_ANCESTOR},
    )
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "dev", "hash": NO_ANCESTOR}}
    resp = api.c.put(
        f"{V2}/trees/main%40{h}", json={"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}
    )
    assert resp.json()["reference"]["hash"] == NO_ANCESTOR
    assert api.key_list("main") == []


def test_assign_tag(api: Api) -> None:
    api.create("v1", "TAG")
    h, _ = api.add("main", ["t"], table())
    resp = api.c.put(
        f"{V2}/trees/v1%40{NO_ANCESTOR}",
        params={"type": "TAG"},
        json={"type": "BRANCH", "name": "main", "hash": h},
    )
    assert resp.json() == {"reference": {"type": "TAG", "name": "v1", "hash": h}}


def test_assign_unexpected_hash_409_details_only_with_client_spec(api: Api) -> None:
    api.create("dev")
    h, _ = api.add("dev", ["t"], table())
    target = {"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}
    path = f"{V2}/trees/dev%40{NO_ANCESTOR}"
    message = f"named-reference 'dev' is not at expected hash '{NO_ANCESTOR}', but at '{h}'"

    plain = assert_error(api.c.put(path, json=target), 409, "REFERENCE_CONFLICT")
    assert "errorDetails" not in plain

    body = assert_error(
        api.c.put(path, json=target, headers=SPEC2), 409, "REFERENCE_CONFLICT", details=True
    )
    assert body["errorDetails"] == {
        "type": "REFERENCE_CONFLICTS",
        "conflicts": [{"conflictType": "UNEXPECTED_HASH", "key": None, "message": message}],
    }
    assert api.head("dev") == h

    # spec 1 announces no details either
    resp = api.c.put(path, json=target, headers={"Nessie-Client-Spec": "1"})
    assert_error(resp, 409, "REFERENCE_CONFLICT")


def test_assign_errors(api: Api) -> None:
    api.create("dev")
    target = {"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR}
    # unknown target hash, unknown reference
    resp = api.c.put(
        f"{V2}/trees/dev%40{NO_ANCESTOR}", json={"type": "DETACHED", "hash": UNKNOWN_HASH}
    )
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    resp = api.c.put(f"{V2}/trees/nope%40{NO_ANCESTOR}", json=target)
    assert_error(resp, 404, "REFERENCE_NOT_FOUND")
    # no expected hash in path nor If-Match
    assert_error(api.c.put(f"{V2}/trees/dev", json=target), 400, "BAD_REQUEST")
    # no target hash
    resp = api.c.put(f"{V2}/trees/dev%40{NO_ANCESTOR}", json={"type": "BRANCH", "name": "main"})
    assert_error(resp, 400, "BAD_REQUEST")
    # a detached path has no name to assign
    resp = api.c.put(f"{V2}/trees/%40{NO_ANCESTOR}", json=target)
    assert_error(resp, 400, "BAD_REQUEST")
    # wrong type
    resp = api.c.put(f"{V2}/trees/dev%40{NO_ANCESTOR}", params={"type": "TAG"}, json=target)
    assert resp.status_code in (400, 404, 409)
    assert api.head("dev") == NO_ANCESTOR


# -- DELETE /trees/{name@hash} ---------------------------------------------------------------


def test_delete_branch_and_tag(api: Api) -> None:
    h, _ = api.add("main", ["t"], table())
    api.create("feature/x")
    api.create("v1", "TAG")
    resp = api.c.delete(f"{V2}/trees/{enc('feature/x@' + h)}")
    assert resp.status_code == 200
    assert resp.json() == {"reference": {"type": "BRANCH", "name": "feature/x", "hash": h}}
    assert_error(api.c.get(f"{V2}/trees/feature%2Fx"), 404, "REFERENCE_NOT_FOUND")

    resp = api.c.delete(f"{V2}/trees/v1%40{h}", params={"type": "TAG"})
    assert resp.json() == {"reference": {"type": "TAG", "name": "v1", "hash": h}}
    assert [r["name"] for r in api.ok(api.c.get(f"{V2}/trees"))["references"]] == ["main"]


def test_delete_default_branch_is_400(api: Api) -> None:
    resp = api.c.delete(f"{V2}/trees/main%40{NO_ANCESTOR}")
    assert_error(resp, 400, "BAD_REQUEST", "Default branch 'main' cannot be deleted.")
    assert api.head() == NO_ANCESTOR


def test_delete_errors(api: Api) -> None:
    api.create("dev")
    h, _ = api.add("dev", ["t"], table())
    body = assert_error(
        api.c.delete(f"{V2}/trees/dev%40{NO_ANCESTOR}", headers=SPEC2),
        409,
        "REFERENCE_CONFLICT",
        details=True,
    )
    assert body["errorDetails"]["conflicts"][0]["conflictType"] == "UNEXPECTED_HASH"
    assert_error(api.c.delete(f"{V2}/trees/nope%40{h}"), 404, "REFERENCE_NOT_FOUND")
    assert_error(api.c.delete(f"{V2}/trees/dev"), 400, "BAD_REQUEST")
    assert api.head("dev") == h


# -- recent changes --------------------------------------------------------------------------


def test_recent_changes_current_and_previous(api: Api) -> None:
    api.create("dev")
    h1, _ = api.add("dev", ["a"], table("s3://a"))
    h2, _ = api.add("dev", ["b"], table("s3://b"))
    resp = api.c.get(f"{V2}/trees/dev/recent-changes")
    body = api.ok(resp)
    assert set(body) == {"reference", "current", "previous", "commitLogConsistency"}
    assert body["reference"] == {"type": "BRANCH", "name": "dev", "hash": h2}
    assert body["commitLogConsistency"] in {
        "NOT_CHECKED",
        "COMMIT_CONSISTENT",
        "COMMIT_CONTENT_INCONSISTENT",
        "COMMIT_INCONSISTENT",
    }
    current = body["current"]
    assert set(current) == {"commitHash", "commitConsistency", "meta"}
    assert current["commitHash"] == h2
    check_commit_meta_v2(current["meta"])
    assert current["meta"]["hash"] == h2
    previous = [p["commitHash"] for p in body["previous"]]
    assert previous[:2] == [h1, NO_ANCESTOR]
    for p in body["previous"]:
        assert set(p) == {"commitHash", "commitConsistency", "meta"}

    # an assign is a change of the reference too
    api.ok(api.c.put(f"{V2}/trees/dev%40{h2}", json={"type": "DETACHED", "hash": h1}))
    body = api.ok(api.c.get(f"{V2}/trees/dev/recent-changes"))
    assert body["current"]["commitHash"] == h1
    assert body["previous"][0]["commitHash"] == h2


def test_recent_changes_rejects_hash_and_unknown_ref(api: Api) -> None:
    assert_error(api.c.get(f"{V2}/trees/main%40{NO_ANCESTOR}/recent-changes"), 400, "BAD_REQUEST")
    assert_error(api.c.get(f"{V2}/trees/nope/recent-changes"), 404, "REFERENCE_NOT_FOUND")


# -- ETag and If-Match -----------------------------------------------------------------------


def test_etag_carries_the_hash(api: Api) -> None:
    resp = api.c.get(f"{V2}/trees/main")
    assert resp.headers["etag"] == f'"{NO_ANCESTOR}"'
    r = api.commit_resp("main", put(["t"], table()))
    h = r.json()["targetBranch"]["hash"]
    assert r.headers["etag"] == f'"{h}"'
    assert api.c.get(f"{V2}/trees/main").headers["etag"] == f'"{h}"'
    assert api.c.get(f"{V2}/trees/main/entries").headers["etag"] == f'"{h}"'


def test_if_match_as_expected_hash_for_commit(api: Api) -> None:
    h0 = api.head()
    body = {
        "commitMeta": {"message": "via If-Match"},
        "operations": [put(["a"], table("s3://a"))],
    }
    resp = api.c.post(f"{V2}/trees/main/history/commit", json=body, headers={"If-Match": f'"{h0}"'})
    h1 = api.ok(resp)["targetBranch"]["hash"]

    # stale If-Match, but the touched key is new on both sides: resolvable, succeeds
    body["operations"] = [put(["b"], table("s3://b"))]
    resp = api.c.post(f"{V2}/trees/main/history/commit", json=body, headers={"If-Match": f'"{h0}"'})
    h2 = api.ok(resp)["targetBranch"]["hash"]
    assert api.log()[1]["commitMeta"]["hash"] == h1
    assert api.head() == h2

    # stale If-Match and the key changed since: not resolvable, 409
    body["operations"] = [put(["a"], table("s3://a2"))]
    resp = api.c.post(
        f"{V2}/trees/main/history/commit", json=body, headers={"If-Match": f'"{h0}"', **SPEC2}
    )
    err = assert_error(resp, 409, "REFERENCE_CONFLICT", details=True)
    assert err["errorDetails"]["conflicts"][0]["conflictType"] == "KEY_EXISTS"

    # neither a hash in the path nor If-Match
    resp = api.c.post(f"{V2}/trees/main/history/commit", json=body)
    assert_error(resp, 400, "BAD_REQUEST")
    # a malformed If-Match
    resp = api.c.post(f"{V2}/trees/main/history/commit", json=body, headers={"If-Match": '"zz"'})
    assert_error(resp, 400, "BAD_REQUEST")


def test_if_match_for_assign_and_delete(api: Api) -> None:
    api.create("dev")
    h, _ = api.add("main", ["t"], table())
    target = {"type": "BRANCH", "name": "main", "hash": h}
    # stale
    resp = api.c.put(f"{V2}/trees/dev", json=target, headers={"If-Match": f'"{h}"'})
    assert_error(resp, 409, "REFERENCE_CONFLICT")
    # current
    resp = api.c.put(f"{V2}/trees/dev", json=target, headers={"If-Match": f'"{NO_ANCESTOR}"'})
    assert api.ok(resp)["reference"]["hash"] == h
    # the ETag of a GET feeds the next write
    etag = api.c.get(f"{V2}/trees/dev").headers["etag"]
    assert_error(
        api.c.delete(f"{V2}/trees/dev", headers={"If-Match": f'"{NO_ANCESTOR}"'}),
        409,
        "REFERENCE_CONFLICT",
    )
    resp = api.c.delete(f"{V2}/trees/dev", headers={"If-Match": etag})
    assert api.ok(resp)["reference"] == {"type": "BRANCH", "name": "dev", "hash": h}
