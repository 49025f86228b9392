"""Typed Python client for Loch (Nessie REST API v2)."""

from loch.client.client import DEFAULT_URI, CommitBuilder, LochClient
from loch.client.models import (
    CommitMeta,
    CommitResponse,
    DiffEntry,
    Entry,
    KeyDetail,
    LogEntry,
    MergeResponse,
    Reference,
)

__all__ = [
    "DEFAULT_URI",
    "CommitBuilder",
    "CommitMeta",
    "CommitResponse",
    "DiffEntry",
    "Entry",
    "KeyDetail",
    "LochClient",
    "LogEntry",
    "MergeResponse",
    "Reference",
]
