"""Merge (squash, two parents) and transplant (cherry-pick, one commit per source commit)."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from loch.errors import (
    BadRequestError,
    Conflict,
    ConflictType,
    ReferenceConflictError,
    ReferenceNotFoundError,
    TooManyRequestsError,
)
from loch.model.content import parse_content
from loch.model.keys import Key, key_str
from loch.store import NO_ANCESTOR
from loch.versioning import index
from loch.versioning.changes import MergeChange, TransplantChange
from loch.versioning.conflicts import key_change_conflict
from loch.versioning.index import LeafValue
from loch.versioning.objects import Commit, encode_value
from loch.versioning.operations import format_time, normalize_meta
from loch.versioning.refs import validate_hash
from loch.versioning.store import StoreCore, _Pending

__all__ = ["KeyMergeMode", "KeyResult", "MergeMixin", "MergeResult"]

BEHAVIORS = ("NORMAL", "FORCE", "DROP")


@dataclass(frozen=True)
class KeyMergeMode:
    """Per-key merge behaviour, optionally with the expected and resolved content."""

    key: Key
    behavior: str = "NORMAL"
    expected_target_content: dict[str, Any] | None = None
    resolved_content: dict[str, Any] | None = None
    resolved_documentation: dict[str, Any] | None = None


@dataclass(frozen=True)
class KeyResult:
    """What happened to one key changed on the source side."""

    key: Key
    behavior: str
    conflict: Conflict | None = None


@dataclass
class MergeResult:
    """Outcome of a merge or transplant (``MergeResponse`` on the wire)."""

    was_applied: bool
    was_successful: bool
    resultant_target_hash: str | None
    common_ancestor: str | None
    target_branch: str
    effective_target_hash: str
    expected_hash: str | None
    details: list[KeyResult] = field(default_factory=list)
    source_hashes: list[str] = field(default_factory=list)
    new_commits: list[Commit] = field(default_factory=list)


def _behavior(value: str | None) -> str:
    if value is not None and not isinstance(value, str):
        raise BadRequestError("Merge behavior must be NORMAL, FORCE or DROP")
    b = (value or "NORMAL").upper()
    if b not in BEHAVIORS:
        raise BadRequestError(f"Merge behavior must be NORMAL, FORCE or DROP, not '{value}'")
    return b


class MergeMixin(StoreCore):
    """Merge-base search, merge and transplant."""

    def merge_base(self, a: str, b: str) -> str:
        """The nearest common ancestor of two commits.

        Walks from both sides in descending generation order, so only the commits
        between the heads and their merge base are visited.
        """
        if a == b:
            return a
        fast = self._linear_merge_base(a, b)
        if fast is not None:
            return fast
        flags: dict[str, int] = {a: 1, b: 2}
        heap: list[tuple[int, str]] = [(-self.commit_of(a).gen, a), (-self.commit_of(b).gen, b)]
        heapq.heapify(heap)
        done: set[str] = set()
        while heap:
            _, h = heapq.heappop(heap)
            if h in done:
                continue
            done.add(h)
            f = flags[h]
            if f == 3:
                return h
            for p in self.commit_of(h).parents:
                old = flags.get(p, 0)
                if old | f != old:
                    flags[p] = old | f
                    heapq.heappush(heap, (-self.commit_of(p).gen, p))
        return NO_ANCESTOR

    def _linear_merge_base(self, a: str, b: str) -> str | None:
        """The merge base when no merge commit lies between either head and the lowest
        common ancestor of their first-parent chains; None otherwise.

        The lowest common ancestor is found by binary search over depths with skip
        pointers (O(log² n) commit reads). When both chains are linear down to it, every
        ancestor of either head is on its first-parent chain, so it is the merge base.
        """
        ca, cb = self.commit_of(a), self.commit_of(b)
        lo, hi = 0, min(ca.depth, cb.depth)  # depth lo is common (the root); find the max
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.ancestor_at(a, mid).id == self.ancestor_at(b, mid).id:
                lo = mid
            else:
                hi = mid - 1
        lca = self.ancestor_at(a, lo)
        if ca.merges == lca.merges and cb.merges == lca.merges:
            return lca.id
        return None

    # -- shared per-key rules -------------------------------------------------------------

    def _decide(
        self,
        pending: _Pending,
        key: Key,
        expected: LeafValue | None,
        source: LeafValue | None,
        target: LeafValue | None,
        default: str,
        modes: dict[Key, KeyMergeMode],
    ) -> tuple[str, LeafValue | None, Conflict | None]:
        """Decide one key: returns (behavior, value to apply or "skip" marker, conflict).

        The value is returned as ``source`` when it must be applied; ``None`` values mean
        delete. A skip is signalled by returning the target unchanged.
        """
        mode = modes.get(key)
        behavior = _behavior(mode.behavior if mode else default)
        if mode is not None and mode.expected_target_content is not None:
            behavior = "NORMAL"
            expected = self._leaf_for_content(pending, mode.expected_target_content, None)
            if target is not None and expected is not None and target[:2] == expected[:2]:
                # compare by content, not by documentation
                tval = self.objects.values([target[2]])[target[2]].content
                if tval == parse_content(mode.expected_target_content):
                    expected = target
        if mode is not None and mode.resolved_content is not None:
            if mode.expected_target_content is None:
                raise BadRequestError(
                    f"Resolved content for key '{key_str(key)}' requires expectedTargetContent"
                )
            source = self._leaf_for_content(
                pending, mode.resolved_content, mode.resolved_documentation
            )
        if behavior == "DROP":
            return behavior, target, None
        if target == source:
            return behavior, target, None
        if target == expected or behavior == "FORCE":
            return behavior, source, None
        if (
            expected is None
            and source is not None
            and target is not None
            and source[1] == target[1] == "NAMESPACE"
        ):
            return behavior, target, None
        conflict = key_change_conflict(key, expected, target) or Conflict(
            ConflictType.KEY_CONFLICT, key, f"the key '{key_str(key)}' has conflicting changes"
        )
        return behavior, target, conflict

    def _leaf_for_content(
        self, pending: _Pending, obj: dict[str, Any], doc: dict[str, Any] | None
    ) -> LeafValue:
        content = parse_content(obj)
        if content.get("id") is None:
            raise BadRequestError("Content given for a merge needs its content ID")
        vid, data = encode_value(content, doc)
        pending.objects[vid] = data
        return (content["id"], content["type"], vid)

    def _check_modes(
        self, modes: Sequence[KeyMergeMode], changed: set[Key]
    ) -> dict[Key, KeyMergeMode]:
        out: dict[Key, KeyMergeMode] = {}
        for m in modes:
            if m.key not in changed:
                raise BadRequestError(
                    f"Merge key mode for key '{key_str(m.key)}' is not part of the merge"
                )
            out[m.key] = m
        return out

    def _conflict_error(self, conflicts: list[Conflict]) -> ReferenceConflictError:
        keys = ", ".join(f"'{key_str(c.key)}'" for c in conflicts if c.key is not None)
        return ReferenceConflictError(
            f"The following keys have been changed in conflict: {keys}", conflicts
        )

    def _source(self, from_ref_name: str | None, from_hash: str | None) -> str:
        if from_hash is None:
            raise BadRequestError("The hash of the source reference must be provided.")
        h = validate_hash(from_hash, "source hash")
        if from_ref_name and from_ref_name.upper() != "DETACHED":
            self.get_reference(from_ref_name)
        if not self.objects.has_commit(h):
            raise ReferenceNotFoundError(f"Commit '{h}' not found")
        return h

    # -- merge ------------------------------------------------------------------------------

    def merge(
        self,
        branch: str,
        expected: str | None,
        from_ref_name: str | None,
        from_hash: str | None,
        *,
        key_modes: Sequence[KeyMergeMode] = (),
        default_mode: str | None = None,
        dry_run: bool = False,
        return_conflicts: bool = False,
        meta: dict[str, Any] | None = None,
        message: str | None = None,
        committer: str = "",
    ) -> MergeResult:
        """Squash the changes of ``from_hash`` since the merge base onto ``branch``.

        Raises:
            ReferenceConflictError: conflicting keys (unless ``return_conflicts``).
        """
        expected = self.resolve_branch_write(branch, expected, "Merge")
        default = _behavior(default_mode)
        src = self._source(from_ref_name, from_hash)
        started = time.monotonic()
        for attempt in range(self.max_write_attempts):
            head = self.get_reference(branch).hash
            self.check_in_history(branch, head, expected)
            base = self.merge_base(head, src)
            result = MergeResult(
                False, True, head, base, branch, head, expected, source_hashes=[src]
            )
            if base == src:
                return result
            pending = _Pending()
            head_c, src_c, base_c = self.commit_of(head), self.commit_of(src), self.commit_of(base)
            changes = list(index.diff(self.load_node, base_c.tree, src_c.tree))
            modes = self._check_modes(key_modes, {k for k, _, _ in changes})
            targets = index.get_many(self.load_node, head_c.tree, [k for k, _, _ in changes])
            edits: dict[Key, LeafValue | None] = {}
            conflicts: list[Conflict] = []
            for key, base_v, src_v in changes:
                target = targets.get(key)
                behavior, value, conflict = self._decide(
                    pending, key, base_v, src_v, target, default, modes
                )
                result.details.append(KeyResult(key, behavior, conflict))
                if conflict is not None:
                    conflicts.append(conflict)
                elif value != target:
                    edits[key] = value
            conflicts.extend(self._namespace_check(head_c.tree, targets, edits))
            if conflicts:
                return self._fail(result, conflicts, return_conflicts)
            if not edits or dry_run:
                result.resultant_target_hash = None if dry_run else head
                return result
            if meta is None:
                meta = {}
            now = self.clock()
            meta_n = normalize_meta(meta, committer, now)
            if not meta_n["message"]:
                meta_n["message"] = message or (
                    f"Merged {from_ref_name or 'DETACHED'} at {src} into {branch} at {head}"
                )
            tree = self._update_tree(pending, head_c.tree, edits)
            c = self._new_commit(pending, [head, src], tree, meta_n, _stored_ops(edits), now)
            change = MergeChange(branch, from_ref_name, src, head, c, now)
            if self._publish(branch, head, c.id, pending, change):
                result.was_applied = True
                result.resultant_target_hash = c.id
                result.new_commits = [c]
                return result
            self._backoff(attempt, started)
        raise TooManyRequestsError("The branch kept moving while merging; retry")

    def _fail(
        self, result: MergeResult, conflicts: list[Conflict], return_conflicts: bool
    ) -> MergeResult:
        if not return_conflicts:
            raise self._conflict_error(conflicts)
        result.was_successful = False
        result.resultant_target_hash = None
        return result

    # -- transplant ------------------------------------------------------------------------------

    def transplant(
        self,
        branch: str,
        expected: str | None,
        from_ref_name: str | None,
        hashes: Sequence[str],
        *,
        message: str | None = None,
        key_modes: Sequence[KeyMergeMode] = (),
        default_mode: str | None = None,
        dry_run: bool = False,
        return_conflicts: bool = False,
        committer: str = "",
    ) -> MergeResult:
        """Replay ``hashes`` (oldest first, a contiguous chain) onto ``branch``."""
        expected = self.resolve_branch_write(branch, expected, "Transplant")
        default = _behavior(default_mode)
        if not hashes:
            raise BadRequestError("No hashes to transplant given.")
        srcs = [validate_hash(h, "hash to transplant") for h in hashes]
        self._source(from_ref_name, srcs[-1])
        commits = [self.commit_of(h) for h in srcs]
        for prev, cur in itertools.pairwise(commits):
            if not cur.parents or cur.parents[0] != prev.id:
                raise BadRequestError("Sequence of hashes is not contiguous.")
        started = time.monotonic()
        for attempt in range(self.max_write_attempts):
            head = self.get_reference(branch).hash
            self.check_in_history(branch, head, expected)
            result = MergeResult(
                False, True, head, None, branch, head, expected, source_hashes=srcs
            )
            pending = _Pending()
            tree = self.commit_of(head).tree
            parent = head
            conflicts: list[Conflict] = []
            new_commits: list[Commit] = []
            seen: set[Key] = set()
            all_changed: set[Key] = set()
            per_commit = []
            for c in commits:
                ptree = self.commit_of(c.parents[0]).tree if c.parents else None
                changes = list(index.diff(self.load_node, ptree, c.tree))
                per_commit.append(changes)
                all_changed.update(k for k, _, _ in changes)
            modes = self._check_modes(key_modes, all_changed)
            load = self._loader(pending)
            for c, changes in zip(commits, per_commit, strict=True):
                targets = index.get_many(load, tree, [k for k, _, _ in changes])
                edits: dict[Key, LeafValue | None] = {}
                for key, before, after in changes:
                    target = targets.get(key)
                    behavior, value, conflict = self._decide(
                        pending, key, before, after, target, default, modes
                    )
                    if key not in seen:
                        seen.add(key)
                        result.details.append(KeyResult(key, behavior, conflict))
                    if conflict is not None:
                        conflicts.append(conflict)
                    elif value != target:
                        edits[key] = value
                conflicts.extend(self._namespace_check(tree, targets, edits, load))
                if not edits:
                    continue
                # Keep replaying after a conflict (nothing is published then), so that
                # later commits are checked against their own earlier changes.
                meta = dict(c.meta)
                now = self.clock()
                meta["committer"] = committer
                meta["commitTime"] = format_time(now)
                if message and len(commits) == 1:
                    meta["message"] = message
                tree = self._update_tree(pending, tree, edits)
                nc = self._new_commit(pending, [parent], tree, meta, _stored_ops(edits), now)
                new_commits.append(nc)
                parent = nc.id
            if conflicts:
                return self._fail(result, conflicts, return_conflicts)
            if not new_commits or dry_run:
                result.resultant_target_hash = None if dry_run else head
                return result
            change = TransplantChange(
                branch, from_ref_name, srcs, head, parent, new_commits, self.clock()
            )
            if self._publish(branch, head, parent, pending, change):
                result.was_applied = True
                result.resultant_target_hash = parent
                result.new_commits = new_commits
                return result
            self._backoff(attempt, started)
        raise TooManyRequestsError("The branch kept moving while transplanting; retry")


def _stored_ops(edits: dict[Key, LeafValue | None]) -> list[list[Any]]:
    ops: list[list[Any]] = []
    for k, v in sorted(edits.items()):
        if v is None:
            ops.append(["DELETE", list(k)])
        else:
            ops.append(["PUT", list(k), v[2], v[0], v[1]])
    return ops
