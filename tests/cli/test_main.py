"""Global behaviour of ``loch``: help, exit codes, error lines, --json errors, colour,
completion and the environment variables."""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess

import click
import pytest

from loch.cli.main import cli
from loch.client import LochClient

from .conftest import LOCH, Loch, fresh_name, put_table

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def all_commands() -> list[tuple[str, ...]]:
    """Every command path of the CLI, e.g. ``("branch", "create")``."""
    paths: list[tuple[str, ...]] = []

    def walk(group: click.Group, prefix: tuple[str, ...]) -> None:
        for name, cmd in group.commands.items():
            paths.append((*prefix, name))
            if isinstance(cmd, click.Group):
                walk(cmd, (*prefix, name))

    walk(cli, ())
    return paths


@pytest.mark.parametrize("path", all_commands(), ids=" ".join)
def test_every_command_has_help_with_examples(loch: Loch, path: tuple[str, ...]) -> None:
    run = loch.ok(*path, "--help")
    assert run.stdout.startswith(f"Usage: loch {' '.join(path)}")
    assert "Examples:" in run.stdout


def test_root_help_documents_exit_codes_refs_and_completion(loch: Loch) -> None:
    out = loch.ok("--help").stdout
    assert "Exit codes:" in out
    for line in ("0  success", "1  the server refused", "2  usage error", "3  the server cannot"):
        assert line in out
    assert 'eval "$(_LOCH_COMPLETE=bash_source loch)"' in out
    assert "LOCH_URI" in out and "LOCH_REF" in out
    verbs = ("branch", "tag", "log", "diff", "merge", "cherry-pick", "content", "show")
    for verb in (*verbs, "notifications"):
        assert re.search(rf"^  {verb}\s", out, re.MULTILINE), verb
    assert re.search(r"^  serve\s", out, re.MULTILINE)


def test_version(loch: Loch) -> None:
    assert re.match(r"loch, version \d+\.\d+", loch.ok("--version").stdout)


def test_unreachable_server_exits_3_with_one_line(loch: Loch) -> None:
    run = loch.process("--uri", "http://127.0.0.1:9/api/v2", "branch", "list")
    assert run.code == 3
    assert run.stdout == ""
    first, *rest = run.stderr.splitlines()
    assert first.startswith("loch: error: Cannot reach http://127.0.0.1:9/api/v2")
    assert "Traceback" not in run.stderr
    assert len(rest) <= 1


def test_unreachable_server_json_error(loch: Loch) -> None:
    run = loch.process("--json", "log", env={"LOCH_URI": "http://127.0.0.1:9/api/v2"})
    assert run.code == 3
    error = json.loads(run.stdout)["error"]
    assert error["exitCode"] == 3
    assert error["errorCode"] == "SERVICE_UNAVAILABLE"
    assert error["httpStatus"] is None
    assert "Cannot reach" in error["message"]


def test_timeout_exits_3(loch: Loch) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)  # accepts connections, never answers
        uri = f"http://127.0.0.1:{s.getsockname()[1]}/api/v2"
        run = loch("--uri", uri, "--timeout", "0.3", "branch", "list")
    assert run.code == 3
    assert run.stderr.startswith(f"loch: error: Timed out talking to {uri}")
    assert "start it with `loch serve`" in run.stderr


def test_debug_adds_the_traceback(loch: Loch) -> None:
    run = loch.process("--debug", "--uri", "http://127.0.0.1:9/api/v2", "config")
    assert run.code == 3
    assert "Traceback (most recent call last)" in run.stderr
    assert "loch: error: Cannot reach" in run.stderr


def test_server_errors_exit_1_without_traceback(loch: Loch) -> None:
    run = loch.process("log", "no-such-branch")
    assert run.code == 1
    assert run.stdout == ""
    assert run.stderr == "loch: error: Named reference 'no-such-branch' not found\n"


def test_json_error_object_on_stdout(loch: Loch) -> None:
    run = loch("--json", "show", "no-such-branch")
    assert run.code == 1
    assert json.loads(run.stdout) == {
        "error": {
            "errorCode": "REFERENCE_NOT_FOUND",
            "message": "Named reference 'no-such-branch' not found",
            "exitCode": 1,
            "httpStatus": 404,
        }
    }


def test_wrong_uri_path_hints_at_the_api_base(loch: Loch) -> None:
    base = loch.uri.removesuffix("/api/v2")
    run = loch("--uri", base, "branch", "list")
    assert run.code == 1
    assert f"is {base} the server's API v2 base URI" in run.stderr
    error = loch("--json", "--uri", base, "config").json()["error"]
    assert (error["errorCode"], error["httpStatus"], error["exitCode"]) == ("UNKNOWN", 404, 1)


def test_usage_errors_exit_2(loch: Loch) -> None:
    assert loch("--uri", "ftp://x", "config").code == 2
    assert loch("no-such-command").code == 2
    assert loch("log", "--no-such-option").code == 2
    run = loch.process("log", "main~x")
    assert run.code == 2
    assert "is not a relative part" in run.stderr
    assert loch("log", "@nothex").code == 2
    assert loch("log", "bad..name").code == 2
    assert loch("--ref", "a@b@c", "log").code == 2


def test_loch_ref_sets_the_default_reference(loch: Loch, client: LochClient) -> None:
    name = fresh_name()
    client.create_branch(name, from_ref="main")
    put_table(client, name, ("only_on_branch",), "s3://x")
    run = loch("content", "list", env={"LOCH_REF": name})
    assert run.code == 0
    assert run.stdout.split()[0] == "only_on_branch"
    assert "only_on_branch" in loch.ok("--ref", name, "content", "list").stdout
    keys = [e["name"]["elements"] for e in loch.json("content", "list")]
    assert ["only_on_branch"] not in keys


def test_plain_output_has_no_escape_codes_and_color_always_has(loch: Loch) -> None:
    plain = loch.ok("branch", "list")
    assert not ANSI.search(plain.stdout)
    rich = loch.ok("--color", "always", "branch", "list")
    assert ANSI.search(rich.stdout)
    assert "Name" in ANSI.sub("", rich.stdout)  # a table with a header
    assert "Fetching references" in ANSI.sub("", rich.stderr)  # progress on stderr


def _on_a_terminal(loch: Loch, *args: str) -> str:
    """Run ``loch ARGS`` as a subprocess whose stdout and stderr are a pseudo-terminal."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOCH_", "NO_COLOR"))}
    env.update({"LOCH_URI": loch.uri, "COLUMNS": "200", "TERM": "xterm-256color"})
    proc = subprocess.Popen([LOCH, *args], stdout=follower, stderr=follower, env=env)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO once the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(timeout=60) == 0
    return b"".join(chunks).decode()


def test_terminal_gets_tables_and_colour(loch: Loch) -> None:
    out = _on_a_terminal(loch, "branch", "list")
    assert ANSI.search(out)
    assert re.search(r"Name\s+Hash", ANSI.sub("", out))


def test_color_never_on_a_terminal_keeps_tables_without_colour(loch: Loch) -> None:
    out = _on_a_terminal(loch, "--color", "never", "config")
    assert re.search(r"Setting\s+Value\s+Source", out)
    assert not re.search(r"\x1b\[[0-9;]*m", out)  # no SGR (colour) sequences
    assert not ANSI.search(loch.ok("--color", "never", "config").stdout)


def test_json_flag_global_and_per_command_agree(loch: Loch) -> None:
    assert loch.ok("--json", "branch", "list").json() == loch.ok("branch", "list", "--json").json()


def test_completion_script_and_candidates(loch: Loch, client: LochClient) -> None:
    script = loch.process(env={"_LOCH_COMPLETE": "bash_source"})
    assert script.code == 0
    assert "_loch_completion" in script.stdout
    name = fresh_name("compl")
    client.create_branch(name, from_ref="main")
    put_table(client, name, ("compl_ns", "tbl"), "s3://c")
    words = loch.process(
        env={"_LOCH_COMPLETE": "bash_complete", "COMP_WORDS": "loch log compl", "COMP_CWORD": "2"}
    )
    assert f"plain,{name}" in words.stdout.splitlines()
    keys = loch.process(
        env={
            "_LOCH_COMPLETE": "bash_complete",
            "COMP_WORDS": f"loch content view --ref {name} compl_ns.",
            "COMP_CWORD": "5",
        }
    )
    assert keys.stdout.splitlines() == ["plain,compl_ns.tbl"]
    verbs = loch.process(
        env={"_LOCH_COMPLETE": "bash_complete", "COMP_WORDS": "loch che", "COMP_CWORD": "1"}
    )
    assert verbs.stdout.splitlines() == ["plain,cherry-pick"]


def test_completion_is_quiet_without_a_server(loch: Loch) -> None:
    run = loch.process(
        env={
            "LOCH_URI": "http://127.0.0.1:9/api/v2",
            "_LOCH_COMPLETE": "bash_complete",
            "COMP_WORDS": "loch log ",
            "COMP_CWORD": "2",
        }
    )
    assert run.code == 0
    assert run.stdout.strip() == "" and run.stderr == ""


def test_serve_is_still_registered(loch: Loch) -> None:
    assert "--store" in loch.ok("serve", "--help").stdout
