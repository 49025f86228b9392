"""Schemathesis fuzz of ``/openapi.json`` against a real ``loch serve``: every operation
of the published schema, with generated valid and invalid inputs (coverage, fuzzing
and stateful phases), must never answer 5xx, and the server must log no unhandled error.

Runs the ``schemathesis`` command of this environment (skipped when it is not
installed). ``LOCH_FUZZ_EXAMPLES`` raises the examples per operation (default 10,
about 15 s; 50 takes about two minutes) and ``LOCH_FUZZ_SEED`` picks the seed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from .helpers import live_server

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def statuses(ndjson: Path) -> Counter[int]:
    """HTTP status codes of every response recorded in a schemathesis NDJSON report."""
    found: Counter[int] = Counter()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            code = node.get("status_code")
            if isinstance(code, int) and "elapsed" in node:
                found[code] += 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for line in ndjson.read_text().splitlines():
        walk(json.loads(line))
    return found


@pytest.mark.skipif(not SCHEMATHESIS.exists(), reason="schemathesis is not installed")
def test_schemathesis_finds_no_server_errors(tmp_path: Path) -> None:
    examples = os.environ.get("LOCH_FUZZ_EXAMPLES", "10")
    seed = os.environ.get("LOCH_FUZZ_SEED", "1")
    report = tmp_path / "report.ndjson"
    server_log = tmp_path / "server.log"
    with live_server(f"sqlite:///{tmp_path / 'fuzz.db'}", server_log) as server:
        run = subprocess.run(
            [
                str(SCHEMATHESIS),
                "run",
                f"{server.url}/openapi.json",
                "--checks",
                "not_a_server_error",
                "--max-examples",
                examples,
                "--seed",
                seed,
                "--workers",
                "1",
                "--generation-database",
                "none",
                "--no-color",
                "--report",
                "ndjson",
                "--report-ndjson-path",
                str(report),
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    out = run.stdout[-6000:] + run.stderr[-2000:]
    found = statuses(report)
    total = sum(found.values())
    server_errors = {code: n for code, n in found.items() if code >= 500}
    assert total >= 500, (found, out)
    assert server_errors == {}, out
    assert "Unhandled error" not in server_log.read_text(), server_log.read_text()[-6000:]
    assert run.returncode == 0, out
