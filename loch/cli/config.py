"""``loch config``: the command line's settings and the server's configuration."""

from __future__ import annotations

import json
from typing import Any

import click

from loch.cli.context import CliError, State, json_option, pass_state
from loch.cli.output import Column

__all__ = ["config"]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


@click.command()
@click.argument("name", required=False)
@json_option
@pass_state
def config(state: State, name: str | None) -> None:
    """Show the client's settings and the server's configuration.

    The server part is its GET /config answer.

    With NAME, print only that setting: uri, ref, or a server field such as
    defaultBranch, specVersion or noAncestorHash.

    \b
    Examples:
      loch config
      loch config defaultBranch
      LOCH_URI=http://catalog:19120/api/v2 loch config specVersion
      loch config --json | jq .server
    """
    server = state.client.config()
    client = {"uri": state.uri, "ref": state.ref.text if state.ref else None}
    out = state.out
    if name is not None:
        merged = {**client, **server}
        if name not in merged:
            known = ", ".join(sorted(merged))
            raise CliError(f"no setting '{name}' (known: {known})")
        value = merged[name]
        if out.json_mode:
            out.json(value)
        else:
            out.line("" if value is None else _text(value))
        return
    if out.json_mode:
        out.json({"client": client, "server": server})
        return
    rows = [["uri", state.uri, "client"]]
    rows.append(
        ["ref", state.ref.text if state.ref else f"- ({server.get('defaultBranch')})", "client"]
    )
    rows += [[k, _text(v), "server"] for k, v in server.items()]
    out.table([Column("Setting", "bold"), Column("Value"), Column("Source", "dim")], rows)
