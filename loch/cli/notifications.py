"""``loch notifications``: webhook subscriptions and their deliveries.

A notification POSTs one kind of event (commits, merges, transplants, reference
creations, deletions or assignments, on any reference) as JSON to a URL, signed with
HMAC-SHA256 when it has a secret. Each event becomes a delivery, retried with backoff
until the receiver answers 2xx (DELIVERED) or it is given up (FAILED).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import click
from click.shell_completion import CompletionItem

from loch.cli.context import State, completion_client, json_option, pass_state
from loch.cli.output import Cell, Column, Output, styled
from loch.client import DELIVERY_STATUSES, NOTIFICATION_KINDS, Delivery, Notification

__all__ = ["notifications"]

_STATUS_STYLES = {"DELIVERED": "green", "PENDING": "yellow", "FAILED": "bold red"}
_MAX_DELIVERIES = 1000  # the server's largest page of deliveries

if TYPE_CHECKING:
    _IdParam = click.ParamType[str, Any]
else:  # ParamType is generic from click 8.4 on
    _IdParam = click.ParamType


class NotificationIdType(_IdParam):
    """A notification id; completes the ids the server has."""

    name = "id"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value).strip()
        if not text:
            self.fail("a notification id cannot be empty", param, ctx)
        return text

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            with completion_client(ctx) as client:
                found = client.notifications()
        except Exception:  # completion must never fail loudly
            return []
        return [
            CompletionItem(n.id, help=f"{n.event_type} {n.url}")
            for n in found
            if n.id.startswith(incomplete)
        ]


NOTIFICATION_ID = NotificationIdType()


def _url(ctx: click.Context, param: click.Parameter, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise click.BadParameter(f"'{value}' is not an absolute http(s) URL", ctx, param)
    return value


def _secret(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value != "-":
        return value
    line = sys.stdin.readline().rstrip("\r\n")
    if not line:
        raise click.BadParameter("no secret on standard input", ctx, param)
    return line


url_argument = click.argument("url", metavar="URL", callback=_url)
secret_option = click.option(
    "--secret",
    metavar="SECRET",
    callback=_secret,
    help="Sign deliveries: header Loch-Signature: sha256=HMAC-SHA256(SECRET, body). "
    "Give - to read it from the first line of stdin (keeps it out of `ps`).",
)


def _signed(n: Notification) -> str:
    return "signed" if n.has_secret else "unsigned"


def _describe(n: Notification) -> str:
    return f"{n.event_type} events to {n.url} ({_signed(n)})"


def _or_dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


@click.group(invoke_without_command=True)
@click.pass_context
def notifications(ctx: click.Context) -> None:
    """Manage webhook notifications and their deliveries (alone: list them).

    A notification POSTs every event of one KIND, on any reference, as JSON to a URL:
    commits, merges, transplants, references-created, references-deleted or
    references-assigned. It receives the events recorded after its creation. Each
    event is one delivery, retried with backoff on 5xx, 408, 429, timeouts and
    connection errors until the receiver answers 2xx (DELIVERED) or it is given up
    (FAILED; other answers fail at once). Headers: Loch-Event-Id, Loch-Event-Type,
    Loch-Delivery-Id, Loch-Delivery-Attempt, and Loch-Signature with a secret.

    \b
    Examples:
      loch notifications add commits https://ci.example.com/hooks/loch --secret s3cr3t
      loch notifications
      loch notifications deliveries 6f1c2d3e-… --status FAILED
      loch notifications redeliver 6f1c2d3e-… 42
      loch notifications rm 6f1c2d3e-…
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd)


@notifications.command("add")
@click.argument("kind", type=click.Choice(NOTIFICATION_KINDS, case_sensitive=False))
@url_argument
@secret_option
@json_option
@pass_state
def add_cmd(state: State, kind: str, url: str, secret: str | None) -> None:
    """Subscribe URL to the events of KIND.

    \b
    Examples:
      loch notifications add commits https://ci.example.com/hooks/loch
      loch notifications add merges http://127.0.0.1:8000/merged --secret s3cr3t
      vault read -field=secret hooks/loch | loch notifications add commits URL --secret -
      loch notifications add references-created URL --json | jq -r .id
    """
    n = state.client.add_notification(kind, url, secret)
    if state.out.json_mode:
        state.out.json(n.to_json())
        return
    state.out.line(f"Added notification {n.id}: {_describe(n)}")


@notifications.command("list")
@json_option
@pass_state
def list_cmd(state: State) -> None:
    """List notifications, oldest first: id, events, URL, signed or not, creation time.

    \b
    Examples:
      loch notifications list
      loch notifications list --json | jq -r '.[] | select(.eventType == "COMMIT") | .id'
    """
    found = state.client.notifications()
    out = state.out
    if out.json_mode:
        out.json([n.to_json() for n in found])
        return
    out.table(
        [
            Column("ID", "bold", no_wrap=True),
            Column("Events", "cyan"),
            Column("URL"),
            Column("Signed"),
            Column("Created", no_wrap=True),
        ],
        [
            [n.id, n.event_type, n.url, "yes" if n.has_secret else "no", _or_dash(n.created_at)]
            for n in found
        ],
        empty="No notifications.",
    )


@notifications.command("show")
@click.argument("notification_id", metavar="ID", type=NOTIFICATION_ID)
@json_option
@pass_state
def show_cmd(state: State, notification_id: str) -> None:
    """Show one notification.

    \b
    Examples:
      loch notifications show 6f1c2d3e-…
      loch notifications show 6f1c2d3e-… --json | jq .url
    """
    n = state.client.get_notification(notification_id)
    out = state.out
    if out.json_mode:
        out.json(n.to_json())
        return
    rows: list[list[Cell]] = [
        ["id", n.id],
        ["events", n.event_type],
        ["type", n.type],
        ["url", n.url],
        ["signed", "yes" if n.has_secret else "no"],
        ["created", _or_dash(n.created_at)],
    ]
    out.table([Column("Field", "bold"), Column("Value")], rows)


@notifications.command("update")
@click.argument("notification_id", metavar="ID", type=NOTIFICATION_ID)
@url_argument
@secret_option
@json_option
@pass_state
def update_cmd(state: State, notification_id: str, url: str, secret: str | None) -> None:
    """Point notification ID at URL, with SECRET or unsigned.

    The kind of events stays. The target is replaced as a whole: without --secret,
    deliveries are no longer signed (a note on stderr says so).

    \b
    Examples:
      loch notifications update 6f1c2d3e-… https://ci.example.com/hooks/v2
      loch notifications update 6f1c2d3e-… https://ci.example.com/hooks/v2 --secret new
    """
    before = state.client.get_notification(notification_id)
    n = state.client.update_notification(notification_id, url, secret)
    out = state.out
    if before.has_secret and not n.has_secret:
        out.note(f"Deliveries of {n.id} are no longer signed (give --secret to keep signing them).")
    if out.json_mode:
        out.json(n.to_json())
        return
    out.line(f"Updated notification {n.id}: {_describe(n)}")


@notifications.command("rm")
@click.argument("notification_ids", metavar="ID...", nargs=-1, required=True, type=NOTIFICATION_ID)
@json_option
@pass_state
def rm_cmd(state: State, notification_ids: tuple[str, ...]) -> None:
    """Delete notifications and their pending deliveries.

    Stops at the first ID that does not exist (exit code 1); the ones before it are
    deleted. With --json, the deleted notifications are written.

    \b
    Examples:
      loch notifications rm 6f1c2d3e-…
      loch notifications list --json | jq -r '.[].id' | xargs loch notifications rm
    """
    deleted: list[Notification] = []
    for notification_id in notification_ids:
        n = state.client.get_notification(notification_id)
        state.client.delete_notification(notification_id)
        deleted.append(n)
        if not state.out.json_mode:
            state.out.line(f"Deleted notification {n.id} ({_describe(n)})")
    if state.out.json_mode:
        state.out.json([n.to_json() for n in deleted])


def _status_cell(status: str) -> Cell:
    return styled(status, _STATUS_STYLES.get(status, ""))


def _render_deliveries(out: Output, items: list[Delivery], notification_id: str) -> None:
    rows: list[list[Cell]] = [
        [
            str(d.id),
            d.event_type,
            _status_cell(d.status),
            str(d.attempts),
            _or_dash(d.last_status_code),
            _or_dash(d.delivered_at or d.last_attempt_at),
            _or_dash(d.next_attempt_at),
            d.last_error or "",
        ]
        for d in items
    ]
    out.table(
        [
            Column("ID", "bold", no_wrap=True),
            Column("Event", "cyan"),
            Column("Status", no_wrap=True),
            Column("Attempts"),
            Column("HTTP"),
            Column("Last attempt", no_wrap=True),
            Column("Next attempt", no_wrap=True),
            Column("Error"),
        ],
        rows,
        empty=f"No deliveries for {notification_id}.",
    )


def _render_attempts(out: Output, items: list[Delivery], notification_id: str) -> None:
    rows: list[list[Cell]] = []
    for d in items:
        for a in d.attempt_log or []:
            ok = a.error is None
            rows.append(
                [
                    str(d.id),
                    str(a.attempt),
                    _or_dash(a.at),
                    styled(_or_dash(a.status_code), "green" if ok else "red"),
                    "-" if a.duration_ms is None else f"{a.duration_ms:.1f}",
                    a.error or "",
                ]
            )
    out.table(
        [
            Column("Delivery", "bold", no_wrap=True),
            Column("Attempt"),
            Column("At", no_wrap=True),
            Column("HTTP"),
            Column("ms"),
            Column("Error"),
        ],
        rows,
        empty=f"No attempts for {notification_id}.",
    )


@notifications.command("deliveries")
@click.argument("notification_id", metavar="ID", type=NOTIFICATION_ID)
@click.option(
    "--status",
    type=click.Choice(DELIVERY_STATUSES, case_sensitive=False),
    help="Only deliveries in this state.",
)
@click.option(
    "-n",
    "--max-count",
    "count",
    type=click.IntRange(1, _MAX_DELIVERIES),
    default=100,
    show_default=True,
    help="Show at most N deliveries (newest first).",
)
@click.option(
    "--attempts",
    "-a",
    "show_attempts",
    is_flag=True,
    help="List every attempt (time, HTTP status, duration, error) instead of one row per delivery.",
)
@json_option
@pass_state
def deliveries_cmd(
    state: State, notification_id: str, status: str | None, count: int, show_attempts: bool
) -> None:
    """Show the deliveries of notification ID, newest first.

    One row per delivery: its id, event type, status (PENDING, DELIVERED, FAILED),
    number of attempts, HTTP status of the last answer, time of the last attempt (or of
    the delivery), when it is retried, and the last error. --json also lists every
    attempt (attemptLog).

    \b
    Examples:
      loch notifications deliveries 6f1c2d3e-…
      loch notifications deliveries 6f1c2d3e-… --status FAILED -n 10
      loch notifications deliveries 6f1c2d3e-… --attempts
      loch notifications deliveries 6f1c2d3e-… --json | jq '.[] | select(.attempts > 1)'
    """
    items = state.client.deliveries(
        notification_id, status=status.upper() if status else None, limit=count
    )
    out = state.out
    if out.json_mode:
        out.json([d.to_json() for d in items])
    elif show_attempts:
        _render_attempts(out, items, notification_id)
    else:
        _render_deliveries(out, items, notification_id)


@notifications.command("redeliver")
@click.argument("notification_id", metavar="ID", type=NOTIFICATION_ID)
@click.argument("delivery_id", metavar="DELIVERY_ID", type=click.IntRange(min=0))
@json_option
@pass_state
def redeliver_cmd(state: State, notification_id: str, delivery_id: int) -> None:
    """Send delivery DELIVERY_ID of notification ID again.

    The delivery goes back in line as PENDING, whatever its state (a failed one, or a
    delivered one the receiver lost), and is sent with the same event id and a new
    attempt number. Deliveries of one notification arrive in event order, so it waits
    for any older pending one.

    \b
    Examples:
      loch notifications redeliver 6f1c2d3e-… 42
      loch notifications deliveries 6f1c2d3e-… --status FAILED --json \\
        | jq -r '.[].id' | xargs -n1 loch notifications redeliver 6f1c2d3e-…
    """
    d = state.client.redeliver(notification_id, delivery_id)
    out = state.out
    if out.json_mode:
        out.json(d.to_json())
        return
    out.line(
        f"Queued delivery {d.id} of {notification_id} again: {d.event_type} event "
        f"{d.event_id}, now {d.status}"
    )
