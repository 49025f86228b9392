"""``loch diff``: the keys whose content differs between two references."""

from __future__ import annotations

import difflib
import json
from typing import Any

import click

from loch.cli.context import EXIT_ERROR, KEY, REF, RefSpec, State, json_option, pass_state
from loch.cli.output import Cell, Column, Output, content_summary, key_text, styled
from loch.cli.render import key_json
from loch.client import DiffEntry
from loch.model.keys import Key

__all__ = ["diff"]

_STATUS = {"A": ("added", "green"), "D": ("deleted", "red"), "M": ("modified", "yellow")}


def status_of(entry: DiffEntry) -> str:
    """``A`` (only in TO), ``D`` (only in FROM) or ``M`` (in both, different)."""
    if entry.before is None:
        return "A"
    if entry.after is None:
        return "D"
    return "M"


def diff_json(entry: DiffEntry) -> dict[str, Any]:
    """A diff entry in wire form."""
    return {"key": key_json(entry.key), "from": entry.before, "to": entry.after}


def _lines(content: dict[str, Any] | None) -> list[str]:
    if content is None:
        return []
    return json.dumps(content, indent=2, sort_keys=True).splitlines(keepends=True)


def _patch(out: Output, entry: DiffEntry, from_text: str, to_text: str) -> None:
    name = key_text(entry.key)
    lines = difflib.unified_diff(
        _lines(entry.before),
        _lines(entry.after),
        fromfile=f"{from_text}:{name}" if entry.before is not None else "/dev/null",
        tofile=f"{to_text}:{name}" if entry.after is not None else "/dev/null",
    )
    for line in lines:
        text = line.rstrip("\n")
        if text.startswith(("+++", "---")):
            out.line(text, style="bold")
        elif text.startswith("@@"):
            out.line(text, style="cyan")
        elif text.startswith("+"):
            out.line(text, style="green")
        elif text.startswith("-"):
            out.line(text, style="red")
        else:
            out.line(text)


def _change(entry: DiffEntry) -> str:
    before, after = content_summary(entry.before), content_summary(entry.after)
    if entry.before is None:
        return after
    if entry.after is None:
        return before
    if before != after:
        return f"{before} -> {after}"
    return "content changed"


@click.command()
@click.argument("from_ref", metavar="FROM", type=REF)
@click.argument("to_ref", metavar="[TO]", type=REF, required=False)
@click.option("--prefix", type=KEY, metavar="KEY", help="Only keys in or under this namespace.")
@click.option("--patch", "-p", is_flag=True, help="Show each change as a diff of the content JSON.")
@click.option("--name-only", is_flag=True, help="Only print the keys.")
@click.option(
    "--exit-code", is_flag=True, help="Exit with 1 if there are differences, 0 if there are none."
)
@json_option
@pass_state
@click.pass_context
def diff(
    ctx: click.Context,
    state: State,
    from_ref: RefSpec,
    to_ref: RefSpec | None,
    prefix: Key | None,
    patch: bool,
    name_only: bool,
    exit_code: bool,
) -> None:
    """Show the keys whose content differs from FROM to TO.

    TO defaults to --ref or the default branch. Each key is A (added: only in TO),
    D (deleted: only in FROM) or M (modified). Both may be any reference.

    \b
    Examples:
      loch diff main etl                  # what etl would bring to main
      loch diff main~1 main               # what main's last commit changed
      loch diff v1.0 main --prefix db
      loch diff main etl -p               # with the content changes
      loch diff main etl --exit-code || echo "etl has changes"
      loch diff main etl --json | jq -r '.[].key.elements | join(".")'
    """
    to_spec = state.read_ref(to_ref)
    out = state.out
    entries = out.collect(
        state.client.diff(from_ref.text, to_spec.text, prefix=prefix), "differences"
    )
    if out.json_mode:
        out.json([diff_json(e) for e in entries])
    elif name_only:
        for e in entries:
            out.line(key_text(e.key))
    elif patch:
        for e in entries:
            _patch(out, e, from_ref.text, to_spec.text)
    else:
        rows: list[list[Cell]] = []
        for e in entries:
            status = status_of(e)
            kind = (e.after or e.before or {}).get("type", "")
            rows.append(
                [
                    styled(status, _STATUS[status][1]),
                    styled(key_text(e.key), "bold"),
                    str(kind),
                    _change(e),
                ]
            )
        out.table(
            [Column(""), Column("Key"), Column("Type", "cyan"), Column("Change")],
            rows,
            title=f"{from_ref.text} → {to_spec.text}",
            empty=f"No differences between {from_ref.text} and {to_spec.text}.",
        )
    if exit_code and entries:
        ctx.exit(EXIT_ERROR)
