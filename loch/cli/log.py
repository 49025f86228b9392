"""``loch log``: the commits of a reference, newest first."""

from __future__ import annotations

from itertools import islice

import click

from loch.cli.context import REF, RefSpec, State, json_option, pass_state
from loch.cli.render import log_entry_json, render_commit

__all__ = ["log"]

_MAX_PAGE = 250  # the server's largest log page


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def combined_filter(cel: str | None, authors: tuple[str, ...]) -> str | None:
    """The ``--filter`` expression ANDed with the ``--author`` conditions."""
    parts = [f"({cel})"] if cel else []
    if authors:
        parts.append(
            "(" + " || ".join(f"{_cel_string(a)} in commit.authors" for a in authors) + ")"
        )
    return " && ".join(parts) or None


@click.command()
@click.argument("ref", type=REF, required=False)
@click.option(
    "-n", "--max-count", "count", type=click.IntRange(min=1), help="Show at most N commits."
)
@click.option("--oneline", is_flag=True, help="One line per commit: hash and subject.")
@click.option(
    "--filter",
    "cel",
    metavar="CEL",
    help="CEL expression over commit (message, authors, commitTime, hash, allProperties, …) "
    "and operations.",
)
@click.option(
    "--author", "authors", multiple=True, help="Only commits by this author (repeatable)."
)
@click.option(
    "--operations", "-o", is_flag=True, help="Also list the keys each commit put or deleted."
)
@click.option(
    "--until",
    "limit_hash",
    metavar="HASH",
    help="Stop after this commit (the oldest one shown).",
)
@json_option
@pass_state
def log(
    state: State,
    ref: RefSpec | None,
    count: int | None,
    oneline: bool,
    cel: str | None,
    authors: tuple[str, ...],
    operations: bool,
    limit_hash: str | None,
) -> None:
    """Show the commits of a reference, newest first.

    REF defaults to --ref or the default branch, and may be any reference: a branch
    or tag, NAME@HASH, a bare HASH, main~3, 'main*2024-05-01T00:00:00Z'. The log
    follows first parents back to the beginning (or to --until).

    \b
    Examples:
      loch log
      loch log etl -n 10 --oneline
      loch log main --operations
      loch log --author alice --author bob
      loch log --filter "commit.message.contains('nightly')"
      loch log --filter "timestamp(commit.commitTime) > timestamp('2024-05-01T00:00:00Z')"
      loch log --json -n 1 | jq -r '.[0].commitMeta.hash'
    """
    spec = state.read_ref(ref)
    page = min(count, _MAX_PAGE) if count else None
    entries = state.client.log(
        spec.text,
        filter=combined_filter(cel, authors),
        limit_hash=limit_hash,
        fetch_operations=operations,
        page_size=page,
    )
    if count:
        entries = islice(entries, count)
    out = state.out
    if out.json_mode:
        out.json([log_entry_json(e) for e in out.collect(entries, "commits", total=count)])
        return
    shown = 0
    for entry in entries:
        render_commit(out, entry, oneline=oneline)
        shown += 1
    if not shown:
        out.note(f"No commits on {spec.text}.")
