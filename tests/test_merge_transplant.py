"""Merge (squash onto the target with two parents), transplant (replay commit by commit)
and the merge base, including conflicts, key merge modes, dry runs and namespace rules.

Semantics follow nessie-api.md sections 2 (MergeResponse, Merge/Transplant bodies) and
5 (Merge, Transplant).
"""

from __future__ import annotations

from typing import Any

import pytest

from loch.errors import (
    BadRequestError,
    ConflictType,
    ReferenceConflictError,
    ReferenceNotFoundError,
)
from loch.model.keys import Key
from loch.store import NO_ANCESTOR
from loch.versioning import (
    CommitResult,
    Delete,
    KeyMergeMode,
    MergeResult,
    Operation,
    Put,
    VersionStore,
)

CT = ConflictType

# -- helpers ----------------------------------------------------------------------------------


def table(location: str = "s3://b/m1.json", cid: str | None = None) -> dict[str, Any]:
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


def ns(*elements: str) -> dict[str, Any]:
    return {"type": "NAMESPACE", "elements": list(elements)}


def head(vs: VersionStore, branch: str = "main") -> str:
    return vs.get_reference(branch).hash


def commit(
    vs: VersionStore, branch: str, ops: list[Operation], message: str = "test"
) -> CommitResult:
    return vs.commit(branch, head(vs, branch), {"message": message}, ops)


def state(vs: VersionStore, at: str) -> dict[Key, tuple[str, str, str]]:
    """Key → leaf value (content id, type, value id) at a commit."""
    return dict(vs.entries(at).items)


def location(vs: VersionStore, at: str, key: Key) -> str:
    loc = vs.get_content(at, key).content["metadataLocation"]
    assert isinstance(loc, str)
    return loc


def cid_of(vs: VersionStore, at: str, key: Key) -> str:
    cid = vs.get_content(at, key).content["id"]
    assert isinstance(cid, str)
    return cid


def update(vs: VersionStore, branch: str, key: Key, loc: str) -> CommitResult:
    """Commit a new metadata location for an existing table."""
    cid = cid_of(vs, head(vs, branch), key)
    return commit(vs, branch, [Put(key, table(loc, cid))], f"update {'.'.join(key)} to {loc}")


def merge(vs: VersionStore, source: str, target: str = "main", **kw: Any) -> MergeResult:
    return vs.merge(target, head(vs, target), source, head(vs, source), **kw)


def first_parent_log(vs: VersionStore, at: str) -> list[str]:
    return [c.id for c in vs.log(at).items]


@pytest.fixture
def repo(vs: VersionStore) -> VersionStore:
    """main: namespace db with tables db.a, db.b and top-level t; branch dev at that commit."""
    commit(
        vs,
        "main",
        [
            Put(("db",), ns("db")),
            Put(("db", "a"), table("s3://a/0")),
            Put(("db", "b"), table("s3://b/0")),
            Put(("t",), table("s3://t/0")),
        ],
        "base",
    )
    vs.create_reference("dev", "BRANCH", head(vs))
    return vs


def keys_of(result: MergeResult) -> list[Key]:
    return [d.key for d in result.details]


# -- merge: success ---------------------------------------------------------------------------


def test_merge_applies_squashed_diff_with_two_parents(repo: VersionStore) -> None:
    vs = repo
    base = head(vs)
    update(vs, "dev", ("db", "a"), "s3://a/1")
    c = commit(vs, "dev", [Put(("db", "c"), table("s3://c/0")), Delete(("db", "b"))]).added_contents
    c_id = dict(c)[("db", "c")]
    update(vs, "main", ("t",), "s3://t/1")
    target, src = head(vs), head(vs, "dev")

    r = vs.merge("main", target, "dev", src)

    assert r.was_applied and r.was_successful
    assert r.common_ancestor == base
    assert r.effective_target_hash == target
    assert r.expected_hash == target
    assert r.target_branch == "main"
    assert r.resultant_target_hash == head(vs) != target
    assert [c.id for c in r.new_commits] == [head(vs)]
    merged = vs.commit_of(head(vs))
    assert merged.parents == (target, src)
    assert merged.meta["message"] == f"Merged dev at {src} into main at {target}"
    assert sorted(keys_of(r)) == [("db", "a"), ("db", "b"), ("db", "c")]
    assert all(d.behavior == "NORMAL" and d.conflict is None for d in r.details)
    now = head(vs)
    assert sorted(state(vs, now)) == [("db",), ("db", "a"), ("db", "c"), ("t",)]
    assert location(vs, now, ("db", "a")) == "s3://a/1"
    assert location(vs, now, ("t",)) == "s3://t/1"
    assert cid_of(vs, now, ("db", "c")) == c_id
    assert cid_of(vs, now, ("db", "a")) == cid_of(vs, base, ("db", "a"))
    # one commit on the first-parent chain: merge, t update, base
    assert len(first_parent_log(vs, now)) == 3
    # the squashed change is exactly the diff merge-base -> source
    assert vs.diff(target, now).items == vs.diff(base, src).items


def test_merge_stored_operations_describe_the_change(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("db", "a"), "s3://a/1")
    commit(vs, "dev", [Delete(("db", "b"))])
    r = merge(vs, "dev")
    assert r.resultant_target_hash is not None
    ops = vs.commit_of(r.resultant_target_hash).ops
    assert sorted((op[0], tuple(op[1])) for op in ops) == [
        ("DELETE", ("db", "b")),
        ("PUT", ("db", "a")),
    ]


def test_merge_into_an_unchanged_target_still_creates_a_merge_commit(repo: VersionStore) -> None:
    vs = repo
    target = head(vs)
    update(vs, "dev", ("t",), "s3://t/1")
    src = head(vs, "dev")
    r = merge(vs, "dev")
    assert r.was_applied
    assert vs.commit_of(head(vs)).parents == (target, src)
    assert state(vs, head(vs)) == state(vs, src)


def test_merge_message_overrides(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    r = merge(vs, "dev", meta={"message": "from meta", "authors": ["ann"]}, message="from arg")
    assert r.resultant_target_hash is not None
    meta = vs.commit_of(r.resultant_target_hash).meta
    assert meta["message"] == "from meta"
    assert meta["authors"] == ["ann"]
    update(vs, "dev", ("t",), "s3://t/2")
    r = merge(vs, "dev", message="from arg", committer="carl")
    assert r.resultant_target_hash is not None
    meta = vs.commit_of(r.resultant_target_hash).meta
    assert meta["message"] == "from arg"
    assert meta["committer"] == "carl"
    assert meta["authors"] == ["carl"]


def test_merge_from_detached_hash(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    src, target = head(vs, "dev"), head(vs)
    r = vs.merge("main", target, None, src)
    assert r.resultant_target_hash is not None
    assert vs.commit_of(r.resultant_target_hash).meta["message"] == (
        f"Merged DETACHED at {src} into main at {target}"
    )
    update(vs, "dev", ("t",), "s3://t/2")
    r = vs.merge("main", head(vs), "DETACHED", head(vs, "dev"))
    assert r.was_applied


def test_merge_from_a_tag(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    vs.create_reference("v1", "TAG", head(vs, "dev"))
    r = vs.merge("main", head(vs), "v1", head(vs, "v1"))
    assert r.was_applied
    assert location(vs, head(vs), ("t",)) == "s3://t/1"


def test_merge_with_stale_expected_hash_lands_on_head(repo: VersionStore) -> None:
    vs = repo
    stale = head(vs)
    update(vs, "main", ("t",), "s3://t/1")
    update(vs, "dev", ("db", "a"), "s3://a/1")
    target = head(vs)
    r = vs.merge("main", stale, "dev", head(vs, "dev"))
    assert r.was_applied
    assert r.effective_target_hash == target
    assert r.expected_hash == stale
    assert vs.commit_of(head(vs)).parents[0] == target


def test_merge_of_orphan_history(vs: VersionStore) -> None:
    commit(vs, "main", [Put(("m",), table())])
    vs.create_reference("orphan", "BRANCH", NO_ANCESTOR)
    commit(vs, "orphan", [Put(("o",), table())])
    r = merge(vs, "orphan")
    assert r.was_applied
    assert r.common_ancestor == NO_ANCESTOR
    assert sorted(state(vs, head(vs))) == [("m",), ("o",)]


def test_merge_into_empty_branch(vs: VersionStore) -> None:
    vs.create_reference("dev", "BRANCH", NO_ANCESTOR)
    commit(vs, "dev", [Put(("x",), table())])
    r = merge(vs, "dev")
    assert r.was_applied and r.common_ancestor == NO_ANCESTOR
    assert vs.commit_of(head(vs)).parents == (NO_ANCESTOR, head(vs, "dev"))


# -- merge: nothing to do -----------------------------------------------------------------------


def test_merge_when_source_is_the_merge_base(repo: VersionStore) -> None:
    vs = repo
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = merge(vs, "dev")
    assert (r.was_applied, r.was_successful) == (False, True)
    assert r.resultant_target_hash == target
    assert r.common_ancestor == head(vs, "dev")
    assert r.details == []
    assert head(vs) == target


def test_merging_twice_is_a_no_op(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    merge(vs, "dev")
    target = head(vs)
    r = merge(vs, "dev")
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, True, target)
    assert head(vs) == target


def test_merge_with_nothing_left_to_apply_writes_nothing(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = merge(vs, "dev")
    assert (r.was_applied, r.was_successful) == (False, True)
    assert r.resultant_target_hash == target
    assert keys_of(r) == [("t",)]
    assert head(vs) == target


# -- merge: conflicts ---------------------------------------------------------------------------


def conflicting(vs: VersionStore) -> None:
    """dev and main change db.a and t differently; dev also changes db.b alone."""
    update(vs, "dev", ("db", "a"), "s3://a/dev")
    update(vs, "dev", ("t",), "s3://t/dev")
    update(vs, "dev", ("db", "b"), "s3://b/dev")
    update(vs, "main", ("db", "a"), "s3://a/main")
    update(vs, "main", ("t",), "s3://t/main")


def test_merge_conflicts_raise_409(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    err = ei.value
    assert err.status == 409
    assert err.message == "The following keys have been changed in conflict: 'db.a', 't'"
    assert [(c.conflict_type, c.key, c.message) for c in err.conflicts] == [
        (
            CT.VALUE_DIFFERS,
            ("db", "a"),
            "values of existing and expected content for key 'db.a' are different",
        ),
        (
            CT.VALUE_DIFFERS,
            ("t",),
            "values of existing and expected content for key 't' are different",
        ),
    ]
    assert head(vs) == target


def test_merge_conflict_types(repo: VersionStore) -> None:
    vs = repo
    a_id = cid_of(vs, head(vs), ("db", "a"))
    # source: updates db.a, deletes db.b, creates n; target: deletes db.a, updates db.b,
    # creates n independently
    commit(
        vs,
        "dev",
        [Put(("db", "a"), table("s3://a/1", a_id)), Delete(("db", "b")), Put(("n",), table())],
    )
    commit(vs, "main", [Delete(("db", "a")), Put(("n",), table())])
    update(vs, "main", ("db", "b"), "s3://b/1")
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    assert sorted((c.key, c.conflict_type) for c in ei.value.conflicts) == sorted(
        [
            (("db", "a"), CT.KEY_DOES_NOT_EXIST),
            (("db", "b"), CT.VALUE_DIFFERS),
            (("n",), CT.KEY_EXISTS),
        ]
    )
    assert ei.value.message == (
        "The following keys have been changed in conflict: 'db.a', 'db.b', 'n'"
    )


def test_merge_conflicts_as_result(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    r = merge(vs, "dev", return_conflicts=True)
    assert (r.was_applied, r.was_successful) == (False, False)
    assert r.resultant_target_hash is None
    assert r.effective_target_hash == target
    by_key = {d.key: d for d in r.details}
    assert sorted(by_key) == [("db", "a"), ("db", "b"), ("t",)]
    assert by_key[("db", "b")].conflict is None
    a_conflict = by_key[("db", "a")].conflict
    assert a_conflict is not None and a_conflict.conflict_type == CT.VALUE_DIFFERS
    t_conflict = by_key[("t",)].conflict
    assert t_conflict is not None and t_conflict.key == ("t",)
    assert head(vs) == target


def test_merge_dry_run_writes_nothing(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    target = head(vs)
    r = merge(vs, "dev", dry_run=True)
    assert (r.was_applied, r.was_successful) == (False, True)
    assert r.resultant_target_hash is None
    assert keys_of(r) == [("t",)]
    assert head(vs) == target
    assert r.new_commits == []


def test_merge_dry_run_with_conflicts(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    with pytest.raises(ReferenceConflictError):
        merge(vs, "dev", dry_run=True)
    r = merge(vs, "dev", dry_run=True, return_conflicts=True)
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, False, None)
    assert head(vs) == target


def test_identical_changes_on_both_sides_are_no_conflict(repo: VersionStore) -> None:
    vs = repo
    for branch in ("dev", "main"):
        update(vs, branch, ("db", "a"), "s3://a/same")
        commit(vs, branch, [Delete(("db", "b"))])
    update(vs, "dev", ("t",), "s3://t/1")
    r = merge(vs, "dev")
    assert r.was_applied and r.was_successful
    assert all(d.conflict is None for d in r.details)
    assert location(vs, head(vs), ("db", "a")) == "s3://a/same"
    assert location(vs, head(vs), ("t",)) == "s3://t/1"
    assert ("db", "b") not in state(vs, head(vs))


def test_namespace_added_on_both_sides_is_no_conflict(repo: VersionStore) -> None:
    vs = repo
    commit(vs, "dev", [Put(("ns2",), ns("ns2")), Put(("ns2", "x"), table())])
    commit(vs, "main", [Put(("ns2",), ns("ns2"))])
    main_ns_id = cid_of(vs, head(vs), ("ns2",))
    r = merge(vs, "dev")
    assert r.was_applied and r.was_successful
    now = head(vs)
    assert cid_of(vs, now, ("ns2",)) == main_ns_id
    assert ("ns2", "x") in state(vs, now)


def test_table_added_on_both_sides_is_a_conflict(repo: VersionStore) -> None:
    vs = repo
    commit(vs, "dev", [Put(("x",), table())])
    commit(vs, "main", [Put(("x",), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [(CT.KEY_EXISTS, ("x",))]


# -- merge: key modes ---------------------------------------------------------------------------


def test_default_mode_force_overwrites(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    r = merge(vs, "dev", default_mode="FORCE")
    assert r.was_applied and r.was_successful
    assert {d.behavior for d in r.details} == {"FORCE"}
    now = head(vs)
    assert location(vs, now, ("db", "a")) == "s3://a/dev"
    assert location(vs, now, ("t",)) == "s3://t/dev"
    assert location(vs, now, ("db", "b")) == "s3://b/dev"


def test_force_applies_a_source_delete(repo: VersionStore) -> None:
    vs = repo
    commit(vs, "dev", [Delete(("db", "b"))])
    update(vs, "main", ("db", "b"), "s3://b/main")
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [
        (CT.VALUE_DIFFERS, ("db", "b"))
    ]
    r = merge(vs, "dev", key_modes=[KeyMergeMode(("db", "b"), "FORCE")])
    assert r.was_applied
    assert ("db", "b") not in state(vs, head(vs))


def test_default_mode_drop_skips(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    r = merge(vs, "dev", default_mode="DROP")
    # every key dropped: nothing to apply
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, True, target)
    assert {d.behavior for d in r.details} == {"DROP"}
    assert head(vs) == target


def test_per_key_modes(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    r = merge(
        vs,
        "dev",
        key_modes=[
            KeyMergeMode(("db", "a"), "FORCE"),
            KeyMergeMode(("t",), "DROP"),
            KeyMergeMode(("db", "b"), "DROP"),
        ],
    )
    assert r.was_applied
    assert {d.key: d.behavior for d in r.details} == {
        ("db", "a"): "FORCE",
        ("t",): "DROP",
        ("db", "b"): "DROP",
    }
    now = head(vs)
    assert location(vs, now, ("db", "a")) == "s3://a/dev"
    assert location(vs, now, ("t",)) == "s3://t/main"
    assert location(vs, now, ("db", "b")) == "s3://b/0"  # dropped without a conflict


def test_per_key_mode_with_default(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev", default_mode="FORCE", key_modes=[KeyMergeMode(("t",), "NORMAL")])
    assert [c.key for c in ei.value.conflicts] == [("t",)]


def test_key_mode_for_key_not_in_the_merge_is_400(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    target = head(vs)
    for key in [("db", "a"), ("nope",)]:
        with pytest.raises(BadRequestError):
            merge(vs, "dev", key_modes=[KeyMergeMode(key, "FORCE")])
    assert head(vs) == target


@pytest.mark.parametrize("mode", ["SOMETIMES", ""])
def test_unknown_merge_behavior_is_400(repo: VersionStore, mode: str) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    with pytest.raises(BadRequestError):
        merge(vs, "dev", default_mode=mode or "x")
    with pytest.raises(BadRequestError):
        merge(vs, "dev", key_modes=[KeyMergeMode(("t",), mode or "y")])


def test_lowercase_merge_behavior(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    r = merge(vs, "dev", default_mode="force")
    assert r.was_applied


def test_expected_target_content_with_resolved_content(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    a_target = vs.get_content(target, ("db", "a")).content
    t_target = vs.get_content(target, ("t",)).content
    resolved = {**a_target, "metadataLocation": "s3://a/resolved"}
    r = merge(
        vs,
        "dev",
        key_modes=[
            KeyMergeMode(("db", "a"), "NORMAL", a_target, resolved),
            KeyMergeMode(("t",), "NORMAL", t_target),
        ],
    )
    assert r.was_applied and r.was_successful
    now = head(vs)
    assert location(vs, now, ("db", "a")) == "s3://a/resolved"
    # expected target content given without a resolution: the source value is applied
    assert location(vs, now, ("t",)) == "s3://t/dev"
    assert location(vs, now, ("db", "b")) == "s3://b/dev"


def test_expected_target_content_that_does_not_match(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    target = head(vs)
    stale = vs.get_content(vs.resolve("main~2").hash, ("db", "a")).content
    resolved = {**stale, "metadataLocation": "s3://a/resolved"}
    for behavior in ("NORMAL", "FORCE", "DROP"):
        with pytest.raises(ReferenceConflictError) as ei:
            merge(
                vs,
                "dev",
                key_modes=[
                    KeyMergeMode(("db", "a"), behavior, stale, resolved),
                    KeyMergeMode(("t",), "DROP"),
                ],
            )
        assert [c.key for c in ei.value.conflicts] == [("db", "a")]
    assert head(vs) == target


def test_resolved_content_requires_expected_target_content(repo: VersionStore) -> None:
    vs = repo
    conflicting(vs)
    a = vs.get_content(head(vs), ("db", "a")).content
    with pytest.raises(BadRequestError):
        merge(
            vs,
            "dev",
            key_modes=[KeyMergeMode(("db", "a"), "NORMAL", None, {**a, "metadataLocation": "x"})],
        )


# -- merge: namespaces and arguments -----------------------------------------------------------


def test_merge_result_must_satisfy_namespace_rules(repo: VersionStore) -> None:
    vs = repo
    # source empties and deletes db; target adds a table to db
    commit(vs, "dev", [Delete(("db", "a")), Delete(("db", "b")), Delete(("db",))])
    commit(vs, "main", [Put(("db", "new"), table())])
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    assert (CT.NAMESPACE_NOT_EMPTY, ("db",)) in [
        (c.conflict_type, c.key) for c in ei.value.conflicts
    ]


def test_merge_into_target_without_the_namespace(repo: VersionStore) -> None:
    vs = repo
    commit(vs, "dev", [Put(("db", "c"), table())])
    commit(vs, "main", [Delete(("db", "a")), Delete(("db", "b")), Delete(("db",))])
    with pytest.raises(ReferenceConflictError) as ei:
        merge(vs, "dev")
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [
        (CT.NAMESPACE_ABSENT, ("db",))
    ]


def test_merge_argument_errors(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("t",), "s3://t/1")
    src, target = head(vs, "dev"), head(vs)
    with pytest.raises(BadRequestError):
        vs.merge("main", target, "dev", None)
    with pytest.raises(BadRequestError):
        vs.merge("main", None, "dev", src)
    with pytest.raises(BadRequestError):
        vs.merge("main", target, "dev", "not-a-hash")
    with pytest.raises(ReferenceNotFoundError):
        vs.merge("main", target, "dev", "ab" * 32)
    with pytest.raises(ReferenceNotFoundError):
        vs.merge("main", target, "nope", src)
    with pytest.raises(ReferenceNotFoundError):
        vs.merge("nope", target, "dev", src)
    with pytest.raises(ReferenceNotFoundError):
        vs.merge("main", src, "dev", src)  # expected hash not in main's history
    vs.create_reference("v1", "TAG", target)
    with pytest.raises(BadRequestError):
        vs.merge("v1", target, "dev", src)
    assert head(vs) == target


# -- transplant --------------------------------------------------------------------------------


def dev_commits(vs: VersionStore) -> list[str]:
    """Three commits on dev: update db.a, add db.c, update db.c; oldest first."""
    h1 = update(vs, "dev", ("db", "a"), "s3://a/1").hash
    h2 = vs.commit(
        "dev", h1, {"message": "add c", "authors": ["ann"]}, [Put(("db", "c"), table("s3://c/0"))]
    ).hash
    h3 = update(vs, "dev", ("db", "c"), "s3://c/1").hash
    return [h1, h2, h3]


def test_transplant_replays_each_commit(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = vs.transplant("main", target, "dev", hashes, committer="tim")
    assert r.was_applied and r.was_successful
    assert r.common_ancestor is None
    assert r.effective_target_hash == target
    assert r.target_branch == "main"
    new = [c.id for c in r.new_commits]
    assert len(new) == 3
    assert r.resultant_target_hash == new[-1] == head(vs)
    assert first_parent_log(vs, head(vs))[:4] == [*reversed(new), target]
    for parent, c in zip([target, *new], r.new_commits, strict=False):
        assert c.parents == (parent,)
    for src, c in zip(hashes, r.new_commits, strict=True):
        old = vs.commit_of(src)
        assert c.meta["message"] == old.meta["message"]
        assert c.meta["authors"] == old.meta["authors"]
        assert c.meta["committer"] == "tim"
        assert c.id != src
        assert vs.diff(old.parents[0], src).items == vs.diff(c.parents[0], c.id).items
    assert vs.commit_of(new[1]).meta["authors"] == ["ann"]
    now = head(vs)
    assert location(vs, now, ("db", "c")) == "s3://c/1"
    assert location(vs, now, ("t",)) == "s3://t/1"
    assert cid_of(vs, now, ("db", "c")) == cid_of(vs, hashes[2], ("db", "c"))
    assert sorted(keys_of(r)) == [("db", "a"), ("db", "c")]


def test_transplant_single_commit(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = vs.transplant("main", target, "dev", hashes[:1], committer="tim")
    assert r.was_applied and r.was_successful
    assert r.common_ancestor is None
    [c] = r.new_commits
    assert c.parents == (target,)
    assert r.resultant_target_hash == c.id == head(vs)
    src = vs.commit_of(hashes[0])
    assert c.meta["message"] == src.meta["message"]
    assert c.meta["authors"] == src.meta["authors"]
    assert c.meta["committer"] == "tim"
    assert c.meta["commitTime"] >= src.meta["commitTime"]
    assert location(vs, c.id, ("db", "a")) == "s3://a/1"
    assert location(vs, c.id, ("t",)) == "s3://t/1"
    assert keys_of(r) == [("db", "a")]


def test_transplant_message_override_for_one_commit(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    r = vs.transplant("main", head(vs), "dev", hashes[1:2], message="override")
    assert [c.meta["message"] for c in r.new_commits] == ["override"]
    assert r.new_commits[0].meta["authors"] == ["ann"]


def test_transplant_message_ignored_for_several_commits(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    r = vs.transplant("main", head(vs), "dev", hashes[:2], message="override")
    assert [c.meta["message"] for c in r.new_commits] == [
        vs.commit_of(h).meta["message"] for h in hashes[:2]
    ]


def test_transplant_skips_empty_commits(repo: VersionStore) -> None:
    vs = repo
    h1 = update(vs, "dev", ("t",), "s3://t/1").hash
    h2 = update(vs, "dev", ("db", "a"), "s3://a/1").hash
    same = cid_of(vs, h2, ("db", "a"))
    h3 = commit(vs, "dev", [Put(("db", "a"), table("s3://a/1", same))], "no-op").hash
    update(vs, "main", ("t",), "s3://t/1")  # h1's change is already on main
    r = vs.transplant("main", head(vs), "dev", [h1, h2, h3])
    assert r.was_applied
    assert [c.meta["message"] for c in r.new_commits] == ["update db.a to s3://a/1"]


def test_transplant_with_nothing_to_apply(repo: VersionStore) -> None:
    vs = repo
    h1 = update(vs, "dev", ("t",), "s3://t/1").hash
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = vs.transplant("main", target, "dev", [h1])
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, True, target)
    assert head(vs) == target


def test_transplant_requires_a_contiguous_chain(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    target = head(vs)
    for seq in ([hashes[0], hashes[2]], [hashes[1], hashes[0]], [hashes[0], hashes[0]]):
        with pytest.raises(BadRequestError) as ei:
            vs.transplant("main", target, "dev", seq)
        assert ei.value.message == "Sequence of hashes is not contiguous."
    assert head(vs) == target


def test_transplant_argument_errors(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    target = head(vs)
    with pytest.raises(BadRequestError):
        vs.transplant("main", target, "dev", [])
    with pytest.raises(BadRequestError):
        vs.transplant("main", target, "dev", ["xyz"])
    with pytest.raises(ReferenceNotFoundError):
        vs.transplant("main", target, "dev", ["ab" * 32])
    with pytest.raises(ReferenceNotFoundError):
        vs.transplant("main", target, "nope", hashes)
    vs.create_reference("v1", "TAG", target)
    with pytest.raises(BadRequestError):
        vs.transplant("v1", target, "dev", hashes)
    with pytest.raises(BadRequestError):
        vs.transplant("main", target, "dev", hashes, key_modes=[KeyMergeMode(("t",), "FORCE")])
    assert head(vs) == target


def test_transplant_conflict(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    update(vs, "main", ("db", "a"), "s3://a/main")
    target = head(vs)
    with pytest.raises(ReferenceConflictError) as ei:
        vs.transplant("main", target, "dev", hashes[:1])
    assert ei.value.message == "The following keys have been changed in conflict: 'db.a'"
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [
        (CT.VALUE_DIFFERS, ("db", "a"))
    ]
    assert head(vs) == target
    r = vs.transplant("main", target, "dev", hashes[:1], return_conflicts=True)
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, False, None)
    assert r.common_ancestor is None
    [detail] = r.details
    assert detail.key == ("db", "a")
    assert detail.conflict is not None
    assert detail.conflict.conflict_type == CT.VALUE_DIFFERS
    assert head(vs) == target
    with pytest.raises(ReferenceConflictError):
        vs.transplant("main", target, "dev", hashes[:1], dry_run=True)
    r = vs.transplant("main", target, "dev", hashes[:1], default_mode="FORCE")
    assert r.was_applied
    assert location(vs, head(vs), ("db", "a")) == "s3://a/1"


def test_transplant_conflict_reports_only_conflicting_keys(repo: VersionStore) -> None:
    """A conflict in the first commit must not make later, independent commits conflict."""
    vs = repo
    hashes = dev_commits(vs)  # db.a updated; then db.c added and updated
    update(vs, "main", ("db", "a"), "s3://a/main")
    with pytest.raises(ReferenceConflictError) as ei:
        vs.transplant("main", head(vs), "dev", hashes)
    assert ei.value.message == "The following keys have been changed in conflict: 'db.a'"
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [
        (CT.VALUE_DIFFERS, ("db", "a"))
    ]


def test_transplant_dry_run(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    target = head(vs)
    r = vs.transplant("main", target, "dev", hashes[:1], dry_run=True)
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, True, None)
    assert head(vs) == target


def test_transplant_dry_run_of_several_commits(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    target = head(vs)
    r = vs.transplant("main", target, "dev", hashes, dry_run=True)
    assert (r.was_applied, r.was_successful, r.resultant_target_hash) == (False, True, None)
    assert head(vs) == target


def test_transplant_drop_mode(repo: VersionStore) -> None:
    vs = repo
    a_id = cid_of(vs, head(vs), ("db", "a"))
    t_id = cid_of(vs, head(vs), ("t",))
    h = commit(
        vs, "dev", [Put(("db", "a"), table("s3://a/1", a_id)), Put(("t",), table("s3://t/1", t_id))]
    ).hash
    r = vs.transplant("main", head(vs), "dev", [h], key_modes=[KeyMergeMode(("db", "a"), "DROP")])
    assert len(r.new_commits) == 1
    assert {d.key: d.behavior for d in r.details} == {("db", "a"): "DROP", ("t",): "NORMAL"}
    now = head(vs)
    assert location(vs, now, ("db", "a")) == "s3://a/0"
    assert location(vs, now, ("t",)) == "s3://t/1"


def test_transplant_with_stale_expected_hash(repo: VersionStore) -> None:
    vs = repo
    stale = head(vs)
    hashes = dev_commits(vs)
    update(vs, "main", ("t",), "s3://t/1")
    target = head(vs)
    r = vs.transplant("main", stale, "dev", hashes[:1])
    assert r.new_commits[0].parents == (target,)
    assert r.expected_hash == stale
    assert r.effective_target_hash == target


def test_transplant_namespace_rules(repo: VersionStore) -> None:
    vs = repo
    hashes = dev_commits(vs)
    commit(vs, "main", [Delete(("db", "a")), Delete(("db", "b")), Delete(("db",))])
    with pytest.raises(ReferenceConflictError) as ei:
        vs.transplant("main", head(vs), "dev", hashes[1:2])
    assert [(c.conflict_type, c.key) for c in ei.value.conflicts] == [
        (CT.NAMESPACE_ABSENT, ("db",))
    ]


# -- merge base ----------------------------------------------------------------------------------


def test_merge_base_linear_and_branches(repo: VersionStore) -> None:
    vs = repo
    base = head(vs)
    m1 = update(vs, "main", ("t",), "s3://t/1").hash
    m2 = update(vs, "main", ("t",), "s3://t/2").hash
    d1 = update(vs, "dev", ("db", "a"), "s3://a/1").hash
    assert vs.merge_base(m1, m2) == m1
    assert vs.merge_base(m2, m1) == m1
    assert vs.merge_base(m2, m2) == m2
    assert vs.merge_base(m2, d1) == base
    assert vs.merge_base(d1, m2) == base
    assert vs.merge_base(m2, NO_ANCESTOR) == NO_ANCESTOR
    vs.create_reference("orphan", "BRANCH", NO_ANCESTOR)
    o = commit(vs, "orphan", [Put(("o",), table())]).hash
    assert vs.merge_base(o, m2) == NO_ANCESTOR


def test_merge_base_after_a_merge(repo: VersionStore) -> None:
    vs = repo
    d1 = update(vs, "dev", ("db", "a"), "s3://a/1").hash
    merge(vs, "dev")
    update(vs, "main", ("db", "a"), "s3://a/main")  # main changes db.a again after the merge
    d2 = update(vs, "dev", ("db", "b"), "s3://b/1").hash
    assert vs.merge_base(head(vs), d2) == d1
    # the second merge only brings db.b: no conflict on db.a
    r = merge(vs, "dev")
    assert r.common_ancestor == d1
    assert keys_of(r) == [("db", "b")]
    now = head(vs)
    assert location(vs, now, ("db", "a")) == "s3://a/main"
    assert location(vs, now, ("db", "b")) == "s3://b/1"


def test_merge_base_of_merge_back(repo: VersionStore) -> None:
    vs = repo
    update(vs, "dev", ("db", "a"), "s3://a/1")
    m1 = update(vs, "main", ("t",), "s3://t/1").hash
    merge(vs, "main", target="dev")  # main into dev
    assert vs.merge_base(head(vs), head(vs, "dev")) == m1
    r = merge(vs, "dev")
    assert r.common_ancestor == m1
    assert keys_of(r) == [("db", "a")]


def test_merge_base_criss_cross(repo: VersionStore) -> None:
    vs = repo
    root = head(vs)
    m1 = update(vs, "main", ("t",), "s3://t/1").hash
    d1 = update(vs, "dev", ("db", "a"), "s3://a/1").hash
    vs.merge("main", m1, "dev", d1)
    vs.merge("dev", d1, "main", m1)
    m2, d2 = head(vs), head(vs, "dev")
    assert vs.commit_of(m2).parents == (m1, d1)
    assert vs.commit_of(d2).parents == (d1, m1)
    base = vs.merge_base(m2, d2)
    assert base in (m1, d1)
    assert base != root
    assert vs.merge_base(d2, m2) in (m1, d1)
    assert state(vs, m2) == state(vs, d2)
    m3 = update(vs, "main", ("t",), "s3://t/2").hash
    d3 = update(vs, "dev", ("db", "b"), "s3://b/1").hash
    assert vs.merge_base(m3, d3) in (m1, d1)


def test_merge_base_picks_the_nearest_common_ancestor(repo: VersionStore) -> None:
    """With several merges the nearest (not the oldest) common ancestor is chosen."""
    vs = repo
    for i in range(3):
        update(vs, "dev", ("db", "a"), f"s3://a/{i}")
        merge(vs, "dev")
        update(vs, "main", ("t",), f"s3://t/{i}")
    last_dev = head(vs, "dev")
    update(vs, "dev", ("db", "b"), "s3://b/x")
    assert vs.merge_base(head(vs), head(vs, "dev")) == last_dev
