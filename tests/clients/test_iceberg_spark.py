"""Compatibility with Apache Iceberg's ``NessieCatalog`` in PySpark 3.5 (API v2).

One SparkSession (Iceberg 1.10.2 runtime from PyPI plus the relocated Jackson that
:mod:`loch.spark` builds) and one real ``loch serve`` process serve the whole module:
Spark startup costs seconds and is paid once. Tests do not depend on each other; each
works in its own namespace. What Spark does is cross-checked on the server side over
the REST API (entries, contents, history), the way clients.md part A describes the
requests the catalog sends.

A failing SQL statement is reported with the server's log lines written meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import re
import selectors
import shutil
import socket
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

if importlib.util.find_spec("pyspark") is None:
    pytest.skip("pyspark is not installed (spark extra)", allow_module_level=True)
if shutil.which("java") is None:
    pytest.skip("no java on PATH (Spark needs Java 17)", allow_module_level=True)

from pyspark.sql import Row, SparkSession

from loch.spark import add_catalog, build_session, resolve_jars
from loch.testing.server import LochServer

CATALOG = "nessie"

# --- the server -------------------------------------------------------------------------


@dataclass
class Server:
    """A running ``loch serve`` and a REST client for it."""

    process: LochServer
    http: httpx.Client

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def url(self) -> str:
        return self.process.url

    @property
    def api(self) -> str:
        return f"{self.url}/api/v2"

    def log_size(self) -> int:
        return self.process.log_size()

    def log_since(self, offset: int) -> str:
        return self.process.log(since=offset)[-6000:]

    def get(self, path: str, **params: Any) -> Any:
        r = self.http.get(path, params=params)
        assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text}"
        return r.json()

    def post(self, path: str, body: Any, **params: Any) -> Any:
        r = self.http.post(path, json=body, params=params)
        assert r.status_code == 200, f"POST {path}: {r.status_code} {r.text}"
        return r.json()

    def head(self, ref: str) -> str:
        return str(self.get(f"/trees/{ref}")["reference"]["hash"])

    def entries(self, ref: str) -> dict[tuple[str, ...], str]:
        body = self.get(f"/trees/{ref}/entries")
        return {tuple(e["name"]["elements"]): e["type"] for e in body["entries"]}

    def content(self, ref: str, *key: str) -> dict[str, Any]:
        return dict(self.get(f"/trees/{ref}/contents/{'.'.join(key)}")["content"])

    def messages(self, ref: str, n: int = 50) -> list[str]:
        body = self.get(f"/trees/{ref}/history", **{"max-records": n})
        return [e["commitMeta"]["message"] for e in body["logEntries"]][:n]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("loch-server")
    with (
        LochServer(f"sqlite:///{tmp}/s.db", tmp / "server.log") as process,
        httpx.Client(base_url=f"{process.url}/api/v2", timeout=30) as http,
    ):
        yield Server(process, http)


# --- a recording TCP proxy: what the Java client really puts on the wire ---------------

_REQUEST = re.compile(rb"(GET|POST|PUT|DELETE|HEAD) (\S+) HTTP/1\.1\r\n(.*?)\r\n\r\n", re.S)
_STATUS = re.compile(rb"HTTP/1\.1 (\d{3}) ")


@dataclass(frozen=True)
class Exchange:
    """One request's method, raw path and headers (lower-cased), and its status."""

    method: str
    path: str
    headers: dict[str, str]
    status: int


@dataclass
class RecordingProxy:
    """Forwards 127.0.0.1:<port> to the server byte for byte and keeps a copy."""

    target: int
    listener: socket.socket = field(init=False)
    streams: list[tuple[bytearray, bytearray]] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    closed: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.5)
        self._spawn(self._accept)

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    def _spawn(self, target: Any, *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(t)
        t.start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target))
            record = (bytearray(), bytearray())
            self.streams.append(record)
            self._spawn(self._pump, client, upstream, record)

    def _pump(
        self, client: socket.socket, upstream: socket.socket, record: tuple[bytearray, bytearray]
    ) -> None:
        peers = {client: (upstream, record[0]), upstream: (client, record[1])}
        with client, upstream, selectors.DefaultSelector() as sel:
            for s in peers:
                sel.register(s, selectors.EVENT_READ)
            while peers and not self.closed.is_set():
                for key, _ in sel.select(timeout=0.5):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    dst, copy = peers[src]
                    try:
                        data = src.recv(65536)
                    except OSError:
                        data = b""
                    if not data:
                        sel.unregister(src)
                        del peers[src]
                        with contextlib.suppress(OSError):
                            dst.shutdown(socket.SHUT_WR)
                        continue
                    copy.extend(data)
                    try:
                        dst.sendall(data)
                    except OSError:
                        return

    def exchanges(self) -> list[Exchange]:
        out = []
        for sent, received in list(self.streams):
            statuses = [int(s) for s in _STATUS.findall(bytes(received))]
            for m, status in zip(_REQUEST.finditer(bytes(sent)), statuses, strict=False):
                headers = {}
                for line in m.group(3).split(b"\r\n"):
                    name, _, value = line.decode("latin-1").partition(":")
                    headers[name.strip().lower()] = value.strip()
                out.append(Exchange(m.group(1).decode(), m.group(2).decode(), headers, status))
        return out

    def close(self) -> None:
        self.closed.set()
        self.listener.close()
        for t in self.threads:
            t.join(5)


# --- the Spark session -------------------------------------------------------------------


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="module")
def spark(
    server: Server, warehouse: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SparkSession]:
    jars = resolve_jars()
    session = build_session(
        server.url,
        warehouse,
        catalog=CATALOG,
        jars=jars,
        conf={
            "spark.sql.warehouse.dir": str(tmp_path_factory.mktemp("spark-warehouse")),
            "spark.ui.showConsoleProgress": "false",
        },
        app_name="loch-iceberg-tests",
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        with warnings.catch_warnings():  # py4j leaves its sockets to the GC (see _collect)
            warnings.simplefilter("ignore", ResourceWarning)
            session.stop()
            gc.collect()


def _collect(spark: SparkSession, query: str) -> list[Row]:
    if threading.current_thread() is not threading.main_thread():
        # warnings filters are process-global: the caller of the threads handles them
        return spark.sql(query).collect()
    # pyspark's collect() leaves its result socket to the garbage collector, whose
    # ResourceWarning would be an error under filterwarnings=error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            return spark.sql(query).collect()
        finally:
            gc.collect()


class SqlFailed(AssertionError):
    """A statement failed; carries the server log written while it ran."""


def sql(spark: SparkSession, server: Server, query: str) -> list[Row]:
    """Run ``query`` and collect its rows; on failure, attach the server's log."""
    offset = server.log_size()
    try:
        return _collect(spark, query)
    except Exception as e:
        raise SqlFailed(
            f"{query}\n-> {type(e).__name__}: {str(e)[:3000]}\n"
            f"--- server log meanwhile ---\n{server.log_since(offset)}"
        ) from e


def fails(spark: SparkSession, server: Server, query: str) -> str:
    """Run ``query``, which must fail with an AnalysisException or a JVM error."""
    try:
        rows = _collect(spark, query)
    except Exception as e:
        return f"{type(e).__name__}: {e}"
    raise AssertionError(f"{query} succeeded: {rows}")


def ids(rows: list[Row]) -> list[int]:
    return sorted(int(r["id"]) for r in rows)


# --- namespaces --------------------------------------------------------------------------


def test_namespaces(spark: SparkSession, server: Server) -> None:
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.ns_a")
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.ns_a.inner")
    sql(spark, server, f"CREATE NAMESPACE IF NOT EXISTS {CATALOG}.ns_a")

    top = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}")}
    assert "ns_a" in top
    assert "ns_a.inner" not in top
    nested = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}.ns_a")}
    assert nested == {"ns_a.inner"}

    entries = server.entries("main")
    assert entries[("ns_a",)] == "NAMESPACE"
    assert entries[("ns_a", "inner")] == "NAMESPACE"
    assert "create namespace ns_a" in server.messages("main")
    assert server.content("main", "ns_a")["type"] == "NAMESPACE"

    err = fails(spark, server, f"CREATE NAMESPACE {CATALOG}.ns_a")
    assert "already exists" in err.lower(), err
    err = fails(spark, server, f"DROP NAMESPACE {CATALOG}.ns_a")
    assert "not empty" in err.lower() or "non-empty" in err.lower(), err

    sql(spark, server, f"DROP NAMESPACE {CATALOG}.ns_a.inner")
    assert ("ns_a", "inner") not in server.entries("main")
    nested = sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}.ns_a")
    assert nested == []


def test_create_table_needs_namespace(spark: SparkSession, server: Server) -> None:
    err = fails(spark, server, f"CREATE TABLE {CATALOG}.no_such_ns.t (id BIGINT) USING iceberg")
    assert "no_such_ns" in err, err
    assert ("no_such_ns", "t") not in server.entries("main")


# --- tables ------------------------------------------------------------------------------


def test_table_lifecycle(spark: SparkSession, server: Server, warehouse: Path) -> None:
    t = f"{CATALOG}.db.t"
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.db")
    sql(spark, server, f"CREATE TABLE {t} (id BIGINT, name STRING) USING iceberg")
    created = server.content("main", "db", "t")
    assert created["type"] == "ICEBERG_TABLE"
    assert created["id"]
    # Hadoop writes file:/path for file:///path
    location = re.escape(str(warehouse.resolve()).lstrip("/"))
    assert re.match(rf"file:/+{location}/db/t_[0-9a-f-]+/metadata/", created["metadataLocation"])
    assert server.messages("main", 1) == ["Iceberg table created/registered with name db.t"]

    sql(spark, server, f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    rows = sql(spark, server, f"SELECT id, name FROM {t} ORDER BY id")
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, "b")]

    snapshots = sql(spark, server, f"SELECT snapshot_id, operation FROM {t}.snapshots")
    assert [r["operation"] for r in snapshots] == ["append"]
    after_insert = server.content("main", "db", "t")
    assert after_insert["id"] == created["id"]
    assert after_insert["snapshotId"] == snapshots[0]["snapshot_id"]
    assert after_insert["metadataLocation"] != created["metadataLocation"]
    assert server.messages("main", 1) == ["Iceberg append against db.t"]

    sql(spark, server, f"ALTER TABLE {t} ADD COLUMN score DOUBLE")
    sql(spark, server, f"INSERT INTO {t} VALUES (3, 'c', 0.5)")
    rows = sql(spark, server, f"SELECT id, name, score FROM {t} ORDER BY id")
    assert [(r["id"], r["score"]) for r in rows] == [(1, None), (2, None), (3, 0.5)]
    altered = server.content("main", "db", "t")
    assert altered["schemaId"] == 1
    assert altered["id"] == created["id"]
    assert "Iceberg schema change against table db.t" in server.messages("main", 3)

    tables = sql(spark, server, f"SHOW TABLES IN {CATALOG}.db")
    assert ("db", "t") in {(r["namespace"], r["tableName"]) for r in tables}
    assert len(sql(spark, server, f"SELECT * FROM {t}.snapshots")) == 2


def test_merge_into(spark: SparkSession, server: Server) -> None:
    t = f"{CATALOG}.mrg.target"
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.mrg")
    sql(spark, server, f"CREATE TABLE {t} (id BIGINT, name STRING) USING iceberg")
    sql(spark, server, f"INSERT INTO {t} VALUES (1, 'a'), (2, 'b')")
    before = server.head("main")
    sql(
        spark,
        server,
        f"""MERGE INTO {t} t
            USING (SELECT 2L AS id, 'B' AS name UNION ALL SELECT 3L, 'c') s
            ON t.id = s.id
            WHEN MATCHED THEN UPDATE SET t.name = s.name
            WHEN NOT MATCHED THEN INSERT *""",
    )
    rows = sql(spark, server, f"SELECT id, name FROM {t} ORDER BY id")
    assert [(r["id"], r["name"]) for r in rows] == [(1, "a"), (2, "B"), (3, "c")]
    ops = [r["operation"] for r in sql(spark, server, f"SELECT * FROM {t}.snapshots")]
    assert ops[0] == "append"
    assert len(ops) == 2
    assert server.head("main") != before
    assert server.messages("main", 1)[0].startswith("Iceberg ")
    assert server.messages("main", 1)[0].endswith(" against mrg.target")


def test_rename_and_drop_table(spark: SparkSession, server: Server) -> None:
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.rn")
    sql(spark, server, f"CREATE TABLE {CATALOG}.rn.src (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {CATALOG}.rn.src VALUES (7)")
    original = server.content("main", "rn", "src")

    sql(spark, server, f"ALTER TABLE {CATALOG}.rn.src RENAME TO {CATALOG}.rn.dst")
    entries = server.entries("main")
    assert ("rn", "src") not in entries
    assert entries[("rn", "dst")] == "ICEBERG_TABLE"
    assert server.content("main", "rn", "dst") == original  # same id, same metadata
    assert server.messages("main", 1) == ["Iceberg rename table from 'rn.src' to 'rn.dst'"]
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.rn.dst")) == [7]
    names = {r["tableName"] for r in sql(spark, server, f"SHOW TABLES IN {CATALOG}.rn")}
    assert names == {"dst"}

    sql(spark, server, f"DROP TABLE {CATALOG}.rn.dst")
    assert ("rn", "dst") not in server.entries("main")
    assert server.messages("main", 1) == ["Iceberg delete table rn.dst"]
    assert sql(spark, server, f"SHOW TABLES IN {CATALOG}.rn") == []
    err = fails(spark, server, f"SELECT * FROM {CATALOG}.rn.dst")
    assert "TABLE_OR_VIEW_NOT_FOUND" in err, err
    sql(spark, server, f"DROP NAMESPACE {CATALOG}.rn")
    assert ("rn",) not in server.entries("main")


# --- branches ------------------------------------------------------------------------------


def test_writes_on_a_branch_then_merge(
    spark: SparkSession, server: Server, warehouse: Path
) -> None:
    t = f"{CATALOG}.br.t"
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.br")
    sql(spark, server, f"CREATE TABLE {t} (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {t} VALUES (1)")
    main_head = server.head("main")
    main_table = server.content("main", "br", "t")

    created = server.post(
        "/trees",
        {"type": "BRANCH", "name": "main", "hash": main_head},
        name="dev",
        type="BRANCH",
    )
    assert created["reference"] == {"type": "BRANCH", "name": "dev", "hash": main_head}

    # A catalog bound to dev, registered at run time, and a `t@dev` identifier.
    add_catalog(spark, "nessie_dev", server.url, "dev", warehouse)
    sql(spark, server, "INSERT INTO nessie_dev.br.t VALUES (2)")
    first_dev_commit = server.head("dev")
    sql(spark, server, f"INSERT INTO {CATALOG}.br.`t@dev` VALUES (3)")

    dev_head = server.head("dev")
    assert server.head("main") == main_head  # main unchanged
    assert server.content("main", "br", "t") == main_table
    assert server.messages("dev", 3) == [
        "Iceberg append against br.t",
        "Iceberg append against br.t",
        "Iceberg append against br.t",
    ]
    assert server.messages("dev", 4)[3] == "Iceberg table created/registered with name br.t"
    dev_log = server.get("/trees/dev/history", **{"max-records": 3})["logEntries"]
    assert dev_log[1]["commitMeta"]["hash"] == first_dev_commit
    assert dev_log[2]["commitMeta"]["hash"] == main_head
    assert server.entries("dev")[("br", "t")] == "ICEBERG_TABLE"
    dev_table = server.content("dev", "br", "t")
    assert dev_table["id"] == main_table["id"]
    assert dev_table["metadataLocation"] != main_table["metadataLocation"]

    assert ids(sql(spark, server, f"SELECT id FROM {t}")) == [1]
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.br.`t@dev`")) == [1, 2, 3]
    sql(spark, server, "REFRESH TABLE nessie_dev.br.t")
    assert ids(sql(spark, server, "SELECT id FROM nessie_dev.br.t")) == [1, 2, 3]
    pinned = f"{CATALOG}.br.`t@dev#{first_dev_commit}`"
    assert ids(sql(spark, server, f"SELECT id FROM {pinned}")) == [1, 2]
    err = fails(spark, server, f"INSERT INTO {pinned} VALUES (9)")
    assert "branch without a hash" in err or "hash" in err, err

    merged = server.post(
        f"/trees/main@{main_head}/history/merge",
        {"fromRefName": "dev", "fromHash": dev_head},
    )
    assert merged.get("wasApplied", True)
    new_main = server.head("main")
    assert new_main != main_head
    assert merged["resultantTargetHash"] == new_main
    assert server.content("main", "br", "t") == dev_table

    sql(spark, server, f"REFRESH TABLE {t}")
    assert ids(sql(spark, server, f"SELECT id FROM {t}")) == [1, 2, 3]
    assert server.head("dev") == dev_head


# --- the wire --------------------------------------------------------------------------------


@pytest.fixture
def proxy(server: Server) -> Iterator[RecordingProxy]:
    p = RecordingProxy(server.port)
    try:
        yield p
    finally:
        p.close()


@pytest.mark.parametrize("compression", ["gzip", "identity"])
def test_request_bodies_gzip_and_chunked(
    spark: SparkSession,
    server: Server,
    warehouse: Path,
    proxy: RecordingProxy,
    compression: str,
) -> None:
    """The Java client's default bodies (chunked + gzip) and uncompressed chunked ones."""
    name = f"wire_{compression}"
    options = {"transport.disable-compression": "true"} if compression == "identity" else {}
    add_catalog(spark, name, f"http://127.0.0.1:{proxy.port}", "main", warehouse, options)
    sql(spark, server, f"CREATE NAMESPACE {name}.{name}")
    sql(spark, server, f"CREATE TABLE {name}.{name}.t (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {name}.{name}.t VALUES (1), (2)")
    assert ids(sql(spark, server, f"SELECT id FROM {name}.{name}.t")) == [1, 2]
    assert server.entries("main")[(name, "t")] == "ICEBERG_TABLE"

    exchanges = proxy.exchanges()
    commits = [x for x in exchanges if x.method == "POST" and x.path.endswith("/history/commit")]
    assert len(commits) == 3, exchanges  # namespace, table, append
    for x in commits:
        assert x.status == 200, x
        assert x.headers.get("transfer-encoding", "").lower() == "chunked", x
        assert "content-length" not in x.headers, x
        assert x.path.startswith("/api/v2/trees/main%40"), x
        if compression == "gzip":
            assert x.headers.get("content-encoding") == "gzip", x
        else:
            assert "content-encoding" not in x.headers, x
    posts = [x for x in exchanges if x.method == "POST"]
    assert all(x.status == 200 for x in posts), posts
    assert all(x.headers.get("nessie-client-spec") == "2" for x in exchanges)
    assert any(x.path == "/api/v2/config" for x in exchanges)


# --- concurrency, views, properties, tags, API v1 ---------------------------------------------


def test_concurrent_writers_lose_nothing(
    spark: SparkSession, server: Server, warehouse: Path
) -> None:
    """Three threads append at once: two to one table through two catalogs, one to another.

    Commits based on an older HEAD must succeed when their key did not change meanwhile
    (clients.md A.6 rule 4); a commit whose key did change must get a 409 so that Iceberg
    refreshes and retries. Either way no row is lost and the server never fails.
    """
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.cc")
    sql(spark, server, f"CREATE TABLE {CATALOG}.cc.x (id BIGINT) USING iceberg")
    sql(spark, server, f"CREATE TABLE {CATALOG}.cc.y (id BIGINT) USING iceberg")
    add_catalog(spark, "nessie_other", server.url, "main", warehouse)
    offset = server.log_size()
    jobs = [
        [f"INSERT INTO {CATALOG}.cc.x VALUES ({i})" for i in (1, 2, 3)],
        [f"INSERT INTO nessie_other.cc.x VALUES ({i})" for i in (11, 12, 13)],
        [f"INSERT INTO {CATALOG}.cc.y VALUES ({i})" for i in (21, 22, 23)],
    ]
    errors: list[BaseException] = []

    def run(queries: list[str]) -> None:
        try:
            for q in queries:
                sql(spark, server, q)
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run, args=(job,)) for job in jobs]
    with warnings.catch_warnings():  # see _collect; py4j's per-thread sockets as well
        warnings.simplefilter("ignore", ResourceWarning)
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        del threads
        gc.collect()
    assert not errors, errors[0]
    log = server.log_since(offset)
    assert not re.search(r'" (5\d\d|400|404) ', log), log

    sql(spark, server, f"REFRESH TABLE {CATALOG}.cc.x")
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.cc.x")) == [1, 2, 3, 11, 12, 13]
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.cc.y")) == [21, 22, 23]
    messages = server.messages("main", 9)
    assert messages.count("Iceberg append against cc.x") == 6
    assert messages.count("Iceberg append against cc.y") == 3


def test_namespace_properties(spark: SparkSession, server: Server) -> None:
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.props WITH PROPERTIES ('team' = 'data')")
    before = server.content("main", "props")
    assert before["properties"]["team"] == "data"
    sql(spark, server, f"ALTER NAMESPACE {CATALOG}.props SET PROPERTIES ('steward' = 'loch')")
    after = server.content("main", "props")
    assert after["id"] == before["id"]
    assert after["properties"]["steward"] == "loch"
    assert after["properties"]["team"] == "data"
    assert server.messages("main", 1) == ["update namespace props"]
    described = sql(spark, server, f"DESCRIBE NAMESPACE EXTENDED {CATALOG}.props")
    text = " ".join(str(r.asDict()) for r in described)
    assert "steward" in text and "loch" in text, text


def test_views(spark: SparkSession, server: Server) -> None:
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.vw")
    sql(spark, server, f"CREATE TABLE {CATALOG}.vw.t (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {CATALOG}.vw.t VALUES (1), (2), (3)")
    sql(
        spark, server, f"CREATE VIEW {CATALOG}.vw.big AS SELECT id FROM {CATALOG}.vw.t WHERE id > 1"
    )
    view = server.content("main", "vw", "big")
    assert view["type"] == "ICEBERG_VIEW"
    assert view["metadataLocation"]
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.vw.big")) == [2, 3]
    views = {r["viewName"] for r in sql(spark, server, f"SHOW VIEWS IN {CATALOG}.vw")}
    assert views == {"big"}
    tables = {r["tableName"] for r in sql(spark, server, f"SHOW TABLES IN {CATALOG}.vw")}
    assert tables == {"t"}
    sql(spark, server, f"DROP VIEW {CATALOG}.vw.big")
    assert ("vw", "big") not in server.entries("main")


def test_tag_catalog_is_read_only(spark: SparkSession, server: Server, warehouse: Path) -> None:
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.tg")
    sql(spark, server, f"CREATE TABLE {CATALOG}.tg.t (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {CATALOG}.tg.t VALUES (1)")
    head = server.head("main")
    server.post("/trees", {"type": "BRANCH", "name": "main", "hash": head}, name="v1", type="TAG")
    sql(spark, server, f"INSERT INTO {CATALOG}.tg.t VALUES (2)")

    add_catalog(spark, "nessie_tag", server.url, "v1", warehouse)
    assert ids(sql(spark, server, "SELECT id FROM nessie_tag.tg.t")) == [1]
    err = fails(spark, server, "INSERT INTO nessie_tag.tg.t VALUES (9)")
    assert "branch" in err.lower(), err
    assert server.head("v1") == head


def test_api_v1_catalog(spark: SparkSession, server: Server, warehouse: Path) -> None:
    """The same catalog over API v1 (clients.md A.8)."""
    add_catalog(spark, "nessie_v1", f"{server.url}/api/v1", "main", warehouse)
    sql(spark, server, "CREATE NAMESPACE nessie_v1.apiv1")
    sql(spark, server, "CREATE TABLE nessie_v1.apiv1.t (id BIGINT, s STRING) USING iceberg")
    sql(spark, server, "INSERT INTO nessie_v1.apiv1.t VALUES (1, 'x'), (2, 'y')")
    assert ids(sql(spark, server, "SELECT id FROM nessie_v1.apiv1.t")) == [1, 2]
    names = {r["tableName"] for r in sql(spark, server, "SHOW TABLES IN nessie_v1.apiv1")}
    assert names == {"t"}
    assert server.entries("main")[("apiv1", "t")] == "ICEBERG_TABLE"
    assert server.messages("main", 1) == ["Iceberg append against apiv1.t"]
    # and what v1 wrote, v2 reads
    assert ids(sql(spark, server, f"SELECT id FROM {CATALOG}.apiv1.t")) == [1, 2]


# --- names that need escaping, more DML and DDL ---------------------------------------------


def test_names_with_dots_spaces_and_a_slashed_branch(
    spark: SparkSession, server: Server, warehouse: Path
) -> None:
    """Key elements with '.', ' ' and non-ASCII characters, and a branch named
    ``feature/x`` (``%2F`` in paths) through a catalog and a ``t@feature/x`` identifier."""
    ns = f"{CATALOG}.`odd.ns`"
    table = f"{ns}.`tâble one`"
    sql(spark, server, f"CREATE NAMESPACE {ns}")
    sql(spark, server, f"CREATE TABLE {table} (id BIGINT) USING iceberg")
    sql(spark, server, f"INSERT INTO {table} VALUES (1)")
    assert ids(sql(spark, server, f"SELECT id FROM {table}")) == [1]
    assert server.entries("main")[("odd.ns", "tâble one")] == "ICEBERG_TABLE"
    names = {r["tableName"] for r in sql(spark, server, f"SHOW TABLES IN {ns}")}
    assert names == {"tâble one"}
    top = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}")}
    assert "`odd.ns`" in top, top
    # nested listing filters on entry.encodedKey.startsWith(<escaped parent> + '.')
    sql(spark, server, f"CREATE NAMESPACE {ns}.`in ner`")
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.odd")  # a prefix look-alike
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.odd.`ns.decoy`")
    nested = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {ns}")}
    assert nested == {"`odd.ns`.`in ner`"}, nested
    nested = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}.odd")}
    assert nested == {"odd.`ns.decoy`"}, nested

    head = server.head("main")
    server.post(
        "/trees",
        {"type": "BRANCH", "name": "main", "hash": head},
        name="feature/x",
        type="BRANCH",
    )
    add_catalog(spark, "nessie_feature", server.url, "feature/x", warehouse)
    sql(spark, server, "INSERT INTO nessie_feature.`odd.ns`.`tâble one` VALUES (2)")
    sql(spark, server, f"INSERT INTO {ns}.`tâble one@feature/x` VALUES (3)")
    assert ids(sql(spark, server, f"SELECT id FROM {ns}.`tâble one@feature/x`")) == [1, 2, 3]
    assert server.head("main") == head
    assert server.messages("feature%2Fx", 2) == ["Iceberg append against odd.ns.tâble one"] * 2


def test_ctas_update_delete_and_partitions(spark: SparkSession, server: Server) -> None:
    t = f"{CATALOG}.dml.p"
    sql(spark, server, f"CREATE NAMESPACE {CATALOG}.dml")
    sql(
        spark,
        server,
        f"""CREATE TABLE {t} USING iceberg PARTITIONED BY (part)
            AS SELECT id, CAST(id % 2 AS INT) AS part FROM range(6)""",
    )
    created = server.content("main", "dml", "p")
    # CTAS creates the table and its first snapshot in one commit
    assert created["snapshotId"] > 0
    assert server.messages("main", 2) == ["Iceberg append against dml.p", "create namespace dml"]
    parts = sql(spark, server, f"SELECT partition FROM {t}.partitions")
    assert len(parts) == 2

    sql(spark, server, f"UPDATE {t} SET id = id + 100 WHERE part = 1")
    sql(spark, server, f"DELETE FROM {t} WHERE id = 0")
    assert ids(sql(spark, server, f"SELECT id FROM {t}")) == [2, 4, 101, 103, 105]
    query = f"SELECT snapshot_id FROM {t}.history ORDER BY made_current_at"
    history = [r["snapshot_id"] for r in sql(spark, server, query)]
    assert len(history) == 3
    first = history[0]
    old = sql(spark, server, f"SELECT id FROM {t} VERSION AS OF {first}")
    assert ids(old) == [0, 1, 2, 3, 4, 5]
    assert server.content("main", "dml", "p")["id"] == created["id"]

    sql(spark, server, f"ALTER TABLE {t} SET TBLPROPERTIES ('k' = 'v')")
    props = {r["key"]: r["value"] for r in sql(spark, server, f"SHOW TBLPROPERTIES {t}")}
    assert props["k"] == "v"
    assert props["gc.enabled"] == "false"  # NessieCatalog's table default


def test_listings_are_not_truncated(spark: SparkSession, server: Server) -> None:
    """SHOW TABLES reads one page of entries without max-records (clients.md A.4, A.6
    rule 7): every table must be in it. The tables are committed over REST in one commit
    (listing does not load their metadata)."""
    count = 600
    ops: list[dict[str, Any]] = [
        {
            "type": "PUT",
            "key": {"elements": ["many"]},
            "content": {"type": "NAMESPACE", "elements": ["many"]},
        }
    ]
    ops += [
        {
            "type": "PUT",
            "key": {"elements": ["many", f"t{i:04d}"]},
            "content": {
                "type": "ICEBERG_TABLE",
                "metadataLocation": f"file:///nowhere/t{i:04d}.metadata.json",
                "snapshotId": -1,
                "schemaId": 0,
                "specId": 0,
                "sortOrderId": 0,
            },
        }
        for i in range(count)
    ]
    head = server.head("main")
    server.post(
        f"/trees/main@{head}/history/commit",
        {"commitMeta": {"message": "many tables"}, "operations": ops},
    )
    names = {r["tableName"] for r in sql(spark, server, f"SHOW TABLES IN {CATALOG}.many")}
    assert names == {f"t{i:04d}" for i in range(count)}
    top = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}")}
    assert "many" in top


def test_hive_tables_beside_iceberg_tables(spark: SparkSession, server: Server) -> None:
    """Hive tables and databases (Loch's extension types) do not break Iceberg: its Java
    client cannot parse an entries listing that holds them, so the server shows them only to
    clients that ask (``Loch-Content-Types``). SHOW TABLES lists the Iceberg tables, and a
    Hive table reads as not found instead of failing the listing or the load."""
    head = server.head("main")
    hive_ops: list[dict[str, Any]] = [
        {"type": "PUT", "key": {"elements": ["hv"]}, "content": {"type": "NAMESPACE"}},
        {
            "type": "PUT",
            "key": {"elements": ["hv", "legacy"]},
            "content": {"type": "HIVE_TABLE", "metadataLocation": "hdfs://wh/hv/legacy"},
        },
        {
            "type": "PUT",
            "key": {"elements": ["hive_db"]},
            "content": {"type": "HIVE_DATABASE", "metadataLocation": "hdfs://wh/hive_db"},
        },
    ]
    server.post(
        f"/trees/main@{head}/history/commit",
        {"commitMeta": {"message": "hive objects"}, "operations": hive_ops},
    )
    sql(spark, server, f"CREATE TABLE {CATALOG}.hv.ice (id INT) USING iceberg")
    names = {r["tableName"] for r in sql(spark, server, f"SHOW TABLES IN {CATALOG}.hv")}
    assert names == {"ice"}
    top = {r["namespace"] for r in sql(spark, server, f"SHOW NAMESPACES IN {CATALOG}")}
    assert "hv" in top and "hive_db" not in top
    assert "TABLE_OR_VIEW_NOT_FOUND" in fails(spark, server, f"SELECT * FROM {CATALOG}.hv.legacy")
    asked = server.http.get(
        "/trees/main/entries", headers={"Loch-Content-Types": "HIVE_TABLE,HIVE_DATABASE"}
    ).json()
    types = {tuple(e["name"]["elements"]): e["type"] for e in asked["entries"]}
    assert types[("hv", "legacy")] == "HIVE_TABLE" and types[("hive_db",)] == "HIVE_DATABASE"
