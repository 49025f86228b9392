"""The version store: references, resolution and commits over a :class:`Persist`.

Merge and transplant live in :mod:`loch.versioning.merge`, reads (log, entries, diff,
contents) in :mod:`loch.versioning.reads`; :class:`VersionStore` combines them.

Every write follows read → build → compare-and-swap → retry: the new objects are built
against the branch HEAD read at the start, published with a conditional reference
update, and rebuilt (with the key conflicts checked again) when another writer moved
the branch in between.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from loch.errors import (
    BadRequestError,
    Conflict,
    ConflictType,
    LochError,
    ReferenceConflictError,
    ReferenceNotFoundError,
    TooManyRequestsError,
)
from loch.model.content import parse_content
from loch.model.keys import Key, key_str, validate_key
from loch.store import (
    NO_ANCESTOR,
    OutboxEvent,
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefRecord,
)
from loch.store.persist import RefMissing
from loch.versioning import index
from loch.versioning.changes import (
    Change,
    ChangeEncoder,
    CommitChange,
    RefAssigned,
    RefCreated,
    RefDeleted,
)
from loch.versioning.combiner import Combiner, Job
from loch.versioning.conflicts import apply_overlay, key_change_conflict, namespace_conflicts
from loch.versioning.index import LeafValue, Node
from loch.versioning.objects import Commit, ObjectReader, encode_commit, encode_value
from loch.versioning.operations import (
    Delete,
    Operation,
    Put,
    check_unique_keys,
    normalize_meta,
)
from loch.versioning.refs import (
    HASH_RE,
    RefSpec,
    parse_ref_spec,
    parse_timestamp_us,
    validate_hash,
    validate_ref_name,
)

__all__ = ["CommitResult", "Resolved", "StoreCore"]

REF_TYPES = ("BRANCH", "TAG")


@dataclass(frozen=True, slots=True)
class Resolved:
    """A resolved reference: name (None when detached), type, and the commit hash."""

    name: str | None
    type: str
    hash: str

    @property
    def is_branch(self) -> bool:
        return self.type == "BRANCH"


@dataclass(frozen=True, slots=True)
class CommitResult:
    """A landed commit: its hash, new content ids, and the commit itself."""

    hash: str
    added_contents: list[tuple[Key, str]]
    commit: Commit
    branch: str


@dataclass
class _Pending:
    """Objects built by one write attempt, published with its reference update."""

    objects: dict[str, bytes] = field(default_factory=dict)
    decoded: dict[str, Any] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    events: Sequence[OutboxEvent] = ()


@dataclass
class _CommitRequest:
    """A commit waiting in its branch's queue (see :class:`~.combiner.Combiner`)."""

    expected: str
    ops: list[Operation]
    meta: dict[str, Any]
    now: int
    new_ids: dict[Key, str] = field(default_factory=dict)


def _now_us() -> int:
    return time.time_ns() // 1000


class StoreCore:
    """References, ref resolution and commits (see :class:`VersionStore`)."""

    max_write_attempts = 200
    max_write_seconds = 30.0

    def __init__(
        self,
        persist: Persist,
        default_branch: str = "main",
        cache_bytes: int = 96 * 1024 * 1024,
        clock: Callable[[], int] = _now_us,
        on_change: ChangeEncoder | None = None,
    ) -> None:
        self.persist = persist
        self.on_change = on_change
        self._committer: Combiner[_CommitRequest] = Combiner(self._commit_batch)
        self.listeners: list[Callable[[Change], None]] = []
        """Called after each change took effect (e.g. to wake the webhook dispatcher)."""
        self.default_branch = validate_ref_name(default_branch, for_create=True)
        self.objects = ObjectReader(persist, cache_bytes)
        self.clock = clock
        self._bootstrap()

    def close(self) -> None:
        """Finish queued commits and stop the commit worker threads (the persist stays
        open: it belongs to the caller)."""
        self._committer.close()

    def _bootstrap(self) -> None:
        from loch.versioning.operations import format_time

        created = self.persist.set_meta_if_absent("created", format_time(self.clock()))
        self.created_at = created
        if self.persist.get_meta("initialized") is None:
            with contextlib.suppress(RefAlreadyExists):
                self.persist.create_ref(RefRecord(self.default_branch, "BRANCH", NO_ANCESTOR))
            self.persist.set_meta("initialized", "1")

    # -- helpers ------------------------------------------------------------------------

    def load_node(self, node_id: str) -> Node:
        """Key-index node loader (for :mod:`loch.versioning.index`)."""
        return self.objects.node(node_id)

    def commit_of(self, commit_hash: str) -> Commit:
        """The commit with this hash (404 if absent)."""
        return self.objects.commit(commit_hash)

    def tree_get(self, tree: str | None, key: Key) -> LeafValue | None:
        """A key's leaf value in a tree."""
        return index.get(self.load_node, tree, key)

    def _backoff(self, attempt: int, started: float) -> None:
        if attempt + 1 >= self.max_write_attempts or (
            time.monotonic() - started > self.max_write_seconds
        ):
            raise TooManyRequestsError(
                "The reference kept moving while writing; retry the operation"
            )
        time.sleep(random.uniform(0, min(0.05, 0.0005 * (2 ** min(attempt, 7)))))

    def _events(self, change: Change) -> Sequence[OutboxEvent]:
        return self.on_change(change) if self.on_change is not None else ()

    def _publish(
        self, branch: str, head: str, new: str, pending: _Pending, change: Change | None = None
    ) -> bool:
        """CAS the branch from ``head`` to ``new`` with the pending objects and events."""
        events = self._events(change) if change is not None else ()
        try:
            self.persist.update_ref(branch, head, new, pending.objects, events)
        except RefConditionFailed:
            return False
        except RefMissing:
            raise ReferenceNotFoundError(f"Named reference '{branch}' not found") from None
        self.objects.remember(pending.decoded, pending.objects)
        if change is not None:
            self._notify(change)
        return True

    def _notify(self, change: Change) -> None:
        for listener in self.listeners:
            listener(change)

    def _new_commit(
        self,
        pending: _Pending,
        parents: list[str],
        tree: str | None,
        meta: dict[str, Any],
        ops: list[list[Any]],
        time_us: int,
    ) -> Commit:
        first = self._pending_commit(pending, parents[0])
        gen = 1 + max(self._pending_commit(pending, p).gen for p in parents)
        depth = first.depth + 1
        skip = self._ancestor_at(
            first, depth - (depth & -depth), lambda h: self._pending_commit(pending, h)
        ).id
        merges = first.merges + (1 if len(parents) > 1 else 0)
        cid, data = encode_commit(parents, tree, meta, ops, gen, depth, time_us, skip, merges)
        commit = Commit(cid, tuple(parents), tree, meta, ops, gen, depth, time_us, skip, merges)
        pending.objects[cid] = data
        pending.decoded[cid] = commit
        return commit

    def _pending_commit(self, pending: _Pending, commit_id: str) -> Commit:
        c = pending.decoded.get(commit_id)
        return c if isinstance(c, Commit) else self.commit_of(commit_id)

    def _loader(self, pending: _Pending) -> index.NodeLoader:
        """A node loader that also sees the nodes built but not yet published."""

        def load(node_id: str) -> Node:
            n = pending.decoded.get(node_id)
            return n if isinstance(n, Node) else self.load_node(node_id)

        return load

    def _update_tree(
        self, pending: _Pending, tree: str | None, edits: dict[Key, LeafValue | None]
    ) -> str | None:
        created: dict[str, Node] = {}
        root = index.update(self._loader(pending), tree, edits, pending.objects, created)
        pending.decoded.update(created)
        return root

    # -- references -----------------------------------------------------------------------

    def get_reference(self, name: str) -> RefRecord:
        """A named reference (404 if missing)."""
        validate_ref_name(name)
        rec = self.persist.get_ref(name)
        if rec is None:
            raise ReferenceNotFoundError(f"Named reference '{name}' not found")
        return rec

    def list_references(self) -> list[RefRecord]:
        """All named references, by name."""
        return self.persist.list_refs()

    def _require_commit(self, commit_hash: str) -> str:
        h = validate_hash(commit_hash)
        if not self.objects.has_commit(h):
            raise ReferenceNotFoundError(f"Commit '{h}' not found")
        return h

    def create_reference(self, name: str, ref_type: str, target: str | None) -> RefRecord:
        """Create a branch or tag at ``target`` (a commit hash).

        Raises:
            BadRequestError: invalid name or type, or no target hash.
            ReferenceNotFoundError: the target commit does not exist.
            ReferenceAlreadyExistsError: the name is taken.
        """
        validate_ref_name(name, for_create=True)
        ref_type = _ref_type(ref_type)
        if target is None:
            if name != self.default_branch:
                raise BadRequestError("Target hash must be provided.")
            target = NO_ANCESTOR
        target = self._require_commit(target)
        rec = RefRecord(name, ref_type, target)
        created = RefCreated(rec, self.clock())
        self.persist.create_ref(rec, events=self._events(created))
        self._notify(created)
        return rec

    def assign_reference(
        self,
        name: str,
        expected: str,
        target: str,
        ref_type: str | None = None,
        target_ref: tuple[str, str | None] = ("DETACHED", None),
    ) -> RefRecord:
        """Point ``name`` at ``target`` if it is at ``expected``.

        ``target_ref`` is the (type, name) the target was given as, for the event.
        """
        rec = self._checked_ref(name, ref_type)
        expected = validate_hash(expected, "expected hash")
        target = self._require_commit(target)
        before = RefRecord(name, rec.type, expected)
        change = RefAssigned(before, target_ref[0], target_ref[1], target, self.clock())
        try:
            self.persist.update_ref(name, expected, target, events=self._events(change))
        except RefConditionFailed as e:
            raise _unexpected_hash(e) from None
        self._notify(change)
        return RefRecord(name, rec.type, target)

    def delete_reference(self, name: str, expected: str, ref_type: str | None = None) -> RefRecord:
        """Delete ``name`` if it is at ``expected`` (never the default branch)."""
        rec = self._checked_ref(name, ref_type)
        if name == self.default_branch:
            raise BadRequestError(f"Default branch '{name}' cannot be deleted.")
        expected = validate_hash(expected, "expected hash")
        change = RefDeleted(RefRecord(name, rec.type, expected), self.clock())
        try:
            self.persist.delete_ref(name, expected, self._events(change))
        except RefConditionFailed as e:
            raise _unexpected_hash(e) from None
        self._notify(change)
        return RefRecord(name, rec.type, expected)

    def _checked_ref(self, name: str, ref_type: str | None) -> RefRecord:
        rec = self.get_reference(name)
        if ref_type is not None and _ref_type(ref_type) != rec.type:
            raise ReferenceNotFoundError(
                f"Named reference '{name}' is not a {_ref_type(ref_type).lower()}"
            )
        return rec

    # -- resolution -----------------------------------------------------------------------

    def parse(self, text: str) -> RefSpec:
        """Parse a reference expression (``-`` = default branch)."""
        return parse_ref_spec(text, self.default_branch)

    def resolve(self, spec: str | RefSpec) -> Resolved:
        """Resolve ``name``, ``name@hash``, ``@hash`` and relative steps to a commit.

        A read at ``name@hash`` only checks that the commit exists.

        Raises:
            ReferenceNotFoundError: unknown name, commit, or a step past the root.
        """
        if isinstance(spec, str):
            spec = self.parse(spec)
        name, h = spec.name, spec.hash
        rtype = "DETACHED"
        if name is not None:
            rec = self.persist.get_ref(name)
            if rec is None:
                if h is None and HASH_RE.match(name):
                    h, name = name.lower(), None
                else:
                    raise ReferenceNotFoundError(f"Named reference '{name}' not found")
            else:
                rtype = rec.type
                if h is None:
                    h = rec.hash
        assert h is not None
        if not self.objects.has_commit(h):
            raise ReferenceNotFoundError(f"Commit '{h}' not found")
        for step in spec.relative:
            h = self._relative(h, step.kind, step.value)
        return Resolved(name, rtype, h)

    def _relative(self, h: str, kind: str, value: str) -> str:
        if kind == "~":
            n = int(value)
            c = self.commit_of(h)
            if n > c.depth:
                raise ReferenceNotFoundError(f"Commit '{h}' has fewer than {n} ancestors")
            return self.ancestor_at(h, c.depth - n).id
        if kind == "^":
            n = int(value)
            if n == 0:
                return h
            c = self.commit_of(h)
            if n > len(c.parents):
                raise ReferenceNotFoundError(f"Commit '{h}' has no parent number {n}")
            return c.parents[n - 1]
        t = parse_timestamp_us(value)
        while h != NO_ANCESTOR:
            c = self.commit_of(h)
            if c.time_us <= t:
                return h
            h = c.parents[0]
        raise ReferenceNotFoundError(f"No commit at or before '{value}'")

    def resolve_branch_write(self, name: str, expected: str | None, what: str) -> str:
        """Check a write target: a branch ``name`` and its absolute expected hash."""
        rec = self.get_reference(name)
        if rec.type != "BRANCH":
            raise BadRequestError(f"{what} reference '{name}' must be a branch.")
        if expected is None:
            raise BadRequestError(f"Expected hash must be provided for {what.lower()}.")
        return validate_hash(expected, "expected hash")

    def check_in_history(self, branch: str, head: str, expected: str) -> None:
        """404 unless ``expected`` is on the first-parent chain of ``head``."""
        self._check_in_history(branch, self.commit_of(head), expected, _Pending())

    def _check_in_history(
        self, branch: str, head: Commit, expected: str, pending: _Pending
    ) -> None:
        if expected in (head.id, NO_ANCESTOR):
            return
        missing = ReferenceNotFoundError(
            f"Could not find commit '{expected}' in reference '{branch}'."
        )
        try:
            target = self.commit_of(expected)
        except ReferenceNotFoundError:
            raise missing from None
        found = self._ancestor_at(head, target.depth, lambda h: self._pending_commit(pending, h))
        if found.id != expected:
            raise missing

    def ancestor_at(self, commit_hash: str, depth: int) -> Commit:
        """The first-parent ancestor of a commit at ``depth`` (the root at 0 or below)."""
        return self._ancestor_at(self.commit_of(commit_hash), depth, self.commit_of)

    @staticmethod
    def _ancestor_at(c: Commit, depth: int, load: Callable[[str], Commit]) -> Commit:
        depth = max(0, depth)
        while c.depth > depth:
            d = c.depth
            c = load(c.skip) if d - (d & -d) >= depth else load(c.parents[0])
        return c

    # -- commit ---------------------------------------------------------------------------

    def commit(
        self,
        branch: str,
        expected: str | None,
        meta: dict[str, Any] | None,
        operations: Sequence[Operation],
        committer: str = "",
    ) -> CommitResult:
        """Commit ``operations`` to ``branch``, checked against ``expected``.

        Keys changed on the branch since ``expected`` conflict; a commit whose keys did
        not change lands on the current HEAD.

        Raises:
            BadRequestError: invalid operations or content ids, or not a branch.
            ReferenceNotFoundError: unknown branch, or ``expected`` not in its history.
            ReferenceConflictError: key conflicts or namespace rules (all reported).
        """
        request = self._commit_request(branch, expected, meta, operations, committer)
        result: CommitResult = self._committer.submit(branch, request)
        return result

    async def commit_async(
        self,
        branch: str,
        expected: str | None,
        meta: dict[str, Any] | None,
        operations: Sequence[Operation],
        committer: str = "",
    ) -> CommitResult:
        """:meth:`commit` for an event loop: checks the request on the loop (no I/O),
        then waits for the batch that applies it without blocking the loop."""
        request = self._commit_request(branch, expected, meta, operations, committer)
        result: CommitResult = await self._committer.submit_async(branch, request)
        return result

    def _commit_request(
        self,
        branch: str,
        expected: str | None,
        meta: dict[str, Any] | None,
        operations: Sequence[Operation],
        committer: str,
    ) -> _CommitRequest:
        """Check a commit's arguments; the branch itself is read by its batch."""
        validate_ref_name(branch)
        if expected is None:
            raise BadRequestError("Expected hash must be provided for commit.")
        expected = validate_hash(expected, "expected hash")
        ops = [_normalized(op) for op in operations]
        if not ops:
            raise BadRequestError("A commit must have at least one operation")
        check_unique_keys(ops)
        now = self.clock()
        meta_n = normalize_meta(meta, committer, now)
        return _CommitRequest(expected, ops, meta_n, now)

    def _commit_batch(self, branch: Hashable, jobs: Sequence[Job[_CommitRequest]]) -> None:
        """Apply queued commits to ``branch`` one after the other and publish them with one
        reference update (one transaction, one sync to disk). A commit that fails (conflict,
        invalid ids, unknown expected hash) fails alone; the others still land."""
        assert isinstance(branch, str)
        started = time.monotonic()
        for attempt in range(self.max_write_attempts):
            ref = self.get_reference(branch)
            if ref.type != "BRANCH":
                for job in jobs:
                    job.error = BadRequestError(f"Commit reference '{branch}' must be a branch.")
                return
            head = ref.hash
            pending = _Pending()
            load = self._loader(pending)
            cur = self._pending_commit(pending, head)
            events: list[OutboxEvent] = []
            landed: list[tuple[Job[_CommitRequest], CommitResult, Change]] = []
            for job in jobs:
                req = job.payload
                job.error = None
                try:
                    self._check_in_history(branch, cur, req.expected, pending)
                    exp_tree = self.commit_of(req.expected).tree
                    edits, stored_ops, added = self._prepare_ops(
                        pending, req.ops, exp_tree, cur.tree, req.new_ids, load
                    )
                    tree = self._update_tree(pending, cur.tree, edits)
                    c = self._new_commit(pending, [cur.id], tree, req.meta, stored_ops, req.now)
                except LochError as e:
                    job.error = e
                    continue
                change = CommitChange(branch, cur.id, c, pending.values, req.now)
                events.extend(self._events(change))
                landed.append((job, CommitResult(c.id, added, c, branch), change))
                cur = c
            if not landed:
                return
            try:
                self.persist.update_ref(branch, head, cur.id, pending.objects, events)
            except RefConditionFailed:
                self._backoff(attempt, started)
                continue
            except RefMissing:
                raise ReferenceNotFoundError(f"Named reference '{branch}' not found") from None
            self.objects.remember(pending.decoded, pending.objects)
            for job, result, landed_change in landed:
                job.result = result
                self._notify(landed_change)
            return
        raise TooManyRequestsError("The branch kept moving while committing; retry")

    def _prepare_ops(
        self,
        pending: _Pending,
        ops: list[Operation],
        exp_tree: str | None,
        head_tree: str | None,
        new_ids: dict[Key, str],
        load: index.NodeLoader,
    ) -> tuple[dict[Key, LeafValue | None], list[list[Any]], list[tuple[Key, str]]]:
        keys = list({op.key: None for op in ops})
        exp_state = index.get_many(load, exp_tree, keys)
        head_state = exp_state if exp_tree == head_tree else index.get_many(load, head_tree, keys)
        deleted = {op.key for op in ops if isinstance(op, Delete)}
        deleted_ids = {exp_state[k][0] for k in deleted if k in exp_state}
        used_ids: set[str] = set()
        edits: dict[Key, LeafValue | None] = {}
        stored: list[list[Any]] = []
        added: list[tuple[Key, str]] = []
        puts: list[Put] = []
        for op in ops:
            if isinstance(op, Delete):
                edits.setdefault(op.key, None)
                stored.append(["DELETE", list(op.key)])
            elif isinstance(op, Put):
                puts.append(op)
        for op in puts:
            k, content = op.key, dict(op.content)
            cid = content.get("id")
            existing = exp_state.get(k)
            ks = key_str(k)
            if existing is not None and k not in deleted:
                if cid is None:
                    raise BadRequestError(
                        f"New value to update existing key '{ks}' has no content ID"
                    )
                if cid != existing[0]:
                    raise BadRequestError(
                        f"Key '{ks}' already exists with content ID {existing[0]}, which is "
                        f"different from the content ID {cid} in the operation"
                    )
            elif cid is not None and cid not in deleted_ids:
                raise BadRequestError(f"New value for key '{ks}' must not have a content ID")
            if cid is None:
                cid = new_ids.setdefault(k, str(uuid.uuid4()))
                added.append((k, cid))
                content["id"] = cid
            else:
                _check_uuid(cid, ks)
            if cid in used_ids:
                raise BadRequestError(f"Content ID {cid} is used more than once in the commit")
            used_ids.add(cid)
            vid, data = encode_value(content, op.documentation)
            pending.objects[vid] = data
            pending.values[vid] = content
            edits[k] = (cid, content["type"], vid)
            stored.append(["PUT", list(k), vid, cid, content["type"]])
        conflicts: list[Conflict] = []
        if exp_tree != head_tree:
            for k in keys:
                c = key_change_conflict(k, exp_state.get(k), head_state.get(k))
                if c is not None:
                    conflicts.append(c)
        conflicted = {c.key for c in conflicts}
        for op in ops:
            if isinstance(op, Delete) and op.key not in head_state and op.key not in conflicted:
                conflicts.append(
                    Conflict(
                        ConflictType.KEY_DOES_NOT_EXIST,
                        op.key,
                        f"key '{key_str(op.key)}' does not exist",
                    )
                )
        conflicts.extend(self._namespace_check(head_tree, head_state, edits, load))
        if conflicts:
            raise ReferenceConflictError.from_conflicts(conflicts)
        return edits, stored, added

    def _namespace_check(
        self,
        tree: str | None,
        before: dict[Key, LeafValue],
        edits: dict[Key, LeafValue | None],
        load: index.NodeLoader | None = None,
    ) -> list[Conflict]:
        """Namespace rules for ``edits`` applied to ``tree`` (``before``: touched keys)."""
        new_keys = [
            k
            for k, v in edits.items()
            if v is not None and len(k) > 1 and (k not in before or before[k][0] != v[0])
        ]
        deleted_ns = [
            k
            for k, v in edits.items()
            if k in before and before[k][1] == "NAMESPACE" and (v is None or v[1] != "NAMESPACE")
        ]
        if not new_keys and not deleted_ns:
            return []
        load = load or self.load_node
        after = apply_overlay(lambda key: index.get(load, tree, key), edits)

        def first_child(ns: Key) -> Key | None:
            n = len(ns)
            for k, v in edits.items():
                if v is not None and len(k) > n and k[:n] == ns:
                    return k
            for k, _ in index.scan(load, tree, ns, after=True):
                if k[:n] != ns:
                    return None
                if k in edits and edits[k] is None:
                    continue
                return k
            return None

        return namespace_conflicts(new_keys, deleted_ns, after, first_child)


def _normalized(op: Operation) -> Operation:
    """Validate a PUT's content (whoever built the operation) and tie a namespace's
    elements to its key."""
    validate_key(op.key)
    if not isinstance(op, Put):
        return op
    content = parse_content(op.content)
    if content["type"] == "NAMESPACE":
        content["elements"] = list(op.key)
    return Put(op.key, content, op.documentation)


def _check_uuid(cid: str, ks: str) -> None:
    try:
        uuid.UUID(cid)
    except (ValueError, AttributeError, TypeError):
        raise BadRequestError(f"Content ID '{cid}' of key '{ks}' is not a UUID") from None


def _ref_type(value: str) -> str:
    t = (value or "").upper()
    if t not in REF_TYPES:
        raise BadRequestError(f"Reference type must be BRANCH or TAG, not '{value}'")
    return t


def _unexpected_hash(e: RefConditionFailed) -> ReferenceConflictError:
    msg = f"named-reference '{e.name}' is not at expected hash '{e.expected}', but at '{e.actual}'"
    return ReferenceConflictError(
        msg[:1].upper() + msg[1:] + ".",
        [Conflict(ConflictType.UNEXPECTED_HASH, None, msg)],
    )
