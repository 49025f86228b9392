"""Persistence contract: immutable objects by id, references changed by compare-and-swap.

Nothing here knows about branches, keys or merges; :mod:`loch.versioning` builds those on
top of :class:`~loch.store.persist.Persist`.
"""

from loch.store.objects import NO_ANCESTOR, canonical_bytes, object_id
from loch.store.persist import (
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefMissing,
    RefRecord,
    StoreError,
)

__all__ = [
    "NO_ANCESTOR",
    "Persist",
    "RefAlreadyExists",
    "RefConditionFailed",
    "RefMissing",
    "RefRecord",
    "StoreError",
    "canonical_bytes",
    "object_id",
]
