"""PySpark integration: Iceberg's Spark runtime and Loch catalogs for SparkSession.

Typical use::

    from loch.spark import build_session, add_catalog

    spark = build_session("http://127.0.0.1:19120", "/data/warehouse")
    spark.sql("CREATE NAMESPACE nessie.db")
    add_catalog(spark, "nessie_dev", "http://127.0.0.1:19120", "dev", "/data/warehouse")

Pipelines write on a branch and publish by merging it (:func:`branch_workflow`), and
read tables as they were at a tag, a hash or an instant (:func:`read_at`).

Nothing here imports PySpark until a session is built.
"""

from __future__ import annotations

from loch.spark.check import SHADED_JACKSON_PREFIX, CheckReport, check_references
from loch.spark.errors import SparkSetupError
from loch.spark.jars import (
    ENV_JARS,
    ENV_MAVEN,
    SparkJars,
    cache_dir,
    ensure_shaded_jackson,
    find_jackson_jars,
    find_runtime_jar,
    maven_packages,
    resolve_jars,
)
from loch.spark.relocate import JACKSON_RELOCATION, Relocation, build_relocated_jar
from loch.spark.session import (
    DEFAULT_CATALOG,
    add_catalog,
    build_session,
    catalog_conf,
    nessie_uri,
    session_conf,
    warehouse_uri,
)
from loch.spark.timetravel import (
    format_instant,
    read_at,
    resolve_timestamp,
    split_identifier,
    table_at,
)
from loch.spark.workflow import (
    RUN_PROPERTIES,
    Audit,
    AuditFailed,
    AuditResult,
    BranchRun,
    Check,
    MergeConflict,
    branch_workflow,
    quote_identifier,
)

__all__ = [
    "DEFAULT_CATALOG",
    "ENV_JARS",
    "ENV_MAVEN",
    "JACKSON_RELOCATION",
    "RUN_PROPERTIES",
    "SHADED_JACKSON_PREFIX",
    "Audit",
    "AuditFailed",
    "AuditResult",
    "BranchRun",
    "Check",
    "CheckReport",
    "MergeConflict",
    "Relocation",
    "SparkJars",
    "SparkSetupError",
    "add_catalog",
    "branch_workflow",
    "build_relocated_jar",
    "build_session",
    "cache_dir",
    "catalog_conf",
    "check_references",
    "ensure_shaded_jackson",
    "find_jackson_jars",
    "find_runtime_jar",
    "format_instant",
    "maven_packages",
    "nessie_uri",
    "quote_identifier",
    "read_at",
    "resolve_jars",
    "resolve_timestamp",
    "session_conf",
    "split_identifier",
    "table_at",
    "warehouse_uri",
]
