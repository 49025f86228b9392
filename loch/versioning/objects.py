"""Typed access to the immutable objects of a repository, with a bounded cache.

Three kinds of object live in the store, each tagged in its canonical bytes:
commits (``"c"``), key-index nodes (``"n"``, see :mod:`loch.versioning.index`) and
content values (``"v"``: the content dict and its optional documentation).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from loch.errors import ReferenceNotFoundError
from loch.store import NO_ANCESTOR, Persist, canonical_bytes, object_id
from loch.store.objects import decode
from loch.versioning.index import Node, decode_node

__all__ = [
    "LARGE_COMMIT_BYTES",
    "Commit",
    "ObjectReader",
    "Value",
    "encode_commit",
    "encode_value",
]


@dataclass(frozen=True, slots=True)
class Commit:
    """A commit: parents (first = direct parent), key-index root, metadata, operations.

    ``gen`` is 1 + the largest parent generation (0 for the no-ancestor root) and
    ``depth`` the number of commits on the first-parent chain, this one included.
    ``skip`` is the first-parent ancestor at depth ``depth - lowbit(depth)``: following
    skips and parents reaches any ancestor depth in O(log n) steps (``~N``, history
    checks), instead of walking every commit. ``merges`` counts the merge commits on the
    first-parent chain, this one included: where it does not change between two commits,
    the chain between them is linear.
    ``ops`` are stored as ``["PUT", key, value id, content id, type]`` or
    ``["DELETE", key]``; they are None in a commit loaded from the store whose encoding
    is larger than :data:`LARGE_COMMIT_BYTES` (a bulk load of many tables): such a
    commit is kept in memory without them, and :meth:`ObjectReader.operations` reads
    them again when they are wanted.
    """

    id: str
    parents: tuple[str, ...]
    tree: str | None
    meta: dict[str, Any]
    ops: list[list[Any]] | None
    gen: int
    depth: int
    time_us: int
    skip: str
    merges: int = 0


@dataclass(frozen=True, slots=True)
class Value:
    """A stored content value with its documentation."""

    id: str
    content: dict[str, Any]
    documentation: dict[str, Any] | None


ROOT = Commit(NO_ANCESTOR, (), None, {}, [], 0, 0, 0, NO_ANCESTOR)


def encode_commit(
    parents: list[str],
    tree: str | None,
    meta: dict[str, Any],
    ops: list[list[Any]],
    gen: int,
    depth: int,
    time_us: int,
    skip: str,
    merges: int,
) -> tuple[str, bytes]:
    """Canonical bytes and id of a commit."""
    data = canonical_bytes(
        [
            "c",
            {
                "parents": parents,
                "tree": tree,
                "meta": meta,
                "ops": ops,
                "gen": gen,
                "depth": depth,
                "time_us": time_us,
                "skip": skip,
                "merges": merges,
            },
        ]
    )
    return object_id(data), data


def encode_value(
    content: dict[str, Any], documentation: dict[str, Any] | None
) -> tuple[str, bytes]:
    """Canonical bytes and id of a content value."""
    data = canonical_bytes(["v", content, documentation])
    return object_id(data), data


# Decoded objects take several times their encoded size in memory (tuples, small strings,
# object headers); this factor turns encoded bytes into an estimate of resident bytes.
_MEMORY_PER_BYTE = 4
_OVERHEAD = 256

LARGE_COMMIT_BYTES = 64 * 1024
"""Commits encoded larger than this are cached without their operations: walking history
(merge bases, ``~N``) loads commits for their parents and skip pointers, and a few bulk
commits would otherwise fill the object cache."""
_COMMIT_HEADER_BYTES = 1024


class _Lru:
    """A least-recently-used map bounded by the estimated memory of its values."""

    def __init__(self, capacity_bytes: int) -> None:
        self.capacity = capacity_bytes
        self.used = 0
        self._data: OrderedDict[str, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any:
        with self._lock:
            entry = self._data.get(key)
            if entry is None:
                return None
            self._data.move_to_end(key)
            return entry[0]

    def put(self, key: str, value: Any, size: int) -> None:
        weight = size * _MEMORY_PER_BYTE + _OVERHEAD
        with self._lock:
            old = self._data.pop(key, None)
            if old is not None:
                self.used -= old[1]
            self._data[key] = (value, weight)
            self.used += weight
            while self.used > self.capacity and self._data:
                _, (_, w) = self._data.popitem(last=False)
                self.used -= w


class ObjectReader:
    """Loads and decodes objects by id, keeping recently used ones in an LRU cache bounded
    by estimated memory (``cache_bytes``).

    Objects are immutable, so a cached copy never goes stale, whichever process wrote it.
    """

    def __init__(self, persist: Persist, cache_bytes: int = 96 * 1024 * 1024) -> None:
        self.persist = persist
        self._cache = _Lru(cache_bytes)

    def _fetch(self, ids: Iterable[str]) -> dict[str, tuple[Any, int]]:
        found = self.persist.get_objects(list(ids))
        return {i: (decode(b), len(b)) for i, b in found.items()}

    def node(self, node_id: str) -> Node:
        """A key-index node (raises if missing: the store would be corrupt)."""
        n = self._cache.get(node_id)
        if n is None:
            got = self._fetch([node_id]).get(node_id)
            if got is None:
                raise ReferenceNotFoundError(f"Key index node '{node_id}' is missing")
            n = decode_node(node_id, got[0])
            self._cache.put(node_id, n, got[1])
        return n  # type: ignore[no-any-return]

    def commit(self, commit_id: str) -> Commit:
        """A commit, or :class:`ReferenceNotFoundError` when it does not exist."""
        if commit_id == NO_ANCESTOR:
            return ROOT
        c = self._cache.get(commit_id)
        if c is None:
            got = self._fetch([commit_id]).get(commit_id)
            if got is None or got[0][0] != "c":
                raise ReferenceNotFoundError(f"Commit '{commit_id}' not found")
            c = self._decode_commit(commit_id, got[0])
            if got[1] > LARGE_COMMIT_BYTES:
                c = replace(c, ops=None)
                self._cache.put(commit_id, c, _COMMIT_HEADER_BYTES)
            else:
                self._cache.put(commit_id, c, got[1])
        return c  # type: ignore[no-any-return]

    def operations(self, c: Commit) -> list[list[Any]]:
        """A commit's operations (read again from the store for a large commit)."""
        if c.ops is not None:
            return c.ops
        got = self._fetch([c.id]).get(c.id)
        if got is None:
            raise ReferenceNotFoundError(f"Commit '{c.id}' not found")
        ops: list[list[Any]] = got[0][1]["ops"]
        return ops

    def has_commit(self, commit_id: str) -> bool:
        """Whether a commit with this id exists."""
        try:
            self.commit(commit_id)
        except ReferenceNotFoundError:
            return False
        return True

    @staticmethod
    def _decode_commit(commit_id: str, raw: Any) -> Commit:
        d = raw[1]
        return Commit(
            commit_id,
            tuple(d["parents"]),
            d["tree"],
            d["meta"],
            d["ops"],
            d["gen"],
            d["depth"],
            d["time_us"],
            d["skip"],
            d["merges"],
        )

    def values(self, ids: Iterable[str]) -> dict[str, Value]:
        """Content values by id (all must exist)."""
        out: dict[str, Value] = {}
        missing: list[str] = []
        for i in ids:
            v = self._cache.get(i)
            if v is None:
                missing.append(i)
            else:
                out[i] = v
        if missing:
            for i, (raw, size) in self._fetch(missing).items():
                content = raw[1]
                # canonical bytes sort the fields; answer them with type and id first
                ordered = {"type": content["type"], "id": content.get("id"), **content}
                v = Value(i, ordered, raw[2])
                self._cache.put(i, v, size)
                out[i] = v
        return out

    def remember(self, decoded: Mapping[str, Any], encoded: Mapping[str, bytes]) -> None:
        """Cache decoded objects just written (commits, nodes), sized by their bytes."""
        for oid, obj in decoded.items():
            size = len(encoded.get(oid, b""))
            if size > LARGE_COMMIT_BYTES and isinstance(obj, Commit):
                self._cache.put(oid, replace(obj, ops=None), _COMMIT_HEADER_BYTES)
            else:
                self._cache.put(oid, obj, size)
