"""The key index: a persistent, content-defined ordered tree (a prolly tree).

Each commit's full map of content keys to content pointers is the tree under its root
id. Level 0 holds ``key -> (content id, content type, value hash)`` entries in key
order; level ``l + 1`` holds ``(last key, node id)`` of the level-``l`` nodes.

Node boundaries depend only on the keys: a key's *height* comes from its hash, and a
level-``l`` node ends after an entry whose key has height ``> l`` (on average every
32nd key at level 0). So a key set has exactly one tree, whatever history built it:

* a commit touching ``k`` keys rewrites only the nodes on their paths, plus at most one
  right neighbour per path when a boundary key is deleted: O(k · log n) nodes;
* equal subtrees have equal ids, so a diff skips them and costs O(d · log n) for ``d``
  differences;
* lookups, prefix and range scans descend by key instead of scanning.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

from loch.model.keys import Key
from loch.store.objects import canonical_bytes, object_id

__all__ = [
    "LeafValue",
    "Node",
    "NodeLoader",
    "decode_node",
    "diff",
    "get",
    "get_many",
    "scan",
    "update",
]

LeafValue: TypeAlias = tuple[str, str, str]
"""A leaf entry's value: (content id, content type, value object id)."""

NodeLoader: TypeAlias = Callable[[str], "Node"]

_BITS = 5  # mean node fan-out 2**5 = 32
_MASK = (1 << _BITS) - 1
_MAX_HEIGHT = 12


@dataclass(frozen=True, slots=True)
class Node:
    """One tree node: its level, its keys, and values (leaf) or child ids (internal)."""

    id: str
    level: int
    keys: list[Key]
    vals: list[Any]

    @property
    def is_leaf(self) -> bool:
        return self.level == 0


# Small on purpose: the keys near a commit's path (node boundaries, neighbours) come back
# commit after commit, while a large cache keeps every key it has seen alive outside the
# object cache's memory bound (65,536 keys held ~20 MB and took 65k commits to fill).
@lru_cache(maxsize=1 << 12)
def key_height(key: Key) -> int:
    """How many levels a key closes nodes on (geometric, from the key's hash)."""
    digest = hashlib.sha256("\x00".join(key).encode("utf-8")).digest()
    h = int.from_bytes(digest[:8], "little")
    height = 0
    while h & _MASK == 0 and height < _MAX_HEIGHT:
        h >>= _BITS
        height += 1
    return height


def _encode(level: int, keys: Sequence[Key], vals: Sequence[Any]) -> bytes:
    # Keys and values as two parallel arrays: the encoder takes the tuples as they are,
    # with no per-entry work in Python on the commit path.
    return canonical_bytes(["n", level, keys, vals])


def decode_node(node_id: str, data: Any) -> Node:
    """Build a :class:`Node` from its decoded JSON (``["n", level, keys, values]``)."""
    _tag, level, keys, vals = data
    return Node(
        node_id,
        level,
        list(map(tuple, keys)),
        list(map(tuple, vals)) if level == 0 else vals,
    )


class _Builder:
    """Creates nodes for one update, remembering them so they can be read back."""

    def __init__(
        self,
        load: NodeLoader,
        sink: MutableMapping[str, bytes],
        created: MutableMapping[str, Node] | None,
    ) -> None:
        self._load = load
        self.sink = sink
        self.created: MutableMapping[str, Node] = {} if created is None else created

    def load(self, node_id: str) -> Node:
        node = self.created.get(node_id)
        return node if node is not None else self._load(node_id)

    def make(self, level: int, keys: list[Key], vals: list[Any]) -> tuple[Key, str]:
        data = _encode(level, keys, vals)
        nid = object_id(data)
        self.sink[nid] = data
        self.created[nid] = Node(nid, level, keys, vals)
        return keys[-1], nid

    def split(
        self, level: int, keys: list[Key], vals: list[Any]
    ) -> tuple[list[tuple[Key, str]], list[Key], list[Any]]:
        """Cut entries into closed nodes; return them and the open tail."""
        out: list[tuple[Key, str]] = []
        start = 0
        for i, k in enumerate(keys):
            if key_height(k) > level:
                out.append(self.make(level, keys[start : i + 1], vals[start : i + 1]))
                start = i + 1
        return out, keys[start:], vals[start:]

    def build_up(self, level: int, chunks: list[tuple[Key, str]]) -> str | None:
        """Given the complete list of nodes at ``level``, build the levels above."""
        while True:
            if not chunks:
                return None
            if len(chunks) == 1:
                node = self.load(chunks[0][1])
                while node.level > 0 and len(node.keys) == 1:
                    node = self.load(node.vals[0])
                return node.id
            level += 1
            keys = [c[0] for c in chunks]
            vals: list[Any] = [c[1] for c in chunks]
            closed, tkeys, tvals = self.split(level, keys, vals)
            if tkeys:
                closed.append(self.make(level, tkeys, tvals))
            chunks = closed


def _locate(load: NodeLoader, root: Node, level: int, key: Key, after: bool) -> tuple[Node, bool]:
    """The level-``level`` node whose range holds ``key`` (or, with ``after``, the first
    key greater than ``key``), and whether it is the last node of its level."""
    node = root
    last = True
    while node.level > level:
        keys = node.keys
        idx = bisect_right(keys, key) if after else bisect_left(keys, key)
        if idx >= len(keys):
            idx = len(keys) - 1
        last = last and idx == len(keys) - 1
        node = load(node.vals[idx])
    return node, last


def _apply_sorted(
    keys: list[Key], vals: list[Any], edits: Sequence[tuple[Key, Any]]
) -> tuple[list[Key], list[Any]]:
    """Merge sorted edits (value None = delete) into sorted entries."""
    if not edits:
        return keys, vals
    out_k: list[Key] = []
    out_v: list[Any] = []
    i = 0
    n = len(keys)
    for ek, ev in edits:
        j = bisect_left(keys, ek, i)
        out_k.extend(keys[i:j])
        out_v.extend(vals[i:j])
        i = j
        if i < n and keys[i] == ek:
            i += 1  # replaced or deleted
        if ev is not None:
            out_k.append(ek)
            out_v.append(ev)
    out_k.extend(keys[i:])
    out_v.extend(vals[i:])
    return out_k, out_v


def _rewrite_level(
    b: _Builder, root: Node, level: int, edits: list[tuple[Key, Any]]
) -> tuple[list[tuple[Key, str]], list[tuple[Key, str]]]:
    """Apply sorted edits to the entries of one level.

    Returns the new nodes of that level and the old nodes they replace, each as
    ``(last key, id)``.
    """
    new: list[tuple[Key, str]] = []
    removed: list[tuple[Key, str]] = []
    i, n = 0, len(edits)
    while i < n:
        chunk, is_last = _locate(b.load, root, level, edits[i][0], after=False)
        removed.append((chunk.keys[-1], chunk.id))
        keys, vals = chunk.keys, chunk.vals
        while True:
            hi = chunk.keys[-1]
            j = i
            while j < n and (is_last or edits[j][0] <= hi):
                j += 1
            keys, vals = _apply_sorted(keys, vals, edits[i:j])
            i = j
            closed, keys, vals = b.split(level, keys, vals)
            new.extend(closed)
            if not keys:
                break
            if is_last:
                new.append(b.make(level, keys, vals))
                break
            # The open tail continues into the next node of this level.
            chunk, is_last = _locate(b.load, root, level, hi, after=True)
            removed.append((chunk.keys[-1], chunk.id))
            keys = keys + chunk.keys
            vals = vals + chunk.vals
    return new, removed


def update(
    load: NodeLoader,
    root_id: str | None,
    edits: Mapping[Key, LeafValue | None],
    sink: MutableMapping[str, bytes],
    created: MutableMapping[str, Node] | None = None,
) -> str | None:
    """Apply ``edits`` (None deletes) to the tree at ``root_id``.

    New nodes are added to ``sink`` (id -> bytes) and, decoded, to ``created``. Returns
    the new root id, or None for an empty tree.
    """
    b = _Builder(load, sink, created)
    level_edits: list[tuple[Key, Any]] = sorted(edits.items())
    if root_id is None:
        puts = [(k, v) for k, v in level_edits if v is not None]
        if not puts:
            return None
        closed, tk, tv = b.split(0, [k for k, _ in puts], [v for _, v in puts])
        if tk:
            closed.append(b.make(0, tk, tv))
        return b.build_up(0, closed)
    root = load(root_id)
    level = 0
    while level_edits:
        new, removed = _rewrite_level(b, root, level, level_edits)
        if level == root.level:
            return b.build_up(level, new)
        parent: dict[Key, Any] = {k: None for k, _ in removed}
        old = dict(removed)
        for k, nid in new:
            if old.get(k) == nid:
                del parent[k]
            else:
                parent[k] = nid
        level_edits = sorted(parent.items())
        level += 1
    return root_id


# -- reads ---------------------------------------------------------------------------------


def get(load: NodeLoader, root_id: str | None, key: Key) -> LeafValue | None:
    """The leaf value under ``key``, or None."""
    if root_id is None:
        return None
    node = load(root_id)
    while node.level > 0:
        idx = bisect_left(node.keys, key)
        if idx >= len(node.keys):
            return None
        node = load(node.vals[idx])
    idx = bisect_left(node.keys, key)
    if idx < len(node.keys) and node.keys[idx] == key:
        v: LeafValue = node.vals[idx]
        return v
    return None


def get_many(load: NodeLoader, root_id: str | None, keys: Sequence[Key]) -> dict[Key, LeafValue]:
    """Leaf values of those ``keys`` that exist."""
    out: dict[Key, LeafValue] = {}
    for k in keys:
        v = get(load, root_id, k)
        if v is not None:
            out[k] = v
    return out


def scan(
    load: NodeLoader, root_id: str | None, start: Key | None = None, after: bool = False
) -> Iterator[tuple[Key, LeafValue]]:
    """Entries in key order from ``start`` (inclusive, or exclusive with ``after``)."""
    if root_id is None:
        return
    stack: list[tuple[Node, int]] = []
    node = load(root_id)
    while True:
        if start is None:
            idx = 0
        elif after:
            idx = bisect_right(node.keys, start)
        else:
            idx = bisect_left(node.keys, start)
        if node.level == 0:
            stack.append((node, idx))
            break
        if idx >= len(node.keys):
            stack.append((node, idx))
            break
        stack.append((node, idx + 1))
        node = load(node.vals[idx])
    while stack:
        node, idx = stack.pop()
        if node.level == 0:
            keys, vals = node.keys, node.vals
            for i in range(idx, len(keys)):
                yield keys[i], vals[i]
            continue
        if idx < len(node.keys):
            stack.append((node, idx + 1))
            stack.append((load(node.vals[idx]), 0))


class _Ref:
    """An unexpanded subtree on a diff frontier: compared by id before it is read."""

    __slots__ = ("id", "level")

    def __init__(self, node_id: str, level: int) -> None:
        self.id = node_id
        self.level = level


def diff(
    load: NodeLoader, a_id: str | None, b_id: str | None
) -> Iterator[tuple[Key, LeafValue | None, LeafValue | None]]:
    """Keys whose leaf values differ between two trees, in key order.

    Equal subtrees are skipped without being read: dropping the same entries from both
    ordered streams leaves the rest of the comparison unchanged. Only subtrees whose
    ids differ are loaded, so the cost follows the number of differences.
    """
    if a_id == b_id:
        return
    # Each frontier is a stack (front = last item) of subtree refs and leaf entries.
    fa: list[Any] = [_Ref(a_id, load(a_id).level)] if a_id else []
    fb: list[Any] = [_Ref(b_id, load(b_id).level)] if b_id else []

    def expand(stack: list[Any]) -> None:
        node = load(stack.pop().id)
        if node.level == 0:
            stack.extend(reversed(list(zip(node.keys, node.vals, strict=True))))
        else:
            level = node.level - 1
            stack.extend(_Ref(c, level) for c in reversed(node.vals))

    def expand_both() -> None:
        # Children (or leaf entries) present in both nodes hold the same entries on
        # both sides: they are dropped here, before any of them is compared.
        na, nb = load(fa.pop().id), load(fb.pop().id)
        if na.keys == nb.keys:  # same boundaries: only values (or child ids) changed
            va, vb = na.vals, nb.vals
            changed = [i for i in range(len(va) - 1, -1, -1) if va[i] != vb[i]]
            if na.level == 0:
                fa.extend((na.keys[i], va[i]) for i in changed)
                fb.extend((nb.keys[i], vb[i]) for i in changed)
            else:
                level = na.level - 1
                fa.extend(_Ref(va[i], level) for i in changed)
                fb.extend(_Ref(vb[i], level) for i in changed)
        elif na.level == 0:
            ea = list(zip(na.keys, na.vals, strict=True))
            eb = list(zip(nb.keys, nb.vals, strict=True))
            same = set(ea).intersection(eb)
            fa.extend(e for e in reversed(ea) if e not in same)
            fb.extend(e for e in reversed(eb) if e not in same)
        else:
            common = set(na.vals).intersection(nb.vals)
            level = na.level - 1
            fa.extend(_Ref(c, level) for c in reversed(na.vals) if c not in common)
            fb.extend(_Ref(c, level) for c in reversed(nb.vals) if c not in common)

    while fa and fb:
        x, y = fa[-1], fb[-1]
        xn, yn = isinstance(x, _Ref), isinstance(y, _Ref)
        if xn and yn:
            if x.id == y.id:
                fa.pop()
                fb.pop()
            elif x.level == y.level:
                expand_both()
            elif x.level > y.level:
                expand(fa)
            else:
                expand(fb)
        elif xn:
            expand(fa)
        elif yn:
            expand(fb)
        else:
            (xk, xv), (yk, yv) = x, y
            if xk == yk:
                fa.pop()
                fb.pop()
                if xv != yv:
                    yield xk, xv, yv
            elif xk < yk:
                fa.pop()
                yield xk, xv, None
            else:
                fb.pop()
                yield yk, None, yv
    while fa:
        if isinstance(fa[-1], _Ref):
            expand(fa)
        else:
            k, v = fa.pop()
            yield k, v, None
    while fb:
        if isinstance(fb[-1], _Ref):
            expand(fb)
        else:
            k, v = fb.pop()
            yield k, None, v
