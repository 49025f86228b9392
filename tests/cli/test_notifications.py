"""Webhook notifications: the client's methods and ``loch notifications``, against a real
``loch serve`` delivering to a real HTTP receiver (:class:`~.conftest.Receiver`).

Notifications receive the events of every reference, so each test removes the ones it
made (:func:`hooks`) before the next test commits anything.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import pytest

from loch.client import (
    NOTIFICATION_KINDS,
    Delivery,
    LochClient,
    Notification,
    http_status,
)
from loch.errors import BadRequestError, NotificationNotFoundError

from .conftest import Loch, Receiver, fresh_name, put_table, wait_until

DEAD_URL = "http://127.0.0.1:9/hook"  # nothing listens there


@pytest.fixture
def hooks(client: LochClient) -> Iterator[list[str]]:
    """Ids of the notifications a test made; deleted after it."""
    made: list[str] = []
    yield made
    for notification_id in made:
        with contextlib.suppress(NotificationNotFoundError):
            client.delete_notification(notification_id)


def _add(loch: Loch, hooks: list[str], *args: str, input: str | None = None) -> dict[str, Any]:
    added: dict[str, Any] = loch.json("notifications", "add", *args, input=input)
    hooks.append(added["id"])
    return added


def _commit(client: LochClient, message: str = "hooked") -> tuple[str, str]:
    """One commit on a new branch; returns the branch and the commit's hash."""
    name = fresh_name("wh")
    client.create_branch(name, from_ref="main")
    return name, put_table(client, name, ("wh_t",), f"s3://{name}", message=message)


def _delivery(loch: Loch, notification_id: str, status: str, attempts: int = 1) -> Any:
    """Wait until the newest delivery of a notification has ``status`` and ``attempts``."""

    def probe() -> Any:
        found = loch.json("notifications", "deliveries", notification_id)
        if found and found[0]["status"] == status and found[0]["attempts"] >= attempts:
            return found[0]
        return None

    return wait_until(probe, f"a {status} delivery of {notification_id}")


def test_kinds_are_the_servers() -> None:
    from loch.events import KIND_TO_TYPE

    assert tuple(KIND_TO_TYPE) == NOTIFICATION_KINDS


# -- client ----------------------------------------------------------------------------------


def test_client_notification_lifecycle(
    client: LochClient, receiver: Receiver, hooks: list[str]
) -> None:
    n = client.add_notification("commits", receiver.url("/c"), secret="s")
    hooks.append(n.id)
    assert (n.type, n.url, n.event_type, n.has_secret) == (
        "WEBHOOK",
        receiver.url("/c"),
        "COMMIT",
        True,
    )
    assert client.get_notification(n.id) == n
    assert n in client.notifications()
    moved = client.update_notification(n.id, receiver.url("/moved"))
    assert (moved.id, moved.url, moved.event_type, moved.has_secret) == (
        n.id,
        receiver.url("/moved"),
        "COMMIT",
        False,
    )
    _, head = _commit(client)
    posted = wait_until(lambda: receiver.posts("/moved") or None, "the delivery")
    assert posted[0].json()["newHash"] == head
    delivered: list[Delivery] = wait_until(
        lambda: client.deliveries(n.id, status="DELIVERED") or None, "DELIVERED"
    )
    [d] = delivered
    assert (d.event_type, d.status, d.attempts, d.last_status_code) == (
        "COMMIT",
        "DELIVERED",
        1,
        204,
    )
    assert d.attempt_log is not None and [a.status_code for a in d.attempt_log] == [204]
    assert client.deliveries(n.id, status="FAILED") == []
    again = client.redeliver(n.id, d.id)
    assert (again.id, again.event_id, again.status, again.attempt_log) == (
        d.id,
        d.event_id,
        "PENDING",
        None,
    )
    client.delete_notification(n.id)
    with pytest.raises(NotificationNotFoundError) as gone:
        client.get_notification(n.id)
    assert http_status(gone.value) == 404
    with pytest.raises(NotificationNotFoundError):
        client.delete_notification(n.id)
    assert all(other.id != n.id for other in client.notifications())


def test_client_notification_errors(client: LochClient, hooks: list[str]) -> None:
    with pytest.raises(BadRequestError, match="Unknown notification kind 'tags'"):
        client.add_notification("tags", DEAD_URL)
    with pytest.raises(BadRequestError, match="must be an absolute http"):
        client.add_notification("commits", "ftp://example.com/")
    with pytest.raises(BadRequestError, match="Unknown notification kind"):
        client.add_notification("../trees", DEAD_URL)  # quoted: no other endpoint is hit
    n = client.add_notification("merges", DEAD_URL)
    hooks.append(n.id)
    with pytest.raises(BadRequestError, match="PENDING, DELIVERED or FAILED"):
        client.deliveries(n.id, status="LOST")
    with pytest.raises(BadRequestError):
        client.deliveries(n.id, limit=0)
    with pytest.raises(NotificationNotFoundError, match="Delivery 424242"):
        client.redeliver(n.id, 424242)
    with pytest.raises(NotificationNotFoundError):
        client.deliveries("no-such-notification")


def test_notification_json_round_trips() -> None:
    obj = {
        "id": "x",
        "type": "WEBHOOK",
        "url": DEAD_URL,
        "eventType": "MERGE",
        "hasSecret": False,
        "createdAt": "2024-01-01T00:00:00Z",
    }
    assert Notification.from_json(obj).to_json() == obj


# -- loch notifications add / list / show / update / rm ---------------------------------------


def test_add_list_show(loch: Loch, hooks: list[str]) -> None:
    run = loch.ok("notifications", "add", "commits", DEAD_URL, "--secret", "s3cr3t")
    (first,) = run.stdout.splitlines()
    assert first.startswith("Added notification ")
    notification_id = first.split()[2].rstrip(":")
    hooks.append(notification_id)
    assert first == (f"Added notification {notification_id}: COMMIT events to {DEAD_URL} (signed)")
    merges = _add(loch, hooks, "MERGES", DEAD_URL)  # kinds are case-insensitive
    assert (merges["eventType"], merges["hasSecret"], merges["type"]) == ("MERGE", False, "WEBHOOK")
    assert set(merges) == {"id", "type", "url", "eventType", "hasSecret", "createdAt"}

    rows = {
        line.split()[0]: line.split()[1:] for line in loch.ok("notifications").stdout.splitlines()
    }
    assert rows[notification_id][:3] == ["COMMIT", DEAD_URL, "yes"]
    assert rows[merges["id"]][:3] == ["MERGE", DEAD_URL, "no"]
    listed = loch.json("notifications", "list")
    assert merges in listed
    assert loch.ok("notifications", "list", "--json").json() == listed

    shown = loch.ok("notifications", "show", notification_id).stdout.splitlines()
    fields = dict(line.split(None, 1) for line in shown)
    assert fields["id"] == notification_id
    assert fields["events"] == "COMMIT"
    assert fields["url"] == DEAD_URL
    assert fields["signed"] == "yes"
    assert loch.json("notifications", "show", merges["id"]) == merges


def test_update(loch: Loch, hooks: list[str]) -> None:
    added = _add(loch, hooks, "references-created", DEAD_URL, "--secret", "one")
    other = "http://127.0.0.1:9/other"
    run = loch("notifications", "update", added["id"], other, "--secret", "two")
    assert run.code == 0 and run.stderr == ""
    assert run.stdout == (
        f"Updated notification {added['id']}: REFERENCE_CREATED events to {other} (signed)\n"
    )
    unsigned = loch("--json", "notifications", "update", added["id"], DEAD_URL)
    assert unsigned.code == 0
    assert unsigned.json() == {**added, "hasSecret": False}
    assert unsigned.stderr == (
        f"Deliveries of {added['id']} are no longer signed (give --secret to keep signing them).\n"
    )


def test_rm(loch: Loch, hooks: list[str]) -> None:
    a = _add(loch, hooks, "commits", DEAD_URL)
    b = _add(loch, hooks, "transplants", DEAD_URL)
    run = loch.ok("notifications", "rm", a["id"])
    assert (
        run.stdout == f"Deleted notification {a['id']} (COMMIT events to {DEAD_URL} (unsigned))\n"
    )
    assert loch.json("notifications", "rm", b["id"]) == [b]
    ids = {n["id"] for n in loch.json("notifications")}
    assert not {a["id"], b["id"]} & ids
    gone = loch.process("notifications", "show", a["id"])
    assert (gone.code, gone.stdout) == (1, "")
    assert gone.stderr == f"loch: error: Notification '{a['id']}' not found\n"
    again = loch("--json", "notifications", "rm", a["id"])
    assert again.code == 1
    assert again.json()["error"] == {
        "errorCode": "NOTIFICATION_NOT_FOUND",
        "message": f"Notification '{a['id']}' not found",
        "exitCode": 1,
        "httpStatus": 404,
    }


def test_usage_errors_exit_2(loch: Loch, hooks: list[str]) -> None:
    n = _add(loch, hooks, "commits", DEAD_URL)["id"]
    for args in [
        ("add", "tags", DEAD_URL),
        ("add", "commits", "ftp://example.com/hook"),
        ("add", "commits", "example.com/hook"),
        ("add", "commits"),
        ("update", n, "mailto:someone@example.com"),
        ("deliveries", n, "--status", "LOST"),
        ("deliveries", n, "-n", "0"),
        ("deliveries", n, "-n", "1001"),
        ("redeliver", n, "first"),
        ("redeliver", n),
        ("show",),
    ]:
        run = loch("notifications", *args)
        assert run.code == 2, args
        assert "Traceback" not in run.stderr
    empty = loch("notifications", "add", "commits", DEAD_URL, "--secret", "-", input="")
    assert empty.code == 2
    assert "no secret on standard input" in empty.stderr


def test_server_refusals_exit_1(loch: Loch, hooks: list[str]) -> None:
    n = _add(loch, hooks, "commits", DEAD_URL)["id"]
    bad_port = loch.process("notifications", "add", "commits", "http://127.0.0.1:99999/hook")
    assert bad_port.code == 1
    assert bad_port.stderr == (
        "loch: error: Notification url 'http://127.0.0.1:99999/hook' has an invalid port\n"
    )
    long_secret = loch("notifications", "add", "commits", DEAD_URL, "--secret", "s" * 257)
    assert long_secret.code == 1
    assert "secret must be a string of 1 to 256" in long_secret.stderr
    missing = loch.process("notifications", "deliveries", "no-such-notification")
    assert (missing.code, missing.stderr) == (
        1,
        "loch: error: Notification 'no-such-notification' not found\n",
    )
    no_delivery = loch("notifications", "redeliver", n, "424242")
    assert no_delivery.code == 1
    assert f"Delivery 424242 of notification '{n}' not found" in no_delivery.stderr
    assert loch("notifications", "update", "no-such-notification", DEAD_URL).code == 1


def test_unreachable_server_exits_3(loch: Loch) -> None:
    run = loch.process("--uri", "http://127.0.0.1:9/api/v2", "notifications")
    assert run.code == 3
    assert run.stderr.startswith("loch: error: Cannot reach http://127.0.0.1:9/api/v2")


def test_completion_of_ids(loch: Loch, hooks: list[str]) -> None:
    n = _add(loch, hooks, "commits", DEAD_URL)["id"]
    words = loch.process(
        env={
            "_LOCH_COMPLETE": "bash_complete",
            "COMP_WORDS": f"loch notifications show {n[:6]}",
            "COMP_CWORD": "3",
        }
    )
    assert f"plain,{n}" in words.stdout.splitlines()


# -- deliveries ------------------------------------------------------------------------------


def test_delivered_signed_event(
    loch: Loch, client: LochClient, receiver: Receiver, hooks: list[str]
) -> None:
    n = _add(loch, hooks, "commits", receiver.url("/ok"), "--secret", "-", input="s3cr3t\n")
    assert n["hasSecret"] is True
    assert loch("notifications", "deliveries", n["id"]).stdout == ""  # nothing yet
    branch, head = _commit(client, message="signed commit")

    [post] = wait_until(lambda: receiver.posts("/ok") or None, "the webhook POST")
    event = post.json()
    assert (event["type"], event["newHash"]) == ("COMMIT", head)
    assert event["reference"]["name"] == branch
    assert event["metadata"]["message"] == "signed commit"
    expected = hmac.new(b"s3cr3t", post.body, hashlib.sha256).hexdigest()
    assert post.headers["loch-signature"] == f"sha256={expected}"
    assert post.headers["content-type"] == "application/json"
    assert (post.headers["loch-event-type"], post.headers["loch-delivery-attempt"]) == (
        "COMMIT",
        "1",
    )

    d = _delivery(loch, n["id"], "DELIVERED")
    assert d["eventId"] == post.headers["loch-event-id"]
    assert str(d["id"]) == post.headers["loch-delivery-id"]
    assert (d["eventType"], d["attempts"], d["lastStatusCode"], d["lastError"]) == (
        "COMMIT",
        1,
        204,
        None,
    )
    assert d["deliveredAt"] is not None and d["nextAttemptAt"] is None
    assert [(a["attempt"], a["statusCode"], a["error"]) for a in d["attemptLog"]] == [
        (1, 204, None)
    ]

    [line] = loch.ok("notifications", "deliveries", n["id"]).stdout.splitlines()
    assert line.split() == [str(d["id"]), "COMMIT", "DELIVERED", "1", "204", d["deliveredAt"], "-"]
    assert loch.ok("notifications", "deliveries", n["id"], "--status", "failed").stdout == ""
    assert len(loch.json("notifications", "deliveries", n["id"], "--status", "DELIVERED")) == 1
    assert loch.json("notifications", "deliveries", n["id"], "-n", "1") == [d]


def test_failed_delivery_and_redeliver(
    loch: Loch, client: LochClient, receiver: Receiver, hooks: list[str]
) -> None:
    receiver.answer("/fail", 400)  # not retried: fails at once
    n = _add(loch, hooks, "commits", receiver.url("/fail"))["id"]
    _commit(client)
    d = _delivery(loch, n, "FAILED")
    assert (d["attempts"], d["lastStatusCode"], d["lastError"]) == (1, 400, "HTTP 400")
    assert d["deliveredAt"] is None
    [line] = loch.ok("notifications", "deliveries", n, "--status", "FAILED").stdout.splitlines()
    assert line.split() == [
        str(d["id"]), "COMMIT", "FAILED", "1", "400", d["lastAttemptAt"], "-", "HTTP", "400",
    ]  # fmt: skip
    assert loch.ok("notifications", "deliveries", n, "--status", "DELIVERED").stdout == ""

    receiver.answer("/fail", 204)
    run = loch.ok("notifications", "redeliver", n, str(d["id"]))
    assert run.stdout == (
        f"Queued delivery {d['id']} of {n} again: COMMIT event {d['eventId']}, now PENDING\n"
    )
    again = _delivery(loch, n, "DELIVERED", attempts=2)
    assert (again["id"], again["attempts"], again["lastStatusCode"]) == (d["id"], 2, 204)
    assert [(a["attempt"], a["statusCode"]) for a in again["attemptLog"]] == [(1, 400), (2, 204)]
    posts = receiver.posts("/fail")
    assert [p.headers["loch-event-id"] for p in posts] == [d["eventId"]] * 2
    assert [p.headers["loch-delivery-attempt"] for p in posts] == ["1", "2"]
    assert posts[0].body == posts[1].body

    as_json = loch.json("notifications", "redeliver", n, str(d["id"]))
    assert (as_json["id"], as_json["status"], as_json["eventId"]) == (
        d["id"],
        "PENDING",
        d["eventId"],
    )
    assert "attemptLog" not in as_json


def test_retries_and_attempts(
    loch: Loch, client: LochClient, receiver: Receiver, hooks: list[str]
) -> None:
    receiver.answer("/flaky", 503, 204)
    receiver.answer("/down", 503)
    flaky = _add(loch, hooks, "commits", receiver.url("/flaky"))["id"]
    down = _add(loch, hooks, "commits", receiver.url("/down"))["id"]
    _commit(client)

    d = _delivery(loch, flaky, "DELIVERED", attempts=2)
    assert [(a["attempt"], a["statusCode"], a["error"]) for a in d["attemptLog"]] == [
        (1, 503, "HTTP 503"),
        (2, 204, None),
    ]
    lines = [
        line.split()
        for line in loch.ok("notifications", "deliveries", flaky, "-a").stdout.splitlines()
    ]
    assert [(cells[0], cells[1], cells[3]) for cells in lines] == [
        (str(d["id"]), "1", "503"),
        (str(d["id"]), "2", "204"),
    ]
    assert lines[0][5:] == ["HTTP", "503"]
    assert len(lines[1]) == 5  # no error

    pending = _delivery(loch, down, "PENDING")
    assert pending["lastStatusCode"] == 503
    assert pending["lastError"] == "HTTP 503"
    assert pending["nextAttemptAt"] is not None
    [row] = loch.ok("notifications", "deliveries", down, "--status", "pending").stdout.splitlines()
    cells = row.split()
    assert (cells[0], cells[1], cells[2], cells[4]) == (
        str(pending["id"]),
        "COMMIT",
        "PENDING",
        "503",
    )
    assert cells[-2:] == ["HTTP", "503"]
