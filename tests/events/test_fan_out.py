"""Fan-out of outbox events to notifications, on the stores themselves (SQLite file and
memory): nothing is read or written while no notification exists, a notification gets
exactly the events recorded after it was created, and the cursor skips what concerns
no notification."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.events import encode_change, open_notification_store
from loch.events.store import NotificationStore
from loch.store import Persist
from loch.versioning import Put, VersionStore


@pytest.fixture(params=["sqlite", "memory"])
def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[Persist, VersionStore, NotificationStore]]:
    url = f"sqlite:///{tmp_path / 'loch.db'}" if request.param == "sqlite" else "memory://"
    persist = open_store(url)
    vs = VersionStore(persist, on_change=encode_change)
    ns = open_notification_store(persist)
    yield persist, vs, ns
    ns.close()
    persist.close()


def _commit(vs: VersionStore, name: str) -> str:
    head = vs.get_reference("main").hash
    table = {"type": "ICEBERG_TABLE", "metadataLocation": f"s3://b/{name}", "snapshotId": 1}
    return vs.commit("main", head, {"message": name}, [Put((name,), table)]).hash


def test_fan_out_skips_events_that_concern_no_notification(
    stores: tuple[Persist, VersionStore, NotificationStore],
) -> None:
    persist, vs, ns = stores
    for i in range(30):
        _commit(vs, f"before{i}")
    recorded = persist.read_events(0, 1000)
    assert len(recorded) == 30  # the outbox records every change
    assert ns.fan_out_new(persist) == 0
    assert ns.cursor() == 0  # no notification: nothing was written

    first = ns.add("COMMIT", "WEBHOOK", "http://127.0.0.1:9/first", None)
    assert first.after_seq == recorded[-1].seq
    _commit(vs, "after0")
    created = ns.fan_out_new(persist, batch=7)
    assert created == 1
    [delivery] = ns.deliveries(first.id, 10)
    assert delivery.event_seq == recorded[-1].seq + 1
    assert ns.cursor() == delivery.event_seq

    second = ns.add("COMMIT", "WEBHOOK", "http://127.0.0.1:9/second", None)
    for i in range(3):
        _commit(vs, f"later{i}")
    assert ns.fan_out_new(persist, batch=2) == 6
    assert len(ns.deliveries(first.id, 10)) == 4
    assert [d.event_seq for d in ns.deliveries(second.id, 10)] == sorted(
        (e.seq for e in persist.read_events(second.after_seq, 10)), reverse=True
    )
    assert ns.fan_out_new(persist) == 0  # nothing new: nothing twice

    ns.delete(first.id)
    ns.delete(second.id)
    _commit(vs, "unwatched")
    cursor = ns.cursor()
    assert ns.fan_out_new(persist) == 0
    assert ns.cursor() == cursor
