"""Child process of ``test_crash.py``: commits to a SQLite store until it is killed.

Usage: ``python crash_writer.py DB_PATH START_INDEX``

Prints ``READY`` once the store is open, then commits forever. Each commit adds the
table ``("k%06d",)`` and updates the table ``("counter",)`` to that index; after
``commit()`` returns it prints ``ACK <index> <commit hash> <content id>`` and flushes, so
every printed line is a commit the store acknowledged. A key that already exists (its
commit landed just before the previous child was killed, unacknowledged) is skipped.
"""

from __future__ import annotations

import sys
from typing import Any

from loch.backends import open_store
from loch.errors import ContentNotFoundError
from loch.versioning import Put, VersionStore

COUNTER = ("counter",)


def table(n: int, cid: str | None = None) -> dict[str, Any]:
    """An ICEBERG_TABLE content (with its content id when updating)."""
    content: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://bucket/k/{n}.json",
        "snapshotId": n,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    if cid is not None:
        content["id"] = cid
    return content


def key_of(i: int) -> tuple[str]:
    """The key the ``i``-th commit adds."""
    return (f"k{i:06d}",)


def main(path: str, start: int) -> None:
    vs = VersionStore(open_store(f"sqlite:///{path}"))
    print("READY", flush=True)
    head = vs.get_reference("main").hash
    try:
        counter_id: str | None = vs.get_content(head, COUNTER).content["id"]
    except ContentNotFoundError:
        counter_id = None
    i = start
    while True:
        try:
            vs.get_content(head, key_of(i))
        except ContentNotFoundError:
            pass
        else:
            print(f"EXISTS {i}", flush=True)
            i += 1
            continue
        r = vs.commit(
            "main",
            head,
            {"message": f"commit {i}"},
            [Put(key_of(i), table(i)), Put(COUNTER, table(i, counter_id))],
        )
        added = dict(r.added_contents)
        counter_id = counter_id or added[COUNTER]
        print(f"ACK {i} {r.hash} {added[key_of(i)]}", flush=True)
        head = r.hash
        i += 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
