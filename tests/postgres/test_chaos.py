"""Chaos: replicas SIGKILLed and restarted, and PostgreSQL restarted once, under load.

A throwaway PostgreSQL cluster (so that it can be restarted) serves three ``loch serve``
replicas. Sixteen clients commit through them round-robin: eight to ``main`` (two of
them also merge the other branches into ``main`` now and then), eight to four other
branches, each request creating a table of its own with a stale expected hash. A
request that fails on the connection or answers 503 has an unknown outcome; the client
goes on with a new request (a new table), so nothing is ever sent twice.

Timeline (bounded in time and in requests): replicas are killed with SIGKILL and
restarted one after the other for :data:`PHASE1` seconds; the killer pauses and
PostgreSQL is restarted (``down_seconds=2``); each replica must then answer a commit
again by itself (same process); the killer resumes for :data:`PHASE3` seconds.

Checked: every acknowledged commit and merge is in its branch's log exactly once, each
log entry is either acknowledged or of a request whose outcome was unknown (never of one
that was refused), logs are linear, every entry's operations and contents are readable
and are what was sent, the entries at HEAD are exactly those of the logged commits,
nothing answered 500 or hung past the client timeout, and while PostgreSQL was down
the replicas answered 503 in Nessie's error format (``SERVICE_UNAVAILABLE``).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg
import pytest

from loch.testing.postgres import PostgresCluster, find_pg_bin

from .harness import (
    ERROR_FIELDS,
    NO_ANCESTOR,
    SPEC2,
    V2,
    Replica,
    assert_linear,
    assert_nessie_error,
    commit_body,
    commit_path,
    contents,
    create_branch,
    entries,
    head,
    merge_path,
    ok,
    put,
    run_threads,
    start_replicas,
    table,
    wait_until,
    walk_log,
)

CLIENTS = 16
BRANCHES = ["main", "chaos/0", "chaos/1", "chaos/2", "chaos/3"]
MERGERS = (0, 1)
"""Clients (committing to ``main``) that merge a chaos branch every fifth request."""
PHASE1 = 15.0
PHASE3 = 12.0
KILL_EVERY = 3.0
PG_DOWN = 2.0
CLIENT_TIMEOUT = 20.0
MAX_REQUESTS = 600
"""Per client: the load stops at the end of the timeline or after this many requests."""
RECOVERY_SECONDS = 30.0


@dataclass
class Attempt:
    """One request of a client and what came of it."""

    client: int
    kind: str  # "commit" or "merge"
    branch: str
    message: str
    replica: str
    started: float
    ended: float
    status: int | None  # None: no HTTP answer
    error: str | None = None  # exception name (no answer) or errorCode
    body: Any = None
    ops: Any = None
    source_hash: str | None = None

    @property
    def acked(self) -> bool:
        return self.status == 200

    @property
    def unknown(self) -> bool:
        """The request may or may not have taken effect."""
        return self.status is None or self.status == 503


@pytest.fixture(scope="module")
def cluster() -> Iterator[PostgresCluster]:
    """A cluster of this module only (the chaos test restarts it)."""
    if find_pg_bin() is None:
        pytest.skip("PostgreSQL is not installed")
    c = PostgresCluster().start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def replicas(
    cluster: PostgresCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Replica]]:
    """Three replicas on the cluster, killed after the module; no request may have
    failed with an unhandled error (500) in any of them."""
    started = start_replicas(3, cluster.url, tmp_path_factory.mktemp("chaos"))
    try:
        yield started
    finally:
        for r in started:
            r.kill()
    for r in started:
        log = r.log_path.read_text(errors="replace")
        assert "Unhandled error" not in log, log[-6000:]


class Killer(threading.Thread):
    """Kills one replica after another with SIGKILL and restarts it on its port."""

    def __init__(self, replicas: list[Replica]) -> None:
        super().__init__(name="killer", daemon=True)
        self.replicas = replicas
        self.run_flag = threading.Event()
        self.idle = threading.Event()
        self.stop_flag = threading.Event()
        self.kills: list[tuple[str, float, float]] = []  # replica, killed at, serving at
        self.error: BaseException | None = None

    def run(self) -> None:
        k = 0
        try:
            while not self.stop_flag.is_set():
                if not self.run_flag.is_set():
                    self.idle.set()
                    self.run_flag.wait(0.1)
                    continue
                self.idle.clear()
                if self.stop_flag.wait(KILL_EVERY) or not self.run_flag.is_set():
                    continue
                r = self.replicas[k % len(self.replicas)]
                k += 1
                killed = time.monotonic()
                r.kill()
                time.sleep(random.uniform(0.2, 1.0))
                r.start(timeout=90.0)
                self.kills.append((r.name, killed, time.monotonic()))
        except BaseException as e:  # reported by the test
            self.error = e
        finally:
            self.idle.set()

    def pause(self) -> None:
        self.run_flag.clear()
        assert self.idle.wait(120.0), "the killer did not pause"

    def resume(self) -> None:
        self.idle.clear()
        self.run_flag.set()


def client_loop(
    c: int, replicas: list[Replica], stop: threading.Event, heads: dict[str, str]
) -> list[Attempt]:
    """Requests of client ``c`` until ``stop`` (or :data:`MAX_REQUESTS`)."""
    branch = "main" if c < 8 else BRANCHES[1 + c % 4]
    expected = heads[branch]
    attempts: list[Attempt] = []
    with httpx.Client(timeout=CLIENT_TIMEOUT, headers=SPEC2) as http:
        for i in range(MAX_REQUESTS):
            if stop.is_set():
                break
            r = replicas[(c + i) % len(replicas)]
            if c in MERGERS and i % 5 == 4:
                source = BRANCHES[1 + (c + i) % 4]
                a = Attempt(c, "merge", "main", f"merge {source} c{c} #{i}", r.name, 0, 0, None)
                try:
                    a.source_hash = head(http, r.url, source)
                except (AssertionError, httpx.TransportError):
                    continue  # could not read the source: skip this merge
                body = {
                    "fromRefName": source,
                    "fromHash": a.source_hash,
                    "commitMeta": {"message": a.message},
                }
                url = r.url + merge_path("main", expected)
            else:
                name = f"t_c{c:02d}_{i:04d}"
                a = Attempt(c, "commit", branch, f"{branch} c{c} #{i}", r.name, 0, 0, None)
                a.ops = [put([name], table(f"s3://w/{name}.json"))]
                body = commit_body(a.message, a.ops)
                url = r.url + commit_path(branch, expected)
            a.started = time.monotonic()
            try:
                resp = http.post(url, json=body)
                a.status = resp.status_code
                try:
                    a.body = resp.json()
                except ValueError:
                    a.body = resp.text
            except httpx.TransportError as e:
                a.error = type(e).__name__
            a.ended = time.monotonic()
            if isinstance(a.body, dict) and a.status != 200:
                a.error = a.body.get("errorCode")
            attempts.append(a)
            if a.acked:
                if a.kind == "commit":
                    expected = a.body["targetBranch"]["hash"]
                elif a.body.get("wasApplied"):
                    expected = a.body["resultantTargetHash"]
            else:
                time.sleep(random.uniform(0.05, 0.2))
    return attempts


def test_kills_and_a_database_restart_under_load(
    cluster: PostgresCluster, replicas: list[Replica]
) -> None:
    killer = Killer(replicas)
    stop = threading.Event()
    load: threading.Thread | None = None
    try:
        with httpx.Client(timeout=CLIENT_TIMEOUT, headers=SPEC2) as http:
            base = replicas[0].url
            for b in BRANCHES[1:]:
                create_branch(http, base, b)
            heads = {b: NO_ANCESTOR for b in BRANCHES}
            killer.start()
            killer.resume()
            results: list[list[Attempt]] = []
            failed: list[BaseException] = []

            def run_load() -> None:
                try:
                    results.extend(
                        run_threads(
                            CLIENTS,
                            lambda c: client_loop(c, replicas, stop, heads),
                            timeout=PHASE1 + PHASE3 + 4 * RECOVERY_SECONDS + 120,
                        )
                    )
                except BaseException as e:  # re-raised below
                    failed.append(e)

            load = threading.Thread(target=run_load, name="load")
            load.start()
            time.sleep(PHASE1)

            killer.pause()
            pids = [r.pid for r in replicas]
            assert None not in pids
            quiet_from = time.monotonic()
            cluster.restart(down_seconds=PG_DOWN)
            pg_up = time.monotonic()
            recovered = {r.name: recover(http, r) - pg_up for r in replicas}
            assert [r.pid for r in replicas] == pids, "a replica restarted during the PG restart"
            quiet_to = time.monotonic()

            killer.resume()
            time.sleep(PHASE3)
            stop.set()
            load.join(CLIENT_TIMEOUT + 60)
            assert not load.is_alive(), "clients did not stop"
            if failed:
                raise failed[0]
            killer.stop_flag.set()
            killer.join(120.0)
            assert killer.error is None, killer.error
            for r in replicas:
                if r.pid is None:
                    r.start(timeout=90.0)
            attempts = [a for per_client in results for a in per_client]
            summary = summarize(attempts, killer, recovered, quiet_from, pg_up, quiet_to)
            print(summary)

            check_responses(attempts, quiet_from, quiet_to)
            check_repository(http, replicas, attempts)
    finally:
        stop.set()
        killer.stop_flag.set()
        if load is not None:
            load.join(CLIENT_TIMEOUT + 60)
        if killer.is_alive():
            killer.join(120.0)


def recover(http: httpx.Client, r: Replica) -> float:
    """Commit through ``r`` until it succeeds (same process); when it did."""
    n = 0

    def committed() -> bool:
        nonlocal n
        n += 1
        name = f"recover_{r.name}_{uuid.uuid4().hex[:12]}"
        try:
            resp = http.post(
                r.url + commit_path("main", NO_ANCESTOR),
                json=commit_body(f"recover {name} #{n}", [put([name], table("s3://r"))]),
            )
        except httpx.TransportError:
            return False
        assert resp.status_code in (200, 503), resp.text
        return resp.status_code == 200

    wait_until(committed, RECOVERY_SECONDS, f"{r.name} to commit again after the PG restart", 0.2)
    return time.monotonic()


def summarize(
    attempts: list[Attempt],
    killer: Killer,
    recovered: dict[str, float],
    quiet_from: float,
    pg_up: float,
    quiet_to: float,
) -> str:
    statuses: dict[str, int] = {}
    for a in attempts:
        k = str(a.status) if a.status is not None else (a.error or "?")
        statuses[k] = statuses.get(k, 0) + 1
    slowest = max(a.ended - a.started for a in attempts)
    outage: dict[str, int] = {}
    for a in attempts:
        if a.ended >= quiet_from and a.started <= pg_up:
            k = str(a.status) if a.status is not None else (a.error or "?")
            outage[k] = outage.get(k, 0) + 1
    return (
        f"requests {len(attempts)} {statuses}; kills {len(killer.kills)} "
        f"(back after {[round(s - k, 1) for _, k, s in killer.kills]} s); "
        f"PG restart {pg_up - quiet_from:.1f} s, requests meanwhile {outage}, "
        f"each replica committing again after {[round(t, 1) for t in recovered.values()]} s; "
        f"slowest request {slowest:.1f} s"
    )


def check_responses(attempts: list[Attempt], quiet_from: float, quiet_to: float) -> None:
    """No 500, no hang, nothing refused; 503s in Nessie's format while PG was down."""
    for a in attempts:
        assert a.status != 500, (a.message, a.body)
        assert a.error not in ("ReadTimeout", "WriteTimeout", "PoolTimeout"), a
        assert a.ended - a.started < CLIENT_TIMEOUT
        assert a.status in (None, 200, 503), (a.message, a.status, a.body)
        if a.status == 503:
            assert isinstance(a.body, dict) and set(a.body) >= ERROR_FIELDS, a.body
            assert a.body["errorCode"] == "SERVICE_UNAVAILABLE", a.body
            assert a.body["status"] == 503 and a.body["reason"] == "Service Unavailable"
    during = [a for a in attempts if a.ended >= quiet_from and a.started <= quiet_to]
    assert during, "no request while PostgreSQL restarted"
    assert all(a.status is not None for a in during), [a for a in during if a.status is None]


def check_repository(http: httpx.Client, replicas: list[Replica], attempts: list[Attempt]) -> None:
    """The logs and contents of every branch against what the clients were told."""
    by_message = {a.message: a for a in attempts}
    assert len(by_message) == len(attempts)
    final: dict[str, dict[str, tuple[str, str]]] = {}
    main_log: list[dict[str, Any]] = []
    for branch in [*BRANCHES[1:], "main"]:
        if branch == "main":
            # a last merge of every branch, so that main holds everything
            for source in BRANCHES[1:]:
                body = {"fromRefName": source, "fromHash": head(http, replicas[0].url, source)}
                url = replicas[1].url + merge_path("main", head(http, replicas[1].url, "main"))
                assert ok(http.post(url, json=body))["wasSuccessful"] is True
        heads = {head(http, r.url, branch) for r in replicas}
        assert len(heads) == 1, (branch, heads)
        (head_hash,) = heads
        urls = [r.url for r in replicas]
        log = walk_log(http, urls, branch, fetch_all=True, page=113)
        assert_linear(log, head_hash)
        logged = {e["commitMeta"]["message"]: e for e in log}
        assert len(logged) == len(log), f"a message appears twice in the log of {branch}"
        for a in attempts:
            if a.branch != branch or not a.acked:
                continue
            e = logged.get(a.message)
            if a.kind == "merge" and not a.body["wasApplied"]:
                assert e is None, f"{a.message!r} was not applied but is in the log"
                continue
            assert e is not None, f"acknowledged {a.message!r} is not in the log of {branch}"
            want = a.body["targetBranch"]["hash"] if a.kind == "commit" else None
            want = want or a.body["resultantTargetHash"]
            assert e["commitMeta"]["hash"] == want, a.message
        state: dict[str, tuple[str, str]] = {}
        for e in reversed(log):
            msg = e["commitMeta"]["message"]
            if msg.startswith("recover ") or msg.startswith("Merged "):
                continue  # the recovery probes and the last merges of this test
            found = by_message.get(msg)
            assert found is not None, f"unknown commit {msg!r} in the log of {branch}"
            a = found
            assert a.acked or a.unknown, f"refused request {msg!r} is in the log: {a}"
            if a.kind == "merge":
                assert e["commitMeta"]["parentCommitHashes"] == [
                    e["parentCommitHash"],
                    a.source_hash,
                ]
                continue
            assert [(op["type"], op["key"]) for op in e["operations"]] == [
                (op["type"], op["key"]) for op in a.ops
            ]
            for op in e["operations"]:
                k = ".".join(op["key"]["elements"])
                state[k] = (op["content"]["metadataLocation"], op["content"]["id"])
                assert op["content"]["metadataLocation"] == f"s3://w/{k}.json"
            if a.acked:
                for added in a.body["addedContents"]:
                    k = ".".join(added["key"]["elements"])
                    assert state[k][1] == added["contentId"], a.message
        for e in log:
            if e["commitMeta"]["message"].startswith("recover "):
                for op in e["operations"]:
                    state[".".join(op["key"]["elements"])] = ("s3://r", op["content"]["id"])
        at_head = {
            k: (c["metadataLocation"], c["id"])
            for k, c in entries(http, urls, branch, page=200).items()
        }
        if branch == "main":
            main_log = log
            for s in final.values():
                state.update(s)
        assert at_head == state, f"contents of {branch} differ from its log"
        final[branch] = at_head
        # a sample of historical commits: their trees are readable
        for e in random.sample(log, min(20, len(log))):
            keys = [op["key"]["elements"] for op in e["operations"] or []][:5]
            got = contents(http, replicas[1].url, "@" + e["commitMeta"]["hash"], keys)
            assert set(got) == {".".join(k) for k in keys}
    acked = sum(1 for a in attempts if a.acked)
    assert acked >= CLIENTS * 5, f"only {acked} requests succeeded"
    assert main_log


OUTAGE = 13.0
"""Seconds PostgreSQL stays down: longer than the replicas' pool wait (10 s)."""


def accepts_connections(url: str) -> bool:
    """Whether PostgreSQL at ``url`` accepts a connection now."""
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def test_requests_answer_503_while_the_database_is_down(
    cluster: PostgresCluster, replicas: list[Replica]
) -> None:
    """With PostgreSQL down for longer than the replicas wait for a pooled connection,
    a read, a commit and ``/readyz`` through every replica answer 503 in Nessie's format
    (``SERVICE_UNAVAILABLE``) within the client timeout; once the database is back,
    every replica commits again by itself (same processes)."""
    for r in replicas:
        if r.pid is None:
            r.start(timeout=90.0)
    pids = [r.pid for r in replicas]
    restarted = threading.Event()
    failed: list[BaseException] = []

    def restart() -> None:
        try:
            cluster.restart(down_seconds=OUTAGE)
        except BaseException as e:  # re-raised below
            failed.append(e)
        finally:
            restarted.set()

    restarter = threading.Thread(target=restart, name="pg-restart")
    restarter.start()
    try:
        wait_until(lambda: not accepts_connections(cluster.url), 30.0, "PostgreSQL to stop")
        kinds = ("read", "commit", "readyz")

        def probe(i: int) -> tuple[str, str, httpx.Response, float]:
            r, kind = replicas[i % len(replicas)], kinds[i // len(replicas)]
            with httpx.Client(timeout=CLIENT_TIMEOUT, headers=SPEC2) as http:
                started = time.monotonic()
                if kind == "read":
                    resp = http.get(f"{r.url}{V2}/trees/main")
                elif kind == "commit":
                    body = commit_body("outage", [put(["outage"], table("s3://o"))])
                    resp = http.post(r.url + commit_path("main", NO_ANCESTOR), json=body)
                else:
                    resp = http.get(f"{r.url}/readyz")
                return r.name, kind, resp, time.monotonic() - started

        answers = run_threads(len(replicas) * len(kinds), probe, timeout=CLIENT_TIMEOUT + 10)
        assert not restarted.is_set(), "PostgreSQL came back before the probes were answered"
        for name, kind, resp, took in answers:
            print(f"{name} {kind}: {resp.status_code} after {took:.1f} s")
            assert_nessie_error(resp, 503, "SERVICE_UNAVAILABLE")
            assert took < CLIENT_TIMEOUT
    finally:
        restarter.join(120.0)
    assert not failed, failed
    back = time.monotonic()
    with httpx.Client(timeout=CLIENT_TIMEOUT, headers=SPEC2) as http:
        lag = [round(recover(http, r) - back, 1) for r in replicas]
    print(f"committing again {lag} s after PostgreSQL was back")
    assert [r.pid for r in replicas] == pids, "a replica restarted"
