"""Spark catalog overhead: the same Iceberg append job on a HadoopCatalog and on Loch.

One SparkSession (``local[2]``) gets two Iceberg catalogs over the same kind of local
warehouse directory:

``hadoop``
    Iceberg's file-based ``HadoopCatalog``: table metadata and the current version live
    in the warehouse (``version-hint.text``), no server;
``loch``
    Iceberg's ``NessieCatalog`` against a ``loch serve`` process started for the run
    (SQLite store in the temporary directory unless ``--store``).

In each catalog a table ``bench.t (id BIGINT, payload STRING)`` is created, then each
catalog takes ``--appends`` small appends (``INSERT INTO … VALUES`` of ``--rows`` rows),
the two catalogs alternating append by append so that load on a shared machine hits both
alike; ``--warmup`` appends per catalog run first, untimed, in a table of their own. A
final ``SELECT count(*)`` checks that every row landed.

Reported per catalog: median, p90, min and total of the append latency, table creation
time, and for Loch the HTTP requests per append (from the server's access log). The
ratio loch/hadoop of the medians and totals is the catalog overhead of a Spark append.
Results go to ``bench/results/spark_catalog.json``.

Usage: ``python -m bench.spark_catalog [--appends 50] [--rows 10] [--warmup 5]``
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import command, free_port, log, machine, parse_known, revision

RESULTS = Path(__file__).with_name("results") / "spark_catalog.json"
CATALOGS = ("hadoop", "loch")


@dataclass
class Stats:
    """Latencies of one kind of operation, in milliseconds."""

    n: int
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    total_s: float

    @classmethod
    def of(cls, samples_s: list[float]) -> Stats:
        ms = sorted(s * 1000 for s in samples_s)
        p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
        return cls(len(ms), statistics.median(ms), p90, ms[0], ms[-1], sum(samples_s))


class LochServer:
    """A ``loch serve`` process with its access log in a file (unlike
    :class:`bench.common.Server`, which turns it off): requests are counted from it."""

    def __init__(self, workdir: Path, store: str | None) -> None:
        import httpx

        self.port = free_port()
        self.log = workdir / "server.log"
        loch = shutil.which("loch", path=str(Path(sys.executable).parent)) or "loch"
        cmd = [loch, "serve", "--port", str(self.port)]
        cmd += ["--store", store or f"sqlite:///{workdir / 'loch.db'}"]
        with open(self.log, "wb") as out:
            env = {k: v for k, v in os.environ.items() if not k.startswith("LOCH_")}
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loch serve exited: {self.log.read_text()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"loch serve did not start: {self.log.read_text()}")
            time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def requests(self) -> int:
        """Requests logged so far."""
        with open(self.log, "rb") as f:
            return sum(1 for line in f if b'HTTP/1.1" ' in line)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _sql(spark: Any, query: str) -> list[Any]:
    with warnings.catch_warnings():  # py4j leaves result sockets to the GC
        warnings.simplefilter("ignore", ResourceWarning)
        rows: list[Any] = spark.sql(query).collect()
        return rows


def _values(start: int, rows: int) -> str:
    return ", ".join(f"({i}, 'payload-{i:08d}')" for i in range(start, start + rows))


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Start the server and Spark, run the job on both catalogs, return the report."""
    from loch.spark import build_session

    server = LochServer(workdir, args.store)
    spark = None
    try:
        spark = build_session(
            server.url,
            workdir / "loch-warehouse",
            catalog="loch",
            conf={
                "spark.sql.catalog.hadoop": "org.apache.iceberg.spark.SparkCatalog",
                "spark.sql.catalog.hadoop.type": "hadoop",
                "spark.sql.catalog.hadoop.warehouse": (workdir / "hadoop-warehouse").as_uri(),
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.warehouse.dir": str(workdir / "spark-warehouse"),
            },
            app_name="loch-bench-spark-catalog",
        )
        spark.sparkContext.setLogLevel("ERROR")
        log("spark_catalog: warming up ...")
        create: dict[str, float] = {}
        for cat in CATALOGS:
            _sql(spark, f"CREATE NAMESPACE IF NOT EXISTS {cat}.bench")
            _sql(
                spark, f"CREATE TABLE {cat}.bench.warmup (id BIGINT, payload STRING) USING iceberg"
            )
            for i in range(args.warmup):
                _sql(
                    spark,
                    f"INSERT INTO {cat}.bench.warmup VALUES {_values(i * args.rows, args.rows)}",
                )
            t0 = time.perf_counter()
            _sql(spark, f"CREATE TABLE {cat}.bench.t (id BIGINT, payload STRING) USING iceberg")
            create[cat] = time.perf_counter() - t0

        log(f"spark_catalog: measuring {args.appends} appends per catalog ...")
        samples: dict[str, list[float]] = {cat: [] for cat in CATALOGS}
        requests: list[int] = []
        for i in range(args.appends):
            values = _values(i * args.rows, args.rows)
            order = CATALOGS if i % 2 == 0 else tuple(reversed(CATALOGS))
            for cat in order:
                before = server.requests() if cat == "loch" else 0
                t0 = time.perf_counter()
                _sql(spark, f"INSERT INTO {cat}.bench.t VALUES {values}")
                samples[cat].append(time.perf_counter() - t0)
                if cat == "loch":
                    requests.append(server.requests() - before)

        counts = {
            cat: int(_sql(spark, f"SELECT count(*) AS n FROM {cat}.bench.t")[0]["n"])
            for cat in CATALOGS
        }
        expected = args.appends * args.rows
        if any(n != expected for n in counts.values()):
            raise RuntimeError(f"rows lost: {counts}, expected {expected} in each")
        stats = {cat: Stats.of(samples[cat]) for cat in CATALOGS}
        spark_version = spark.version
    finally:
        if spark is not None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ResourceWarning)
                spark.stop()
                gc.collect()
        server.stop()

    return {
        "spark": spark_version,
        "appends": {cat: asdict(s) for cat, s in stats.items()},
        "create_table_ms": {cat: create[cat] * 1000 for cat in CATALOGS},
        "rows_checked": counts,
        "loch_requests_per_append": {
            "median": statistics.median(requests),
            "min": min(requests),
            "max": max(requests),
        },
        "ratio_loch_to_hadoop": {
            "median": stats["loch"].median_ms / stats["hadoop"].median_ms,
            "p90": stats["loch"].p90_ms / stats["hadoop"].p90_ms,
            "total": stats["loch"].total_s / stats["hadoop"].total_s,
            "create_table": create["loch"] / create["hadoop"],
        },
        "overhead_ms_per_append": stats["loch"].median_ms - stats["hadoop"].median_ms,
    }


def table_text(result: dict[str, Any]) -> str:
    """The two catalogs side by side as a text table."""
    a = result["appends"]
    ratio = result["ratio_loch_to_hadoop"]
    lines = [
        ["", "hadoop", "loch", "loch/hadoop"],
        [
            "append median ms",
            *(f"{a[c]['median_ms']:.1f}" for c in CATALOGS),
            f"{ratio['median']:.2f}x",
        ],
        ["append p90 ms", *(f"{a[c]['p90_ms']:.1f}" for c in CATALOGS), f"{ratio['p90']:.2f}x"],
        ["append min ms", *(f"{a[c]['min_ms']:.1f}" for c in CATALOGS), ""],
        [
            "appends total s",
            *(f"{a[c]['total_s']:.2f}" for c in CATALOGS),
            f"{ratio['total']:.2f}x",
        ],
        [
            "create table ms",
            *(f"{result['create_table_ms'][c]:.1f}" for c in CATALOGS),
            f"{ratio['create_table']:.2f}x",
        ],
        ["requests/append", "-", f"{result['loch_requests_per_append']['median']:g}", ""],
    ]
    widths = [max(len(row[i]) for row in lines) for i in range(4)]
    out = []
    for n, row in enumerate(lines):
        out.append(
            "  ".join(
                cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                for i, cell in enumerate(row)
            )
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.spark_catalog", description=__doc__.split("\n")[0]
    )
    p.add_argument("--appends", type=int, default=50, help="timed appends per catalog")
    p.add_argument("--rows", type=int, default=10, help="rows per append")
    p.add_argument("--warmup", type=int, default=5, help="untimed appends per catalog first")
    p.add_argument("--store", default=None, help="store URL of the server (default: SQLite)")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.appends < 1 or args.rows < 1 or args.warmup < 0:
        print("appends and rows must be >= 1, warmup >= 0", file=sys.stderr)
        return 2
    if importlib.util.find_spec("pyspark") is None or shutil.which("java") is None:
        log("spark_catalog: skipped (needs pyspark and Java 17)")
        return 0
    before = machine()
    with tempfile.TemporaryDirectory(prefix="loch-bench-spark-", dir=args.dir) as tmp:
        result = run(args, Path(tmp))
    report: dict[str, Any] = {
        "benchmark": "spark_catalog",
        "command": command("bench.spark_catalog", argv),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": before,
        "loadavg_after": machine()["loadavg"],
        "revision": revision(),
        "settings": {
            "appends": args.appends,
            "rows": args.rows,
            "warmup": args.warmup,
            "store": args.store or "sqlite (temporary file)",
            "spark_master": "local[2]",
        },
        **result,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table_text(result))
    print(
        f"\nLoch's catalog overhead per append: {result['overhead_ms_per_append']:+.1f} ms "
        f"(median), ratio {result['ratio_loch_to_hadoop']['median']:.2f}x; "
        f"results in {args.out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
