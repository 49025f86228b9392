"""The key index (:mod:`loch.versioning.index`): a prolly tree over an in-memory loader.

Property tests compare the tree with a plain dict after arbitrary batches of puts and
deletes (scan, get, get_many, ranges, diff) and check that the tree is canonical: its
root id depends only on the final entries, not on the history that built it, and every
node obeys the boundary rule. Deterministic tests on a 100,000-key tree check the cost
claims of the module docstring (nodes written per update, nodes read per diff and scan),
plus empty trees, multi-element and unicode keys, and tuple key order.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import islice, pairwise, takewhile

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from loch.model.keys import Key
from loch.store.objects import decode, object_id
from loch.versioning import index
from loch.versioning.index import LeafValue, Node, decode_node, key_height

# -- a node store with a counting loader ---------------------------------------------------


class NodeStore:
    """Node bytes by id; ``loads`` counts loader calls."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.loads = 0

    def load(self, node_id: str) -> Node:
        """The loader handed to the index functions."""
        self.loads += 1
        return decode_node(node_id, decode(self.data[node_id]))

    def apply(self, root: str | None, edits: Mapping[Key, LeafValue | None]) -> str | None:
        """Run ``index.update`` and store the nodes it wrote; return the new root."""
        root, _ = self.apply_sink(root, edits)
        return root

    def apply_sink(
        self, root: str | None, edits: Mapping[Key, LeafValue | None]
    ) -> tuple[str | None, dict[str, bytes]]:
        """Like :meth:`apply`, also answering the nodes written."""
        sink: dict[str, bytes] = {}
        new_root = index.update(self.load, root, edits, sink)
        self.data.update(sink)
        return new_root, sink


Model = dict[Key, LeafValue]
Edits = dict[Key, LeafValue | None]


def apply_model(model: Model, edits: Mapping[Key, LeafValue | None]) -> None:
    """Apply edits to the reference dict."""
    for k, v in edits.items():
        if v is None:
            model.pop(k, None)
        else:
            model[k] = v


def build(store: NodeStore, model: Mapping[Key, LeafValue]) -> str | None:
    """The tree of ``model`` built from scratch in one update."""
    return store.apply(None, dict(model))


def naive_diff(
    a: Mapping[Key, LeafValue], b: Mapping[Key, LeafValue]
) -> list[tuple[Key, LeafValue | None, LeafValue | None]]:
    """Keys whose values differ, in key order, compared the obvious way."""
    return [(k, a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)]


def check_structure(store: NodeStore, root: str | None) -> None:
    """The tree under ``root`` is well-formed and cut where the key heights say.

    Every node is non-empty with strictly increasing keys; an internal entry's key is
    its child's last key and the child is one level down; at level ``l`` a node ends
    exactly after a key of height ``> l``, except the last node of the level; a root
    above the leaves has at least two children. Node ids are the SHA-256 of the bytes.
    """
    if root is None:
        return
    top = store.load(root)
    if top.level > 0:
        assert len(top.keys) >= 2, "root with a single child is not collapsed"
    levels: dict[int, list[Node]] = {}

    def walk(node: Node) -> None:
        assert object_id(store.data[node.id]) == node.id
        assert node.keys, "empty node"
        assert all(a < b for a, b in pairwise(node.keys)), "keys out of order"
        levels.setdefault(node.level, []).append(node)
        if node.level > 0:
            for k, child_id in zip(node.keys, node.vals, strict=True):
                child = store.load(child_id)
                assert child.level == node.level - 1
                assert child.keys[-1] == k
                walk(child)

    walk(top)
    assert sorted(levels) == list(range(top.level + 1))
    for level, nodes in levels.items():
        for i, node in enumerate(nodes):
            assert all(key_height(k) <= level for k in node.keys[:-1]), "missed boundary"
            if i < len(nodes) - 1:
                assert key_height(node.keys[-1]) > level, "node ends without a boundary"


# -- key and value generators --------------------------------------------------------------

UNIVERSE = 3000  # key numbers the property tests draw from: trees of up to 3 levels


def key_of(i: int) -> Key:
    """A distinct key per number, mixing lengths, namespaces and non-ASCII elements."""
    kind = i % 5
    if kind == 0:
        return ("ns", f"t{i:06d}")
    if kind == 1:
        return ("ns", f"t{i:06d}", "v")
    if kind == 2:
        return (f"{i:06d}",)
    if kind == 3:
        return ("ns", "日本", f"{i:06d}")
    return ("😀", f"{i % 97}", f"{i:06d}")


def value_of(i: int, version: int) -> LeafValue:
    """A leaf value; equal ``version`` gives an equal value (a no-op re-put)."""
    return (f"cid-{i}", "ICEBERG_TABLE", object_id(f"{i}/{version}".encode()))


# A batch maps key numbers to a value version (put) or None (delete).
Batch = dict[int, int | None]

_op = st.none() | st.integers(0, 2)


@st.composite
def _range_batch(draw: st.DrawFn) -> Batch:
    start = draw(st.integers(0, UNIVERSE - 1))
    count = draw(st.integers(1, 1200))
    step = draw(st.integers(1, 5))
    op = draw(_op)
    return {i: op for i in range(start, min(UNIVERSE, start + count * step), step)}


_point_batch = st.dictionaries(st.integers(0, UNIVERSE - 1), _op, min_size=1, max_size=25)


@st.composite
def batches(draw: st.DrawFn, max_batches: int = 6) -> list[Batch]:
    """Batches of edits: wide ranges (to grow deep trees) mixed with point edits."""
    out: list[Batch] = []
    for _ in range(draw(st.integers(1, max_batches))):
        merged: Batch = {}
        for part in draw(st.lists(st.one_of(_range_batch(), _point_batch), min_size=1, max_size=3)):
            merged.update(part)
        out.append(merged)
    return out


def to_edits(batch: Batch) -> Edits:
    """The index edits of a batch."""
    return {key_of(i): None if v is None else value_of(i, v) for i, v in batch.items()}


def run_history(store: NodeStore, history: list[Batch]) -> tuple[str | None, Model]:
    """Apply a history to an empty tree and to a dict."""
    root: str | None = None
    model: Model = {}
    for batch in history:
        edits = to_edits(batch)
        root = store.apply(root, edits)
        apply_model(model, edits)
    return root, model


_probe_numbers = st.lists(st.integers(-5, UNIVERSE + 5), max_size=20)

PREFIXES: list[Key] = [
    ("ns",),
    ("ns", "日本"),
    ("ns", "t000100"),
    ("😀",),
    ("😀", "5"),
    ("😀", "50"),
    ("nt",),
    ("n",),
    ("000123",),
    ("zzz",),
]
"""Prefix keys, some matching many keys, one key, or none at all."""


def probe_keys(numbers: list[int]) -> list[Key]:
    """Keys to look up or start scans at: generated ones (present or not) and odd ones."""
    odd: list[Key] = [("",), ("ns",), ("ns", ""), ("ns", "t"), ("😀",), ("\U0010ffff",), ("a", "b")]
    return [key_of(abs(n)) for n in numbers] + odd + PREFIXES


def prefix_range(store: NodeStore, root: str | None, prefix: Key) -> list[tuple[Key, LeafValue]]:
    """Entries under ``prefix``: scan from the prefix while keys still start with it."""
    n = len(prefix)
    return list(takewhile(lambda kv: kv[0][:n] == prefix, index.scan(store.load, root, prefix)))


PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- property tests ------------------------------------------------------------------------


@PROPERTY
@given(history=batches())
def test_scan_equals_sorted_dict(history: list[Batch]) -> None:
    """(a) After every batch, a full scan lists exactly the dict's items in key order."""
    store = NodeStore()
    root: str | None = None
    model: Model = {}
    for batch in history:
        edits = to_edits(batch)
        root = store.apply(root, edits)
        apply_model(model, edits)
        assert list(index.scan(store.load, root)) == sorted(model.items())
        assert (root is None) == (not model)
        check_structure(store, root)
        event("tree levels", "none" if root is None else str(store.load(root).level + 1))


@PROPERTY
@given(history=batches(), data=st.data())
def test_root_depends_only_on_entries(history: list[Batch], data: st.DataObject) -> None:
    """(b) Incremental updates give the same root id as a from-scratch build, and so
    does any other history ending at the same entries."""
    store = NodeStore()
    root: str | None = None
    model: Model = {}
    for batch in history:
        edits = to_edits(batch)
        root = store.apply(root, edits)
        apply_model(model, edits)
        assert root == build(store, model)

    # Another history: put the final entries in random chunks among junk, then
    # delete the junk in random chunks.
    items = data.draw(st.permutations(sorted(model.items())))
    junk_numbers = data.draw(st.sets(st.integers(UNIVERSE, UNIVERSE + 2000), max_size=300))
    junk: Edits = {key_of(n): value_of(n, 9) for n in junk_numbers}
    cuts = data.draw(st.lists(st.integers(0, len(items)), max_size=4))
    bounds = [0, *sorted(cuts), len(items)]
    other: str | None = store.apply(None, junk)
    for lo, hi in pairwise(bounds):
        other = store.apply(other, dict(items[lo:hi]))
    junk_keys = list(junk)
    mid = len(junk_keys) // 2
    other = store.apply(other, dict.fromkeys(junk_keys[:mid]))
    other = store.apply(other, dict.fromkeys(junk_keys[mid:]))
    assert other == root


@PROPERTY
@given(base=batches(max_batches=3), changes=batches(max_batches=3))
def test_diff_matches_dict_comparison(base: list[Batch], changes: list[Batch]) -> None:
    """(c) diff(a, b) is the naive comparison in key order; applied to a it gives b."""
    store = NodeStore()
    a_root, a_model = run_history(store, base)
    b_root, b_model = a_root, dict(a_model)
    for batch in changes:
        edits = to_edits(batch)
        b_root = store.apply(b_root, edits)
        apply_model(b_model, edits)

    forward = list(index.diff(store.load, a_root, b_root))
    assert forward == naive_diff(a_model, b_model)
    patched = dict(a_model)
    apply_model(patched, {k: new for k, _old, new in forward})
    assert patched == b_model
    backward = list(index.diff(store.load, b_root, a_root))
    assert backward == [(k, new, old) for k, old, new in forward]
    assert list(index.diff(store.load, a_root, a_root)) == []
    assert list(index.diff(store.load, None, b_root)) == [
        (k, None, v) for k, v in sorted(b_model.items())
    ]
    assert list(index.diff(store.load, a_root, None)) == [
        (k, v, None) for k, v in sorted(a_model.items())
    ]


@PROPERTY
@given(history=batches(), numbers=_probe_numbers)
def test_scan_ranges_match_filtered_listing(history: list[Batch], numbers: list[int]) -> None:
    """(d) scan from a start (inclusive or, with after, exclusive) and prefix ranges
    equal the naive filtered, sorted listing."""
    store = NodeStore()
    root, model = run_history(store, history)
    listing = sorted(model.items())
    for start in probe_keys(numbers):
        assert list(index.scan(store.load, root, start)) == [
            (k, v) for k, v in listing if k >= start
        ]
        assert list(index.scan(store.load, root, start, after=True)) == [
            (k, v) for k, v in listing if k > start
        ]
    for prefix in PREFIXES:
        assert prefix_range(store, root, prefix) == [
            (k, v) for k, v in listing if k[: len(prefix)] == prefix
        ]


@PROPERTY
@given(history=batches(), numbers=_probe_numbers)
def test_get_and_get_many_agree_with_dict(history: list[Batch], numbers: list[int]) -> None:
    """(e) get and get_many answer what the dict holds, for present and absent keys."""
    store = NodeStore()
    root, model = run_history(store, history)
    probes = probe_keys(numbers) + list(islice(iter(model), 50))
    for k in probes:
        assert index.get(store.load, root, k) == model.get(k)
    assert index.get_many(store.load, root, probes) == {k: model[k] for k in probes if k in model}
    assert index.get_many(store.load, root, []) == {}


_elements = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=4)
_any_key = st.lists(_elements, min_size=1, max_size=4).map(tuple)
_small_value = st.tuples(
    st.sampled_from(["c1", "c2"]), st.just("ICEBERG_VIEW"), st.sampled_from(["v1", "v2"])
)


@settings(max_examples=150, deadline=None)
@given(
    first=st.dictionaries(_any_key, _small_value, max_size=60),
    edits=st.dictionaries(_any_key, st.none() | _small_value, max_size=60),
    probes=st.lists(_any_key, max_size=10),
)
def test_arbitrary_unicode_keys(first: Model, edits: Edits, probes: list[Key]) -> None:
    """Any text keys (empty elements, NULs, astral characters) behave like the dict."""
    store = NodeStore()
    a = build(store, first)
    b = store.apply(a, edits)
    model = dict(first)
    apply_model(model, edits)
    assert list(index.scan(store.load, b)) == sorted(model.items())
    assert b == build(store, model)
    check_structure(store, b)
    assert list(index.diff(store.load, a, b)) == naive_diff(first, model)
    for k in probes:
        assert index.get(store.load, b, k) == model.get(k)
        assert list(index.scan(store.load, b, k, after=True)) == [
            kv for kv in sorted(model.items()) if kv[0] > k
        ]


# -- a large tree: cost of updates, diffs and scans ----------------------------------------

BIG = 100_000


@pytest.fixture(scope="module")
def big() -> tuple[NodeStore, str, int]:
    """A 100,000-key tree: its store, root id and number of levels."""
    store = NodeStore()
    root = store.apply(None, {key_of(i): value_of(i, 0) for i in range(BIG)})
    assert root is not None
    levels = store.load(root).level + 1
    assert levels >= 3
    return store, root, levels


def _boundary_numbers(levels_above: int) -> list[int]:
    """Key numbers of the big tree whose keys close nodes on ``levels_above`` levels."""
    return [i for i in range(BIG) if key_height(key_of(i)) >= levels_above][:3]


def _single_edits() -> Iterator[tuple[str, Edits]]:
    yield "change middle", {key_of(BIG // 2): value_of(BIG // 2, 1)}
    yield "change first", {key_of(0): value_of(0, 1)}
    yield "change last", {key_of(BIG - 5): value_of(BIG - 5, 1)}
    yield "insert new", {("ns", "t050000x"): value_of(-1, 0)}
    yield "insert before all", {("",): value_of(-2, 0)}
    yield "insert after all", {("\U0010ffff",): value_of(-3, 0)}
    yield "delete middle", {key_of(BIG // 3): None}
    for height in (1, 2):
        for n in _boundary_numbers(height):
            yield f"delete boundary h{height} #{n}", {key_of(n): None}


@pytest.mark.parametrize(("label", "edits"), list(_single_edits()), ids=lambda x: str(x)[:30])
def test_single_key_update_writes_one_path(
    big: tuple[NodeStore, str, int], label: str, edits: Edits
) -> None:
    """Changing one key in 100,000 writes about one node per level (plus a neighbour
    when a boundary key goes) and reads about as few."""
    store, root, levels = big
    store.loads = 0
    new_root, sink = store.apply_sink(root, edits)
    assert new_root != root, label
    assert len(sink) <= levels + 2, (label, len(sink), levels)
    assert store.loads <= 3 * levels + 2, (label, store.loads, levels)
    # The untouched rest is shared: reading the changed key goes through new nodes only
    # on its path, and the tree is still canonical around the change.
    ((k, v),) = edits.items()
    assert index.get(store.load, new_root, k) == v


def test_single_update_is_canonical_in_big_tree(big: tuple[NodeStore, str, int]) -> None:
    """Deleting a boundary key and adding a new one in the big tree gives the same root
    as building the resulting entries from scratch."""
    store, root, _levels = big
    (gone,) = _boundary_numbers(2)[:1]
    edits: Edits = {key_of(gone): None, ("ns", "t050000x"): value_of(-1, 0)}
    new_root = store.apply(root, edits)
    model = {key_of(i): value_of(i, 0) for i in range(BIG)}
    apply_model(model, edits)
    assert new_root == build(store, model)


FIVE = (3, 20_001, 40_002, 60_003, 99_999)


def _five_changes(big: tuple[NodeStore, str, int]) -> tuple[NodeStore, str, str]:
    """The big tree and a copy with 5 spread-out values changed."""
    store, root, _levels = big
    other = store.apply(root, {key_of(i): value_of(i, 7) for i in FIVE})
    assert other is not None
    return store, root, other


def test_diff_of_big_trees_is_correct(big: tuple[NodeStore, str, int]) -> None:
    """diff between two 100,000-key trees differing in 5 keys finds exactly those."""
    store, root, other = _five_changes(big)
    expected = sorted((key_of(i), value_of(i, 0), value_of(i, 7)) for i in FIVE)
    assert list(index.diff(store.load, root, other)) == expected


def test_diff_of_big_trees_reads_few_nodes(big: tuple[NodeStore, str, int]) -> None:
    """diff skips equal subtrees: 5 differences cost O(5 * height) node reads.

    The module docstring promises "Equal subtrees are skipped without being read" and
    O(d · log n) cost; a generous bound for d = 5 on a 4-level tree is 100 reads.
    """
    store, root, other = _five_changes(big)
    levels = big[2]
    store.loads = 0
    assert len(list(index.diff(store.load, root, other))) == 5
    assert store.loads < 100, f"diff of 5 changes read {store.loads} nodes"
    # one path per difference and side, plus the two roots
    assert store.loads <= 2 * len(FIVE) * levels + 2, store.loads


def test_diff_of_identical_roots_reads_nothing(big: tuple[NodeStore, str, int]) -> None:
    """Equal roots are equal trees: no node is read."""
    store, root, _levels = big
    store.loads = 0
    assert list(index.diff(store.load, root, root)) == []
    assert store.loads == 0


def test_get_and_scan_read_one_path(big: tuple[NodeStore, str, int]) -> None:
    """A lookup reads one node per level; a short scan from a key reads little more."""
    store, root, levels = big
    k = key_of(77_777)
    store.loads = 0
    assert index.get(store.load, root, k) == value_of(77_777, 0)
    assert store.loads == levels
    store.loads = 0
    first = list(islice(index.scan(store.load, root, k), 10))
    assert first[0] == (k, value_of(77_777, 0))
    assert len(first) == 10
    assert store.loads <= levels + 2


# -- deterministic edge cases --------------------------------------------------------------


def test_empty_tree() -> None:
    """The empty tree is None: reads find nothing and empty edits keep it empty."""
    store = NodeStore()
    assert store.apply(None, {}) is None
    assert store.apply(None, {("a",): None}) is None
    assert store.data == {}
    assert list(index.scan(store.load, None)) == []
    assert list(index.scan(store.load, None, ("a",), after=True)) == []
    assert index.get(store.load, None, ("a",)) is None
    assert index.get_many(store.load, None, [("a",)]) == {}
    assert list(index.diff(store.load, None, None)) == []
    assert store.loads == 0


def test_single_entry_tree() -> None:
    """One entry is one leaf; deleting it gives None again."""
    store = NodeStore()
    v: LeafValue = ("c", "ICEBERG_TABLE", "v")
    root = store.apply(None, {("a",): v})
    assert root is not None
    assert store.load(root).level == 0
    assert list(index.scan(store.load, root)) == [(("a",), v)]
    assert store.apply(root, {("b",): None}) == root
    assert store.apply(root, {("a",): None}) is None


def test_deleting_all_keys_gives_none() -> None:
    """Emptying a multi-level tree, at once or in slices, ends at None."""
    store = NodeStore()
    model = {key_of(i): value_of(i, 0) for i in range(5000)}
    root = build(store, model)
    assert root is not None and store.load(root).level >= 2
    assert store.apply(root, dict.fromkeys(model)) is None
    keys = sorted(model)
    current: str | None = root
    for lo in range(0, len(keys), 700):
        current = store.apply(current, dict.fromkeys(keys[lo : lo + 700]))
        remaining = {k: model[k] for k in keys[lo + 700 :]}
        assert list(index.scan(store.load, current)) == sorted(remaining.items())
        assert current == build(store, remaining)
    assert current is None


def test_rebuilding_after_emptying() -> None:
    """Deleting everything and putting it back gives the original root."""
    store = NodeStore()
    model = {key_of(i): value_of(i, 0) for i in range(2000)}
    root = build(store, model)
    emptied = store.apply(root, dict.fromkeys(model))
    assert emptied is None
    assert store.apply(emptied, dict(model)) == root


def test_multi_element_and_unicode_keys() -> None:
    """Keys of several elements and non-ASCII text are stored, found and ordered."""
    keys: list[Key] = [
        ("a",),
        ("a", "b"),
        ("a", "b", "c"),
        ("a.b",),
        ("a\x00b",),  # joins like ("a", "b") when hashed for heights; still distinct
        ("café",),
        ("cafe\u0301",),
        ("日本", "東京", "テーブル"),
        ("😀",),
        ("\uff61",),
        ("𝄞", "clef"),
        ("x" * 200, "y" * 200),
        tuple(f"e{i}" for i in range(20)),
    ]
    store = NodeStore()
    model = {k: ("c" + str(i), "ICEBERG_TABLE", "v") for i, k in enumerate(keys)}
    root = build(store, model)
    assert list(index.scan(store.load, root)) == sorted(model.items())
    for k in keys:
        assert index.get(store.load, root, k) == model[k]
    assert index.get(store.load, root, ("a", "b", "c", "d")) is None
    assert index.get(store.load, root, ("日本", "東京")) is None
    after_emoji = [k for k, _ in index.scan(store.load, root, ("\uff61",), after=True)]
    assert after_emoji == [("𝄞", "clef"), ("😀",)]  # by code point: U+1D11E < U+1F600


def test_key_order_is_tuple_order() -> None:
    """Keys order element-wise, then by length: not as joined strings."""
    expected: list[Key] = [
        ("a",),
        ("a", "a"),
        ("a", "a", "a"),
        ("a", "b"),
        ("a", "z", "z"),
        ("a-c",),  # joined "a.b" would sort after "a-c"; as tuples ("a", ...) first
        ("a.b",),
        ("ab",),
        ("b",),
        ("b", "a"),
    ]
    assert sorted(expected) == expected
    store = NodeStore()
    root = build(
        store, {k: ("c", "ICEBERG_TABLE", str(i)) for i, k in enumerate(reversed(expected))}
    )
    assert [k for k, _ in index.scan(store.load, root)] == expected
    # The same order across node boundaries: many keys under both "a" and "a-c".
    many: list[Key] = (
        [("a", f"{i:04d}") for i in range(600)]
        + [("a-c", f"{i:04d}") for i in range(600)]
        + [("a",), ("a-c",)]
    )
    root = build(store, {k: ("c", "ICEBERG_TABLE", "v") for k in many})
    assert root is not None and store.load(root).level >= 1
    assert [k for k, _ in index.scan(store.load, root)] == sorted(many)
    assert [k for k, _ in index.scan(store.load, root)][:2] == [("a",), ("a", "0000")]


def test_update_reports_created_nodes() -> None:
    """Every node written to the sink is also handed back decoded in ``created``."""
    store = NodeStore()
    root = build(store, {key_of(i): value_of(i, 0) for i in range(3000)})
    sink: dict[str, bytes] = {}
    created: dict[str, Node] = {}
    new_root = index.update(
        store.load, root, {key_of(5): None, key_of(2999): value_of(1, 1)}, sink, created
    )
    assert set(created) == set(sink)
    for nid, data in sink.items():
        assert object_id(data) == nid
        assert created[nid] == decode_node(nid, decode(data))
    store.data.update(sink)
    check_structure(store, new_root)


def test_put_same_value_keeps_root() -> None:
    """Re-putting unchanged values and deleting absent keys leave the root as it was."""
    store = NodeStore()
    model = {key_of(i): value_of(i, 0) for i in range(3000)}
    root = build(store, model)
    assert store.apply(root, {key_of(10): value_of(10, 0)}) == root
    assert store.apply(root, {key_of(UNIVERSE + 1): None}) == root
    assert store.apply(root, {}) == root
