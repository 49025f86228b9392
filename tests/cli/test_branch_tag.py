"""``loch branch`` and ``loch tag``: list, create, delete, assign, and their errors."""

from __future__ import annotations

import pytest

from loch.client import LochClient

from .conftest import UNKNOWN_HASH, Loch, fresh_name, put_table


def test_branch_list_marks_the_default_branch(loch: Loch, branch: str) -> None:
    lines = loch.ok("branch", "list").stdout.splitlines()
    main = next(line for line in lines if line.split()[1:2] == ["main"])
    assert main.startswith("*")
    mine = next(line for line in lines if branch in line.split())
    assert not mine.startswith("*")
    assert loch.ok("branch").stdout == loch.ok("branch", "list").stdout  # alone: list


def test_branch_list_json_has_only_branches(loch: Loch, client: LochClient) -> None:
    tag = fresh_name("tag")
    client.create_tag(tag, from_ref="main")
    refs = loch.json("branch", "list")
    assert {"type": "BRANCH", "name": "main", "hash": client.get_reference("main").hash} in refs
    assert all(r["type"] == "BRANCH" for r in refs)
    assert all(set(r) == {"type", "name", "hash"} for r in refs)
    tags = loch.json("tag", "list")
    assert all(r["type"] == "TAG" for r in tags)
    assert tag in [r["name"] for r in tags]
    assert tag in loch.ok("tag").stdout


def test_branch_list_verbose_counts_commits(loch: Loch, client: LochClient, branch: str) -> None:
    put_table(client, branch, ("verbose_t",), "s3://v", message="verbose commit")
    row = next(r for r in loch.json("branch", "list", "-v") if r["name"] == branch)
    assert row["metadata"]["numCommitsAhead"] == 1
    line = next(li for li in loch.ok("branch", "list", "-v").stdout.splitlines() if branch in li)
    assert line.split()[2] == "1"  # mark, name, hash, ahead
    assert line.endswith("verbose commit")


def test_branch_list_filter(loch: Loch, branch: str) -> None:
    out = loch.ok("branch", "list", "--filter", f"ref.name == '{branch}'").stdout
    assert [line.split()[0] for line in out.splitlines()] == [branch]
    bad = loch("branch", "list", "--filter", "ref.name ==")
    assert bad.code == 1
    assert bad.stderr.startswith("loch: error: Invalid filter expression")


def test_create_branch_from_default_and_json(loch: Loch, client: LochClient) -> None:
    name = fresh_name()
    run = loch.ok("branch", "create", name)
    head = client.get_reference("main").hash
    assert run.stdout == f"Created branch {name} at {head}\n"
    other = fresh_name()
    assert loch.json("branch", "create", other) == {"type": "BRANCH", "name": other, "hash": head}


def test_create_branch_from_ref_specs(loch: Loch, client: LochClient, branch: str) -> None:
    first = put_table(client, branch, ("spec_t",), "s3://1")
    second = put_table(client, branch, ("spec_t",), "s3://2")
    for source, expected in [
        (f"{branch}~1", first),
        (branch, second),
        (first, first),  # a bare hash
        (f"@{second}", second),
        (f"{branch}@{first}", first),
        (f"{branch}~2", client.get_reference("main").hash),
    ]:
        made = loch.json("branch", "create", fresh_name(), source)
        assert made["hash"] == expected, source


def test_create_tag_at_a_branch(loch: Loch, client: LochClient, branch: str) -> None:
    head = put_table(client, branch, ("tagged",), "s3://t")
    name = fresh_name("v")
    assert loch.ok("tag", "create", name, branch).stdout == f"Created tag {name} at {head}\n"
    assert client.get_reference(name).type == "TAG"
    # a branch created from the tag
    assert loch.json("branch", "create", fresh_name(), name)["hash"] == head


def test_create_errors(loch: Loch, branch: str) -> None:
    run = loch.process("branch", "create", branch)
    assert run.code == 1
    assert run.stderr == f"loch: error: Named reference '{branch}' already exists.\n"
    bad = loch("branch", "create", "bad..name")
    assert bad.code == 2
    assert "is not a valid reference name" in bad.stderr
    unknown = loch("branch", "create", fresh_name(), "no-such-ref")
    assert unknown.code == 1
    assert "Named reference 'no-such-ref' not found" in unknown.stderr
    missing_commit = loch("tag", "create", fresh_name(), UNKNOWN_HASH)
    assert missing_commit.code == 1
    assert "not found" in missing_commit.stderr
    reserved = loch("branch", "create", "HEAD")
    assert reserved.code == 1
    assert "reserved" in reserved.stderr


def test_delete_branch(loch: Loch, client: LochClient) -> None:
    name = fresh_name()
    head = client.create_branch(name, from_ref="main").hash
    assert loch.ok("branch", "delete", name).stdout == f"Deleted branch {name} (was {head})\n"
    assert name not in [r["name"] for r in loch.json("branch", "list")]
    gone = loch.process("branch", "delete", name)
    assert gone.code == 1
    assert gone.stderr == f"loch: error: Named reference '{name}' not found\n"


def test_delete_several_json(loch: Loch, client: LochClient) -> None:
    names = [fresh_name(), fresh_name()]
    for n in names:
        client.create_branch(n, from_ref="main")
    deleted = loch.json("branch", "delete", *names)
    assert [d["name"] for d in deleted] == names


def test_delete_with_expected_hash(loch: Loch, client: LochClient, branch: str) -> None:
    old = client.get_reference(branch).hash
    put_table(client, branch, ("moved",), "s3://m")
    stale = loch("branch", "delete", f"{branch}@{old}")
    assert stale.code == 1
    assert "is not at expected hash" in stale.stderr
    assert "(reference): UNEXPECTED_HASH" in stale.stderr
    now = client.get_reference(branch).hash
    assert loch.ok("branch", "delete", f"{branch}@{now}").code == 0


def test_delete_refusals(loch: Loch, client: LochClient) -> None:
    main = loch("branch", "delete", "main")
    assert main.code == 1
    assert main.stderr == "loch: error: Default branch 'main' cannot be deleted.\n"
    tag = fresh_name("v")
    client.create_tag(tag, from_ref="main")
    wrong_type = loch("branch", "delete", tag)
    assert wrong_type.code == 1
    assert "is not a branch" in wrong_type.stderr
    assert loch.ok("tag", "delete", tag).stdout.startswith(f"Deleted tag {tag} (was ")
    assert loch("branch", "delete", f"{fresh_name()}~1").code == 2
    assert loch("branch", "delete").code == 2


def test_assign_branch(loch: Loch, client: LochClient, branch: str) -> None:
    before = client.get_reference(branch).hash
    target = put_table(client, fresh_branch(client), ("assigned",), "s3://a")
    run = loch.ok("branch", "assign", branch, target)
    assert run.stdout == f"Assigned branch {branch} to {target} (was {before})\n"
    assert client.get_reference(branch).hash == target
    # back to the beginning of time, by reference expression
    back = loch.json("branch", "assign", branch, f"{branch}~1")
    assert back == {"type": "BRANCH", "name": branch, "hash": client.get_reference("main").hash}


def fresh_branch(client: LochClient) -> str:
    name = fresh_name()
    client.create_branch(name, from_ref="main")
    return name


def test_assign_with_stale_expected_hash_conflicts(
    loch: Loch, client: LochClient, branch: str
) -> None:
    old = client.get_reference(branch).hash
    put_table(client, branch, ("stale",), "s3://s")
    run = loch.process("branch", "assign", f"{branch}@{old}", "main")
    assert run.code == 1
    assert run.stderr.startswith(f"loch: error: Named-reference '{branch}' is not at expected")


def test_assign_errors(loch: Loch, branch: str) -> None:
    assert "Named reference 'nope-x' not found" in loch("branch", "assign", "nope-x", "main").stderr
    missing = loch("branch", "assign", branch, UNKNOWN_HASH)
    assert missing.code == 1
    assert "not found" in missing.stderr
    assert loch("branch", "assign", branch).code == 2


def test_tag_assign_and_branch_commands_refuse_tags(
    loch: Loch, client: LochClient, branch: str
) -> None:
    tag = fresh_name("v")
    client.create_tag(tag, from_ref="main")
    head = put_table(client, branch, ("tag_assign",), "s3://ta")
    assert loch.json("tag", "assign", tag, branch) == {"type": "TAG", "name": tag, "hash": head}
    refused = loch("branch", "assign", tag, "main")
    assert refused.code == 1
    assert "is not a branch" in refused.stderr


@pytest.mark.parametrize("name", ["feature/x", "a.b-c_d"])
def test_names_with_slashes_and_dots(loch: Loch, name: str) -> None:
    full = f"{name}{fresh_name()}"
    loch.ok("branch", "create", full)
    assert full in [r["name"] for r in loch.json("branch", "list")]
    assert loch.json("log", full) == loch.json("log", "main")
    loch.ok("branch", "delete", full)
