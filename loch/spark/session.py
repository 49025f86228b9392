"""A SparkSession with Iceberg and a Loch catalog (Iceberg's ``NessieCatalog``).

Spark reads catalog settings lazily: a catalog is created on its first use and kept,
so :func:`add_catalog` can register more catalogs (one per ref) on a running session.
Jars and SQL extensions, on the other hand, are fixed when the JVM starts, which is
why :func:`build_session` checks that a session it gets back really has them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from loch.spark.errors import SparkSetupError
from loch.spark.jars import SparkJars, resolve_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "DEFAULT_CATALOG",
    "SESSION_DEFAULTS",
    "add_catalog",
    "build_session",
    "catalog_conf",
    "nessie_uri",
    "session_conf",
    "warehouse_uri",
]

DEFAULT_CATALOG = "nessie"
SESSION_DEFAULTS: dict[str, str] = {
    "spark.master": "local[2]",
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.driver.memory": "1g",
}
"""Small, local defaults: two cores, no UI, two shuffle partitions, 1 GB driver."""

_CATALOG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def nessie_uri(uri: str) -> str:
    """Normalise a server address to what ``NessieCatalog`` wants: ``…/api/v2``, no slash.

    ``http://host:19120``, ``…/api`` and ``…/api/v2/`` all become ``…/api/v2``; an
    explicit ``…/api/v1`` is kept (API v1 mode).

    Raises:
        SparkSetupError: If the address is not an http(s) URL.
    """
    parts = urlsplit(uri)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise SparkSetupError(f"catalog uri must be an http(s) URL, got '{uri}'")
    base = uri.rstrip("/")
    if re.search(r"/v\d+$", base):
        return base
    if base.endswith("/api"):
        return base + "/v2"
    return base + "/api/v2"


def warehouse_uri(warehouse: str | Path) -> str:
    """A warehouse location as a URI; a plain local path becomes ``file:///…``.

    Raises:
        SparkSetupError: If the warehouse is empty (NessieCatalog requires one).
    """
    text = str(warehouse).strip()
    if not text:
        raise SparkSetupError("warehouse is required: NessieCatalog stores table files there")
    if isinstance(warehouse, Path) or not re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*:", text):
        return Path(text).expanduser().resolve().as_uri()
    return text


def catalog_conf(
    name: str,
    uri: str,
    ref: str,
    warehouse: str | Path,
    options: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ``spark.sql.catalog.<name>.*`` settings of a Loch catalog bound to ``ref``.

    Args:
        name: Spark catalog name (an identifier).
        uri: Loch server address (normalised by :func:`nessie_uri`).
        ref: Branch (writable) or tag (read-only) the catalog works on.
        warehouse: Where tables are stored (normalised by :func:`warehouse_uri`).
        options: Further catalog keys, e.g. ``{"cache-enabled": "false"}``.

    Raises:
        SparkSetupError: On an invalid name, uri, ref or warehouse.
    """
    if not _CATALOG_NAME.fullmatch(name):
        raise SparkSetupError(f"invalid Spark catalog name '{name}'")
    if not ref:
        raise SparkSetupError("ref is required")
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        f"{prefix}.catalog-impl": "org.apache.iceberg.nessie.NessieCatalog",
        f"{prefix}.uri": nessie_uri(uri),
        f"{prefix}.ref": ref,
        f"{prefix}.warehouse": warehouse_uri(warehouse),
    }
    for key, value in (options or {}).items():
        conf[f"{prefix}.{key}"] = value
    return conf


def session_conf(
    uri: str,
    warehouse: str | Path,
    *,
    ref: str = "main",
    catalog: str = DEFAULT_CATALOG,
    jars: SparkJars | None = None,
    conf: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Every setting :func:`build_session` applies, without starting anything.

    Args:
        uri: Loch server address.
        warehouse: Table storage location.
        ref: Ref of the catalog.
        catalog: Spark catalog name.
        jars: How to load Iceberg; default :func:`loch.spark.jars.resolve_jars`.
        conf: Extra Spark settings; they override the defaults.
    """
    jars = resolve_jars() if jars is None else jars
    out = dict(SESSION_DEFAULTS)
    out.update(jars.spark_conf())
    out.update(catalog_conf(catalog, uri, ref, warehouse))
    out.update(conf or {})
    return out


def build_session(
    uri: str,
    warehouse: str | Path,
    *,
    ref: str = "main",
    catalog: str = DEFAULT_CATALOG,
    jars: SparkJars | None = None,
    conf: Mapping[str, str] | None = None,
    app_name: str = "loch",
) -> SparkSession:
    """Start (or get) a SparkSession with Iceberg and a Loch catalog.

    Sets ``SPARK_LOCAL_IP=127.0.0.1`` (unless already set) before the JVM starts.

    Args:
        uri: Loch server address, e.g. ``http://127.0.0.1:19120`` or ``…/api/v2``.
        warehouse: Table storage location (local path or URI).
        ref: Branch or tag of the catalog.
        catalog: Spark catalog name.
        jars: How to load Iceberg; default :func:`loch.spark.jars.resolve_jars`.
        conf: Extra Spark settings.
        app_name: Spark application name.

    Returns:
        The session, with catalog ``catalog`` usable in SQL.

    Raises:
        SparkSetupError: If Iceberg cannot be found, or a session already running in
            this process was started without the Iceberg jars.
    """
    from pyspark.sql import SparkSession

    settings = session_conf(uri, warehouse, ref=ref, catalog=catalog, jars=jars, conf=conf)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder.appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    _check_started_with(spark, settings)
    # A session that existed before keeps its static settings but takes new catalogs.
    for key, value in catalog_conf(catalog, uri, ref, warehouse).items():
        spark.conf.set(key, value)
    return spark


def _check_started_with(spark: SparkSession, settings: Mapping[str, str]) -> None:
    running = spark.sparkContext.getConf()
    for key in ("spark.jars", "spark.jars.packages"):
        wanted = settings.get(key)
        if not wanted:
            continue
        have = set((running.get(key) or "").split(","))
        # Spark may rewrite local paths as file: URIs.
        have |= {h.removeprefix("file:") for h in have}
        lacking = [j for j in wanted.split(",") if j not in have]
        if lacking:
            raise SparkSetupError(
                f"a SparkSession was already running without {key}={lacking}; stop it "
                "before building a Loch session"
            )


def add_catalog(
    spark: SparkSession,
    name: str,
    uri: str,
    ref: str,
    warehouse: str | Path,
    options: Mapping[str, str] | None = None,
) -> None:
    """Register another Loch catalog, bound to ``ref``, on a running session.

    Spark keeps a catalog once it has been used, so give each ref its own catalog name
    instead of re-pointing an existing one.

    Args:
        spark: The running session (started with the Iceberg jars).
        name: New catalog name.
        uri: Loch server address.
        ref: Branch or tag for the new catalog.
        warehouse: Table storage location.
        options: Further catalog keys.

    Raises:
        SparkSetupError: On an invalid name, uri, ref or warehouse.
    """
    for key, value in catalog_conf(name, uri, ref, warehouse, options).items():
        spark.conf.set(key, value)
