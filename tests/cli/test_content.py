"""``loch content`` (list, view, put, delete) and ``loch config``."""

from __future__ import annotations

import json
from pathlib import Path

from loch.client import LochClient

from .conftest import NO_ANCESTOR, Loch, fresh_name, put_table

TABLE = '{"type": "ICEBERG_TABLE", "metadataLocation": "s3://lake/t/v1.json"}'


def test_put_namespace_then_table(loch: Loch, client: LochClient, branch: str) -> None:
    ns = loch.ok("content", "put", "pns", "--json", '{"type": "NAMESPACE"}', "--ref", branch)
    head = client.get_reference(branch).hash
    lines = ns.stdout.splitlines()
    assert lines[0] == f"Committed {head} to {branch}: put pns (NAMESPACE)"
    ns_id = client.get_content(branch, ("pns",))["id"]
    assert lines[1] == f"  new content pns: id {ns_id}"
    assert client.get_content(branch, ("pns",))["elements"] == ["pns"]
    loch.ok("content", "put", "pns.t", "--json", TABLE, "--ref", branch, "-m", "add t")
    assert client.get_content(branch, ("pns", "t"))["metadataLocation"] == "s3://lake/t/v1.json"
    meta = loch.json("log", branch, "-n", "1")[0]["commitMeta"]
    assert meta["message"] == "add t"


def test_put_updates_keep_the_content_id(loch: Loch, client: LochClient, branch: str) -> None:
    loch.ok("content", "put", "upd", "--json", TABLE, "--ref", branch)
    first = client.get_content(branch, ("upd",))
    moved = TABLE.replace("v1", "v2")
    result = loch.json("content", "put", "upd", "--json", moved, "--ref", branch)
    assert result["addedContents"] == []
    assert result["targetBranch"]["name"] == branch
    assert result["targetBranch"]["hash"] == client.get_reference(branch).hash
    second = client.get_content(branch, ("upd",))
    assert second["id"] == first["id"]
    assert second["metadataLocation"] == "s3://lake/t/v2.json"
    assert loch.ok("diff", f"{branch}~1", branch).stdout.split()[:2] == ["M", "upd"]


def test_put_with_parents(loch: Loch, client: LochClient, branch: str) -> None:
    out = loch.ok("content", "put", "pa.pb.t", "-p", "--json", TABLE, "--ref", branch).stdout
    assert out.splitlines()[0].endswith(
        "put pa.pb.t (ICEBERG_TABLE), created namespace(s) pa, pa.pb"
    )
    keys = [e["name"]["elements"] for e in loch.json("content", "list", "--ref", branch)]
    assert ["pa"] in keys and ["pa", "pb"] in keys and ["pa", "pb", "t"] in keys
    # existing namespaces are not created again
    out = loch.ok("content", "put", "pa.pb.u", "-p", "--json", TABLE, "--ref", branch).stdout
    assert out.splitlines()[0].endswith("put pa.pb.u (ICEBERG_TABLE)")


def test_put_without_namespace_conflicts(loch: Loch, client: LochClient, branch: str) -> None:
    before = client.get_reference(branch).hash
    run = loch.process("content", "put", "nons.t", "--json", TABLE, "--ref", branch)
    assert run.code == 1
    assert run.stderr.splitlines() == [
        "loch: error: Namespace 'nons' must exist.",
        "  nons: NAMESPACE_ABSENT: namespace 'nons' must exist",
    ]
    assert client.get_reference(branch).hash == before


def test_put_from_file_and_stdin(
    loch: Loch, client: LochClient, branch: str, tmp_path: Path
) -> None:
    path = tmp_path / "view.json"
    path.write_text(json.dumps({"type": "ICEBERG_VIEW", "metadataLocation": "s3://v/1.json"}))
    loch.ok("content", "put", "fview", "--json", str(path), "--ref", branch)
    assert client.get_content(branch, ("fview",))["type"] == "ICEBERG_VIEW"
    delta = {"type": "DELTA_LAKE_TABLE", "metadataLocationHistory": ["s3://d/0.json"]}
    run = loch.process(
        "content", "put", "fdelta", "--json", "-", "--ref", branch, input=json.dumps(delta)
    )
    assert run.code == 0, run.stderr
    assert client.get_content(branch, ("fdelta",))["type"] == "DELTA_LAKE_TABLE"
    assert "s3://d/0.json" in loch.ok("content", "list", "--ref", branch, "-l").stdout


def test_put_input_errors(loch: Loch, client: LochClient, branch: str, tmp_path: Path) -> None:
    before = client.get_reference(branch).hash
    cases = {
        "{not json": "not valid JSON",
        "[1, 2]": 'must be a JSON object with a "type"',
        '{"metadataLocation": "s3://x"}': 'must be a JSON object with a "type"',
        str(tmp_path / "missing.json"): "cannot read",
    }
    for source, message in cases.items():
        run = loch("content", "put", "bad", "--json", source, "--ref", branch)
        assert run.code == 2, source
        assert message in run.stderr, source
    assert loch("content", "put", "bad", "--ref", branch).code == 2  # --json is required
    assert loch("content", "put", "a..b", "--json", TABLE, "--ref", branch).code == 2
    unknown_type = loch("content", "put", "bad", "--json", '{"type": "BOGUS"}', "--ref", branch)
    assert unknown_type.code == 1
    assert unknown_type.stderr.startswith("loch: error: ")
    assert client.get_reference(branch).hash == before


def test_put_with_stale_expected_hash(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("stale_t",), "s3://1")
    old = client.get_reference(branch).hash
    put_table(client, branch, ("stale_t",), "s3://2")
    run = loch("content", "put", "stale_t", "--json", TABLE, "--ref", f"{branch}@{old}")
    assert run.code == 1
    assert "VALUE_DIFFERS" in run.stderr
    # other keys commit fine against the older hash
    loch.ok("content", "put", "other_t", "--json", TABLE, "--ref", f"{branch}@{old}")


def test_put_target_must_be_a_branch(loch: Loch, client: LochClient) -> None:
    tag = fresh_name("v")
    client.create_tag(tag, from_ref="main")
    run = loch("content", "put", "x", "--json", TABLE, "--ref", tag)
    assert run.code == 1
    assert "branch" in run.stderr
    assert loch("content", "put", "x", "--json", TABLE, "--ref", "main~1").code == 2


def test_view(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("vdb", "t"), "s3://view/1")
    value = client.get_content(branch, ("vdb", "t"))
    assert json.loads(loch.ok("content", "view", "vdb.t", "--ref", branch).stdout) == value
    assert loch.json("content", "view", "vdb.t", "--ref", branch) == value
    assert loch.json("--ref", branch, "content", "view", ".vdb.t") == value  # escaped form


def test_view_errors(loch: Loch, branch: str) -> None:
    run = loch.process("content", "view", "no.such.key", "--ref", branch)
    assert run.code == 1
    assert run.stderr == (
        f"loch: error: Could not find content for key 'no.such.key' in reference '{branch}'.\n"
    )
    bad = loch.process("content", "view", "db..t")
    assert bad.code == 2
    assert "'db..t' is not a valid key" in bad.stderr
    assert "Traceback" not in bad.stderr
    assert loch("content", "view", ".a*x").code == 2  # illegal escape
    assert loch("content", "view", "x", "--ref", "no-such-ref").code == 1


def test_keys_with_dots_round_trip(loch: Loch, client: LochClient, branch: str) -> None:
    loch.ok("content", "put", ".a*.b", "--json", TABLE, "--ref", branch)
    assert client.get_content(branch, ("a.b",))["type"] == "ICEBERG_TABLE"
    listed = loch.ok("content", "list", "--ref", branch).stdout.split()
    assert ".a*.b" in listed
    assert loch.json("content", "view", ".a*.b", "--ref", branch)["type"] == "ICEBERG_TABLE"


def test_list(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("ldb", "t1"), "s3://l/1")
    put_table(client, branch, ("ldb", "sub", "t2"), "s3://l/2")
    put_table(client, branch, ("lother",), "s3://l/3")
    rows = [line.split() for line in loch.ok("content", "list", "-r", branch).stdout.splitlines()]
    ids = {e.key: e.content_id for e in client.entries(branch)}
    assert ["ldb.sub.t2", "ICEBERG_TABLE", ids[("ldb", "sub", "t2")]] in rows
    assert (
        loch.ok("--ref", branch, "content").stdout
        == loch.ok("content", "list", "--ref", branch).stdout
    )
    under = loch.ok("content", "list", "-r", branch, "--prefix", "ldb").stdout.split("\n")
    assert [line.split()[0] for line in under if line] == ["ldb", "ldb.sub", "ldb.sub.t2", "ldb.t1"]
    namespaces = loch.json("content", "list", "-r", branch, "--type", "namespace")
    assert {tuple(e["name"]["elements"]) for e in namespaces} == {("ldb",), ("ldb", "sub")}
    named = loch.json("content", "list", "-r", branch, "--filter", "entry.name == 't1'")
    assert named == [
        {
            "name": {"elements": ["ldb", "t1"]},
            "type": "ICEBERG_TABLE",
            "contentId": ids[("ldb", "t1")],
        }
    ]
    long_rows = loch.ok("content", "list", "-r", branch, "-l", "--prefix", "lother").stdout
    assert long_rows.split() == ["lother", "ICEBERG_TABLE", ids[("lother",)], "s3://l/3"]
    with_content = loch.json("content", "list", "-r", branch, "-l", "--prefix", "lother")
    assert with_content[0]["content"]["metadataLocation"] == "s3://l/3"


def test_list_empty_and_errors(loch: Loch, client: LochClient) -> None:
    empty = fresh_name()
    client.create_branch(empty, NO_ANCESTOR)
    run = loch("content", "list", "--ref", empty)
    assert (run.code, run.stdout) == (0, "")
    assert loch.json("content", "list", "--ref", empty) == []
    assert loch("content", "list", "--type", "parquet").code == 2
    bad = loch("content", "list", "--filter", "entry.(")
    assert bad.code == 1
    assert "Invalid filter expression" in bad.stderr


def test_delete(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("ddb", "t"), "s3://d")
    put_table(client, branch, ("ddb", "u"), "s3://d")
    out = loch.ok("content", "delete", "ddb.t", "--ref", branch).stdout
    head = client.get_reference(branch).hash
    assert out == f"Committed {head} to {branch}: deleted ddb.t\n"
    assert loch.json("log", branch, "-n", "1")[0]["commitMeta"]["message"] == "Delete ddb.t"
    result = loch.json("content", "delete", "ddb.u", "ddb", "--ref", branch, "-m", "drop all")
    assert result["targetBranch"]["hash"] == client.get_reference(branch).hash
    keys = [e.key for e in client.entries(branch)]
    assert ("ddb",) not in keys and ("ddb", "u") not in keys


def test_delete_errors(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("dens", "t"), "s3://d")
    missing = loch.process("content", "delete", "not_there", "--ref", branch)
    assert missing.code == 1
    assert missing.stderr.splitlines() == [
        "loch: error: Key 'not_there' does not exist.",
        "  not_there: KEY_DOES_NOT_EXIST: key 'not_there' does not exist",
    ]
    not_empty = loch("content", "delete", "dens", "--ref", branch)
    assert not_empty.code == 1
    assert "dens: NAMESPACE_NOT_EMPTY" in not_empty.stderr
    assert loch("content", "delete", "--ref", branch).code == 2
    assert loch("content", "delete", "a..b", "--ref", branch).code == 2


def test_config(loch: Loch) -> None:
    rows = [line.split(None, 2) for line in loch.ok("config").stdout.splitlines()]
    settings = {r[0]: r[1:] for r in rows}
    assert settings["uri"] == [loch.uri, "client"]
    assert settings["defaultBranch"] == ["main", "server"]
    assert settings["noAncestorHash"] == [NO_ANCESTOR, "server"]
    doc = loch.json("config")
    assert doc["client"] == {"uri": loch.uri, "ref": None}
    assert doc["server"]["specVersion"] == "2.2.0"
    assert loch.ok("config", "defaultBranch").stdout == "main\n"
    assert loch.ok("--ref", "etl@" + "ab" * 4, "config", "ref").stdout == "etl@abababab\n"
    assert loch.json("config", "maxSupportedApiVersion") == 2
    unknown = loch("config", "nope")
    assert unknown.code == 1
    assert unknown.stderr.startswith("loch: error: no setting 'nope' (known: ")
