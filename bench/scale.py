"""Scale benchmark: the same operations on a branch of 1,000 and of 1,000,000 keys.

For each size a SQLite file store in a temporary directory gets a ``main`` branch with
``size`` ICEBERG_TABLE keys ``("ns%03d", "t%07d")`` (1,000 tables per namespace; the
namespaces are committed first), built in large batched commits. The store is then
reopened (so the build's object cache does not flatter the reads) and each operation is
timed ``--repeat`` times after a short warm-up, the sizes taking turns:

``commit``
    a single-key update commit (correct content id, current HEAD as expected hash);
``get_content``
    one content read at HEAD, random key;
``get_content_cold``
    the same on a freshly opened store (empty object cache, OS page cache warm);
``entries_prefix``
    the first page (``max_records=100``) of the entries under one namespace;
``diff_10``
    diff between ``main`` and a branch that changed 10 keys;
``merge_10``
    merge of such a branch into ``main``.

Users do not call the VersionStore but the Nessie REST API v2, so the same operations are
then measured over HTTP (``--no-http`` skips them): once every in-process store is closed,
a ``loch serve`` process is started on each size's SQLite file (object cache empty at
start, warmed by the warm-up like the in-process ops; all of them run for the whole HTTP
phase, and only the server writes to its file meanwhile), and one keep-alive
``httpx.Client`` per server times the request alone (body encoded before, response parsed
after; setup requests such as reading the head or content ids go through the API too,
untimed). The sizes take turns as for the in-process ops:

``http_commit``
    ``POST /api/v2/trees/main@{hash}/history/commit``, one PUT updating an existing table
    (with its content id);
``http_get_content``
    ``GET /api/v2/trees/main/contents/{key}``, random key;
``http_entries_prefix``
    ``GET /api/v2/trees/main/entries?prefix-key={ns}&max-records=100``;
``http_diff_10``
    ``GET /api/v2/trees/@{base}/diff/{branch}`` for a branch that changed 10 keys;
``http_merge_10``
    ``POST /api/v2/trees/main@{base}/history/merge`` of such a branch
    (``fromRefName``/``fromHash``).

Reported per size: build time, number of build commits, database size, the median (plus
p90) latency of every operation and the server's peak RSS; then the ratio of each median
at every size to the smallest size. The result file also carries a ``figures`` list (each
operation at the largest size against the smallest, in-process then HTTP; the target
ratio <= 1.5 applies to both kinds when the largest size is 1M keys or more). Results go
to ``bench/results/scale.json``.

Usage: ``python -m bench.scale [--sizes 1000,10000,100000] [--repeat 100] [--batch 20000]
[--no-http]``

``make bench`` runs the default sizes; building the 1M-key repository takes 2 to 3
minutes more than that budget allows, so the 1M point is a command of its own:
``python -m bench.scale --sizes 1000,10000,100000,1000000 --out bench/results/scale-1m.json``.

Commit latency on a disk is mostly the ``fsync`` of ``synchronous=FULL``, which varies
with the disk and its other load; ``--dir /dev/shm`` (tmpfs, where a flush costs
nothing) shows how the rest of the commit scales.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shlex
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bench.common import Server, peak_rss_mb, revision, serving
from loch.backends import open_store
from loch.model.keys import Key, encode_escaped
from loch.store import Persist
from loch.versioning import KeyRange, Put, VersionStore

TABLES_PER_NAMESPACE = 1000
CHANGED_KEYS = 10
WARMUP = 5
RESULTS = Path(__file__).with_name("results") / "scale.json"

OPERATIONS = [
    "commit",
    "get_content",
    "get_content_cold",
    "entries_prefix",
    "diff_10",
    "merge_10",
]

HTTP_OPERATIONS = [
    "http_commit",
    "http_get_content",
    "http_entries_prefix",
    "http_diff_10",
    "http_merge_10",
]

TARGET_LIMIT = 1.5
TARGET_MIN_SIZE = 1_000_000  # the target is for 1M keys against 1k
V2 = "/api/v2"
JSON_HEADERS = {"Content-Type": "application/json"}


def namespace(i: int) -> str:
    """The namespace of the ``i``-th table."""
    return f"ns{i // TABLES_PER_NAMESPACE:03d}"


def table_key(i: int) -> Key:
    """The key of the ``i``-th table."""
    return (namespace(i), f"t{i:07d}")


def table(snapshot: int, cid: str | None = None) -> dict[str, Any]:
    """An ICEBERG_TABLE content (with its content id when updating)."""
    content: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://warehouse/tables/{snapshot:08d}/metadata.json",
        "snapshotId": snapshot,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    if cid is not None:
        content["id"] = cid
    return content


def path_key(key: Key) -> str:
    """A key in Nessie's path form (elements joined by '.', escaped when needed), quoted
    for a URL path segment."""
    return quote(encode_escaped(key), safe="")


def key_json(key: Key) -> dict[str, Any]:
    """A key in its JSON form."""
    return {"elements": list(key)}


class HttpError(RuntimeError):
    """A request of the benchmark answered with an unexpected status."""


def checked(r: httpx.Response) -> Any:
    """The JSON body of a successful response; a non-2xx status is an error of the server
    (the benchmark's requests are all valid), raised with the body."""
    if not r.is_success:
        raise HttpError(f"{r.request.method} {r.request.url} -> {r.status_code}: {r.text[:1000]}")
    return r.json()


@dataclass
class OpStats:
    """Latencies of one operation, in milliseconds."""

    n: int
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float

    @classmethod
    def of(cls, samples_ns: list[int]) -> OpStats:
        ms = sorted(s / 1e6 for s in samples_ns)
        p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
        return cls(len(ms), statistics.median(ms), p90, ms[0], ms[-1])


@dataclass
class SizeResult:
    """Everything measured at one repository size."""

    keys: int
    namespaces: int
    build_commits: int
    build_s: float
    db_bytes: int
    ops: dict[str, OpStats] = field(default_factory=dict)
    server_peak_rss_mb: float | None = None


class Bench:
    """One repository of ``size`` keys and the timed operations on it."""

    def __init__(self, directory: Path, size: int, batch: int, seed: int) -> None:
        self.db = directory / f"scale-{size}.db"
        self.url = f"sqlite:///{self.db}"
        self.size = size
        self.batch = batch
        self.rng = random.Random(seed)
        self.namespaces = (size + TABLES_PER_NAMESPACE - 1) // TABLES_PER_NAMESPACE
        self.persist: Persist | None = None
        self.vs: VersionStore | None = None
        self.server: Server | None = None
        self.client: httpx.Client | None = None
        self.last: httpx.Response | None = None
        self.branches = 0
        self.http_branches = 0
        self.snapshot = size

    # -- setup ----------------------------------------------------------------------------

    def build(self) -> tuple[int, float]:
        """Commit the namespaces, then the tables in batches; (commits, seconds)."""
        persist = open_store(self.url)
        try:
            vs = VersionStore(persist)
            started = time.perf_counter()
            head = vs.get_reference("main").hash
            commits = 0
            ns_names = [f"ns{n:03d}" for n in range(self.namespaces)]
            for start in range(0, len(ns_names), self.batch):
                ops = [
                    Put((ns,), {"type": "NAMESPACE", "elements": [ns]})
                    for ns in ns_names[start : start + self.batch]
                ]
                head = vs.commit("main", head, {"message": "namespaces"}, ops).hash
                commits += 1
            for start in range(0, self.size, self.batch):
                stop = min(self.size, start + self.batch)
                ops = [Put(table_key(i), table(i)) for i in range(start, stop)]
                head = vs.commit("main", head, {"message": f"tables {start}-{stop}"}, ops).hash
                commits += 1
            return commits, time.perf_counter() - started
        finally:
            persist.close()

    def db_bytes(self) -> int:
        """Size of the database after a full WAL checkpoint."""
        conn = sqlite3.connect(self.db)
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        total = 0
        for suffix in ("", "-wal", "-shm"):
            p = Path(f"{self.db}{suffix}")
            if p.exists():
                total += p.stat().st_size
        return total

    def open(self) -> None:
        """Open the built store afresh (empty object cache) for measuring."""
        self.persist = open_store(self.url)
        self.vs = VersionStore(self.persist)

    def close(self) -> None:
        if self.persist is not None:
            self.persist.close()
        self.persist = None
        self.vs = None

    # -- helpers ----------------------------------------------------------------------------

    def random_index(self) -> int:
        return self.rng.randrange(self.size)

    def update_ops(self, vs: VersionStore, head: str, count: int) -> list[Put]:
        """Updates (with their content ids) of ``count`` distinct random tables."""
        ops = []
        for i in self.rng.sample(range(self.size), count):
            key = table_key(i)
            cid = vs.get_content(head, key).content["id"]
            self.snapshot += 1
            ops.append(Put(key, table(self.snapshot, cid)))
        return ops

    def changed_branch(self, vs: VersionStore, count: int) -> tuple[str, str, str]:
        """A new branch at ``main`` with ``count`` tables changed: (name, base, head)."""
        base = vs.get_reference("main").hash
        self.branches += 1
        name = f"bench-{self.branches}"
        vs.create_reference(name, "BRANCH", base)
        ops = self.update_ops(vs, base, count)
        head = vs.commit(name, base, {"message": f"change {count} tables"}, ops).hash
        return name, base, head

    # -- operations: each returns the nanoseconds of the timed call -----------------------

    def op_commit(self, vs: VersionStore) -> int:
        head = vs.get_reference("main").hash
        ops = self.update_ops(vs, head, 1)
        t0 = time.perf_counter_ns()
        vs.commit("main", head, {"message": "update one table"}, ops)
        return time.perf_counter_ns() - t0

    def op_get_content(self, vs: VersionStore) -> int:
        head = vs.get_reference("main").hash
        key = table_key(self.random_index())
        t0 = time.perf_counter_ns()
        value = vs.get_content(head, key)
        elapsed = time.perf_counter_ns() - t0
        assert value.content["type"] == "ICEBERG_TABLE"
        return elapsed

    def op_get_content_cold(self, vs: VersionStore) -> int:
        head = vs.get_reference("main").hash
        key = table_key(self.random_index())
        persist = open_store(self.url)
        try:
            fresh = VersionStore(persist)
            t0 = time.perf_counter_ns()
            value = fresh.get_content(head, key)
            elapsed = time.perf_counter_ns() - t0
        finally:
            persist.close()
        assert value.content["type"] == "ICEBERG_TABLE"
        return elapsed

    def op_entries_prefix(self, vs: VersionStore) -> int:
        head = vs.get_reference("main").hash
        ns = namespace(self.random_index())
        t0 = time.perf_counter_ns()
        page = vs.entries(head, KeyRange(prefix=(ns,)), max_records=100)
        elapsed = time.perf_counter_ns() - t0
        assert page.items and all(k[0] == ns for k, _ in page.items)
        return elapsed

    def op_diff_10(self, vs: VersionStore) -> int:
        _, base, head = self.changed_branch(vs, CHANGED_KEYS)
        t0 = time.perf_counter_ns()
        page = vs.diff(base, head)
        elapsed = time.perf_counter_ns() - t0
        assert len(page.items) == CHANGED_KEYS
        return elapsed

    def op_merge_10(self, vs: VersionStore) -> int:
        name, base, head = self.changed_branch(vs, CHANGED_KEYS)
        t0 = time.perf_counter_ns()
        result = vs.merge("main", base, name, head)
        elapsed = time.perf_counter_ns() - t0
        assert result.was_applied
        return elapsed

    # -- HTTP: a ``loch serve`` process on the same file ------------------------------------

    @contextmanager
    def serving(self, log_dir: Path) -> Iterator[Server]:
        """A ``loch serve`` process on this size's file (the store must be closed) and one
        keep-alive client to it, for the duration of a ``with`` block."""
        assert self.persist is None, "close the in-process store before serving its file"
        log = log_dir / f"serve-{self.size}.log"
        with (
            serving(self.url, log) as server,
            httpx.Client(base_url=server.url, timeout=600) as client,
        ):
            self.server, self.client = server, client
            try:
                yield server
            finally:
                self.server, self.client = None, None

    def send(self, method: str, path: str, body: Any = None, **params: Any) -> int:
        """Send one request and return the nanoseconds of the send alone (the body is
        encoded before, the response is left in :attr:`last` to be parsed after)."""
        assert self.client is not None
        content = None if body is None else json.dumps(body).encode()
        request = self.client.build_request(
            method,
            path,
            params=params or None,
            content=content,
            headers=JSON_HEADERS if content is not None else None,
        )
        t0 = time.perf_counter_ns()
        response = self.client.send(request)
        elapsed = time.perf_counter_ns() - t0
        self.last = response
        return elapsed

    def call(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        """An untimed request; its JSON body."""
        self.send(method, path, body, **params)
        return self.body()

    def body(self) -> Any:
        """The JSON body of the last response (an error unless it succeeded)."""
        assert self.last is not None
        return checked(self.last)

    def http_head(self, branch: str = "main") -> str:
        h: str = self.call("GET", f"{V2}/trees/{branch}")["reference"]["hash"]
        return h

    def http_update_ops(self, ref: str, count: int) -> list[dict[str, Any]]:
        """PUT operations (with content ids, read over HTTP) of ``count`` random tables."""
        keys = [table_key(i) for i in self.rng.sample(range(self.size), count)]
        got = self.call(
            "POST", f"{V2}/trees/{ref}/contents", {"requestedKeys": [key_json(k) for k in keys]}
        )
        cids = {tuple(c["key"]["elements"]): c["content"]["id"] for c in got["contents"]}
        ops = []
        for key in keys:
            self.snapshot += 1
            ops.append(
                {"type": "PUT", "key": key_json(key), "content": table(self.snapshot, cids[key])}
            )
        return ops

    def http_changed_branch(self, count: int) -> tuple[str, str, str]:
        """A new branch at ``main`` with ``count`` tables changed, all over HTTP:
        (name, base, head)."""
        base = self.http_head()
        self.http_branches += 1
        name = f"http-bench-{self.http_branches}"
        self.call(
            "POST",
            f"{V2}/trees",
            {"type": "BRANCH", "name": "main", "hash": base},
            name=name,
            type="BRANCH",
        )
        ops = self.http_update_ops(f"main@{base}", count)
        got = self.call(
            "POST",
            f"{V2}/trees/{name}@{base}/history/commit",
            {"commitMeta": {"message": f"change {count} tables"}, "operations": ops},
        )
        head: str = got["targetBranch"]["hash"]
        return name, base, head

    # -- HTTP operations: each returns the nanoseconds of the timed request ---------------

    def op_http_commit(self) -> int:
        head = self.http_head()
        ops = self.http_update_ops(f"main@{head}", 1)
        body = {"commitMeta": {"message": "update one table"}, "operations": ops}
        elapsed = self.send("POST", f"{V2}/trees/main@{head}/history/commit", body)
        got = self.body()
        assert got["targetBranch"]["hash"] != head
        return elapsed

    def op_http_get_content(self) -> int:
        key = table_key(self.random_index())
        elapsed = self.send("GET", f"{V2}/trees/main/contents/{path_key(key)}")
        assert self.body()["content"]["type"] == "ICEBERG_TABLE"
        return elapsed

    def op_http_entries_prefix(self) -> int:
        ns = namespace(self.random_index())
        elapsed = self.send(
            "GET", f"{V2}/trees/main/entries", **{"prefix-key": ns, "max-records": 100}
        )
        entries = self.body()["entries"]
        assert entries and all(e["name"]["elements"][0] == ns for e in entries)
        assert len(entries) <= 100
        return elapsed

    def op_http_diff_10(self) -> int:
        name, base, _ = self.http_changed_branch(CHANGED_KEYS)
        elapsed = self.send("GET", f"{V2}/trees/@{base}/diff/{name}")
        assert len(self.body()["diffs"]) == CHANGED_KEYS
        return elapsed

    def op_http_merge_10(self) -> int:
        name, base, head = self.http_changed_branch(CHANGED_KEYS)
        body = {"fromRefName": name, "fromHash": head}
        elapsed = self.send("POST", f"{V2}/trees/main@{base}/history/merge", body)
        assert self.body()["wasApplied"] is True
        return elapsed

    def sample(self, name: str) -> int:
        """One timed run of operation ``name`` on the open store (``http_*``: on the
        server)."""
        if name.startswith("http_"):
            assert self.client is not None
            http_op: Callable[[], int] = getattr(self, f"op_{name}")
            return http_op()
        assert self.vs is not None
        op: Callable[[VersionStore], int] = getattr(self, f"op_{name}")
        return op(self.vs)


def run_ops(
    benches: list[Bench], operations: list[str], repeat: int
) -> dict[int, dict[str, OpStats]]:
    """Time each operation ``repeat`` times at every size after a warm-up.

    The sizes take turns within each round (in shuffled order), so that drifts of the
    machine (disk flush latency, other load) hit all sizes alike.
    """
    order = random.Random(0)
    samples: dict[int, dict[str, list[int]]] = {b.size: {} for b in benches}
    for name in operations:
        for b in benches:
            for _ in range(WARMUP):
                b.sample(name)
        gc.collect()
        for _ in range(repeat):
            for b in order.sample(benches, len(benches)):
                samples[b.size].setdefault(name, []).append(b.sample(name))
    return {
        size: {name: OpStats.of(ns) for name, ns in ops.items()}
        for size, ops in samples.items()
    }


def measure(benches: list[Bench], repeat: int) -> dict[int, dict[str, OpStats]]:
    """Time every in-process operation at every size, on reopened stores (closed after)."""
    for b in benches:
        b.open()
    try:
        return run_ops(benches, OPERATIONS, repeat)
    finally:
        for b in benches:
            b.close()


def measure_http(
    benches: list[Bench], repeat: int, log_dir: Path
) -> tuple[dict[int, dict[str, OpStats]], dict[int, float]]:
    """Time every HTTP operation at every size, each size on a ``loch serve`` process of
    its own started on its (closed) file; all servers run for the whole phase. Returns the
    statistics and each server's peak RSS (MB)."""
    with ExitStack() as stack:
        try:
            for b in benches:
                print(f"[{b.size:,} keys] starting loch serve ...", file=sys.stderr, flush=True)
                stack.enter_context(b.serving(log_dir))
            stats = run_ops(benches, HTTP_OPERATIONS, repeat)
            rss = {}
            for b in benches:
                assert b.server is not None
                rss[b.size] = peak_rss_mb(b.server.pid)
            return stats, rss
        except Exception:
            for log in sorted(log_dir.glob("serve-*.log")):
                tail = log.read_text(errors="replace")[-3000:]
                if tail.strip():
                    print(f"--- {log.name} (tail)\n{tail}", file=sys.stderr, flush=True)
            raise


def build_size(directory: Path, size: int, batch: int, seed: int) -> tuple[Bench, SizeResult]:
    """Build the repository of ``size`` keys (measured later)."""
    b = Bench(directory, size, batch, seed)
    print(f"[{size:,} keys] building ...", file=sys.stderr, flush=True)
    commits, build_s = b.build()
    db_bytes = b.db_bytes()
    print(
        f"[{size:,} keys] built in {build_s:.1f} s, {commits} commits, "
        f"{db_bytes / 1e6:.1f} MB",
        file=sys.stderr,
        flush=True,
    )
    gc.collect()
    return b, SizeResult(size, b.namespaces, commits, build_s, db_bytes)


def ratios(results: list[SizeResult]) -> dict[str, dict[str, float]]:
    """Each operation's median at every size divided by that at the smallest size."""
    base = min(results, key=lambda r: r.keys)
    out: dict[str, dict[str, float]] = {}
    for name in [op for op in OPERATIONS + HTTP_OPERATIONS if op in base.ops]:
        out[name] = {
            str(r.keys): r.ops[name].median_ms / base.ops[name].median_ms
            for r in results
            if r is not base
        }
    return out


def figures(report: dict[str, Any], results: list[SizeResult]) -> list[dict[str, Any]]:
    """Each operation at the largest size against the smallest: the in-process figures
    exactly as :func:`bench.report.scale_figures` derives them, then the HTTP ones with the
    same target (ratio <= 1.5 when the largest size is 1M keys or more) and the server's
    peak RSS on ``http_commit``."""
    from bench.report import SCALE_OPS, scale_figures

    largest = max(results, key=lambda r: r.keys)
    out = []
    for f in scale_figures(report):
        op = f["name"].split(" at ", 1)[0]
        if op.startswith("http_"):
            target = op.removeprefix("http_") in SCALE_OPS and largest.keys >= TARGET_MIN_SIZE
            f["target"] = f"ratio <= {TARGET_LIMIT}" if target else None
            f["met"] = (f["ratio"] <= TARGET_LIMIT) if target else None
            f["peak_rss_mb"] = largest.server_peak_rss_mb if op == "http_commit" else None
        out.append(f)
    return out


def _fmt_size(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def table_text(results: list[SizeResult]) -> str:
    """The results side by side as a text table."""
    results = sorted(results, key=lambda r: r.keys)
    base = results[0]
    heads = [_fmt_size(r.keys) for r in results]
    cols = ["operation (median ms)", *heads]
    cols += [f"{h}/{heads[0]}" for h in heads[1:]]
    rows: list[list[str]] = []
    for name in [op for op in OPERATIONS + HTTP_OPERATIONS if op in base.ops]:
        row = [name]
        row += [f"{r.ops[name].median_ms:.3f}" for r in results]
        row += [f"{r.ops[name].median_ms / base.ops[name].median_ms:.2f}x" for r in results[1:]]
        rows.append(row)
    rows.append(["p90 commit ms", *[f"{r.ops['commit'].p90_ms:.3f}" for r in results]])
    if "http_commit" in base.ops:
        rows.append(
            ["p90 http_commit ms", *[f"{r.ops['http_commit'].p90_ms:.3f}" for r in results]]
        )
        rows.append(["server peak RSS MB", *[f"{r.server_peak_rss_mb or 0:.0f}" for r in results]])
    rows.append(["build s", *[f"{r.build_s:.1f}" for r in results]])
    rows.append(["build commits", *[str(r.build_commits) for r in results]])
    rows.append(["db MB", *[f"{r.db_bytes / 1e6:.1f}" for r in results]])
    rows.append(["db bytes/key", *[f"{r.db_bytes / r.keys:.0f}" for r in results]])
    widths = [max(len(c), *(len(row[i]) for row in rows if i < len(row))) for i, c in
              enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for row in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.split("\n")[0])
    p.add_argument(
        "--sizes",
        default="1000,10000,100000",
        help="comma-separated key counts (default: 1000,10000,100000)",
    )
    p.add_argument("--repeat", type=int, default=100, help="timed runs per operation")
    p.add_argument("--batch", type=int, default=20_000, help="puts per build commit")
    p.add_argument("--seed", type=int, default=1, help="random seed for key choice")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    p.add_argument(
        "--no-http",
        dest="http",
        action="store_false",
        help="skip the HTTP operations (loch serve on each file)",
    )
    # ``python -m bench`` hands every benchmark the same arguments: ignore the others'
    args, unknown = p.parse_known_args(argv)
    if unknown:
        print(f"bench.scale: ignoring {' '.join(unknown)}", file=sys.stderr)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sorted({int(s.replace("_", "")) for s in args.sizes.split(",") if s.strip()})
    if not sizes or min(sizes) < CHANGED_KEYS or args.repeat < 1 or args.batch < 1:
        print("sizes must be >= 10, repeat and batch >= 1", file=sys.stderr)
        return 2
    load_before = os.getloadavg()
    results: list[SizeResult] = []
    benches: list[Bench] = []
    with tempfile.TemporaryDirectory(prefix="loch-bench-", dir=args.dir) as tmp:
        for size in sizes:
            b, r = build_size(Path(tmp), size, args.batch, args.seed)
            benches.append(b)
            results.append(r)
        print("measuring ...", file=sys.stderr, flush=True)
        measured = measure(benches, args.repeat)
        for r in results:
            r.ops = measured[r.keys]
        if args.http:
            print("measuring over HTTP ...", file=sys.stderr, flush=True)
            http, server_rss = measure_http(benches, args.repeat, Path(tmp))
            for r in results:
                r.ops.update(http[r.keys])
                r.server_peak_rss_mb = server_rss[r.keys]
    commit_ratio = (
        results[-1].ops["commit"].median_ms / results[0].ops["commit"].median_ms
        if len(results) > 1
        else None
    )
    http_commit_ratio = (
        results[-1].ops["http_commit"].median_ms / results[0].ops["http_commit"].median_ms
        if len(results) > 1 and args.http
        else None
    )
    report: dict[str, Any] = {
        "benchmark": "scale",
        "command": shlex.join([os.path.basename(sys.executable), "-m", "bench.scale",
                               *(argv if argv is not None else sys.argv[1:])]),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "revision": revision(),
        "settings": {
            "sizes": sizes,
            "repeat": args.repeat,
            "batch": args.batch,
            "seed": args.seed,
            "tables_per_namespace": TABLES_PER_NAMESPACE,
            "changed_keys": CHANGED_KEYS,
            "http": args.http,
        },
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "results": {str(r.keys): asdict(r) for r in results},
        "ratios_to_smallest": ratios(results),
        "target": {
            "commit_median_ratio": commit_ratio,
            "limit": TARGET_LIMIT,
            "met": None if commit_ratio is None else commit_ratio <= TARGET_LIMIT,
        },
        "http_target": {
            "http_commit_median_ratio": http_commit_ratio,
            "limit": TARGET_LIMIT,
            "met": None if http_commit_ratio is None else http_commit_ratio <= TARGET_LIMIT,
        },
    }
    report["figures"] = figures(report, results)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table_text(results))
    if commit_ratio is not None:
        verdict = "met" if commit_ratio <= TARGET_LIMIT else "NOT met"
        print(
            f"\ncommit latency {_fmt_size(sizes[-1])}/{_fmt_size(sizes[0])} = "
            f"{commit_ratio:.2f}x (target <= {TARGET_LIMIT}x: {verdict})"
        )
    if http_commit_ratio is not None:
        verdict = "met" if http_commit_ratio <= TARGET_LIMIT else "NOT met"
        print(
            f"http_commit latency {_fmt_size(sizes[-1])}/{_fmt_size(sizes[0])} = "
            f"{http_commit_ratio:.2f}x (target <= {TARGET_LIMIT}x: {verdict})"
        )
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
