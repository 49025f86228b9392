"""Hive tables and databases (Loch's extension content types) reach only clients that ask.

Iceberg's Java client fails to parse an entries listing that holds a content type it does
not know (``SHOW TABLES`` breaks), and pynessie rejects such content. So the API answers
``HIVE_TABLE``/``HIVE_DATABASE`` only to requests with ``Loch-Content-Types`` naming them
(or ``*``), in entries, contents, diffs and log operations, v1 and v2 alike.
"""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient

from .helpers import V1, V2, Api, enc, key, namespace, put, table

HIVE = {"Loch-Content-Types": "HIVE_TABLE,HIVE_DATABASE"}
ALL = {"Loch-Content-Types": "*"}


def hive_table() -> dict[str, Any]:
    return {"type": "HIVE_TABLE", "id": None, "metadataLocation": "hdfs://warehouse/db/h"}


def hive_database() -> dict[str, Any]:
    return {"type": "HIVE_DATABASE", "id": None, "metadataLocation": "hdfs://warehouse/hdb"}


def setup(api: Api) -> tuple[str, str]:
    base = api.commit("main", put(["db"], namespace("db")), message="ns")["targetBranch"]["hash"]
    head = api.commit(
        "main",
        put(["db", "t"], table()),
        put(["db", "h"], hive_table()),
        put(["hdb"], hive_database()),
        message="tables",
    )["targetBranch"]["hash"]
    return base, head


def entry_types(body: dict[str, Any]) -> dict[tuple[str, ...], str]:
    return {tuple(e["name"]["elements"]): e["type"] for e in body["entries"]}


def test_entries_hide_hive_types_unless_asked(client: TestClient) -> None:
    api = Api(client)
    setup(api)
    plain = api.ok(client.get(f"{V2}/trees/main/entries"))
    assert entry_types(plain) == {("db",): "NAMESPACE", ("db", "t"): "ICEBERG_TABLE"}
    for headers in (HIVE, ALL):
        asked = api.ok(client.get(f"{V2}/trees/main/entries", headers=headers))
        assert entry_types(asked) == {
            ("db",): "NAMESPACE",
            ("db", "t"): "ICEBERG_TABLE",
            ("db", "h"): "HIVE_TABLE",
            ("hdb",): "HIVE_DATABASE",
        }
    only_tables = api.ok(
        client.get(f"{V2}/trees/main/entries", headers={"Loch-Content-Types": "HIVE_TABLE"})
    )
    assert ("db", "h") in entry_types(only_tables)
    assert ("hdb",) not in entry_types(only_tables)
    v1 = client.get(f"{V1}/trees/tree/main/entries")
    assert {tuple(e["name"]["elements"]) for e in v1.json()["entries"]} == {("db",), ("db", "t")}


def test_contents_and_diff_and_log(client: TestClient) -> None:
    api = Api(client)
    base, head = setup(api)
    missing = client.get(f"{V2}/trees/main/contents/db.h")
    assert missing.status_code == 404
    assert missing.json()["errorCode"] == "CONTENT_NOT_FOUND"
    found = api.ok(client.get(f"{V2}/trees/main/contents/db.h", headers=HIVE))
    assert found["content"]["type"] == "HIVE_TABLE"
    assert found["content"]["metadataLocation"] == "hdfs://warehouse/db/h"

    body = {"requestedKeys": [key("db", "t"), key("db", "h")]}
    plain = api.ok(client.post(f"{V2}/trees/main/contents", json=body))
    assert [c["key"]["elements"] for c in plain["contents"]] == [["db", "t"]]
    asked = api.ok(client.post(f"{V2}/trees/main/contents", json=body, headers=ALL))
    assert sorted(c["key"]["elements"] for c in asked["contents"]) == [["db", "h"], ["db", "t"]]
    v1 = client.get(f"{V1}/contents/db.h", params={"ref": "main"})
    assert v1.status_code == 404

    diff = api.ok(client.get(f"{V2}/trees/{enc('main@' + base)}/diff/main"))
    assert [d["key"]["elements"] for d in diff["diffs"]] == [["db", "t"]]
    diff_all = api.ok(client.get(f"{V2}/trees/{enc('main@' + base)}/diff/main", headers=ALL))
    assert len(diff_all["diffs"]) == 3

    log = api.ok(client.get(f"{V2}/trees/main/history", params={"fetch": "ALL"}))
    ops = log["logEntries"][0]["operations"]
    assert [o["key"]["elements"] for o in ops] == [["db", "t"]]
    log_all = api.ok(client.get(f"{V2}/trees/main/history", params={"fetch": "ALL"}, headers=ALL))
    assert len(log_all["logEntries"][0]["operations"]) == 3
    assert head == log["logEntries"][0]["commitMeta"]["hash"]


def test_hidden_key_is_still_occupied(client: TestClient) -> None:
    """Hiding is a view: a Hive table still owns its key, so putting an Iceberg table there
    as new content conflicts instead of silently replacing it."""
    api = Api(client)
    setup(api)
    resp = api.commit_resp("main", put(["db", "h"], table()), headers={"Nessie-Client-Spec": "2"})
    assert resp.status_code == 400
    assert "existing key 'db.h'" in resp.json()["message"]
