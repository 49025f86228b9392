"""Entry point of the ``loch`` command."""

from __future__ import annotations

import click

from loch.cli.serve import serve


@click.group()
@click.version_option(package_name="loch")
def cli() -> None:
    """Loch: a transactional catalog for data lakes with git-like semantics."""


cli.add_command(serve)


def main() -> None:
    """Run the ``loch`` command line."""
    cli()
