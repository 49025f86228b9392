"""Crash safety of the SQLite store: acknowledged commits survive ``SIGKILL``.

A child process (``crash_writer.py``) commits in a loop and prints each commit after
``commit()`` returned; the test kills it with ``SIGKILL`` at random moments, restarts it
and carries on with the key sequence. Afterwards every acknowledged commit is in the
branch history, every acknowledged key is live with its content id, the history is
linear and gap-free, the file passes ``PRAGMA integrity_check`` and a fresh store on it
commits normally.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from loch.backends import open_store
from loch.store import NO_ANCESTOR
from loch.versioning import Commit, Put, VersionStore

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

KILLS = 20
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


def test_acknowledged_commits_survive_sigkill(tmp_path: Path) -> None:
    db = tmp_path / "loch.db"
    seed = int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    ctx = f"(seed {seed})"
    acked: list[Ack] = []
    next_index = 0
    for n in range(KILLS):
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
    assert len(acked) >= KILLS, f"too few commits acknowledged to mean much {ctx}"

    p = open_store(f"sqlite:///{db}")
    try:
        vs = VersionStore(p)
        head = vs.get_reference("main").hash
        log = first_parent_chain(vs, head)
        # Linear, gap-free history: commit i added k<i>, oldest first.
        chronological = log[::-1]
        assert [c.meta["message"] for c in chronological] == [
            f"commit {i}" for i in range(len(log))
        ], ctx
        assert chronological[0].parents == (NO_ANCESTOR,)
        for older, newer in itertools.pairwise(chronological):
            assert newer.parents == (older.id,), ctx
        ids = {c.id for c in log}
        assert [a for a in acked if a.hash not in ids] == [], ctx
        # Every acknowledged key is live with its content id; the counter is at HEAD's.
        entries = dict(vs.entries(head).items)
        assert len(entries) == len(log) + 1
        for a in acked:
            assert entries[(f"k{a.index:06d}",)][0] == a.content_id, ctx
        assert vs.get_content(head, COUNTER).content["snapshotId"] == len(log) - 1
        # The store still takes commits.
        r = vs.commit("main", head, {"message": "after crashes"}, [Put(("after",), {
            "type": "ICEBERG_TABLE",
            "metadataLocation": "s3://bucket/after.json",
            "snapshotId": 1,
            "schemaId": 0,
            "specId": 0,
            "sortOrderId": 0,
        })])
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
