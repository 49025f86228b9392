"""``loch cherry-pick``: replay commits of another reference onto a branch (transplant)."""

from __future__ import annotations

import click

from loch.cli.context import REF, RefSpec, State, json_option, pass_state
from loch.cli.render import merge_json, render_merge_details

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
@json_option
@pass_state
def cherry_pick(
    state: State,
    commits: tuple[RefSpec, ...],
    from_ref: RefSpec,
    onto: RefSpec | None,
    dry_run: bool,
    message: str | None,
) -> None:
    """Replay commits of another reference onto a branch.

    Each COMMIT of --from becomes a new commit on the branch (Nessie's transplant).
    COMMITs are hashes, oldest first, forming a chain of parents (any reference
    works too: etl, etl~1). A conflict stops the cherry-pick; the conflicting keys are
    listed, nothing is written and the exit code is 1.

    \b
    Examples:
      loch cherry-pick 7a3b9c0d… --from etl --onto main
      loch cherry-pick etl~1 etl --from etl          # etl's last two commits
      loch cherry-pick 7a3b9c0d… --from etl --dry-run
    """
    target, expected = state.branch_target(onto, "--onto")
    if from_ref.name is None:
        raise click.BadParameter("must name a branch or tag", param_hint="--from")
    hashes = [state.resolve_hash(c) for c in commits]
    resp = state.client.transplant(
        target,
        state.ref_name(from_ref),
        hashes,
        expected_hash=expected,
        message=message,
        dry_run=dry_run,
    )
    out = state.out
    n = len(hashes)
    if out.json_mode:
        out.json(merge_json(resp))
    elif dry_run:
        out.line(
            f"Dry run: {n} commit(s) from {from_ref.text} apply cleanly onto {target}; "
            "nothing was written."
        )
        render_merge_details(out, resp, title="Keys")
    elif not resp.was_applied:
        out.line(f"Nothing to cherry-pick: the commits change nothing on {target}.")
    else:
        out.line(
            f"Cherry-picked {n} commit(s) from {from_ref.text} onto {target}: "
            f"{target} is now at {resp.resultant_target_hash}"
        )
        render_merge_details(out, resp, title="Keys")
