"""Branch workflows and time travel against a real ``loch serve``, on small tables.

Each test uses namespaces and pipeline names of its own. What Spark and the workflow did
is checked on the server over the REST API.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .conftest import CATALOG, SPARK_MISSING, Server, rows

if SPARK_MISSING:
    pytest.skip(SPARK_MISSING, allow_module_level=True)

from pyspark.sql import SparkSession

from loch.errors import ReferenceNotFoundError
from loch.spark import (
    Audit,
    AuditFailed,
    BranchRun,
    MergeConflict,
    add_catalog,
    branch_workflow,
    read_at,
    resolve_timestamp,
    table_at,
)


def ids(spark: SparkSession, table: str) -> list[int]:
    return sorted(int(r["id"]) for r in rows(spark, f"SELECT id FROM {table}"))


def setup_table(spark: SparkSession, ns: str, *values: int) -> str:
    """``nessie.<ns>.t (id BIGINT)`` on main with ``values``."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.{ns}")
    spark.sql(f"CREATE TABLE {CATALOG}.{ns}.t (id BIGINT) USING iceberg")
    if values:
        spark.sql(f"INSERT INTO {CATALOG}.{ns}.t VALUES {', '.join(f'({v})' for v in values)}")
    return f"{CATALOG}.{ns}.t"


def test_publish_merges_with_the_run_named_on_the_commit(
    spark: SparkSession, server: Server
) -> None:
    setup_table(spark, "wf_pub", 1)
    fork = server.head("main")
    with branch_workflow(
        spark,
        pipeline="wf-pub",
        run_id="r1",
        message="publish wf_pub",
        properties={"source": "unit"},
        tag="wf-pub-1",
    ) as run:
        assert run.branch == "wf-pub/r1"
        assert run.fork_hash == fork
        assert server.head(run.branch) == fork
        assert run.catalog.startswith(f"{CATALOG}_wf_pub_r1_")
        spark.sql(f"INSERT INTO {run.table('wf_pub', 't')} VALUES (2), (3)")
        spark.sql(f"CREATE TABLE {run.table('wf_pub', 'u')} USING iceberg AS SELECT 7L AS id")
        assert server.head("main") == fork  # nothing published yet
        assert sorted(run.changed_keys()) == [("wf_pub", "t"), ("wf_pub", "u")]
        branch_head = run.head()

    assert run.state == "merged"
    assert run.base_before == fork
    assert run.merged_hash == server.head("main") != fork
    assert run.merge is not None and run.merge.was_applied
    assert run.branch_deleted and not server.has_ref("wf-pub/r1")
    assert server.head("wf-pub-1") == run.merged_hash

    entry = next(iter(server.client.log("main", page_size=1)))
    assert entry.meta.hash == run.merged_hash
    assert entry.meta.message == "publish wf_pub"
    assert entry.meta.properties == {
        "pipeline": ["wf-pub"],
        "pipeline.run-id": ["r1"],
        "pipeline.branch": ["wf-pub/r1"],
        "pipeline.branch-head": [branch_head],
        "source": ["unit"],
    }
    assert entry.meta.parents == [fork, branch_head]

    spark.sql(f"REFRESH TABLE {CATALOG}.wf_pub.t")
    assert ids(spark, f"{CATALOG}.wf_pub.t") == [1, 2, 3]
    assert ids(spark, f"{CATALOG}.wf_pub.u") == [7]


def test_failure_in_the_block_keeps_the_branch_and_main(
    spark: SparkSession, server: Server
) -> None:
    table = setup_table(spark, "wf_fail", 1)
    before = server.dump("main")
    with (
        pytest.raises(RuntimeError, match="transform broke"),
        branch_workflow(spark, pipeline="wf-fail", run_id="r1") as run,
    ):
        spark.sql(f"INSERT INTO {run.table('wf_fail', 't')} VALUES (2)")
        raise RuntimeError("transform broke")
    assert run.state == "failed"
    assert server.dump("main") == before
    assert server.has_ref("wf-fail/r1")
    assert ids(spark, table_at(table, "wf-fail/r1")) == [1, 2]
    assert ids(spark, table) == [1]


def test_audit_callback_rejects_and_main_stays_byte_for_byte(
    spark: SparkSession, server: Server
) -> None:
    table = setup_table(spark, "wf_audit", 1, 2)
    before = server.dump("main")
    seen: list[str] = []

    def audit(run: BranchRun) -> Audit:
        seen.append(run.branch)
        a = Audit()
        t = run.table("wf_audit", "t")
        a.equal("rows", int(run.spark.table(t).count()), 3)
        negatives = int(run.spark.table(t).where("id < 0").count())
        a.equal("no negative ids", negatives, 0)
        return a

    with (
        pytest.raises(AuditFailed) as info,
        branch_workflow(spark, pipeline="wf-audit", run_id="r1", audit=audit) as run,
    ):
        spark.sql(f"INSERT INTO {run.table('wf_audit', 't')} VALUES (-5)")
    err = info.value
    assert seen == ["wf-audit/r1"]
    assert err.branch == "wf-audit/r1"
    assert err.failures == ["no negative ids: FAILED (1, expected 0)"]
    assert "no negative ids" in str(err) and "kept" in str(err)
    assert run.state == "audit-failed"
    assert [c.passed for c in run.checks] == [True, False]

    assert server.dump("main") == before
    assert server.has_ref("wf-audit/r1")
    assert ids(spark, table_at(table, "wf-audit/r1")) == [-5, 1, 2]


@pytest.mark.parametrize("how", ["raise in block", "raise in callback", "return False"])
def test_other_ways_to_reject(spark: SparkSession, server: Server, how: str) -> None:
    ns = "wf_rej_" + how.replace(" ", "_")
    setup_table(spark, ns, 1)
    before = server.dump("main")

    def audit(run: BranchRun) -> bool:
        if how == "raise in callback":
            raise AuditFailed("callback says no", ["too few rows"])
        return how != "return False"

    with (
        pytest.raises(AuditFailed) as info,
        branch_workflow(spark, pipeline=ns, run_id="r", audit=audit) as run,
    ):
        spark.sql(f"INSERT INTO {run.table(ns, 't')} VALUES (2)")
        if how == "raise in block":
            raise AuditFailed("block says no", ["row 2 is odd"])
    assert info.value.branch == f"{ns}/r"
    assert run.state == "audit-failed"
    assert server.dump("main") == before
    assert server.has_ref(f"{ns}/r")


def test_merge_conflict_lists_the_keys_and_keeps_the_branch(
    spark: SparkSession, server: Server
) -> None:
    table = setup_table(spark, "wf_conf", 1)
    spark.sql(f"CREATE TABLE {CATALOG}.wf_conf.calm (id BIGINT) USING iceberg")
    with (
        pytest.raises(MergeConflict) as info,
        branch_workflow(spark, pipeline="wf-conf", run_id="r1") as run,
    ):
        spark.sql(f"INSERT INTO {run.table('wf_conf', 't')} VALUES (2)")
        spark.sql(f"INSERT INTO {run.table('wf_conf', 'calm')} VALUES (5)")
        spark.sql(f"INSERT INTO {table} VALUES (3)")  # main moves on the same table
        main_before_merge = server.dump("main")
    err = info.value
    assert err.keys == [("wf_conf", "t")]
    assert "wf_conf.t" in str(err)
    assert err.branch == "wf-conf/r1" and err.base == "main"
    assert {c.key for c in err.conflicts} == {("wf_conf", "t")}
    assert run.state == "conflict"
    assert server.dump("main") == main_before_merge
    assert server.has_ref("wf-conf/r1")
    assert ids(spark, table_at(table, "wf-conf/r1")) == [1, 2]


def test_two_pipelines_on_two_branches_both_merge(spark: SparkSession, server: Server) -> None:
    """Two threads, each a workflow writing its own table in a namespace both create."""
    errors: list[BaseException] = []
    runs: dict[str, BranchRun] = {}
    both_written = threading.Barrier(2, timeout=120)

    def pipeline(name: str, values: list[int]) -> None:
        try:
            with branch_workflow(spark, pipeline=f"wf-two-{name}", run_id="r") as run:
                runs[name] = run
                spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {run.table('wf_two')}")
                spark.sql(f"CREATE TABLE {run.table('wf_two', name)} (id BIGINT) USING iceberg")
                for v in values:
                    spark.sql(f"INSERT INTO {run.table('wf_two', name)} VALUES ({v})")
                both_written.wait()  # both branches are written before either merges
        except BaseException as e:
            errors.append(e)
            both_written.abort()

    threads = [
        threading.Thread(target=pipeline, args=("a", [1, 2])),
        threading.Thread(target=pipeline, args=("b", [10, 20, 30])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(240)
    assert not errors, errors[0]
    assert runs["a"].fork_hash == runs["b"].fork_hash
    assert {r.state for r in runs.values()} == {"merged"}
    assert ids(spark, f"{CATALOG}.wf_two.a") == [1, 2]
    assert ids(spark, f"{CATALOG}.wf_two.b") == [10, 20, 30]
    merges = [e for e in server.client.log("main", page_size=2)][:2]
    assert sorted(e.meta.properties["pipeline"][0] for e in merges) == ["wf-two-a", "wf-two-b"]


def test_two_writers_on_one_table_of_a_branch_both_land(
    spark: SparkSession, server: Server, warehouse: object
) -> None:
    """Two threads append to one table of the run's branch, through the run's catalog and
    a second catalog on the same branch: Iceberg retries the commits Nessie rejects as
    conflicting, so every row lands, and the merge publishes them all."""
    setup_table(spark, "wf_writers")
    errors: list[BaseException] = []
    with branch_workflow(spark, pipeline="wf-writers", run_id="r1") as run:
        other = f"{run.catalog}_second"
        add_catalog(spark, other, run.uri, run.branch, run.warehouse)
        targets = [run.table("wf_writers", "t"), f"{other}.wf_writers.t"]

        def write(target: str, base: int) -> None:
            try:
                for i in range(5):
                    spark.sql(f"INSERT INTO {target} VALUES ({base + i})")
            except BaseException as e:
                errors.append(e)

        threads = [
            threading.Thread(target=write, args=(t, 100 * (n + 1))) for n, t in enumerate(targets)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(240)
        assert not errors, errors[0]
        appends = []
        for e in server.client.log(run.branch):
            if e.meta.hash == run.fork_hash:
                break
            appends.append(e.meta.message)
        assert appends == ["Iceberg append against wf_writers.t"] * 10
    expected = [100, 101, 102, 103, 104, 200, 201, 202, 203, 204]
    spark.sql(f"REFRESH TABLE {CATALOG}.wf_writers.t")
    assert ids(spark, f"{CATALOG}.wf_writers.t") == expected


def test_time_travel_by_tag_hash_and_timestamp(spark: SparkSession, server: Server) -> None:
    table = setup_table(spark, "wf_tt", 1)
    with branch_workflow(spark, pipeline="wf-tt", run_id="v1", tag="wf-tt-v1") as v1:
        spark.sql(f"INSERT INTO {v1.table('wf_tt', 't')} VALUES (2)")
    assert v1.merged_hash
    # The catalog's client for main now sits at v1's merge: Iceberg's
    # NessieIcebergClient.withReference would reuse it (and refresh it to the head) for
    # `t@main#<that hash>`; read_at must still read the commit.
    spark.sql(f"REFRESH TABLE {table}")
    assert ids(spark, table) == [1, 2]
    with branch_workflow(spark, pipeline="wf-tt", run_id="v2", tag="wf-tt-v2") as v2:
        spark.sql(f"DELETE FROM {v2.table('wf_tt', 't')} WHERE id = 1")
        spark.sql(f"INSERT INTO {v2.table('wf_tt', 't')} VALUES (3)")
    assert v2.merged_hash

    def read(**at: Any) -> list[int]:
        return sorted(int(r["id"]) for r in read_at(spark, table, **at).collect())

    assert ids(spark, table_at(table, "wf-tt-v1")) == [1, 2]
    assert read(tag="wf-tt-v1") == [1, 2]
    assert read(tag="wf-tt-v2") == [2, 3]
    assert read(hash=v1.merged_hash) == [1, 2]
    assert read(hash=v2.merged_hash) == [2, 3]
    assert read(hash=v1.merged_hash, ref="main") == [1, 2]

    log = {e.meta.hash: e.meta for e in server.client.log("main")}
    v1_time = log[v1.merged_hash].commit_time
    assert v1_time is not None
    assert resolve_timestamp(server.client, "main", v1_time) == v1.merged_hash
    assert resolve_timestamp(server.url, "main", v1_time) == v1.merged_hash
    instant = datetime.fromisoformat(v1_time.replace("Z", "+00:00"))
    assert read(at=instant) == [1, 2]
    assert read(at=datetime.now(UTC) + timedelta(seconds=1)) == [2, 3]

    with pytest.raises(ReferenceNotFoundError):
        resolve_timestamp(server.client, "main", datetime(2000, 1, 1, tzinfo=UTC))
