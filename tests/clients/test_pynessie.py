"""Compatibility with pynessie 0.67.0: its Python client and its ``nessie`` CLI against a real
``loch serve`` process (API v1).

pynessie parses every response with strict marshmallow schemas (clients.md B.4): an unknown
field, a missing required field or a null in a non-nullable field fails the call, and the CLI
then exits 1. A schema error in these tests therefore means the server emitted a wrong body.

The server runs once per module (SQLite store in a temporary directory). Tests do not depend
on each other: each one works on branches with unique names, created at the no-ancestor hash or
at the current HEAD of ``main``. A second, fresh server checks the state of a new repository.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from marshmallow.warnings import RemovedInMarshmallow4Warning

from loch.testing.server import LochServer

# pynessie 0.67.0 builds its schemas with marshmallow's deprecated ``default=`` argument.
# It ships no type information.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", RemovedInMarshmallow4Warning)
    import pynessie  # type: ignore[import-untyped]
    from pynessie.client import NessieClient  # type: ignore[import-untyped]
    from pynessie.error import (  # type: ignore[import-untyped]
        NessieConflictException,
        NessieContentNotFoundException,
        NessieException,
        NessieReferenceAlreadyExistsException,
        NessieReferenceConflictException,
        NessieReferenceNotFoundException,
    )
    from pynessie.model import (  # type: ignore[import-untyped]
        Branch,
        Content,
        ContentKey,
        Delete,
        DeltaLakeTable,
        IcebergTable,
        IcebergView,
        Namespace,
        Put,
        Tag,
    )

pytestmark = [
    pytest.mark.filterwarnings("ignore::marshmallow.warnings.RemovedInMarshmallow4Warning"),
]

NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
UNKNOWN_HASH = "ab" * 32
NESSIE = Path(sys.prefix) / "bin" / "nessie"


# -- server ---------------------------------------------------------------------------------


@contextmanager
def _loch_serve(tmp: Path) -> Iterator[str]:
    """Run ``loch serve`` on a free port with an SQLite store in ``tmp``; yield the v1 endpoint."""
    store, log = f"sqlite:///{tmp}/p.db", tmp / "loch.log"
    with LochServer(store, log, log_level="warning") as server:
        yield f"{server.url}/api/v1"


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The API v1 endpoint of a ``loch serve`` process shared by this module."""
    with _loch_serve(tmp_path_factory.mktemp("loch")) as url:
        yield url


@pytest.fixture(scope="module")
def nessie_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty pynessie config directory (``NESSIEDIR``), so no user config is read."""
    return tmp_path_factory.mktemp("nessiedir")


def _make_client(url: str, nessie_dir: Path) -> NessieClient:
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if "NESSIE_" in k:
                mp.delenv(k)
        mp.setenv("NESSIEDIR", str(nessie_dir))
        return pynessie.init(
            config_dict={"endpoint": url, "verify": True, "default_branch": "main"}
        )


@pytest.fixture(scope="module")
def client(endpoint: str, nessie_dir: Path) -> NessieClient:
    """pynessie's Python client for the shared server."""
    return _make_client(endpoint, nessie_dir)


# -- CLI --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cli:
    """The ``nessie`` command line, run as a subprocess against one endpoint."""

    endpoint: str
    nessie_dir: Path

    def run(
        self, *args: str, as_json: bool = True, stdin: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if "NESSIE_" not in k}
        env["NESSIEDIR"] = str(self.nessie_dir)
        cmd = [str(NESSIE), "--endpoint", self.endpoint, *(["--json"] if as_json else []), *args]
        return subprocess.run(
            cmd, env=env, input=stdin or "", capture_output=True, text=True, timeout=120
        )

    def json(self, *args: str, stdin: str | None = None) -> Any:
        """Run with ``--json``; expect exit 0 and return the parsed output."""
        p = self.run(*args, stdin=stdin)
        assert p.returncode == 0, _explain(p)
        try:
            return json.loads(p.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"output is not JSON\n{_explain(p)}")

    def json_many(self, *commands: tuple[str, ...]) -> list[Any]:
        """Several read-only ``json`` runs at once (each CLI start-up takes most of a second)."""
        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(lambda args: self.json(*args), commands))

    def ok(self, *args: str, stdin: str | None = None) -> str:
        """Run in text mode; expect exit 0 and return stdout."""
        p = self.run(*args, as_json=False, stdin=stdin)
        assert p.returncode == 0, _explain(p)
        return p.stdout

    def error(self, *args: str) -> dict[str, Any]:
        """Run with ``--json``; expect exit 1 and return the printed server error."""
        p = self.run(*args)
        assert p.returncode == 1, _explain(p)
        try:
            err: dict[str, Any] = json.loads(p.stdout)
        except json.JSONDecodeError:
            pytest.fail(f"error output is not JSON\n{_explain(p)}")
        return err


def _explain(p: subprocess.CompletedProcess[str]) -> str:
    return f"$ {' '.join(p.args)}\nexit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"


@pytest.fixture(scope="module")
def cli(endpoint: str, nessie_dir: Path) -> Cli:
    """The ``nessie`` CLI for the shared server."""
    return Cli(endpoint, nessie_dir)


# -- helpers ----------------------------------------------------------------------------------


def unique(prefix: str) -> str:
    """A reference name no other test uses."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def table(location: str, snapshot: int = 1, id_: str | None = None) -> IcebergTable:
    return IcebergTable(
        id=id_,
        metadata_location=location,
        snapshot_id=snapshot,
        schema_id=0,
        spec_id=0,
        sort_order_id=0,
    )


def key(*elements: str) -> ContentKey:
    return ContentKey(list(elements))


def head(client: NessieClient, ref: str) -> str:
    h = client.get_reference(ref).hash_
    assert isinstance(h, str)
    return h


def new_branch(client: NessieClient, prefix: str, at: str = NO_ANCESTOR) -> str:
    """Create a branch (at the no-ancestor hash by default) and return its name."""
    name = unique(prefix)
    b = client.create_branch(name, "main", at)
    assert isinstance(b, Branch)
    assert (b.name, b.hash_) == (name, at)
    return name


def commit(
    client: NessieClient, branch: str, message: str, *ops: Any, author: str = "alice"
) -> str:
    """Commit ``ops`` at the branch HEAD; return the new HEAD."""
    b = client.commit(branch, head(client, branch), message, author, *ops)
    assert isinstance(b, Branch)
    assert b.name == branch
    assert isinstance(b.hash_, str) and b.hash_ != NO_ANCESTOR
    return b.hash_


def put_table(client: NessieClient, branch: str, name: str, location: str) -> str:
    """Commit a new top-level Iceberg table ``name``; return the new HEAD."""
    return commit(client, branch, f"add {name}", Put(key(name), table(location)))


def log_hashes(client: NessieClient, ref: str) -> list[str]:
    return [e.commit_meta.hash_ for e in client.get_log(ref)]


def entries(client: NessieClient, ref: str) -> dict[tuple[str, ...], str]:
    return {tuple(e.name.elements): e.kind for e in client.list_keys(ref).entries}


def cli_entries(out: list[dict[str, Any]]) -> dict[tuple[str, ...], str]:
    return {tuple(e["name"]["elements"]): e["type"] for e in out}


# -- a fresh repository -----------------------------------------------------------------------


def test_fresh_repository(tmp_path: Path, nessie_dir: Path) -> None:
    """clients.md B.6: only ``main``, at the no-ancestor hash, no tags, no content, no log."""
    with _loch_serve(tmp_path) as url:
        cli = Cli(url, nessie_dir)
        assert cli.json("branch") == [
            {"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR, "metadata": None}
        ]
        assert cli.json("tag") == []
        assert cli.json("content", "list") == []
        assert cli.json("log") == []
        assert cli.json("diff", "main", "main") == {"diffs": [], "hasMore": False, "token": None}
        text = cli.ok("remote", "show")
        assert f"Remote URL: {url}" in text
        assert "Default branch: main" in text
        c = _make_client(url, nessie_dir)
        assert c.get_default_branch() == "main"
        ref = c.get_reference(None)
        assert isinstance(ref, Branch)
        assert (ref.name, ref.hash_) == ("main", NO_ANCESTOR)


# -- references -------------------------------------------------------------------------------


def test_branch_create_list_delete(cli: Cli, client: NessieClient) -> None:
    name = unique("br")
    main_head = head(client, "main")
    cli.ok("branch", name)  # no BASE: at the HEAD of the default branch
    listed = cli.json("branch", "-l", name)
    assert listed == {"type": "BRANCH", "name": name, "hash": main_head, "metadata": None}
    all_branches = cli.json("branch")
    assert {"type": "BRANCH", "name": name, "hash": main_head, "metadata": None} in all_branches
    assert all(r["type"] == "BRANCH" for r in all_branches)
    assert name in cli.ok("branch", "-l")
    cli.ok("branch", "-d", name)
    assert cli.json("branch", "-l", name) == {}
    with pytest.raises(NessieReferenceNotFoundException):
        client.get_reference(name)


def test_branch_from_base_and_hash(cli: Cli, client: NessieClient) -> None:
    src = new_branch(client, "src")
    h1 = put_table(client, src, "t1", "s3://b/t1.json")
    h2 = put_table(client, src, "t2", "s3://b/t2.json")
    at_head, at_o, at_suffix, at_bare = (unique(p) for p in ("head", "opt", "suffix", "bare"))
    cli.ok("branch", at_head, src)
    cli.ok("branch", "-o", h1, at_o, src)
    cli.ok("branch", at_suffix, f"{src}@{h1}")
    cli.ok("branch", "-o", h1, at_bare, "DETACHED")
    assert head(client, at_head) == h2
    assert head(client, at_o) == h1
    assert head(client, at_suffix) == h1
    assert head(client, at_bare) == h1
    assert entries(client, at_o) == {("t1",): "ICEBERG_TABLE"}


def test_slashed_branch_name(cli: Cli, client: NessieClient) -> None:
    """clients.md B.1: names such as ``branch/name_env-dev.1`` are percent-encoded in paths."""
    name = f"feature/{unique('x')}_env-dev.1"
    cli.ok("branch", "-o", NO_ANCESTOR, name, "main")
    h = put_table(client, name, "slashed", "s3://b/slashed.json")
    assert cli.json("branch", "-l", name)["hash"] == h
    assert [m["hash"] for m in cli.json("log", name)] == [h]
    assert cli_entries(cli.json("content", "list", "-r", name)) == {("slashed",): "ICEBERG_TABLE"}
    cli.ok("branch", "-d", name)
    assert cli.json("branch", "-l", name) == {}


def test_tag_create_list_assign_delete(cli: Cli, client: NessieClient) -> None:
    src = new_branch(client, "tagsrc")
    h1 = put_table(client, src, "a", "s3://b/a.json")
    h2 = put_table(client, src, "b", "s3://b/b.json")
    tag = unique("v")
    cli.ok("tag", tag, src)
    assert cli.json("tag", "-l", tag) == {"type": "TAG", "name": tag, "hash": h2, "metadata": None}
    assert any(r["name"] == tag for r in cli.json("tag"))
    assert all(r["name"] != tag for r in cli.json("branch"))
    ref = client.get_reference(tag)
    assert isinstance(ref, Tag)
    # tag -f: create fails with 409, then the tag is reassigned
    cli.ok("tag", "-f", "-o", h1, tag, src)
    assert head(client, tag) == h1
    # reads through a tag; a branch created from a tag
    assert entries(client, tag) == {("a",): "ICEBERG_TABLE"}
    assert log_hashes(client, tag) == [h1]
    from_tag = unique("fromtag")
    cli.ok("branch", from_tag, tag)
    assert head(client, from_tag) == h1
    cli.ok("tag", "-d", tag)
    assert cli.json("tag", "-l", tag) == {}


def test_tag_via_client(client: NessieClient) -> None:
    src = new_branch(client, "tagc")
    h = put_table(client, src, "a", "s3://b/a.json")
    name = unique("t")
    t = client.create_tag(name, src, h)
    assert isinstance(t, Tag)
    assert (t.name, t.hash_) == (name, h)
    client.assign_tag(name, "DETACHED", NO_ANCESTOR)
    assert head(client, name) == NO_ANCESTOR
    with pytest.raises(NessieReferenceConflictException) as e:
        client.delete_tag(name, h)  # not the current hash
    assert e.value.status_code == 409
    client.delete_tag(name, NO_ANCESTOR)
    with pytest.raises(NessieReferenceNotFoundException):
        client.get_reference(name)


def test_list_references_extended(cli: Cli, client: NessieClient) -> None:
    """clients.md B.6: fetch=ALL gives ahead/behind against the default branch."""
    main_total = len(log_hashes(client, "main"))
    main_head = head(client, "main")
    name = new_branch(client, "ext", at=main_head)
    h = commit(client, name, "extended one", Put(key(unique("k")), table("s3://x")), author="ext")
    tag = unique("xt")
    client.create_tag(tag, name, h)

    (b,) = [r for r in cli.json("branch", "-x") if r["name"] == name]
    assert b["type"] == "BRANCH"
    assert b["hash"] == h
    md = b["metadata"]
    assert md["numCommitsAhead"] == 1
    assert md["numCommitsBehind"] == 0
    assert md["commonAncestorHash"] == main_head
    assert md["numTotalCommits"] == main_total + 1
    assert md["commitMetaOfHEAD"]["hash"] == h
    assert md["commitMetaOfHEAD"]["message"] == "extended one"
    assert md["commitMetaOfHEAD"]["author"] == "ext"
    assert md["commitMetaOfHEAD"]["committer"] == ""

    t = cli.json("tag", "-x", "-l", tag)
    assert t["hash"] == h
    assert t["metadata"]["numCommitsAhead"] is None
    assert t["metadata"]["numCommitsBehind"] is None
    assert t["metadata"]["commonAncestorHash"] is None
    assert t["metadata"]["numTotalCommits"] == main_total + 1
    assert t["metadata"]["commitMetaOfHEAD"]["hash"] == h

    # text mode prints the metadata of branches whose HEAD has a commit
    text = cli.ok("branch", "-x", "-l", name)
    assert name in text and "commits ahead: 1" in text

    # the Python client parses the same metadata
    refs = {r.name: r for r in client.list_references(fetch_all=True).references}
    assert refs[name].metadata is not None
    assert refs[name].metadata.num_commits_ahead == 1
    assert refs[name].metadata.commit_meta_of_head.author == "ext"
    assert all(r.metadata is None for r in client.list_references().references)


def test_branch_force_assign(cli: Cli, client: NessieClient) -> None:
    a = new_branch(client, "asg")
    other = new_branch(client, "other")
    o1 = put_table(client, other, "o1", "s3://o1")
    o2 = put_table(client, other, "o2", "s3://o2")
    cli.ok("branch", "--force", a, other)  # 409 on create, then assign to other's HEAD
    assert head(client, a) == o2
    cli.ok("branch", "-f", "-o", o1, a, other)
    assert head(client, a) == o1
    cli.ok("branch", "-f", a, f"{other}@{o2}")
    assert head(client, a) == o2
    # -c: expected hash given explicitly; a wrong one is a conflict
    err = cli.error("branch", "-f", "-c", o1, "-o", NO_ANCESTOR, a, "main")
    assert (err["status_code"], err["error_code"]) == (409, "REFERENCE_CONFLICT")
    cli.ok("branch", "-f", "-c", o2, "-o", NO_ANCESTOR, a, "main")
    assert head(client, a) == NO_ANCESTOR
    # the client: to a ref, to a detached hash
    client.assign_branch(a, other)
    assert head(client, a) == o2
    client.assign_branch(a, "DETACHED", o1)
    assert head(client, a) == o1
    with pytest.raises(NessieReferenceConflictException):
        client.assign_branch(a, other, old_hash=o2)


def test_reset_main_to_no_ancestor(cli: Cli, client: NessieClient) -> None:
    """clients.md B.6: ``branch --force -o <no-ancestor> main main`` empties main."""
    commit(client, "main", "something on main", Put(key(unique("m")), table("s3://m")))
    assert head(client, "main") != NO_ANCESTOR
    cli.ok("branch", "--force", "-o", NO_ANCESTOR, "main", "main")
    assert cli.json("branch", "-l", "main")["hash"] == NO_ANCESTOR
    assert cli.json("log", "main") == []
    assert cli.json("content", "list", "-r", "main") == []


def test_create_existing_reference_is_409(cli: Cli, client: NessieClient) -> None:
    """clients.md B.5/B.6: creating an existing ref (also ``main``) is a 409."""
    name = new_branch(client, "dup")
    with pytest.raises(NessieReferenceAlreadyExistsException) as e:
        client.create_branch(name, "main", NO_ANCESTOR)
    assert e.value.status_code == 409
    assert e.value.error_code == "REFERENCE_ALREADY_EXISTS"
    assert isinstance(e.value, NessieConflictException)
    with pytest.raises(NessieReferenceAlreadyExistsException):
        client.create_tag(name, "main", NO_ANCESTOR)
    for args in (("branch", "main"), ("branch", name, "main"), ("tag", name, "main")):
        err = cli.error(*args)
        assert err["status_code"] == 409
        assert err["error_code"] == "REFERENCE_ALREADY_EXISTS"
        assert name in err["server_message"] or "main" in err["server_message"]


@pytest.mark.parametrize(
    "args",
    [
        ("log", "nope_{u}"),
        ("branch", "-d", "nope_{u}"),
        ("tag", "-d", "nope_{u}"),
        ("branch", "new_{u}", "nope_{u}"),
        ("content", "list", "-r", "nope_{u}"),
        ("content", "view", "-r", "nope_{u}", "a.b"),
        ("diff", "main", "nope_{u}"),
        ("merge", "-b", "nope_{u}", "-f", "main"),
        ("merge", "-b", "main", "-f", "nope_{u}"),
    ],
    ids=lambda a: " ".join(a).replace("_{u}", ""),
)
def test_unknown_reference(cli: Cli, args: tuple[str, ...]) -> None:
    """clients.md B.5: an unknown ref exits 1 and prints the server's 404 error."""
    u = uuid.uuid4().hex[:8]
    err = cli.error(*(a.format(u=u) for a in args))
    assert err["status_code"] == 404
    assert err["error_code"] == "REFERENCE_NOT_FOUND"
    assert f"nope_{u}" in err["server_message"]


@pytest.mark.parametrize(
    ("args", "status", "code"),
    [
        (("log", UNKNOWN_HASH), 404, "REFERENCE_NOT_FOUND"),
        (("content", "list", "-r", UNKNOWN_HASH), 404, "REFERENCE_NOT_FOUND"),
        (("content", "view", "-r", f"main@{UNKNOWN_HASH}", "a"), 404, "REFERENCE_NOT_FOUND"),
        (("diff", "main", UNKNOWN_HASH), 404, "REFERENCE_NOT_FOUND"),
        (("branch", "new_{u}", f"main@{UNKNOWN_HASH}"), 404, "REFERENCE_NOT_FOUND"),
        (("merge", "-b", "main", "-f", UNKNOWN_HASH), 404, "REFERENCE_NOT_FOUND"),
        (("cherry-pick", "-f", "-s", "main", UNKNOWN_HASH), 404, "REFERENCE_NOT_FOUND"),
        (("branch", "bad..name_{u}", "main"), 400, "BAD_REQUEST"),
        (("log", "--filter", "commit.author ===", "main"), 400, "BAD_REQUEST"),
        (("content", "list", "--filter", "entry.contentType ==="), 400, "BAD_REQUEST"),
    ],
    ids=lambda a: " ".join(a).replace("_{u}", "") if isinstance(a, tuple) else str(a),
)
def test_request_errors(cli: Cli, args: tuple[str, ...], status: int, code: str) -> None:
    """Unknown hashes are 404 REFERENCE_NOT_FOUND, invalid input 400 BAD_REQUEST; exit 1."""
    u = uuid.uuid4().hex[:8]
    err = cli.error(*(a.format(u=u) for a in args))
    assert (err["status_code"], err["error_code"]) == (status, code)
    assert err["server_message"]


def test_unknown_reference_text_mode(cli: Cli) -> None:
    p = cli.run("log", "no_such_branch", as_json=False)
    assert p.returncode == 1, _explain(p)
    assert "Named reference 'no_such_branch' not found" in p.stdout
    assert "REFERENCE_NOT_FOUND" in p.stdout


def test_delete_errors(cli: Cli, client: NessieClient) -> None:
    name = new_branch(client, "del")
    err = cli.error("branch", "-d", "-o", UNKNOWN_HASH, name)
    assert (err["status_code"], err["error_code"]) == (409, "REFERENCE_CONFLICT")
    with pytest.raises(NessieReferenceConflictException):
        client.delete_branch(name, UNKNOWN_HASH)
    err = cli.error("branch", "-d", "main")
    assert err["status_code"] == 400
    assert "main" in err["server_message"]
    client.delete_branch(name, NO_ANCESTOR)


# -- commits through the client ---------------------------------------------------------------


def test_commit_put_update_delete(client: NessieClient) -> None:
    b = new_branch(client, "cm")
    k = key("tbl")
    h1 = commit(client, b, "create", Put(k, table("s3://t/1.json")))
    created = client.get_content(b, k)
    assert isinstance(created, IcebergTable)
    assert created.id is not None and uuid.UUID(created.id)
    assert created.metadata_location == "s3://t/1.json"

    h2 = commit(client, b, "update", Put(k, table("s3://t/2.json", 2, id_=created.id)))
    updated = client.get_content(b, k)
    assert isinstance(updated, IcebergTable)
    assert (updated.id, updated.metadata_location, updated.snapshot_id) == (
        created.id,
        "s3://t/2.json",
        2,
    )
    # the older content is still readable at its hash (name@hash and hash_on_ref)
    at_h1 = client.get_content(f"{b}@{h1}", k)
    assert isinstance(at_h1, IcebergTable)
    assert at_h1.metadata_location == "s3://t/1.json"
    assert client.get_content("DETACHED", k, h1) == at_h1

    h3 = commit(client, b, "drop", Delete(k))
    with pytest.raises(NessieContentNotFoundException) as e:
        client.get_content(b, k)
    assert e.value.status_code == 404
    assert entries(client, b) == {}
    assert log_hashes(client, b) == [h3, h2, h1]


def test_commit_content_id_rules(client: NessieClient) -> None:
    """nessie-api.md §5: new keys need a null id, existing keys their id (400 otherwise)."""
    b = new_branch(client, "ids")
    k = key("t")
    commit(client, b, "create", Put(k, table("s3://t/1.json")))
    with pytest.raises(NessieException) as e:
        commit(client, b, "no id", Put(k, table("s3://t/2.json")))
    assert e.value.status_code == 400
    with pytest.raises(NessieException) as e:
        commit(client, b, "id on new", Put(key("u"), table("s3://u", id_=str(uuid.uuid4()))))
    assert e.value.status_code == 400


def test_commit_conflicts(client: NessieClient) -> None:
    b = new_branch(client, "cc")
    base = put_table(client, b, "x", "s3://x/1")
    x = client.get_content(b, key("x"))
    commit(client, b, "move x", Put(key("x"), table("s3://x/2", id_=x.id)))
    # a stale expected hash is fine when the touched key did not change
    h = client.commit(b, base, "y", "alice", Put(key("y"), table("s3://y")))
    assert head(client, b) == h.hash_
    # ... but a conflict when it did
    with pytest.raises(NessieReferenceConflictException) as e:
        client.commit(b, base, "x again", "alice", Put(key("x"), table("s3://x/3", id_=x.id)))
    assert e.value.status_code == 409
    assert e.value.error_code == "REFERENCE_CONFLICT"
    with pytest.raises(NessieReferenceNotFoundException):
        client.commit(unique("missing"), NO_ANCESTOR, "m", "a", Put(key("z"), table("s3://z")))


def test_reput_identical_content_creates_commit(client: NessieClient) -> None:
    b = new_branch(client, "same")
    h1 = put_table(client, b, "t", "s3://t")
    t = client.get_content(b, key("t"))
    h2 = commit(client, b, "same again", Put(key("t"), t))
    assert h2 != h1
    assert log_hashes(client, b) == [h2, h1]


def test_content_types_round_trip(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "types")
    view = IcebergView(
        id=None,
        metadata_location="s3://v/1.json",
        version_id=3,
        schema_id=1,
        dialect="spark",
        sql_text="select 1",
    )
    delta = DeltaLakeTable(
        id=None,
        last_checkpoint="s3://d/_delta_log/1.checkpoint",
        checkpoint_location_history=["s3://d/_delta_log/1.checkpoint"],
        metadata_location_history=["s3://d/_delta_log/1.json", "s3://d/_delta_log/0.json"],
    )
    commit(
        client,
        b,
        "all types",
        Put(key("ns"), Namespace(id=None, elements=["ns"])),
        Put(key("ns", "tbl"), table("s3://t")),
        Put(key("ns", "view"), view),
        Put(key("delta"), delta),
    )
    got: dict[str, Content] = {
        "ns": client.get_content(b, key("ns")),
        "tbl": client.get_content(b, key("ns", "tbl")),
        "view": client.get_content(b, key("ns", "view")),
        "delta": client.get_content(b, key("delta")),
    }
    assert isinstance(got["ns"], Namespace) and got["ns"].elements == ["ns"]
    assert isinstance(got["tbl"], IcebergTable)
    assert isinstance(got["view"], IcebergView)
    assert (got["view"].version_id, got["view"].dialect, got["view"].sql_text) == (
        3,
        "spark",
        "select 1",
    )
    assert isinstance(got["delta"], DeltaLakeTable)
    assert got["delta"].metadata_location_history == delta.metadata_location_history
    assert all(c.id for c in got.values())
    assert len({c.id for c in got.values()}) == 4
    viewed = cli.json("content", "view", "-r", b, "ns", "ns.tbl", "ns.view", "delta")
    assert [c["type"] for c in viewed] == [
        "NAMESPACE",
        "ICEBERG_TABLE",
        "ICEBERG_VIEW",
        "DELTA_LAKE_TABLE",
    ]
    assert [c["id"] for c in viewed] == [got[n].id for n in ("ns", "tbl", "view", "delta")]


def test_namespace_created_by_v1_namespace_api_is_readable(
    endpoint: str, cli: Cli, client: NessieClient
) -> None:
    """A namespace made through ``PUT /namespaces/namespace/...`` (no properties) parses."""
    b = new_branch(client, "nsapi")
    req = urllib.request.Request(
        f"{endpoint}/namespaces/namespace/{b}/db",
        data=json.dumps({"type": "NAMESPACE", "elements": ["db"]}).encode(),
        headers={"Content-Type": "application/json"},
        method="PUT",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    ns = client.get_content(b, key("db"))
    assert isinstance(ns, Namespace) and ns.elements == ["db"]
    assert cli.json("content", "view", "-r", b, "db")[0]["type"] == "NAMESPACE"


# -- content list / view / commit (CLI) -------------------------------------------------------


@pytest.fixture(scope="module")
def content_branch(client: NessieClient) -> str:
    """A branch with a namespace, tables with dotted names, a view and a Delta table."""
    b = new_branch(client, "content")
    commit(
        client,
        b,
        "setup",
        Put(key("ns"), Namespace(id=None, elements=["ns"])),
        Put(key("ns", "t1"), table("s3://ns/t1")),
        Put(key("ns", "a.b"), table("s3://ns/a.b")),
        Put(key("t.with.dots"), table("s3://dots")),
        Put(
            key("ns", "v1"),
            IcebergView(
                id=None,
                metadata_location="s3://v",
                version_id=1,
                schema_id=0,
                dialect="spark",
                sql_text="select 1",
            ),
        ),
        Put(
            key("d1"),
            DeltaLakeTable(
                id=None,
                last_checkpoint="s3://d/cp",
                checkpoint_location_history=["s3://d/cp"],
                metadata_location_history=["s3://d/0.json"],
            ),
        ),
    )
    return b


def test_content_list(cli: Cli, content_branch: str) -> None:
    """``content list`` with ``-t`` (CEL ``entry.contentType in [...]``) and ``--filter``."""
    everything = {
        ("ns",): "NAMESPACE",
        ("ns", "t1"): "ICEBERG_TABLE",
        ("ns", "a.b"): "ICEBERG_TABLE",
        ("t.with.dots",): "ICEBERG_TABLE",
        ("ns", "v1"): "ICEBERG_VIEW",
        ("d1",): "DELTA_LAKE_TABLE",
    }

    def of_types(*types: str) -> dict[tuple[str, ...], str]:
        return {k: v for k, v in everything.items() if v in types}

    cases: list[tuple[tuple[str, ...], dict[tuple[str, ...], str]]] = [
        ((), everything),
        (("-t", "ICEBERG_TABLE"), of_types("ICEBERG_TABLE")),
        (
            ("-t", "ICEBERG_VIEW", "-t", "DELTA_LAKE_TABLE"),
            of_types("ICEBERG_VIEW", "DELTA_LAKE_TABLE"),
        ),
        (("-t", "NAMESPACE"), of_types("NAMESPACE")),
        (("-t", "UDF"), {}),
        (
            ("--filter", "entry.name.startsWith('t')"),
            {("ns", "t1"): "ICEBERG_TABLE", ("t.with.dots",): "ICEBERG_TABLE"},
        ),
    ]
    outputs = cli.json_many(*(("content", "list", "-r", content_branch, *a) for a, _ in cases))
    actual = {" ".join(a): cli_entries(out) for (a, _), out in zip(cases, outputs, strict=True)}
    assert actual == {" ".join(a): expected for a, expected in cases}
    assert outputs[3] == [{"type": "NAMESPACE", "name": {"elements": ["ns"]}}]
    text = cli.ok("content", "list", "-r", content_branch)
    assert '"t.with.dots"' in text and 'ns."a.b"' in text


def test_content_list_at_hash(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "lh")
    h1 = put_table(client, b, "first", "s3://1")
    put_table(client, b, "second", "s3://2")
    assert cli_entries(cli.json("content", "list", "-r", f"{b}@{h1}")) == {
        ("first",): "ICEBERG_TABLE"
    }
    assert cli_entries(cli.json("content", "list", "-r", h1)) == {("first",): "ICEBERG_TABLE"}
    listed = client.list_keys(b, hash_on_ref=h1)
    assert [e.name.elements for e in listed.entries] == [["first"]]


def test_content_view_dotted_keys(cli: Cli, client: NessieClient, content_branch: str) -> None:
    """Keys whose elements contain dots travel in the legacy form (``%1D``) and round-trip."""
    viewed = cli.json("content", "view", "-r", content_branch, '"t.with.dots"', 'ns."a.b"', "ns.t1")
    assert [c["metadataLocation"] for c in viewed] == ["s3://dots", "s3://ns/a.b", "s3://ns/t1"]
    assert all(c["type"] == "ICEBERG_TABLE" and c["id"] for c in viewed)
    direct = client.get_content(content_branch, key("ns", "a.b"))
    assert isinstance(direct, IcebergTable)
    assert direct.id == viewed[1]["id"]
    text = cli.ok("content", "view", "-r", content_branch, '"t.with.dots"')
    assert "s3://dots" in text


def test_content_view_at_hash(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "vh")
    h1 = put_table(client, b, "t", "s3://one")
    t = client.get_content(b, key("t"))
    commit(client, b, "two", Put(key("t"), table("s3://two", id_=t.id)))
    assert cli.json("content", "view", "-r", b, "t")[0]["metadataLocation"] == "s3://two"
    for ref in (f"{b}@{h1}", h1):
        assert cli.json("content", "view", "-r", ref, "t")[0]["metadataLocation"] == "s3://one"


def test_content_view_missing_key(cli: Cli, content_branch: str) -> None:
    err = cli.error("content", "view", "-r", content_branch, "ns.missing")
    assert err["status_code"] == 404
    assert err["error_code"] == "CONTENT_NOT_FOUND"


def test_content_commit_cli(cli: Cli, client: NessieClient) -> None:
    """``content commit -i``: new key (id null), update (existing id), empty stdin = DELETE, -R."""
    b = new_branch(client, "cc_cli")
    body = {
        "type": "ICEBERG_TABLE",
        "id": None,
        "metadataLocation": "s3://c/1.json",
        "snapshotId": 1,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    cli.ok(
        "content",
        "commit",
        "-i",
        "-r",
        b,
        "-c",
        head(client, b),
        "-m",
        "cli create",
        "--author",
        "bob",
        '"dotted.key"',
        stdin=json.dumps(body),
    )
    created = client.get_content(b, key("dotted.key"))
    assert isinstance(created, IcebergTable)
    assert created.metadata_location == "s3://c/1.json" and created.id

    body.update(metadataLocation="s3://c/2.json", snapshotId=2)
    cli.ok(
        "content",
        "commit",
        "-i",
        "-r",
        b,
        "-c",
        head(client, b),
        "-m",
        "cli update",
        "--author",
        "bob",
        '"dotted.key"',
        stdin=json.dumps(body),
    )
    updated = client.get_content(b, key("dotted.key"))
    assert isinstance(updated, IcebergTable)
    assert (updated.id, updated.metadata_location) == (created.id, "s3://c/2.json")

    # a second key, then remove both: one by empty stdin, one with -R
    body.update(metadataLocation="s3://c/other.json")
    cli.ok(
        "content",
        "commit",
        "-i",
        "-r",
        b,
        "-c",
        head(client, b),
        "-m",
        "other",
        "other",
        stdin=json.dumps(body),
    )
    cli.ok("content", "commit", "-i", "-r", b, "-c", head(client, b), "-m", "rm", "other", stdin="")
    assert entries(client, b) == {("dotted.key",): "ICEBERG_TABLE"}
    cli.ok("content", "commit", "-R", "-r", b, "-c", head(client, b), "-m", "rm2", '"dotted.key"')
    assert entries(client, b) == {}

    log = cli.json("log", b)
    assert [m["message"] for m in log] == ["rm2", "rm", "other", "cli update", "cli create"]
    assert [m["author"] for m in log][-2:] == ["bob", "bob"]


def test_content_commit_cli_stale_hash(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "cc_stale")
    put_table(client, b, "t", "s3://t/1")
    t = client.get_content(b, key("t"))
    stale = head(client, b)
    commit(client, b, "move", Put(key("t"), table("s3://t/2", id_=t.id)))
    body = {
        "type": "ICEBERG_TABLE",
        "id": None,
        "metadataLocation": "s3://t/3",
        "snapshotId": 3,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }
    args = ("content", "commit", "-i", "-r", b, "-c", stale, "-m", "m", "t")
    p = cli.run(*args, stdin=json.dumps(body))
    assert p.returncode == 1, _explain(p)
    err = json.loads(p.stdout.splitlines()[-1])
    assert (err["status_code"], err["error_code"]) == (409, "REFERENCE_CONFLICT")


# -- log --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LogBranch:
    name: str
    c1: str
    c2: str
    c3: str


@pytest.fixture(scope="module")
def log_branch(client: NessieClient) -> LogBranch:
    """Three commits, authors alice, bob, alice (at least 10 ms apart)."""
    b = new_branch(client, "log")
    hashes = []
    for i, author in enumerate(("alice", "bob", "alice"), 1):
        hashes.append(
            commit(client, b, f"commit {i}", Put(key(f"k{i}"), table(f"s3://k{i}")), author=author)
        )
        time.sleep(0.01)
    return LogBranch(b, *hashes)


def test_log(cli: Cli, client: NessieClient, log_branch: LogBranch) -> None:
    lb = log_branch
    metas = cli.json("log", lb.name)
    assert [m["hash"] for m in metas] == [lb.c3, lb.c2, lb.c1]
    assert [m["message"] for m in metas] == ["commit 3", "commit 2", "commit 1"]
    assert [m["author"] for m in metas] == ["alice", "bob", "alice"]
    assert all(m["committer"] == "" for m in metas)
    assert all(m["commitTime"] and m["authorTime"] for m in metas)
    assert all(m["properties"] == {} for m in metas)
    entries_ = list(client.get_log(lb.name))
    assert [e.commit_meta.hash_ for e in entries_] == [lb.c3, lb.c2, lb.c1]
    assert all(e.operations is None for e in entries_)
    text = cli.ok("log", lb.name)
    assert all(f"commit {h}" in text for h in (lb.c1, lb.c2, lb.c3))


def test_log_number(cli: Cli, client: NessieClient, log_branch: LogBranch) -> None:
    lb = log_branch
    assert [m["hash"] for m in cli.json("log", "-n", "2", lb.name)] == [lb.c3, lb.c2]
    assert [m["hash"] for m in cli.json("log", "-n", "1", lb.name)] == [lb.c3]
    assert [e.commit_meta.hash_ for e in client.get_log(lb.name, max_records=2)] == [lb.c3, lb.c2]


def log_cases(cli: Cli, cases: list[tuple[tuple[str, ...], list[str]]]) -> None:
    """Run ``nessie --json log ARGS`` for every case; compare the commit hashes."""
    outputs = cli.json_many(*(("log", *args) for args, _ in cases))
    actual = {
        " ".join(args): [m["hash"] for m in out]
        for (args, _), out in zip(cases, outputs, strict=True)
    }
    assert actual == {" ".join(args): expected for args, expected in cases}


def test_log_author_committer(cli: Cli, log_branch: LogBranch) -> None:
    """clients.md B.3/B.6: ``--author``/``--committer`` become CEL filters; committer is ''."""
    lb = log_branch
    b = lb.name
    log_cases(
        cli,
        [
            (("--author", "alice", b), [lb.c3, lb.c1]),
            (("--author", "bob", b), [lb.c2]),
            (("--author", "alice", "--author", "bob", b), [lb.c3, lb.c2, lb.c1]),
            (("--author", "nobody", b), []),
            (("--committer", "", b), [lb.c3, lb.c2, lb.c1]),
            (("--committer", "someone", b), []),
            (("--committer", "", "--author", "bob", b), [lb.c2]),
            (("--filter", "commit.message == 'commit 2'", b), [lb.c2]),
        ],
    )


def test_log_after_before(cli: Cli, log_branch: LogBranch) -> None:
    """``--after``/``--before`` compare ``commit.commitTime`` strictly."""
    lb = log_branch
    b = lb.name
    times = {m["hash"]: m["commitTime"] for m in cli.json("log", b)}
    t1, t2, t3 = times[lb.c1], times[lb.c2], times[lb.c3]
    log_cases(
        cli,
        [
            (("--after", t2, b), [lb.c3]),
            (("--before", t2, b), [lb.c1]),
            (("--after", t2, "--before", t2, b), []),
            (("--after", "2000-01-01T00:00:00+00:00", b), [lb.c3, lb.c2, lb.c1]),
            (("--before", "2000-01-01T00:00:00+00:00", b), []),
            (("--since", t1, "--until", t3, b), [lb.c2]),
        ],
    )


def test_log_revision_range(cli: Cli, log_branch: LogBranch) -> None:
    """clients.md B.6: the log starts at endHash and stops after startHash (inclusive)."""
    lb = log_branch
    b = lb.name
    log_cases(
        cli,
        [
            (("-r", f"{lb.c1}..{lb.c3}", b), [lb.c3, lb.c2, lb.c1]),
            (("-r", f"{lb.c2}..{lb.c3}", b), [lb.c3, lb.c2]),
            (("-r", f"{lb.c3}..{lb.c3}", b), [lb.c3]),
            (("-r", f"{lb.c2}..{lb.c1}", b), [lb.c1]),  # startHash never reached
            (("-r", f"{lb.c2}..", b), [lb.c3, lb.c2]),
            (("-r", lb.c2, b), [lb.c2, lb.c1]),
            ((f"{b}@{lb.c2}",), [lb.c2, lb.c1]),
            ((lb.c2,), [lb.c2, lb.c1]),  # a bare hash: DETACHED plus endHash
            (("-n", "1", "-r", f"{lb.c1}..{lb.c3}", b), [lb.c3]),
        ],
    )


def test_log_extended(cli: Cli, client: NessieClient, log_branch: LogBranch) -> None:
    lb = log_branch
    out = cli.json("log", "-x", lb.name)
    assert [e["commitMeta"]["hash"] for e in out] == [lb.c3, lb.c2, lb.c1]
    assert [e["parentCommitHash"] for e in out] == [lb.c2, lb.c1, NO_ANCESTOR]
    for i, e in zip((3, 2, 1), out, strict=True):
        (op,) = e["operations"]
        assert op["type"] == "PUT"
        assert op["key"] == {"elements": [f"k{i}"]}
        assert op["content"]["type"] == "ICEBERG_TABLE"
        assert op["content"]["metadataLocation"] == f"s3://k{i}"
        assert op["content"]["id"]
    parsed = list(client.get_log(lb.name, fetch_all=True))
    assert [e.parent_commit_hash for e in parsed] == [lb.c2, lb.c1, NO_ANCESTOR]
    assert all(isinstance(e.operations[0], Put) for e in parsed)
    text = cli.ok("log", "-x", lb.name)
    assert f"Parent: {NO_ANCESTOR}" in text


def test_log_extended_delete(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "logdel")
    put_table(client, b, "gone", "s3://g")
    h = commit(client, b, "delete it", Delete(key("gone")))
    (first, _) = cli.json("log", "-x", b)
    assert first["commitMeta"]["hash"] == h
    assert first["operations"] == [{"type": "DELETE", "key": {"elements": ["gone"]}}]


def test_log_empty_branch(cli: Cli, client: NessieClient) -> None:
    b = new_branch(client, "logempty")
    assert cli.json("log", b) == []
    assert cli.json("log", "-x", b) == []
    assert list(client.get_log(b)) == []


# -- diff -------------------------------------------------------------------------------------


def test_diff(cli: Cli, client: NessieClient) -> None:
    x = new_branch(client, "dx")
    hx = put_table(client, x, "a", "s3://a/1")
    a = client.get_content(x, key("a"))
    y = new_branch(client, "dy", at=hx)
    commit(client, y, "b", Put(key("b"), table("s3://b")))
    hy = commit(client, y, "a2", Put(key("a"), table("s3://a/2", 2, id_=a.id)))

    same_main, same_x, out, reverse, *variants = cli.json_many(
        ("diff", "main", "main"),
        ("diff", x, x),
        ("diff", x, y),
        ("diff", y, x),
        # hash-only (DETACHED*hash) and name*hash sides give the same result
        ("diff", hx, hy),
        ("diff", f"{x}@{hx}", y),
        ("diff", x, f"{y}@{hy}"),
        ("diff", hx, y),
    )
    assert same_main["diffs"] == [] and same_x["diffs"] == []
    assert set(out) == {"diffs", "hasMore", "token"}
    by_key = {tuple(d["key"]["elements"]): d for d in out["diffs"]}
    assert set(by_key) == {("a",), ("b",)}
    assert by_key[("b",)]["from"] is None
    assert by_key[("b",)]["to"]["metadataLocation"] == "s3://b"
    assert by_key[("a",)]["from"]["metadataLocation"] == "s3://a/1"
    assert by_key[("a",)]["to"]["metadataLocation"] == "s3://a/2"
    assert by_key[("a",)]["from"]["id"] == by_key[("a",)]["to"]["id"] == a.id
    back = {tuple(d["key"]["elements"]): d for d in reverse["diffs"]}
    assert back[("b",)]["to"] is None and back[("b",)]["from"] is not None

    def norm(o: dict[str, Any]) -> list[str]:
        return sorted(json.dumps(d, sort_keys=True) for d in o["diffs"])

    assert [norm(v) for v in variants] == [norm(out)] * len(variants)
    # the Python client
    d = client.get_diff("DETACHED", "DETACHED", hx, hy)
    assert {tuple(e.content_key.elements) for e in d.diffs} == {("a",), ("b",)}
    d2 = client.get_diff(x, y)
    new = next(e for e in d2.diffs if e.content_key.elements == ["b"])
    assert new.from_content is None and isinstance(new.to_content, IcebergTable)
    text = cli.ok("diff", x, y)
    assert "s3://a/2" in text


def test_diff_one_new_table_from_main(cli: Cli, client: NessieClient) -> None:
    """clients.md B.6: ``diff main BRANCH`` after one table on BRANCH: one entry."""
    b = new_branch(client, "dmain", at=head(client, "main"))
    commit(client, b, "t", Put(key(unique("only")), table("s3://only")))
    (d,) = cli.json("diff", "main", b)["diffs"]
    assert d["from"] is None and d["to"]["metadataLocation"] == "s3://only"


# -- merge ------------------------------------------------------------------------------------


def test_merge(cli: Cli, client: NessieClient) -> None:
    target = new_branch(client, "mt")
    base = put_table(client, target, "base", "s3://base")
    dev = new_branch(client, "dev", at=base)
    commit(client, dev, "k1", Put(key("k1"), table("s3://k1")))
    dev_head = commit(client, dev, "k2", Put(key("k2"), table("s3://k2")))
    target_head = put_table(client, target, "t_only", "s3://t_only")  # target moves on

    res = cli.json("merge", "-b", target, "-f", dev)
    new_head = head(client, target)
    assert new_head not in (target_head, dev_head)
    assert res["wasApplied"] is True
    assert res["wasSuccessful"] is True
    assert res["targetBranch"] == target
    assert res["effectiveTargetHash"] == target_head
    assert res["expectedHash"] == target_head
    assert res["commonAncestor"] == base
    assert res["resultantTargetHash"] == new_head
    assert res["sourceCommits"] == []
    assert sorted(d["key"]["elements"][0] for d in res["details"]) == ["k1", "k2"]
    for d in res["details"]:
        assert d["mergeBehavior"] == "NORMAL"
        assert d["conflictType"] == "NONE"
        assert d["sourceCommits"] == [] and d["targetCommits"] == []

    assert set(entries(client, target)) == {("base",), ("t_only",), ("k1",), ("k2",)}
    (merge_commit,) = cli.json("log", "-n", "1", target)
    assert merge_commit["hash"] == new_head
    assert merge_commit["message"].startswith(f"Merged {dev} at ")
    (merge_entry,) = cli.json("log", "-x", "-n", "1", target)
    assert merge_entry["parentCommitHash"] == target_head
    assert sorted(op["key"]["elements"][0] for op in merge_entry["operations"]) == ["k1", "k2"]

    # re-merging the same source is not an error
    again = cli.json("merge", "-b", target, "-f", dev)
    assert again["wasApplied"] is False
    assert again["commonAncestor"] == dev_head
    assert again["resultantTargetHash"] == new_head
    assert head(client, target) == new_head
    text = cli.ok("merge", "-b", target, "-f", dev)
    assert "Nothing merged" in text


def test_merge_into_main(cli: Cli, client: NessieClient) -> None:
    dev = new_branch(client, "mdev", at=head(client, "main"))
    k = unique("merged")
    commit(client, dev, "for main", Put(key(k), table("s3://m")))
    main_before = head(client, "main")
    res = cli.json("merge", "-b", "main", "-f", dev)
    assert res["wasApplied"] is True
    assert res["targetBranch"] == "main"
    assert res["effectiveTargetHash"] == main_before
    assert head(client, "main") == res["resultantTargetHash"]
    assert entries(client, "main")[(k,)] == "ICEBERG_TABLE"
    # no -b: the default branch
    res2 = cli.json("merge", "-f", dev)
    assert (res2["targetBranch"], res2["wasApplied"]) == ("main", False)


def test_merge_condition_hash_and_detached(cli: Cli, client: NessieClient) -> None:
    target = new_branch(client, "mc")
    dev = new_branch(client, "mcdev")
    d1 = commit(client, dev, "d1", Put(key("d1"), table("s3://d1")))
    d2 = commit(client, dev, "d2", Put(key("d2"), table("s3://d2")))
    # -o: merge dev only up to d1; -c: expected hash of the target
    res = cli.json("merge", "-b", target, "-c", NO_ANCESTOR, "-o", d1, dev)
    assert res["wasApplied"] is True
    assert res["commonAncestor"] == NO_ANCESTOR
    assert entries(client, target) == {("d1",): "ICEBERG_TABLE"}
    # a bare hash is merged as DETACHED
    res = cli.json("merge", "-b", target, "-c", head(client, target), d2)
    assert res["wasApplied"] is True
    assert set(entries(client, target)) == {("d1",), ("d2",)}
    assert cli.json("log", "-n", "1", target)[0]["message"].startswith("Merged DETACHED at ")
    # the Python client
    other = new_branch(client, "mcother")
    r = client.merge(dev, other)
    assert r.was_applied and r.resultant_target_hash == head(client, other)
    assert r.target_branch == other
    assert {tuple(d.key.elements) for d in r.details} == {("d1",), ("d2",)}
    r2 = client.merge(f"{dev}@{d2}", other)
    assert r2.was_applied is False


def test_merge_conflict(cli: Cli, client: NessieClient) -> None:
    target = new_branch(client, "mx")
    put_table(client, target, "shared", "s3://s/0")
    shared = client.get_content(target, key("shared"))
    dev = new_branch(client, "mxdev", at=head(client, target))
    commit(client, dev, "dev edit", Put(key("shared"), table("s3://s/dev", id_=shared.id)))
    commit(client, target, "target edit", Put(key("shared"), table("s3://s/t", id_=shared.id)))
    before = head(client, target)
    err = cli.error("merge", "-b", target, "-f", dev)
    assert err["status_code"] == 409
    assert err["error_code"] == "REFERENCE_CONFLICT"
    assert "shared" in err["server_message"]
    assert head(client, target) == before
    with pytest.raises(NessieReferenceConflictException):
        client.merge(dev, target)


# -- cherry-pick ------------------------------------------------------------------------------


@pytest.fixture
def pick_source(client: NessieClient) -> tuple[str, list[str]]:
    """A branch with three commits p1, p2, p3 (one new table each) and their hashes."""
    src = new_branch(client, "cps")
    hashes = [commit(client, src, p, Put(key(p), table(f"s3://{p}"))) for p in ("p1", "p2", "p3")]
    return src, hashes


def test_cherry_pick_one_commit(
    cli: Cli, client: NessieClient, pick_source: tuple[str, list[str]]
) -> None:
    """clients.md B.6: a transplanted commit keeps its message; the response is a MergeResponse."""
    src, (p1, p2, p3) = pick_source
    target = new_branch(client, "cpt")
    res = cli.json("cherry-pick", "-b", target, "-c", NO_ANCESTOR, "-s", src, p2)
    new_head = head(client, target)
    assert new_head not in (p1, p2, p3, NO_ANCESTOR)
    assert res["wasApplied"] is True
    assert res["wasSuccessful"] is True
    assert res["targetBranch"] == target
    assert res["effectiveTargetHash"] == NO_ANCESTOR
    assert res["resultantTargetHash"] == new_head
    assert res["commonAncestor"] is None
    assert [d["key"]["elements"] for d in res["details"]] == [["p2"]]
    assert entries(client, target) == {("p2",): "ICEBERG_TABLE"}
    (meta,) = cli.json("log", target)
    assert (meta["hash"], meta["message"], meta["author"]) == (new_head, "p2", "alice")
    # the Python client, then -f in text mode
    r = client.cherry_pick(target, src, None, p3)
    assert r.was_applied and r.resultant_target_hash == head(client, target)
    assert r.target_branch == target
    assert set(entries(client, target)) == {("p2",), ("p3",)}
    text = cli.ok("cherry-pick", "-b", target, "-f", "-s", src, p1)
    assert "Cherry-picked onto" in text
    assert [m["message"] for m in cli.json("log", target)] == ["p1", "p3", "p2"]


def test_cherry_pick_several_commits(
    cli: Cli, client: NessieClient, pick_source: tuple[str, list[str]]
) -> None:
    """Several hashes (oldest first) are replayed as one commit each, newest first in the log."""
    src, (_, p2, p3) = pick_source
    target = new_branch(client, "cpm")
    res = cli.json("cherry-pick", "-b", target, "-f", "-s", src, p2, p3)
    new_head = head(client, target)
    assert res["wasApplied"] is True
    assert res["resultantTargetHash"] == new_head
    assert res["effectiveTargetHash"] == NO_ANCESTOR
    assert set(entries(client, target)) == {("p2",), ("p3",)}
    assert [m["message"] for m in cli.json("log", target)] == ["p3", "p2"]


def test_cherry_pick_whole_branch(client: NessieClient, pick_source: tuple[str, list[str]]) -> None:
    src, hashes = pick_source
    target = new_branch(client, "cpw")
    r = client.cherry_pick(target, src, NO_ANCESTOR, *hashes)
    assert r.was_applied
    assert set(entries(client, target)) == {("p1",), ("p2",), ("p3",)}
    assert [e.commit_meta.message for e in client.get_log(target)] == ["p3", "p2", "p1"]


def test_cherry_pick_not_contiguous(
    cli: Cli, client: NessieClient, pick_source: tuple[str, list[str]]
) -> None:
    src, (p1, _, p3) = pick_source
    target = new_branch(client, "cpn")
    err = cli.error("cherry-pick", "-b", target, "-f", "-s", src, p1, p3)
    assert (err["status_code"], err["error_code"]) == (400, "BAD_REQUEST")
    assert head(client, target) == NO_ANCESTOR


def test_cherry_pick_conflict(cli: Cli, client: NessieClient) -> None:
    src = new_branch(client, "cpx")
    c1 = commit(client, src, "k", Put(key("k"), table("s3://k/src")))
    target = new_branch(client, "cpxt")
    put_table(client, target, "k", "s3://k/target")
    err = cli.error("cherry-pick", "-b", target, "-f", "-s", src, c1)
    assert (err["status_code"], err["error_code"]) == (409, "REFERENCE_CONFLICT")
