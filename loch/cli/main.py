"""Entry point of the ``loch`` command: global options, error reporting and exit codes."""

from __future__ import annotations

import errno
import traceback
from typing import Any, NoReturn

import click

from loch.cli.branch import branch
from loch.cli.cherry_pick import cherry_pick
from loch.cli.config import config
from loch.cli.content import content
from loch.cli.context import (
    EXIT_ERROR,
    EXIT_UNREACHABLE,
    REF,
    CliError,
    RefSpec,
    State,
    exit_code_for,
)
from loch.cli.diff import diff
from loch.cli.log import log
from loch.cli.merge import merge
from loch.cli.notifications import notifications
from loch.cli.output import Output, key_text
from loch.cli.serve import serve
from loch.cli.show import show
from loch.cli.tag import tag
from loch.client import DEFAULT_URI, http_status
from loch.errors import LochError, ReferenceConflictError, UnknownError

__all__ = ["cli", "main"]

EPILOG = """\b
References (REF): a branch or tag name, NAME@HASH, @HASH or a bare HASH,
or - for the server's default branch; add ~N (Nth first-parent ancestor),
^N (Nth parent) or *TIME (latest commit at or before an ISO instant such as
2024-05-01T12:00:00Z, or epoch milliseconds). Writes take a branch name,
optionally as NAME@HASH to require that the branch is still at HASH.

\b
Keys (KEY): dotted, as in db.orders, or Nessie's escaped form with a
leading dot when an element contains a dot: .db.*.x is ["db", ".x"].

\b
Exit codes:
  0  success
  1  the server refused or failed (unknown reference or key, conflict,
     invalid request), or a merge or cherry-pick has conflicts
  2  usage error: unknown option, malformed reference, key or JSON input
  3  the server cannot be reached (connection refused, DNS, timeout)

\b
--json writes Nessie API v2 objects (Reference, LogEntry, DiffEntry, Entry,
Content, MergeResponse, CommitResponse), and Loch's Notification and Delivery
objects, to stdout. Errors are one line on stderr (--debug adds the
traceback); with --json an {"error": {"errorCode", "message", "exitCode",
"httpStatus"}} object also goes to stdout (httpStatus null if no server
answered).

\b
Shell completion (bash; use zsh_source or fish_source for zsh and fish):
  eval "$(_LOCH_COMPLETE=bash_source loch)"
"""


class LochGroup(click.Group):
    """The root group: turns errors into one stderr line and an exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except CliError as e:
            _report(ctx, e)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # usage errors (exit 2) and exits are click's to print
        except OSError as e:
            if e.errno == errno.EPIPE:
                raise  # click silences a closed pipe (``loch log | head``)
            _report(ctx, e)
        except Exception as e:
            _report(ctx, e)


def _report(ctx: click.Context, exc: BaseException) -> NoReturn:
    state = ctx.find_object(State)
    out = state.out if state is not None else Output()
    debug = state.debug if state is not None else False
    details: list[str] = []
    conflicts: list[dict[str, Any]] = []
    error_code: str | None = None
    status: int | None = None
    if isinstance(exc, CliError):
        code, message = exc.exit_code, exc.message
    elif isinstance(exc, LochError):
        code, message, error_code = exit_code_for(exc), exc.message, exc.code.name
        status = http_status(exc)
        if isinstance(exc, ReferenceConflictError):
            for c in exc.conflicts:
                where = key_text(c.key) if c.key else "(reference)"
                details.append(f"{where}: {c.conflict_type.value}: {c.message}")
                conflicts.append(c.to_json())
        if isinstance(exc, UnknownError) and status == 404 and state is not None:
            details.append(f"is {state.uri} the server's API v2 base URI (…/api/v2)?")
        if code == EXIT_UNREACHABLE and state is not None:
            details.append("start it with `loch serve`, or set --uri / LOCH_URI")
    else:
        code = EXIT_ERROR
        message = f"internal error: {type(exc).__name__}: {exc}"
        if not debug:
            details.append("run again with --debug for the traceback")
    if debug:
        traceback.print_exception(exc)
    if state is not None and state.json:
        error: dict[str, Any] = {
            "errorCode": error_code,
            "message": message,
            "exitCode": code,
            "httpStatus": status,
        }
        if conflicts:
            error["conflicts"] = conflicts
        out.json({"error": error})
    out.error(message, details)
    ctx.exit(code)


@click.group(cls=LochGroup, epilog=EPILOG, context_settings={"max_content_width": 100})
@click.option(
    "--uri",
    envvar="LOCH_URI",
    default=DEFAULT_URI,
    show_default=True,
    metavar="URI",
    help="Base URI of the server's API v2 [env: LOCH_URI].",
)
@click.option(
    "--ref",
    "-r",
    "ref",
    envvar="LOCH_REF",
    type=REF,
    default=None,
    metavar="REF",
    help="Default reference of every command [env: LOCH_REF; default: the server's "
    "default branch].",
)
@click.option("--json", "json_", is_flag=True, help="Write JSON to stdout instead of text.")
@click.option(
    "--color",
    type=click.Choice(["auto", "always", "never"]),
    default="auto",
    show_default=True,
    envvar="LOCH_COLOR",
    help="Rich tables and colour: on a terminal (auto), always, or without colour (never).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds to wait for each request.",
)
@click.option(
    "--token",
    envvar="LOCH_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Bearer token [env: LOCH_TOKEN].",
)
@click.option("--debug", is_flag=True, envvar="LOCH_DEBUG", help="Show tracebacks of errors.")
@click.version_option(package_name="loch")
@click.pass_context
def cli(
    ctx: click.Context,
    uri: str,
    ref: RefSpec | None,
    json_: bool,
    color: str,
    timeout: float,
    token: str | None,
    debug: bool,
) -> None:
    """Loch: a transactional catalog for data lakes with git-like semantics.

    Branches, tags and commits over table keys, through the Nessie REST API of a
    `loch serve` (or Nessie) server.

    \b
    Examples:
      loch serve &                          # run a server on 127.0.0.1:19120
      loch branch create etl                # branch off the default branch
      loch content list --ref etl           # tables on etl
      loch diff main etl                    # what etl changed
      loch merge etl --into main            # merge it
      loch log -n 5 --oneline               # recent commits of main
      loch notifications add commits https://ci.example.com/hook
      loch --json branch list | jq -r '.[].name'
      LOCH_URI=http://catalog:19120/api/v2 loch show main
    """
    if not uri.startswith(("http://", "https://")):
        raise click.BadParameter(f"'{uri}' is not an http(s) URI", param_hint="--uri")
    state = State(
        uri=uri, ref=ref, json=json_, color=color, debug=debug, timeout=timeout, token=token
    )
    ctx.obj = state
    ctx.call_on_close(state.close)


for command in (
    branch,
    cherry_pick,
    config,
    content,
    diff,
    log,
    merge,
    notifications,
    serve,
    show,
    tag,
):
    cli.add_command(command)


def main() -> None:
    """Run the ``loch`` command line."""
    cli(prog_name="loch")
