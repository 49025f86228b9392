"""``loch log`` and ``loch show``."""

from __future__ import annotations

from loch.client import LochClient

from .conftest import NO_ANCESTOR, UNKNOWN_HASH, Loch, fresh_name, put_table


def _three_commits(client: LochClient, branch: str) -> list[str]:
    return [
        put_table(client, branch, ("logdb", "t"), "s3://one", message="first load"),
        put_table(client, branch, ("logdb", "t"), "s3://two", message="second load\n\nbody"),
        put_table(client, branch, ("logdb", "u"), "s3://three", message="third load"),
    ]


def test_log_text(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    out = loch.ok("log", branch).stdout
    assert out.index(f"commit {hashes[2]}") < out.index(f"commit {hashes[1]}")
    assert "    second load\n    \n    body\n" in out
    assert "Date:   " in out


def test_log_oneline_and_count(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    out = loch.ok("log", branch, "--oneline", "-n", "2").stdout
    assert out == f"{hashes[2]} third load\n{hashes[1]} second load\n"


def test_log_json_shape(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    entries = loch.json("log", branch, "-n", "3")
    assert [e["commitMeta"]["hash"] for e in entries] == hashes[::-1]
    first = entries[0]
    assert set(first) == {"commitMeta", "parentCommitHash", "operations"}
    assert first["operations"] is None
    assert first["parentCommitHash"] == hashes[1]
    assert first["commitMeta"]["message"] == "third load"
    assert first["commitMeta"]["parentCommitHashes"] == [hashes[1]]


def test_log_operations(loch: Loch, client: LochClient, branch: str) -> None:
    _three_commits(client, branch)
    out = loch.ok("log", branch, "-n", "1", "--operations").stdout
    assert "PUT    logdb.u  ICEBERG_TABLE  s3://three" in out
    one = loch.ok("log", branch, "-n", "1", "--oneline", "-o").stdout.splitlines()
    assert one[1].split() == ["PUT", "logdb.u", "ICEBERG_TABLE", "s3://three"]
    ops = loch.json("log", branch, "-n", "1", "-o")[0]["operations"]
    assert ops[0]["key"] == {"elements": ["logdb", "u"]}


def test_log_filter_and_author(loch: Loch, client: LochClient, branch: str) -> None:
    _three_commits(client, branch)
    head = client.get_reference(branch).hash
    assert head is not None
    client.commit(
        branch,
        head,
        [{"type": "DELETE", "key": {"elements": ["logdb", "u"]}}],
        message="by alice",
        authors=["alice"],
    )
    msgs = [
        e["commitMeta"]["message"]
        for e in loch.json("log", branch, "--filter", "commit.message.contains('load')")
    ]
    assert msgs == ["third load", "second load\n\nbody", "first load"]
    assert "Author: alice" in loch.ok("log", branch, "--author", "alice").stdout
    by_alice = loch.json("log", branch, "--author", "alice", "--author", "o'brien")
    assert [e["commitMeta"]["message"] for e in by_alice] == ["by alice"]
    combined = loch.json("log", branch, "--author", "alice", "--filter", "commit.message == 'x'")
    assert combined == []
    bad = loch.process("log", branch, "--filter", "commit.(")
    assert bad.code == 1
    assert bad.stderr.startswith("loch: error: Invalid filter expression")


def test_log_ref_expressions_and_until(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    assert loch.json("log", f"{branch}~1", "-n", "1")[0]["commitMeta"]["hash"] == hashes[1]
    assert loch.json("log", hashes[0], "-n", "1")[0]["commitMeta"]["hash"] == hashes[0]
    until = loch.json("log", branch, "--until", hashes[1])
    assert [e["commitMeta"]["hash"] for e in until] == [hashes[2], hashes[1]]
    assert loch.json("--ref", branch, "log", "-n", "1")[0]["commitMeta"]["hash"] == hashes[2]
    epoch = loch("log", f"{branch}*2000-01-01T00:00:00Z")
    assert epoch.code == 1
    assert "No commit at or before" in epoch.stderr


def test_log_of_an_empty_branch(loch: Loch, client: LochClient) -> None:
    name = fresh_name()
    client.create_branch(name, NO_ANCESTOR)
    run = loch("log", name)
    assert run.code == 0
    assert run.stdout == ""
    assert run.stderr == f"No commits on {name}.\n"
    assert loch.json("log", name) == []


def test_log_errors(loch: Loch) -> None:
    unknown = loch.process("log", "no-such-ref")
    assert (unknown.code, unknown.stderr) == (
        1,
        "loch: error: Named reference 'no-such-ref' not found\n",
    )
    missing = loch("log", UNKNOWN_HASH)
    assert missing.code == 1
    assert f"Commit '{UNKNOWN_HASH}' not found" in missing.stderr
    assert loch("log", "-n", "0").code == 2


def test_show_head_commit(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    out = loch.ok("show", branch).stdout.splitlines()
    assert out[0] == f"commit {hashes[2]}"
    assert out[1] == f"Parent: {hashes[1]}"
    assert "    third load" in out
    assert out[-1].split()[:3] == ["PUT", "logdb.u", "ICEBERG_TABLE"]
    assert out[-1].split()[-1] == "s3://three"


def test_show_by_hash_and_json(loch: Loch, client: LochClient, branch: str) -> None:
    hashes = _three_commits(client, branch)
    shown = loch.json("show", hashes[0])
    assert shown["commitMeta"]["hash"] == hashes[0]
    assert [op["key"]["elements"] for op in shown["operations"]] == [["logdb"], ["logdb", "t"]]
    assert loch.json("show", f"{branch}~2") == shown
    assert loch.json("--ref", branch, "show")["commitMeta"]["hash"] == hashes[2]


def test_show_content(loch: Loch, client: LochClient, branch: str) -> None:
    _three_commits(client, branch)
    out = loch.ok("show", branch, "--content").stdout
    assert "PUT logdb.u\n{\n" in out
    assert '"metadataLocation": "s3://three"' in out


def test_show_delete_and_merge_commits(loch: Loch, client: LochClient, branch: str) -> None:
    _three_commits(client, branch)
    target = fresh_name()
    client.create_branch(target, from_ref="main")
    merged = client.merge(target, branch)
    out = loch.ok("show", target).stdout
    assert out.startswith(f"commit {merged.resultant_target_hash}\nMerge:  ")
    head = client.get_reference(branch).hash
    assert head is not None
    assert head in out.splitlines()[1]
    client.commit(
        branch, head, [{"type": "DELETE", "key": {"elements": ["logdb", "u"]}}], message="drop u"
    )
    assert loch.ok("show", branch).stdout.splitlines()[-1].split() == ["DELETE", "logdb.u"]


def test_show_errors(loch: Loch, client: LochClient) -> None:
    empty = fresh_name()
    client.create_branch(empty, NO_ANCESTOR)
    run = loch.process("show", empty)
    assert run.code == 1
    assert run.stderr.startswith(f"loch: error: '{empty}' has no commits")
    missing = loch("show", UNKNOWN_HASH)
    assert missing.code == 1
    assert "not found" in missing.stderr
    assert loch("show", "x" * 3 + "@zz").code == 2
