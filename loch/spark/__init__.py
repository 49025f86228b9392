"""PySpark integration: Iceberg's Spark runtime and Loch catalogs for SparkSession.

Typical use::

    from loch.spark import build_session, add_catalog

    spark = build_session("http://127.0.0.1:19120", "/data/warehouse")
    spark.sql("CREATE NAMESPACE nessie.db")
    add_catalog(spark, "nessie_dev", "http://127.0.0.1:19120", "dev", "/data/warehouse")

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

__all__ = [
    "DEFAULT_CATALOG",
    "ENV_JARS",
    "ENV_MAVEN",
    "JACKSON_RELOCATION",
    "SHADED_JACKSON_PREFIX",
    "CheckReport",
    "Relocation",
    "SparkJars",
    "SparkSetupError",
    "add_catalog",
    "build_relocated_jar",
    "build_session",
    "cache_dir",
    "catalog_conf",
    "check_references",
    "ensure_shaded_jackson",
    "find_jackson_jars",
    "find_runtime_jar",
    "maven_packages",
    "nessie_uri",
    "resolve_jars",
    "session_conf",
    "warehouse_uri",
]
