"""Reads: commit log, entries, diff, contents and reference metadata."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from loch.errors import BadRequestError, ContentNotFoundError
from loch.model.keys import Key, key_str, validate_key
from loch.store import NO_ANCESTOR, RefRecord
from loch.versioning import index
from loch.versioning.filters import compile_filter, key_variables
from loch.versioning.index import LeafValue
from loch.versioning.merge import MergeMixin
from loch.versioning.objects import Commit, Value
from loch.versioning.refs import validate_hash

__all__ = ["LOG_PAGE_LIMIT", "KeyRange", "Page", "ReadsMixin", "commit_meta"]

T = TypeVar("T")

LOG_PAGE_LIMIT = 250


@dataclass
class Page(Generic[T]):
    """One page of results and the token of the next page (None on the last)."""

    items: list[T] = field(default_factory=list)
    token: str | None = None

    @property
    def has_more(self) -> bool:
        return self.token is not None


@dataclass(frozen=True)
class KeyRange:
    """Key restrictions of an entries or diff listing."""

    keys: tuple[Key, ...] = ()
    min_key: Key | None = None
    max_key: Key | None = None
    prefix: Key | None = None

    def __post_init__(self) -> None:
        if self.prefix is not None and (self.min_key is not None or self.max_key is not None):
            raise BadRequestError(
                "Combining prefixKey with either minKey or maxKey is not supported."
            )

    def start(self) -> Key | None:
        return self.prefix if self.prefix is not None else self.min_key

    def past_end(self, key: Key) -> bool:
        """Whether ``key`` (in ascending order) is beyond the range."""
        if self.prefix is not None:
            return key[: len(self.prefix)] > self.prefix
        return self.max_key is not None and key > self.max_key

    def contains(self, key: Key) -> bool:
        if self.keys and key not in self.keys:
            return False
        if self.prefix is not None:
            return key[: len(self.prefix)] == self.prefix
        if self.min_key is not None and key < self.min_key:
            return False
        return not (self.max_key is not None and key > self.max_key)


def encode_key_token(key: Key) -> str:
    """Paging token for a key listing: hex of the key's JSON."""
    return json.dumps(list(key), ensure_ascii=False).encode("utf-8").hex()


def decode_key_token(token: str) -> Key:
    try:
        elements = json.loads(bytes.fromhex(token).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise BadRequestError(f"Invalid page token '{token}'") from None
    return validate_key(elements)


def commit_meta(c: Commit) -> dict[str, Any]:
    """Full v2 CommitMeta of a commit (with its hash and parents)."""
    meta = dict(c.meta)
    meta["hash"] = c.id
    meta["parentCommitHashes"] = list(c.parents)
    return meta


def _commit_filter_vars(c: Commit, operations: list[list[Any]]) -> dict[str, Any]:
    meta = commit_meta(c)
    authors = meta.get("authors") or []
    signed = meta.get("allSignedOffBy") or []
    props = meta.get("allProperties") or {}
    commit = dict(meta)
    commit["author"] = authors[0] if authors else ""
    commit["signedOffBy"] = signed[0] if signed else ""
    commit["properties"] = {k: v[0] for k, v in props.items() if v}
    ops = []
    for op in operations:
        key = tuple(op[1])
        o = {"type": op[0], **key_variables(key)}
        if op[0] == "PUT":
            o["content"] = {"type": op[4], "id": op[3]}
        ops.append(o)
    return {"commit": commit, "operations": ops}


class ReadsMixin(MergeMixin):
    """Log, entries, diff, contents, reference metadata."""

    # -- log ----------------------------------------------------------------------------------

    def log(
        self,
        start: str,
        *,
        limit_hash: str | None = None,
        filter: str | None = None,
        page_token: str | None = None,
        max_records: int | None = None,
    ) -> Page[Commit]:
        """First-parent history from ``start``, newest first, at most 250 per page.

        ``limit_hash`` is the oldest commit included.
        """
        cel = compile_filter(filter)
        size = LOG_PAGE_LIMIT if not max_records else min(max_records, LOG_PAGE_LIMIT)
        if size < 1:
            raise BadRequestError("max-records must be positive")
        limit = validate_hash(limit_hash, "limit hash") if limit_hash else None
        h = validate_hash(page_token, "page token") if page_token else start
        page: Page[Commit] = Page()
        while h != NO_ANCESTOR:
            if len(page.items) >= size:
                page.token = h
                break
            c = self.commit_of(h)
            if cel is None or cel.matches(_commit_filter_vars(c, self.objects.operations(c))):
                page.items.append(c)
            if h == limit:
                break
            h = c.parents[0]
        return page

    # -- entries ------------------------------------------------------------------------------

    def _scan_range(
        self, tree: str | None, rng: KeyRange, after: Key | None
    ) -> Iterator[tuple[Key, LeafValue]]:
        if rng.keys:
            wanted = sorted(set(rng.keys))
            found = index.get_many(self.load_node, tree, wanted)
            for k in wanted:
                if k in found and (after is None or k > after) and rng.contains(k):
                    yield k, found[k]
            return
        start = rng.start()
        if after is not None and (start is None or after >= start):
            it = index.scan(self.load_node, tree, after, after=True)
        else:
            it = index.scan(self.load_node, tree, start)
        for k, v in it:
            if rng.past_end(k):
                return
            if rng.contains(k):
                yield k, v

    def entries(
        self,
        commit_hash: str,
        rng: KeyRange | None = None,
        *,
        filter: str | None = None,
        page_token: str | None = None,
        max_records: int | None = None,
    ) -> Page[tuple[Key, LeafValue]]:
        """Live keys at a commit, in key order, with their (content id, type, value id)."""
        rng = rng or KeyRange()
        cel = compile_filter(filter)
        after = decode_key_token(page_token) if page_token else None
        tree = self.commit_of(commit_hash).tree
        page: Page[tuple[Key, LeafValue]] = Page()
        for k, v in self._scan_range(tree, rng, after):
            if cel is not None and not cel.matches(
                {"entry": {"contentType": v[1], "contentId": v[0], **key_variables(k)}}
            ):
                continue
            if max_records and len(page.items) >= max_records:
                page.token = encode_key_token(page.items[-1][0])
                break
            page.items.append((k, v))
        return page

    # -- diff ---------------------------------------------------------------------------------

    def diff(
        self,
        from_hash: str,
        to_hash: str,
        rng: KeyRange | None = None,
        *,
        filter: str | None = None,
        page_token: str | None = None,
        max_records: int | None = None,
    ) -> Page[tuple[Key, LeafValue | None, LeafValue | None]]:
        """Keys whose content differs between two commits, in key order."""
        rng = rng or KeyRange()
        cel = compile_filter(filter)
        after = decode_key_token(page_token) if page_token else None
        a = self.commit_of(from_hash).tree
        b = self.commit_of(to_hash).tree
        page: Page[tuple[Key, LeafValue | None, LeafValue | None]] = Page()
        for k, x, y in index.diff(self.load_node, a, b):
            if after is not None and k <= after:
                continue
            if rng.past_end(k) and not rng.keys:
                break
            if not rng.contains(k):
                continue
            if cel is not None and not cel.matches({"key": key_variables(k)}):
                continue
            if max_records and len(page.items) >= max_records:
                page.token = encode_key_token(page.items[-1][0])
                break
            page.items.append((k, x, y))
        return page

    # -- contents -----------------------------------------------------------------------------

    def values(self, value_ids: Sequence[str]) -> dict[str, Value]:
        """Content values by id."""
        return self.objects.values(value_ids)

    def get_content(self, commit_hash: str, key: Key, ref_label: str | None = None) -> Value:
        """The content under ``key`` at a commit (404 CONTENT_NOT_FOUND if absent)."""
        leaf = self.tree_get(self.commit_of(commit_hash).tree, key)
        if leaf is None:
            raise ContentNotFoundError(
                f"Could not find content for key '{key_str(key)}' in reference "
                f"'{ref_label or commit_hash}'.",
                key,
            )
        return self.objects.values([leaf[2]])[leaf[2]]

    def get_contents(self, commit_hash: str, keys: Sequence[Key]) -> list[tuple[Key, Value]]:
        """Contents of those ``keys`` that exist (missing ones are left out)."""
        tree = self.commit_of(commit_hash).tree
        found = index.get_many(self.load_node, tree, list(dict.fromkeys(keys)))
        vals = self.objects.values([v[2] for v in found.values()])
        return [(k, vals[v[2]]) for k, v in found.items()]

    # -- references -----------------------------------------------------------------------------

    def reference_metadata(self, rec: RefRecord) -> dict[str, Any]:
        """Nessie's ReferenceMetadata: HEAD meta, commit count, ahead/behind the default."""
        head = self.commit_of(rec.hash)
        out: dict[str, Any] = {
            "numCommitsAhead": None,
            "numCommitsBehind": None,
            "commonAncestorHash": None,
            "commitMetaOfHEAD": commit_meta(head) if rec.hash != NO_ANCESTOR else None,
            "numTotalCommits": head.depth,
        }
        if rec.type == "BRANCH":
            default = self.persist.get_ref(self.default_branch)
            if default is not None:
                base = self.merge_base(rec.hash, default.hash)
                base_depth = self.commit_of(base).depth
                out["commonAncestorHash"] = base
                out["numCommitsAhead"] = head.depth - base_depth
                out["numCommitsBehind"] = self.commit_of(default.hash).depth - base_depth
        return out

    def filter_references(
        self,
        refs: Sequence[RefRecord],
        expression: str | None,
        metadata: Callable[[RefRecord], dict[str, Any]] | None = None,
    ) -> list[RefRecord]:
        """References matching a CEL filter over ``ref``, ``refType``, ``commit``, ``refMeta``."""
        cel = compile_filter(expression)
        if cel is None:
            return list(refs)
        out = []
        for r in refs:
            meta = (metadata or self.reference_metadata)(r)
            head_meta = meta.get("commitMetaOfHEAD") or {}
            variables = {
                "ref": {"name": r.name, "hash": r.hash, "metadata": meta},
                "refType": r.type,
                "commit": head_meta,
                "refMeta": meta,
            }
            if cel.matches(variables):
                out.append(r)
        return out
