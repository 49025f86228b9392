"""End to end: a real ``loch serve`` process on a free port and an SQLite file, driven
over HTTP with httpx like a client would (percent-encoded slashed refs, chunked gzip
bodies), stopped with SIGTERM (graceful, exit 0) and restarted on the same file.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from .helpers import (
    NO_ANCESTOR,
    SPEC2,
    V1,
    V2,
    Api,
    assert_error,
    enc,
    iceberg_meta,
    key,
    live_server,
    namespace,
    put,
    table,
)

JAVA_HEADERS = {
    "Accept": "application/json; charset=utf-8",
    "Accept-Encoding": "gzip;q=1.0, deflate;q=0.9",
    **SPEC2,
}


def chunked_gzip(body: dict[str, Any]) -> Iterator[bytes]:
    """A gzip-compressed JSON body as a generator: httpx sends it chunked."""
    data = gzip.compress(json.dumps(body).encode())
    for i in range(0, len(data), 64):
        yield data[i : i + 64]


def java_commit(http: httpx.Client, branch: str, expected: str, *ops: dict[str, Any]) -> Any:
    """A commit the way the JDK HTTP client sends it: chunked, gzip, Nessie-Client-Spec."""
    body = {"commitMeta": iceberg_meta("e2e"), "operations": list(ops)}
    return http.post(
        f"{V2}/trees/{enc(branch + '@' + expected)}/history/commit",
        content=chunked_gzip(body),
        headers={**JAVA_HEADERS, "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )


def test_full_flow_graceful_stop_and_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'e.db'}"
    log = tmp_path / "server.log"
    with live_server(store, log, log_level="info") as server:
        with httpx.Client(base_url=server.url, timeout=10.0) as http:
            api = Api(http)
            config = api.ok(http.get(f"{V2}/config", headers=JAVA_HEADERS))
            assert config["actualApiVersion"] == 2
            assert api.head() == NO_ANCESTOR

            dev = api.create("feature/e2e")
            assert dev == {"type": "BRANCH", "name": "feature/e2e", "hash": NO_ANCESTOR}

            resp = java_commit(http, "feature/e2e", NO_ANCESTOR, put(["db"], namespace("db")))
            h1 = api.ok(resp)["targetBranch"]["hash"]
            resp = java_commit(
                http, "feature/e2e", h1, put(["db", "t"], table("s3://w/db/t/0.json"))
            )
            body = api.ok(resp)
            h2 = body["targetBranch"]["hash"]
            (added,) = body["addedContents"]
            assert added["key"] == key("db", "t")

            # a conflicting commit gets details with Nessie-Client-Spec: 2
            resp = java_commit(http, "feature/e2e", h1, put(["db", "t"], table("s3://other")))
            err = assert_error(resp, 409, "REFERENCE_CONFLICT", details=True)
            assert err["errorDetails"]["conflicts"][0]["conflictType"] == "KEY_EXISTS"

            merge = api.ok(
                http.post(
                    f"{V2}/trees/main%40{NO_ANCESTOR}/history/merge",
                    json={"fromRefName": "feature/e2e", "fromHash": h2},
                )
            )
            assert merge["wasApplied"] is True and merge["wasSuccessful"] is True
            merged = merge["resultantTargetHash"]
            assert api.head() == merged

            log_entries = api.log()
            assert len(log_entries) == 1
            assert log_entries[0]["commitMeta"]["parentCommitHashes"] == [NO_ANCESTOR, h2]
            assert api.log("feature/e2e@")[0]["commitMeta"]["hash"] == h2
            assert api.key_list() == [("db",), ("db", "t")]
            assert api.content("main", "db", "t")["id"] == added["contentId"]

            # pynessie's view of the same data
            v1_log = http.get(f"{V1}/trees/tree/{enc('feature/e2e')}/log").json()
            assert [e["commitMeta"]["hash"] for e in v1_log["logEntries"]] == [h2, h1]

        started = time.monotonic()
        server.stop(timeout=10.0)  # the exit status is checked in test_sigterm_exits_0
        assert time.monotonic() - started < 5.0
        assert "Application shutdown complete" in server.log(), server.log()

    with live_server(store, log) as again, httpx.Client(base_url=again.url, timeout=10.0) as http:
        api = Api(http)
        assert api.head() == merged
        assert api.head("feature/e2e") == h2
        assert api.key_list() == [("db",), ("db", "t")]
        assert api.content("main", "db", "t")["metadataLocation"] == "s3://w/db/t/0.json"
        assert [e["commitMeta"]["hash"] for e in api.log("feature/e2e")] == [h2, h1]


def test_sigterm_exits_0(tmp_path: Path) -> None:
    """SIGTERM is a normal stop: graceful shutdown, then exit status 0 within seconds."""
    store, log = f"sqlite:///{tmp_path / 's.db'}", tmp_path / "s.log"
    with live_server(store, log, log_level="info") as server:
        with httpx.Client(base_url=server.url, timeout=10.0) as http:
            assert http.get("/healthz").status_code == 200  # an idle keep-alive connection
            started = time.monotonic()
            code = server.stop(timeout=10.0)
            elapsed = time.monotonic() - started
        assert "Application shutdown complete" in server.log(), server.log()
        assert elapsed < 5.0, elapsed
        assert code == 0, f"exit status {code}\n{server.log()}"
