"""Property-based tests of the version store (hypothesis, memory backend).

* ``diff(a, b)`` applied to the entries of ``a`` gives the entries of ``b``, also when
  replayed as a commit;
* merging changes made on disjoint keys equals applying both changes;
* transplanting a branch's commits gives the same state as merging the branch when
  nothing conflicts.

Histories are random sequences of creates, updates, deletes, replaces and renames over a
small key universe (top-level keys and keys below a namespace that always exists).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from loch.backends import open_store
from loch.model.keys import Key
from loch.store import NO_ANCESTOR
from loch.versioning import Delete, KeyRange, Operation, Put, VersionStore
from loch.versioning.index import LeafValue

NAMESPACE: Key = ("ns",)
KEYS: list[Key] = [(f"k{i:02d}",) for i in range(12)] + [("ns", f"a{i:02d}") for i in range(8)]
TYPES = ["ICEBERG_TABLE", "ICEBERG_VIEW", "DELTA_LAKE_TABLE"]

# No explain phase: on a failure it re-runs the (stateful) test for minutes.
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Entries = dict[Key, LeafValue]


@contextmanager
def memory_store() -> Iterator[VersionStore]:
    persist = open_store("memory://")
    try:
        yield VersionStore(persist)
    finally:
        persist.close()


def content(ctype: str, version: int, cid: str | None = None) -> dict[str, Any]:
    """Content of a type; ``version`` picks one of a few locations (repeats are likely)."""
    out: dict[str, Any]
    if ctype == "ICEBERG_TABLE":
        out = {
            "type": ctype,
            "metadataLocation": f"s3://t/{version}.json",
            "snapshotId": version,
            "schemaId": 0,
            "specId": 0,
            "sortOrderId": 0,
        }
    elif ctype == "ICEBERG_VIEW":
        out = {"type": ctype, "metadataLocation": f"s3://v/{version}", "versionId": version}
    else:
        out = {
            "type": ctype,
            "metadataLocationHistory": [f"s3://d/{version}"],
            "checkpointLocationHistory": [],
            "lastCheckpoint": None,
        }
    if cid is not None:
        out["id"] = cid
    return out


def entries(vs: VersionStore, at: str) -> Entries:
    return dict(vs.entries(at).items)


def head(vs: VersionStore, branch: str = "main") -> str:
    return vs.get_reference(branch).hash


def draw_ops(data: st.DataObject, live: Entries, allowed: list[Key]) -> list[Operation]:
    """Valid operations touching only ``allowed`` keys of a state with ``live`` entries."""
    chosen = data.draw(st.lists(st.sampled_from(allowed), min_size=1, max_size=6, unique=True))
    used: set[Key] = set(chosen)
    ops: list[Operation] = []
    for k in chosen:
        version = data.draw(st.integers(0, 2))
        if k not in live:
            ops.append(Put(k, content(data.draw(st.sampled_from(TYPES)), version)))
            continue
        cid, ctype, _ = live[k]
        action = data.draw(st.sampled_from(["update", "delete", "replace", "rename"]))
        if action == "rename":
            targets = [t for t in allowed if t not in live and t not in used]
            if targets:
                target = data.draw(st.sampled_from(targets))
                used.add(target)
                ops += [Delete(k), Put(target, content(ctype, version, cid))]
                continue
            action = "update"
        if action == "update":
            ops.append(Put(k, content(ctype, version, cid)))
        elif action == "delete":
            ops.append(Delete(k))
        else:
            ops += [Delete(k), Put(k, content(data.draw(st.sampled_from(TYPES)), version))]
    return ops


def random_commits(
    data: st.DataObject, vs: VersionStore, branch: str, allowed: list[Key], max_commits: int
) -> list[str]:
    """1..max_commits random commits on ``branch``; their hashes, oldest first."""
    hashes: list[str] = []
    for _ in range(data.draw(st.integers(1, max_commits))):
        h = head(vs, branch)
        ops = draw_ops(data, entries(vs, h), allowed)
        hashes.append(vs.commit(branch, h, {"message": f"{len(hashes)}"}, ops).hash)
    return hashes


def base_commit(data: st.DataObject, vs: VersionStore) -> str:
    """The namespace plus a random set of keys, committed on main."""
    initial = data.draw(st.lists(st.sampled_from(KEYS), max_size=len(KEYS), unique=True))
    ops: list[Operation] = [Put(NAMESPACE, {"type": "NAMESPACE", "elements": ["ns"]})]
    for k in initial:
        ops.append(Put(k, content(data.draw(st.sampled_from(TYPES)), 0)))
    return vs.commit("main", NO_ANCESTOR, {"message": "base"}, ops).hash


def apply_diff(
    before: Entries, diff: list[tuple[Key, LeafValue | None, LeafValue | None]]
) -> Entries:
    out = dict(before)
    for k, x, y in diff:
        assert out.get(k) == x
        if y is None:
            del out[k]
        else:
            out[k] = y
    return out


def visible(vs: VersionStore, at: str) -> dict[Key, tuple[str, dict[str, Any]]]:
    """Key → (type, content without its id): the state as a reader sees it, ids aside."""
    out = {}
    for k, v in vs.get_contents(at, list(entries(vs, at))):
        c = {f: x for f, x in v.content.items() if f != "id"}
        out[k] = (c["type"], c)
    return out


# -- diff ----------------------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_diff_applied_gives_target(data: st.DataObject) -> None:
    with memory_store() as vs:
        hashes = [NO_ANCESTOR, base_commit(data, vs)]
        hashes += random_commits(data, vs, "main", KEYS, 4)
        if data.draw(st.booleans()):
            vs.create_reference("dev", "BRANCH", data.draw(st.sampled_from(hashes[1:])))
            hashes += random_commits(data, vs, "dev", KEYS, 3)
        a = data.draw(st.sampled_from(hashes), label="from")
        b = data.draw(st.sampled_from(hashes), label="to")
        ea, eb = entries(vs, a), entries(vs, b)

        diff = vs.diff(a, b).items
        diff_keys = [k for k, _, _ in diff]
        assert diff_keys == sorted(set(diff_keys))
        assert all(x != y for _, x, y in diff)
        assert apply_diff(ea, diff) == eb
        assert {k for k in ea.keys() | eb.keys() if ea.get(k) != eb.get(k)} == set(diff_keys)

        # paged and range-restricted diffs are slices of the full diff
        size = data.draw(st.integers(1, 4))
        paged: list[tuple[Key, LeafValue | None, LeafValue | None]] = []
        token: str | None = None
        while True:
            page = vs.diff(a, b, max_records=size, page_token=token)
            paged += page.items
            token = page.token
            if token is None:
                break
        assert paged == diff
        ns_diff = vs.diff(a, b, KeyRange(prefix=NAMESPACE)).items
        assert ns_diff == [d for d in diff if d[0][:1] == NAMESPACE]

        # replayed as a commit on a branch at ``a``, the diff yields b's visible state
        if diff:
            vs.create_reference("replay", "BRANCH", a)
            ops: list[Operation] = []
            for k, x, y in diff:
                if y is None:
                    ops.append(Delete(k))
                    continue
                value = vs.get_content(b, k).content
                if x is not None and x[0] == y[0]:
                    ops.append(Put(k, value))
                else:
                    if x is not None:
                        ops.append(Delete(k))
                    ops.append(Put(k, {f: v for f, v in value.items() if f != "id"}))
            r = vs.commit("replay", a, {"message": "replay"}, ops)
            assert visible(vs, r.hash) == visible(vs, b)


# -- merge ---------------------------------------------------------------------------------------


@SETTINGS
@given(st.data())
def test_merge_of_disjoint_changes_equals_applying_both(data: st.DataObject) -> None:
    with memory_store() as vs:
        base = base_commit(data, vs)
        mine = data.draw(st.sets(st.sampled_from(KEYS), min_size=1, max_size=len(KEYS) - 1))
        side_a = [k for k in KEYS if k in mine]
        side_b = [k for k in KEYS if k not in mine]
        vs.create_reference("dev", "BRANCH", base)
        if data.draw(st.booleans()):
            random_commits(data, vs, "main", side_a, 3)
        random_commits(data, vs, "dev", side_b, 3)
        target, src = head(vs), head(vs, "dev")
        expected = apply_diff(entries(vs, target), vs.diff(base, src).items)

        r = vs.merge("main", target, "dev", src)

        assert r.was_successful
        assert r.common_ancestor == base
        assert all(d.conflict is None for d in r.details)
        assert entries(vs, head(vs)) == expected
        if r.was_applied:
            assert vs.commit_of(head(vs)).parents == (target, src)
        else:
            assert head(vs) == target
            assert entries(vs, target) == expected
        # merging both sides into a fresh branch from the base gives the same state
        vs.create_reference("both", "BRANCH", base)
        vs.merge("both", base, "main", target)
        vs.merge("both", head(vs, "both"), "dev", src)
        assert entries(vs, head(vs, "both")) == expected


# -- transplant ----------------------------------------------------------------------------------


@pytest.mark.parametrize("max_commits", [1, 4], ids=["one-commit", "several-commits"])
@SETTINGS
@given(data=st.data())
def test_transplant_equals_merge_without_conflicts(max_commits: int, data: st.DataObject) -> None:
    with memory_store() as vs:
        base = base_commit(data, vs)
        mine = data.draw(st.sets(st.sampled_from(KEYS), min_size=1, max_size=len(KEYS) - 1))
        side_main = [k for k in KEYS if k in mine]
        side_dev = [k for k in KEYS if k not in mine]
        vs.create_reference("dev", "BRANCH", base)
        dev_commits = random_commits(data, vs, "dev", side_dev, max_commits)
        if data.draw(st.booleans()):
            random_commits(data, vs, "main", side_main, 2)
        target = head(vs)
        vs.create_reference("merged", "BRANCH", target)
        vs.create_reference("picked", "BRANCH", target)

        m = vs.merge("merged", target, "dev", dev_commits[-1])
        t = vs.transplant("picked", target, "dev", dev_commits)

        assert m.was_successful and t.was_successful
        merged, picked = head(vs, "merged"), head(vs, "picked")
        assert entries(vs, picked) == entries(vs, merged)
        assert visible(vs, picked) == visible(vs, merged)
        # one single-parent commit per source commit that changed something
        chain = [c.id for c in vs.log(picked, limit_hash=target).items][:-1]
        assert len(chain) == len(t.new_commits) <= len(dev_commits)
        for c in t.new_commits:
            assert len(c.parents) == 1
