"""``loch show``: one commit, its metadata and its operations."""

from __future__ import annotations

from dataclasses import replace
from itertools import islice

import click

from loch.cli.context import REF, CliError, RefSpec, State, json_option, pass_state
from loch.cli.output import Cell, Column, content_summary, key_text, styled
from loch.cli.render import log_entry_json, render_commit

__all__ = ["show"]


@click.command()
@click.argument("ref", type=REF, required=False)
@click.option(
    "--content", "full", is_flag=True, help="Print each operation's full content as JSON."
)
@json_option
@pass_state
def show(state: State, ref: RefSpec | None, full: bool) -> None:
    """Show one commit: its metadata, parents and operations.

    REF is a commit hash, or any reference (default: --ref or the default branch), whose
    head commit is shown.

    \b
    Examples:
      loch show                  # head of the default branch
      loch show etl
      loch show main~1
      loch show 5f2c0a3e9d…      # a full commit hash
      loch show etl --content
      loch show --json etl | jq '.operations[].key.elements'
    """
    spec = state.read_ref(ref)
    entry = next(islice(state.client.log(spec.text, fetch_operations=True, page_size=1), 1), None)
    if entry is None:
        raise CliError(
            f"'{spec.text}' has no commits: it is at the beginning of history "
            f"({state.server_config().get('noAncestorHash')})"
        )
    out = state.out
    if out.json_mode:
        out.json(log_entry_json(entry))
        return
    render_commit(out, replace(entry, operations=None), parents=True)
    operations = entry.operations or []
    if full:
        for op in operations:
            out.line(styled(f"{op.get('type')} {key_text(op['key']['elements'])}", "bold"))
            if op.get("content") is not None:
                out.pretty_json(op["content"])
        return
    rows: list[list[Cell]] = []
    for op in operations:
        content = op.get("content") or {}
        kind = str(op.get("type", ""))
        rows.append(
            [
                styled(kind, {"PUT": "green", "DELETE": "red"}.get(kind, "dim")),
                key_text(op["key"]["elements"]),
                str(content.get("type", "")),
                str(content.get("id", "")),
                content_summary(content),
            ]
        )
    out.table(
        [
            Column("Operation"),
            Column("Key", "bold"),
            Column("Type", "cyan"),
            Column("Content ID", no_wrap=True),
            Column("Location"),
        ],
        rows,
        empty="No operations.",
    )
