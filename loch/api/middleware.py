"""ASGI middleware: raw-path routing, request body limits and gzip request bodies."""

from __future__ import annotations

import json
import re
import zlib
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from loch.api.errors import error_body

__all__ = ["RawPathMiddleware", "RequestBodyMiddleware"]

# Characters left as they are when re-encoding a path segment: Nessie's ref syntax
# (@ * ~ ^), key escapes and the usual unreserved characters. '/' stays encoded.
_SAFE = "@*~^-._:!$&'()+,;="
# A raw path of only these bytes is already in that form (most requests).
_PLAIN = re.compile(rb"[A-Za-z0-9/@*~^\-._:!$&'()+,;=]*")


class RawPathMiddleware:
    """Route on the raw path: each segment stays percent-encoded (``%2F`` too).

    Starlette matches routes on the decoded path, which would split ``feature%2Fx``
    into two segments. Here every segment is normalised to a percent-encoded ASCII
    form, and the handlers decode their path parameters themselves.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            if raw:
                raw_path = raw.split(b"?", 1)[0]
                if _PLAIN.fullmatch(raw_path):  # nothing to decode or encode
                    path = raw_path.decode("ascii")
                else:
                    path = "/".join(
                        quote(unquote_to_bytes(seg), safe=_SAFE) for seg in raw_path.split(b"/")
                    )
                scope = dict(scope)
                scope["path"] = path
        await self.app(scope, receive, send)


class RequestBodyMiddleware:
    """Read request bodies whole, enforce a size limit and decode ``gzip``/``deflate``.

    Chunked transfer encoding is already undone by the HTTP server (h11/httptools);
    content encoding is not, and Iceberg's Java client gzips its request bodies.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        encoding = headers.get(b"content-encoding", b"").decode("latin-1").strip().lower()
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                await _reject(send, 413, f"Request body larger than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        if encoding in ("gzip", "x-gzip", "deflate") and body:
            wbits = 47 if encoding != "deflate" else 15
            try:
                d = zlib.decompressobj(wbits)
                body = d.decompress(body, self.max_bytes + 1)
                if len(body) > self.max_bytes or d.unconsumed_tail:
                    await _reject(
                        send, 413, f"Decoded request body larger than {self.max_bytes} bytes"
                    )
                    return
            except zlib.error as e:
                await _reject(send, 400, f"Invalid {encoding} request body: {e}")
                return
        elif encoding not in ("", "identity"):
            await _reject(send, 415, f"Unsupported Content-Encoding '{encoding}'")
            return
        scope = dict(scope)
        scope["headers"] = [
            (k, v)
            for k, v in scope.get("headers") or []
            if k not in (b"content-encoding", b"content-length", b"transfer-encoding")
        ] + [(b"content-length", str(len(body)).encode())]
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


async def _reject(send: Send, status: int, message: str) -> None:
    code = {400: "BAD_REQUEST", 413: "BAD_REQUEST", 415: "UNSUPPORTED_MEDIA_TYPE"}[status]
    payload: dict[str, Any] = error_body(status, message, code)
    data = json.dumps(payload).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
