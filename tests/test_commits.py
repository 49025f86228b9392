"""Commits: content types, content-id rules, operation and key validation, namespace
rules, conflict detection against a stale expected hash, and commit metadata.

Semantics follow nessie-api.md sections 2 (ContentKey, Content, Operations, CommitMeta),
5 (Commit and conflict detection, Content ids, Namespaces) and 6 (conflict messages).
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest

from loch.errors import (
    BadRequestError,
    Conflict,
    ConflictType,
    ReferenceConflictError,
    ReferenceNotFoundError,
)
from loch.model.keys import Key
from loch.store import NO_ANCESTOR
from loch.versioning import (
    CommitResult,
    Delete,
    KeyRange,
    Operation,
    Put,
    Unchanged,
    VersionStore,
    parse_operations,
)

CT = ConflictType

# -- helpers ----------------------------------------------------------------------------------


def table(location: str = "s3://b/m1.json", cid: str | None = None) -> dict[str, Any]:
    """Iceberg table content; ``cid`` None for new content."""
    out: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": location,
        "snapshotId": 1,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    if cid is not None:
        out["id"] = cid
    return out


def view(location: str = "s3://b/v1.json", cid: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": "ICEBERG_VIEW",
        "metadataLocation": location,
        "versionId": 1,
        "schemaId": 0,
        "dialect": "-",
    }
    if cid is not None:
        out["id"] = cid
    return out


def ns(*elements: str, cid: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "NAMESPACE", "elements": list(elements)}
    if cid is not None:
        out["id"] = cid
    return out


def head(vs: VersionStore, branch: str = "main") -> str:
    return vs.get_reference(branch).hash


def commit(
    vs: VersionStore, ops: list[Operation], expected: str | None = None, branch: str = "main"
) -> CommitResult:
    """Commit ``ops`` at ``expected`` (default: the branch HEAD)."""
    exp = head(vs, branch) if expected is None else expected
    return vs.commit(branch, exp, {"message": "test"}, ops)


def ids(result: CommitResult) -> dict[Key, str]:
    return dict(result.added_contents)


def content_id(vs: VersionStore, key: Key, at: str | None = None) -> str:
    cid = vs.get_content(at or head(vs), key).content["id"]
    assert isinstance(cid, str)
    return cid


def live(vs: VersionStore, at: str | None = None) -> dict[Key, tuple[str, str]]:
    """Key → (content id, type) at a commit (default: main's HEAD)."""
    return {k: (v[0], v[1]) for k, v in vs.entries(at or head(vs)).items}


def conflicts_of(err: ReferenceConflictError) -> list[tuple[ConflictType, Key | None]]:
    return [(c.conflict_type, c.key) for c in err.conflicts]


def wire_put(elements: list[str], content: dict[str, Any]) -> dict[str, Any]:
    return {"type": "PUT", "key": {"elements": elements}, "content": content}


# -- content types ------------------------------------------------------------------------------

CONTENTS: dict[str, dict[str, Any]] = {
    "ICEBERG_TABLE": table(),
    "ICEBERG_VIEW": {
        "type": "ICEBERG_VIEW",
        "metadataLocation": "s3://b/v1.json",
        "versionId": 3,
        "schemaId": 1,
        "sqlText": "select 1",
        "dialect": "spark",
    },
    "DELTA_LAKE_TABLE": {
        "type": "DELTA_LAKE_TABLE",
        "metadataLocationHistory": ["s3://d/1.json", "s3://d/0.json"],
        "checkpointLocationHistory": ["s3://d/cp1"],
        "lastCheckpoint": "s3://d/cp1",
    },
    "NAMESPACE": {"type": "NAMESPACE", "elements": ["k"], "properties": {"owner": "me"}},
    "UDF": {
        "type": "UDF",
        "metadataLocation": "s3://u/1.json",
        "versionId": "v1",
        "signatureId": "sig1",
    },
    "HIVE_TABLE": {
        "type": "HIVE_TABLE",
        "metadataLocation": "hdfs://warehouse/db/t",
        "metadata": {"format": "parquet", "partitions": ["a", "b"]},
    },
    "HIVE_DATABASE": {"type": "HIVE_DATABASE", "metadataLocation": "hdfs://warehouse/db"},
}


@pytest.mark.parametrize("ctype", sorted(CONTENTS))
def test_content_type_round_trips(vs: VersionStore, ctype: str) -> None:
    content = CONTENTS[ctype]
    ops = parse_operations([wire_put(["k"], dict(content))])
    r = vs.commit("main", NO_ANCESTOR, {"message": "add"}, ops)
    [(key, cid)] = r.added_contents
    assert key == ("k",)
    uuid.UUID(cid)
    value = vs.get_content(r.hash, ("k",))
    assert value.content == {**content, "id": cid}
    assert value.documentation is None
    assert vs.entries(r.hash).items == [(("k",), (cid, ctype, value.id))]
    assert [(k, v.content) for k, v in vs.get_contents(r.hash, [("k",)])] == [
        (("k",), {**content, "id": cid})
    ]


@pytest.mark.parametrize("ctype", sorted(CONTENTS))
def test_content_type_round_trips_from_direct_put(vs: VersionStore, ctype: str) -> None:
    content = CONTENTS[ctype]
    r = vs.commit("main", NO_ANCESTOR, {"message": "add"}, [Put(("k",), dict(content))])
    cid = ids(r)[("k",)]
    assert vs.get_content(r.hash, ("k",)).content == {**content, "id": cid}
    # an update with the id keeps it and is not an added content
    r2 = commit(vs, [Put(("k",), {**content, "id": cid})])
    assert r2.added_contents == []
    assert content_id(vs, ("k",)) == cid


def test_delta_lake_null_last_checkpoint_round_trips(vs: VersionStore) -> None:
    content = {
        "type": "DELTA_LAKE_TABLE",
        "metadataLocationHistory": ["m"],
        "checkpointLocationHistory": [],
        "lastCheckpoint": None,
    }
    r = vs.commit("main", NO_ANCESTOR, {}, parse_operations([wire_put(["d"], content)]))
    assert vs.get_content(r.hash, ("d",)).content == {**content, "id": ids(r)[("d",)]}


def test_documentation_round_trips(vs: VersionStore) -> None:
    doc = {"mimeType": "text/markdown", "text": "# hello"}
    r = commit(vs, [Put(("t",), table(), doc)])
    assert vs.get_content(r.hash, ("t",)).documentation == doc


@pytest.mark.parametrize("ctype", ["FOO", "UNKNOWN", "iceberg_table", "", None])
def test_unknown_content_type_is_400_on_the_wire(vs: VersionStore, ctype: str | None) -> None:
    ops = parse_operations([wire_put(["k"], {"type": ctype, "metadataLocation": "x"})])
    with pytest.raises(BadRequestError, match="content type"):
        vs.commit("main", NO_ANCESTOR, {}, ops)


@pytest.mark.parametrize("ctype", ["FOO", "UNKNOWN"])
def test_unknown_content_type_is_400_in_commit(vs: VersionStore, ctype: str) -> None:
    with pytest.raises(BadRequestError):
        commit(vs, [Put(("k",), {"type": ctype, "metadataLocation": "x"})])
    assert head(vs) == NO_ANCESTOR


@pytest.mark.parametrize(
    "content",
    [
        {"type": "ICEBERG_TABLE"},  # metadataLocation is required
        {"type": "ICEBERG_TABLE", "metadataLocation": 1},
        {"type": "ICEBERG_TABLE", "metadataLocation": "x", "snapshotId": "1"},
        {"type": "NAMESPACE", "elements": "a"},
        "not an object",
    ],
)
def test_invalid_content_is_400_on_the_wire(vs: VersionStore, content: Any) -> None:
    ops = parse_operations([wire_put(["k"], content)])
    with pytest.raises(BadRequestError):
        vs.commit("main", NO_ANCESTOR, {}, ops)
    assert head(vs) == NO_ANCESTOR


def test_put_without_content_is_400_on_the_wire() -> None:
    with pytest.raises(BadRequestError):
        parse_operations([{"type": "PUT", "key": {"elements": ["k"]}}])
    with pytest.raises(BadRequestError):
        parse_operations([{"type": "MOVE", "key": {"elements": ["k"]}}])


def test_namespace_elements_follow_the_key_on_the_wire(vs: VersionStore) -> None:
    ops = parse_operations([wire_put(["db"], {"type": "NAMESPACE", "elements": []})])
    r = vs.commit("main", NO_ANCESTOR, {}, ops)
    assert vs.get_content(r.hash, ("db",)).content["elements"] == ["db"]


# -- content ids -------------------------------------------------------------------------------


def test_added_contents_lists_new_content_only(vs: VersionStore) -> None:
    r1 = commit(vs, [Put(("db",), ns("db")), Put(("db", "t"), table())])
    added = ids(r1)
    assert sorted(added) == [("db",), ("db", "t")]
    assert len(set(added.values())) == 2
    for k, cid in added.items():
        uuid.UUID(cid)
        assert content_id(vs, k) == cid
    r2 = commit(vs, [Put(("db", "t"), table("s3://b/m2.json", added[("db", "t")]))])
    assert r2.added_contents == []
    assert content_id(vs, ("db", "t")) == added[("db", "t")]


def test_new_key_with_id_is_400(vs: VersionStore) -> None:
    cid = str(uuid.uuid4())
    with pytest.raises(BadRequestError) as ei:
        commit(vs, [Put(("t",), table(cid=cid))])
    assert ei.value.message == "New value for key 't' must not have a content ID"
    assert head(vs) == NO_ANCESTOR


def test_existing_key_without_id_is_400(vs: VersionStore) -> None:
    commit(vs, [Put(("t",), table())])
    h = head(vs)
    with pytest.raises(BadRequestError) as ei:
        commit(vs, [Put(("t",), table("s3://b/m2.json"))])
    assert ei.value.message == "New value to update existing key 't' has no content ID"
    assert head(vs) == h


def test_existing_key_with_other_id_is_400(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table()), Put(("u",), table())])
    t_id, u_id = ids(r)[("t",)], ids(r)[("u",)]
    other = str(uuid.uuid4())
    for wrong in (other, u_id):
        with pytest.raises(BadRequestError) as ei:
            commit(vs, [Put(("t",), table("s3://b/m2.json", wrong))])
        assert ei.value.message == (
            f"Key 't' already exists with content ID {t_id}, which is different from the "
            f"content ID {wrong} in the operation"
        )
    assert head(vs) == r.hash


@pytest.mark.parametrize("bad", ["not-a-uuid", "", "1234", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz"])
def test_non_uuid_id_is_400(vs: VersionStore, bad: str) -> None:
    r = commit(vs, [Put(("t",), table())])
    with pytest.raises(BadRequestError):
        commit(vs, [Put(("n",), table(cid=bad))])
    with pytest.raises(BadRequestError):
        commit(vs, [Put(("t",), table("s3://b/m2.json", bad))])
    with pytest.raises(BadRequestError):
        commit(vs, [Delete(("t",)), Put(("t2",), table(cid=bad))])
    assert head(vs) == r.hash


def test_rename_keeps_the_content_id(vs: VersionStore) -> None:
    r = commit(vs, [Put(("db",), ns("db")), Put(("t",), table())])
    t_id = ids(r)[("t",)]
    r2 = commit(vs, [Delete(("t",)), Put(("db", "t2"), table(cid=t_id))])
    assert r2.added_contents == []
    state = live(vs)
    assert ("t",) not in state
    assert state[("db", "t2")] == (t_id, "ICEBERG_TABLE")


def test_rename_operation_order_does_not_matter(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table())])
    t_id = ids(r)[("t",)]
    r2 = commit(vs, [Put(("t2",), table(cid=t_id)), Delete(("t",))])
    assert r2.added_contents == []
    assert live(vs) == {("t2",): (t_id, "ICEBERG_TABLE")}


def test_replace_with_null_id_gives_a_new_id(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table())])
    t_id = ids(r)[("t",)]
    r2 = commit(vs, [Delete(("t",)), Put(("t",), view())])
    [(key, new_id)] = r2.added_contents
    assert key == ("t",)
    assert new_id != t_id
    assert live(vs) == {("t",): (new_id, "ICEBERG_VIEW")}


def test_delete_and_put_same_key_with_same_id(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table())])
    t_id = ids(r)[("t",)]
    r2 = commit(vs, [Delete(("t",)), Put(("t",), table("s3://b/m2.json", t_id))])
    assert r2.added_contents == []
    assert content_id(vs, ("t",)) == t_id


def test_same_id_twice_in_one_commit_is_400(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table())])
    t_id = ids(r)[("t",)]
    with pytest.raises(BadRequestError):
        commit(vs, [Delete(("t",)), Put(("a",), table(cid=t_id)), Put(("b",), table(cid=t_id))])
    assert head(vs) == r.hash


def test_ids_are_checked_against_the_expected_state(vs: VersionStore) -> None:
    """At a stale expected hash, a key created later is new: a PUT with an id is a 400."""
    h0 = commit(vs, [Put(("a",), table())]).hash
    r = commit(vs, [Put(("t",), table())])
    t_id = ids(r)[("t",)]
    with pytest.raises(BadRequestError):
        commit(vs, [Put(("t",), table("s3://b/m2.json", t_id))], expected=h0)
    assert head(vs) == r.hash


def test_each_new_key_gets_its_own_id(vs: VersionStore) -> None:
    r = commit(vs, [Put((f"t{i}",), table()) for i in range(10)])
    assert len(set(ids(r).values())) == 10


# -- operation and key validation ----------------------------------------------------------------


def test_empty_operations_is_400(vs: VersionStore) -> None:
    with pytest.raises(BadRequestError):
        commit(vs, [])
    with pytest.raises(BadRequestError):
        parse_operations([])
    with pytest.raises(BadRequestError):
        parse_operations(None)
    assert head(vs) == NO_ANCESTOR


@pytest.mark.parametrize(
    "ops",
    [
        [Put(("t",), table()), Put(("t",), table("s3://b/m2.json"))],
        [Delete(("t",)), Delete(("t",))],
        [Put(("t",), table()), Unchanged(("t",))],
        [Delete(("t",)), Unchanged(("t",))],
        [Unchanged(("t",)), Unchanged(("t",))],
        [Delete(("t",)), Put(("t",), table()), Put(("t",), table())],
        [Delete(("t",)), Put(("t",), table()), Delete(("t",))],
    ],
    ids=["put-put", "del-del", "put-unch", "del-unch", "unch-unch", "del-put-put", "del-put-del"],
)
def test_duplicate_keys_are_400(vs: VersionStore, ops: list[Operation]) -> None:
    with pytest.raises(BadRequestError) as ei:
        commit(vs, ops)
    assert ei.value.message.startswith("Duplicate key in commit operations")


def test_duplicate_keys_on_the_wire_are_400(vs: VersionStore) -> None:
    put = wire_put(["t"], table())
    with pytest.raises(BadRequestError, match="Duplicate key"):
        vs.commit("main", NO_ANCESTOR, {}, parse_operations([put, put]))
    ops = parse_operations([{"type": "DELETE", "key": {"elements": ["t"]}}, put])
    assert [type(o).__name__ for o in ops] == ["Delete", "Put"]


BAD_KEYS: list[list[str]] = [
    ["a"] * 21,
    ["x" * 501],
    ["a", "b" * 500],
    ["x" * 100] * 5 + ["y"],
    ["a", ""],
    [""],
    [],
    ["a\u0001b"],
    ["a\u001fb"],
    ["a\u007fb"],
    ["a", "b\nc"],
]


@pytest.mark.parametrize("elements", BAD_KEYS)
def test_invalid_keys_are_400_on_the_wire(elements: list[str]) -> None:
    with pytest.raises(BadRequestError):
        parse_operations([wire_put(elements, table())])
    with pytest.raises(BadRequestError):
        parse_operations([{"type": "DELETE", "key": {"elements": elements}}])


@pytest.mark.parametrize("elements", [["a"] * 21, ["x" * 501], ["a", ""], ["a\u0001b"]])
def test_invalid_keys_are_400_in_commit(vs: VersionStore, elements: list[str]) -> None:
    with pytest.raises(BadRequestError):
        commit(vs, [Put(tuple(elements), table())])
    assert head(vs) == NO_ANCESTOR


@pytest.mark.parametrize(
    "elements",
    [["a"] * 20, ["x" * 500], ["a b", "c.d", "ü", "/%\\*"], ["\u0020"], ["a\u0080"]],
    ids=["20-elements", "500-chars", "odd-chars", "space", "c1-control-is-fine"],
)
def test_valid_keys_on_the_wire(elements: list[str]) -> None:
    [op] = parse_operations([wire_put(elements, table())])
    assert op.key == tuple(elements)


def test_key_length_limit_counts_element_characters_only() -> None:
    """Nessie's ContentKey limit is the sum of the element lengths (5 x 100 is valid)."""
    elements = ["x" * 100] * 5
    [op] = parse_operations([wire_put(elements, table())])
    assert op.key == tuple(elements)


# -- namespaces -------------------------------------------------------------------------------


def test_top_level_keys_need_no_namespace(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table()), Put(("v",), view())])
    assert sorted(live(vs, r.hash)) == [("t",), ("v",)]


def test_missing_parent_namespace(vs: VersionStore) -> None:
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("db", "t"), table())])
    err = ei.value
    assert err.status == 409
    assert err.conflicts == [
        Conflict(CT.NAMESPACE_ABSENT, ("db",), "namespace 'db' must exist")
    ]
    assert err.message == "Namespace 'db' must exist."
    assert head(vs) == NO_ANCESTOR


def test_every_missing_ancestor_is_reported(vs: VersionStore) -> None:
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a", "b", "c", "t"), table())])
    assert sorted(conflicts_of(ei.value)) == sorted(
        [
            (CT.NAMESPACE_ABSENT, ("a",)),
            (CT.NAMESPACE_ABSENT, ("a", "b")),
            (CT.NAMESPACE_ABSENT, ("a", "b", "c")),
        ]
    )
    assert ei.value.message.startswith(
        "There are multiple conflicts that prevent committing the provided operations: "
    )
    commit(vs, [Put(("a",), ns("a"))])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a", "b", "c", "t"), table())])
    assert sorted(conflicts_of(ei.value)) == [
        (CT.NAMESPACE_ABSENT, ("a", "b")),
        (CT.NAMESPACE_ABSENT, ("a", "b", "c")),
    ]


def test_missing_namespace_reported_once_for_several_keys(vs: VersionStore) -> None:
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("db", "t1"), table()), Put(("db", "t2"), table())])
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_ABSENT, ("db",))]


def test_namespaces_need_their_parent_too(vs: VersionStore) -> None:
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a", "b"), ns("a", "b"))])
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_ABSENT, ("a",))]


def test_namespace_created_in_the_same_commit(vs: VersionStore) -> None:
    r = commit(
        vs,
        [
            Put(("a", "b", "t"), table()),
            Put(("a", "b"), ns("a", "b")),
            Put(("a",), ns("a")),
        ],
    )
    assert sorted(live(vs, r.hash)) == [("a",), ("a", "b"), ("a", "b", "t")]


def test_parent_that_is_not_a_namespace(vs: VersionStore) -> None:
    commit(vs, [Put(("t",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("t", "x"), table())])
    [c] = ei.value.conflicts
    assert (c.conflict_type, c.key) == (CT.NOT_A_NAMESPACE, ("t",))
    assert c.message.startswith(
        "expecting the key 't' to be a namespace, but is not a namespace ("
    )
    assert ei.value.message == c.message[0].upper() + c.message[1:] + "."


def test_grandparent_that_is_not_a_namespace(vs: VersionStore) -> None:
    commit(vs, [Put(("t",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("t", "x", "y"), table())])
    assert sorted(conflicts_of(ei.value)) == sorted(
        [(CT.NAMESPACE_ABSENT, ("t", "x")), (CT.NOT_A_NAMESPACE, ("t",))]
    )


def test_rename_target_needs_a_namespace(vs: VersionStore) -> None:
    r = commit(vs, [Put(("t",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("t",)), Put(("db", "t"), table(cid=ids(r)[("t",)]))])
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_ABSENT, ("db",))]


def test_deleting_a_non_empty_namespace(vs: VersionStore) -> None:
    commit(vs, [Put(("db",), ns("db")), Put(("db", "t"), table())])
    h = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("db",))])
    assert ei.value.conflicts == [
        Conflict(CT.NAMESPACE_NOT_EMPTY, ("db",), "namespace 'db' is not empty")
    ]
    assert ei.value.message == "Namespace 'db' is not empty."
    assert head(vs) == h


def test_deleting_a_namespace_with_its_content(vs: VersionStore) -> None:
    commit(vs, [Put(("db",), ns("db")), Put(("db", "t"), table()), Put(("dbx",), ns("dbx"))])
    r = commit(vs, [Delete(("db",)), Delete(("db", "t"))])
    assert sorted(live(vs, r.hash)) == [("dbx",)]


def test_deleting_an_empty_namespace_next_to_similar_keys(vs: VersionStore) -> None:
    commit(
        vs,
        [
            Put(("db",), ns("db")),
            Put(("db2",), ns("db2")),
            Put(("db2", "t"), table()),
            Put(("d",), ns("d")),
            Put(("d", "b"), table()),
        ],
    )
    commit(vs, [Delete(("db",))])
    assert ("db",) not in live(vs)


def test_deleting_nested_namespaces_with_live_content(vs: VersionStore) -> None:
    commit(
        vs,
        [Put(("a",), ns("a")), Put(("a", "b"), ns("a", "b")), Put(("a", "b", "t"), table())],
    )
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("a",)), Delete(("a", "b"))])
    assert sorted(conflicts_of(ei.value)) == [
        (CT.NAMESPACE_NOT_EMPTY, ("a",)),
        (CT.NAMESPACE_NOT_EMPTY, ("a", "b")),
    ]
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("a",))])
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_NOT_EMPTY, ("a",))]


def test_replacing_a_non_empty_namespace_with_a_table(vs: VersionStore) -> None:
    r = commit(vs, [Put(("db",), ns("db")), Put(("db", "t"), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("db",)), Put(("db",), table())])
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_NOT_EMPTY, ("db",))]
    assert head(vs) == r.hash


def test_namespaces_are_checked_against_head(vs: VersionStore) -> None:
    """Namespace rules use the HEAD state, not the (stale) expected state."""
    h0 = commit(vs, [Put(("x",), table())]).hash
    commit(vs, [Put(("db",), ns("db"))])
    r = commit(vs, [Put(("db", "t"), table())], expected=h0)
    assert ("db", "t") in live(vs, r.hash)

    h1 = head(vs)
    commit(vs, [Put(("gone",), ns("gone"))])
    h2 = head(vs)
    commit(vs, [Delete(("gone",))])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("gone", "t"), table())], expected=h2)
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_ABSENT, ("gone",))]
    del h1


def test_table_below_namespace_created_concurrently_blocks_its_delete(vs: VersionStore) -> None:
    commit(vs, [Put(("db",), ns("db"))])
    h = head(vs)
    commit(vs, [Put(("db", "t"), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("db",))], expected=h)
    assert conflicts_of(ei.value) == [(CT.NAMESPACE_NOT_EMPTY, ("db",))]


# -- conflict detection --------------------------------------------------------------------------


@pytest.fixture
def moved(vs: VersionStore) -> tuple[VersionStore, str, dict[Key, str]]:
    """main with tables a, b, c committed at h1 (returned), then b changed on HEAD."""
    r = commit(vs, [Put(("a",), table()), Put(("b",), table()), Put(("c",), table())])
    commit(vs, [Put(("b",), table("s3://b/m2.json", ids(r)[("b",)]))])
    return vs, r.hash, ids(r)


def test_untouched_keys_land_on_the_moved_branch(
    moved: tuple[VersionStore, str, dict[Key, str]],
) -> None:
    vs, h1, cids = moved
    h2 = head(vs)
    r = commit(vs, [Put(("a",), table("s3://b/a2.json", cids[("a",)]))], expected=h1)
    assert r.commit.parents == (h2,)
    assert head(vs) == r.hash
    assert vs.get_content(r.hash, ("a",)).content["metadataLocation"] == "s3://b/a2.json"
    # the concurrent change to b is kept
    assert vs.get_content(r.hash, ("b",)).content["metadataLocation"] == "s3://b/m2.json"
    # new keys and deletes of unchanged keys too
    r2 = commit(vs, [Put(("n",), table()), Delete(("c",))], expected=h1)
    assert r2.commit.parents == (r.hash,)
    assert sorted(live(vs, r2.hash)) == [("a",), ("b",), ("n",)]


def test_commit_at_head_has_head_as_parent(vs: VersionStore) -> None:
    r1 = commit(vs, [Put(("a",), table())], expected=NO_ANCESTOR)
    assert r1.commit.parents == (NO_ANCESTOR,)
    r2 = commit(vs, [Put(("b",), table())])
    assert r2.commit.parents == (r1.hash,)
    assert r2.branch == "main"
    assert re.fullmatch(r"[0-9a-f]{64}", r2.hash)


def test_no_ancestor_is_a_valid_stale_expected_hash(vs: VersionStore) -> None:
    r1 = commit(vs, [Put(("a",), table())])
    r2 = commit(vs, [Put(("b",), table())], expected=NO_ANCESTOR)
    assert r2.commit.parents == (r1.hash,)
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a",), table())], expected=NO_ANCESTOR)
    assert conflicts_of(ei.value) == [(CT.KEY_EXISTS, ("a",))]


def test_key_exists(vs: VersionStore) -> None:
    h0 = commit(vs, [Put(("x",), table())]).hash
    commit(vs, [Put(("n",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("n",), table())], expected=h0)
    assert ei.value.conflicts == [Conflict(CT.KEY_EXISTS, ("n",), "key 'n' already exists")]
    assert ei.value.message == "Key 'n' already exists."


def test_key_does_not_exist_after_concurrent_delete(
    moved: tuple[VersionStore, str, dict[Key, str]],
) -> None:
    vs, h1, cids = moved
    commit(vs, [Delete(("a",))])
    h = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a",), table("s3://b/a2.json", cids[("a",)]))], expected=h1)
    assert ei.value.conflicts == [
        Conflict(CT.KEY_DOES_NOT_EXIST, ("a",), "key 'a' does not exist")
    ]
    assert ei.value.message == "Key 'a' does not exist."
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("a",))], expected=h1)
    assert conflicts_of(ei.value) == [(CT.KEY_DOES_NOT_EXIST, ("a",))]
    assert head(vs) == h


def test_delete_of_absent_key(vs: VersionStore) -> None:
    r = commit(vs, [Put(("a",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("zz",))])
    assert ei.value.conflicts == [
        Conflict(CT.KEY_DOES_NOT_EXIST, ("zz",), "key 'zz' does not exist")
    ]
    assert ei.value.status == 409
    assert head(vs) == r.hash
    with pytest.raises(ReferenceConflictError):
        commit(vs, [Delete(("zz",))], expected=NO_ANCESTOR)


def test_payload_differs(moved: tuple[VersionStore, str, dict[Key, str]]) -> None:
    vs, h1, cids = moved
    commit(vs, [Delete(("a",)), Put(("a",), view())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a",), table("s3://b/a2.json", cids[("a",)]))], expected=h1)
    assert ei.value.conflicts == [
        Conflict(
            CT.PAYLOAD_DIFFERS,
            ("a",),
            "payload of existing and expected content for key 'a' are different",
        )
    ]


def test_content_id_differs(moved: tuple[VersionStore, str, dict[Key, str]]) -> None:
    vs, h1, cids = moved
    commit(vs, [Delete(("a",)), Put(("a",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("a",), table("s3://b/a2.json", cids[("a",)]))], expected=h1)
    assert ei.value.conflicts == [
        Conflict(
            CT.CONTENT_ID_DIFFERS,
            ("a",),
            "content IDs of existing and expected content for key 'a' are different",
        )
    ]


def test_value_differs(moved: tuple[VersionStore, str, dict[Key, str]]) -> None:
    vs, h1, cids = moved
    h = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Put(("b",), table("s3://b/m3.json", cids[("b",)]))], expected=h1)
    assert ei.value.conflicts == [
        Conflict(
            CT.VALUE_DIFFERS,
            ("b",),
            "values of existing and expected content for key 'b' are different",
        )
    ]
    assert ei.value.message == (
        "Values of existing and expected content for key 'b' are different."
    )
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Delete(("b",))], expected=h1)
    assert conflicts_of(ei.value) == [(CT.VALUE_DIFFERS, ("b",))]
    assert head(vs) == h


def test_unchanged_operation(moved: tuple[VersionStore, str, dict[Key, str]]) -> None:
    vs, h1, cids = moved
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Unchanged(("b",)), Put(("n",), table())], expected=h1)
    assert conflicts_of(ei.value) == [(CT.VALUE_DIFFERS, ("b",))]
    r = commit(vs, [Unchanged(("a",)), Put(("n",), table())], expected=h1)
    assert [op[0] for op in r.commit.ops] == ["PUT"]
    assert [tuple(op[1]) for op in r.commit.ops] == [("n",)]
    del cids


def test_unchanged_operation_on_concurrently_deleted_and_created_keys(
    moved: tuple[VersionStore, str, dict[Key, str]],
) -> None:
    vs, h1, _ = moved
    commit(vs, [Delete(("a",)), Put(("new",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        commit(vs, [Unchanged(("a",)), Unchanged(("new",)), Put(("z",), table())], expected=h1)
    assert sorted(conflicts_of(ei.value)) == sorted(
        [(CT.KEY_DOES_NOT_EXIST, ("a",)), (CT.KEY_EXISTS, ("new",))]
    )


def test_all_conflicts_are_reported_together(
    moved: tuple[VersionStore, str, dict[Key, str]],
) -> None:
    vs, h1, cids = moved
    commit(vs, [Delete(("a",)), Put(("n",), table())])
    h = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        commit(
            vs,
            [
                Put(("a",), table("s3://b/a2.json", cids[("a",)])),
                Put(("b",), table("s3://b/b3.json", cids[("b",)])),
                Put(("n",), table()),
                Delete(("missing",)),
                Put(("db", "t"), table()),
                Put(("c",), table("s3://b/c2.json", cids[("c",)])),
            ],
            expected=h1,
        )
    err = ei.value
    assert sorted(conflicts_of(err)) == sorted(
        [
            (CT.KEY_DOES_NOT_EXIST, ("a",)),
            (CT.VALUE_DIFFERS, ("b",)),
            (CT.KEY_EXISTS, ("n",)),
            (CT.KEY_DOES_NOT_EXIST, ("missing",)),
            (CT.NAMESPACE_ABSENT, ("db",)),
        ]
    )
    prefix = "There are multiple conflicts that prevent committing the provided operations: "
    assert err.message == prefix + ", ".join(c.message for c in err.conflicts) + "."
    assert err.details() == {
        "type": "REFERENCE_CONFLICTS",
        "conflicts": [c.to_json() for c in err.conflicts],
    }
    assert head(vs) == h


def test_reput_of_identical_content_creates_a_commit(vs: VersionStore) -> None:
    r = commit(vs, [Put(("a",), table())])
    same = table(cid=ids(r)[("a",)])
    r2 = commit(vs, [Put(("a",), same)])
    assert r2.hash != r.hash
    assert head(vs) == r2.hash
    assert r2.commit.parents == (r.hash,)
    assert vs.entries(r.hash).items == vs.entries(r2.hash).items
    assert vs.diff(r.hash, r2.hash).items == []


def test_reput_identical_content_at_stale_hash_is_no_conflict(
    moved: tuple[VersionStore, str, dict[Key, str]],
) -> None:
    """Only touched keys whose state changed conflict; b was changed, c was not."""
    vs, h1, cids = moved
    r = commit(vs, [Put(("c",), table(cid=cids[("c",)]))], expected=h1)
    assert head(vs) == r.hash


# -- expected hash and target -------------------------------------------------------------------


def test_expected_hash_not_in_branch_history(vs: VersionStore) -> None:
    commit(vs, [Put(("a",), table())])
    vs.create_reference("dev", "BRANCH", NO_ANCESTOR)
    other = commit(vs, [Put(("o",), table())], branch="dev").hash
    with pytest.raises(ReferenceNotFoundError) as ei:
        commit(vs, [Put(("b",), table())], expected=other)
    assert ei.value.message == f"Could not find commit '{other}' in reference 'main'."
    assert ei.value.status == 404


def test_expected_hash_ahead_of_the_branch(vs: VersionStore) -> None:
    h1 = commit(vs, [Put(("a",), table())]).hash
    vs.create_reference("dev", "BRANCH", h1)
    ahead = commit(vs, [Put(("b",), table())], branch="dev").hash
    with pytest.raises(ReferenceNotFoundError):
        commit(vs, [Put(("c",), table())], expected=ahead)
    assert head(vs) == h1


def test_expected_hash_unknown_or_malformed(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        commit(vs, [Put(("a",), table())], expected="ab" * 32)
    with pytest.raises(BadRequestError):
        commit(vs, [Put(("a",), table())], expected="nothex!")
    with pytest.raises(BadRequestError):
        vs.commit("main", None, {}, [Put(("a",), table())])


def test_commit_on_a_tag_is_400(vs: VersionStore) -> None:
    vs.create_reference("v1", "TAG", NO_ANCESTOR)
    with pytest.raises(BadRequestError) as ei:
        commit(vs, [Put(("a",), table())], branch="v1")
    assert ei.value.message.endswith("must be a branch.")
    assert head(vs, "v1") == NO_ANCESTOR


def test_commit_on_missing_branch_is_404(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.commit("nope", NO_ANCESTOR, {}, [Put(("a",), table())])


def test_commits_on_branches_are_independent(vs: VersionStore) -> None:
    base = commit(vs, [Put(("a",), table())]).hash
    vs.create_reference("dev", "BRANCH", base)
    commit(vs, [Put(("d",), table())], branch="dev")
    commit(vs, [Put(("m",), table())])
    assert sorted(live(vs, head(vs, "dev"))) == [("a",), ("d",)]
    assert sorted(live(vs)) == [("a",), ("m",)]
    assert vs.entries(base, KeyRange()).items == vs.entries(base).items


# -- commit meta --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "meta",
    [
        {"committer": "eve"},
        {"commitTime": "2021-04-07T14:42:25.534748Z"},
        {"hash": "ab" * 32},
        {"parentCommitHashes": ["ab" * 32]},
    ],
)
def test_server_owned_meta_fields_are_400(vs: VersionStore, meta: dict[str, Any]) -> None:
    with pytest.raises(BadRequestError):
        vs.commit("main", NO_ANCESTOR, {"message": "m", **meta}, [Put(("a",), table())])
    assert head(vs) == NO_ANCESTOR


def test_null_server_owned_meta_fields_are_fine(vs: VersionStore) -> None:
    meta: dict[str, Any] = {
        "message": "m",
        "committer": None,
        "commitTime": None,
        "hash": None,
        "parentCommitHashes": [],
    }
    r = vs.commit("main", NO_ANCESTOR, meta, [Put(("a",), table())])
    assert r.commit.meta["message"] == "m"


def test_meta_defaults(vs: VersionStore) -> None:
    r = vs.commit("main", NO_ANCESTOR, {"message": "hello"}, [Put(("a",), table())], "alice")
    meta = r.commit.meta
    assert meta["committer"] == "alice"
    assert meta["authors"] == ["alice"]
    assert meta["allSignedOffBy"] == []
    assert meta["message"] == "hello"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", meta["commitTime"])
    assert meta["authorTime"] == meta["commitTime"]
    assert meta["allProperties"] == {}


def test_meta_keeps_client_fields(vs: VersionStore) -> None:
    meta = {
        "message": "m",
        "authors": ["a1", "a2"],
        "allSignedOffBy": ["s1"],
        "authorTime": "2020-01-01T00:00:00Z",
        "allProperties": {"k": ["v1", "v2"]},
    }
    r = vs.commit("main", NO_ANCESTOR, meta, [Put(("a",), table())], "bob")
    out = r.commit.meta
    assert out["committer"] == "bob"
    assert out["authors"] == ["a1", "a2"]
    assert out["allSignedOffBy"] == ["s1"]
    assert out["authorTime"] == "2020-01-01T00:00:00Z"
    assert out["allProperties"] == {"k": ["v1", "v2"]}


def test_meta_v1_fields_convert(vs: VersionStore) -> None:
    meta = {"message": "m", "author": "carol", "signedOffBy": "dave", "properties": {"k": "v"}}
    r = vs.commit("main", NO_ANCESTOR, meta, [Put(("a",), table())])
    out = r.commit.meta
    assert out["authors"] == ["carol"]
    assert out["allSignedOffBy"] == ["dave"]
    assert out["allProperties"] == {"k": ["v"]}


def test_meta_v2_fields_win_over_v1(vs: VersionStore) -> None:
    meta = {
        "author": "old",
        "authors": ["new"],
        "properties": {"k": "old"},
        "allProperties": {"k": ["new"]},
    }
    r = vs.commit("main", NO_ANCESTOR, meta, [Put(("a",), table())])
    assert r.commit.meta["authors"] == ["new"]
    assert r.commit.meta["allProperties"] == {"k": ["new"]}


@pytest.mark.parametrize(
    "meta",
    [
        {"message": 1},
        {"authors": [1]},
        {"allProperties": ["x"]},
        {"properties": {"k": 1}},
        {"authorTime": 5},
    ],
)
def test_mistyped_meta_is_400(vs: VersionStore, meta: dict[str, Any]) -> None:
    with pytest.raises(BadRequestError):
        vs.commit("main", NO_ANCESTOR, meta, [Put(("a",), table())])


def test_meta_without_message(vs: VersionStore) -> None:
    r = vs.commit("main", NO_ANCESTOR, {}, [Put(("a",), table())])
    assert r.commit.meta["message"] == ""
    r2 = vs.commit("main", r.hash, None, [Put(("b",), table())])
    assert r2.commit.meta["message"] == ""
