"""``loch content``: list, view, put and delete the content (table pointers) under keys."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from loch.cli.context import KEY, REF, RefSpec, State, json_option, pass_state
from loch.cli.output import Column, content_summary, key_text, styled
from loch.cli.render import commit_response_json, key_json
from loch.client import Entry
from loch.model.keys import Key

__all__ = ["content"]

CONTENT_TYPES = ["ICEBERG_TABLE", "ICEBERG_VIEW", "DELTA_LAKE_TABLE", "NAMESPACE", "UDF"]

ref_option = click.option(
    "--ref",
    "-r",
    "ref",
    type=REF,
    metavar="REF",
    help="Reference to read [default: --ref or the default branch].",
)
branch_option = click.option(
    "--ref",
    "-r",
    "ref",
    type=REF,
    metavar="BRANCH",
    help="Branch to commit to, or BRANCH@HASH to require it is still at HASH "
    "[default: --ref or the default branch].",
)
message_option = click.option("--message", "-m", help="Commit message.")
author_option = click.option(
    "--author", "authors", multiple=True, help="Author of the commit (repeatable)."
)


@click.group(invoke_without_command=True)
@click.pass_context
def content(ctx: click.Context) -> None:
    """List, view, put and delete content (tables, views, namespaces) by key.

    Keys are dotted (db.orders) or, when an element contains a dot, in the escaped
    form with a leading dot (.db.*.x is ["db", ".x"]). Alone: list the keys.

    \b
    Examples:
      loch content
      loch content list --ref etl --prefix db
      loch content view db.orders
      loch content put db.orders --json table.json --ref etl --parents
      loch content delete db.orders --ref etl
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(list_cmd)


def _entry_json(entry: Entry) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "name": key_json(entry.key),
        "type": entry.type,
        "contentId": entry.content_id,
    }
    if entry.content is not None:
        obj["content"] = entry.content
    return obj


def _type_filter(cel: str | None, types: tuple[str, ...]) -> str | None:
    parts = [f"({cel})"] if cel else []
    if types:
        listed = ", ".join(f"'{t.upper()}'" for t in types)
        parts.append(f"entry.contentType in [{listed}]")
    return " && ".join(parts) or None


@content.command("list")
@ref_option
@click.option("--prefix", type=KEY, metavar="KEY", help="Only keys in or under this namespace.")
@click.option(
    "--type",
    "types",
    type=click.Choice(CONTENT_TYPES, case_sensitive=False),
    multiple=True,
    help="Only content of this type (repeatable).",
)
@click.option("--filter", "cel", metavar="CEL", help="CEL filter over entry (see `loch --help`).")
@click.option("--long", "-l", "long_", is_flag=True, help="Also fetch and show each location.")
@json_option
@pass_state
def list_cmd(
    state: State,
    ref: RefSpec | None = None,
    prefix: Key | None = None,
    types: tuple[str, ...] = (),
    cel: str | None = None,
    long_: bool = False,
) -> None:
    """List the keys of a reference with their content type and content id.

    \b
    Examples:
      loch content list
      loch content list --ref etl --prefix db -l
      loch content list --type iceberg_table --type iceberg_view
      loch content list --filter "entry.name.startsWith('orders')"
      loch content list --json | jq -r '.[].name.elements | join(".")'
    """
    spec = state.read_ref(ref)
    out = state.out
    entries = out.collect(
        state.client.entries(
            spec.text, prefix=prefix, filter=_type_filter(cel, types), content=long_
        ),
        "entries",
    )
    if out.json_mode:
        out.json([_entry_json(e) for e in entries])
        return
    columns = [Column("Key", "bold"), Column("Type", "cyan"), Column("Content ID", no_wrap=True)]
    if long_:
        columns.append(Column("Location"))
    rows = []
    for e in entries:
        row = [key_text(e.key), e.type, e.content_id or ""]
        if long_:
            row.append(content_summary(e.content))
        rows.append(row)
    out.table(columns, rows, empty=f"No content on {spec.text}.")


@content.command("view")
@click.argument("key", type=KEY)
@ref_option
@json_option
@pass_state
def view_cmd(state: State, key: Key, ref: RefSpec | None) -> None:
    """Print the content under KEY as JSON.

    \b
    Examples:
      loch content view db.orders
      loch content view db.orders --ref etl~1
      loch content view db.orders --json | jq -r .metadataLocation
    """
    spec = state.read_ref(ref)
    value = state.client.get_content(spec.text, key)
    if state.out.json_mode:
        state.out.json(value)
    else:
        state.out.pretty_json(value)


def _read_json(source: str) -> dict[str, Any]:
    """The content object given as a file, ``-`` (stdin) or inline JSON."""
    try:
        if source == "-":
            text = sys.stdin.read()
        elif source.lstrip().startswith(("{", "[")):
            text = source
        else:
            text = Path(source).read_text(encoding="utf-8")
        value = json.loads(text)
    except OSError as e:
        raise click.BadParameter(
            f"cannot read {source}: {e.strerror}", param_hint="--json"
        ) from None
    except ValueError as e:
        raise click.BadParameter(f"not valid JSON: {e}", param_hint="--json") from None
    if not isinstance(value, dict) or not isinstance(value.get("type"), str):
        raise click.BadParameter(
            'the content must be a JSON object with a "type", e.g. '
            '{"type": "ICEBERG_TABLE", "metadataLocation": "s3://…"}',
            param_hint="--json",
        )
    return value


def _commit(
    state: State,
    ref: RefSpec | None,
    operations: list[dict[str, Any]],
    message: str,
    authors: tuple[str, ...],
    summary: str,
) -> None:
    branch, expected = state.branch_target(ref, "--ref")
    assert expected is not None
    resp = state.client.commit(branch, expected, operations, message=message, authors=authors)
    out = state.out
    if out.json_mode:
        out.json(commit_response_json(resp))
        return
    out.line(f"Committed {resp.hash} to {branch}: {summary}")
    for k, cid in resp.added_contents.items():
        out.line(styled(f"  new content {key_text(k)}: id {cid}", "dim"))


def _expected(state: State, ref: RefSpec | None) -> RefSpec:
    """``ref`` pinned to the branch head it is read at, so the commit checks against it."""
    branch, expected = state.branch_target(ref, "--ref")
    if expected is None:
        expected = state.client.get_reference(branch).hash or ""
    return RefSpec(f"{branch}@{expected}", branch, expected)


@content.command("put")
@click.argument("key", type=KEY)
@click.option(
    "--json",
    "source",
    required=True,
    metavar="FILE|-|JSON",
    help="The content: a JSON file, - for stdin, or an inline JSON object.",
)
@branch_option
@click.option("--parents", "-p", is_flag=True, help="Also create the missing namespaces above KEY.")
@message_option
@author_option
@pass_state
def put_cmd(
    state: State,
    key: Key,
    source: str,
    ref: RefSpec | None,
    parents: bool,
    message: str | None,
    authors: tuple[str, ...],
) -> None:
    """Commit content under KEY: a new table pointer, or an update of one.

    The content (--json) is Nessie's JSON (ICEBERG_TABLE, ICEBERG_VIEW, DELTA_LAKE_TABLE,
    NAMESPACE or UDF). Without an "id", an existing key keeps its content id (an update)
    and a new key gets a new one; a NAMESPACE without "elements" gets KEY's. Here --json
    names the input: use `loch --json content put …` for JSON output.

    \b
    Examples:
      loch content put db --json '{"type": "NAMESPACE"}'
      loch content put db.orders --parents --ref etl \\
          --json '{"type": "ICEBERG_TABLE", "metadataLocation": "s3://lake/orders/v1.json"}'
      loch content put db.orders --json table.json -m "Point orders at v2"
      cat view.json | loch content put db.v --json - --ref etl@5f2c0a3e
    """
    value = _read_json(source)
    if value["type"] == "NAMESPACE" and not value.get("elements"):
        value["elements"] = list(key)
    spec = _expected(state, ref)
    wanted = [key[:i] for i in range(1, len(key))] if parents else []
    present = state.client.get_contents(spec.text, [*wanted, key])
    operations: list[dict[str, Any]] = []
    for ns in wanted:
        if ns not in present:
            namespace = {"type": "NAMESPACE", "elements": list(ns)}
            operations.append({"type": "PUT", "key": key_json(ns), "content": namespace})
    if "id" not in value and key in present:
        value["id"] = present[key].get("id")
    operations.append({"type": "PUT", "key": key_json(key), "content": value})
    created = [key_text(op["key"]["elements"]) for op in operations[:-1]]
    summary = f"put {key_text(key)} ({value['type']})"
    if created:
        summary += f", created namespace(s) {', '.join(created)}"
    _commit(state, spec, operations, message or f"Put {key_text(key)}", authors, summary)


@content.command("delete")
@click.argument("keys", metavar="KEY...", type=KEY, nargs=-1, required=True)
@branch_option
@message_option
@author_option
@json_option
@pass_state
def delete_cmd(
    state: State,
    keys: tuple[Key, ...],
    ref: RefSpec | None,
    message: str | None,
    authors: tuple[str, ...],
) -> None:
    """Delete KEYs in one commit (a namespace only once nothing is left under it).

    \b
    Examples:
      loch content delete db.orders --ref etl
      loch content delete db.orders db -m "Drop orders and its namespace"
    """
    spec = _expected(state, ref)
    operations = [{"type": "DELETE", "key": key_json(k)} for k in keys]
    names = ", ".join(key_text(k) for k in keys)
    _commit(state, spec, operations, message or f"Delete {names}", authors, f"deleted {names}")
