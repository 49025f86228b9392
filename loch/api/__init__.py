"""Loch's REST API: Nessie API v1 and v2 over FastAPI/Starlette."""

from loch.api.app import create_app

__all__ = ["create_app"]
