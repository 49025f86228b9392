"""``loch serve``: run the REST server."""

from __future__ import annotations

import logging

import click

from loch.config import DEFAULT_PORT, Settings


@click.command()
@click.option("--host", default=None, help="Interface to listen on [default: 127.0.0.1].")
@click.option(
    "--port", type=int, default=None, help=f"Port to listen on [default: {DEFAULT_PORT}]."
)
@click.option(
    "--store",
    "store_url",
    default=None,
    help="Store URL: memory://, sqlite:///path/to/loch.db or postgresql://… "
    "[default: $LOCH_STORE, else an SQLite file in the data directory].",
)
@click.option("--log-level", default="info", show_default=True)
def serve(host: str | None, port: int | None, store_url: str | None, log_level: str) -> None:
    """Run the Loch server (Nessie REST API v1 and v2).

    \b
    Examples:
      loch serve
      loch serve --port 8080 --store sqlite:///var/lib/loch/loch.db
      LOCH_STORE=memory:// loch serve
    """
    import signal

    import uvicorn

    from loch.api import create_app

    settings = Settings.from_env(host=host, port=port, store_url=store_url)
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )
    click.echo(f"Loch serving {settings.store_url} on http://{settings.host}:{settings.port}")
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal with the
    # previous handler in place; a no-op handler lets the process exit with status 0.
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=10,
    )
