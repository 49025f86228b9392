"""Notifications: events recorded with each change, and durable webhook delivery.

:func:`~loch.events.model.encode_change` turns version-store changes into outbox events;
a :class:`~loch.events.store.NotificationStore` keeps subscriptions and deliveries next
to the version store; the :class:`~loch.events.dispatcher.Dispatcher` delivers them.
"""

from __future__ import annotations

from loch.errors import BadRequestError
from loch.events.dispatcher import Dispatcher, DispatcherSettings, sign
from loch.events.model import KIND_TO_TYPE, EventType, encode_change
from loch.events.store import (
    Attempt,
    Delivery,
    DeliveryStatus,
    Notification,
    NotificationStore,
)
from loch.store import Persist

__all__ = [
    "KIND_TO_TYPE",
    "Attempt",
    "Delivery",
    "DeliveryStatus",
    "Dispatcher",
    "DispatcherSettings",
    "EventType",
    "Notification",
    "NotificationStore",
    "encode_change",
    "open_notification_store",
    "sign",
]


def open_notification_store(persist: Persist) -> NotificationStore:
    """The notification store that lives beside ``persist`` (same database).

    Raises:
        BadRequestError: the backend has no notification store.
    """
    from loch.backends.memory import MemoryPersist
    from loch.backends.sqlite import SqlitePersist

    if isinstance(persist, MemoryPersist):
        from loch.events.memory_store import MemoryNotificationStore

        return MemoryNotificationStore(persist)
    if isinstance(persist, SqlitePersist):
        from loch.events.sqlite_store import SqliteNotificationStore

        return SqliteNotificationStore(persist.path)
    if type(persist).__module__ == "loch.backends.postgres":  # psycopg only when used
        from loch.backends.postgres import PostgresPersist
        from loch.events.postgres_store import PostgresNotificationStore

        assert isinstance(persist, PostgresPersist)
        return PostgresNotificationStore(persist)
    raise BadRequestError(f"No notification store for {type(persist).__name__}")
