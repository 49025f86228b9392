"""Where command results go: rich tables and colour on a terminal, plain text when piped,
stable JSON with ``--json``; errors and progress on stderr.

``--color auto`` (the default) decides by whether stdout is a terminal; ``always`` forces
rich output (tables, colour, progress) even into a pipe, ``never`` keeps the terminal
layout without colour or other styles. Rich also honours ``NO_COLOR``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click
from rich import box
from rich.console import Console
from rich.json import JSON
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

from loch.model.keys import encode_canonical

__all__ = ["Cell", "Column", "Output", "content_summary", "key_text", "styled"]

T = TypeVar("T")
Cell = str | Text
"""A table cell: text, styled or not."""


def key_text(key: Sequence[str]) -> str:
    """A key as users type it: dotted, escaped only where an element needs it."""
    return encode_canonical(key)


def content_summary(content: dict[str, Any] | None) -> str:
    """One short line describing a content value (its location, or a namespace's name)."""
    if not content:
        return ""
    kind = content.get("type")
    if kind == "NAMESPACE":
        return "namespace " + ".".join(content.get("elements") or [])
    if "metadataLocation" in content:
        return str(content["metadataLocation"])
    history = content.get("metadataLocationHistory")
    if history:
        return str(history[-1])
    return ""


@dataclass(frozen=True)
class Column:
    """A table column: header and rich style (the style is dropped in plain output)."""

    header: str
    style: str | None = None
    no_wrap: bool = False


class Output:
    """Writes one command's results.

    Args:
        color: ``auto``, ``always`` or ``never``.
        json_mode: Results are JSON documents (text lines and tables are not printed).
    """

    def __init__(self, color: str = "auto", json_mode: bool = False) -> None:
        force = True if color == "always" else None
        system: Literal["auto"] | None = None if color == "never" else "auto"
        self.console = Console(force_terminal=force, color_system=system, highlight=False)
        self.err = Console(stderr=True, force_terminal=force, color_system=system, highlight=False)
        self.json_mode = json_mode

    @property
    def rich(self) -> bool:
        """Stdout is a terminal (or ``--color always``): use tables and colour."""
        return self.console.is_terminal

    # -- results ------------------------------------------------------------------------------

    def json(self, obj: Any) -> None:
        """Write one JSON document to stdout (two-space indent, UTF-8, trailing newline)."""
        click.echo(json.dumps(obj, indent=2, ensure_ascii=False))

    def line(self, text: Cell = "", style: str | None = None) -> None:
        """Write one line of text to stdout (styled on a terminal)."""
        if self.rich:
            self.console.print(text, style=style, markup=False, highlight=False, soft_wrap=True)
        else:
            click.echo(text.plain if isinstance(text, Text) else text)

    def pretty_json(self, obj: Any) -> None:
        """Write a JSON value for people: highlighted on a terminal, indented when piped."""
        if self.rich:
            self.console.print(JSON.from_data(obj, indent=2))
        else:
            self.json(obj)

    def table(
        self,
        columns: Sequence[Column],
        rows: Iterable[Sequence[Cell]],
        *,
        title: str | None = None,
        empty: str | None = None,
    ) -> None:
        """Write rows as a rich table on a terminal, as aligned columns when piped.

        Plain output has no header and no padding after the last column, so that it
        works with ``cut``, ``awk`` and ``read``.

        Args:
            columns: The columns.
            rows: Cells per row, as many as ``columns``.
            title: Caption above the rich table.
            empty: Message (stderr, terminal only) when there is no row.
        """
        rows = list(rows)
        if not rows:
            if empty and self.err.is_terminal:
                self.err.print(empty, style="dim", markup=False)
            return
        if self.rich:
            table = Table(box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)
            for c in columns:
                table.add_column(c.header, style=c.style, no_wrap=c.no_wrap, overflow="fold")
            for row in rows:
                table.add_row(*row)
            self.console.print(table)
            return
        plain = [[c.plain if isinstance(c, Text) else c for c in row] for row in rows]
        widths = [max(len(r[i]) for r in plain) for i in range(len(columns))]
        for r in plain:
            cells = [cell.ljust(widths[i]) for i, cell in enumerate(r[:-1])] + [r[-1]]
            click.echo("  ".join(cells).rstrip())

    # -- stderr -------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """A remark for people on stderr (never mixed into results)."""
        self.err.print(text, style="dim", markup=False, highlight=False, soft_wrap=True)

    def error(self, message: str, details: Sequence[str] = ()) -> None:
        """One error line on stderr (``loch: error: …``), then indented details."""
        head = Text("loch: error: ", style="bold red")
        head.append(message)
        self.err.print(head, soft_wrap=True, highlight=False)
        for d in details:
            self.err.print(Text("  " + d), soft_wrap=True, highlight=False)

    def progress(self, items: Iterable[T], what: str, total: int | None = None) -> Iterator[T]:
        """Yield ``items``, showing a transient progress display on a terminal's stderr.

        Args:
            items: What to iterate (usually a paging iterator of the client).
            what: The things counted, e.g. ``"entries"``.
            total: How many are expected, when known (shows a bar).
        """
        if not self.err.is_terminal:
            yield from items
            return
        columns = [SpinnerColumn(), TextColumn(f"Fetching {what}")]
        if total is not None:
            columns += [BarColumn(), MofNCompleteColumn()]
        else:
            columns += [TextColumn("{task.completed:,}")]
        columns.append(TimeElapsedColumn())
        with Progress(*columns, console=self.err, transient=True) as bar:
            task = bar.add_task(what, total=total)
            for item in items:
                yield item
                bar.advance(task)

    def collect(self, items: Iterable[T], what: str, total: int | None = None) -> list[T]:
        """All of ``items`` as a list, with :meth:`progress` shown meanwhile."""
        return list(self.progress(items, what, total))


def styled(text: str, style: str) -> Text:
    """A text cell with a style (plain output drops it)."""
    return Text(text, style=style)
