"""Event types and their JSON payloads, in the shapes of the notifications design.

References, CommitMeta and operations use the Nessie API v2 model. The design's COMMIT
schema names the committed branch ``branch`` while its example (and the reference
events) say ``reference``; Loch emits ``reference``.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from typing import Any

import orjson

from loch.model.views import commit_meta_v2, key_json, ref_json
from loch.store import OutboxEvent
from loch.versioning.changes import (
    Change,
    CommitChange,
    MergeChange,
    RefAssigned,
    RefCreated,
    RefDeleted,
    TransplantChange,
)
from loch.versioning.objects import Commit
from loch.versioning.operations import format_time

__all__ = ["KIND_TO_TYPE", "EventType", "encode_change"]


class EventType(enum.StrEnum):
    """The events a notification can subscribe to."""

    COMMIT = "COMMIT"
    MERGE = "MERGE"
    TRANSPLANT = "TRANSPLANT"
    REFERENCE_CREATED = "REFERENCE_CREATED"
    REFERENCE_ASSIGNED = "REFERENCE_ASSIGNED"
    REFERENCE_DELETED = "REFERENCE_DELETED"


KIND_TO_TYPE: dict[str, EventType] = {
    "commits": EventType.COMMIT,
    "merges": EventType.MERGE,
    "transplants": EventType.TRANSPLANT,
    "references-created": EventType.REFERENCE_CREATED,
    "references-deleted": EventType.REFERENCE_DELETED,
    "references-assigned": EventType.REFERENCE_ASSIGNED,
}
"""Path segment of ``POST /notifications/{kind}`` → the event type it subscribes to."""


def _operations(commit: Commit, values: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    assert commit.ops is not None  # a change carries the commit it just made, whole
    for op in commit.ops:
        if op[0] == "PUT":
            ops.append({"type": "PUT", "key": key_json(tuple(op[1])), "content": values[op[2]]})
        else:
            ops.append({"type": "DELETE", "key": key_json(tuple(op[1]))})
    return ops


def _payload(change: Change) -> tuple[EventType, dict[str, Any]]:
    when = format_time(change.time_us)
    if isinstance(change, CommitChange):
        values = {k: {"type": v["type"], **v} for k, v in change.values.items()}
        return EventType.COMMIT, {
            "type": "COMMIT",
            "eventTime": when,
            "reference": {"type": "BRANCH", "name": change.branch, "hash": change.previous_hash},
            "newHash": change.commit.id,
            "metadata": commit_meta_v2(change.commit),
            "operations": _operations(change.commit, values),
        }
    if isinstance(change, MergeChange):
        return EventType.MERGE, {
            "type": "MERGE",
            "eventTime": when,
            "fromRefName": change.from_ref or "DETACHED",
            "fromHash": change.from_hash,
            "toBranchName": change.branch,
            "expectedHash": change.expected_hash,
            "newHash": change.commit.id,
        }
    if isinstance(change, TransplantChange):
        return EventType.TRANSPLANT, {
            "type": "TRANSPLANT",
            "eventTime": when,
            "fromRefName": change.from_ref or "DETACHED",
            "fromHashes": list(change.hashes),
            "toBranchName": change.branch,
            "expectedHash": change.expected_hash,
            "newHash": change.new_hash,
        }
    if isinstance(change, RefCreated):
        return EventType.REFERENCE_CREATED, {
            "type": "REFERENCE_CREATED",
            "eventTime": when,
            "reference": ref_json(change.ref),
        }
    if isinstance(change, RefAssigned):
        target: dict[str, Any]
        if change.target_type in ("BRANCH", "TAG") and change.target_name:
            target = {
                "type": change.target_type,
                "name": change.target_name,
                "hash": change.target_hash,
            }
        else:
            target = {"type": "DETACHED", "hash": change.target_hash}
        return EventType.REFERENCE_ASSIGNED, {
            "type": "REFERENCE_ASSIGNED",
            "eventTime": when,
            "reference": ref_json(change.before),
            "assignedTo": target,
        }
    assert isinstance(change, RefDeleted)
    return EventType.REFERENCE_DELETED, {
        "type": "REFERENCE_DELETED",
        "eventTime": when,
        "referenceType": change.ref.type,
        "referenceName": change.ref.name,
    }


def encode_change(change: Change) -> Sequence[OutboxEvent]:
    """The outbox event for a change (a :data:`~loch.versioning.changes.ChangeEncoder`)."""
    etype, body = _payload(change)
    data = orjson.dumps(body)
    return [OutboxEvent(str(uuid.uuid4()), etype.value, data)]
