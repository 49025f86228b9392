"""Concurrent commits from real threads against one SQLite file.

Each scenario runs twice: all threads sharing one :class:`VersionStore` (one writer
connection under a lock, one reader connection per thread), and one ``VersionStore``
(hence one ``SqlitePersist`` with its own connections) per thread on the same file, so
that writers are serialised by SQLite's own locking.

* Disjoint keys with stale expected hashes: every commit lands, none is lost, and the
  branch history stays linear.
* One key from one expected hash: exactly one writer wins a round, the others get a
  ``VALUE_DIFFERS`` conflict.
* Read-modify-write with retry on conflict: no update is lost.
* The same with writer processes instead of threads (SQLite's file locks).
* Many stores opening the same brand-new file at once all succeed.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from loch.backends import open_store
from loch.errors import ConflictType, ReferenceConflictError
from loch.model.keys import Key
from loch.store import NO_ANCESTOR, Persist
from loch.versioning import Commit, Put, VersionStore

THREADS = 8
COMMITS_PER_THREAD = 200
SAME_KEY_ROUNDS = 15
INCREMENTS_PER_THREAD = 25
JOIN_TIMEOUT_S = 240.0
FIRST_OPEN_TRIALS = 200
PROCESSES = 4
COMMITS_PER_PROCESS = 150

# A writer process: commits COMMITS_PER_PROCESS new keys with the root as (stale)
# expected hash once all writers are ready, then prints the hashes as JSON.
PROCESS_WRITER = """
import json, os, sys, time
from loch.backends import open_store
from loch.store import NO_ANCESTOR
from loch.versioning import Put, VersionStore

path, name, count, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
vs = VersionStore(open_store("sqlite:///" + path))
print("READY", flush=True)
while not os.path.exists(go):
    time.sleep(0.005)
hashes = []
for j in range(count):
    content = {"type": "ICEBERG_TABLE", "metadataLocation": "s3://b/x.json",
               "snapshotId": j, "schemaId": 0, "specId": 0, "sortOrderId": 0}
    r = vs.commit("main", NO_ANCESTOR, {"message": f"{name}-{j}"},
                  [Put((f"{name}_t{j:04d}",), content)])
    hashes.append(r.hash)
print(json.dumps(hashes), flush=True)
"""

MODES = ["shared", "per_thread"]


def table(snapshot: int, cid: str | None = None) -> dict[str, Any]:
    """An ICEBERG_TABLE content (with its content id when updating)."""
    content: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://bucket/t/{snapshot}.json",
        "snapshotId": snapshot,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    if cid is not None:
        content["id"] = cid
    return content


@dataclass
class Stores:
    """Hands out the VersionStore each worker thread uses, and closes them all."""

    url: str
    per_thread: bool
    persists: list[Persist] = field(default_factory=list)
    _shared: VersionStore | None = None

    def __post_init__(self) -> None:
        self._shared = self.open()

    def open(self) -> VersionStore:
        p = open_store(self.url)
        self.persists.append(p)
        return VersionStore(p)

    @property
    def main(self) -> VersionStore:
        assert self._shared is not None
        return self._shared

    def for_worker(self) -> VersionStore:
        return self.open() if self.per_thread else self.main

    def close(self) -> None:
        for p in self.persists:
            p.close()


@pytest.fixture(params=MODES)
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Stores]:
    """A fresh SQLite file store, shared by all threads or opened once per thread."""
    s = Stores(f"sqlite:///{tmp_path / 'loch.db'}", per_thread=request.param == "per_thread")
    yield s
    s.close()


def run_threads(n: int, target: Callable[[int], None]) -> None:
    """Run ``target(i)`` in ``n`` threads; re-raise the first failure."""
    errors: list[BaseException] = []
    lock = threading.Lock()

    def wrapper(i: int) -> None:
        try:
            target(i)
        except BaseException as e:  # reported to the test thread below
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=wrapper, args=(i,), name=f"w{i}") for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT_S)
    assert not any(t.is_alive() for t in threads), "worker threads hung"
    if errors:
        raise errors[0]


def full_log(vs: VersionStore, head: str) -> list[Commit]:
    """The whole first-parent history from ``head``, newest first, page by page."""
    out: list[Commit] = []
    token: str | None = None
    while True:
        page = vs.log(head, page_token=token)
        out.extend(page.items)
        token = page.token
        if token is None:
            return out


def all_entries(vs: VersionStore, head: str) -> dict[Key, str]:
    """Every live key at ``head`` with its content id."""
    out: dict[Key, str] = {}
    token: str | None = None
    while True:
        page = vs.entries(head, page_token=token, max_records=500)
        out.update((k, v[0]) for k, v in page.items)
        token = page.token
        if token is None:
            return out


def test_disjoint_writers_with_stale_expected_hash_all_land(stores: Stores) -> None:
    vs = stores.main
    seed = vs.commit("main", NO_ANCESTOR, {"message": "seed"}, [Put(("seed",), table(0))])
    barrier = threading.Barrier(THREADS, timeout=60)
    landed: dict[str, tuple[Key, str]] = {}
    landed_lock = threading.Lock()

    def writer(t: int) -> None:
        w = stores.for_worker()
        # Odd threads use the HEAD read at their start, even ones the root hash: both
        # are stale after the first commit of any thread.
        start = w.get_reference("main").hash if t % 2 else NO_ANCESTOR
        barrier.wait()
        for j in range(COMMITS_PER_THREAD):
            key = (f"w{t}_t{j:04d}",)
            r = w.commit("main", start, {"message": f"w{t}-{j}"}, [Put(key, table(j))])
            assert [k for k, _ in r.added_contents] == [key]
            with landed_lock:
                landed[r.hash] = (key, r.added_contents[0][1])

    run_threads(THREADS, writer)

    total = THREADS * COMMITS_PER_THREAD
    assert len(landed) == total
    head = vs.get_reference("main").hash
    log = full_log(vs, head)
    assert len(log) == total + 1
    assert log[-1].id == seed.hash
    messages = [c.meta["message"] for c in log]
    assert len(set(messages)) == len(messages)
    assert set(messages) == {"seed"} | {
        f"w{t}-{j}" for t in range(THREADS) for j in range(COMMITS_PER_THREAD)
    }
    assert {c.id for c in log[:-1]} == set(landed)
    # Linear: one parent each, each the next-older commit, depth counting up.
    for newer, older in itertools.pairwise(log):
        assert newer.parents == (older.id,)
        assert newer.depth == older.depth + 1
    assert log[-1].parents == (NO_ANCESTOR,)
    # Each thread's commits appear in the order it made them, and the threads really
    # interleaved (not one after another).
    chronological = messages[::-1]
    switches = sum(a.split("-")[0] != b.split("-")[0] for a, b in itertools.pairwise(chronological))
    assert switches > 2 * THREADS
    for t in range(THREADS):
        mine = [m for m in chronological if m.startswith(f"w{t}-")]
        assert mine == [f"w{t}-{j}" for j in range(COMMITS_PER_THREAD)]
    # Every key is live with the content id its commit reported.
    entries = all_entries(vs, head)
    assert len(entries) == total + 1
    for key, cid in landed.values():
        assert entries[key] == cid
    # And a store opened afresh on the file sees the same HEAD.
    assert stores.open().get_reference("main").hash == head


def test_same_key_from_same_expected_hash_exactly_one_wins(stores: Stores) -> None:
    vs = stores.main
    key: Key = ("tbl",)
    created = vs.commit("main", NO_ANCESTOR, {"message": "create"}, [Put(key, table(0))])
    cid = created.added_contents[0][1]
    workers = [stores.for_worker() for _ in range(THREADS)]
    winners: list[str] = []
    for rnd in range(1, SAME_KEY_ROUNDS + 1):
        expected = vs.get_reference("main").hash
        barrier = threading.Barrier(THREADS, timeout=60)
        outcomes: dict[int, str | ReferenceConflictError] = {}

        def writer(
            t: int,
            rnd: int = rnd,
            expected: str = expected,
            barrier: threading.Barrier = barrier,
            outcomes: dict[int, str | ReferenceConflictError] = outcomes,
        ) -> None:
            w = workers[t]
            barrier.wait()
            try:
                r = w.commit(
                    "main",
                    expected,
                    {"message": f"round {rnd} by {t}"},
                    [Put(key, table(rnd * 100 + t, cid))],
                )
            except ReferenceConflictError as e:
                outcomes[t] = e
            else:
                assert r.added_contents == []
                outcomes[t] = r.hash

        run_threads(THREADS, writer)

        assert len(outcomes) == THREADS
        won = {t: h for t, h in outcomes.items() if isinstance(h, str)}
        assert len(won) == 1, f"round {rnd}: winners {sorted(won)}"
        (winner, winner_hash), = won.items()
        for t, out in outcomes.items():
            if t == winner:
                continue
            assert isinstance(out, ReferenceConflictError)
            assert [(c.conflict_type, c.key) for c in out.conflicts] == [
                (ConflictType.VALUE_DIFFERS, key)
            ], f"round {rnd}, thread {t}: {out.conflicts}"
        head = vs.get_reference("main").hash
        assert head == winner_hash
        c = vs.commit_of(head)
        assert c.parents == (expected,)
        assert c.meta["message"] == f"round {rnd} by {winner}"
        content = vs.get_content(head, key).content
        assert content["id"] == cid
        assert content["snapshotId"] == rnd * 100 + winner
        winners.append(winner_hash)

    log = full_log(vs, vs.get_reference("main").hash)
    assert [c.id for c in log] == [*reversed(winners), created.hash]


def test_read_modify_write_with_retry_loses_no_update(stores: Stores) -> None:
    vs = stores.main
    key: Key = ("counter",)
    created = vs.commit("main", NO_ANCESTOR, {"message": "create"}, [Put(key, table(0))])
    cid = created.added_contents[0][1]
    barrier = threading.Barrier(THREADS, timeout=60)
    conflicts = [0] * THREADS

    def incrementer(t: int) -> None:
        w = stores.for_worker()
        barrier.wait()
        done = 0
        while done < INCREMENTS_PER_THREAD:
            head = w.get_reference("main").hash
            n = w.get_content(head, key).content["snapshotId"]
            try:
                w.commit("main", head, {"message": f"{t}: {n + 1}"}, [Put(key, table(n + 1, cid))])
            except ReferenceConflictError as e:
                assert [c.conflict_type for c in e.conflicts] == [ConflictType.VALUE_DIFFERS]
                conflicts[t] += 1
            else:
                done += 1

    run_threads(THREADS, incrementer)

    total = THREADS * INCREMENTS_PER_THREAD
    head = vs.get_reference("main").hash
    assert vs.get_content(head, key).content["snapshotId"] == total
    log = full_log(vs, head)
    assert len(log) == total + 1
    assert [c.meta["message"].split(": ")[1] for c in log[:-1]] == [
        str(n) for n in range(total, 0, -1)
    ]


def test_many_stores_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Several servers (here: threads) starting on the same new database file.

    Opening converts the new file to WAL; two connections doing so at the same moment
    race (SQLite answers one of them "database is locked" at once, without waiting for
    the busy timeout). The race is hit in roughly 1-2% of trials on a 2-core machine,
    hence many trials; the first failure ends the test.
    """
    lock = threading.Lock()
    for trial in range(FIRST_OPEN_TRIALS):
        url = f"sqlite:///{tmp_path / f'fresh-{trial}.db'}"
        barrier = threading.Barrier(THREADS, timeout=60)
        opened: list[Persist] = []

        def opener(
            _t: int,
            url: str = url,
            barrier: threading.Barrier = barrier,
            opened: list[Persist] = opened,
        ) -> None:
            barrier.wait()
            p = open_store(url)
            with lock:
                opened.append(p)
            VersionStore(p)

        try:
            run_threads(THREADS, opener)
        except Exception as e:
            pytest.fail(f"trial {trial}: opening a new file concurrently failed: {e!r}")
        finally:
            for p in opened:
                p.close()
        vs = VersionStore(open_store(url))
        try:
            assert vs.get_reference("main").hash == NO_ANCESTOR
            assert [r.name for r in vs.list_references()] == ["main"]
        finally:
            vs.persist.close()


def test_writer_processes_with_stale_expected_hash_all_land(tmp_path: Path) -> None:
    db = tmp_path / "loch.db"
    go = tmp_path / "go"
    VersionStore(open_store(f"sqlite:///{db}")).persist.close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS_WRITER, str(db), f"p{i}", str(COMMITS_PER_PROCESS),
             str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    outputs: list[tuple[str, str]] = []
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline() == "READY\n"
        go.touch()
        for p in procs:
            out, err = p.communicate(timeout=JOIN_TIMEOUT_S)
            outputs.append((out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for p, (_, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, err
    landed = [h for out, _ in outputs for h in json.loads(out)]
    assert len(set(landed)) == PROCESSES * COMMITS_PER_PROCESS

    vs = VersionStore(open_store(f"sqlite:///{db}"))
    try:
        head = vs.get_reference("main").hash
        log = full_log(vs, head)
        assert len(log) == PROCESSES * COMMITS_PER_PROCESS
        assert {c.id for c in log} == set(landed)
        for newer, older in itertools.pairwise(log):
            assert newer.parents == (older.id,)
        assert log[-1].parents == (NO_ANCESTOR,)
        chronological = [c.meta["message"] for c in reversed(log)]
        for i in range(PROCESSES):
            mine = [m for m in chronological if m.startswith(f"p{i}-")]
            assert mine == [f"p{i}-{j}" for j in range(COMMITS_PER_PROCESS)]
        assert len(all_entries(vs, head)) == PROCESSES * COMMITS_PER_PROCESS
    finally:
        vs.persist.close()
