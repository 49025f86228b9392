"""Webhook notifications API, served under both ``/api/v1`` and ``/api/v2``."""

from __future__ import annotations

import time
from typing import Annotated, Any
from urllib.parse import urlsplit

from fastapi import APIRouter, Body, Query, Request
from starlette.responses import Response

from loch.api.responses import JSONResponse
from loch.errors import BadRequestError, NotificationNotFoundError, ServiceUnavailableError
from loch.events import KIND_TO_TYPE, Delivery, DeliveryStatus, Notification, NotificationStore
from loch.versioning.operations import format_time

__all__ = ["routers"]

MAX_URL = 2048
MAX_SECRET = 256
JsonBody = Annotated[dict[str, Any], Body()]


def _store(request: Request) -> NotificationStore:
    store: NotificationStore | None = request.app.state.notification_store
    if store is None:
        raise ServiceUnavailableError("Notifications are not available on this store")
    return store


def _time(t: float | None) -> str | None:
    return None if t is None else format_time(int(t * 1_000_000))


def notification_json(n: Notification) -> dict[str, Any]:
    """A notification as answered (the secret is never shown)."""
    return {
        "id": n.id,
        "type": n.type,
        "url": n.url,
        "eventType": n.event_type,
        "hasSecret": bool(n.secret),
        "createdAt": _time(n.created_at),
    }


def delivery_json(store: NotificationStore, d: Delivery, with_attempts: bool) -> dict[str, Any]:
    """A delivery with its state and, optionally, its attempts."""
    out: dict[str, Any] = {
        "id": d.id,
        "eventId": d.event_id,
        "eventType": d.event_type,
        "eventSeq": d.event_seq,
        "status": d.status.value,
        "attempts": d.attempts,
        "createdAt": _time(d.created_at),
        "lastAttemptAt": _time(d.last_attempt_at),
        "nextAttemptAt": _time(d.next_attempt_at) if d.status == DeliveryStatus.PENDING else None,
        "lastStatusCode": d.last_status_code,
        "lastError": d.last_error,
        "deliveredAt": _time(d.delivered_at),
    }
    if with_attempts:
        out["attemptLog"] = [
            {
                "attempt": a.attempt,
                "at": _time(a.at),
                "statusCode": a.status_code,
                "error": a.error,
                "durationMs": round(a.duration_ms, 3),
            }
            for a in store.attempts(d.id)
        ]
    return out


def _target(body: dict[str, Any]) -> tuple[str, str, str | None]:
    kind = body.get("type")
    if kind != "WEBHOOK":
        raise BadRequestError('Notification type must be "WEBHOOK"')
    url = body.get("url")
    if not isinstance(url, str) or not url or len(url) > MAX_URL:
        raise BadRequestError("Notification url must be an absolute http(s) URL")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BadRequestError(f"Notification url '{url}' must be an absolute http(s) URL")
    try:
        parts.port  # noqa: B018 - validates the port
    except ValueError:
        raise BadRequestError(f"Notification url '{url}' has an invalid port") from None
    secret = body.get("secret")
    if secret is not None and (not isinstance(secret, str) or not 0 < len(secret) <= MAX_SECRET):
        raise BadRequestError(f"Notification secret must be a string of 1 to {MAX_SECRET} chars")
    return kind, url, secret


def _get(store: NotificationStore, notification_id: str) -> Notification:
    n = store.get(notification_id)
    if n is None:
        raise NotificationNotFoundError(f"Notification '{notification_id}' not found")
    return n


def _router(prefix: str) -> APIRouter:
    router = APIRouter(prefix=prefix, tags=["notifications"])

    @router.post(
        "/notifications/{kind}",
        status_code=201,
        summary="Subscribe a webhook to commits, merges, transplants or reference events",
    )
    def create(request: Request, kind: str, body: JsonBody) -> JSONResponse:
        event_type = KIND_TO_TYPE.get(kind)
        if event_type is None:
            raise BadRequestError(
                f"Unknown notification kind '{kind}'; one of: {', '.join(KIND_TO_TYPE)}"
            )
        n = _store(request).add(event_type.value, *_target(body))
        dispatcher = request.app.state.dispatcher
        if dispatcher is not None:
            dispatcher.subscribed()
        return JSONResponse(
            notification_json(n),
            status_code=201,
            headers={"Location": f"{request.base_url}{prefix.lstrip('/')}/notifications/{n.id}"},
        )

    @router.get("/notifications", summary="List notifications")
    def list_notifications(request: Request) -> JSONResponse:
        return JSONResponse(
            {"notifications": [notification_json(n) for n in _store(request).list_all()]}
        )

    @router.get("/notifications/{notification_id}", summary="Describe a notification")
    def get(request: Request, notification_id: str) -> JSONResponse:
        return JSONResponse(notification_json(_get(_store(request), notification_id)))

    @router.put("/notifications/{notification_id}", summary="Update a notification")
    def update(request: Request, notification_id: str, body: JsonBody) -> JSONResponse:
        store = _store(request)
        _get(store, notification_id)
        n = store.update(notification_id, *_target(body))
        if n is None:
            raise NotificationNotFoundError(f"Notification '{notification_id}' not found")
        return JSONResponse(notification_json(n))

    @router.delete("/notifications/{notification_id}", summary="Delete a notification")
    def delete(request: Request, notification_id: str) -> Response:
        if not _store(request).delete(notification_id):
            raise NotificationNotFoundError(f"Notification '{notification_id}' not found")
        return Response(status_code=204)

    @router.get(
        "/notifications/{notification_id}/deliveries",
        summary="Delivery log: attempts, status codes and failures",
    )
    def deliveries(
        request: Request,
        notification_id: str,
        status: Annotated[str | None, Query()] = None,
        max_records: Annotated[int, Query(alias="max-records", ge=1, le=1000)] = 100,
    ) -> JSONResponse:
        store = _store(request)
        _get(store, notification_id)
        wanted = None
        if status is not None:
            try:
                wanted = DeliveryStatus(status.upper())
            except ValueError:
                raise BadRequestError("status must be PENDING, DELIVERED or FAILED") from None
        items = store.deliveries(notification_id, max_records, wanted)
        return JSONResponse(
            {"deliveries": [delivery_json(store, d, with_attempts=True) for d in items]}
        )

    @router.post(
        "/notifications/{notification_id}/deliveries/{delivery_id}/redeliver",
        summary="Send a delivery again",
    )
    def redeliver(request: Request, notification_id: str, delivery_id: int) -> JSONResponse:
        store = _store(request)
        _get(store, notification_id)
        d = store.redeliver(notification_id, delivery_id, time.time())
        if d is None:
            raise NotificationNotFoundError(
                f"Delivery {delivery_id} of notification '{notification_id}' not found"
            )
        dispatcher = request.app.state.dispatcher
        if dispatcher is not None:
            dispatcher.wake()
        return JSONResponse(delivery_json(store, d, with_attempts=False))

    return router


routers = [_router("/api/v1"), _router("/api/v2")]
"""The notifications API under both API versions."""
