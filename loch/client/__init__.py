"""Typed Python client for Loch (Nessie REST API v2, and Loch's webhook notifications)."""

from loch.client.client import DEFAULT_URI, CommitBuilder, LochClient
from loch.client.errors import ServerUnreachableError, http_status
from loch.client.models import (
    DELIVERY_STATUSES,
    NOTIFICATION_KINDS,
    CommitMeta,
    CommitResponse,
    Delivery,
    DeliveryAttempt,
    DiffEntry,
    Entry,
    KeyDetail,
    LogEntry,
    MergeResponse,
    Notification,
    Reference,
)

__all__ = [
    "DEFAULT_URI",
    "DELIVERY_STATUSES",
    "NOTIFICATION_KINDS",
    "CommitBuilder",
    "CommitMeta",
    "CommitResponse",
    "Delivery",
    "DeliveryAttempt",
    "DiffEntry",
    "Entry",
    "KeyDetail",
    "LochClient",
    "LogEntry",
    "MergeResponse",
    "Notification",
    "Reference",
    "ServerUnreachableError",
    "http_status",
]
