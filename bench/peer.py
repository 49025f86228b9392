"""The price of versioning: a table commit through Loch vs pyiceberg's SQL catalog.

pyiceberg's ``SqlCatalog`` on SQLite is a non-versioned catalog: one row per table,
whose ``metadata_location`` a commit swaps with a conditional UPDATE. Four cases on
files in one directory (on disk), the cases taking turns (``--rounds`` rounds of
``--repeat`` commits each), one table each:

``pyiceberg full commit``
    ``table.transaction().set_properties(...).commit_transaction()``: loads the table,
    writes a new metadata JSON file (not fsynced by pyiceberg), then swaps the pointer;
``pyiceberg pointer swap``
    only the catalog update of that commit: the same SQLAlchemy UPDATE … WHERE
    metadata_location = current, in a session, committed (pyiceberg's engine settings:
    SQLite's default rollback journal with ``synchronous=FULL``);
``loch VersionStore commit``
    an ICEBERG_TABLE content update (same content id, new ``metadataLocation``) as one
    commit on ``main`` through :class:`~loch.versioning.VersionStore` (WAL,
    ``synchronous=FULL``); the metadata JSON is the client's business, so this is
    Loch's pointer swap — with a commit object, a key-index update and history;
``loch HTTP commit``
    the same update over API v2 to a ``loch serve`` process (one keep-alive client).

The like-with-like pair is Loch's VersionStore commit vs pyiceberg's pointer swap (the
target: within 2x); the HTTP commit is also compared with pyiceberg's full commit.

Usage: ``python -m bench.peer [--rounds 5] [--repeat 40]``
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    Figure,
    Stats,
    interleaved,
    log,
    machine,
    parse_known,
    peak_rss_mb,
    print_figures,
    reset_peak_rss,
    serving,
    workdir,
    write_result,
)
from loch.backends import open_store
from loch.events import encode_change
from loch.versioning import Put, VersionStore

TARGET_RATIO = 2.0


def table_content(i: int, cid: str | None = None) -> dict[str, Any]:
    """An ICEBERG_TABLE at snapshot ``i``."""
    content: dict[str, Any] = {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://warehouse/bench/t/metadata/{i:08d}.metadata.json",
        "snapshotId": i,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    if cid is not None:
        content["id"] = cid
    return content


class PyIceberg:
    """A pyiceberg SQL catalog on SQLite with one table."""

    def __init__(self, d: Path) -> None:
        from pyiceberg.catalog.sql import SqlCatalog
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField
        from sqlalchemy import text

        logging.getLogger("pyiceberg").setLevel(logging.ERROR)
        self.catalog = SqlCatalog(
            "bench",
            uri=f"sqlite:///{d / 'pyiceberg.db'}",
            warehouse=f"file://{d / 'warehouse'}",
            **{"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
        )
        self.catalog.create_namespace("bench")
        self.table = self.catalog.create_table(
            "bench.t", schema=Schema(NestedField(1, "id", LongType(), required=False))
        )
        self.swap_table = self.catalog.create_table(
            "bench.swap", schema=Schema(NestedField(1, "id", LongType(), required=False))
        )
        self.locations = [
            self.swap_table.metadata_location,
            self.swap_table.metadata_location + ".other",
        ]
        self.n = 0
        # a second catalog file in WAL mode (Loch's journal mode; synchronous stays FULL)
        self.wal_catalog = SqlCatalog(
            "bench",
            uri=f"sqlite:///{d / 'pyiceberg-wal.db'}",
            warehouse=f"file://{d / 'warehouse-wal'}",
            **{"py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO"},
        )
        with self.wal_catalog.engine.connect() as conn:
            conn.execute(text("PRAGMA journal_mode=WAL"))
        self.wal_catalog.create_namespace("bench")
        wal_table = self.wal_catalog.create_table(
            "bench.swap", schema=Schema(NestedField(1, "id", LongType(), required=False))
        )
        self.wal_locations = [wal_table.metadata_location, wal_table.metadata_location + ".x"]
        with self.wal_catalog.engine.connect() as conn:
            self.wal_pragmas = {
                p: conn.execute(text(f"PRAGMA {p}")).scalar()
                for p in ("journal_mode", "synchronous")
            }
        with self.catalog.engine.connect() as conn:
            self.pragmas = {
                p: conn.execute(text(f"PRAGMA {p}")).scalar()
                for p in ("journal_mode", "synchronous")
            }

    def full_commit(self) -> None:
        """A property change: new metadata file, then the catalog update."""
        self.n += 1
        self.table.transaction().set_properties(k=str(self.n)).commit_transaction()

    def pointer_swap(self) -> None:
        """Only the catalog update of a commit (pyiceberg's statement, in its session)."""
        self.locations = self._swap(self.catalog.engine, "swap", self.locations)

    def pointer_swap_wal(self) -> None:
        """The same in WAL mode with synchronous=FULL (on another table row)."""
        self.wal_locations = self._swap(self.wal_catalog.engine, "swap", self.wal_locations)

    def _swap(self, engine: Any, table: str, locations: list[str]) -> list[str]:
        """Move table ``table`` from ``locations[0]`` to ``locations[1]``; the next pair."""
        from pyiceberg.catalog.sql import IcebergTables
        from sqlalchemy import update
        from sqlalchemy.orm import Session

        current, new = locations
        with Session(engine) as session:
            stmt = (
                update(IcebergTables)
                .where(
                    IcebergTables.catalog_name == self.catalog.name,
                    IcebergTables.table_namespace == "bench",
                    IcebergTables.table_name == table,
                    IcebergTables.metadata_location == current,
                )
                .values(metadata_location=new, previous_metadata_location=current)
            )
            if session.execute(stmt).rowcount != 1:  # type: ignore[attr-defined]
                raise RuntimeError("pointer swap lost its condition")
            session.commit()
        return [new, current]


class LochLocal:
    """A table on ``main`` of a Loch store, updated through the VersionStore."""

    def __init__(self, d: Path) -> None:
        self.persist = open_store(f"sqlite:///{d / 'loch-vs.db'}")
        # the server's configuration: each commit also writes its outbox event
        self.vs = VersionStore(self.persist, on_change=encode_change)
        head = self.vs.get_reference("main").hash
        ns = Put(("bench",), {"type": "NAMESPACE", "elements": ["bench"]})
        head = self.vs.commit("main", head, {"message": "ns"}, [ns]).hash
        r = self.vs.commit(
            "main", head, {"message": "create"}, [Put(("bench", "t"), table_content(0))]
        )
        self.cid = r.added_contents[0][1]
        self.head = r.hash
        self.n = 0

    def commit(self) -> None:
        """A content update of the table."""
        self.n += 1
        op = Put(("bench", "t"), table_content(self.n, self.cid))
        self.head = self.vs.commit("main", self.head, {"message": "update t"}, [op]).hash

    def close(self) -> None:
        self.persist.close()


class LochHttp:
    """A table on ``main`` of a ``loch serve`` process, updated over API v2."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(base_url=url + "/api/v2", timeout=30)
        head = self.http.get("/trees/main").json()["reference"]["hash"]
        head = self._commit(
            head,
            [
                {
                    "type": "PUT",
                    "key": {"elements": ["bench"]},
                    "content": {"type": "NAMESPACE", "elements": ["bench"]},
                }
            ],
        )
        r = self.http.post(
            f"/trees/main@{head}/history/commit",
            json={
                "commitMeta": {"message": "create"},
                "operations": [
                    {
                        "type": "PUT",
                        "key": {"elements": ["bench", "t"]},
                        "content": table_content(0),
                    }
                ],
            },
        )
        r.raise_for_status()
        self.cid = r.json()["addedContents"][0]["contentId"]
        self.head = r.json()["targetBranch"]["hash"]
        self.n = 0

    def _commit(self, head: str, ops: list[dict[str, Any]]) -> str:
        r = self.http.post(
            f"/trees/main@{head}/history/commit",
            json={"commitMeta": {"message": "update t"}, "operations": ops},
        )
        r.raise_for_status()
        h: str = r.json()["targetBranch"]["hash"]
        return h

    def commit(self) -> None:
        """A content update of the table."""
        self.n += 1
        op = {
            "type": "PUT",
            "key": {"elements": ["bench", "t"]},
            "content": table_content(self.n, self.cid),
        }
        self.head = self._commit(self.head, [op])

    def close(self) -> None:
        self.http.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.peer", description=__doc__)
    p.add_argument("--rounds", type=int, default=5, help="rounds (cases take turns)")
    p.add_argument("--repeat", type=int, default=40, help="commits per case and round")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    try:
        import pyiceberg
    except ImportError:
        log("bench.peer: pyiceberg not installed (pip install -e '.[bench]'); skipped")
        return 1
    started = machine()
    with workdir("loch-bench-peer-", args.dir) as d:
        pyi = PyIceberg(d)
        local = LochLocal(d)
        with (
            serving(f"sqlite:///{d / 'loch-http.db'}", d / "server.log") as server,
            serving(
                f"sqlite:///{d / 'loch-quiet.db'}", d / "quiet.log", {"LOCH_WEBHOOKS": "off"}
            ) as quiet,
        ):
            remote = LochHttp(server.url)
            remote_quiet = LochHttp(quiet.url)
            log("committing ...")
            reset_peak_rss()
            reset_peak_rss(server.pid)
            samples = interleaved(
                {
                    "pyiceberg_full": pyi.full_commit,
                    "pyiceberg_swap": pyi.pointer_swap,
                    "pyiceberg_swap_wal": pyi.pointer_swap_wal,
                    "loch_vs": local.commit,
                    "loch_http": remote.commit,
                    "loch_http_no_dispatcher": remote_quiet.commit,
                },
                args.rounds,
                args.repeat,
            )
            client_rss = peak_rss_mb()
            server_rss = peak_rss_mb(server.pid)
            remote.close()
            remote_quiet.close()
        local.close()
    med = {k: statistics.median(v) * 1000 for k, v in samples.items()}
    ratio = med["loch_vs"] / med["pyiceberg_swap"]
    figures = [
        Figure(
            "Loch commit (VersionStore), table pointer update",
            med["loch_vs"],
            "ms",
            "pyiceberg SQL catalog pointer swap (SQLite)",
            med["pyiceberg_swap"],
            target=f"<= {TARGET_RATIO:.0f}x pyiceberg",
            met=ratio <= TARGET_RATIO,
            peak_rss_mb=client_rss,
        ),
        Figure(
            "Loch commit over HTTP, table pointer update",
            med["loch_http"],
            "ms",
            "pyiceberg SQL catalog full commit (metadata file + swap)",
            med["pyiceberg_full"],
            target=f"<= {TARGET_RATIO:.0f}x pyiceberg",
            met=med["loch_http"] / med["pyiceberg_full"] <= TARGET_RATIO,
            peak_rss_mb=server_rss,
        ),
        Figure(
            "pyiceberg SQL catalog full commit",
            med["pyiceberg_full"],
            "ms",
            "its pointer swap alone",
            med["pyiceberg_swap"],
            peak_rss_mb=client_rss,
        ),
        Figure(
            "Loch commit (VersionStore), table pointer update, vs WAL",
            med["loch_vs"],
            "ms",
            "pyiceberg pointer swap, catalog in WAL mode (synchronous=FULL)",
            med["pyiceberg_swap_wal"],
        ),
        Figure(
            "Loch commit over HTTP",
            med["loch_http"],
            "ms",
            "Loch commit through VersionStore",
            med["loch_vs"],
        ),
        Figure(
            "Loch commit over HTTP",
            med["loch_http"],
            "ms",
            "same, webhook dispatcher off (LOCH_WEBHOOKS=off)",
            med["loch_http_no_dispatcher"],
        ),
    ]
    details = {
        "ms": {k: Stats.of_seconds(v).__dict__ for k, v in samples.items()},
        "pyiceberg_version": pyiceberg.__version__,
        "pyiceberg_sqlite_pragmas": pyi.pragmas,
        "pyiceberg_wal_sqlite_pragmas": pyi.wal_pragmas,
        "loch_sqlite_pragmas": {"journal_mode": "wal", "synchronous": 2},
    }
    path = write_result("peer", "bench.peer", argv, started, vars(args), figures, details, args.out)
    print_figures(figures)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
