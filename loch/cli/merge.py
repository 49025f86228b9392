"""``loch merge``: merge a reference into a branch, or check that it would merge."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from loch.cli.context import EXIT_ERROR, KEY, REF, RefSpec, State, json_option, pass_state
from loch.cli.output import key_text
from loch.cli.render import merge_json, render_merge_details
from loch.model.keys import Key

__all__ = ["merge", "merge_modes", "mode_options"]

F = TypeVar("F", bound=Callable[..., Any])


def mode_options(incoming: str) -> Callable[[F], F]:
    """``--strategy``, ``--force-key`` and ``--drop-key`` of a merge or cherry-pick.

    Args:
        incoming: Whose content the changes bring, for the help texts (``FROM's``,
            ``the picked commits'``).
    """

    def decorate(f: F) -> F:
        f = click.option(
            "--drop-key",
            "drop_keys",
            type=KEY,
            multiple=True,
            metavar="KEY",
            help=f"Keep the target's content for this key instead of {incoming} (repeatable).",
        )(f)
        f = click.option(
            "--force-key",
            "force_keys",
            type=KEY,
            multiple=True,
            metavar="KEY",
            help=f"Take {incoming} content for this key even if it conflicts (repeatable).",
        )(f)
        return click.option(
            "--strategy",
            type=click.Choice(["normal", "force", "drop"], case_sensitive=False),
            default="normal",
            show_default=True,
            help=f"For every key: normal (conflicts stop it), force (take {incoming} "
            "content) or drop (keep the target's).",
        )(f)

    return decorate


def merge_modes(
    strategy: str, force_keys: tuple[Key, ...], drop_keys: tuple[Key, ...]
) -> tuple[str | None, dict[Key, str] | None]:
    """The default mode and per-key modes of the options of :func:`mode_options`.

    ``--force-key`` wins over ``--drop-key`` for a key given to both.
    """
    modes = {k: "DROP" for k in drop_keys}
    modes.update({k: "FORCE" for k in force_keys})
    default = strategy.upper() if strategy.lower() != "normal" else None
    return default, modes or None


@click.command()
@click.argument("from_ref", metavar="FROM", type=REF)
@click.option(
    "--into",
    type=REF,
    metavar="BRANCH",
    help="Branch to merge into, or BRANCH@HASH to require it is still at HASH "
    "[default: --ref or the default branch].",
)
@click.option("--dry-run", "-n", is_flag=True, help="Only check for conflicts; write nothing.")
@click.option("--message", "-m", help="Message of the merge commit.")
@mode_options("FROM's")
@json_option
@pass_state
@click.pass_context
def merge(
    ctx: click.Context,
    state: State,
    from_ref: RefSpec,
    into: RefSpec | None,
    dry_run: bool,
    message: str | None,
    strategy: str,
    force_keys: tuple[Key, ...],
    drop_keys: tuple[Key, ...],
) -> None:
    """Merge a reference into a branch, or check that it merges (--dry-run).

    The changes of FROM since the common ancestor land on the branch as one commit.
    FROM is any reference (a branch, a tag, NAME@HASH, a hash, etl~1). If a key was
    changed on both sides, the merge stops and every conflicting key is listed with the
    reason; nothing is written and the exit code is 1. --dry-run checks the same way
    without writing.

    \b
    Examples:
      loch merge etl                       # into --ref or the default branch
      loch merge etl --into main --dry-run
      loch merge etl --into main -m "Nightly load"
      loch merge etl --into main@5f2c0a3e  # only if main did not move
      loch merge etl --force-key db.orders # etl's db.orders wins
      loch merge etl --strategy drop --json
    """
    target, expected = state.branch_target(into, "--into")
    from_hash = state.resolve_hash(from_ref)
    from_name = state.ref_name(from_ref)
    default_mode, modes = merge_modes(strategy, force_keys, drop_keys)
    resp = state.client.merge(
        target,
        from_name,
        from_hash=from_hash,
        expected_hash=expected,
        message=message,
        dry_run=dry_run,
        return_conflicts=True,
        default_mode=default_mode,
        key_modes=modes,
    )
    out = state.out
    conflicts = [d for d in resp.details if d.conflict]
    what = f"{from_ref.text} into {target}"
    if out.json_mode:
        out.json(merge_json(resp))
    elif not resp.was_successful:
        render_merge_details(out, resp, title=f"Conflicts merging {what}")
    elif dry_run:
        out.line(
            f"Dry run: merging {what} would change {len(resp.details)} key(s); nothing was written."
        )
        render_merge_details(out, resp, title="Keys")
    elif not resp.was_applied:
        out.line(
            f"Already up to date: nothing to merge from {from_ref.text}; "
            f"{target} is at {resp.resultant_target_hash}"
        )
    else:
        out.line(f"Merged {what}: {target} is now at {resp.resultant_target_hash}")
        render_merge_details(out, resp, title="Keys")
    if not resp.was_successful:
        keys = ", ".join(key_text(d.key) for d in conflicts)
        out.error(f"merge of {what} has conflicts in {len(conflicts)} key(s): {keys}")
        ctx.exit(EXIT_ERROR)
