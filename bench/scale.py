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

Reported per size: build time, number of build commits, database size, and the median
(plus p90) latency of every operation; then the ratio of each median at every size to
the smallest size. Results go to ``bench/results/scale.json``.

Usage: ``python -m bench.scale [--sizes 1000,10000,100000] [--repeat 100] [--batch 20000]``

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
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from loch.backends import open_store
from loch.model.keys import Key
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
        self.branches = 0
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

    def sample(self, name: str) -> int:
        """One timed run of operation ``name`` on the open store."""
        assert self.vs is not None
        op: Callable[[VersionStore], int] = getattr(self, f"op_{name}")
        return op(self.vs)


def measure(benches: list[Bench], repeat: int) -> dict[int, dict[str, OpStats]]:
    """Time every operation ``repeat`` times at every size, on reopened stores.

    The sizes take turns within each round (in shuffled order), so that drifts of the
    machine (disk flush latency, other load) hit all sizes alike.
    """
    order = random.Random(0)
    samples: dict[int, dict[str, list[int]]] = {b.size: {} for b in benches}
    for b in benches:
        b.open()
    try:
        for name in OPERATIONS:
            for b in benches:
                for _ in range(WARMUP):
                    b.sample(name)
            gc.collect()
            for _ in range(repeat):
                for b in order.sample(benches, len(benches)):
                    samples[b.size].setdefault(name, []).append(b.sample(name))
    finally:
        for b in benches:
            b.close()
    return {
        size: {name: OpStats.of(ns) for name, ns in ops.items()}
        for size, ops in samples.items()
    }


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
    for name in OPERATIONS:
        out[name] = {
            str(r.keys): r.ops[name].median_ms / base.ops[name].median_ms
            for r in results
            if r is not base
        }
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
    for name in OPERATIONS:
        row = [name]
        row += [f"{r.ops[name].median_ms:.3f}" for r in results]
        row += [f"{r.ops[name].median_ms / base.ops[name].median_ms:.2f}x" for r in results[1:]]
        rows.append(row)
    rows.append(["p90 commit ms", *[f"{r.ops['commit'].p90_ms:.3f}" for r in results]])
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


def loch_revision() -> dict[str, Any]:
    """The git commit of the checkout, and whether ``loch/`` has local changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "loch"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "loch_modified": None}
    return {"commit": head, "loch_modified": bool(dirty)}


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
    commit_ratio = (
        results[-1].ops["commit"].median_ms / results[0].ops["commit"].median_ms
        if len(results) > 1
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
        "revision": loch_revision(),
        "settings": {
            "sizes": sizes,
            "repeat": args.repeat,
            "batch": args.batch,
            "seed": args.seed,
            "tables_per_namespace": TABLES_PER_NAMESPACE,
            "changed_keys": CHANGED_KEYS,
        },
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "results": {str(r.keys): asdict(r) for r in results},
        "ratios_to_smallest": ratios(results),
        "target": {
            "commit_median_ratio": commit_ratio,
            "limit": 1.5,
            "met": None if commit_ratio is None else commit_ratio <= 1.5,
        },
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table_text(results))
    if commit_ratio is not None:
        verdict = "met" if commit_ratio <= 1.5 else "NOT met"
        print(
            f"\ncommit latency {_fmt_size(sizes[-1])}/{_fmt_size(sizes[0])} = "
            f"{commit_ratio:.2f}x (target <= 1.5x: {verdict})"
        )
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
