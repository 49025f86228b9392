"""References: name validation, create/assign/delete with expected-hash checks, tags,
and Nessie's reference syntax (``name``, ``name@hash``, ``@hash``, ``-``, ``~N``, ``^N``,
``*timestamp``) as parsed and resolved by the version store.

Semantics follow nessie-api.md sections 3, 5 (References) and 6.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loch.errors import (
    BadRequestError,
    ConflictType,
    ReferenceAlreadyExistsError,
    ReferenceConflictError,
    ReferenceNotFoundError,
)
from loch.store import NO_ANCESTOR, Persist, RefRecord
from loch.versioning import Put, VersionStore
from loch.versioning.operations import format_time

UNKNOWN_HASH = "ab" * 32


def table(location: str = "s3://b/m1.json") -> dict[str, Any]:
    """A new Iceberg table content (no id)."""
    return {
        "type": "ICEBERG_TABLE",
        "metadataLocation": location,
        "snapshotId": 1,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


def commit_new(vs: VersionStore, branch: str, name: str) -> str:
    """Commit a new top-level table ``name`` on ``branch`` at its HEAD; the new hash."""
    head = vs.get_reference(branch).hash
    return vs.commit(branch, head, {"message": f"add {name}"}, [Put((name,), table())]).hash


def linear(vs: VersionStore, n: int, branch: str = "main") -> list[str]:
    """``n`` commits on ``branch``, oldest first."""
    return [commit_new(vs, branch, f"t{i}") for i in range(n)]


class FakeClock:
    """A controllable clock in epoch microseconds."""

    def __init__(self, start_us: int) -> None:
        self.now = start_us

    def __call__(self) -> int:
        return self.now


# -- names -----------------------------------------------------------------------------------


VALID_NAMES = [
    "a",
    "dev",
    "Main2",
    "feature/x",
    "feature/x/y",
    "release-1.0",
    "my_branch",
    "a.b",
    "a-",
    "a_",
    "abcdef1",  # 7 hex digits: too short to look like a hash
    "x" * 100,
]

INVALID_NAMES = [
    "",
    "1abc",
    "_a",
    "-a",
    ".a",
    "/a",
    "a..b",
    "a.",
    "a/",
    "a b",
    "a@b",
    "a~1",
    "a^1",
    "a*1",
    "a:b",
    "a\\b",
    "a%2F",
    "ä",
]

RESERVED_NAMES = ["HEAD", "head", "Head", "DETACHED", "detached", "Detached"]

HASH_LIKE_NAMES = ["abcdef12", "cafebabe", "deadbeefdeadbeef", "ABCDEF12", "a" * 64]


@pytest.mark.parametrize("name", VALID_NAMES)
def test_create_valid_names(vs: VersionStore, name: str) -> None:
    rec = vs.create_reference(name, "BRANCH", NO_ANCESTOR)
    assert rec == RefRecord(name, "BRANCH", NO_ANCESTOR)
    assert vs.get_reference(name) == rec


@pytest.mark.parametrize("name", INVALID_NAMES)
def test_create_invalid_names(vs: VersionStore, name: str) -> None:
    with pytest.raises(BadRequestError):
        vs.create_reference(name, "BRANCH", NO_ANCESTOR)


@pytest.mark.parametrize("name", RESERVED_NAMES + HASH_LIKE_NAMES)
@pytest.mark.parametrize("ref_type", ["BRANCH", "TAG"])
def test_create_reserved_or_hash_like_names(vs: VersionStore, name: str, ref_type: str) -> None:
    with pytest.raises(BadRequestError):
        vs.create_reference(name, ref_type, NO_ANCESTOR)
    assert [r.name for r in vs.list_references()] == ["main"]


@pytest.mark.parametrize("name", INVALID_NAMES[1:])
def test_get_invalid_name_is_bad_request(vs: VersionStore, name: str) -> None:
    with pytest.raises(BadRequestError):
        vs.get_reference(name)


def test_repository_starts_with_main_at_no_ancestor(vs: VersionStore) -> None:
    assert NO_ANCESTOR == "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
    assert vs.get_reference("main") == RefRecord("main", "BRANCH", NO_ANCESTOR)
    assert vs.list_references() == [RefRecord("main", "BRANCH", NO_ANCESTOR)]
    assert vs.log(NO_ANCESTOR).items == []


def test_reopening_keeps_references(persist: Persist) -> None:
    first = VersionStore(persist)
    h = commit_new(first, "main", "t")
    first.create_reference("dev", "BRANCH", h)
    second = VersionStore(persist)
    assert second.get_reference("main").hash == h
    assert second.get_reference("dev").hash == h


# -- create ------------------------------------------------------------------------------------


def test_create_branch_and_tag_from_commit(vs: VersionStore) -> None:
    h = commit_new(vs, "main", "t")
    assert vs.create_reference("dev", "BRANCH", h) == RefRecord("dev", "BRANCH", h)
    assert vs.create_reference("v1", "TAG", h) == RefRecord("v1", "TAG", h)
    assert vs.create_reference("t2", "tag", h).type == "TAG"
    assert vs.create_reference("b2", "branch", h).type == "BRANCH"
    assert [r.name for r in vs.list_references()] == ["b2", "dev", "main", "t2", "v1"]


def test_create_accepts_uppercase_hash(vs: VersionStore) -> None:
    h = commit_new(vs, "main", "t")
    assert vs.create_reference("dev", "BRANCH", h.upper()).hash == h


def test_create_from_no_ancestor_is_an_empty_branch(vs: VersionStore) -> None:
    commit_new(vs, "main", "t")
    vs.create_reference("orphan", "BRANCH", NO_ANCESTOR)
    assert vs.get_reference("orphan").hash == NO_ANCESTOR
    assert vs.entries(NO_ANCESTOR).items == []


def test_create_existing_name(vs: VersionStore) -> None:
    vs.create_reference("dev", "BRANCH", NO_ANCESTOR)
    with pytest.raises(ReferenceAlreadyExistsError) as ei:
        vs.create_reference("dev", "TAG", NO_ANCESTOR)
    assert ei.value.message == "Named reference 'dev' already exists."
    assert ei.value.status == 409
    with pytest.raises(ReferenceAlreadyExistsError):
        vs.create_reference("main", "BRANCH", NO_ANCESTOR)


def test_create_from_unknown_hash_is_404(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError) as ei:
        vs.create_reference("dev", "BRANCH", UNKNOWN_HASH)
    assert ei.value.status == 404
    with pytest.raises(ReferenceNotFoundError):
        vs.get_reference("dev")


@pytest.mark.parametrize("target", ["xyz", "abc", "12345", "g" * 64, "a" * 65])
def test_create_from_malformed_hash_is_400(vs: VersionStore, target: str) -> None:
    with pytest.raises(BadRequestError):
        vs.create_reference("dev", "BRANCH", target)


def test_create_without_hash_is_400(vs: VersionStore) -> None:
    with pytest.raises(BadRequestError):
        vs.create_reference("dev", "BRANCH", None)


@pytest.mark.parametrize("ref_type", ["", "BRANCHES", "DETACHED", "COMMIT"])
def test_create_with_bad_type_is_400(vs: VersionStore, ref_type: str) -> None:
    with pytest.raises(BadRequestError):
        vs.create_reference("dev", ref_type, NO_ANCESTOR)


def test_get_missing_reference(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError) as ei:
        vs.get_reference("nope")
    assert ei.value.message == "Named reference 'nope' not found"


# -- assign ------------------------------------------------------------------------------------


def test_assign_moves_branch_and_tag(vs: VersionStore) -> None:
    h1, h2 = linear(vs, 2)
    vs.create_reference("dev", "BRANCH", h1)
    vs.create_reference("v1", "TAG", h1)
    assert vs.assign_reference("dev", h1, h2) == RefRecord("dev", "BRANCH", h2)
    assert vs.assign_reference("v1", h1, h2, "TAG") == RefRecord("v1", "TAG", h2)
    assert vs.get_reference("dev").hash == h2
    assert vs.get_reference("v1").hash == h2


def test_assign_to_unrelated_commit_and_back_to_empty(vs: VersionStore) -> None:
    vs.create_reference("other", "BRANCH", NO_ANCESTOR)
    other = commit_new(vs, "other", "o")
    h = commit_new(vs, "main", "m")
    assert vs.assign_reference("main", h, other).hash == other
    assert vs.assign_reference("main", other, NO_ANCESTOR).hash == NO_ANCESTOR
    assert vs.get_reference("main").hash == NO_ANCESTOR


def test_assign_with_stale_expected_hash(vs: VersionStore) -> None:
    h1, h2 = linear(vs, 2)
    with pytest.raises(ReferenceConflictError) as ei:
        vs.assign_reference("main", h1, h1)
    err = ei.value
    assert err.status == 409
    msg = f"named-reference 'main' is not at expected hash '{h1}', but at '{h2}'"
    assert [(c.conflict_type, c.key, c.message) for c in err.conflicts] == [
        (ConflictType.UNEXPECTED_HASH, None, msg)
    ]
    assert err.message == msg[0].upper() + msg[1:] + "."
    assert vs.get_reference("main").hash == h2


def test_assign_to_unknown_hash_is_404(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    with pytest.raises(ReferenceNotFoundError):
        vs.assign_reference("main", h, UNKNOWN_HASH)
    assert vs.get_reference("main").hash == h


def test_assign_missing_reference_is_404(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.assign_reference("nope", NO_ANCESTOR, NO_ANCESTOR)


def test_assign_with_malformed_expected_hash_is_400(vs: VersionStore) -> None:
    with pytest.raises(BadRequestError):
        vs.assign_reference("main", "zz", NO_ANCESTOR)


def test_assign_with_wrong_type_check_fails(vs: VersionStore) -> None:
    vs.create_reference("v1", "TAG", NO_ANCESTOR)
    with pytest.raises(ReferenceNotFoundError):
        vs.assign_reference("v1", NO_ANCESTOR, NO_ANCESTOR, "BRANCH")


# -- delete ------------------------------------------------------------------------------------


def test_delete_branch_and_tag(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    vs.create_reference("dev", "BRANCH", h)
    vs.create_reference("v1", "TAG", h)
    assert vs.delete_reference("dev", h) == RefRecord("dev", "BRANCH", h)
    assert vs.delete_reference("v1", h, "TAG") == RefRecord("v1", "TAG", h)
    with pytest.raises(ReferenceNotFoundError):
        vs.get_reference("dev")
    assert [r.name for r in vs.list_references()] == ["main"]
    # the commit itself stays readable
    assert vs.resolve(f"@{h}").hash == h


def test_delete_with_stale_expected_hash(vs: VersionStore) -> None:
    h1, h2 = linear(vs, 2)
    vs.create_reference("dev", "BRANCH", h2)
    with pytest.raises(ReferenceConflictError) as ei:
        vs.delete_reference("dev", h1)
    (c,) = ei.value.conflicts
    assert c.conflict_type == ConflictType.UNEXPECTED_HASH
    assert c.message == f"named-reference 'dev' is not at expected hash '{h1}', but at '{h2}'"
    assert vs.get_reference("dev").hash == h2


def test_default_branch_cannot_be_deleted(vs: VersionStore) -> None:
    with pytest.raises(BadRequestError) as ei:
        vs.delete_reference("main", NO_ANCESTOR)
    assert ei.value.message == "Default branch 'main' cannot be deleted."
    assert vs.get_reference("main").hash == NO_ANCESTOR


def test_delete_missing_reference_is_404(vs: VersionStore) -> None:
    with pytest.raises(ReferenceNotFoundError):
        vs.delete_reference("nope", NO_ANCESTOR)


def test_deleted_name_can_be_recreated(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    vs.create_reference("dev", "BRANCH", NO_ANCESTOR)
    vs.delete_reference("dev", NO_ANCESTOR)
    assert vs.create_reference("dev", "TAG", h) == RefRecord("dev", "TAG", h)


def test_other_default_branch_name(persist: Persist) -> None:
    vs = VersionStore(persist, default_branch="trunk")
    assert vs.get_reference("trunk").hash == NO_ANCESTOR
    assert vs.resolve("-").name == "trunk"
    with pytest.raises(BadRequestError):
        vs.delete_reference("trunk", NO_ANCESTOR)


# -- tags --------------------------------------------------------------------------------------


def test_tag_is_not_a_commit_target(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    vs.create_reference("v1", "TAG", h)
    with pytest.raises(BadRequestError):
        vs.commit("v1", h, {"message": "x"}, [Put(("u",), table())])
    assert vs.get_reference("v1").hash == h


def test_tag_does_not_move_with_its_branch(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    vs.create_reference("v1", "TAG", h)
    commit_new(vs, "main", "later")
    assert vs.resolve("v1") == vs.resolve(f"v1@{h}")
    assert vs.resolve("v1").type == "TAG"


# -- ref spec parsing ----------------------------------------------------------------------------


def test_parse_forms(vs: VersionStore) -> None:
    h = "0123456789abcdef" * 4
    p = vs.parse
    assert (p("main").name, p("main").hash, p("main").relative) == ("main", None, ())
    assert (p("main@").name, p("main@").hash) == ("main", None)
    assert (p(f"main@{h}").name, p(f"main@{h}").hash) == ("main", h)
    assert (p(f"main@{h.upper()}").hash) == h
    assert (p(f"@{h}").name, p(f"@{h}").hash, p(f"@{h}").is_detached) == (None, h, True)
    assert p("-").name == "main"
    assert p("feature/x@").name == "feature/x"
    assert p(f"feature/x@{h}").name == "feature/x"
    steps = p(f"main@{h}~10^2*1685185847230").relative
    assert [(s.kind, s.value) for s in steps] == [("~", "10"), ("^", "2"), ("*", "1685185847230")]
    iso = p("main*2021-04-07T14:42:25.534748Z").relative
    assert [(s.kind, s.value) for s in iso] == [("*", "2021-04-07T14:42:25.534748Z")]
    assert [(s.kind, s.value) for s in p("-~3").relative] == [("~", "3")]


def test_parse_bare_hash_is_detached(vs: VersionStore) -> None:
    h = "0123456789abcdef" * 4
    spec = vs.parse(h)
    assert (spec.name, spec.hash) == (None, h)


MALFORMED_SPECS = [
    "",
    "@",
    "main~",
    "main~x",
    "main^",
    "main^a",
    "main*",
    "main*2021-04-07",
    "main*2021-04-07T14:42:25",
    "main*2021-04-07T14:42:25.1234567890Z",
    "main~1x",
    "main@xyz",
    "main@1234567",
    "main@" + "a" * 65,
    "@zzzzzzzz",
    "a..b",
    "1abc@",
    "main@abcdef12@abcdef12",
    "~1",
]


@pytest.mark.parametrize("text", MALFORMED_SPECS)
def test_malformed_ref_specs_are_400(vs: VersionStore, text: str) -> None:
    with pytest.raises(BadRequestError):
        vs.resolve(text)


# -- resolution --------------------------------------------------------------------------------


def test_resolve_names(vs: VersionStore) -> None:
    h1, h2 = linear(vs, 2)
    vs.create_reference("v1", "TAG", h1)
    vs.create_reference("feature/x", "BRANCH", h1)
    r = vs.resolve("main")
    assert (r.name, r.type, r.hash, r.is_branch) == ("main", "BRANCH", h2, True)
    r = vs.resolve("v1")
    assert (r.name, r.type, r.hash, r.is_branch) == ("v1", "TAG", h1, False)
    assert vs.resolve("feature/x@").hash == h1
    assert vs.resolve("feature/x").hash == h1
    assert vs.resolve("-").hash == h2
    assert vs.resolve("-").name == "main"


def test_resolve_name_at_hash(vs: VersionStore) -> None:
    h1, h2 = linear(vs, 2)
    r = vs.resolve(f"main@{h1}")
    assert (r.name, r.type, r.hash) == ("main", "BRANCH", h1)
    # a read at name@hash only checks that the commit exists
    vs.create_reference("other", "BRANCH", NO_ANCESTOR)
    o = commit_new(vs, "other", "o")
    assert vs.resolve(f"main@{o}").hash == o
    assert vs.resolve(f"main@{h2.upper()}").hash == h2


def test_resolve_detached(vs: VersionStore) -> None:
    (h,) = linear(vs, 1)
    r = vs.resolve(f"@{h}")
    assert (r.name, r.type, r.hash) == (None, "DETACHED", h)
    r = vs.resolve(h)
    assert (r.name, r.type, r.hash) == (None, "DETACHED", h)
    assert vs.resolve(f"@{NO_ANCESTOR}").hash == NO_ANCESTOR


def test_resolve_unknown(vs: VersionStore) -> None:
    linear(vs, 1)
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve("nope")
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve(f"@{UNKNOWN_HASH}")
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve(f"main@{UNKNOWN_HASH}")
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve(f"nope@{vs.get_reference('main').hash}")


def test_resolve_tilde(vs: VersionStore) -> None:
    h = linear(vs, 4)
    assert vs.resolve("main~0").hash == h[3]
    assert vs.resolve("main~1").hash == h[2]
    assert vs.resolve("main~3").hash == h[0]
    assert vs.resolve("main~4").hash == NO_ANCESTOR
    assert vs.resolve("main~1~2").hash == h[0]
    assert vs.resolve("-~2").hash == h[1]
    assert vs.resolve(f"@{h[2]}~1").hash == h[1]
    assert vs.resolve(f"main@{h[2]}~2").hash == h[0]
    assert vs.resolve("main~1").name == "main"
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve("main~5")


def make_merge(vs: VersionStore) -> tuple[str, str, str]:
    """main: a, then merge of dev (one commit d on top of a); returns (a, d, merge)."""
    a = commit_new(vs, "main", "a")
    vs.create_reference("dev", "BRANCH", a)
    d = commit_new(vs, "dev", "d")
    m = vs.merge("main", a, "dev", d)
    assert m.resultant_target_hash is not None
    return a, d, m.resultant_target_hash


def test_resolve_caret(vs: VersionStore) -> None:
    a, d, m = make_merge(vs)
    assert vs.resolve("main").hash == m
    assert vs.resolve("main^1").hash == a
    assert vs.resolve("main^2").hash == d
    assert vs.resolve(f"@{m}^2").hash == d
    assert vs.resolve(f"{m}^2").hash == d
    assert vs.resolve("main^2~1").hash == a
    assert vs.resolve("main~1^1").hash == NO_ANCESTOR
    assert vs.resolve("main^2^1").hash == a
    assert vs.resolve("dev^1").hash == a
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve("main^3")
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve("dev^2")


def test_resolve_chained_linear(vs: VersionStore) -> None:
    h = linear(vs, 4)
    assert vs.resolve("main~1^1").hash == h[1]
    assert vs.resolve("main^1^1").hash == h[1]
    assert vs.resolve("main^1~2").hash == h[0]


def clocked(persist: Persist, start_us: int) -> tuple[VersionStore, FakeClock]:
    clock = FakeClock(start_us)
    return VersionStore(persist, clock=clock), clock


T0_US = 1_685_185_847_230_000  # 2023-05-27T11:10:47.230Z


def test_resolve_timestamp(persist: Persist) -> None:
    vs, clock = clocked(persist, T0_US)
    hashes = []
    for i in range(3):
        clock.now = T0_US + i * 1_000_000  # one second apart
        hashes.append(commit_new(vs, "main", f"t{i}"))
    ms0 = T0_US // 1000
    assert vs.resolve(f"main*{ms0}").hash == hashes[0]
    assert vs.resolve(f"main*{ms0 + 999}").hash == hashes[0]
    assert vs.resolve(f"main*{ms0 + 1000}").hash == hashes[1]
    assert vs.resolve(f"main*{ms0 + 5000}").hash == hashes[2]
    iso1 = format_time(T0_US + 1_000_000)
    assert iso1 == "2023-05-27T11:10:48.230000Z"
    assert vs.resolve(f"main*{iso1}").hash == hashes[1]
    assert vs.resolve("main*2023-05-27T11:10:48.229999Z").hash == hashes[0]
    assert vs.resolve("main*2023-05-27T11:10:48.23Z").hash == hashes[1]
    assert vs.resolve("main*2023-05-27T11:10:49Z").hash == hashes[1]
    assert vs.resolve("main*2023-05-27T11:10:49.230000001Z").hash == hashes[2]
    assert vs.resolve("main*2099-01-01T00:00:00Z").hash == hashes[2]
    assert vs.resolve(f"main*{ms0 + 1000}~1").hash == hashes[0]
    assert vs.resolve(f"main~1*{ms0 + 5000}").hash == hashes[1]
    assert vs.resolve(f"@{hashes[2]}*{ms0}").hash == hashes[0]


def test_resolve_timestamp_before_first_commit(persist: Persist) -> None:
    vs, _ = clocked(persist, T0_US)
    commit_new(vs, "main", "t")
    with pytest.raises(ReferenceNotFoundError):
        vs.resolve(f"main*{T0_US // 1000 - 1}")


def test_resolve_timestamp_finds_merge_commit_by_its_commit_time(persist: Persist) -> None:
    """``*T`` with the merge commit's own commitTime must resolve to that commit."""

    ticks = iter(range(10**6))

    def clock() -> int:
        return T0_US + next(ticks) * 1000  # every reading one millisecond later

    vs = VersionStore(persist, clock=clock)
    _, _, m = make_merge(vs)
    commit_time = vs.commit_of(m).meta["commitTime"]
    assert vs.resolve(f"main*{commit_time}").hash == m


def test_resolve_timestamp_keeps_name_and_type(persist: Persist) -> None:
    vs, _ = clocked(persist, T0_US)
    (h,) = linear(vs, 1)
    vs.create_reference("v1", "TAG", h)
    r = vs.resolve(f"v1*{T0_US // 1000}")
    assert (r.name, r.type, r.hash) == ("v1", "TAG", h)


@pytest.mark.parametrize(
    "spec",
    [
        lambda h: "main",
        lambda h: f"main@{h}",
        lambda h: f"@{h}",
        lambda h: "-",
        lambda h: "main~0",
    ],
)
def test_resolve_all_forms_agree(vs: VersionStore, spec: Callable[[str], str]) -> None:
    (h,) = linear(vs, 1)
    assert vs.resolve(spec(h)).hash == h
