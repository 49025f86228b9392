"""Delivery behaviour against real receivers: order, retries, permanent failures, give-up,
redelivery, a receiver that is down or slow, and persistence across a server restart."""

from __future__ import annotations

import itertools
import statistics
import threading
import time
from typing import Any

from .conftest import ReceiverFactory, ServerFactory
from .harness import Client, LochServer, client, put, table, wait_until


def wait_status(c: Client, nid: str, status: str, count: int = 1, timeout: float = 15.0) -> None:
    """Wait until ``count`` deliveries of ``nid`` have ``status``."""
    wait_until(
        lambda: len(c.deliveries(nid, status=status)) >= count,
        timeout,
        f"{count} {status} deliveries of {nid}: {c.deliveries(nid)}",
        interval=0.05,
    )


def commit_n(c: Client, n: int, prefix: str = "k") -> list[str]:
    """``n`` commits on main, each adding a table; their hashes in order."""
    return [
        c.commit("main", put([f"{prefix}{i:04d}"], table(f"s3://{prefix}/{i}")))["targetBranch"][
            "hash"
        ]
        for i in range(n)
    ]


def main_chain(c: Client) -> list[str]:
    """The hashes of main's history, oldest first."""
    return [e["commitMeta"]["hash"] for e in reversed(c.log("main"))]


def check_chain(events: list[dict[str, Any]], chain: list[str], root: str) -> None:
    """The COMMIT events are exactly ``chain``, in order, each pointing at the one before."""
    assert [e["newHash"] for e in events] == chain
    previous = root
    for e in events:
        assert e["reference"]["hash"] == previous, e
        assert e["metadata"]["parentCommitHashes"] == [previous]
        previous = e["newHash"]


def test_many_concurrent_commits_arrive_in_commit_order(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    fast = receivers("fast")
    flaky = receivers("flaky", fail_first=1, fail_every=5)  # every 5th fails once first
    threads, per_thread = 4, 25
    with client(server) as c:
        c.subscribe("commits", fast.url)
        c.subscribe("commits", flaky.url)
        root = c.head()
        errors: list[BaseException] = []

        def writer(t: int) -> None:
            try:
                with client(server) as mine:
                    for i in range(per_thread):
                        # expected = root: keys are disjoint, so each lands on HEAD
                        mine.commit(
                            "main",
                            put([f"w{t}", f"k{i:03d}"], table(f"s3://{t}/{i}")),
                            expected=root,
                        )
            except BaseException as e:
                errors.append(e)

        # namespaces first, then the writers race on one branch
        for t in range(threads):
            c.commit("main", put([f"w{t}"], {"type": "NAMESPACE", "elements": [f"w{t}"]}))
        workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert not errors, errors
        total = threads + threads * per_thread
        chain = main_chain(c)
        assert len(chain) == total
        check_chain(fast.wait_events(total, timeout=30), chain, root)
        check_chain(flaky.wait_events(total, timeout=60), chain, root)
        # at the flaky receiver every 5th delivery failed once, and was retried at once:
        # the next request is the same delivery, nothing overtook it
        hits = flaky.hits()
        failed = [i for i, h in enumerate(hits) if h.answered == 500]
        fifth = [h for h in hits if int(h.header("Loch-Delivery-Id") or 0) % 5 == 0]
        assert len(failed) == len(fifth) // 2 > 0
        for i in failed:
            assert hits[i + 1].answered == 200
            assert hits[i + 1].header("Loch-Delivery-Id") == hits[i].header("Loch-Delivery-Id")
            assert hits[i + 1].header("Loch-Delivery-Attempt") == "2"


def test_retries_until_delivered_with_backoff_and_a_delivery_log(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("retry", fail_first=3)
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        hashes = commit_n(c, 3)
        events = r.wait_events(3)
        assert [e["newHash"] for e in events] == hashes
        hits = r.hits()
        assert len(hits) == 12
        for i, h in enumerate(hashes):
            mine = hits[4 * i : 4 * i + 4]  # head of line: one delivery at a time
            assert [x.event["newHash"] for x in mine] == [h] * 4
            assert [x.answered for x in mine] == [500, 500, 500, 200]
            assert [x.header("Loch-Delivery-Attempt") for x in mine] == ["1", "2", "3", "4"]
            assert len({x.header("Loch-Delivery-Id") for x in mine}) == 1
            assert len({x.header("Loch-Event-Id") for x in mine}) == 1
            assert len({x.body for x in mine}) == 1
            # full-jitter backoff: at least half of base * 2^(n-1) (base 0.05 s)
            gaps = [b.at - a.at for a, b in itertools.pairwise(mine)]
            for n, gap in enumerate(gaps, start=1):
                assert gap >= 0.05 * 2 ** (n - 1) / 2 - 0.005, gaps
        wait_status(c, nid, "DELIVERED", 3)
        log = c.deliveries(nid)
        assert [d["status"] for d in log] == ["DELIVERED"] * 3
        for d in log:
            assert d["attempts"] == 4 and d["lastStatusCode"] == 200 and d["lastError"] is None
            assert d["nextAttemptAt"] is None and d["deliveredAt"] is not None
            attempts = d["attemptLog"]
            assert [a["attempt"] for a in attempts] == [1, 2, 3, 4]
            assert [a["statusCode"] for a in attempts] == [500, 500, 500, 200]
            assert [a["error"] for a in attempts] == ["HTTP 500"] * 3 + [None]
            assert all(a["durationMs"] >= 0 for a in attempts)


def test_404_fails_at_once_and_the_line_moves_on(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("missing", status=404)
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        hashes = commit_n(c, 2)
        wait_status(c, nid, "FAILED", 2)
        time.sleep(0.5)  # room for retries that must not happen
        hits = r.hits()
        assert [h.event["newHash"] for h in hits] == hashes
        assert [h.header("Loch-Delivery-Attempt") for h in hits] == ["1", "1"]
        for d in c.deliveries(nid):
            assert d["status"] == "FAILED" and d["attempts"] == 1
            assert d["lastStatusCode"] == 404 and d["lastError"] == "HTTP 404"
            assert [a["statusCode"] for a in d["attemptLog"]] == [404]


def test_give_up_keeps_the_failure_and_redeliver_resends_it(
    servers: ServerFactory, receivers: ReceiverFactory
) -> None:
    server = servers(LOCH_WEBHOOK_GIVE_UP_SECONDS="1")
    r = receivers("down-hard", fail_first=1_000_000)
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        (h1,) = commit_n(c, 1)
        started = time.monotonic()
        wait_status(c, nid, "FAILED", 1, timeout=10)
        assert time.monotonic() - started < 5
        (failed,) = c.deliveries(nid)
        assert failed["status"] == "FAILED"
        assert failed["attempts"] >= 2, failed
        assert failed["lastStatusCode"] == 500
        assert failed["lastError"].startswith("gave up after"), failed
        assert all(a["statusCode"] == 500 for a in failed["attemptLog"])
        assert len(failed["attemptLog"]) == failed["attempts"] == len(r.hits())
        assert c.deliveries(nid, status="FAILED") == [failed]

        # the line is not blocked: the receiver heals, the next event is delivered
        r.stop()
        r.behaviour = {}
        r.start()
        (h2,) = commit_n(c, 1, prefix="after")
        wait_status(c, nid, "DELIVERED", 1)
        assert [e["newHash"] for e in r.events()] == [h2]
        # the failure is kept in the log
        assert [d["status"] for d in c.deliveries(nid)] == ["DELIVERED", "FAILED"]

        # redeliver the failed one: same event, same delivery, next attempt number
        resp = c.http.post(f"/api/v2/notifications/{nid}/deliveries/{failed['id']}/redeliver")
        again = c.json(resp)
        assert again["id"] == failed["id"] and again["status"] == "PENDING"
        assert "attemptLog" not in again
        wait_status(c, nid, "DELIVERED", 2)
        events = r.events()
        assert [e["newHash"] for e in events] == [h2, h1]
        last = r.ok_hits()[-1]
        assert last.header("Loch-Delivery-Id") == str(failed["id"])
        assert last.header("Loch-Event-Id") == failed["eventId"]
        assert last.header("Loch-Delivery-Attempt") == str(failed["attempts"] + 1)
        (redone,) = [d for d in c.deliveries(nid) if d["id"] == failed["id"]]
        assert redone["status"] == "DELIVERED"
        assert redone["attempts"] == failed["attempts"] + 1
        assert redone["attemptLog"][-1]["statusCode"] == 200
        assert redone["attemptLog"][:-1] == failed["attemptLog"]

        # a delivered one can be sent again too (v1 path)
        resp = c.http.post(f"/api/v1/notifications/{nid}/deliveries/{redone['id']}/redeliver")
        c.json(resp)
        r.wait_events(3)
        assert r.events()[-1]["newHash"] == h1


def test_a_receiver_that_was_down_gets_everything_when_back(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("later")
    port = r.port
    r.stop()  # nothing listens on the port now
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        root = c.head()
        hashes = commit_n(c, 20)
        time.sleep(1.5)  # several refused attempts
        (head,) = [d for d in c.deliveries(nid) if d["status"] == "PENDING"][-1:]
        assert head["attempts"] >= 2, head
        assert head["lastStatusCode"] is None and "Connect" in head["lastError"], head
        assert all(a["statusCode"] is None for a in head["attemptLog"])
        assert {d["status"] for d in c.deliveries(nid)} == {"PENDING"}
        r.start(port)
        assert r.port == port
        check_chain(r.wait_events(20), hashes, root)
        wait_status(c, nid, "DELIVERED", 20)
        time.sleep(0.3)
        assert len(r.hits()) == 20, "refused connections are not duplicates"


def test_a_slow_receiver_delays_neither_commits_nor_other_receivers(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    slow = receivers("slow", sleep=5)  # longer than LOCH_WEBHOOK_TIMEOUT=2
    fast = receivers("fast")
    n = 20
    with client(server) as c:
        # a baseline without subscribers
        base = []
        for i in range(n):
            t = time.monotonic()
            c.commit("main", put([f"b{i}"], table(f"s3://b/{i}")))
            base.append(time.monotonic() - t)
        for _ in range(3):
            c.subscribe("commits", slow.url)
        fast_id = c.subscribe("commits", fast.url)["id"]
        latencies, acked = [], []
        for i in range(n):
            t = time.monotonic()
            h = c.commit("main", put([f"k{i}"], table(f"s3://k/{i}")))["targetBranch"]["hash"]
            latencies.append(time.monotonic() - t)
            acked.append((h, time.time()))
            time.sleep(0.05)
        events = fast.wait_events(n, timeout=10)
        assert [e["newHash"] for e in events] == [h for h, _ in acked]
        lags = [hit.at - at for hit, (_, at) in zip(fast.ok_hits(), acked, strict=True)]
        print(
            f"\ncommit latency median {statistics.median(base) * 1000:.1f} ms without, "
            f"{statistics.median(latencies) * 1000:.1f} ms with a slow receiver; "
            f"fast receiver lag max {max(lags) * 1000:.1f} ms"
        )
        assert statistics.median(latencies) < max(0.1, 3 * statistics.median(base)), latencies
        assert max(latencies) < 1.0, latencies
        assert max(lags) < 1.0, lags
        assert all(d["attempts"] == 1 for d in c.deliveries(fast_id))
        # the slow receiver got the first event (each subscription), and timed out on it
        assert {h.event["newHash"] for h in slow.hits()} == {acked[0][0]}
        assert len(slow.hits()) >= 3


def test_notifications_and_pending_deliveries_survive_a_restart(
    servers: ServerFactory, receivers: ReceiverFactory
) -> None:
    server = servers()
    r = receivers("persist")
    with client(server) as c:
        created = [c.subscribe("commits", r.url, secret="k"), c.subscribe("merges", r.url)]
        (h1,) = commit_n(c, 1)
        r.wait_events(1)
        listed = c.json(c.http.get("/api/v2/notifications"))
        log_before = c.deliveries(created[0]["id"])
    assert server.stop() == 0
    server.start()
    with client(server) as c:
        assert c.json(c.http.get("/api/v2/notifications")) == listed
        assert [n["id"] for n in listed["notifications"]] == [n["id"] for n in created]
        assert c.deliveries(created[0]["id"]) == log_before
        (h2,) = commit_n(c, 1, prefix="x")
        r.wait_events(2)
        hit = r.ok_hits()[-1]
        assert hit.event["newHash"] == h2
        assert hit.header("Loch-Signature") is not None  # the secret survived
        # receiver down: events wait in the store through a restart (SIGKILL this time)
        r.stop()
        pending = commit_n(c, 5, prefix="p")
    server.kill()
    server.start()
    r.start()
    events = r.wait_events(7)
    assert [e["newHash"] for e in events] == [h1, h2, *pending]
    with client(server) as c:
        wait_status(c, created[0]["id"], "DELIVERED", 7)


def test_fixing_the_url_of_a_retrying_notification_delivers_its_backlog(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    dead = receivers("dead")
    dead.stop()
    good = receivers("good")
    with client(server) as c:
        nid = c.subscribe("commits", dead.url)["id"]
        root = c.head()
        hashes = commit_n(c, 5)
        wait_until(
            lambda: c.deliveries(nid)[-1]["attempts"] >= 2, 10, "refused attempts", interval=0.05
        )
        resp = c.http.put(f"/api/v2/notifications/{nid}", json={"type": "WEBHOOK", "url": good.url})
        assert c.json(resp)["url"] == good.url
        check_chain(good.wait_events(5), hashes, root)
        wait_status(c, nid, "DELIVERED", 5)


def test_graceful_stop_with_a_delivery_in_flight(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    slow = receivers("slow", sleep=30)
    with client(server) as c:
        c.subscribe("commits", slow.url)
        commit_n(c, 1)
        wait_until(lambda: len(slow.hits()) == 1, 10, "the delivery to be in flight")
    started = time.monotonic()
    assert server.stop() == 0, server.log()[-2000:]
    # the dispatcher waits for attempts in flight up to LOCH_WEBHOOK_TIMEOUT (2 s)
    assert time.monotonic() - started < 8
    assert "Traceback" not in server.log(), server.log()[-3000:]


def test_events_recorded_with_dispatch_off_are_delivered_once_it_is_on(
    servers: ServerFactory, receivers: ReceiverFactory
) -> None:
    r = receivers("deferred")
    server = servers(LOCH_WEBHOOKS="off")
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        root = c.head()
        hashes = commit_n(c, 3)
        time.sleep(0.5)
        assert r.hits() == []  # nothing dispatches
    assert server.stop() == 0
    server.env["LOCH_WEBHOOKS"] = "on"
    server.start()
    check_chain(r.wait_events(3), hashes, root)
    with client(server) as c:
        wait_status(c, nid, "DELIVERED", 3)


def test_a_notification_created_through_another_server_is_served(
    servers: ServerFactory, receivers: ReceiverFactory
) -> None:
    """The dispatcher ignores commits while no notification exists; one created through
    another process on the same store is noticed by its next poll, and the commits made
    after it are delivered."""
    r = receivers("elsewhere")
    dispatching = servers()
    with client(dispatching) as c:
        commit_n(c, 2, "before")  # no notification yet: nothing to deliver
    other = servers(LOCH_WEBHOOKS="off")
    with client(other) as c:
        c.subscribe("commits", r.url)
    with client(dispatching) as c:
        root = c.head()
        hashes = commit_n(c, 3, "after")
    check_chain(r.wait_events(3), hashes, root)
    time.sleep(0.5)
    assert len(r.hits()) == 3  # nothing from before the notification
