"""Three ``loch serve`` replicas on one PostgreSQL database under 16 concurrent clients.

Every client sends its requests round-robin through the three replicas. Checked after
each load: every acknowledged commit is in its branch's log exactly once and nothing else
is, each log is a linear first-parent chain, each log entry carries the operations that
were sent, the contents at HEAD are those of the acknowledged commits (with the content
ids the server assigned), and conflicts are exactly the expected ones. Also: a commit
through one replica is visible at once through the others (per-process object caches).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from .harness import (
    NO_ANCESTOR,
    SPEC2,
    V2,
    Replica,
    RoundRobin,
    assert_linear,
    assert_nessie_error,
    contents,
    create_branch,
    enc,
    entries,
    head,
    ok,
    put,
    reset_database,
    run_threads,
    start_replicas,
    table,
    walk_log,
)

CLIENTS = 16
REPLICAS = 3
COMMITS_PER_CLIENT = 20
LOAD_SECONDS = 60.0
"""Each client stops early after this long (the checks then cover what was acknowledged)."""
THREAD_TIMEOUT = 150.0


@pytest.fixture(scope="module")
def replicas(
    postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Replica]]:
    """Three replicas on an emptied database, stopped (SIGTERM, exit 0) after the module."""
    reset_database(postgres_url)
    logs = tmp_path_factory.mktemp("replicas")
    started = start_replicas(REPLICAS, postgres_url, logs)
    yield started
    statuses = [r.stop() for r in started]
    for r in started:
        log = r.log_path.read_text(errors="replace")
        assert "Traceback" not in log and "Unhandled error" not in log, log[-4000:]
    assert statuses == [0] * REPLICAS


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    """A client for setup and checks."""
    with httpx.Client(timeout=30.0, headers=SPEC2) as c:
        yield c


@dataclass
class Acked:
    """A commit (or merge) that was answered 200."""

    branch: str
    hash: str
    message: str
    puts: dict[str, str] = field(default_factory=dict)
    """Dotted key → metadataLocation of each PUT (empty for merges)."""
    added: dict[str, str] = field(default_factory=dict)
    """Dotted key → content id the server assigned."""
    merged_from: str | None = None


def acked_commit(branch: str, message: str, ops: list[dict[str, Any]], body: Any) -> Acked:
    """An :class:`Acked` from a commit's request operations and 200 response body."""
    assert body["targetBranch"]["name"] == branch
    puts = {".".join(op["key"]["elements"]): op["content"]["metadataLocation"] for op in ops}
    added = {".".join(a["key"]["elements"]): a["contentId"] for a in body["addedContents"]}
    new_keys = {k for k, op in zip(puts, ops, strict=True) if op["content"]["id"] is None}
    assert set(added) == new_keys, (added, ops)
    return Acked(branch, body["targetBranch"]["hash"], message, puts, added)


def disjoint_commits(
    client: RoundRobin, c: int, branch: str, count: int, deadline: float
) -> list[Acked]:
    """Client ``c``'s commits to ``branch``: first a table of its own, then updates of it
    (with its content id) that each also create a new table; the expected hash is the
    client's own previous commit, stale by the time it is used."""
    own = f"own_c{c:02d}"
    own_id: str | None = None
    expected = NO_ANCESTOR
    acked: list[Acked] = []
    for i in range(count):
        if time.monotonic() > deadline:
            break
        location = f"s3://w/{branch}/{own}/{i}.json"
        if own_id is None:
            ops = [put([own], table(location))]
        else:
            new = f"new_c{c:02d}_{i:03d}"
            ops = [
                put([own], table(location, own_id, i)),
                put([new], table(f"s3://w/{branch}/{new}.json")),
            ]
        message = f"{branch} c{c} #{i}"
        a = acked_commit(branch, message, ops, ok(client.commit(branch, expected, message, ops)))
        own_id = own_id or a.added[own]
        expected = a.hash
        acked.append(a)
    return acked


def expected_state(
    log: list[dict[str, Any]], acked: dict[str, Acked]
) -> dict[str, tuple[str, str]]:
    """Key → (metadataLocation, content id) after replaying the acknowledged commits in
    log order (oldest first)."""
    ids: dict[str, str] = {}
    for a in acked.values():
        ids.update(a.added)
    state: dict[str, tuple[str, str]] = {}
    for e in reversed(log):
        a = acked[e["commitMeta"]["hash"]]
        for k, location in a.puts.items():
            state[k] = (location, ids[k])
    return state


def state_of(http: httpx.Client, replicas: list[Replica], ref: str) -> dict[str, tuple[str, str]]:
    """Key → (metadataLocation, content id) of every entry at ``ref`` (pages of 50
    read from each replica in turn)."""
    urls = [r.url for r in replicas]
    return {
        k: (c["metadataLocation"], c["id"]) for k, c in entries(http, urls, ref, page=50).items()
    }


def check_branch(
    http: httpx.Client, replicas: list[Replica], branch: str, acked: list[Acked]
) -> list[dict[str, Any]]:
    """The checks shared by every load: same HEAD through every replica, a linear log of
    exactly the acknowledged commits, each with the operations sent. The log."""
    heads = {head(http, r.url, branch) for r in replicas}
    assert len(heads) == 1, heads
    (head_hash,) = heads
    urls = [r.url for r in replicas]
    log = walk_log(http, urls, branch, fetch_all=True, page=97)
    assert_linear(log, head_hash)
    by_hash = {a.hash: a for a in acked}
    assert len(by_hash) == len(acked), "two acknowledged commits got the same hash"
    logged = [e["commitMeta"]["hash"] for e in log]
    missing = set(by_hash) - set(logged)
    extra = set(logged) - set(by_hash)
    assert not missing, f"{len(missing)} acknowledged commits are not in the log of {branch}"
    assert not extra, f"{len(extra)} commits in the log of {branch} were never acknowledged"
    for e in log:
        a = by_hash[e["commitMeta"]["hash"]]
        assert e["commitMeta"]["message"] == a.message
        if a.merged_from is None:
            ops = {".".join(op["key"]["elements"]): op for op in e["operations"]}
            assert {k: op["content"]["metadataLocation"] for k, op in ops.items()} == a.puts
            assert all(op["type"] == "PUT" for op in ops.values())
        else:
            assert e["commitMeta"]["parentCommitHashes"] == [e["parentCommitHash"], a.merged_from]
    # the same log through another replica (hashes only)
    assert [e["commitMeta"]["hash"] for e in walk_log(http, replicas[2].url, branch)] == logged
    return log


def test_disjoint_keys_on_one_branch_with_stale_hashes(
    replicas: list[Replica], http: httpx.Client
) -> None:
    branch = "disjoint"
    create_branch(http, replicas[0].url, branch)
    deadline = time.monotonic() + LOAD_SECONDS

    def client(c: int) -> list[Acked]:
        with RoundRobin(replicas, c) as rr:
            return disjoint_commits(rr, c, branch, COMMITS_PER_CLIENT, deadline)

    acked = [a for per_client in run_threads(CLIENTS, client, THREAD_TIMEOUT) for a in per_client]
    assert len(acked) >= CLIENTS * 3, "too few commits within the time bound"
    log = check_branch(http, replicas, branch, acked)
    expected = expected_state(log, {a.hash: a for a in acked})
    assert state_of(http, replicas, branch) == expected
    # each client's own table holds its last acknowledged update
    for c in range(CLIENTS):
        last = [a for a in acked if a.message.startswith(f"{branch} c{c} #")][-1]
        assert expected[f"own_c{c:02d}"][0] == last.puts[f"own_c{c:02d}"]


def test_several_branches(replicas: list[Replica], http: httpx.Client) -> None:
    branches = [f"multi/{i}" for i in range(4)]
    for b in branches:
        create_branch(http, replicas[0].url, b)
    deadline = time.monotonic() + LOAD_SECONDS

    def client(c: int) -> list[Acked]:
        with RoundRobin(replicas, c) as rr:
            return disjoint_commits(rr, c, branches[c % 4], COMMITS_PER_CLIENT, deadline)

    acked = [a for per_client in run_threads(CLIENTS, client, THREAD_TIMEOUT) for a in per_client]
    for b in branches:
        mine = [a for a in acked if a.branch == b]
        assert len(mine) >= 4 * 3
        log = check_branch(http, replicas, b, mine)
        assert state_of(http, replicas, b) == expected_state(log, {a.hash: a for a in mine})


GROUPS = 4
ROUNDS = 8


def test_shared_keys_exactly_one_winner_per_round(
    replicas: list[Replica], http: httpx.Client
) -> None:
    """Four groups of four clients; in each round the clients of a group update their
    group's table from the same expected hash (the group's last winning commit, stale
    because of the other groups): exactly one wins, the other three get 409
    REFERENCE_CONFLICT with a single VALUE_DIFFERS conflict on that table."""
    branch = "shared"
    create_branch(http, replicas[0].url, branch)
    tables = [f"shared_g{g}" for g in range(GROUPS)]
    ops = [put([t], table(f"s3://w/{t}/setup.json")) for t in tables]
    resp = http.post(
        replicas[0].url + f"{V2}/trees/{enc(branch + '@' + NO_ANCESTOR)}/history/commit",
        json={"commitMeta": {"message": "setup"}, "operations": ops},
    )
    setup = acked_commit(branch, "setup", ops, ok(resp))
    group_hash = [setup.hash] * GROUPS
    # outcome of every request: (group, round) -> [(client, status, body, location)]
    outcomes: dict[tuple[int, int], list[tuple[int, int, Any, str]]] = {
        (g, r): [] for g in range(GROUPS) for r in range(ROUNDS)
    }
    lock = threading.Lock()
    deadline = time.monotonic() + LOAD_SECONDS

    def settle(g: int, r: int) -> None:
        # runs in one thread of the group once all four have answered
        winners = [o for o in outcomes[(g, r)] if o[1] == 200]
        if winners:
            group_hash[g] = winners[-1][2]["targetBranch"]["hash"]

    round_of = [0] * GROUPS

    def make_action(g: int) -> Any:
        def action() -> None:
            settle(g, round_of[g])
            round_of[g] += 1

        return action

    barriers = [
        threading.Barrier(CLIENTS // GROUPS, action=make_action(g), timeout=60.0)
        for g in range(GROUPS)
    ]

    def client(c: int) -> None:
        g = c % GROUPS
        t = tables[g]
        with RoundRobin(replicas, c) as rr:
            try:
                for r in range(ROUNDS):
                    if time.monotonic() > deadline:
                        break
                    location = f"s3://w/{t}/r{r}/c{c}.json"
                    op = put([t], table(location, setup.added[t], r + 1))
                    resp = rr.commit(branch, group_hash[g], f"{t} r{r} c{c}", [op])
                    body = resp.json()
                    with lock:
                        outcomes[(g, r)].append((c, resp.status_code, body, location))
                    barriers[g].wait()
            except BaseException:
                barriers[g].abort()
                raise

    run_threads(CLIENTS, client, THREAD_TIMEOUT)
    acked = [setup]
    played = 0
    for (g, r), outs in sorted(outcomes.items()):
        if not outs:
            continue  # the time bound ended the rounds
        played += 1
        assert len(outs) == CLIENTS // GROUPS
        winners = [o for o in outs if o[1] == 200]
        losers = [o for o in outs if o[1] != 200]
        assert len(winners) == 1, f"group {g} round {r}: {[(o[0], o[1]) for o in outs]}"
        (c, _, body, location) = winners[0]
        op = put([tables[g]], table(location, setup.added[tables[g]]))
        acked.append(acked_commit(branch, f"{tables[g]} r{r} c{c}", [op], body))
        for _, status, err, _ in losers:
            assert status == 409, err
            assert err["errorCode"] == "REFERENCE_CONFLICT", err
            conflicts = err["errorDetails"]["conflicts"]
            assert [(x["conflictType"], x["key"]) for x in conflicts] == [
                ("VALUE_DIFFERS", {"elements": [tables[g]]})
            ], err
    assert played >= GROUPS * 2, "too few rounds within the time bound"
    log = check_branch(http, replicas, branch, acked)
    assert state_of(http, replicas, branch) == expected_state(log, {a.hash: a for a in acked})


FEATURES = 4
MAIN_CLIENTS = 4


def test_merges_of_branches_into_main(replicas: list[Replica], http: httpx.Client) -> None:
    """Twelve clients commit to four feature branches while four commit to ``main`` and,
    every third request, merge a feature branch into ``main`` (expected hash stale). A
    final merge of every feature branch follows. ``main`` then holds every feature
    branch's tables, and its log is its own commits and the applied merges."""
    seed_ops = [put(["seed"], table("s3://w/seed.json"))]
    base = replicas[0].url
    seed = acked_commit(
        "main",
        "seed",
        seed_ops,
        ok(
            http.post(
                base + f"{V2}/trees/main%40{head(http, base, 'main')}/history/commit",
                json={"commitMeta": {"message": "seed"}, "operations": seed_ops},
            )
        ),
    )
    assert head(http, base, "main") == seed.hash, "main must be empty before this test"
    features = [f"feature/{i}" for i in range(FEATURES)]
    for f in features:
        create_branch(http, base, f, seed.hash)
    deadline = time.monotonic() + LOAD_SECONDS

    def feature_client(c: int, rr: RoundRobin) -> list[Acked]:
        return disjoint_commits(rr, c, features[c % FEATURES], COMMITS_PER_CLIENT, deadline)

    def main_client(c: int, rr: RoundRobin) -> list[Acked]:
        acked: list[Acked] = []
        expected = seed.hash
        for i in range(COMMITS_PER_CLIENT):
            if time.monotonic() > deadline:
                break
            if i % 3 == 2:
                source = features[(c + i) % FEATURES]
                source_hash = rr.head(source)
                message = f"merge {source} by c{c} #{i}"
                body = ok(rr.merge("main", expected, source, source_hash, message))
                assert body["wasSuccessful"] is True, body
                if body["wasApplied"]:
                    h = body["resultantTargetHash"]
                    acked.append(Acked("main", h, message, merged_from=source_hash))
                    expected = h
                continue
            name = f"main_c{c:02d}_{i:03d}"
            ops = [put([name], table(f"s3://w/main/{name}.json"))]
            message = f"main c{c} #{i}"
            a = acked_commit("main", message, ops, ok(rr.commit("main", expected, message, ops)))
            expected = a.hash
            acked.append(a)
        return acked

    def client(c: int) -> list[Acked]:
        with RoundRobin(replicas, c) as rr:
            if c < CLIENTS - MAIN_CLIENTS:
                return feature_client(c, rr)
            return main_client(c, rr)

    acked = [a for per_client in run_threads(CLIENTS, client, THREAD_TIMEOUT) for a in per_client]
    with RoundRobin(replicas, 0) as rr:
        for f in features:
            source_hash = rr.head(f)
            message = f"final merge {f}"
            body = ok(rr.merge("main", rr.head("main"), f, source_hash, message))
            assert body["wasSuccessful"] is True, body
            if body["wasApplied"]:
                acked.append(
                    Acked("main", body["resultantTargetHash"], message, merged_from=source_hash)
                )

    expected_main: dict[str, tuple[str, str]] = {}
    for f in features:
        mine = [seed] + [a for a in acked if a.branch == f]
        log = check_branch(http, replicas, f, mine)
        state = state_of(http, replicas, f)
        assert state == expected_state(log, {a.hash: a for a in mine})
        expected_main.update(state)
    main_acked = [seed] + [a for a in acked if a.branch == "main"]
    assert any(a.merged_from for a in main_acked if not a.message.startswith("final"))
    check_branch(http, replicas, "main", main_acked)
    for a in main_acked:
        for k, location in a.puts.items():
            expected_main[k] = (location, a.added[k])
    assert state_of(http, replicas, "main") == expected_main


def test_commit_through_one_replica_is_visible_through_the_others(
    replicas: list[Replica], http: httpx.Client
) -> None:
    """Each replica caches the objects it read; references are read from the database,
    so a commit through one replica is seen at once through the two others, and a
    replica accepts as expected hash a commit it never saw."""
    branch = "cache"
    create_branch(http, replicas[0].url, branch)
    t = "cached"
    expected = NO_ANCESTOR
    content_id: str | None = None
    previous: tuple[str, str] | None = None
    for i in range(30):
        writer = replicas[i % REPLICAS]
        location = f"s3://w/{t}/{i}.json"
        resp = http.post(
            writer.url + f"{V2}/trees/{enc(branch + '@' + expected)}/history/commit",
            json={
                "commitMeta": {"message": f"update {i}"},
                "operations": [put([t], table(location, content_id, i + 1))],
            },
        )
        body = ok(resp)
        new_hash = body["targetBranch"]["hash"]
        if content_id is None:
            content_id = body["addedContents"][0]["contentId"]
        for r in replicas:
            if r is writer:
                continue
            assert head(http, r.url, branch) == new_hash, (i, r.name)
            got = contents(http, r.url, branch, [[t]])
            assert got[t]["metadataLocation"] == location, (i, r.name)
            assert got[t]["id"] == content_id
            top = ok(http.get(f"{r.url}{V2}/trees/{branch}/history", params={"max-records": 1}))
            assert top["logEntries"][0]["commitMeta"]["hash"] == new_hash
            assert entries(http, r.url, branch)[t]["metadataLocation"] == location
            if previous is not None:
                # the value at an older commit is unchanged (immutable, cached or not)
                old = contents(http, r.url, "@" + previous[0], [[t]])
                assert old[t]["metadataLocation"] == previous[1]
        # the next commit goes through another replica, expecting the hash just made
        expected = new_hash
        previous = (new_hash, location)
    log = walk_log(http, replicas[0].url, branch)
    assert [e["commitMeta"]["message"] for e in log] == [f"update {i}" for i in reversed(range(30))]


def test_stale_write_through_another_replica_conflicts(
    replicas: list[Replica], http: httpx.Client
) -> None:
    """A replica that has the old value cached still detects the conflict."""
    branch = "cache-conflict"
    create_branch(http, replicas[0].url, branch)
    a, b = replicas[0], replicas[1]
    first = ok(
        http.post(
            a.url + f"{V2}/trees/{enc(branch + '@' + NO_ANCESTOR)}/history/commit",
            json={"commitMeta": {"message": "create"}, "operations": [put(["x"], table("s3://0"))]},
        )
    )
    h0 = first["targetBranch"]["hash"]
    cid = first["addedContents"][0]["contentId"]
    # B reads (and caches) the first value
    assert contents(http, b.url, branch, [["x"]])["x"]["metadataLocation"] == "s3://0"
    ok(
        http.post(
            a.url + f"{V2}/trees/{enc(branch + '@' + h0)}/history/commit",
            json={"commitMeta": {"message": "a"}, "operations": [put(["x"], table("s3://a", cid))]},
        )
    )
    resp = http.post(
        b.url + f"{V2}/trees/{enc(branch + '@' + h0)}/history/commit",
        json={"commitMeta": {"message": "b"}, "operations": [put(["x"], table("s3://b", cid))]},
    )
    err = assert_nessie_error(resp, 409, "REFERENCE_CONFLICT")
    assert [c["conflictType"] for c in err["errorDetails"]["conflicts"]] == ["VALUE_DIFFERS"]
    assert contents(http, replicas[2].url, branch, [["x"]])["x"]["metadataLocation"] == "s3://a"


def test_reference_races_have_one_winner(replicas: list[Replica], http: httpx.Client) -> None:
    """All sixteen clients create the same branch, then assign it from the same expected
    hash to different commits, then delete it at the winner's hash: each time exactly
    one succeeds; the others get 409 REFERENCE_ALREADY_EXISTS, 409 REFERENCE_CONFLICT
    (UNEXPECTED_HASH) and 404 REFERENCE_NOT_FOUND."""
    create_branch(http, replicas[0].url, "targets")
    targets: list[str] = []
    expected = NO_ANCESTOR
    for c in range(CLIENTS):
        resp = http.post(
            replicas[c % REPLICAS].url + f"{V2}/trees/targets%40{expected}/history/commit",
            json={
                "commitMeta": {"message": f"target {c}"},
                "operations": [put([f"t{c}"], table("s3://t"))],
            },
        )
        expected = ok(resp)["targetBranch"]["hash"]
        targets.append(expected)
    barrier = threading.Barrier(CLIENTS, timeout=60.0)
    results: dict[tuple[int, str], list[tuple[int, httpx.Response]]] = {}
    lock = threading.Lock()

    def record(r: int, step: str, c: int, resp: httpx.Response) -> None:
        with lock:
            results.setdefault((r, step), []).append((c, resp))

    def client(c: int) -> None:
        with httpx.Client(timeout=30.0, headers=SPEC2) as h:
            try:
                for r in range(3):
                    name = f"race/{r}"
                    url = replicas[(c + r) % REPLICAS].url
                    barrier.wait()
                    resp = h.post(
                        f"{url}{V2}/trees",
                        params={"name": name, "type": "BRANCH"},
                        json={"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR},
                    )
                    record(r, "create", c, resp)
                    barrier.wait()
                    resp = h.put(
                        f"{url}{V2}/trees/{enc(name + '@' + NO_ANCESTOR)}",
                        json={"type": "DETACHED", "hash": targets[c]},
                    )
                    record(r, "assign", c, resp)
                    barrier.wait()
                    current = head(h, url, name)
                    barrier.wait()
                    resp = h.delete(f"{url}{V2}/trees/{enc(name + '@' + current)}")
                    record(r, "delete", c, resp)
            except BaseException:
                barrier.abort()
                raise

    run_threads(CLIENTS, client, THREAD_TIMEOUT)
    expected_losers = {
        "create": (409, "REFERENCE_ALREADY_EXISTS"),
        "assign": (409, "REFERENCE_CONFLICT"),
        "delete": (404, "REFERENCE_NOT_FOUND"),
    }
    for (r, step), outs in sorted(results.items()):
        assert len(outs) == CLIENTS
        winners = [(c, resp) for c, resp in outs if resp.status_code == 200]
        assert len(winners) == 1, (r, step, [(c, resp.status_code) for c, resp in outs])
        status, code = expected_losers[step]
        for _, resp in outs:
            if resp.status_code != 200:
                err = assert_nessie_error(resp, status, code)
                if step == "assign":
                    conflicts = err["errorDetails"]["conflicts"]
                    assert [x["conflictType"] for x in conflicts] == ["UNEXPECTED_HASH"]
        if step == "assign":
            (c, resp) = winners[0]
            assert resp.json()["reference"]["hash"] == targets[c]
    names = {ref["name"] for ref in ok(http.get(f"{replicas[2].url}{V2}/trees"))["references"]}
    assert not {n for n in names if n.startswith("race/")}
