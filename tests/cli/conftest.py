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
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar

import pytest
from click.testing import CliRunner

from loch.cli.main import cli
from loch.client import LochClient
from loch.testing.server import LochServer

LOCH = str(Path(sys.prefix) / "bin" / "loch")
NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
UNKNOWN_HASH = "ab" * 32
# variables of the user's shell that would change what the commands do
_CLEAN_ENV = ("LOCH_URI", "LOCH_REF", "LOCH_COLOR", "LOCH_DEBUG", "LOCH_TOKEN", "NO_COLOR")


@contextmanager
def loch_serve(tmp: Path) -> Iterator[str]:
    """Run ``loch serve`` on a free port with an SQLite store in ``tmp``; yield the v2 URI."""
    with LochServer(f"sqlite:///{tmp}/c.db", tmp / "serve.log") as server:
        yield f"{server.url}/api/v2"


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


# -- a webhook receiver ----------------------------------------------------------------------

T = TypeVar("T")


def wait_until(
    probe: Callable[[], T | None], what: str, timeout: float = 30.0, interval: float = 0.05
) -> T:
    """Call ``probe`` until it returns something other than None (or fail after ``timeout``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


@dataclass(frozen=True)
class Received:
    """One request the receiver got."""

    method: str
    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body)


class Receiver:
    """A real HTTP server (``http.server``) on a free port, in a thread of the test process.

    It records every request and answers each path with the statuses planned for it by
    :meth:`answer`, one per request (the last one repeats; 204 if none is planned). GET
    answers an HTML page (a server that does not speak JSON).
    """

    def __init__(self) -> None:
        self.received: list[Received] = []
        self._plans: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver._record(
                    "POST", self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                receiver._record(
                    "GET", self.path, {k.lower(): v for k, v in self.headers.items()}, b""
                )
                page = b"<html><body>not an API</body></html>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep the test output clean

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port: int = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def _record(self, method: str, path: str, headers: dict[str, str], body: bytes) -> int:
        with self._lock:
            self.received.append(Received(method, path, headers, body))
            plan = self._plans.get(path) or [204]
            return plan.pop(0) if len(plan) > 1 else plan[0]

    def url(self, path: str = "/hook") -> str:
        """The URL of ``path`` on this receiver."""
        return f"http://127.0.0.1:{self.port}{path}"

    def answer(self, path: str, *statuses: int) -> None:
        """Answer the next requests to ``path`` with ``statuses``, in turn."""
        with self._lock:
            self._plans[path] = list(statuses)

    def posts(self, path: str | None = None) -> list[Received]:
        """The POSTs received so far (to ``path`` only, if given)."""
        with self._lock:
            return [r for r in self.received if r.method == "POST" and path in (None, r.path)]

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver running for one test."""
    r = Receiver()
    r.start()
    try:
        yield r
    finally:
        r.stop()
