"""What ``loch branch`` and ``loch tag`` share: list, create, delete and assign.

Both verbs are built by :func:`reference_group` for their reference type, so that
branches and tags behave the same way wherever the API treats them the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click
from click.shell_completion import CompletionItem

from loch.cli.context import (
    NAME_RE,
    REF,
    RefSpec,
    State,
    completion_client,
    json_option,
    pass_state,
)
from loch.cli.output import Cell, Column, styled
from loch.cli.render import first_line, reference_json
from loch.client import Reference

__all__ = ["RefKind", "reference_group"]


@dataclass(frozen=True)
class RefKind:
    """One reference type as the commands name it.

    Attributes:
        type: ``BRANCH`` or ``TAG`` (API spelling).
        noun: ``branch`` or ``tag``.
        examples: The ``Examples:`` help text per subcommand (``list``, ``create``, …).
    """

    type: str
    noun: str
    examples: dict[str, str]


if TYPE_CHECKING:
    _NameParam = click.ParamType[str, Any]
    _RefParam = click.ParamType[RefSpec, Any]
else:  # ParamType is generic from click 8.4 on
    _NameParam = _RefParam = click.ParamType


class NewNameType(_NameParam):
    """The name of a reference to create (checked before anything is sent)."""

    name = "name"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        text = str(value)
        if text == "-" or not NAME_RE.match(text):
            self.fail(
                f"'{text}' is not a valid reference name (a letter, then letters, digits "
                "and ./_-, no '..', not ending in '.' or '/')",
                param,
                ctx,
            )
        return text


def _help(text: str, examples: str) -> str:
    return f"{text}\n\n\b\nExamples:\n{examples}"


def _head(state: State, spec: RefSpec, kind: RefKind) -> tuple[str, str]:
    """Name and expected hash of an existing reference given as ``name`` or ``name@hash``."""
    if spec.name is None or spec.relative:
        raise click.BadParameter(
            f"'{spec.text}' must be a {kind.noun} name, optionally with @hash",
            param_hint="NAME",
        )
    name = state.default_branch() if spec.name == "-" else spec.name
    if spec.hash is not None:
        return name, spec.hash
    ref = state.client.get_reference(name)
    return name, ref.hash or ""


class _KindRefType(_RefParam):
    """A reference of one type; completes only names of that type."""

    name = "ref"

    def __init__(self, ref_type: str) -> None:
        self.ref_type = ref_type

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return REF.convert(value, param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            with completion_client(ctx) as client:
                names = [r.name for r in client.references() if r.type == self.ref_type]
        except Exception:  # completion must never fail loudly
            return []
        return [CompletionItem(n) for n in names if n and n.startswith(incomplete)]


def reference_group(kind: RefKind) -> click.Group:
    """The ``loch branch`` or ``loch tag`` group for ``kind``."""
    noun, plural = kind.noun, kind.noun + ("es" if kind.noun == "branch" else "s")
    existing = _KindRefType(kind.type)

    @click.group(
        name=noun,
        invoke_without_command=True,
        help=_help(
            f"List, create, delete and move {plural} (alone: list them).", kind.examples["group"]
        ),
    )
    @click.pass_context
    def group(ctx: click.Context) -> None:
        if ctx.invoked_subcommand is None:
            ctx.invoke(list_cmd)

    @group.command(
        "list",
        help=_help(
            f"List {plural} with the hash each points at. With --verbose, also the "
            "commits ahead of and behind the default branch and the head commit."
            + (" The default branch is marked with *." if noun == "branch" else ""),
            kind.examples["list"],
        ),
    )
    @click.option("--verbose", "-v", is_flag=True, help="Also fetch commit counts and heads.")
    @click.option("--filter", "cel", metavar="CEL", help="CEL filter over ref, refType, commit.")
    @json_option
    @pass_state
    def list_cmd(state: State, verbose: bool = False, cel: str | None = None) -> None:
        refs = [
            r
            for r in state.out.collect(
                state.client.references(fetch_all=verbose, filter=cel), "references"
            )
            if r.type == kind.type
        ]
        if state.out.json_mode:
            state.out.json([reference_json(r) for r in refs])
            return
        is_branch = kind.type == "BRANCH"
        default = state.default_branch() if is_branch else None
        columns = [Column("Name", "bold", no_wrap=True), Column("Hash", "yellow", no_wrap=True)]
        if is_branch:
            columns.insert(0, Column(""))
        if verbose:
            columns += [
                Column("Ahead", "green"),
                Column("Behind", "red"),
                Column("Commits"),
                Column("Head commit time", no_wrap=True),
                Column("Head commit"),
            ]
        rows = []
        for r in refs:
            row: list[Cell] = [r.name or "", r.hash or ""]
            if is_branch:
                row.insert(0, styled("*" if r.name == default else " ", "green"))
            if verbose:
                row += _verbose_cells(r)
            rows.append(row)
        state.out.table(columns, rows, empty=f"No {plural}.")

    @group.command(
        "create",
        help=_help(
            f"Create {noun} NAME at FROM (a reference, default: --ref or the default branch).",
            kind.examples["create"],
        ),
    )
    @click.argument("name", type=NewNameType())
    @click.argument("from_ref", metavar="[FROM]", type=REF, required=False)
    @json_option
    @pass_state
    def create_cmd(state: State, name: str, from_ref: RefSpec | None) -> None:
        spec = state.read_ref(from_ref)
        target = state.resolve_hash(spec)
        source = state.ref_name(spec) if spec.name is not None else None
        if kind.type == "BRANCH":
            ref = state.client.create_branch(name, target, from_ref=source)
        else:
            ref = state.client.create_tag(name, target, from_ref=source)
        if state.out.json_mode:
            state.out.json(reference_json(ref))
            return
        state.out.line(f"Created {noun} {ref.name} at {ref.hash}")

    @group.command(
        "delete",
        help=_help(
            f"Delete {plural}. Give NAME@HASH to delete only if the {noun} is still at HASH.",
            kind.examples["delete"],
        ),
    )
    @click.argument("names", metavar="NAME...", nargs=-1, required=True, type=existing)
    @json_option
    @pass_state
    def delete_cmd(state: State, names: tuple[RefSpec, ...]) -> None:
        deleted: list[Reference] = []
        for spec in names:
            name, expected = _head(state, spec, kind)
            deleted.append(state.client.delete(name, expected, ref_type=kind.type))
            if not state.out.json_mode:
                state.out.line(f"Deleted {noun} {name} (was {expected})")
        if state.out.json_mode:
            state.out.json([reference_json(r) for r in deleted])

    @group.command(
        "assign",
        help=_help(
            f"Point {noun} NAME at TO (any reference; a bare hash is a commit). Give "
            f"NAME@HASH to move it only if it is still at HASH.",
            kind.examples["assign"],
        ),
    )
    @click.argument("name", type=existing)
    @click.argument("to", type=REF)
    @json_option
    @pass_state
    def assign_cmd(state: State, name: RefSpec, to: RefSpec) -> None:
        ref_name, expected = _head(state, name, kind)
        target = state.resolve_hash(to)
        ref = state.client.assign(ref_name, expected, target, ref_type=kind.type)
        if state.out.json_mode:
            state.out.json(reference_json(ref))
            return
        state.out.line(f"Assigned {noun} {ref_name} to {ref.hash} (was {expected})")

    return group


def _verbose_cells(ref: Reference) -> list[Cell]:
    meta = ref.metadata or {}
    head = meta.get("commitMetaOfHEAD") or {}

    def num(value: Any) -> str:
        return "" if value is None else str(value)

    return [
        num(meta.get("numCommitsAhead")),
        num(meta.get("numCommitsBehind")),
        num(meta.get("numTotalCommits")),
        str(head.get("commitTime") or ""),
        first_line(str(head.get("message") or "")),
    ]
