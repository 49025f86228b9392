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


@pytest.fixture
def conflicting(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> tuple[str, str]:
    """x picked onto the target, then moved on both: the source's last commit conflicts."""
    branch, hashes = source
    loch.ok("cherry-pick", hashes[0], "--from", branch, "--onto", target)
    put_table(client, target, ("cp", "x"), "s3://x-on-target")
    put_table(client, branch, ("cp", "x"), "s3://x-on-source", message="move x")
    return branch, target


def test_cherry_pick_conflict_lists_each_key(
    loch: Loch, client: LochClient, conflicting: tuple[str, str]
) -> None:
    branch, target = conflicting
    before = client.get_reference(target).hash
    run = loch.process("cherry-pick", branch, "--from", branch, "--onto", target)
    assert run.code == 1
    assert run.stdout.splitlines() == [
        "cp.x  NORMAL  VALUE_DIFFERS  values of existing and expected content for key 'cp.x' "
        "are different"
    ]
    assert run.stderr == (
        f"loch: error: cherry-pick of 1 commit(s) from {branch} onto {target} has conflicts "
        "in 1 key(s): cp.x\n"
    )
    assert client.get_reference(target).hash == before
    dry = loch("cherry-pick", branch, "--from", branch, "--onto", target, "--dry-run")
    assert (dry.code, dry.stdout) == (1, run.stdout)
    as_json = loch("--json", "cherry-pick", branch, "--from", branch, "--onto", target)
    assert as_json.code == 1
    result = as_json.json()
    assert (result["wasSuccessful"], result["wasApplied"]) == (False, False)
    [detail] = result["details"]
    assert detail["key"] == {"elements": ["cp", "x"]}
    assert detail["conflict"]["conflictType"] == "VALUE_DIFFERS"


def test_cherry_pick_conflict_in_a_chain_lists_every_key(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    put_table(client, target, ("cp", "y"), "s3://y-on-target")
    run = loch.process("cherry-pick", *hashes, "--from", branch, "--onto", target)
    assert run.code == 1
    rows = [line.split(None, 3)[:3] for line in run.stdout.splitlines()]
    assert rows == [
        ["cp", "NORMAL", "ok"],  # a namespace added on both sides is no conflict
        ["cp.x", "NORMAL", "ok"],
        ["cp.y", "NORMAL", "KEY_EXISTS"],
        ["cp.z", "NORMAL", "ok"],
    ]
    assert run.stderr.endswith("has conflicts in 1 key(s): cp.y\n")
    assert client.get_content(target, ("cp", "y"))["metadataLocation"] == "s3://y-on-target"


def test_cherry_pick_force_key(
    loch: Loch, client: LochClient, conflicting: tuple[str, str]
) -> None:
    branch, target = conflicting
    out = loch.ok("cherry-pick", branch, "--from", branch, "--onto", target, "--force-key", "cp.x")
    head = client.get_reference(target).hash
    lines = out.stdout.splitlines()
    assert lines[0] == (
        f"Cherry-picked 1 commit(s) from {branch} onto {target}: {target} is now at {head}"
    )
    assert lines[1].split() == ["cp.x", "FORCE", "ok"]
    assert client.get_content(target, ("cp", "x"))["metadataLocation"] == "s3://x-on-source"


def test_cherry_pick_drop_key_keeps_the_target(
    loch: Loch, client: LochClient, source: tuple[str, list[str]], target: str
) -> None:
    branch, hashes = source
    put_table(client, target, ("cp", "y"), "s3://y-on-target")
    result = loch.json(
        "cherry-pick", *hashes, "--from", branch, "--onto", target,
        "--drop-key", "cp", "--drop-key", "cp.y",
    )  # fmt: skip
    assert (result["wasSuccessful"], result["wasApplied"]) == (True, True)
    modes = {tuple(d["key"]["elements"]): d["mergeBehavior"] for d in result["details"]}
    assert modes == {
        ("cp",): "DROP",
        ("cp", "x"): "NORMAL",
        ("cp", "y"): "DROP",
        ("cp", "z"): "NORMAL",
    }
    assert client.get_content(target, ("cp", "y"))["metadataLocation"] == "s3://y-on-target"
    assert client.get_content(target, ("cp", "z"))["metadataLocation"] == "s3://z"


def test_cherry_pick_strategy(loch: Loch, client: LochClient, conflicting: tuple[str, str]) -> None:
    branch, target = conflicting
    before = client.get_reference(target).hash
    dry = loch.json(
        "cherry-pick", branch, "--from", branch, "--onto", target, "--strategy", "FORCE", "-n"
    )
    assert (dry["wasSuccessful"], dry["wasApplied"]) == (True, False)
    assert [d["mergeBehavior"] for d in dry["details"]] == ["FORCE"]
    assert client.get_reference(target).hash == before
    drop = loch.ok("cherry-pick", branch, "--from", branch, "--onto", target, "--strategy", "drop")
    # the picked commit changes cp.x only: dropping it leaves nothing to commit
    assert drop.stdout == f"Nothing to cherry-pick: the commits change nothing on {target}.\n"
    assert client.get_reference(target).hash == before
    assert client.get_content(target, ("cp", "x"))["metadataLocation"] == "s3://x-on-target"
    force = loch.json(
        "cherry-pick", branch, "--from", branch, "--onto", target, "--strategy", "force"
    )
    assert force["wasApplied"] is True
    assert client.get_content(target, ("cp", "x"))["metadataLocation"] == "s3://x-on-source"


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
    assert loch("cherry-pick", hashes[0], "--from", branch, "--strategy", "sideways").code == 2
    assert loch("cherry-pick", hashes[0], "--from", branch, "--force-key", "..").code == 2
    missing_target = loch.process("cherry-pick", hashes[0], "--from", branch, "--onto", "nope-b")
    assert missing_target.code == 1
    assert missing_target.stderr == "loch: error: Named reference 'nope-b' not found\n"
