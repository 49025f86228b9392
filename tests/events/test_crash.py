"""Crash safety of webhook delivery: ``loch serve`` is SIGKILLed again and again while a
client commits and deliveries are in flight, and restarted on the same SQLite file.

A client thread commits continuously (disjoint keys, so every commit lands on HEAD) and
records every commit the server acknowledged; commits whose answer was lost to the kill
may or may not have happened. After the last restart:

* every acknowledged commit's COMMIT event is delivered at least once;
* every delivered event is for a commit in the branch history (no phantom events), and
  in fact every commit in the history is delivered (the event is written with the
  reference change, in one transaction);
* first deliveries arrive in commit order (re-sends of a delivery cut short by the kill
  may repeat it, but nothing overtakes);
* the number of duplicate deliveries is printed.
"""

from __future__ import annotations

import random
import sys
import threading
import time

import httpx
import pytest

from .conftest import ReceiverFactory, ServerFactory
from .harness import enc, meta, put, table, wait_until

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs SIGKILL")

CYCLES = 6
RUN_SECONDS = (0.3, 1.0)


class Writer(threading.Thread):
    """Commits to ``main`` until stopped, following the server across restarts."""

    def __init__(self, url: list[str], root: str) -> None:
        super().__init__(name="crash-writer", daemon=True)
        self.url = url  # [current base URL], swapped by the test on restart
        self.root = root
        self.acked: list[str] = []
        self.lost = 0
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        i = 0
        http = httpx.Client(base_url=self.url[0], timeout=5.0)
        try:
            while not self.stopping.is_set():
                i += 1
                body = {
                    "commitMeta": meta(f"crash {i}"),
                    "operations": [put([f"k{i:06d}"], table(f"s3://crash/{i}"))],
                }
                if str(http.base_url).rstrip("/") != self.url[0]:
                    http.close()
                    http = httpx.Client(base_url=self.url[0], timeout=5.0)
                try:
                    resp = http.post(
                        f"/api/v2/trees/{enc('main@' + self.root)}/history/commit", json=body
                    )
                except httpx.TransportError:
                    self.lost += 1  # killed mid-request, or down: outcome unknown
                    time.sleep(0.02)
                    continue
                assert resp.status_code == 200, resp.text
                self.acked.append(resp.json()["targetBranch"]["hash"])
                time.sleep(0.002)
        except BaseException as e:
            self.error = e
        finally:
            http.close()


def test_sigkill_during_commits_and_deliveries(
    servers: ServerFactory, receivers: ReceiverFactory
) -> None:
    # timeout 1 s: a lease left by a killed dispatcher runs out after 2 * 1 + 5 s
    server = servers(LOCH_WEBHOOK_TIMEOUT="1")
    r = receivers("crash", sleep=0.003)
    with httpx.Client(base_url=server.url, timeout=10) as http:
        resp = http.post("/api/v2/notifications/commits", json={"type": "WEBHOOK", "url": r.url})
        assert resp.status_code == 201, resp.text
        nid = resp.json()["id"]
        root = http.get("/api/v2/trees/main").json()["reference"]["hash"]

    url = [server.url]
    writer = Writer(url, root)
    writer.start()
    rng = random.Random(20240531)
    acked_at_kill = []
    try:
        for _ in range(CYCLES):
            time.sleep(rng.uniform(*RUN_SECONDS))
            assert writer.error is None, writer.error
            server.kill()
            acked_at_kill.append(len(writer.acked))
            server.start()
            url[0] = server.url
        time.sleep(0.5)
    finally:
        writer.stopping.set()
        writer.join(10)
    assert writer.error is None, writer.error
    acked = list(writer.acked)
    assert len(acked) > 100, acked_at_kill
    assert acked_at_kill == sorted(acked_at_kill) and len(set(acked_at_kill)) == CYCLES

    with httpx.Client(base_url=server.url, timeout=10) as http:
        entries = []
        token = None
        while True:
            params = {"max-records": 1000, **({"page-token": token} if token else {})}
            page = http.get("/api/v2/trees/main/history", params=params).json()
            entries += page["logEntries"]
            token = page.get("token")
            if not page.get("hasMore"):
                break
        chain = [e["commitMeta"]["hash"] for e in reversed(entries)]
        assert chain[0] != root and entries[-1]["commitMeta"]["parentCommitHashes"] == [root]
        in_chain = set(chain)
        assert set(acked) <= in_chain, "an acknowledged commit is missing from the branch"

        # wait until every commit of the branch was delivered
        def delivered() -> set[str]:
            return {e["newHash"] for e in r.events()}

        wait_until(
            lambda: delivered() >= in_chain,
            40,
            f"all {len(chain)} COMMIT events (have {len(delivered() & in_chain)})",
            interval=0.1,
        )
        time.sleep(0.5)
        log = http.get(f"/api/v2/notifications/{nid}/deliveries", params={"max-records": 1000})
        statuses = [d["status"] for d in log.json()["deliveries"]]

    hits = r.ok_hits()
    received = [h.event["newHash"] for h in hits]
    phantom = [h for h in received if h not in in_chain]
    assert not phantom, f"events for commits that did not happen: {phantom}"
    assert set(acked) <= set(received)
    assert set(received) == in_chain, "every commit on the branch has its event"
    first_seen = list(dict.fromkeys(received))
    assert first_seen == chain, "first deliveries are in commit order"
    duplicates = len(received) - len(set(received))
    dup_events = {h for h in received if received.count(h) > 1}
    retried = sum(1 for h in hits if h.header("Loch-Delivery-Attempt") != "1")
    print(
        f"\ncrash test: {CYCLES} SIGKILLs, {len(acked)} acknowledged commits, "
        f"{len(chain) - len(acked)} committed but unacknowledged, {writer.lost} requests lost, "
        f"{len(received)} deliveries of {len(chain)} events: {duplicates} duplicates "
        f"({len(dup_events)} events delivered more than once, {retried} with attempt > 1)"
    )
    assert len(statuses) == min(len(chain), 1000)
    assert set(statuses) == {"DELIVERED"}, statuses
