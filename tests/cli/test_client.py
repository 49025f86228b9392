"""The Python client against a real ``loch serve``: resolve, errors, transplant modes."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from loch.client import LochClient, Reference, ServerUnreachableError, http_status
from loch.errors import (
    BadRequestError,
    ReferenceConflictError,
    ReferenceNotFoundError,
    ServiceUnavailableError,
    UnknownError,
)

from .conftest import NO_ANCESTOR, UNKNOWN_HASH, Receiver, fresh_name, put_table

# -- resolve ---------------------------------------------------------------------------------


def test_resolve_reference_expressions(client: LochClient, branch: str) -> None:
    start = client.get_reference("main").hash
    first = put_table(client, branch, ("rs", "t"), "s3://1", message="first")
    second = put_table(client, branch, ("rs", "t"), "s3://2", message="second")
    tag = fresh_name("v")
    client.create_tag(tag, first)
    cases = {
        branch: Reference("BRANCH", branch, second),
        f"{branch}~1": Reference("BRANCH", branch, first),
        f"{branch}^1": Reference("BRANCH", branch, first),
        f"{branch}~2": Reference("BRANCH", branch, start),
        f"{branch}@{first}": Reference("BRANCH", branch, first),
        f"{branch}@{second}~1": Reference("BRANCH", branch, first),
        f"@{first}": Reference("DETACHED", None, first),
        f"@{second}~2": Reference("DETACHED", None, start),
        f"{branch}*2999-01-01T00:00:00Z": Reference("BRANCH", branch, second),
        tag: Reference("TAG", tag, first),
        "main": client.get_reference("main"),
        "-": client.get_reference("main"),
    }
    for expression, expected in cases.items():
        assert client.resolve(expression) == expected, expression


def test_resolve_a_branch_without_commits(client: LochClient, server: str) -> None:
    empty = fresh_name("empty")
    client.create_branch(empty, NO_ANCESTOR)
    assert client.resolve(empty) == Reference("BRANCH", empty, NO_ANCESTOR)
    assert client.resolve(f"{empty}~0").hash == NO_ANCESTOR
    with pytest.raises(ReferenceNotFoundError, match="No commit at or before"):
        client.resolve(f"{empty}*2999-01-01T00:00:00Z")  # the beginning has no time
    assert client.resolve(f"@{NO_ANCESTOR}") == Reference("DETACHED", None, NO_ANCESTOR)


def test_resolve_errors(client: LochClient, branch: str) -> None:
    put_table(client, branch, ("rs_err",), "s3://1")
    for expression, message in [
        ("no-such-ref", "Named reference 'no-such-ref' not found"),
        (f"@{UNKNOWN_HASH}", f"Commit '{UNKNOWN_HASH}' not found"),
        (f"{branch}~99", "has fewer than 99 ancestors"),
        (f"{branch}*1970-01-02T00:00:00Z", "No commit at or before"),
    ]:
        with pytest.raises(ReferenceNotFoundError, match=message) as e:
            client.resolve(expression)
        assert http_status(e.value) == 404, expression
    with pytest.raises(BadRequestError) as bad:
        client.resolve("a@b@c")
    assert http_status(bad.value) == 400


# -- errors ----------------------------------------------------------------------------------


def test_errors_keep_the_http_status(client: LochClient, branch: str) -> None:
    with pytest.raises(ReferenceNotFoundError) as missing:
        client.get_reference("no-such-ref")
    assert http_status(missing.value) == 404
    assert missing.value.http_status == 404  # type: ignore[attr-defined]
    with pytest.raises(ReferenceConflictError) as conflict:
        client.assign(branch, UNKNOWN_HASH, NO_ANCESTOR)
    assert http_status(conflict.value) == 409


def test_unknown_error_code_keeps_the_real_status(server: str) -> None:
    base = server.removesuffix("/api/v2")
    with LochClient(base) as wrong_path, pytest.raises(UnknownError) as not_found:
        wrong_path.config()
    assert not_found.value.message == "Not Found"
    assert http_status(not_found.value) == 404
    assert not_found.value.status == 500  # what the class says; the answer said 404
    with LochClient(server) as c, pytest.raises(UnknownError) as not_allowed:
        c._request("DELETE", "/config")
    assert http_status(not_allowed.value) == 405


def test_an_answer_without_json(receiver: Receiver) -> None:
    with LochClient(receiver.url("/api/v2")) as c, pytest.raises(UnknownError) as e:
        c.config()
    assert http_status(e.value) == 200
    assert "answered HTTP 200 without JSON" in e.value.message
    assert [(r.method, r.path) for r in receiver.received] == [("GET", "/api/v2/config")]


def test_errors_raised_before_any_request_have_no_status(client: LochClient) -> None:
    with pytest.raises(BadRequestError) as e:
        client.commit_builder("main").commit("nothing")
    assert http_status(e.value) is None


def test_refused_connection_is_server_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        with (
            LochClient(f"http://127.0.0.1:{port}/api/v2") as c,
            pytest.raises(ServerUnreachableError, match="Cannot reach") as e,
        ):
            c.config()
    assert isinstance(e.value, ServiceUnavailableError)
    assert http_status(e.value) is None
    assert e.value.code.name == "SERVICE_UNAVAILABLE"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_timeout_is_server_unreachable(silent_port: int) -> None:
    with (
        LochClient(f"http://127.0.0.1:{silent_port}/api/v2", timeout=0.3) as c,
        pytest.raises(ServerUnreachableError, match="Timed out talking to"),
    ):
        c.config()


# -- transplant modes ------------------------------------------------------------------------


@pytest.fixture
def diverged(client: LochClient) -> tuple[str, str, list[str]]:
    """A source with commits putting tp.a and tp.b, and a target that put tp.a too."""
    source, target = fresh_name("src"), fresh_name("dst")
    client.create_branch(source, from_ref="main")
    client.create_branch(target, from_ref="main")
    hashes = [
        put_table(client, source, ("tp", "a"), "s3://a-src"),
        put_table(client, source, ("tp", "b"), "s3://b-src"),
    ]
    put_table(client, target, ("tp", "a"), "s3://a-dst")
    return source, target, hashes


def test_transplant_raises_conflicts_by_default(
    client: LochClient, diverged: tuple[str, str, list[str]]
) -> None:
    source, target, hashes = diverged
    with pytest.raises(ReferenceConflictError) as e:
        client.transplant(target, source, hashes)
    assert [c.key for c in e.value.conflicts] == [("tp", "a")]


def test_transplant_returns_conflicts(
    client: LochClient, diverged: tuple[str, str, list[str]]
) -> None:
    source, target, hashes = diverged
    before = client.get_reference(target).hash
    resp = client.transplant(target, source, hashes, return_conflicts=True)
    assert (resp.was_successful, resp.was_applied) == (False, False)
    conflicts = {d.key: d.conflict for d in resp.details if d.conflict}
    assert list(conflicts) == [("tp", "a")]
    assert conflicts[("tp", "a")] is not None
    assert conflicts[("tp", "a")]["conflictType"] == "KEY_EXISTS"
    assert client.get_reference(target).hash == before


def test_transplant_key_modes(client: LochClient, diverged: tuple[str, str, list[str]]) -> None:
    source, target, hashes = diverged
    resp = client.transplant(target, source, hashes, key_modes={("tp", "a"): "FORCE"})
    assert resp.was_applied
    assert {d.key: d.merge_behavior for d in resp.details} == {
        ("tp",): "NORMAL",
        ("tp", "a"): "FORCE",
        ("tp", "b"): "NORMAL",
    }
    assert client.get_content(target, ("tp", "a"))["metadataLocation"] == "s3://a-src"
    assert client.get_content(target, ("tp", "b"))["metadataLocation"] == "s3://b-src"


def test_transplant_default_mode(client: LochClient, diverged: tuple[str, str, list[str]]) -> None:
    source, target, hashes = diverged
    dry = client.transplant(target, source, hashes, default_mode="FORCE", dry_run=True)
    assert (dry.was_successful, dry.was_applied) == (True, False)
    resp = client.transplant(
        target, source, hashes, default_mode="DROP", key_modes={("tp", "b"): "NORMAL"}
    )
    assert resp.was_applied
    assert client.get_content(target, ("tp", "a"))["metadataLocation"] == "s3://a-dst"
    assert client.get_content(target, ("tp", "b"))["metadataLocation"] == "s3://b-src"
