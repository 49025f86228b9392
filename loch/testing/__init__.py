"""Reusable test suites and helpers for Loch's extension points.

:mod:`loch.testing.contract` holds the behaviour every :class:`~loch.store.Persist`
backend must show. A backend's test module subclasses the contract classes and
provides their fixtures; pytest then runs the inherited tests against it.

:mod:`loch.testing.server` runs a real ``loch serve`` process (:class:`LochServer`)
on a free port, for tests that talk to Loch over HTTP.
"""

from loch.testing.contract import DurablePersistContract, PersistContract, PersistFactory
from loch.testing.server import LochServer, LochServerError, free_port

__all__ = [
    "DurablePersistContract",
    "LochServer",
    "LochServerError",
    "PersistContract",
    "PersistFactory",
    "free_port",
]
