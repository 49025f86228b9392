"""What the client adds to :mod:`loch.errors`: unreachable servers and HTTP statuses.

Every error :class:`~loch.client.LochClient` raises is a :class:`~loch.errors.LochError`
rebuilt from the server's ``errorCode``. Two things the code alone cannot tell are kept
here:

* :class:`ServerUnreachableError`: no server answered at all (connection refused, DNS
  failure, timeout), as opposed to a server that answered 503.
* :func:`http_status`: the status the server really answered with. The class follows
  ``errorCode``, so an answer with ``errorCode: UNKNOWN`` (e.g. the 404 of a path that is
  not part of the API, or a 405) stays an :class:`~loch.errors.UnknownError`, whose
  ``status`` says 500; its real status is ``http_status(e)`` (also ``e.http_status``).
  Such an error is deliberately not turned into a :class:`~loch.errors.NotFoundError`:
  ``except NotFoundError`` is meant for missing references and keys, not for a client
  pointed at the wrong base URI.
"""

from __future__ import annotations

from typing import TypeVar

from loch.errors import LochError, ServiceUnavailableError

__all__ = ["HTTP_STATUS_ATTRIBUTE", "ServerUnreachableError", "http_status", "with_http_status"]

HTTP_STATUS_ATTRIBUTE = "http_status"
"""Name of the attribute holding the HTTP status on errors raised by the client."""

E = TypeVar("E", bound=LochError)


class ServerUnreachableError(ServiceUnavailableError):
    """No answer from the server: connection refused, DNS failure, timeout, reset.

    A subclass of :class:`~loch.errors.ServiceUnavailableError`, so code catching that
    keeps working; catch this one to tell "no server" from "the server answered 503".
    After a timeout the server may still have carried out a write.
    """

    http_status: int | None = None


def with_http_status(error: E, status: int | None) -> E:
    """Record on ``error`` the HTTP status it was answered with; returns ``error``."""
    setattr(error, HTTP_STATUS_ATTRIBUTE, status)
    return error


def http_status(error: BaseException) -> int | None:
    """The HTTP status a server answered with for an error the client raised.

    Returns:
        The status, or None if no server answered or the error was raised before any
        request was sent.
    """
    status = getattr(error, HTTP_STATUS_ATTRIBUTE, None)
    return status if isinstance(status, int) else None
