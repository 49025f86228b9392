"""Reusable test suites for Loch's extension points.

:mod:`loch.testing.contract` holds the behaviour every :class:`~loch.store.Persist`
backend must show. A backend's test module subclasses the contract classes and
provides their fixtures; pytest then runs the inherited tests against it.
"""

from loch.testing.contract import DurablePersistContract, PersistContract, PersistFactory

__all__ = ["DurablePersistContract", "PersistContract", "PersistFactory"]
