"""The ASGI application: :func:`create_app` wires settings, store, routes and errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request

from loch.api import notifications, v1, v2
from loch.api.errors import error_body, install_error_handlers
from loch.api.middleware import RawPathMiddleware, RequestBodyMiddleware
from loch.api.responses import JSONResponse
from loch.backends import open_store
from loch.config import Settings
from loch.errors import LochError
from loch.events import Dispatcher, encode_change, open_notification_store
from loch.store import Persist
from loch.versioning import VersionStore

__all__ = ["create_app"]


def create_app(settings: Settings, persist: Persist | None = None) -> FastAPI:
    """Build the Loch server for ``settings``.

    The store is opened when the app starts (or ``persist`` is used as given) and
    closed when it stops.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if getattr(app.state, "version_store", None) is None:
            _open(app)
        try:
            yield
        finally:
            _close(app)

    def _open(app: FastAPI) -> None:
        p = persist if persist is not None else open_store(settings.store_url)
        vs = VersionStore(
            p,
            default_branch=settings.default_branch,
            cache_bytes=settings.cache_mb * 1024 * 1024,
            on_change=encode_change,
        )
        app.state.version_store = vs
        app.state.notification_store = open_notification_store(p)
        if settings.dispatch_webhooks:
            dispatcher = Dispatcher(p, app.state.notification_store, settings.webhooks)
            dispatcher.start()
            vs.listeners.append(lambda change: dispatcher.changed())
            app.state.dispatcher = dispatcher

    def _close(app: FastAPI) -> None:
        dispatcher: Dispatcher | None = app.state.dispatcher
        if dispatcher is not None:
            dispatcher.stop(settings.webhooks.timeout)
            app.state.dispatcher = None
        if app.state.notification_store is not None:
            app.state.notification_store.close()
            app.state.notification_store = None
        vs: VersionStore | None = app.state.version_store
        if vs is not None:
            vs.close()
            if persist is None:
                vs.persist.close()
        app.state.version_store = None

    app = FastAPI(
        title="Loch",
        summary="A transactional catalog for data lakes with git-like semantics "
        "(Nessie REST API v1 and v2).",
        version="0.1.0",
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.version_store = None
    app.state.notification_store = None
    app.state.dispatcher = None
    install_error_handlers(app)
    app.include_router(v2.router)
    app.include_router(v1.router)
    for router in notifications.routers:
        app.include_router(router)

    @app.get("/healthz", tags=["ops"], summary="Liveness")
    def healthz() -> JSONResponse:
        return JSONResponse({"status": "UP"})

    @app.get("/readyz", tags=["ops"], summary="Readiness: the store answers")
    def readyz(request: Request) -> JSONResponse:
        vs: VersionStore | None = request.app.state.version_store
        if vs is None:
            return JSONResponse(
                error_body(503, "Store not open", "SERVICE_UNAVAILABLE"), status_code=503
            )
        try:
            vs.persist.get_ref(vs.default_branch)
        except Exception as e:  # any failure of the store means "not ready"
            message = e.message if isinstance(e, LochError) else f"Store failed: {e}"
            return JSONResponse(error_body(503, message, "SERVICE_UNAVAILABLE"), status_code=503)
        return JSONResponse({"status": "UP"})

    app.add_middleware(RequestBodyMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(RawPathMiddleware)
    return app
