"""One real ``loch serve`` process and one SparkSession for every test of tests/spark.

Both are package-scoped: Spark startup costs seconds and is paid once for the package.
Each test works in namespaces and on branches of its own, so tests do not depend on
each other. Test modules that need Spark skip themselves when :data:`SPARK_MISSING`.

py4j leaves the sockets of collected results to the garbage collector, whose
ResourceWarning would be an error under ``filterwarnings=error``; the autouse fixture
ignores ResourceWarning (and nothing else) while a test runs and collects garbage before
the filter is restored, the way tests/clients/test_iceberg_spark.py does per statement.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import shutil
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import httpx
import pytest

from loch.client import LochClient
from loch.spark import build_session, resolve_jars
from loch.testing.server import LochServer

if TYPE_CHECKING:
    from pyspark.sql import Row, SparkSession

CATALOG = "nessie"
SPARK_MISSING = (
    "pyspark is not installed (spark extra)"
    if importlib.util.find_spec("pyspark") is None
    else "no java on PATH (Spark needs Java 17)"
    if shutil.which("java") is None
    else None
)
"""Why Spark tests cannot run here, or None; test modules skip themselves on it."""
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Server:
    """A running ``loch serve``, a raw REST client and a :class:`LochClient` for it."""

    process: LochServer
    http: httpx.Client
    client: LochClient

    @property
    def url(self) -> str:
        return self.process.url

    def get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params=params)
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
        return r.json()

    def head(self, ref: str) -> str:
        return str(self.get(f"/trees/{quote(ref, safe='')}")["reference"]["hash"])

    def has_ref(self, ref: str) -> bool:
        return self.http.get(f"/trees/{quote(ref, safe='')}").status_code == 200

    def dump(self, ref: str) -> bytes:
        """Everything a reader of ``ref`` can see, as bytes: the reference and its hash,
        every entry with its content, and the content of every key read one by one."""
        r = quote(ref, safe="")
        parts = [self.http.get(f"/trees/{r}").content]
        entries = self.http.get(f"/trees/{r}/entries", params={"content": "true"})
        parts.append(entries.content)
        for e in entries.json()["entries"]:
            keys = {"requestedKeys": [e["name"]]}
            parts.append(self.http.post(f"/trees/{r}/contents", json=keys).content)
        return b"\n".join(parts)


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("loch-server")
    with (
        LochServer(f"sqlite:///{tmp}/s.db", tmp / "server.log") as process,
        httpx.Client(base_url=f"{process.url}/api/v2", timeout=30) as http,
        LochClient(f"{process.url}/api/v2") as client,
    ):
        yield Server(process, http, client)


@pytest.fixture(scope="package")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="package")
def spark(
    server: Server, warehouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkSession]:
    session = build_session(
        server.url,
        warehouse,
        catalog=CATALOG,
        jars=resolve_jars(),
        conf={
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.session.timeZone": "UTC",
        },
        app_name="loch-spark-pipeline-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        with py4j_sockets():
            session.stop()


@contextlib.contextmanager
def py4j_sockets() -> Iterator[None]:
    """Ignore ResourceWarning (py4j's sockets), and collect garbage before leaving.

    Fixtures of a wider scope than a test that run Spark jobs use it themselves: they are
    set up before the autouse fixture below.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            yield
        finally:
            gc.collect()


@pytest.fixture(autouse=True)
def _py4j_sockets() -> Iterator[None]:
    with py4j_sockets():
        yield


def rows(spark: SparkSession, query: str) -> list[Row]:
    """Collect a query's rows."""
    return spark.sql(query).collect()


def load_example(name: str) -> ModuleType:
    """Import ``examples/<name>.py`` (examples/ is not a package)."""
    module_name = f"loch_examples_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "examples" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
