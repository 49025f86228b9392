"""Crash safety of the SQLite store: acknowledged commits survive ``SIGKILL``.

A child process (``crash_writer.py``) commits in a loop and prints each commit after
``commit()`` returned; the test kills it with ``SIGKILL`` at random moments, restarts it
and carries on with the key sequence. Afterwards every acknowledged commit is in the
branch history, every acknowledged key is live with its content id, the history is
linear and gap-free, the file passes ``PRAGMA integrity_check`` and a fresh store on it
commits normally.

It runs twice: with the child alone (each reopen recovers the WAL left by the killed
process), and with the test process committing from a thread the whole time through a
store it keeps open (a writer waiting for the lock the killed child held must go on).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.store import NO_ANCESTOR
from loch.versioning import Commit, Put, VersionStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

KILLS = 20
KILLS_WITH_LIVE_WRITER = 10
MAX_DELAY_S = 0.3
EARLY_KILL_EVERY = 5
WRITER = Path(__file__).with_name("crash_writer.py")
COUNTER = ("counter",)


@dataclass(frozen=True)
class Ack:
    """One acknowledged commit of the child."""

    index: int
    hash: str
    content_id: str


def run_until_killed(db: Path, start: int, delay: float, wait_ready: bool) -> tuple[
    list[Ack], list[int]
]:
    """Run the writer from ``start``, SIGKILL it after ``delay``; its acks and skips."""
    proc = subprocess.Popen(
        [sys.executable, str(WRITER), str(db), str(start)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    try:
        if wait_ready:
            first = proc.stdout.readline()
            assert first == "READY\n", f"writer failed: {first!r} {proc.stderr.read()}"
        time.sleep(delay)
        assert proc.poll() is None, f"writer exited early: {proc.stderr.read()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        out = proc.stdout.read()
        err = proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    assert "Traceback" not in err, err
    acks: list[Ack] = []
    skipped: list[int] = []
    # Only complete lines count: a line cut by the kill was never acknowledged.
    for line in out.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        word, *rest = line.split()
        if word == "ACK":
            acks.append(Ack(int(rest[0]), rest[1], rest[2]))
        elif word == "EXISTS":
            skipped.append(int(rest[0]))
    return acks, skipped


def first_parent_chain(vs: VersionStore, head: str) -> list[Commit]:
    """The whole first-parent history from ``head``, newest first."""
    out: list[Commit] = []
    token: str | None = None
    while True:
        page = vs.log(head, page_token=token)
        out.extend(page.items)
        token = page.token
        if token is None:
            return out


def table(n: int) -> dict[str, object]:
    """A new ICEBERG_TABLE content."""
    return {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://bucket/p/{n}.json",
        "snapshotId": n,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


class LiveWriter:
    """Commits new keys from a thread of the test process until stopped."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.acked: list[str] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-writer")

    def _run(self) -> None:
        p = open_store(f"sqlite:///{self.db}")
        try:
            vs = VersionStore(p)
            i = 0
            while not self._stop.is_set():
                # The root as expected hash: always stale, never conflicting.
                r = vs.commit("main", NO_ANCESTOR, {"message": f"parent {i}"}, [
                    Put((f"parent{i:05d}",), table(i))
                ])
                self.acked.append(r.hash)
                i += 1
                self._stop.wait(0.005)
        except BaseException as e:  # reported by stop()
            self.errors.append(e)
        finally:
            p.close()

    def __enter__(self) -> LiveWriter:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        assert not self._thread.is_alive(), "live writer hung"


@pytest.mark.parametrize("live_writer", [False, True], ids=["alone", "with_live_writer"])
def test_acknowledged_commits_survive_sigkill(tmp_path: Path, live_writer: bool) -> None:
    db = tmp_path / "loch.db"
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ctx = f"(seed {seed})"
    acked: list[Ack] = []
    writer = LiveWriter(db) if live_writer else None
    if writer is not None:
        with writer:
            acked = kill_loop(db, KILLS_WITH_LIVE_WRITER, rng, ctx)
        assert not writer.errors, f"live writer failed: {writer.errors!r} {ctx}"
        assert len(writer.acked) >= KILLS_WITH_LIVE_WRITER, ctx
    else:
        acked = kill_loop(db, KILLS, rng, ctx)
    parent_acked = writer.acked if writer is not None else []
    verify(db, acked, parent_acked, ctx)


def kill_loop(db: Path, kills: int, rng: random.Random, ctx: str) -> list[Ack]:
    """Run and SIGKILL the child ``kills`` times; the commits it acknowledged."""
    acked: list[Ack] = []
    next_index = 0
    for n in range(kills):
        # Every few rounds, kill while the child may still be importing or opening the
        # store (migration and bootstrap writes, WAL recovery); otherwise mid-commits.
        early = n % EARLY_KILL_EVERY == EARLY_KILL_EVERY - 1
        delay = rng.uniform(0.0, 0.6 if early else MAX_DELAY_S)
        acks, skipped = run_until_killed(db, next_index, delay, wait_ready=not early)
        assert [a.index for a in acks] == sorted(a.index for a in acks), ctx
        assert len(skipped) <= 1, f"only an unacknowledged last commit can exist {ctx}"
        acked.extend(acks)
        if acks or skipped:
            next_index = max([a.index for a in acks] + skipped) + 1
        # After each crash the file opens and holds every acknowledged commit so far.
        p = open_store(f"sqlite:///{db}")
        try:
            vs = VersionStore(p)
            ids = {c.id for c in first_parent_chain(vs, vs.get_reference("main").hash)}
            lost = [a for a in acked if a.hash not in ids]
            assert not lost, f"acknowledged commits lost after kill {n}: {lost} {ctx}"
        finally:
            p.close()
    assert len(acked) >= kills, f"too few commits acknowledged to mean much {ctx}"
    return acked


def verify(db: Path, acked: list[Ack], parent_acked: list[str], ctx: str) -> None:
    """The store after the crashes: history, keys, a new commit, file integrity."""
    p = open_store(f"sqlite:///{db}")
    try:
        vs = VersionStore(p)
        head = vs.get_reference("main").hash
        log = first_parent_chain(vs, head)
        # Linear history; the child's commits gap-free: commit i added k<i>.
        chronological = log[::-1]
        assert chronological[0].parents == (NO_ANCESTOR,)
        for older, newer in itertools.pairwise(chronological):
            assert newer.parents == (older.id,), ctx
        child = [c.meta["message"] for c in chronological if c.meta["message"].startswith("c")]
        assert child == [f"commit {i}" for i in range(len(child))], ctx
        assert len(log) == len(child) + len(parent_acked), ctx
        ids = {c.id for c in log}
        assert [a for a in acked if a.hash not in ids] == [], ctx
        assert [h for h in parent_acked if h not in ids] == [], ctx
        # Every acknowledged key is live with its content id; the counter is at HEAD's.
        entries = dict(vs.entries(head).items)
        assert len(entries) == len(log) + 1
        for a in acked:
            assert entries[(f"k{a.index:06d}",)][0] == a.content_id, ctx
        assert vs.get_content(head, COUNTER).content["snapshotId"] == len(child) - 1
        # The store still takes commits.
        r = vs.commit("main", head, {"message": "after crashes"}, [Put(("after",), table(0))])
        assert vs.get_reference("main").hash == r.hash
    finally:
        p.close()

    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()
