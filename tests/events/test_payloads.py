"""The six event types end to end, field by field, and the events that must not fire.

A real ``loch serve`` changes references through the Nessie API while a real receiver
(subscribed to every kind) records what it is sent. Each payload is compared with what
the API itself answered: hashes and names from the responses, CommitMeta and operations
from the commit log (``fetch=ALL``), content from ``/contents`` at the new hash.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import time
from typing import Any

from .conftest import ReceiverFactory
from .harness import (
    Client,
    LochServer,
    client,
    delete,
    enc,
    namespace,
    put,
    table,
)

COMMIT_FIELDS = {"type", "eventTime", "reference", "newHash", "metadata", "operations"}
MERGE_FIELDS = {
    "type",
    "eventTime",
    "fromRefName",
    "fromHash",
    "toBranchName",
    "expectedHash",
    "newHash",
}
TRANSPLANT_FIELDS = {
    "type",
    "eventTime",
    "fromRefName",
    "fromHashes",
    "toBranchName",
    "expectedHash",
    "newHash",
}
CREATED_FIELDS = {"type", "eventTime", "reference"}
ASSIGNED_FIELDS = {"type", "eventTime", "reference", "assignedTo"}
DELETED_FIELDS = {"type", "eventTime", "referenceType", "referenceName"}
SECRET = "s3cr3t-ü"


def event_time(event: dict[str, Any], before: float, after: float) -> dt.datetime:
    """``eventTime`` parsed as ISO-8601 UTC, checked to lie within [before, after]."""
    text = event["eventTime"]
    assert isinstance(text, str) and text.endswith("Z"), text
    when = dt.datetime.fromisoformat(text)
    assert when.tzinfo is not None and when.utcoffset() == dt.timedelta(0), text
    assert before - 0.001 <= when.timestamp() <= after + 0.001, (text, before, after)
    return when


def log_entry(c: Client, commit_hash: str) -> dict[str, Any]:
    """The log entry (with operations) of ``commit_hash``."""
    resp = c.http.get(
        f"/api/v2/trees/{enc('@' + commit_hash)}/history",
        params={"fetch": "ALL", "max-records": 1},
    )
    entry = c.json(resp)["logEntries"][0]
    assert entry["commitMeta"]["hash"] == commit_hash, entry
    return dict(entry)


def contents_at(c: Client, commit_hash: str, keys: list[list[str]]) -> dict[tuple[str, ...], Any]:
    """Content of ``keys`` at a commit, by key."""
    resp = c.http.post(
        f"/api/v2/trees/{enc('@' + commit_hash)}/contents",
        json={"requestedKeys": [{"elements": k} for k in keys]},
    )
    return {tuple(x["key"]["elements"]): x["content"] for x in c.json(resp)["contents"]}


def check_commit_event(
    c: Client, event: dict[str, Any], branch: str, parent: str, new_hash: str
) -> None:
    """A COMMIT event against the log and contents of ``new_hash``."""
    assert set(event) == COMMIT_FIELDS, event
    assert "branch" not in event
    assert event["type"] == "COMMIT"
    assert event["reference"] == {"type": "BRANCH", "name": branch, "hash": parent}
    assert event["newHash"] == new_hash
    entry = log_entry(c, new_hash)
    assert event["metadata"] == entry["commitMeta"]
    assert event["metadata"]["parentCommitHashes"] == [parent]
    assert event["metadata"]["commitTime"] == event["eventTime"]
    expected_ops = entry["operations"]
    assert event["operations"] == expected_ops
    put_keys = [op["key"]["elements"] for op in event["operations"] if op["type"] == "PUT"]
    contents = contents_at(c, new_hash, put_keys)
    for op in event["operations"]:
        if op["type"] == "PUT":
            assert set(op) == {"type", "key", "content"}, op
            assert op["content"] == contents[tuple(op["key"]["elements"])], op
        else:
            assert op == {"type": "DELETE", "key": op["key"]}, op


def by_type(events: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Events grouped by ``type``, in arrival order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        out.setdefault(e["type"], []).append(e)
    return out


def test_every_event_type_with_its_exact_payload(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("all")
    t0 = time.time()
    with client(server) as c:
        subs = c.subscribe_all(r.url, secret=SECRET)
        root = c.head()

        # COMMIT: several operations, a full CommitMeta v2
        body = {
            "commitMeta": {
                "message": "create db.t\n\nwith a body: ünïcödé ✓",
                "authors": ["alice <a@example.org>", "bob"],
                "allSignedOffBy": ["carol"],
                "authorTime": "2020-01-02T03:04:05Z",
                "allProperties": {"app": ["test"], "multi": ["1", "2"]},
            },
            "operations": [
                put(["db"], namespace("db")),
                put(["db", "t"], table("s3://b/db/t/0.json")),
                put(["db", "gone"], table("s3://b/db/gone/0.json")),
                put(["db", "ünï cödé.tbl"], table("s3://b/db/ü/0.json")),
            ],
        }
        resp = c.http.post(f"/api/v2/trees/{enc('main@' + root)}/history/commit", json=body)
        c1 = c.json(resp)["targetBranch"]["hash"]
        t_id = c.json(resp)["addedContents"][1]["contentId"]
        # COMMIT: update (content id) and delete in one commit
        c2 = c.commit(
            "main",
            put(["db", "t"], table("s3://b/db/t/1.json", t_id)),
            delete(["db", "gone"]),
            message="update and delete",
        )["targetBranch"]["hash"]

        # REFERENCE_CREATED: a branch and a tag
        dev = c.create("dev")
        side = c.create("feature/side")
        tag = c.create("v1", "TAG")

        # COMMITs on dev and side; MERGE dev → main; TRANSPLANT side's two commits → main
        d1 = c.commit("dev", put(["db", "d"], table("s3://b/db/d/0.json")))["targetBranch"]["hash"]
        s1 = c.commit("feature/side", put(["db", "s1"], table("s3://s1")))["targetBranch"]["hash"]
        s2 = c.commit("feature/side", put(["db", "s2"], table("s3://s2")))["targetBranch"]["hash"]
        merge = c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + c2)}/history/merge",
                json={"fromRefName": "dev", "fromHash": d1, "message": "merge dev"},
            )
        )
        assert merge["wasApplied"] is True
        merged = merge["resultantTargetHash"]
        trans = c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + merged)}/history/transplant",
                json={"fromRefName": "feature/side", "hashesToTransplant": [s1, s2]},
            )
        )
        assert trans["wasApplied"] is True
        transplanted = trans["resultantTargetHash"]

        # a commit through API v1 fires the same COMMIT event
        v1 = c.http.post(
            "/api/v1/trees/branch/dev/commit",
            params={"expectedHash": d1},
            json={"commitMeta": {"message": "v1 commit"}, "operations": [delete(["db", "d"])]},
        )
        d2 = c.json(v1)["hash"]

        # REFERENCE_ASSIGNED: to a tag, to a branch, to a bare hash
        a1 = c.http.put(
            f"/api/v2/trees/{enc('dev@' + d2)}",
            json={"type": "TAG", "name": "v1", "hash": tag["hash"]},
        )
        assert c.json(a1)["reference"] == {"type": "BRANCH", "name": "dev", "hash": tag["hash"]}
        c.json(
            c.http.put(
                f"/api/v2/trees/{enc('v1@' + tag['hash'])}",
                json={"type": "BRANCH", "name": "main", "hash": transplanted},
            )
        )
        c.json(c.http.put(f"/api/v2/trees/{enc('dev@' + tag['hash'])}", json={"hash": c1}))

        # REFERENCE_DELETED: a tag and a branch
        c.json(c.http.delete(f"/api/v2/trees/{enc('v1@' + transplanted)}"))
        c.json(c.http.delete(f"/api/v2/trees/{enc('feature/side@' + s2)}"))
        t1 = time.time()

        commits = 6
        events = r.wait_events(commits + 3 + 1 + 1 + 3 + 2)
        time.sleep(0.3)
        assert len(r.hits()) == len(events), "no request beyond the expected events"
        got = by_type(events)
        assert sorted(got) == sorted(
            [
                "COMMIT",
                "MERGE",
                "TRANSPLANT",
                "REFERENCE_CREATED",
                "REFERENCE_ASSIGNED",
                "REFERENCE_DELETED",
            ]
        )
        for e in events:
            event_time(e, t0, t1)

        # COMMIT (in commit order: one notification, one line)
        cs = got["COMMIT"]
        assert [e["newHash"] for e in cs] == [c1, c2, d1, s1, s2, d2]
        check_commit_event(c, cs[0], "main", root, c1)
        assert cs[0]["metadata"]["authors"] == ["alice <a@example.org>", "bob"]
        assert cs[0]["metadata"]["allSignedOffBy"] == ["carol"]
        assert cs[0]["metadata"]["authorTime"] == "2020-01-02T03:04:05Z"
        assert cs[0]["metadata"]["allProperties"] == {"app": ["test"], "multi": ["1", "2"]}
        assert cs[0]["metadata"]["message"] == "create db.t\n\nwith a body: ünïcödé ✓"
        assert [op["type"] for op in cs[0]["operations"]] == ["PUT"] * 4
        assert ["db", "ünï cödé.tbl"] in [op["key"]["elements"] for op in cs[0]["operations"]]
        check_commit_event(c, cs[1], "main", c1, c2)
        ops = {tuple(op["key"]["elements"]): op for op in cs[1]["operations"]}
        assert ops[("db", "gone")] == {"type": "DELETE", "key": {"elements": ["db", "gone"]}}
        assert ops[("db", "t")]["content"]["id"] == t_id
        assert ops[("db", "t")]["content"]["metadataLocation"] == "s3://b/db/t/1.json"
        check_commit_event(c, cs[2], "dev", c2, d1)
        check_commit_event(c, cs[3], "feature/side", c2, s1)
        check_commit_event(c, cs[4], "feature/side", s1, s2)
        assert cs[5]["newHash"] == d2 and cs[5]["reference"]["hash"] == d1
        assert cs[5]["operations"] == [{"type": "DELETE", "key": {"elements": ["db", "d"]}}]
        assert cs[5]["metadata"]["message"] == "v1 commit"

        # MERGE
        (m,) = got["MERGE"]
        assert set(m) == MERGE_FIELDS, m
        assert m["fromRefName"] == "dev"
        assert m["fromHash"] == d1
        assert m["toBranchName"] == "main"
        assert m["expectedHash"] == merge["expectedHash"] == c2
        assert m["newHash"] == merged
        assert log_entry(c, merged)["commitMeta"]["parentCommitHashes"] == [c2, d1]

        # TRANSPLANT
        (tr,) = got["TRANSPLANT"]
        assert set(tr) == TRANSPLANT_FIELDS, tr
        assert tr["fromRefName"] == "feature/side"
        assert tr["fromHashes"] == [s1, s2]
        assert tr["toBranchName"] == "main"
        assert tr["expectedHash"] == merged
        assert tr["newHash"] == transplanted

        # REFERENCE_CREATED
        created = got["REFERENCE_CREATED"]
        for e in created:
            assert set(e) == CREATED_FIELDS, e
        assert [e["reference"] for e in created] == [dev, side, tag]
        assert tag == {"type": "TAG", "name": "v1", "hash": c2}

        # REFERENCE_ASSIGNED: reference as it was, assignedTo as given
        assigned = got["REFERENCE_ASSIGNED"]
        for e in assigned:
            assert set(e) == ASSIGNED_FIELDS, e
        assert assigned[0]["reference"] == {"type": "BRANCH", "name": "dev", "hash": d2}
        assert assigned[0]["assignedTo"] == {"type": "TAG", "name": "v1", "hash": c2}
        assert assigned[1]["reference"] == {"type": "TAG", "name": "v1", "hash": c2}
        assert assigned[1]["assignedTo"] == {"type": "BRANCH", "name": "main", "hash": transplanted}
        assert assigned[2]["reference"] == {"type": "BRANCH", "name": "dev", "hash": c2}
        assert assigned[2]["assignedTo"] == {"type": "DETACHED", "hash": c1}

        # REFERENCE_DELETED
        deleted = got["REFERENCE_DELETED"]
        for e in deleted:
            assert set(e) == DELETED_FIELDS, e
        assert [(e["referenceType"], e["referenceName"]) for e in deleted] == [
            ("TAG", "v1"),
            ("BRANCH", "feature/side"),
        ]

        # the headers and signature of every request
        event_ids = set()
        for hit in r.ok_hits():
            body_bytes = hit.body.encode("utf-8")
            assert hit.method == "POST" and hit.path == "/hook/all"
            assert hit.header("Content-Type") == "application/json"
            assert hit.header("Loch-Event-Type") == hit.event["type"]
            assert hit.header("Loch-Delivery-Attempt") == "1"
            want = hmac.new(SECRET.encode(), body_bytes, hashlib.sha256).hexdigest()
            assert hit.header("Loch-Signature") == f"sha256={want}"
            event_ids.add(hit.header("Loch-Event-Id"))
        assert len(event_ids) == len(events)

        # the delivery logs agree: one DELIVERED delivery per event, per notification
        for kind, nid in subs.items():
            log = c.deliveries(nid)
            assert all(d["status"] == "DELIVERED" and d["attempts"] == 1 for d in log), log
            per_kind = {
                "commits": "COMMIT",
                "merges": "MERGE",
                "transplants": "TRANSPLANT",
                "references-created": "REFERENCE_CREATED",
                "references-assigned": "REFERENCE_ASSIGNED",
                "references-deleted": "REFERENCE_DELETED",
            }[kind]
            assert len(log) == len(got[per_kind]), (kind, log)
            assert {d["eventType"] for d in log} == {per_kind}


def test_events_fire_only_for_operations_that_took_effect(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("effects")
    with client(server) as c:
        c.subscribe_all(r.url)
        root = c.head()
        h1 = c.commit("main", put(["t"], table("s3://t/0")))["targetBranch"]["hash"]
        t_id = c.json(c.http.get("/api/v2/trees/main/contents/t"))["content"]["id"]
        c.create("same")  # at main's HEAD: nothing to merge
        c.create("dev")
        d1 = c.commit("dev", put(["u"], table("s3://u/0")))["targetBranch"]["hash"]
        baseline = r.wait_events(4)  # 2 COMMITs, 2 REFERENCE_CREATED

        # a merge that applies nothing
        noop = c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + h1)}/history/merge",
                json={"fromRefName": "same", "fromHash": h1},
            )
        )
        assert noop["wasApplied"] is False and noop["resultantTargetHash"] == h1
        # dry-run merge and transplant
        dry = c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + h1)}/history/merge",
                json={"fromRefName": "dev", "fromHash": d1, "dryRun": True},
            )
        )
        assert dry["wasApplied"] is False
        dry = c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + h1)}/history/transplant",
                json={"fromRefName": "dev", "hashesToTransplant": [d1], "dryRun": True},
            )
        )
        assert dry["wasApplied"] is False
        # failed commits: conflict (409) and bad operation (400)
        stale = c.commit_resp("main", root, put(["t"], table("s3://t/other")))
        assert stale.status_code == 409, stale.text
        bad = c.commit_resp("main", h1, put(["t"], table("s3://t/1", "not-the-id")))
        assert bad.status_code == 400, bad.text
        missing = c.commit_resp("nope", h1, put(["x"], table("s3://x")))
        assert missing.status_code == 404, missing.text
        # conflicting merge (both changed t)
        c.create("other", source="main")
        c.commit("other", put(["t"], table("s3://t/other", t_id)))
        c.commit("main", put(["t"], table("s3://t/main", t_id)))
        conflict = c.http.post(
            f"/api/v2/trees/{enc('main@' + c.head())}/history/merge",
            json={"fromRefName": "other", "fromHash": c.head("other")},
        )
        assert conflict.status_code == 409, conflict.text
        # failed reference changes
        exists = c.http.post(
            "/api/v2/trees",
            params={"name": "dev", "type": "BRANCH"},
            json={"type": "BRANCH", "name": "main", "hash": h1},
        )
        assert exists.status_code == 409, exists.text
        wrong = c.http.put(f"/api/v2/trees/{enc('dev@' + root)}", json={"hash": h1})
        assert wrong.status_code == 409, wrong.text
        wrong = c.http.delete(f"/api/v2/trees/{enc('dev@' + root)}")
        assert wrong.status_code == 409, wrong.text
        gone = c.http.delete(f"/api/v2/trees/{enc('ghost@' + root)}")
        assert gone.status_code == 404, gone.text
        main_del = c.http.delete(f"/api/v2/trees/{enc('main@' + c.head())}")
        assert main_del.status_code == 400, main_del.text

        # sentinels of each kind: per-notification order means anything fired above
        # would arrive before them
        head = c.head()
        last = c.commit("main", put(["z"], table("s3://z/0")), message="sentinel")
        last_hash = last["targetBranch"]["hash"]
        c.json(
            c.http.post(
                f"/api/v2/trees/{enc('main@' + last_hash)}/history/merge",
                json={"fromRefName": "dev", "fromHash": d1},
            )
        )
        c.json(
            c.http.post(
                f"/api/v2/trees/{enc('dev@' + d1)}/history/transplant",
                json={"fromRefName": "main", "hashesToTransplant": [last_hash]},
            )
        )
        c.create("sentinel")
        c.json(
            c.http.put(f"/api/v2/trees/{enc('sentinel@' + c.head('sentinel'))}", json={"hash": h1})
        )
        c.json(c.http.delete(f"/api/v2/trees/{enc('sentinel@' + h1)}"))

        # 2 + 2 commits on other/main + sentinel, 1 created (other) + sentinel, 1 each else
        events = r.wait_events(len(baseline) + 3 + 1 + 1 + 1 + 1 + 1 + 1)
        time.sleep(0.5)
        got = by_type(r.events())
        assert len(r.hits()) == len(events)
        assert [e["newHash"] for e in got["COMMIT"]][2:] == [
            c.log("other")[0]["commitMeta"]["hash"],
            head,
            last_hash,
        ]
        assert len(got["MERGE"]) == 1 and got["MERGE"][0]["fromHash"] == d1
        assert len(got["TRANSPLANT"]) == 1
        assert got["TRANSPLANT"][0]["fromHashes"] == [last_hash]
        assert [e["reference"]["name"] for e in got["REFERENCE_CREATED"]] == [
            "same",
            "dev",
            "other",
            "sentinel",
        ]
        (assigned,) = got["REFERENCE_ASSIGNED"]
        assert assigned["reference"]["name"] == "sentinel"
        (deleted,) = got["REFERENCE_DELETED"]
        assert deleted["referenceName"] == "sentinel"


def test_api_v1_operations_fire_the_same_events(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("v1ops")
    with client(server) as c:
        c.subscribe_all(r.url)
        v1 = "/api/v1/trees"
        root = c.head()
        created = c.json(
            c.http.post(
                f"{v1}/tree",
                params={"sourceRefName": "main"},
                json={"type": "BRANCH", "name": "dev", "hash": root},
            )
        )
        assert created == {"type": "BRANCH", "name": "dev", "hash": root}
        d1 = c.json(
            c.http.post(
                f"{v1}/branch/dev/commit",
                params={"expectedHash": root},
                json={
                    "commitMeta": {"message": "one"},
                    "operations": [put(["a"], table("s3://a"))],
                },
            )
        )["hash"]
        d2 = c.json(
            c.http.post(
                f"{v1}/branch/dev/commit",
                params={"expectedHash": d1},
                json={
                    "commitMeta": {"message": "two"},
                    "operations": [put(["b"], table("s3://b"))],
                },
            )
        )["hash"]
        merge = c.json(
            c.http.post(
                f"{v1}/branch/main/merge",
                params={"expectedHash": root},
                json={"fromRefName": "dev", "fromHash": d1},
            )
        )
        merged = merge["resultantTargetHash"]
        trans = c.json(
            c.http.post(
                f"{v1}/branch/main/transplant",
                params={"expectedHash": merged},
                json={"fromRefName": "dev", "hashesToTransplant": [d2]},
            )
        )
        transplanted = trans["resultantTargetHash"]
        resp = c.http.put(
            f"{v1}/branch/dev",
            params={"expectedHash": d2},
            json={"type": "BRANCH", "name": "main", "hash": transplanted},
        )
        assert resp.status_code == 204, resp.text
        resp = c.http.delete(f"{v1}/branch/dev", params={"expectedHash": transplanted})
        assert resp.status_code == 204, resp.text

        got = by_type(r.wait_events(7))
        assert [e["reference"] for e in got["REFERENCE_CREATED"]] == [created]
        assert [(e["reference"]["name"], e["newHash"]) for e in got["COMMIT"]] == [
            ("dev", d1),
            ("dev", d2),
        ]
        check_commit_event(c, got["COMMIT"][1], "dev", d1, d2)
        (m,) = got["MERGE"]
        assert (m["fromRefName"], m["fromHash"], m["toBranchName"]) == ("dev", d1, "main")
        assert (m["expectedHash"], m["newHash"]) == (root, merged)
        (t,) = got["TRANSPLANT"]
        assert (t["fromRefName"], t["fromHashes"], t["toBranchName"]) == ("dev", [d2], "main")
        assert (t["expectedHash"], t["newHash"]) == (merged, transplanted)
        (a,) = got["REFERENCE_ASSIGNED"]
        assert a["reference"] == {"type": "BRANCH", "name": "dev", "hash": d2}
        assert a["assignedTo"] == {"type": "BRANCH", "name": "main", "hash": transplanted}
        (d,) = got["REFERENCE_DELETED"]
        assert (d["referenceType"], d["referenceName"]) == ("BRANCH", "dev")


def test_reference_assigned_only_names_a_reference_that_exists_at_that_hash(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    """``assignedTo`` must describe a real reference. Nessie resolves the target's name
    and hash (``resolveHashOnRef``): an unknown name, or a hash not on the named
    reference, is a 404 and nothing is assigned (so no event).

    BUG: Loch ignores the target's name and type, assigns, and the REFERENCE_ASSIGNED
    event names a reference that does not exist (or is not at that hash).
    """
    r = receivers("assign")
    with client(server) as c:
        c.subscribe("references-assigned", r.url)
        h1 = c.commit("main", put(["a"], table("s3://a")))["targetBranch"]["hash"]
        c.create("dev")
        side = c.create("side")
        h2 = c.commit("side", put(["b"], table("s3://b")))["targetBranch"]["hash"]
        problems = []
        for target in (
            {"type": "TAG", "name": "no-such-tag", "hash": h2},  # no such reference
            {"type": "BRANCH", "name": "main", "hash": h2},  # h2 is not on main
        ):
            resp = c.http.put(f"/api/v2/trees/{enc('dev@' + c.head('dev'))}", json=target)
            if resp.status_code != 404:
                problems.append((target, resp.status_code, resp.text))
        # a real target, as the sentinel
        c.json(c.http.put(f"/api/v2/trees/{enc('dev@' + c.head('dev'))}", json=side))
        events = r.wait_events(1 + len(problems))
        time.sleep(0.3)
        assert problems == [], (problems, [e["assignedTo"] for e in r.events()])
        assert [e["assignedTo"] for e in events] == [side]
        assert h1 == side["hash"]
