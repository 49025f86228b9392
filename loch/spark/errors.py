"""The error raised when Spark cannot be set up for Loch."""

from __future__ import annotations

from loch.errors import LochError

__all__ = ["SparkSetupError"]


class SparkSetupError(LochError):
    """The Iceberg runtime for Spark cannot be found, built or configured.

    The message names the route that failed (explicit jars, the PyPI-shipped jar,
    Maven coordinates) and why.
    """
