"""The commit combiner with both kinds of callers: threads (``submit``) and coroutines
(``submit_async``, as the HTTP commit endpoints use it), on the same queue.

* Every job is processed exactly once, in arrival order per key, never by two batches
  of one key at the same time, and each caller gets its own result or error.
* An error raised by a batch reaches every caller of that batch, and only those.
* A coroutine cancelled while waiting does not lose or break the batch.
* ``VersionStore.commit_async`` from two event loops and from threads at once, on a
  SQLite file: every commit lands once and the history stays linear.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable, Sequence
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.errors import BadRequestError
from loch.store import NO_ANCESTOR
from loch.versioning import Put, VersionStore
from loch.versioning.combiner import Combiner, Job

THREADS = 6
LOOPS = 2
COROUTINES = 40
PER_CALLER = 15


class Recorder:
    """A batch processor that records what it saw and checks batches do not overlap."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.active: set[Hashable] = set()
        self.overlaps = 0
        self.seen: dict[Hashable, list[object]] = {}
        self.batches = 0

    def __call__(self, key: Hashable, jobs: Sequence[Job[object]]) -> None:
        with self.lock:
            if key in self.active:
                self.overlaps += 1
            self.active.add(key)
            self.batches += 1
        try:
            if self.delay:
                time.sleep(self.delay)
            for job in jobs:
                payload = job.payload
                assert isinstance(payload, tuple)
                if payload[-1] == "fail":
                    job.error = BadRequestError(f"refused {payload}")
                else:
                    job.result = ("done", payload)
                with self.lock:
                    self.seen.setdefault(key, []).append(payload)
        finally:
            with self.lock:
                self.active.discard(key)


def test_threads_and_coroutines_share_queues_and_get_their_own_results() -> None:
    rec = Recorder(delay=0.001)
    combiner: Combiner[object] = Combiner(rec, max_batch=8)
    keys = ["a", "b"]
    failures: list[str] = []

    def thread_caller(t: int) -> None:
        for i in range(PER_CALLER):
            key = keys[(t + i) % 2]
            payload = ("thread", t, i, "fail" if i % 5 == 4 else "ok")
            try:
                got = combiner.submit(key, payload)
                if got != ("done", payload) or payload[-1] == "fail":
                    failures.append(f"{payload} -> {got}")
            except BadRequestError as e:
                if payload[-1] != "fail" or str(payload) not in e.message:
                    failures.append(f"{payload} raised {e.message}")

    async def coroutine_caller(loop_no: int, c: int) -> None:
        for i in range(PER_CALLER // 3):
            key = keys[(c + i) % 2]
            payload = ("coro", loop_no, c, i, "fail" if (c + i) % 7 == 0 else "ok")
            try:
                got = await combiner.submit_async(key, payload)
                if got != ("done", payload) or payload[-1] == "fail":
                    failures.append(f"{payload} -> {got}")
            except BadRequestError as e:
                if payload[-1] != "fail" or str(payload) not in e.message:
                    failures.append(f"{payload} raised {e.message}")

    async def loop_main(loop_no: int) -> None:
        await asyncio.gather(*(coroutine_caller(loop_no, c) for c in range(COROUTINES)))

    threads = [threading.Thread(target=thread_caller, args=(t,)) for t in range(THREADS)]
    threads += [threading.Thread(target=asyncio.run, args=(loop_main(n),)) for n in range(LOOPS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
        assert not th.is_alive()
    combiner.close()

    assert failures == []
    assert rec.overlaps == 0
    total = THREADS * PER_CALLER + LOOPS * COROUTINES * (PER_CALLER // 3)
    processed = [p for key in keys for p in rec.seen[key]]
    assert len(processed) == total == len(set(processed))
    # Fewer batches than jobs: concurrent callers were combined.
    assert rec.batches < total
    # Per key, each caller's own jobs were processed in the order it submitted them.
    for key in keys:
        last: dict[tuple[object, ...], int] = {}
        for p in rec.seen[key]:
            assert isinstance(p, tuple)
            caller, seq = p[:-2], p[-2]
            assert isinstance(seq, int)
            assert last.get(caller, -1) < seq
            last[caller] = seq


def test_an_error_raised_by_a_batch_reaches_its_callers() -> None:
    release = threading.Event()

    def process(key: Hashable, jobs: Sequence[Job[str]]) -> None:
        if any(j.payload == "boom" for j in jobs):
            raise RuntimeError("batch failed")
        release.wait(10)
        for j in jobs:
            j.result = j.payload.upper()

    combiner: Combiner[str] = Combiner(process)

    async def main() -> list[object]:
        first = asyncio.ensure_future(combiner.submit_async("k", "first"))
        await asyncio.sleep(0.05)  # "first" is being processed; the next two queue up
        second = asyncio.ensure_future(combiner.submit_async("k", "boom"))
        third = asyncio.ensure_future(combiner.submit_async("k", "third"))
        await asyncio.sleep(0.05)
        release.set()
        results: list[object] = await asyncio.gather(first, second, third, return_exceptions=True)
        return results

    got = asyncio.run(main())
    combiner.close()
    assert got[0] == "FIRST"
    assert isinstance(got[1], RuntimeError) and isinstance(got[2], RuntimeError)
    # The queue keeps working after a failed batch.
    assert combiner.submit("k", "again") == "AGAIN"


def test_a_cancelled_waiter_does_not_lose_its_batch() -> None:
    rec = Recorder(delay=0.05)
    combiner: Combiner[object] = Combiner(rec)

    async def main() -> object:
        doomed = asyncio.ensure_future(combiner.submit_async("k", ("x", 0, "ok")))
        await asyncio.sleep(0.01)
        doomed.cancel()
        kept = await combiner.submit_async("k", ("x", 1, "ok"))
        with pytest.raises(asyncio.CancelledError):
            await doomed
        return kept

    assert asyncio.run(main()) == ("done", ("x", 1, "ok"))
    combiner.close()
    assert rec.seen["k"] == [("x", 0, "ok"), ("x", 1, "ok")]


def test_commit_async_from_loops_and_threads_all_land(tmp_path: Path) -> None:
    persist = open_store(f"sqlite:///{tmp_path / 'loch.db'}")
    vs = VersionStore(persist)
    landed: list[str] = []
    lock = threading.Lock()

    def table(n: str) -> dict[str, object]:
        return {"type": "ICEBERG_TABLE", "metadataLocation": f"s3://b/{n}", "snapshotId": 1}

    async def coroutine_writer(loop_no: int, c: int) -> None:
        for i in range(5):
            name = f"l{loop_no}c{c}i{i}"
            r = await vs.commit_async(
                "main", NO_ANCESTOR, {"message": name}, [Put((name,), table(name))]
            )
            with lock:
                landed.append(r.hash)

    async def loop_main(loop_no: int) -> None:
        await asyncio.gather(*(coroutine_writer(loop_no, c) for c in range(20)))

    def thread_writer(t: int) -> None:
        for i in range(25):
            name = f"t{t}i{i}"
            r = vs.commit("main", NO_ANCESTOR, {"message": name}, [Put((name,), table(name))])
            with lock:
                landed.append(r.hash)

    threads = [threading.Thread(target=asyncio.run, args=(loop_main(n),)) for n in range(2)]
    threads += [threading.Thread(target=thread_writer, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
        assert not th.is_alive()
    try:
        expected = 2 * 20 * 5 + 4 * 25
        assert len(landed) == len(set(landed)) == expected
        chain = []
        h = vs.get_reference("main").hash
        while h != NO_ANCESTOR:
            c = vs.commit_of(h)
            assert len(c.parents) == 1  # linear history
            chain.append(h)
            h = c.parents[0]
        assert len(chain) == expected and set(chain) == set(landed)
        assert len(vs.entries(chain[0], max_records=1000).items) == expected
    finally:
        vs.close()
        persist.close()
