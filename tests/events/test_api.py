"""The notifications API over HTTP: validation, Nessie error bodies, both API versions,
``Location``, describe/update/delete, duplicates by design, and signatures."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import time
from http import HTTPStatus
from typing import Any

import httpx
import pytest

from .conftest import ReceiverFactory
from .harness import KINDS, Hit, LochServer, Receiver, client, put, table

ERROR_FIELDS = {"status", "reason", "message", "errorCode", "serverStackTrace"}
NOTIFICATION_FIELDS = {"id", "type", "url", "eventType", "hasSecret", "createdAt"}
UNKNOWN_ID = "00000000-0000-4000-8000-000000000000"


def assert_error(resp: httpx.Response, status: int, code: str | None = None) -> dict[str, Any]:
    """A NessieError body with ``status`` (and ``code``)."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == ERROR_FIELDS, body
    assert body["status"] == status
    assert body["reason"] == HTTPStatus(status).phrase
    assert isinstance(body["message"], str) and body["message"]
    assert body["serverStackTrace"] is None
    if code is not None:
        assert body["errorCode"] == code, body
    return dict(body)


BAD_BODIES: list[Any] = [
    {"url": "http://example.org/h"},
    {"type": "EMAIL", "url": "http://example.org/h"},
    {"type": "webhook", "url": "http://example.org/h"},
    {"type": "WEBHOOK"},
    {"type": "WEBHOOK", "url": ""},
    {"type": "WEBHOOK", "url": 42},
    {"type": "WEBHOOK", "url": "/relative/path"},
    {"type": "WEBHOOK", "url": "example.org/h"},
    {"type": "WEBHOOK", "url": "ftp://example.org/h"},
    {"type": "WEBHOOK", "url": "file:///etc/passwd"},
    {"type": "WEBHOOK", "url": "http://"},
    {"type": "WEBHOOK", "url": "http:///path-only"},
    {"type": "WEBHOOK", "url": "http://example.org:99999/h"},
    {"type": "WEBHOOK", "url": "http://example.org/" + "x" * 3000},
    {"type": "WEBHOOK", "url": "http://example.org/h", "secret": ""},
    {"type": "WEBHOOK", "url": "http://example.org/h", "secret": 7},
    {"type": "WEBHOOK", "url": "http://example.org/h", "secret": "s" * 257},
    ["WEBHOOK", "http://example.org/h"],
    "WEBHOOK",
]


def test_validation_errors_are_400_in_nessie_format(server: LochServer) -> None:
    with client(server) as c:
        for version in (1, 2):
            for body in BAD_BODIES:
                resp = c.http.post(f"/api/v{version}/notifications/commits", json=body)
                assert_error(resp, 400, "BAD_REQUEST")
            resp = c.http.post(
                f"/api/v{version}/notifications/commits",
                content=b"{not json",
                headers={"Content-Type": "application/json"},
            )
            assert_error(resp, 400, "BAD_REQUEST")
            for kind in ("pushes", "commit", "COMMITS", "references"):
                resp = c.http.post(
                    f"/api/v{version}/notifications/{kind}",
                    json={"type": "WEBHOOK", "url": "http://example.org/h"},
                )
                err = assert_error(resp, 400, "BAD_REQUEST")
                assert kind in err["message"]
        # nothing was created by any of those
        assert c.json(c.http.get("/api/v2/notifications")) == {"notifications": []}
        # an update is validated the same way
        nid = c.subscribe("commits", "http://example.org/h")["id"]
        for body in BAD_BODIES:
            assert_error(c.http.put(f"/api/v2/notifications/{nid}", json=body), 400, "BAD_REQUEST")
        assert c.json(c.http.get(f"/api/v2/notifications/{nid}"))["url"] == "http://example.org/h"


def test_unknown_ids_are_404(server: LochServer, receivers: ReceiverFactory) -> None:
    good = {"type": "WEBHOOK", "url": "http://example.org/h"}
    r = receivers("ids")
    with client(server) as c:
        nid = c.subscribe("commits", r.url)["id"]
        other = c.subscribe("commits", r.url)["id"]
        c.commit("main", put(["t"], table("s3://t")))
        r.wait_events(2)
        (d,) = c.deliveries(nid)
        delivery = d["id"]
        for version in (1, 2):
            base = f"/api/v{version}/notifications"
            for resp in (
                c.http.get(f"{base}/{UNKNOWN_ID}"),
                c.http.put(f"{base}/{UNKNOWN_ID}", json=good),
                c.http.delete(f"{base}/{UNKNOWN_ID}"),
                c.http.get(f"{base}/{UNKNOWN_ID}/deliveries"),
                c.http.post(f"{base}/{UNKNOWN_ID}/deliveries/1/redeliver"),
                c.http.post(f"{base}/{nid}/deliveries/999999/redeliver"),
                c.http.post(f"{base}/{other}/deliveries/{delivery}/redeliver"),
                c.http.get(f"{base}/not-even-a-uuid"),
            ):
                err = assert_error(resp, 404)
                assert err["errorCode"].endswith("NOT_FOUND"), err


@pytest.mark.parametrize("version", [1, 2])
def test_create_describe_list_update_delete(
    server: LochServer, receivers: ReceiverFactory, version: int
) -> None:
    a, b = receivers("a"), receivers("b")
    other = 3 - version
    with client(server) as c:
        before = time.time()
        resp = c.http.post(
            f"/api/v{version}/notifications/commits",
            json={"type": "WEBHOOK", "url": a.url, "secret": "k1"},
        )
        created = c.json(resp, 201)
        assert set(created) == NOTIFICATION_FIELDS, created
        assert created["type"] == "WEBHOOK" and created["url"] == a.url
        assert created["eventType"] == "COMMIT" and created["hasSecret"] is True
        assert "secret" not in resp.text and "k1" not in resp.text
        nid = created["id"]
        location = resp.headers["Location"]
        assert location == f"{server.url}/api/v{version}/notifications/{nid}"
        # the Location answers, and so does the other API version
        assert c.json(httpx.get(location)) == created
        assert c.json(c.http.get(f"/api/v{other}/notifications/{nid}")) == created
        created_at = dt.datetime.fromisoformat(created["createdAt"]).timestamp()
        assert before - 1 <= created_at <= time.time() + 1, created

        kinds = {}
        for kind in KINDS:
            kinds[kind] = c.subscribe(kind, b.url, version=version)
        listed = c.json(c.http.get(f"/api/v{other}/notifications"))["notifications"]
        assert [n["id"] for n in listed] == [nid] + [n["id"] for n in kinds.values()]
        assert [n["eventType"] for n in listed[1:]] == [
            "COMMIT",
            "MERGE",
            "TRANSPLANT",
            "REFERENCE_CREATED",
            "REFERENCE_DELETED",
            "REFERENCE_ASSIGNED",
        ]
        assert all(n["hasSecret"] is False for n in listed[1:])

        # an event goes to a, signed with k1
        h1 = c.commit("main", put(["t1"], table("s3://1")))["targetBranch"]["hash"]
        hit = _wait_hit(a, h1)
        assert (
            hit.header("Loch-Signature")
            == "sha256=" + hmac.new(b"k1", hit.body.encode(), hashlib.sha256).hexdigest()
        )

        # update: new URL and secret (under the other version)
        upd = c.http.put(
            f"/api/v{other}/notifications/{nid}",
            json={"type": "WEBHOOK", "url": b.url, "secret": "k2"},
        )
        updated = c.json(upd)
        assert updated == {**created, "url": b.url}
        h2 = c.commit("main", put(["t2"], table("s3://2")))["targetBranch"]["hash"]
        hit2 = _wait_hit(b, h2, signed=True)
        assert (
            hit2.header("Loch-Signature")
            == "sha256=" + hmac.new(b"k2", hit2.body.encode(), hashlib.sha256).hexdigest()
        )
        # without a secret: no signature
        c.json(
            c.http.put(
                f"/api/v{version}/notifications/{nid}", json={"type": "WEBHOOK", "url": a.url}
            )
        )
        assert c.json(c.http.get(f"/api/v2/notifications/{nid}"))["hasSecret"] is False
        h3 = c.commit("main", put(["t3"], table("s3://3")))["targetBranch"]["hash"]
        assert _wait_hit(a, h3).header("Loch-Signature") is None

        # delete: 204, then 404, and no more deliveries
        resp = c.http.delete(f"/api/v{other}/notifications/{nid}")
        assert resp.status_code == 204 and resp.content == b""
        assert_error(c.http.get(f"/api/v{version}/notifications/{nid}"), 404)
        assert_error(c.http.delete(f"/api/v{version}/notifications/{nid}"), 404)
        h4 = c.commit("main", put(["t4"], table("s3://4")))["targetBranch"]["hash"]
        _wait_hit(b, h4)  # b's own COMMIT subscription got it...
        time.sleep(0.3)
        assert not [h for h in a.hits() if h.event.get("newHash") == h4]  # ...a did not
        assert len([h for h in b.hits() if h.event.get("newHash") == h4]) == 1


def _wait_hit(r: Receiver, new_hash: str, signed: bool = False, timeout: float = 10.0) -> Hit:
    """The first accepted request at ``r`` carrying ``new_hash`` (optionally signed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for h in r.ok_hits():
            if h.event.get("newHash") == new_hash and (
                not signed or h.header("Loch-Signature") is not None
            ):
                return h
        time.sleep(0.02)
    raise AssertionError(f"{new_hash} never reached {r.name}")


def test_two_subscriptions_to_one_url_get_two_deliveries(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("twice")
    with client(server) as c:
        pre = c.commit("main", put(["before"], table("s3://b")))["targetBranch"]["hash"]
        n1 = c.subscribe("commits", r.url, secret="one")["id"]
        n2 = c.subscribe("commits", r.url)["id"]
        assert n1 != n2
        h = c.commit("main", put(["t"], table("s3://t")))["targetBranch"]["hash"]
        hits = r.wait_events(2)
        time.sleep(0.3)
        hits_all = r.ok_hits()
        assert len(hits_all) == 2, "the commit made before subscribing is not delivered"
        assert [e["newHash"] for e in hits] == [h, h]
        assert pre not in {e["newHash"] for e in hits}
        assert hits_all[0].body == hits_all[1].body
        assert len({x.header("Loch-Event-Id") for x in hits_all}) == 1
        assert len({x.header("Loch-Delivery-Id") for x in hits_all}) == 2
        signatures = sorted(str(x.header("Loch-Signature")) for x in hits_all)
        want = "sha256=" + hmac.new(b"one", hits_all[0].body.encode(), hashlib.sha256).hexdigest()
        assert signatures == sorted([want, "None"])
        for nid in (n1, n2):
            (d,) = c.deliveries(nid)
            assert d["status"] == "DELIVERED" and d["eventType"] == "COMMIT"


def test_api_v1_and_v2_deliver_alike(server: LochServer, receivers: ReceiverFactory) -> None:
    r1, r2 = receivers("v1"), receivers("v2")
    with client(server) as c:
        c.subscribe("commits", r1.url, version=1)
        c.subscribe("commits", r2.url, version=2)
        c.subscribe("references-created", r1.url, version=1)
        c.create("dev")
        h = c.commit("dev", put(["t"], table("s3://t")))["targetBranch"]["hash"]
        e1 = r1.wait_events(2)
        e2 = r2.wait_events(1)
        assert [e["type"] for e in e1] == ["REFERENCE_CREATED", "COMMIT"]
        assert e1[1] == e2[0] and e2[0]["newHash"] == h


def test_listing_is_empty_and_delivery_log_filters(
    server: LochServer, receivers: ReceiverFactory
) -> None:
    r = receivers("log", status=404)
    with client(server) as c:
        assert c.json(c.http.get("/api/v1/notifications")) == {"notifications": []}
        nid = c.subscribe("commits", r.url)["id"]
        c.commit("main", put(["t"], table("s3://t")))
        deadline = time.monotonic() + 10
        while not c.deliveries(nid, status="FAILED") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [d["status"] for d in c.deliveries(nid, status="failed")] == ["FAILED"]
        assert c.deliveries(nid, status="DELIVERED") == []
        assert_error(
            c.http.get(f"/api/v2/notifications/{nid}/deliveries", params={"status": "LOST"}),
            400,
            "BAD_REQUEST",
        )
        assert_error(
            c.http.get(f"/api/v2/notifications/{nid}/deliveries", params={"max-records": 0}),
            400,
            "BAD_REQUEST",
        )
