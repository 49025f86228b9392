"""The ``loch`` command line."""

from loch.cli.main import main

__all__ = ["main"]
