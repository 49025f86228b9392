"""Nessie's error body, built from :mod:`loch.errors` for every failure path."""

from __future__ import annotations

import logging
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from loch.api.responses import JSONResponse
from loch.errors import ErrorCode, LochError

__all__ = ["error_body", "error_response", "install_error_handlers"]

log = logging.getLogger("loch.api")

_STATUS_CODES = {
    400: ErrorCode.BAD_REQUEST,
    403: ErrorCode.FORBIDDEN,
    415: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    429: ErrorCode.TOO_MANY_REQUESTS,
    503: ErrorCode.SERVICE_UNAVAILABLE,
}


def wants_details(request: Request) -> bool:
    """Nessie sends ``errorDetails`` only to clients announcing spec 2 or later."""
    raw = request.headers.get("nessie-client-spec", "")
    try:
        return int(raw.strip()) >= 2
    except ValueError:
        return False


def error_body(
    status: int,
    message: str,
    code: str,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The NessieError JSON object."""
    body: dict[str, Any] = {
        "status": status,
        "reason": HTTPStatus(status).phrase,
        "message": message,
        "errorCode": code,
        "serverStackTrace": None,
    }
    if details is not None:
        body["errorDetails"] = details
    return body


def error_response(request: Request, err: LochError) -> JSONResponse:
    """The response for a :class:`LochError`."""
    details = err.details() if wants_details(request) else None
    return JSONResponse(
        error_body(err.status, err.message, err.code.name, details), status_code=err.status
    )


def install_error_handlers(app: FastAPI) -> None:
    """Map every failure to Nessie's error body: LochError by its code, validation
    errors to 400, HTTP errors by status, anything else to 500."""

    @app.exception_handler(LochError)
    async def _loch(request: Request, exc: LochError) -> JSONResponse:
        return error_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errs = exc.errors()
        parts = []
        for e in errs[:5]:
            loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body")
            parts.append(f"{loc}: {e.get('msg')}" if loc else str(e.get("msg")))
        message = "Bad request: " + "; ".join(parts)
        return JSONResponse(error_body(400, message, "BAD_REQUEST"), status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _STATUS_CODES.get(exc.status_code, ErrorCode.UNKNOWN)
        message = str(exc.detail) if exc.detail else HTTPStatus(exc.status_code).phrase
        return JSONResponse(
            error_body(exc.status_code, message, code.name),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("Unhandled error on %s %s", request.method, request.url.path)
        return JSONResponse(
            error_body(500, f"Internal server error: {type(exc).__name__}", "UNKNOWN"),
            status_code=500,
        )
