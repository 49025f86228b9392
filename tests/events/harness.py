"""Processes and helpers of the notification tests.

:class:`Receiver` runs ``receiver.py`` (a stdlib HTTP server that logs every request as
a JSON line); :func:`webhook_server` makes a :class:`~loch.testing.server.LochServer`
that runs ``loch serve`` on an SQLite file with fast webhook retry settings. Both bind
port 0 and learn the port they got, so nothing depends on a fixed port. :class:`Client`
wraps the few Nessie v2 and notification calls the tests make over a real HTTP connection.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from loch.testing.server import LochServer as LochServer  # re-exported: the tests annotate with it
from loch.testing.server import end_process

RECEIVER = Path(__file__).with_name("receiver.py")
NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
KINDS = (
    "commits",
    "merges",
    "transplants",
    "references-created",
    "references-deleted",
    "references-assigned",
)
FAST_WEBHOOKS = {
    "LOCH_WEBHOOK_BASE_BACKOFF": "0.05",
    "LOCH_WEBHOOK_MAX_BACKOFF": "0.5",
    "LOCH_WEBHOOK_TIMEOUT": "2",
}
"""Retry settings that keep the tests fast (seconds)."""


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, interval: float = 0.02
) -> None:
    """Poll ``check`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


# -- the receiver ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One request the receiver got."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: str
    answered: int

    @property
    def event(self) -> dict[str, Any]:
        """The JSON body."""
        value = json.loads(self.body)
        assert isinstance(value, dict), self.body
        return value

    def header(self, name: str) -> str | None:
        """A header, case-insensitively."""
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


class Receiver:
    """A ``receiver.py`` process; its log survives restarts (one file)."""

    def __init__(self, directory: Path, name: str, **behaviour: Any) -> None:
        self.dir = directory
        self.name = name
        self.out = directory / f"{name}.jsonl"
        self.out.touch()
        self.behaviour = behaviour
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """Where to POST (a path names the receiver, for readable logs)."""
        return f"http://127.0.0.1:{self.port}/hook/{self.name}"

    def start(self, port: int | None = None) -> Receiver:
        """Start listening on ``port`` (default: the previous port, or any free one)."""
        port_file = self.dir / f"{self.name}.port"
        port_file.unlink(missing_ok=True)
        args = [
            sys.executable,
            str(RECEIVER),
            "--out",
            str(self.out),
            "--port-file",
            str(port_file),
            "--port",
            str(self.port if port is None else port),
        ]
        for k, v in self.behaviour.items():
            args += [f"--{k.replace('_', '-')}", str(v)]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE)
        proc = self.proc

        def listening() -> bool:
            if proc.poll() is not None:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise AssertionError(f"receiver exited with {proc.returncode}: {err}")
            return port_file.exists()

        wait_until(listening, 10, f"receiver {self.name} to listen")
        self.port = int(port_file.read_text())
        return self

    def stop(self) -> None:
        """Stop listening (the port is closed until :meth:`start`)."""
        if self.proc is not None:
            end_process(self.proc, signal.SIGKILL, 10)
            if self.proc.stderr is not None:
                self.proc.stderr.close()
            self.proc = None

    def hits(self) -> list[Hit]:
        """Every request so far, in arrival order."""
        hits = []
        for line in self.out.read_text(encoding="utf-8").splitlines():
            if line.endswith("}"):  # a line being written has no end yet
                hits.append(Hit(**json.loads(line)))
        return hits

    def ok_hits(self) -> list[Hit]:
        """The requests answered 2xx."""
        return [h for h in self.hits() if 200 <= h.answered < 300]

    def events(self) -> list[dict[str, Any]]:
        """The bodies of the requests answered 2xx."""
        return [h.event for h in self.ok_hits()]

    def wait_events(self, count: int, timeout: float = 15.0) -> list[dict[str, Any]]:
        """Wait for at least ``count`` accepted events; all of them."""
        wait_until(
            lambda: len(self.ok_hits()) >= count,
            timeout,
            f"{count} events at {self.name} (have {len(self.ok_hits())})",
        )
        return self.events()


# -- the server --------------------------------------------------------------------------------


def webhook_server(db: Path, log: Path, env: dict[str, str] | None = None) -> LochServer:
    """A ``loch serve`` on the SQLite file ``db`` with :data:`FAST_WEBHOOKS` (and ``env``
    over them; ``LOCH_STORE`` unset), not yet started. It binds port 0 at each start and
    learns its port from the log, logs at info level, and is restartable on the same
    file; :meth:`~LochServer.stop` waits 20 s for a graceful exit."""
    return LochServer(
        f"sqlite:///{db}",
        log,
        port=0,
        log_level="info",
        env={"LOCH_STORE": None, **FAST_WEBHOOKS, **(env or {})},
        stop_timeout=20.0,
    )


# -- the client ------------------------------------------------------------------------------


def enc(text: str) -> str:
    """Percent-encode a path parameter (nothing safe)."""
    return quote(text, safe="")


def table(location: str, content_id: str | None = None) -> dict[str, Any]:
    """ICEBERG_TABLE content."""
    return {
        "type": "ICEBERG_TABLE",
        "id": content_id,
        "metadataLocation": location,
        "snapshotId": 1,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


def namespace(*elements: str) -> dict[str, Any]:
    """NAMESPACE content."""
    return {"type": "NAMESPACE", "elements": list(elements), "properties": {}}


def put(elements: tuple[str, ...] | list[str], content: dict[str, Any]) -> dict[str, Any]:
    """A PUT operation."""
    return {"type": "PUT", "key": {"elements": list(elements)}, "content": content}


def delete(elements: tuple[str, ...] | list[str]) -> dict[str, Any]:
    """A DELETE operation."""
    return {"type": "DELETE", "key": {"elements": list(elements)}}


def meta(message: str, **extra: Any) -> dict[str, Any]:
    """A v2 CommitMeta."""
    return {"message": message, "authors": ["alice"], **extra}


class Client:
    """Nessie v2 and notification calls over one ``httpx.Client``."""

    def __init__(self, http: httpx.Client) -> None:
        self.http = http

    @staticmethod
    def json(resp: httpx.Response, status: int = 200) -> dict[str, Any]:
        """The JSON body of a response that must have ``status``."""
        assert resp.status_code == status, (resp.status_code, resp.text)
        body = resp.json()
        assert isinstance(body, dict), body
        return body

    # -- notifications

    def subscribe(
        self, kind: str, url: str, secret: str | None = None, version: int = 2
    ) -> dict[str, Any]:
        """``POST /notifications/{kind}``; the created notification."""
        body: dict[str, Any] = {"type": "WEBHOOK", "url": url}
        if secret is not None:
            body["secret"] = secret
        resp = self.http.post(f"/api/v{version}/notifications/{kind}", json=body)
        return self.json(resp, 201)

    def subscribe_all(self, url: str, secret: str | None = None) -> dict[str, str]:
        """One notification per kind; kind → id."""
        return {k: str(self.subscribe(k, url, secret)["id"]) for k in KINDS}

    def deliveries(self, notification_id: str, **params: Any) -> list[dict[str, Any]]:
        """The delivery log of a notification (newest first)."""
        resp = self.http.get(f"/api/v2/notifications/{notification_id}/deliveries", params=params)
        items = self.json(resp)["deliveries"]
        assert isinstance(items, list)
        return items

    # -- the version store

    def ref(self, name: str = "main") -> dict[str, Any]:
        """A reference."""
        ref = self.json(self.http.get(f"/api/v2/trees/{enc(name)}"))["reference"]
        assert isinstance(ref, dict)
        return ref

    def head(self, name: str = "main") -> str:
        """The hash of a reference."""
        return str(self.ref(name)["hash"])

    def create(self, name: str, ref_type: str = "BRANCH", source: str = "main") -> dict[str, Any]:
        """Create a reference at ``source``'s HEAD."""
        src = {"type": "BRANCH", "name": source, "hash": self.head(source)}
        resp = self.http.post("/api/v2/trees", params={"name": name, "type": ref_type}, json=src)
        ref = self.json(resp)["reference"]
        assert isinstance(ref, dict)
        return ref

    def commit_resp(
        self, branch: str, expected: str, *ops: dict[str, Any], message: str = "commit"
    ) -> httpx.Response:
        """POST a commit; the raw response."""
        body = {"commitMeta": meta(message), "operations": list(ops)}
        return self.http.post(
            f"/api/v2/trees/{enc(branch + '@' + expected)}/history/commit", json=body
        )

    def commit(
        self, branch: str, *ops: dict[str, Any], message: str = "commit", expected: str = ""
    ) -> dict[str, Any]:
        """Commit at HEAD (or ``expected``); the CommitResponse."""
        resp = self.commit_resp(branch, expected or self.head(branch), *ops, message=message)
        return self.json(resp)

    def log(self, ref: str = "main") -> list[dict[str, Any]]:
        """The whole commit log of ``ref``, newest first."""
        entries: list[dict[str, Any]] = []
        token = None
        while True:
            params: dict[str, Any] = {"max-records": 1000}
            if token:
                params["page-token"] = token
            page = self.json(self.http.get(f"/api/v2/trees/{enc(ref)}/history", params=params))
            entries += page["logEntries"]
            token = page.get("token")
            if not page.get("hasMore"):
                return entries


@contextmanager
def client(server: LochServer, timeout: float = 10.0) -> Iterator[Client]:
    """A :class:`Client` on ``server``."""
    with httpx.Client(base_url=server.url, timeout=timeout) as http:
        yield Client(http)
