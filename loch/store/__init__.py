"""Persistence contract: immutable objects by id, references changed by compare-and-swap.

Nothing here knows about branches, keys or merges; :mod:`loch.versioning` builds those on
top of :class:`~loch.store.persist.Persist`.
"""

from loch.store.objects import NO_ANCESTOR, canonical_bytes, object_id
from loch.store.persist import (
    OutboxEvent,
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefMissing,
    RefRecord,
    StoredEvent,
    StoreError,
)

__all__ = [
    "NO_ANCESTOR",
    "OutboxEvent",
    "Persist",
    "RefAlreadyExists",
    "RefConditionFailed",
    "RefMissing",
    "RefRecord",
    "StoreError",
    "StoredEvent",
    "canonical_bytes",
    "object_id",
]
