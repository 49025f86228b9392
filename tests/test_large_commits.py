"""Commits of many operations (bulk loads) on an SQLite file, read back by a fresh store:
they are cached without their operations, which are read again when wanted (log with
operations, CEL filters on operations, the events of a commit), and walking history
through them (merge base, ``~N``) keeps the object cache for everything else."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loch.backends import open_store
from loch.model.views import log_entry
from loch.versioning import Put, VersionStore
from loch.versioning.objects import LARGE_COMMIT_BYTES

TABLES = 2_000


def table(i: int) -> dict[str, Any]:
    return {"type": "ICEBERG_TABLE", "metadataLocation": f"s3://bucket/t{i}/m.json"}


def test_large_commits_are_cached_without_operations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'loch.db'}"
    persist = open_store(url)
    vs = VersionStore(persist)
    head = vs.get_reference("main").hash
    bulk = vs.commit(
        "main", head, {"message": "bulk"}, [Put((f"t{i:05d}",), table(i)) for i in range(TABLES)]
    )
    small = vs.commit("main", bulk.hash, {"message": "one"}, [Put(("x",), table(-1))])
    assert len(persist.get_objects([bulk.hash])[bulk.hash]) > LARGE_COMMIT_BYTES
    # Just written: remembered without its operations too.
    assert vs.commit_of(bulk.hash).ops is None
    persist.close()

    persist = open_store(url)
    vs = VersionStore(persist, cache_bytes=4 * 1024 * 1024)
    try:
        c = vs.commit_of(bulk.hash)
        assert c.ops is None and c.meta["message"] == "bulk"
        ops = vs.objects.operations(c)
        assert len(ops) == TABLES and ops[0][:2] == ["PUT", ["t00000"]]
        assert vs.commit_of(small.hash).ops is not None  # small commits stay whole

        entry = log_entry(vs, c, v1=False, with_ops=True)
        assert len(entry["operations"]) == TABLES
        assert entry["operations"][5]["content"]["metadataLocation"] == "s3://bucket/t5/m.json"

        hits = vs.log(small.hash, filter="operations.exists(op, op.key == 't01999')")
        assert [x.id for x in hits.items] == [bulk.hash]

        # History through the bulk commit: ~N and merge base, many times over; the
        # cache holds the commit at the weight of its header.
        vs.create_reference("dev", "BRANCH", small.hash)
        dev = vs.commit("dev", small.hash, {"message": "d"}, [Put(("y",), table(-2))])
        for _ in range(50):
            assert vs.resolve("main~1").hash == bulk.hash
            assert vs.merge_base(dev.hash, small.hash) == small.hash
        assert vs.objects._cache._data[bulk.hash][1] < 10_000
    finally:
        persist.close()
