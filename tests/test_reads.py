"""Reads: commit log (order, paging, limit hash, 250 cap, CEL filters), entries (key
order, ranges, paging, CEL filters), diff, contents, and reference metadata.

Semantics follow nessie-api.md sections 1 (Paging), 2 (ContentKey order), 4 (entries,
history, diff, contents), 4.2 (CEL filters) and 5 (Reads, References).
"""

from __future__ import annotations

from typing import Any

import pytest

from loch.errors import BadRequestError, ContentNotFoundError, ErrorCode, ReferenceNotFoundError
from loch.model.keys import Key
from loch.store import NO_ANCESTOR, Persist
from loch.versioning import (
    Commit,
    CommitResult,
    Delete,
    KeyRange,
    Operation,
    Page,
    Put,
    VersionStore,
)
from loch.versioning.index import LeafValue
from loch.versioning.reads import LOG_PAGE_LIMIT

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


def view() -> dict[str, Any]:
    return {"type": "ICEBERG_VIEW", "metadataLocation": "s3://v", "versionId": 1, "schemaId": 0}


def ns(*elements: str) -> dict[str, Any]:
    return {"type": "NAMESPACE", "elements": list(elements)}


def head(vs: VersionStore, branch: str = "main") -> str:
    return vs.get_reference(branch).hash


def commit(
    vs: VersionStore,
    ops: list[Operation],
    message: str = "test",
    branch: str = "main",
    **meta: Any,
) -> CommitResult:
    return vs.commit(branch, head(vs, branch), {"message": message, **meta}, ops)


def linear(vs: VersionStore, n: int, branch: str = "main", prefix: str = "c") -> list[str]:
    """``n`` commits each adding key ``<prefix><i>``; hashes oldest first."""
    return [
        commit(vs, [Put((f"{prefix}{i}",), table())], f"commit {i}", branch).hash
        for i in range(n)
    ]


def ids_of(items: list[Commit]) -> list[str]:
    return [c.id for c in items]


def keys(page: Page[tuple[Key, LeafValue]]) -> list[Key]:
    return [k for k, _ in page.items]


def all_entry_pages(
    vs: VersionStore, at: str, rng: KeyRange | None, size: int, flt: str | None = None
) -> list[list[Key]]:
    pages: list[list[Key]] = []
    token: str | None = None
    while True:
        page = vs.entries(at, rng, filter=flt, page_token=token, max_records=size)
        pages.append(keys(page))
        token = page.token
        assert page.has_more == (token is not None)
        if token is None:
            return pages
        assert len(pages) < 100


class FakeClock:
    def __init__(self, start_us: int) -> None:
        self.now = start_us

    def __call__(self) -> int:
        return self.now


# -- log ----------------------------------------------------------------------------------------


def test_log_is_newest_first(vs: VersionStore) -> None:
    hashes = linear(vs, 5)
    page = vs.log(head(vs))
    assert ids_of(page.items) == list(reversed(hashes))
    assert page.token is None and not page.has_more
    assert [c.meta["message"] for c in page.items] == [f"commit {i}" for i in range(4, -1, -1)]
    assert ids_of(vs.log(hashes[2]).items) == list(reversed(hashes[:3]))


def test_log_of_empty_branch(vs: VersionStore) -> None:
    page = vs.log(NO_ANCESTOR)
    assert page.items == [] and page.token is None


def test_log_paging(vs: VersionStore) -> None:
    hashes = list(reversed(linear(vs, 5)))
    p1 = vs.log(head(vs), max_records=2)
    assert ids_of(p1.items) == hashes[:2]
    assert p1.token is not None
    p2 = vs.log(head(vs), max_records=2, page_token=p1.token)
    assert ids_of(p2.items) == hashes[2:4]
    assert p2.token is not None
    p3 = vs.log(head(vs), max_records=2, page_token=p2.token)
    assert ids_of(p3.items) == hashes[4:]
    assert p3.token is None


def test_log_exact_page_size_has_no_extra_page(vs: VersionStore) -> None:
    hashes = list(reversed(linear(vs, 4)))
    p1 = vs.log(head(vs), max_records=2)
    p2 = vs.log(head(vs), max_records=2, page_token=p1.token)
    assert ids_of(p1.items) + ids_of(p2.items) == hashes
    if p2.token is not None:
        assert vs.log(head(vs), max_records=2, page_token=p2.token).items == []


def test_log_limit_hash(vs: VersionStore) -> None:
    h = linear(vs, 5)
    assert ids_of(vs.log(h[4], limit_hash=h[1]).items) == [h[4], h[3], h[2], h[1]]
    assert ids_of(vs.log(h[4], limit_hash=h[4]).items) == [h[4]]
    assert ids_of(vs.log(h[4], limit_hash=h[0]).items) == list(reversed(h))
    p1 = vs.log(h[4], limit_hash=h[1], max_records=2)
    p2 = vs.log(h[4], limit_hash=h[1], max_records=2, page_token=p1.token)
    assert ids_of(p1.items) + ids_of(p2.items) == [h[4], h[3], h[2], h[1]]
    assert p2.token is None


def test_log_limit_hash_is_inclusive_even_when_filtered_out(vs: VersionStore) -> None:
    h = linear(vs, 4)
    page = vs.log(h[3], limit_hash=h[1], filter="commit.message != 'commit 2'")
    assert ids_of(page.items) == [h[3], h[1]]


def test_log_follows_first_parents(vs: VersionStore) -> None:
    base = commit(vs, [Put(("a",), table())]).hash
    vs.create_reference("dev", "BRANCH", base)
    d1 = commit(vs, [Put(("d",), table())], branch="dev").hash
    m1 = commit(vs, [Put(("m",), table())]).hash
    merged = vs.merge("main", m1, "dev", d1).resultant_target_hash
    assert merged is not None
    log = ids_of(vs.log(merged).items)
    assert log == [merged, m1, base]
    assert d1 not in log


def test_log_cap_of_250(vs: VersionStore) -> None:
    h = commit(vs, [Put(("t",), table())])
    cid = dict(h.added_contents)[("t",)]
    for i in range(LOG_PAGE_LIMIT + 4):
        commit(vs, [Put(("t",), table(f"s3://t/{i}", cid))], f"m{i}")
    total = LOG_PAGE_LIMIT + 5
    assert LOG_PAGE_LIMIT == 250
    p1 = vs.log(head(vs))
    assert len(p1.items) == 250 and p1.token is not None
    p1b = vs.log(head(vs), max_records=10_000)
    assert ids_of(p1b.items) == ids_of(p1.items)
    p2 = vs.log(head(vs), page_token=p1.token)
    assert len(p2.items) == total - 250 and p2.token is None
    assert len(set(ids_of(p1.items) + ids_of(p2.items))) == total


@pytest.mark.parametrize("bad", [0, -1])
def test_log_non_positive_page_size(vs: VersionStore, bad: int) -> None:
    linear(vs, 3)
    if bad == 0:
        # 0 means "not given": the default page
        assert len(vs.log(head(vs), max_records=bad).items) == 3
    else:
        with pytest.raises(BadRequestError):
            vs.log(head(vs), max_records=bad)


def test_log_bad_token_or_limit(vs: VersionStore) -> None:
    linear(vs, 2)
    with pytest.raises(BadRequestError):
        vs.log(head(vs), page_token="not-a-token")
    with pytest.raises(BadRequestError):
        vs.log(head(vs), limit_hash="xyz")


def test_log_of_unknown_commit(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.log("ab" * 32)


# -- log filters ---------------------------------------------------------------------------------


@pytest.fixture
def authored(vs: VersionStore) -> list[str]:
    """Commits by alice, bob, alice (with a property), carol (a delete); oldest first."""
    r1 = commit(vs, [Put(("db",), ns("db")), Put(("db", "t1"), table())], "one", authors=["alice"])
    r2 = commit(vs, [Put(("t2",), table())], "two", authors=["bob"])
    r3 = commit(vs, [Put(("v",), view())], "three", author="alice", properties={"k": "v"})
    r4 = commit(vs, [Delete(("t2",))], "four", authors=["carol"])
    return [r1.hash, r2.hash, r3.hash, r4.hash]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("commit.author == 'alice'", [2, 0]),
        ("commit.author=='alice' || commit.author=='bob'", [2, 1, 0]),
        ("'bob' in commit.authors", [1]),
        ("commit.message == 'two'", [1]),
        ("commit.message.startsWith('t')", [2, 1]),
        ("commit.committer == ''", [3, 2, 1, 0]),
        ("'k' in commit.properties && commit.properties['k'] == 'v'", [2]),
        ("'k' in commit.allProperties", [2]),
        ("timestamp(commit.commitTime) > timestamp('2001-01-01T00:00:00+00:00')", [3, 2, 1, 0]),
        ("timestamp(commit.commitTime) < timestamp('2001-01-01T00:00:00Z')", []),
        ("operations.exists(op, op.type == 'DELETE')", [3]),
        ("operations.exists(op, op.name == 't1')", [0]),
        ("operations.exists(op, op.key == 'db.t1')", [0]),
        ("operations.exists(op, op.encodedKey == 'db.t1')", [0]),
        ("operations.exists(op, op.namespace == 'db')", [0]),
        ("operations.exists(op, op.type == 'PUT' && op.content.type == 'ICEBERG_VIEW')", [2]),
        ("size(operations) == 2", [0]),
        ("true", [3, 2, 1, 0]),
        ("false", []),
        ("", [3, 2, 1, 0]),
    ],
)
def test_log_filters(
    vs: VersionStore, authored: list[str], expression: str, expected: list[int]
) -> None:
    page = vs.log(head(vs), filter=expression)
    assert ids_of(page.items) == [authored[i] for i in expected]


def test_log_filter_on_hash(vs: VersionStore, authored: list[str]) -> None:
    page = vs.log(head(vs), filter=f"commit.hash == '{authored[1]}'")
    assert ids_of(page.items) == [authored[1]]


def test_log_filter_on_commit_time(persist: Persist) -> None:
    clock = FakeClock(1_600_000_000_000_000)  # 2020-09-13T12:26:40Z
    vs = VersionStore(persist, clock=clock)
    hashes = []
    for i in range(3):
        clock.now = 1_600_000_000_000_000 + i * 86_400_000_000  # a day apart
        hashes.append(commit(vs, [Put((f"t{i}",), table())]).hash)
    page = vs.log(
        head(vs), filter="timestamp(commit.commitTime) > timestamp('2020-09-14T00:00:00Z')"
    )
    assert ids_of(page.items) == [hashes[2], hashes[1]]
    page = vs.log(
        head(vs), filter="timestamp(commit.commitTime) >= timestamp('2020-09-14T12:26:40+00:00')"
    )
    assert ids_of(page.items) == [hashes[2], hashes[1]]


def test_log_filter_with_paging(vs: VersionStore, authored: list[str]) -> None:
    seen: list[str] = []
    token: str | None = None
    for _ in range(10):
        page = vs.log(head(vs), filter="commit.author != 'bob'", max_records=1, page_token=token)
        seen += ids_of(page.items)
        token = page.token
        if token is None:
            break
    assert seen == [authored[3], authored[2], authored[0]]


@pytest.mark.parametrize(
    "expression", ["commit.author ==", "commit.(", "'unterminated", "commit.author = 'x'"]
)
def test_log_invalid_filter_is_400(vs: VersionStore, authored: list[str], expression: str) -> None:
    with pytest.raises(BadRequestError) as ei:
        vs.log(head(vs), filter=expression)
    assert ei.value.code == ErrorCode.BAD_REQUEST


@pytest.mark.parametrize("expression", ["commit.nosuchfield == 'x'", "1 + 1", "commit.author"])
def test_log_filter_that_fails_to_evaluate_is_400(
    vs: VersionStore, authored: list[str], expression: str
) -> None:
    with pytest.raises(BadRequestError):
        vs.log(head(vs), filter=expression)


# -- entries -------------------------------------------------------------------------------------


ORDERED: list[Key] = [
    ("A",),
    ("a",),
    ("a", "a"),
    ("a", "b"),
    ("a", "b", "c"),
    ("a", "b", "d"),
    ("a", "ba"),
    ("a.b",),
    ("ab",),
    ("b",),
    ("x1",),
    ("x2",),
]
NAMESPACES = {("a",), ("a", "b")}
VIEWS = {("x2",)}


@pytest.fixture
def tree(vs: VersionStore) -> str:
    """A commit holding every key of ORDERED, written in reverse order."""
    ops: list[Operation] = []
    for k in reversed(ORDERED):
        if k in NAMESPACES:
            ops.append(Put(k, ns(*k)))
        elif k in VIEWS:
            ops.append(Put(k, view()))
        else:
            ops.append(Put(k, table()))
    return commit(vs, ops).hash


def test_entries_order(vs: VersionStore, tree: str) -> None:
    page = vs.entries(tree)
    assert keys(page) == ORDERED
    assert sorted(ORDERED) == ORDERED
    assert page.token is None
    types = {k: v[1] for k, v in page.items}
    assert types[("a",)] == "NAMESPACE" and types[("x2",)] == "ICEBERG_VIEW"
    assert types[("b",)] == "ICEBERG_TABLE"
    for k, (cid, _, vid) in page.items:
        value = vs.get_content(tree, k)
        assert value.id == vid and value.content["id"] == cid


def test_entries_of_empty_tree(vs: VersionStore) -> None:
    assert vs.entries(NO_ANCESTOR).items == []


def test_entries_at_older_commits_tags_and_other_branches(vs: VersionStore) -> None:
    h1 = commit(vs, [Put(("a",), table())]).hash
    h2 = commit(vs, [Put(("b",), table()), Delete(("a",))]).hash
    vs.create_reference("v1", "TAG", h1)
    assert keys(vs.entries(vs.resolve("v1").hash)) == [("a",)]
    assert keys(vs.entries(h2)) == [("b",)]
    vs.create_reference("dev", "BRANCH", h1)
    commit(vs, [Put(("c",), table())], branch="dev")
    assert keys(vs.entries(head(vs, "dev"))) == [("a",), ("c",)]


def test_entries_prefix_matches_whole_elements(vs: VersionStore, tree: str) -> None:
    assert keys(vs.entries(tree, KeyRange(prefix=("a",)))) == [
        ("a",),
        ("a", "a"),
        ("a", "b"),
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "ba"),
    ]
    assert keys(vs.entries(tree, KeyRange(prefix=("a", "b")))) == [
        ("a", "b"),
        ("a", "b", "c"),
        ("a", "b", "d"),
    ]
    assert keys(vs.entries(tree, KeyRange(prefix=("x",)))) == []
    assert keys(vs.entries(tree, KeyRange(prefix=("a", "b", "c", "d")))) == []


def test_entries_min_and_max_are_inclusive(vs: VersionStore, tree: str) -> None:
    rng = KeyRange(min_key=("a", "b"), max_key=("ab",))
    assert keys(vs.entries(tree, rng)) == [
        ("a", "b"),
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "ba"),
        ("a.b",),
        ("ab",),
    ]
    assert keys(vs.entries(tree, KeyRange(min_key=("b",)))) == [("b",), ("x1",), ("x2",)]
    assert keys(vs.entries(tree, KeyRange(max_key=("a",)))) == [("A",), ("a",)]
    # bounds that are not keys themselves
    assert keys(vs.entries(tree, KeyRange(min_key=("a", "bb"), max_key=("aa",)))) == [("a.b",)]
    assert keys(vs.entries(tree, KeyRange(min_key=("z",)))) == []
    assert keys(vs.entries(tree, KeyRange(min_key=("b",), max_key=("a",)))) == []


def test_entries_by_keys(vs: VersionStore, tree: str) -> None:
    rng = KeyRange(keys=(("b",), ("zz",), ("a",), ("a", "b", "c")))
    assert keys(vs.entries(tree, rng)) == [("a",), ("a", "b", "c"), ("b",)]
    # keys are ANDed with a range
    assert keys(vs.entries(tree, KeyRange(keys=(("a",), ("b",)), min_key=("a", "a")))) == [
        ("b",)
    ]
    assert keys(vs.entries(tree, KeyRange(keys=(("a",), ("b",)), prefix=("a",)))) == [("a",)]


def test_prefix_with_min_or_max_is_400() -> None:
    with pytest.raises(BadRequestError):
        KeyRange(prefix=("a",), min_key=("a",))
    with pytest.raises(BadRequestError):
        KeyRange(prefix=("a",), max_key=("b",))


@pytest.mark.parametrize("size", [1, 2, 3, 5, 11, 12, 13])
def test_entries_paging(vs: VersionStore, tree: str, size: int) -> None:
    pages = all_entry_pages(vs, tree, None, size)
    assert [k for p in pages for k in p] == ORDERED
    assert all(len(p) == size for p in pages[:-1])
    assert 1 <= len(pages[-1]) <= size


@pytest.mark.parametrize(
    "rng",
    [
        KeyRange(prefix=("a",)),
        KeyRange(min_key=("a", "b"), max_key=("ab",)),
        KeyRange(keys=(("A",), ("a", "ba"), ("b",), ("x2",))),
        KeyRange(min_key=("a", "b", "c")),
    ],
    ids=["prefix", "min-max", "keys", "min"],
)
def test_entries_paging_with_ranges(vs: VersionStore, tree: str, rng: KeyRange) -> None:
    full = keys(vs.entries(tree, rng))
    assert full
    for size in (1, 2):
        pages = all_entry_pages(vs, tree, rng, size)
        assert [k for p in pages for k in p] == full


def test_entries_paging_with_filter(vs: VersionStore, tree: str) -> None:
    flt = "entry.contentType == 'ICEBERG_TABLE'"
    full = keys(vs.entries(tree, filter=flt))
    assert full == [k for k in ORDERED if k not in NAMESPACES and k not in VIEWS]
    pages = all_entry_pages(vs, tree, None, 2, flt)
    assert [k for p in pages for k in p] == full


def test_entries_page_token_is_stable_across_writes(vs: VersionStore, tree: str) -> None:
    """A token marks a key position: reading the same commit again continues correctly."""
    p1 = vs.entries(tree, max_records=3)
    commit(vs, [Put(("a", "aa"), table())])
    p2 = vs.entries(tree, max_records=3, page_token=p1.token)
    assert keys(p1) + keys(p2) == ORDERED[:6]


def test_entries_bad_page_token(vs: VersionStore, tree: str) -> None:
    with pytest.raises(BadRequestError):
        vs.entries(tree, page_token="zz-not-hex")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("entry.contentType == 'NAMESPACE' && size(entry.keyElements) == 1", [("a",)]),
        ("entry.encodedKey.startsWith('a.b.')", [("a", "b", "c"), ("a", "b", "d")]),
        ("entry.encodedKey == 'a.b'", [("a", "b")]),
        ("entry.encodedKey == 'a\u001db'", [("a.b",)]),
        ("entry.contentType in ['ICEBERG_VIEW']", [("x2",)]),
        ("entry.contentType in ['ICEBERG_VIEW', 'NAMESPACE']", [("a",), ("a", "b"), ("x2",)]),
        ("entry.name.startsWith('x')", [("x1",), ("x2",)]),
        ("entry.namespace == 'a.b'", [("a", "b", "c"), ("a", "b", "d")]),
        ("entry.namespaceElements == ['a']", [("a", "a"), ("a", "b"), ("a", "ba")]),
        ("size(entry.keyElements) == 3", [("a", "b", "c"), ("a", "b", "d")]),
        ("entry.keyElements[0] == 'A'", [("A",)]),
    ],
)
def test_entries_filters(
    vs: VersionStore, tree: str, expression: str, expected: list[Key]
) -> None:
    assert keys(vs.entries(tree, filter=expression)) == expected


def test_entries_filter_iceberg_tables(vs: VersionStore, tree: str) -> None:
    got = keys(vs.entries(tree, filter="entry.contentType in ['ICEBERG_TABLE']"))
    assert got == [k for k in ORDERED if k not in NAMESPACES and k not in VIEWS]


def test_entries_filter_with_range(vs: VersionStore, tree: str) -> None:
    got = keys(vs.entries(tree, KeyRange(prefix=("a",)), filter="entry.contentType == 'NAMESPACE'"))
    assert got == [("a",), ("a", "b")]


@pytest.mark.parametrize("expression", ["entry.(", "entry.name ==", "entry.name = 'x'"])
def test_entries_invalid_filter_is_400(vs: VersionStore, tree: str, expression: str) -> None:
    with pytest.raises(BadRequestError):
        vs.entries(tree, filter=expression)


def test_entries_unknown_commit(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.entries("ab" * 32)


# -- diff ----------------------------------------------------------------------------------------


@pytest.fixture
def two(vs: VersionStore) -> tuple[str, str]:
    """Two commits: (from, to) with added, removed, changed and unchanged keys."""
    r = commit(
        vs,
        [
            Put(("db",), ns("db")),
            Put(("db", "changed"), table()),
            Put(("db", "removed"), table()),
            Put(("db", "same"), table()),
            Put(("top",), table()),
        ],
    )
    cid = dict(r.added_contents)[("db", "changed")]
    r2 = commit(
        vs,
        [
            Put(("db", "changed"), table("s3://b/m2.json", cid)),
            Delete(("db", "removed")),
            Put(("db", "added"), table()),
            Put(("z",), view()),
        ],
    )
    return r.hash, r2.hash


def test_diff(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    page = vs.diff(a, b)
    assert page.token is None
    got = [(k, x is None, y is None) for k, x, y in page.items]
    assert got == [
        (("db", "added"), True, False),
        (("db", "changed"), False, False),
        (("db", "removed"), False, True),
        (("z",), True, False),
    ]
    leaves = {k: (x, y) for k, x, y in page.items}
    before, after = leaves[("db", "changed")]
    assert before is not None and after is not None
    assert before[0] == after[0]  # same content id
    assert before[2] != after[2]  # different value
    assert vs.get_content(b, ("db", "changed")).id == after[2]


def test_diff_reversed_and_identical(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    forward = vs.diff(a, b).items
    backward = vs.diff(b, a).items
    assert [(k, y, x) for k, x, y in forward] == backward
    assert vs.diff(a, a).items == []
    assert vs.diff(NO_ANCESTOR, NO_ANCESTOR).items == []
    assert [k for k, _, _ in vs.diff(NO_ANCESTOR, a).items] == keys(vs.entries(a))
    assert all(x is None for _, x, _ in vs.diff(NO_ANCESTOR, a).items)


def test_diff_across_branches(vs: VersionStore) -> None:
    base = commit(vs, [Put(("a",), table())]).hash
    vs.create_reference("dev", "BRANCH", base)
    commit(vs, [Put(("d",), table())], branch="dev")
    commit(vs, [Put(("m",), table())])
    got = [(k, x is None, y is None) for k, x, y in vs.diff(head(vs), head(vs, "dev")).items]
    assert got == [(("d",), True, False), (("m",), False, True)]


def test_diff_with_ranges(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two

    def dk(rng: KeyRange) -> list[Key]:
        return [k for k, _, _ in vs.diff(a, b, rng).items]

    assert dk(KeyRange(prefix=("db",))) == [("db", "added"), ("db", "changed"), ("db", "removed")]
    assert dk(KeyRange(min_key=("db", "b"), max_key=("db", "r"))) == [("db", "changed")]
    assert dk(KeyRange(min_key=("db", "removed"))) == [("db", "removed"), ("z",)]
    assert dk(KeyRange(max_key=("db", "added"))) == [("db", "added")]
    assert dk(KeyRange(keys=(("z",), ("db", "same"), ("db", "added")))) == [
        ("db", "added"),
        ("z",),
    ]
    assert dk(KeyRange(keys=(("z",), ("db", "added")), prefix=("db",))) == [("db", "added")]


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5])
def test_diff_paging(vs: VersionStore, two: tuple[str, str], size: int) -> None:
    a, b = two
    full = vs.diff(a, b).items
    got: list[tuple[Key, LeafValue | None, LeafValue | None]] = []
    token: str | None = None
    for _ in range(20):
        page = vs.diff(a, b, max_records=size, page_token=token)
        assert len(page.items) <= size
        got += page.items
        token = page.token
        if token is None:
            break
    assert got == full


def test_diff_paging_with_range(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    rng = KeyRange(prefix=("db",))
    p1 = vs.diff(a, b, rng, max_records=2)
    p2 = vs.diff(a, b, rng, max_records=2, page_token=p1.token)
    assert [k for k, _, _ in p1.items + p2.items] == [
        ("db", "added"),
        ("db", "changed"),
        ("db", "removed"),
    ]
    assert p2.token is None


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("key.name == 'changed'", [("db", "changed")]),
        ("key.namespace == 'db'", [("db", "added"), ("db", "changed"), ("db", "removed")]),
        ("key.encodedKey.startsWith('db.a')", [("db", "added")]),
        ("size(key.keyElements) == 1", [("z",)]),
        ("key.key == 'z'", [("z",)]),
    ],
)
def test_diff_filters(
    vs: VersionStore, two: tuple[str, str], expression: str, expected: list[Key]
) -> None:
    a, b = two
    assert [k for k, _, _ in vs.diff(a, b, filter=expression).items] == expected


def test_diff_invalid_filter_is_400(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    with pytest.raises(BadRequestError):
        vs.diff(a, b, filter="key.(")


def test_diff_unknown_commit(vs: VersionStore, two: tuple[str, str]) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.diff(two[0], "ab" * 32)


# -- contents -----------------------------------------------------------------------------------


def test_get_content(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    old = vs.get_content(a, ("db", "changed"))
    new = vs.get_content(b, ("db", "changed"))
    assert old.content["metadataLocation"] == "s3://b/m1.json"
    assert new.content["metadataLocation"] == "s3://b/m2.json"
    assert old.content["id"] == new.content["id"]
    assert new.content["type"] == "ICEBERG_TABLE"


def test_get_missing_content(vs: VersionStore, two: tuple[str, str]) -> None:
    a, b = two
    with pytest.raises(ContentNotFoundError) as ei:
        vs.get_content(b, ("db", "removed"), "main")
    err = ei.value
    assert err.message == "Could not find content for key 'db.removed' in reference 'main'."
    assert err.status == 404
    assert err.code == ErrorCode.CONTENT_NOT_FOUND
    assert err.details() == {"type": "CONTENT_KEY", "contentKey": {"elements": ["db", "removed"]}}
    with pytest.raises(ContentNotFoundError) as ei:
        vs.get_content(NO_ANCESTOR, ("x",))
    assert ei.value.message == f"Could not find content for key 'x' in reference '{NO_ANCESTOR}'."
    # a namespace key is content like any other; a missing one is not found
    assert vs.get_content(a, ("db",)).content["type"] == "NAMESPACE"
    with pytest.raises(ContentNotFoundError):
        vs.get_content(a, ("nope",))


def test_get_content_of_unknown_commit(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.get_content("ab" * 32, ("x",))


def test_get_contents_leaves_missing_keys_out(vs: VersionStore, two: tuple[str, str]) -> None:
    _, b = two
    got = vs.get_contents(b, [("z",), ("db", "removed"), ("db", "changed"), ("nope",), ("z",)])
    assert sorted(k for k, _ in got) == [("db", "changed"), ("z",)]
    by_key = dict(got)
    assert by_key[("z",)].content["type"] == "ICEBERG_VIEW"
    assert by_key[("db", "changed")].content["metadataLocation"] == "s3://b/m2.json"
    assert vs.get_contents(b, [("nope",)]) == []
    assert vs.get_contents(b, []) == []
    assert vs.get_contents(NO_ANCESTOR, [("z",)]) == []


# -- reference metadata --------------------------------------------------------------------------


def test_reference_metadata_ahead_behind(vs: VersionStore) -> None:
    h = linear(vs, 2)
    vs.create_reference("dev", "BRANCH", h[1])
    d = linear(vs, 3, branch="dev", prefix="d")
    m = commit(vs, [Put(("m",), table())], "main 3").hash
    meta = vs.reference_metadata(vs.get_reference("dev"))
    assert meta["numCommitsAhead"] == 3
    assert meta["numCommitsBehind"] == 1
    assert meta["commonAncestorHash"] == h[1]
    assert meta["numTotalCommits"] == 5
    head_meta = meta["commitMetaOfHEAD"]
    assert head_meta["hash"] == d[2]
    assert head_meta["message"] == "commit 2"
    assert head_meta["parentCommitHashes"] == [d[1]]
    main = vs.reference_metadata(vs.get_reference("main"))
    assert main["numTotalCommits"] == 3
    assert main["commitMetaOfHEAD"]["hash"] == m


def test_reference_metadata_of_tag(vs: VersionStore) -> None:
    h = linear(vs, 2)
    vs.create_reference("v1", "TAG", h[0])
    commit(vs, [Put(("m",), table())])
    meta = vs.reference_metadata(vs.get_reference("v1"))
    assert meta["numCommitsAhead"] is None
    assert meta["numCommitsBehind"] is None
    assert meta["commonAncestorHash"] is None
    assert meta["numTotalCommits"] == 1
    assert meta["commitMetaOfHEAD"]["hash"] == h[0]


def test_reference_metadata_of_empty_branch(vs: VersionStore) -> None:
    meta = vs.reference_metadata(vs.get_reference("main"))
    assert meta["commitMetaOfHEAD"] is None
    assert meta["numTotalCommits"] == 0


def test_reference_metadata_of_orphan_branch(vs: VersionStore) -> None:
    linear(vs, 2)
    vs.create_reference("orphan", "BRANCH", NO_ANCESTOR)
    commit(vs, [Put(("o",), table())], branch="orphan")
    meta = vs.reference_metadata(vs.get_reference("orphan"))
    assert meta["commonAncestorHash"] == NO_ANCESTOR
    assert meta["numCommitsAhead"] == 1
    assert meta["numCommitsBehind"] == 2


def test_reference_metadata_after_branching_and_merging(vs: VersionStore) -> None:
    h = linear(vs, 1)
    vs.create_reference("dev", "BRANCH", h[0])
    meta = vs.reference_metadata(vs.get_reference("dev"))
    assert (meta["numCommitsAhead"], meta["numCommitsBehind"]) == (0, 0)
    assert meta["commonAncestorHash"] == h[0]
    commit(vs, [Put(("m",), table())])
    d = commit(vs, [Put(("d",), table())], branch="dev").hash
    vs.merge("dev", d, "main", head(vs))  # main into dev
    meta = vs.reference_metadata(vs.get_reference("dev"))
    assert meta["commonAncestorHash"] == head(vs)
    assert meta["numCommitsBehind"] == 0
