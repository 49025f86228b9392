"""Notification store for the in-memory backend (lives as long as the process)."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace

from loch.backends.memory import MemoryPersist
from loch.events.store import (
    Attempt,
    Claim,
    Delivery,
    DeliveryStatus,
    Notification,
    NotificationStore,
    Outcome,
)
from loch.store import StoredEvent

__all__ = ["MemoryNotificationStore"]


class MemoryNotificationStore(NotificationStore):
    """Notifications and deliveries in dicts, reading the memory backend's outbox."""

    def __init__(self, persist: MemoryPersist) -> None:
        self._persist = persist
        self._lock = threading.Lock()
        self._notifications: dict[str, Notification] = {}
        self._deliveries: dict[int, Delivery] = {}
        self._leases: dict[int, tuple[str, float]] = {}
        self._attempts: dict[int, list[Attempt]] = {}
        self._cursor = 0

    def _event(self, seq: int) -> StoredEvent:
        return self._persist.read_events(seq - 1, 1)[0]

    def add(self, event_type: str, type: str, url: str, secret: str | None) -> Notification:
        with self._lock:
            last = self._persist.read_events(0, 1 << 62)
            n = Notification(
                str(uuid.uuid4()),
                event_type,
                type,
                url,
                secret,
                time.time(),
                last[-1].seq if last else 0,
            )
            self._notifications[n.id] = n
            return n

    def get(self, notification_id: str) -> Notification | None:
        return self._notifications.get(notification_id)

    def list_all(self) -> list[Notification]:
        with self._lock:
            return sorted(self._notifications.values(), key=lambda n: n.created_at)

    def update(
        self, notification_id: str, type: str, url: str, secret: str | None
    ) -> Notification | None:
        with self._lock:
            n = self._notifications.get(notification_id)
            if n is None:
                return None
            n = replace(n, type=type, url=url, secret=secret)
            self._notifications[notification_id] = n
            return n

    def delete(self, notification_id: str) -> bool:
        with self._lock:
            found = self._notifications.pop(notification_id, None) is not None
            for d in list(self._deliveries.values()):
                if d.notification_id == notification_id and d.status == DeliveryStatus.PENDING:
                    del self._deliveries[d.id]
            return found

    def cursor(self) -> int:
        return self._cursor

    def fan_out(self, events: Sequence[StoredEvent]) -> int:
        created = 0
        now = time.time()
        with self._lock:
            for e in events:
                if e.seq <= self._cursor:
                    continue
                for n in self._notifications.values():
                    if n.event_type == e.type and e.seq > n.after_seq:
                        did = len(self._deliveries) + 1
                        while did in self._deliveries:
                            did += 1
                        self._deliveries[did] = Delivery(
                            did,
                            n.id,
                            e.seq,
                            e.id,
                            e.type,
                            DeliveryStatus.PENDING,
                            0,
                            now,
                            now,
                            None,
                            None,
                            None,
                            None,
                        )
                        created += 1
                self._cursor = e.seq
        return created

    def claim_due(self, now: float, lease_seconds: float, limit: int, owner: str) -> list[Claim]:
        with self._lock:
            heads: dict[str, Delivery] = {}
            for d in self._deliveries.values():
                if d.status != DeliveryStatus.PENDING:
                    continue
                cur = heads.get(d.notification_id)
                if cur is None or d.event_seq < cur.event_seq:
                    heads[d.notification_id] = d
            out: list[Claim] = []
            for d in sorted(heads.values(), key=lambda x: x.event_seq):
                lease = self._leases.get(d.id)
                if d.next_attempt_at > now or (lease is not None and lease[1] >= now):
                    continue
                n = self._notifications.get(d.notification_id)
                if n is None:
                    continue
                self._leases[d.id] = (owner, now + lease_seconds)
                out.append(Claim(d, n, self._event(d.event_seq).payload))
                if len(out) >= limit:
                    break
            return out

    def record(self, delivery_id: int, owner: str, attempt_at: float, outcome: Outcome) -> None:
        with self._lock:
            d = self._deliveries.get(delivery_id)
            if d is None:
                return
            attempt = d.attempts + 1
            self._attempts.setdefault(delivery_id, []).append(
                Attempt(
                    delivery_id,
                    attempt,
                    attempt_at,
                    outcome.status_code,
                    outcome.error,
                    outcome.duration_ms,
                )
            )
            self._deliveries[delivery_id] = replace(
                d,
                status=outcome.status,
                attempts=attempt,
                last_attempt_at=attempt_at,
                last_status_code=outcome.status_code,
                last_error=outcome.error,
                next_attempt_at=outcome.retry_at if outcome.retry_at is not None else attempt_at,
                delivered_at=time.time()
                if outcome.status == DeliveryStatus.DELIVERED
                else d.delivered_at,
            )
            self._leases.pop(delivery_id, None)

    def deliveries(
        self, notification_id: str, limit: int, status: DeliveryStatus | None = None
    ) -> list[Delivery]:
        with self._lock:
            found = [
                d
                for d in self._deliveries.values()
                if d.notification_id == notification_id and (status is None or d.status == status)
            ]
        return sorted(found, key=lambda d: -d.event_seq)[:limit]

    def attempts(self, delivery_id: int) -> list[Attempt]:
        with self._lock:
            return list(self._attempts.get(delivery_id, []))

    def redeliver(self, notification_id: str, delivery_id: int, now: float) -> Delivery | None:
        with self._lock:
            d = self._deliveries.get(delivery_id)
            if d is None or d.notification_id != notification_id:
                return None
            d = replace(d, status=DeliveryStatus.PENDING, next_attempt_at=now, created_at=now)
            self._deliveries[delivery_id] = d
            self._leases.pop(delivery_id, None)
            return d
