"""``loch cherry-pick``."""

from __future__ import annotations

import pytest

from loch.client import LochClient

from .conftest import UNKNOWN_HASH, Loch, fresh_name, put_table


@pytest.fixture
def source(client: LochClient, branch: str) -> tuple[str, list[str]]:
    """A branch with three commits on top of ``branch``'s start (main): tables x, y, z."""
    hashes = [
        put_table(client, branch, ("cp", "x"), "s3://x", message="add x"),
        put_table(client, branch, ("cp", "y"), "s3://y", message="add y"),
        put_table(client, branch, ("cp", "z"), "s3://z", message="add z"),
    ]
    return branch, hashes


@pytest.fixture
def target(client: LochClient) -> str:
    """A branch at main's head."""
    name = fresh_name()
    client.create_branch(name, from_ref="main")
    return name


def test_cherry_pick_one_commit(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    out = loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target).stdout
    head = client.get_reference(target).hash
    assert out.splitlines()[0] == (
        f"Cherry-picked 1 commit(s) from {branch} onto {target}: {target} is now at {head}"
    )
    keys = [e["name"]["elements"] for e in loch.json("content", "list", "--ref", target)]
    assert keys == [["cp"], ["cp", "x"]]
    assert loch.json("log", target, "-n", "1")[0]["commitMeta"]["message"] == "add x"


def test_cherry_pick_by_reference(loch: Loch, source: tuple[str, list[str]], target: str) -> None:
    branch, _ = source
    result = loch.json("--ref", target, "cherry-pick", f"{branch}~2", "--from", branch)
    assert result["wasApplied"] is True
    assert result["targetBranch"] == target
    ops = loch.json("show", target)["operations"]
    assert [op["key"]["elements"] for op in ops] == [["cp"], ["cp", "x"]]


def test_cherry_pick_a_chain(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target)
    result = loch.json("--ref", target, "cherry-pick", f"{branch}~1", branch, "--from", branch)
    assert result["wasApplied"] is True
    assert result["targetBranch"] == target
    messages = [e["commitMeta"]["message"] for e in loch.json("log", target, "-n", "3")]
    assert messages == ["add z", "add y", "add x"]


def test_cherry_pick_dry_run_and_message(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    before = client.get_reference(target).hash
    out = loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target, "-n").stdout
    assert out.startswith(f"Dry run: 1 commit(s) from {branch} apply cleanly onto {target};")
    assert client.get_reference(target).hash == before
    loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target, "-m", "picked x")
    assert loch.json("log", target, "-n", "1")[0]["commitMeta"]["message"] == "picked x"


def test_cherry_pick_conflict(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target)
    put_table(client, target, ("cp", "x"), "s3://x-on-target")
    put_table(client, branch, ("cp", "x"), "s3://x-on-source", message="move x")
    before = client.get_reference(target).hash
    run = loch.process("cherry-pick", branch, "--from", branch, "--onto", target)
    assert run.code == 1
    assert run.stdout == ""
    assert run.stderr.splitlines() == [
        "loch: error: The following keys have been changed in conflict: 'cp.x'",
        "  cp.x: VALUE_DIFFERS: values of existing and expected content for key 'cp.x' "
        "are different",
    ]
    assert client.get_reference(target).hash == before
    as_json = loch("--json", "cherry-pick", branch, "--from", branch, "--onto", target)
    assert as_json.code == 1
    assert as_json.json()["error"]["conflicts"][0]["key"] == {"elements": ["cp", "x"]}


def test_cherry_pick_errors(loch: Loch, source: tuple[str, list[str]], target: str) -> None:
    branch, hashes = source
    gap = loch("cherry-pick", hashes[0], hashes[2], "--from", branch, "--onto", target)
    assert gap.code == 1
    assert "not contiguous" in gap.stderr
    unknown = loch("cherry-pick", UNKNOWN_HASH, "--from", branch, "--onto", target)
    assert unknown.code == 1
    assert "not found" in unknown.stderr.lower()
    no_from = loch("cherry-pick", hashes[0], "--onto", target)
    assert no_from.code == 2
    assert "Missing option '--from'" in no_from.stderr
    assert loch("cherry-pick", "--from", branch).code == 2
    assert loch("cherry-pick", hashes[0], "--from", branch, "--onto", f"{target}~1").code == 2
    missing_target = loch.process("cherry-pick", hashes[0], "--from", branch, "--onto", "nope-b")
    assert missing_target.code == 1
    assert missing_target.stderr == "loch: error: Named reference 'nope-b' not found\n"
