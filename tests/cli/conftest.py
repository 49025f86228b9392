"""Fixtures of the command-line tests: a real ``loch serve`` process and ways to run ``loch``.

The server runs once per session on a free port with an SQLite store in a temporary
directory. Tests do not depend on each other: each one works on branches with unique names
(:func:`fresh_name`) created from wherever it needs. Commands run in-process through click's
``CliRunner`` (fast), or as real subprocesses where the exit code and the streams of the
installed ``loch`` script matter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from loch.cli.main import cli
from loch.client import LochClient

LOCH = str(Path(sys.prefix) / "bin" / "loch")
NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
UNKNOWN_HASH = "ab" * 32
# variables of the user's shell that would change what the commands do
_CLEAN_ENV = ("LOCH_URI", "LOCH_REF", "LOCH_COLOR", "LOCH_DEBUG", "LOCH_TOKEN", "NO_COLOR")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _healthy(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def loch_serve(tmp: Path) -> Iterator[str]:
    """Run ``loch serve`` on a free port with an SQLite store in ``tmp``; yield the v2 URI."""
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = tmp / "serve.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [LOCH, "serve", "--port", str(port), "--store", f"sqlite:///{tmp}/c.db"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 30
            while not _healthy(base):
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"loch serve did not start:\n{log_path.read_text()}")
                time.sleep(0.05)
            yield f"{base}/api/v2"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API v2 URI of a ``loch serve`` process shared by the session."""
    with loch_serve(tmp_path_factory.mktemp("cli-server")) as uri:
        yield uri


@pytest.fixture
def client(server: str) -> Iterator[LochClient]:
    """A Python client of :func:`server`, for setting up state."""
    with LochClient(server) as c:
        yield c


def fresh_name(prefix: str = "t") -> str:
    """A reference name no other test uses."""
    return f"{prefix or 'r'}_{uuid.uuid4().hex[:10]}"


@dataclass
class Run:
    """What one ``loch`` invocation did."""

    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """Stdout parsed as JSON."""
        return json.loads(self.stdout)


class Loch:
    """Runs ``loch`` against one server, in-process or as a subprocess."""

    def __init__(self, uri: str) -> None:
        self.uri = uri

    def env(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str | None]:
        """Environment of an invocation: ``LOCH_URI`` set, other ``LOCH_*`` cleared."""
        env: dict[str, str | None] = dict.fromkeys(_CLEAN_ENV)
        env["LOCH_URI"] = self.uri
        env.update(extra or {})
        return env

    def __call__(
        self, *args: str, input: str | None = None, env: Mapping[str, str | None] | None = None
    ) -> Run:
        """Run ``loch ARGS`` in-process (click's CliRunner)."""
        result = CliRunner().invoke(
            cli,
            list(args),
            input=input,
            env=self.env(env),
            prog_name="loch",
            catch_exceptions=False,
        )
        return Run(result.exit_code, result.stdout, result.stderr)

    def ok(self, *args: str, input: str | None = None) -> Run:
        """Run and require exit code 0."""
        run = self(*args, input=input)
        assert run.code == 0, f"loch {' '.join(args)} exited {run.code}:\n{run.stderr}"
        return run

    def json(self, *args: str, input: str | None = None) -> Any:
        """Run with ``--json``, require success, and return the parsed stdout."""
        return self.ok("--json", *args, input=input).json()

    def process(
        self, *args: str, input: str | None = None, env: Mapping[str, str | None] | None = None
    ) -> Run:
        """Run the installed ``loch`` script as a real subprocess."""
        full = {k: v for k, v in os.environ.items() if k not in _CLEAN_ENV}
        full.update({k: v for k, v in self.env(env).items() if v is not None})
        proc = subprocess.run(
            [LOCH, *args], input=input, capture_output=True, text=True, env=full, timeout=60
        )
        return Run(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def loch(server: str) -> Loch:
    """Runs ``loch`` against the session's server."""
    return Loch(server)


@pytest.fixture
def branch(client: LochClient) -> str:
    """A new branch at the head of ``main``."""
    name = fresh_name("b")
    client.create_branch(name, from_ref="main")
    return name


def put_table(
    client: LochClient, branch: str, key: tuple[str, ...], location: str, message: str = "put"
) -> str:
    """Commit an Iceberg table pointer (and its namespaces) on ``branch``; return the hash."""
    head = client.get_reference(branch).hash
    assert head is not None
    present = client.get_contents(f"{branch}@{head}", [key[:i] for i in range(1, len(key) + 1)])
    builder = client.commit_builder(branch, head)
    for i in range(1, len(key)):
        if key[:i] not in present:
            builder.put(key[:i], {"type": "NAMESPACE", "elements": list(key[:i])})
    content: dict[str, Any] = {"type": "ICEBERG_TABLE", "metadataLocation": location}
    if key in present:
        content["id"] = present[key]["id"]
    return builder.put(key, content).commit(message).hash
