"""Changes the version store made, handed to an encoder that turns them into events.

The encoder runs before the reference update, and its events are written to the outbox
in the same transaction (see :meth:`loch.store.Persist.update_ref`): an event exists if
and only if its change does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from loch.store import OutboxEvent, RefRecord
from loch.versioning.objects import Commit

__all__ = [
    "Change",
    "ChangeEncoder",
    "CommitChange",
    "MergeChange",
    "RefAssigned",
    "RefCreated",
    "RefDeleted",
    "TransplantChange",
]


@dataclass(frozen=True)
class CommitChange:
    """A commit landed on ``branch``; ``values`` maps value ids of its PUTs to content."""

    branch: str
    previous_hash: str
    commit: Commit
    values: Mapping[str, dict[str, Any]]
    time_us: int


@dataclass(frozen=True)
class MergeChange:
    """``from_hash`` was merged into ``branch`` (at ``expected_hash``) as ``commit``."""

    branch: str
    from_ref: str | None
    from_hash: str
    expected_hash: str
    commit: Commit
    time_us: int


@dataclass(frozen=True)
class TransplantChange:
    """``hashes`` were replayed onto ``branch`` (at ``expected_hash``), ending at ``new_hash``."""

    branch: str
    from_ref: str | None
    hashes: Sequence[str]
    expected_hash: str
    new_hash: str
    commits: Sequence[Commit]
    time_us: int


@dataclass(frozen=True)
class RefCreated:
    """A branch or tag was created."""

    ref: RefRecord
    time_us: int


@dataclass(frozen=True)
class RefAssigned:
    """``before`` was pointed at ``target_hash`` (given as a reference of ``target_type``)."""

    before: RefRecord
    target_type: str
    target_name: str | None
    target_hash: str
    time_us: int


@dataclass(frozen=True)
class RefDeleted:
    """A branch or tag was deleted."""

    ref: RefRecord
    time_us: int


Change = CommitChange | MergeChange | TransplantChange | RefCreated | RefAssigned | RefDeleted

ChangeEncoder = Callable[[Change], Sequence[OutboxEvent]]
"""Turns a change into the events to record with it."""
