"""``loch cherry-pick``: replay commits of another reference onto a branch (transplant)."""

from __future__ import annotations

import click

from loch.cli.context import EXIT_ERROR, REF, RefSpec, State, json_option, pass_state
from loch.cli.merge import merge_modes, mode_options
from loch.cli.output import key_text
from loch.cli.render import merge_json, render_merge_details
from loch.model.keys import Key

__all__ = ["cherry_pick"]


@click.command("cherry-pick")
@click.argument("commits", metavar="COMMIT...", nargs=-1, required=True, type=REF)
@click.option(
    "--from",
    "from_ref",
    type=REF,
    required=True,
    metavar="REF",
    help="The reference the commits are on.",
)
@click.option(
    "--onto",
    type=REF,
    metavar="BRANCH",
    help="Branch to replay them on, or BRANCH@HASH to require it is still at HASH "
    "[default: --ref or the default branch].",
)
@click.option("--dry-run", "-n", is_flag=True, help="Only check for conflicts; write nothing.")
@click.option("--message", "-m", help="Message of the new commit (only when picking one commit).")
@mode_options("the picked commits'")
@json_option
@pass_state
@click.pass_context
def cherry_pick(
    ctx: click.Context,
    state: State,
    commits: tuple[RefSpec, ...],
    from_ref: RefSpec,
    onto: RefSpec | None,
    dry_run: bool,
    message: str | None,
    strategy: str,
    force_keys: tuple[Key, ...],
    drop_keys: tuple[Key, ...],
) -> None:
    """Replay commits of another reference onto a branch.

    Each COMMIT of --from becomes a new commit on the branch (Nessie's transplant).
    COMMITs are hashes, oldest first, forming a chain of parents (any reference
    works too: etl, etl~1). If a key the commits change was changed on the branch too,
    the cherry-pick stops and every key is listed with its conflict, if any; nothing
    is written and the exit code is 1. --force-key/--drop-key/--strategy decide such
    keys as for merge. --dry-run checks the same way without writing.

    \b
    Examples:
      loch cherry-pick 7a3b9c0d… --from etl --onto main
      loch cherry-pick etl~1 etl --from etl          # etl's last two commits
      loch cherry-pick 7a3b9c0d… --from etl --dry-run
      loch cherry-pick etl --from etl --force-key db.orders   # etl's db.orders wins
      loch cherry-pick etl --from etl --strategy drop --json
    """
    target, expected = state.branch_target(onto, "--onto")
    if from_ref.name is None:
        raise click.BadParameter("must name a branch or tag", param_hint="--from")
    hashes = [state.resolve_hash(c) for c in commits]
    default_mode, modes = merge_modes(strategy, force_keys, drop_keys)
    resp = state.client.transplant(
        target,
        state.ref_name(from_ref),
        hashes,
        expected_hash=expected,
        message=message,
        dry_run=dry_run,
        return_conflicts=True,
        default_mode=default_mode,
        key_modes=modes,
    )
    out = state.out
    n = len(hashes)
    what = f"{n} commit(s) from {from_ref.text} onto {target}"
    if out.json_mode:
        out.json(merge_json(resp))
    elif not resp.was_successful:
        render_merge_details(out, resp, title=f"Conflicts cherry-picking {what}")
    elif dry_run:
        out.line(
            f"Dry run: {n} commit(s) from {from_ref.text} apply cleanly onto {target}; "
            "nothing was written."
        )
        render_merge_details(out, resp, title="Keys")
    elif not resp.was_applied:
        out.line(f"Nothing to cherry-pick: the commits change nothing on {target}.")
    else:
        out.line(f"Cherry-picked {what}: {target} is now at {resp.resultant_target_hash}")
        render_merge_details(out, resp, title="Keys")
    if not resp.was_successful:
        conflicts = list(dict.fromkeys(key_text(d.key) for d in resp.details if d.conflict))
        if conflicts:
            keys = ", ".join(conflicts)
            out.error(f"cherry-pick of {what} has conflicts in {len(conflicts)} key(s): {keys}")
        else:
            out.error(f"cherry-pick of {what} did not succeed")
        ctx.exit(EXIT_ERROR)
