"""``loch diff`` and ``loch merge``."""

from __future__ import annotations

import pytest

from loch.client import LochClient

from .conftest import Loch, fresh_name, put_table


@pytest.fixture
def changed(client: LochClient, branch: str) -> tuple[str, str]:
    """A base branch with tables a, b, c and a branch off it adding d, moving a, deleting b."""
    base = branch
    put_table(client, base, ("dm", "a"), "s3://a1")
    put_table(client, base, ("dm", "b"), "s3://b1")
    put_table(client, base, ("dm", "c"), "s3://c1")
    other = fresh_name()
    client.create_branch(other, from_ref=base)
    put_table(client, other, ("dm", "a"), "s3://a2")
    put_table(client, other, ("dm", "d"), "s3://d1")
    head = client.get_reference(other).hash
    assert head is not None
    client.commit(other, head, [{"type": "DELETE", "key": {"elements": ["dm", "b"]}}], message="rm")
    return base, other


def test_diff_text(loch: Loch, changed: tuple[str, str]) -> None:
    base, other = changed
    lines = [line.split() for line in loch.ok("diff", base, other).stdout.splitlines()]
    assert lines == [
        ["M", "dm.a", "ICEBERG_TABLE", "s3://a1", "->", "s3://a2"],
        ["D", "dm.b", "ICEBERG_TABLE", "s3://b1"],
        ["A", "dm.d", "ICEBERG_TABLE", "s3://d1"],
    ]
    assert loch.ok("diff", base, other, "--name-only").stdout == "dm.a\ndm.b\ndm.d\n"
    reverse = loch.ok("diff", other, base, "--name-only", "--prefix", "dm").stdout
    assert reverse == "dm.a\ndm.b\ndm.d\n"
    assert loch.ok("--ref", other, "diff", base).stdout == loch.ok("diff", base, other).stdout


def test_diff_json(loch: Loch, changed: tuple[str, str]) -> None:
    base, other = changed
    diffs = loch.json("diff", base, other)
    assert [d["key"]["elements"] for d in diffs] == [["dm", "a"], ["dm", "b"], ["dm", "d"]]
    assert set(diffs[0]) == {"key", "from", "to"}
    assert diffs[0]["from"]["metadataLocation"] == "s3://a1"
    assert diffs[0]["to"]["metadataLocation"] == "s3://a2"
    assert diffs[1]["to"] is None and diffs[2]["from"] is None


def test_diff_patch(loch: Loch, changed: tuple[str, str]) -> None:
    base, other = changed
    out = loch.ok("diff", base, other, "-p").stdout
    assert f"--- {base}:dm.a\n+++ {other}:dm.a\n" in out
    assert '-  "metadataLocation": "s3://a1",\n+  "metadataLocation": "s3://a2",\n' in out
    assert f"--- {base}:dm.b\n+++ /dev/null\n" in out
    assert f"--- /dev/null\n+++ {other}:dm.d\n" in out


def test_diff_exit_code_and_empty(loch: Loch, changed: tuple[str, str]) -> None:
    base, other = changed
    assert loch("diff", base, other, "--exit-code").code == 1
    same = loch.process("diff", base, base, "--exit-code")
    assert (same.code, same.stdout) == (0, "")
    assert loch.json("diff", base, base) == []


def test_diff_errors(loch: Loch, branch: str) -> None:
    run = loch.process("diff", branch, "no-such-ref")
    assert run.code == 1
    assert run.stderr == "loch: error: Named reference 'no-such-ref' not found\n"
    assert loch("diff").code == 2
    bad_key = loch("diff", branch, branch, "--prefix", "a..b")
    assert bad_key.code == 2
    assert "is not a valid key" in bad_key.stderr


def test_merge_dry_run_writes_nothing(
    loch: Loch, client: LochClient, changed: tuple[str, str]
) -> None:
    base, other = changed
    before = client.get_reference(base).hash
    out = loch.ok("merge", other, "--into", base, "--dry-run").stdout
    assert out.startswith(f"Dry run: merging {other} into {base} would change 3 key(s);")
    assert "dm.d  NORMAL  ok" in out
    assert client.get_reference(base).hash == before
    result = loch.json("merge", other, "--into", base, "-n")
    assert result["wasApplied"] is False and result["wasSuccessful"] is True
    assert result["resultantTargetHash"] is None


def test_merge_applies_and_then_is_up_to_date(
    loch: Loch, client: LochClient, changed: tuple[str, str]
) -> None:
    base, other = changed
    out = loch.ok("merge", other, "--into", base, "-m", "merge it").stdout
    head = client.get_reference(base).hash
    assert out.splitlines()[0] == f"Merged {other} into {base}: {base} is now at {head}"
    assert loch.json("log", base, "-n", "1")[0]["commitMeta"]["message"] == "merge it"
    assert loch.json("diff", base, other) == []
    again = loch.ok("merge", other, "--into", base).stdout
    assert again.startswith(f"Already up to date: nothing to merge from {other}")


def test_merge_json_and_default_target(
    loch: Loch, client: LochClient, changed: tuple[str, str]
) -> None:
    base, other = changed
    result = loch.json("--ref", base, "merge", other)
    assert result["wasApplied"] is True
    assert result["targetBranch"] == base
    assert result["resultantTargetHash"] == client.get_reference(base).hash
    assert {tuple(d["key"]["elements"]) for d in result["details"]} == {
        ("dm", "a"),
        ("dm", "b"),
        ("dm", "d"),
    }


@pytest.fixture
def conflicting(client: LochClient, changed: tuple[str, str]) -> tuple[str, str]:
    """``changed``, plus a change of dm.a and dm.c on the base: dm.a conflicts."""
    base, other = changed
    put_table(client, base, ("dm", "a"), "s3://a3")
    put_table(client, base, ("dm", "c"), "s3://c3")
    return base, other


def test_merge_conflict_lists_each_key(
    loch: Loch, client: LochClient, conflicting: tuple[str, str]
) -> None:
    base, other = conflicting
    before = client.get_reference(base).hash
    run = loch.process("merge", other, "--into", base)
    assert run.code == 1
    rows = [line.split(None, 3) for line in run.stdout.splitlines()]
    assert rows[0][:3] == ["dm.a", "NORMAL", "VALUE_DIFFERS"]
    assert rows[0][3] == "values of existing and expected content for key 'dm.a' are different"
    assert [r[:3] for r in rows[1:]] == [["dm.b", "NORMAL", "ok"], ["dm.d", "NORMAL", "ok"]]
    assert run.stderr == (
        f"loch: error: merge of {other} into {base} has conflicts in 1 key(s): dm.a\n"
    )
    assert client.get_reference(base).hash == before
    dry = loch("merge", other, "--into", base, "--dry-run")
    assert dry.code == 1 and dry.stdout == run.stdout


def test_merge_conflict_json(loch: Loch, conflicting: tuple[str, str]) -> None:
    base, other = conflicting
    run = loch("--json", "merge", other, "--into", base)
    assert run.code == 1
    result = run.json()
    assert result["wasSuccessful"] is False
    conflict = next(d for d in result["details"] if d["key"]["elements"] == ["dm", "a"])
    assert conflict["conflict"]["conflictType"] == "VALUE_DIFFERS"


def test_merge_force_and_drop(loch: Loch, client: LochClient, conflicting: tuple[str, str]) -> None:
    base, other = conflicting
    dropped = fresh_name()
    client.create_branch(dropped, from_ref=base)
    loch.ok("merge", other, "--into", base, "--force-key", "dm.a")
    assert client.get_content(base, ("dm", "a"))["metadataLocation"] == "s3://a2"
    loch.ok("merge", other, "--into", dropped, "--drop-key", "dm.a")
    assert client.get_content(dropped, ("dm", "a"))["metadataLocation"] == "s3://a3"
    assert [d[0] for d in _keys(loch, dropped)] == ["dm", "dm.a", "dm.c", "dm.d"]  # b deleted


def _keys(loch: Loch, ref: str) -> list[list[str]]:
    return [line.split() for line in loch.ok("content", "list", "--ref", ref).stdout.splitlines()]


def test_merge_strategy_force(loch: Loch, client: LochClient, conflicting: tuple[str, str]) -> None:
    base, other = conflicting
    result = loch.json("merge", other, "--into", base, "--strategy", "force")
    assert result["wasApplied"] is True
    assert {d["mergeBehavior"] for d in result["details"]} == {"FORCE"}
    assert client.get_content(base, ("dm", "a"))["metadataLocation"] == "s3://a2"


def test_merge_errors(loch: Loch, client: LochClient, changed: tuple[str, str]) -> None:
    base, other = changed
    unknown = loch.process("merge", "no-such-ref", "--into", base)
    assert (unknown.code, unknown.stderr) == (
        1,
        "loch: error: Named reference 'no-such-ref' not found\n",
    )
    into_tag = fresh_name("v")
    client.create_tag(into_tag, from_ref=base)
    refused = loch("merge", other, "--into", into_tag)
    assert refused.code == 1
    assert "branch" in refused.stderr
    detached = loch("merge", other, "--into", "@" + "ab" * 32)
    assert detached.code == 2
    assert "must be a branch name" in detached.stderr
    assert loch("merge", other, "--strategy", "sideways").code == 2
    assert loch("merge", other, "--into", base, "--force-key", "..").code == 2
