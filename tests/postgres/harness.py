"""Replicas and clients of the PostgreSQL tests.

:class:`Replica` is a :class:`~loch.testing.server.LochServer` running ``loch serve
--port P --store <postgresql://…>`` (started, SIGKILLed and restarted on the same port).
The helpers below build Nessie v2 request bodies, walk a branch's whole log with paging
and check that it is a linear first-parent chain, and check Nessie's error body.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Self, TypeVar, cast
from urllib.parse import quote

import httpx

from loch.testing.server import LochServer

T = TypeVar("T")

NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
V2 = "/api/v2"
SPEC2 = {"Nessie-Client-Spec": "2"}
ERROR_FIELDS = {"status", "reason", "message", "errorCode", "serverStackTrace"}


def wait_until(
    check: Callable[[], bool], timeout: float, what: str, interval: float = 0.05
) -> None:
    """Poll ``check`` until it is true; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


class Replica(LochServer):
    """One ``loch serve`` replica on a loopback port kept across restarts (``--log-level
    warning``, ``LOCH_STORE`` unset); its log marks each start with a ``--- start N``
    line."""

    def __init__(self, name: str, store_url: str, log_dir: Path, port: int | None = None) -> None:
        super().__init__(
            store_url,
            log_dir / f"{name}.log",
            port=port or None,
            log_level="warning",
            env={"LOCH_STORE": None},
            name=name,
            ready_timeout=60.0,
            interval=0.1,
        )

    def spawn(self) -> Self:
        """Mark the start in the log, then start the process without waiting for it."""
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} at {time.time():.3f}\n".encode())
        return super().spawn()


def start_replicas(n: int, store_url: str, log_dir: Path, timeout: float = 90.0) -> list[Replica]:
    """Spawn ``n`` replicas at once, then wait until all serve."""
    replicas = [Replica(f"replica{i}", store_url, log_dir).spawn() for i in range(n)]
    try:
        for r in replicas:
            r.wait_ready(timeout)
    except BaseException:
        for r in replicas:
            r.kill()
        raise
    return replicas


# -- request bodies --------------------------------------------------------------------------


def enc(text: str) -> str:
    """Percent-encode a path parameter like the Java client (nothing safe)."""
    return quote(text, safe="")


def key(*elements: str) -> dict[str, Any]:
    """A ContentKey."""
    return {"elements": list(elements)}


def table(location: str, id: str | None = None, snapshot_id: int = 1) -> dict[str, Any]:
    """ICEBERG_TABLE content (``id`` None for a new table)."""
    return {
        "type": "ICEBERG_TABLE",
        "id": id,
        "metadataLocation": location,
        "snapshotId": snapshot_id,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


def put(elements: Sequence[str], content: dict[str, Any]) -> dict[str, Any]:
    """A PUT operation."""
    return {"type": "PUT", "key": key(*elements), "content": content}


def commit_path(branch: str, expected: str) -> str:
    """Path of a commit to ``branch`` at ``expected``."""
    return f"{V2}/trees/{enc(branch + '@' + expected)}/history/commit"


def merge_path(branch: str, expected: str) -> str:
    """Path of a merge into ``branch`` at ``expected``."""
    return f"{V2}/trees/{enc(branch + '@' + expected)}/history/merge"


def commit_body(message: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    """A v2 commit request body."""
    return {"commitMeta": {"message": message}, "operations": ops}


# -- reads -----------------------------------------------------------------------------------


def ok(resp: httpx.Response) -> Any:
    """The JSON body of a 200 (fails with the body otherwise)."""
    assert resp.status_code == 200, (resp.request.method, resp.request.url, resp.text)
    return resp.json()


def head(http: httpx.Client, base: str, branch: str) -> str:
    """The HEAD hash of ``branch``."""
    return str(ok(http.get(f"{base}{V2}/trees/{enc(branch)}"))["reference"]["hash"])


def create_branch(http: httpx.Client, base: str, name: str, source_hash: str = NO_ANCESTOR) -> None:
    """Create ``name`` at ``source_hash``."""
    resp = http.post(
        f"{base}{V2}/trees",
        params={"name": name, "type": "BRANCH"},
        json={"type": "BRANCH", "name": "main", "hash": source_hash},
    )
    ok(resp)


def walk_log(
    http: httpx.Client,
    base: str | Sequence[str],
    ref: str,
    fetch_all: bool = False,
    page: int = 100,
) -> list[dict[str, Any]]:
    """Every log entry of ``ref`` (newest first), page by page (from each base URL in
    turn when given several: page tokens must work on every replica)."""
    bases = [base] if isinstance(base, str) else list(base)
    entries: list[dict[str, Any]] = []
    token: str | None = None
    for n in itertools.count():
        params: dict[str, Any] = {"max-records": page}
        if fetch_all:
            params["fetch"] = "ALL"
        if token is not None:
            params["page-token"] = token
        url = f"{bases[n % len(bases)]}{V2}/trees/{enc(ref)}/history"
        body = ok(http.get(url, params=params))
        entries.extend(body["logEntries"])
        if not body.get("hasMore"):
            return entries
        token = body["token"]
        assert token, "hasMore without a token"
    raise AssertionError("unreachable")


def assert_linear(entries: list[dict[str, Any]], head_hash: str) -> None:
    """The log starts at ``head_hash``, each entry's parent is the next entry, the last
    one's parent is the no-ancestor hash, and no hash appears twice."""
    hashes = [e["commitMeta"]["hash"] for e in entries]
    assert len(set(hashes)) == len(hashes), "a commit appears twice in the log"
    if not entries:
        assert head_hash == NO_ANCESTOR
        return
    assert hashes[0] == head_hash
    for i, e in enumerate(entries):
        parent = hashes[i + 1] if i + 1 < len(entries) else NO_ANCESTOR
        assert e["parentCommitHash"] == parent, (i, e["commitMeta"], parent)
        parents = e["commitMeta"].get("parentCommitHashes") or [e["parentCommitHash"]]
        assert parents[0] == parent, (i, e["commitMeta"])


def contents(http: httpx.Client, base: str, ref: str, keys: list[list[str]]) -> dict[str, Any]:
    """Contents of ``keys`` at ``ref`` by dotted key (absent keys left out)."""
    body = ok(
        http.post(
            f"{base}{V2}/trees/{enc(ref)}/contents",
            json={"requestedKeys": [key(*k) for k in keys]},
        )
    )
    return {".".join(c["key"]["elements"]): c["content"] for c in body["contents"]}


def entries(
    http: httpx.Client, base: str | Sequence[str], ref: str, page: int = 500
) -> dict[str, Any]:
    """Every entry of ``ref`` with its content, by dotted key (pages from each base URL
    in turn when given several)."""
    bases = [base] if isinstance(base, str) else list(base)
    out: dict[str, Any] = {}
    token: str | None = None
    for n in itertools.count():
        params: dict[str, Any] = {"content": "true", "max-records": page}
        if token is not None:
            params["page-token"] = token
        url = f"{bases[n % len(bases)]}{V2}/trees/{enc(ref)}/entries"
        body = ok(http.get(url, params=params))
        for e in body["entries"]:
            assert e["content"]["id"] == e["contentId"], e
            assert e["content"]["type"] == e["type"], e
            out[".".join(e["name"]["elements"])] = e["content"]
        if not body.get("hasMore"):
            return out
        token = body["token"]
        assert token, "hasMore without a token"
    raise AssertionError("unreachable")


def assert_nessie_error(resp: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """A NessieError body with this status and error code; returns it."""
    assert resp.status_code == status, (resp.status_code, resp.text)
    assert resp.headers.get("content-type", "").startswith("application/json"), resp.headers
    body: dict[str, Any] = resp.json()
    assert set(body) >= ERROR_FIELDS, body
    assert body["status"] == status, body
    assert body["errorCode"] == code, body
    assert isinstance(body["message"], str) and body["message"], body
    return body


# -- databases and threads -------------------------------------------------------------------


def reset_database(url: str) -> None:
    """Drop every table (as ``tests/conftest.py``'s ``reset_postgres``): the next
    replica on ``url`` starts from an empty schema."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


def run_threads(n: int, fn: Callable[[int], T], timeout: float) -> list[T]:
    """Run ``fn(0) … fn(n-1)`` on ``n`` threads at once; their results in order.

    An exception in a thread is re-raised here (after every thread ended), and a thread
    still running after ``timeout`` seconds fails the caller.
    """
    results: list[T | None] = [None] * n
    errors: list[BaseException] = []

    def body(i: int) -> None:
        try:
            results[i] = fn(i)
        except BaseException as e:  # re-raised by the caller
            errors.append(e)

    threads = [threading.Thread(target=body, args=(i,), name=f"client{i}") for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t.name for t in threads if t.is_alive()]
    assert not stuck, f"threads still running after {timeout:g} s: {stuck}"
    if errors:
        raise errors[0]
    return cast(list[T], results)


class RoundRobin:
    """One client's HTTP connection pool, sending its ``i``-th request to replica
    ``(offset + i) % len(replicas)`` (replicas are looked up per request, so a replica
    restarted on another port is followed)."""

    def __init__(self, replicas: Sequence[Replica], offset: int, timeout: float = 30.0) -> None:
        self.replicas = replicas
        self.n = offset
        self.http = httpx.Client(timeout=timeout, headers=SPEC2)

    def __enter__(self) -> RoundRobin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def next(self) -> Replica:
        """The replica of the next request."""
        r = self.replicas[self.n % len(self.replicas)]
        self.n += 1
        return r

    def commit(
        self, branch: str, expected: str, message: str, ops: list[dict[str, Any]]
    ) -> httpx.Response:
        """POST a commit to the next replica."""
        url = self.next().url + commit_path(branch, expected)
        return self.http.post(url, json=commit_body(message, ops))

    def merge(
        self, branch: str, expected: str, source: str, source_hash: str, message: str
    ) -> httpx.Response:
        """POST a merge of ``source@source_hash`` into ``branch`` to the next replica."""
        body = {"fromRefName": source, "fromHash": source_hash, "commitMeta": {"message": message}}
        return self.http.post(self.next().url + merge_path(branch, expected), json=body)

    def head(self, branch: str) -> str:
        """HEAD of ``branch`` read through the next replica."""
        return head(self.http, self.next().url, branch)
