"""In-memory backend: dicts under one lock. For tests and throwaway servers."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence

from loch.store import (
    OutboxEvent,
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefMissing,
    RefRecord,
    StoredEvent,
)

__all__ = ["MemoryPersist"]


class MemoryPersist(Persist):
    """Objects and references held in process memory."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, bytes] = {}
        self._refs: dict[str, RefRecord] = {}
        self._meta: dict[str, str] = {}
        self._ref_log: dict[str, list[str]] = {}
        self._events: list[StoredEvent] = []

    def get_objects(self, ids: Sequence[str]) -> dict[str, bytes]:
        objs = self._objects
        return {i: objs[i] for i in ids if i in objs}

    def put_objects(self, objects: Mapping[str, bytes]) -> None:
        with self._lock:
            self._objects.update(objects)

    def get_ref(self, name: str) -> RefRecord | None:
        return self._refs.get(name)

    def list_refs(self) -> list[RefRecord]:
        with self._lock:
            refs = list(self._refs.values())
        return sorted(refs, key=lambda r: r.name)

    def _append_events(self, events: Sequence[OutboxEvent]) -> None:
        now = time.time()
        for e in events:
            self._events.append(StoredEvent(len(self._events) + 1, e.id, e.type, e.payload, now))

    def read_events(self, after_seq: int, limit: int) -> list[StoredEvent]:
        with self._lock:
            return self._events[max(0, after_seq) : max(0, after_seq) + max(0, limit)]

    def create_ref(
        self,
        ref: RefRecord,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        with self._lock:
            if ref.name in self._refs:
                raise RefAlreadyExists(ref.name)
            if objects:
                self._objects.update(objects)
            self._refs[ref.name] = ref
            self._ref_log.setdefault(ref.name, []).append(ref.hash)
            self._append_events(events)

    def update_ref(
        self,
        name: str,
        expected: str,
        new: str,
        objects: Mapping[str, bytes] | None = None,
        events: Sequence[OutboxEvent] = (),
    ) -> None:
        with self._lock:
            cur = self._refs.get(name)
            if cur is None:
                raise RefMissing(name)
            if cur.hash != expected:
                raise RefConditionFailed(name, expected, cur.hash)
            if objects:
                self._objects.update(objects)
            self._refs[name] = RefRecord(name, cur.type, new)
            self._ref_log.setdefault(name, []).append(new)
            self._append_events(events)

    def delete_ref(self, name: str, expected: str, events: Sequence[OutboxEvent] = ()) -> None:
        with self._lock:
            cur = self._refs.get(name)
            if cur is None:
                raise RefMissing(name)
            if cur.hash != expected:
                raise RefConditionFailed(name, expected, cur.hash)
            del self._refs[name]
            self._append_events(events)

    def ref_log(self, name: str, limit: int) -> list[str]:
        with self._lock:
            log = self._ref_log.get(name, [])
            return list(reversed(log[max(0, len(log) - limit) :])) if limit > 0 else []

    def get_meta(self, key: str) -> str | None:
        return self._meta.get(key)

    def set_meta_if_absent(self, key: str, value: str) -> str:
        with self._lock:
            return self._meta.setdefault(key, value)

    def set_meta(self, key: str, value: str | None) -> None:
        with self._lock:
            if value is None:
                self._meta.pop(key, None)
            else:
                self._meta[key] = value
