"""Versioning logic, written once over the :class:`~loch.store.Persist` contract.

:class:`VersionStore` is the one entry point: references and ref resolution, commits
with per-key conflict detection, merge, transplant, diff, log, entries and contents.
"""

from loch.versioning.merge import KeyMergeMode, KeyResult, MergeResult
from loch.versioning.objects import Commit, Value
from loch.versioning.operations import Delete, Operation, Put, Unchanged, parse_operations
from loch.versioning.reads import KeyRange, Page, ReadsMixin, commit_meta
from loch.versioning.store import CommitResult, Resolved

__all__ = [
    "Commit",
    "CommitResult",
    "Delete",
    "KeyMergeMode",
    "KeyRange",
    "KeyResult",
    "MergeResult",
    "Operation",
    "Page",
    "Put",
    "Resolved",
    "Unchanged",
    "Value",
    "VersionStore",
    "commit_meta",
    "parse_operations",
]


class VersionStore(ReadsMixin):
    """A repository: references, commits, merges and reads over one backend."""
