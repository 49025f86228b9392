"""Backends of the :class:`~loch.store.Persist` contract, chosen by store URL.

``memory://``, ``sqlite:///path/to/file.db`` and (extra ``postgres``) ``postgresql://…``.
Backends are imported lazily, so that an optional driver is needed only when used.
"""

from __future__ import annotations

from loch.errors import BadRequestError
from loch.store import Persist

__all__ = ["open_store"]


def open_store(url: str) -> Persist:
    """Open the backend named by ``url``.

    Raises:
        BadRequestError: an unknown scheme or a malformed URL.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise BadRequestError(f"Store URL '{url}' has no scheme (memory://, sqlite:///path)")
    if scheme == "memory":
        from loch.backends.memory import MemoryPersist

        return MemoryPersist()
    if scheme == "sqlite":
        from loch.backends.sqlite import SqlitePersist

        if not rest.startswith("/") or rest == "/":
            raise BadRequestError(f"SQLite store URL '{url}' must be sqlite:///path")
        # sqlite:///rel/path -> "rel/path"; sqlite:////abs/path -> "/abs/path"
        return SqlitePersist(rest[1:])
    if scheme in ("postgresql", "postgres"):
        from loch.backends.postgres import PostgresPersist

        return PostgresPersist(url)
    raise BadRequestError(f"Unknown store scheme '{scheme}' in '{url}'")
