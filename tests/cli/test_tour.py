"""The README's "## Tour" runs as written against a fresh ``loch serve`` process.

Every ``loch`` line of its ``sh`` blocks runs as a real subprocess with ``LOCH_URI`` set to the
test server (``loch serve`` lines are the server itself, which the fixture starts). A line may
end in ``# exits N`` to expect that exit code, else 0. ``python`` blocks are executed with the
default URI replaced by the test server's. A ``text`` block right after an ``sh`` block is the
exact stdout of that block's last command. So the README cannot drift from the CLI.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from loch.client import DEFAULT_URI

from .conftest import Loch, loch_serve

README = Path(__file__).resolve().parents[2] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
_EXITS = re.compile(r"#\s*exits\s+(\d+)\s*$")


@dataclass
class Block:
    """One fenced code block of the tour."""

    lang: str
    text: str


def tour_blocks() -> list[Block]:
    """The fenced blocks of the README's Tour section, in order."""
    readme = README.read_text(encoding="utf-8")
    start = readme.index("\n## Tour\n")
    end = readme.find("\n## ", start + 1)
    section = readme[start : end if end != -1 else None]
    return [Block(m.group(1), m.group(2)) for m in _FENCE.finditer(section)]


def commands(block: Block) -> Iterator[tuple[list[str], int]]:
    """The commands of an ``sh`` block (continuations joined) with their expected exit codes."""
    for line in block.text.replace("\\\n", " ").splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _EXITS.search(line)
        yield shlex.split(line, comments=True), int(m.group(1)) if m else 0


@pytest.fixture(scope="module")
def tour_loch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Loch]:
    """``loch`` against a server of its own: the tour starts from an empty repository."""
    with loch_serve(tmp_path_factory.mktemp("tour")) as uri:
        yield Loch(uri)


def test_tour_has_the_promised_steps() -> None:
    blocks = tour_blocks()
    lines = [" ".join(argv) for b in blocks if b.lang == "sh" for argv, _ in commands(b)]
    assert any(line.startswith("loch serve") for line in lines)
    for verb in ("branch create", "diff", "merge", "log"):
        assert any(line.startswith(f"loch {verb}") for line in lines), verb
    assert any(b.lang == "python" and "LochClient" in b.text for b in blocks)
    assert all(line.startswith("loch ") for line in lines), lines


def test_tour_runs(tour_loch: Loch) -> None:
    ran = 0
    last: tuple[str, str] | None = None  # command and its stdout
    for block in tour_blocks():
        if block.lang == "sh":
            for argv, expected in commands(block):
                assert argv[0] == "loch"
                if argv[1] == "serve":
                    continue
                run = tour_loch.process(*argv[1:])
                shown = " ".join(argv)
                assert run.code == expected, f"{shown} exited {run.code}:\n{run.stderr}"
                if expected == 0:
                    assert run.stderr == "", f"{shown} wrote to stderr:\n{run.stderr}"
                else:
                    assert run.stderr.startswith("loch: error: "), run.stderr
                    assert "Traceback" not in run.stderr
                last = (shown, run.stdout)
                ran += 1
        elif block.lang == "python":
            code = block.text.replace(DEFAULT_URI, tour_loch.uri)
            exec(compile(code, f"{README}:tour", "exec"), {"__name__": "tour"})
        elif block.lang == "text":
            assert last is not None, "an output block must follow a command"
            shown, stdout = last
            got = [line.rstrip() for line in stdout.splitlines()]
            assert got == block.text.splitlines(), f"output of {shown}"
    assert ran >= 15
