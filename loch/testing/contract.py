"""The :class:`~loch.store.Persist` contract as reusable pytest classes (dulwich style).

A backend's test module subclasses these classes and supplies fixtures; pytest collects
the inherited ``test_*`` methods for each subclass::

    class TestPostgresPersist(PersistContract):
        @pytest.fixture
        def persist(self, postgres_url: str) -> Iterator[Persist]:
            p = open_store(postgres_url)
            yield p
            p.close()

:class:`PersistContract` needs a ``persist`` fixture: a fresh, empty store.

:class:`DurablePersistContract` is for backends whose data outlives a handle (SQLite,
PostgreSQL; not memory). It needs a ``persist_factory`` fixture: a callable that opens a
*new* handle to one and the same empty store each time it is called, and closes every
handle it opened when the test ends. Two handles stand for two server processes.

Object ids are real SHA-256 ids of the bytes (64 lowercase hex), as the contract says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import partial

import pytest

from loch.errors import ReferenceAlreadyExistsError, ReferenceConflictError, ReferenceNotFoundError
from loch.store import (
    Persist,
    RefAlreadyExists,
    RefConditionFailed,
    RefMissing,
    RefRecord,
    StoreError,
    object_id,
)

__all__ = ["DurablePersistContract", "PersistContract", "PersistFactory"]

PersistFactory = Callable[[], Persist]
"""Opens a new handle to the store under test (see :class:`DurablePersistContract`)."""


# -- helpers -------------------------------------------------------------------------------


def make_objects(tag: str, n: int) -> dict[str, bytes]:
    """``n`` distinct objects keyed by their SHA-256 ids."""
    out: dict[str, bytes] = {}
    for i in range(n):
        data = f"{tag}:{i}".encode()
        out[object_id(data)] = data
    return out


def commit_hash(label: str) -> str:
    """A commit-hash-like string (64 hex) for reference targets."""
    return object_id(f"commit {label}".encode())


def counter_hash(n: int) -> str:
    """A 64-hex hash encoding the counter ``n`` (for increment-by-CAS tests)."""
    return f"{n:064x}"


def increment(persist: Persist, name: str, times: int) -> int:
    """Add ``times`` to the counter in reference ``name`` by CAS, retrying on conflict.

    Returns how many CAS attempts failed.
    """
    failures = 0
    done = 0
    while done < times:
        ref = persist.get_ref(name)
        assert ref is not None
        current = int(ref.hash, 16)
        try:
            persist.update_ref(name, ref.hash, counter_hash(current + 1))
        except RefConditionFailed as e:
            assert e.expected == ref.hash
            assert e.actual != ref.hash
            failures += 1
            continue
        done += 1
    return failures


def run_threads(targets: list[Callable[[], object]]) -> None:
    """Run callables on threads started together; re-raise the first failure."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(targets))

    def wrap(fn: Callable[[], object]) -> Callable[[], None]:
        def run() -> None:
            try:
                barrier.wait()
                fn()
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "worker thread hung"
    if errors:
        raise errors[0]


def assert_absent(persist: Persist, objects: Mapping[str, bytes]) -> None:
    """None of ``objects`` is readable."""
    assert persist.get_objects(list(objects)) == {}


UNICODE_NAMES = [
    "main",
    "Main",
    "dev",
    "a",
    "a-b",
    "a/b",
    "release/1.0",
    "0",
    "z",
    "é",  # U+00E9, Latin-1 range
    "ü-branch",
    "日本語",  # CJK
    "\uff61halfwidth",  # U+FF61, above the UTF-16 surrogate range
    "😀emoji",  # U+1F600: astral, sorts after U+FF61 by code point (not in UTF-16)
    "𝄞clef",  # U+1D11E: astral, before U+1F600
    "ѐ",  # U+0450 Cyrillic
]
"""Reference names chosen so that code-point, UTF-8-byte and UTF-16 orders disagree with
locale collations: list_refs must order by code point (Python's ``sorted``)."""


# -- the contract --------------------------------------------------------------------------


class PersistContract:
    """Behaviour every :class:`Persist` must show; needs a ``persist`` fixture."""

    # objects ------------------------------------------------------------------------------

    def test_get_objects_of_nothing(self, persist: Persist) -> None:
        """An empty request answers an empty dict."""
        assert persist.get_objects([]) == {}

    def test_get_objects_on_empty_store(self, persist: Persist) -> None:
        """A fresh store holds no objects."""
        assert persist.get_objects(list(make_objects("x", 3))) == {}

    def test_get_objects_omits_missing_ids(self, persist: Persist) -> None:
        """Ids not stored are left out of the answer, not mapped to None."""
        present = make_objects("present", 2)
        missing = make_objects("missing", 2)
        persist.put_objects(present)
        (p1, p2), (m1, m2) = list(present), list(missing)
        got = persist.get_objects([m1, p1, m2, p2])
        assert got == present
        assert m1 not in got and m2 not in got

    def test_get_objects_tolerates_duplicate_ids(self, persist: Persist) -> None:
        """Asking for an id twice answers it once."""
        objs = make_objects("dup", 1)
        persist.put_objects(objs)
        oid = next(iter(objs))
        assert persist.get_objects([oid, oid, oid]) == objs

    def test_put_objects_roundtrips_arbitrary_bytes(self, persist: Persist) -> None:
        """Bytes come back exactly: empty, NULs, every byte value, a large blob."""
        blobs = [b"", b"\x00", b"\x00" * 1000, bytes(range(256)), bytes(range(256)) * 4096]
        objs = {object_id(b): b for b in blobs}
        persist.put_objects(objs)
        got = persist.get_objects(list(objs))
        assert got == objs
        assert all(isinstance(v, bytes) for v in got.values())

    def test_put_objects_is_idempotent(self, persist: Persist) -> None:
        """Writing the same objects again (alone or among new ones) changes nothing."""
        first = make_objects("idem", 5)
        more = make_objects("idem-more", 3)
        persist.put_objects(first)
        persist.put_objects(first)
        persist.put_objects({**first, **more})
        assert persist.get_objects(list(first) + list(more)) == {**first, **more}

    def test_put_objects_of_nothing(self, persist: Persist) -> None:
        """An empty write is allowed and writes nothing."""
        persist.put_objects({})
        assert persist.get_objects(list(make_objects("x", 1))) == {}

    @pytest.mark.parametrize("n", [499, 500, 501, 1234])
    def test_large_batches(self, persist: Persist, n: int) -> None:
        """Batches around and beyond 500 ids (SQLite chunks its IN lists) are complete."""
        objs = make_objects(f"big{n}", n)
        missing = make_objects(f"absent{n}", n // 2)
        persist.put_objects(objs)
        ids = list(objs)
        # Interleave missing ids so that every chunk mixes hits and misses.
        asked: list[str] = []
        miss = iter(missing)
        for i, oid in enumerate(ids):
            asked.append(oid)
            if i % 2 == 0:
                asked.append(next(miss, oid))
        assert persist.get_objects(asked) == objs
        assert persist.get_objects(list(missing)) == {}
        assert persist.get_objects(ids[::-1]) == objs

    def test_large_batch_published_with_update_ref(self, persist: Persist) -> None:
        """A reference change may carry more than 500 objects; all of them are stored."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        objs = make_objects("publish", 1501)
        persist.update_ref("main", commit_hash("0"), commit_hash("1"), objs)
        assert persist.get_objects(list(objs)) == objs

    # references: create / get / list ------------------------------------------------------

    def test_get_ref_of_unknown_name(self, persist: Persist) -> None:
        """An unknown reference is None; a fresh store lists no references."""
        assert persist.get_ref("main") is None
        assert persist.list_refs() == []

    def test_create_ref(self, persist: Persist) -> None:
        """A created reference is readable with its type and hash."""
        branch = RefRecord("main", "BRANCH", commit_hash("b"))
        tag = RefRecord("v1", "TAG", commit_hash("t"))
        persist.create_ref(branch)
        persist.create_ref(tag)
        assert persist.get_ref("main") == branch
        assert persist.get_ref("v1") == tag
        assert persist.list_refs() == [branch, tag]

    def test_create_ref_publishes_objects(self, persist: Persist) -> None:
        """Objects passed to create_ref are stored with the reference."""
        objs = make_objects("create", 4)
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("c")), objs)
        assert persist.get_objects(list(objs)) == objs

    def test_create_ref_duplicate_raises(self, persist: Persist) -> None:
        """A second reference of an existing name fails and changes nothing.

        The objects passed with the failed creation are not stored either.
        """
        original = RefRecord("main", "BRANCH", commit_hash("1"))
        persist.create_ref(original)
        objs = make_objects("dup-create", 3)
        for dup in (
            RefRecord("main", "BRANCH", commit_hash("2")),
            RefRecord("main", "TAG", commit_hash("1")),
            original,
        ):
            with pytest.raises(RefAlreadyExists) as info:
                persist.create_ref(dup, objs)
            assert info.value.name == "main"
            assert isinstance(info.value, ReferenceAlreadyExistsError)
            assert isinstance(info.value, StoreError)
        assert persist.get_ref("main") == original
        assert persist.list_refs() == [original]
        assert_absent(persist, objs)

    def test_list_refs_ordered_by_name(self, persist: Persist) -> None:
        """list_refs orders by name (code point order), whatever the creation order."""
        names = ["release/2", "main", "dev", "Main", "a", "a-b", "a/b", "0", "z", "aa"]
        for i, name in enumerate(names):
            kind = "TAG" if i % 3 == 0 else "BRANCH"
            persist.create_ref(RefRecord(name, kind, commit_hash(name)))
        refs = persist.list_refs()
        assert [r.name for r in refs] == sorted(names)
        for r in refs:
            assert r.hash == commit_hash(r.name)
            assert r.type == ("TAG" if names.index(r.name) % 3 == 0 else "BRANCH")

    def test_unicode_names(self, persist: Persist) -> None:
        """Non-ASCII names survive every operation and list in code point order."""
        for name in reversed(UNICODE_NAMES):
            persist.create_ref(RefRecord(name, "BRANCH", commit_hash(name)))
        assert [r.name for r in persist.list_refs()] == sorted(UNICODE_NAMES)
        for name in UNICODE_NAMES:
            assert persist.get_ref(name) == RefRecord(name, "BRANCH", commit_hash(name))
        emoji = "😀emoji"
        persist.update_ref(emoji, commit_hash(emoji), commit_hash("moved"))
        assert persist.get_ref(emoji) == RefRecord(emoji, "BRANCH", commit_hash("moved"))
        with pytest.raises(RefConditionFailed) as info:
            persist.update_ref(emoji, commit_hash(emoji), commit_hash("again"))
        assert info.value.name == emoji
        persist.delete_ref("日本語", commit_hash("日本語"))
        assert persist.get_ref("日本語") is None
        with pytest.raises(RefMissing) as missing:
            persist.delete_ref("日本語", commit_hash("日本語"))
        assert missing.value.name == "日本語"
        left = sorted(n for n in UNICODE_NAMES if n != "日本語")
        assert [r.name for r in persist.list_refs()] == left

    def test_names_differing_only_in_normalisation_are_distinct(self, persist: Persist) -> None:
        """Names are compared as exact strings: no Unicode normalisation or case folding."""
        composed, decomposed = "caf\u00e9", "cafe\u0301"
        persist.create_ref(RefRecord(composed, "BRANCH", commit_hash("1")))
        persist.create_ref(RefRecord(decomposed, "BRANCH", commit_hash("2")))
        persist.create_ref(RefRecord("CAFÉ", "BRANCH", commit_hash("3")))
        assert persist.get_ref(composed) == RefRecord(composed, "BRANCH", commit_hash("1"))
        assert persist.get_ref(decomposed) == RefRecord(decomposed, "BRANCH", commit_hash("2"))
        assert [r.name for r in persist.list_refs()] == sorted([composed, decomposed, "CAFÉ"])

    # references: update --------------------------------------------------------------------

    def test_update_ref_moves_and_publishes(self, persist: Persist) -> None:
        """A successful CAS moves the reference and stores the objects it carries."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        objs = make_objects("update", 5)
        persist.update_ref("main", commit_hash("0"), commit_hash("1"), objs)
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))
        assert persist.get_objects(list(objs)) == objs
        persist.update_ref("main", commit_hash("1"), commit_hash("2"))
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("2"))

    def test_update_ref_keeps_type(self, persist: Persist) -> None:
        """Moving a tag leaves it a tag."""
        persist.create_ref(RefRecord("v1", "TAG", commit_hash("0")))
        persist.update_ref("v1", commit_hash("0"), commit_hash("1"))
        assert persist.get_ref("v1") == RefRecord("v1", "TAG", commit_hash("1"))

    def test_update_ref_to_same_hash(self, persist: Persist) -> None:
        """A CAS whose new hash equals the expected one succeeds."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        objs = make_objects("same", 2)
        persist.update_ref("main", commit_hash("0"), commit_hash("0"), objs)
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("0"))
        assert persist.get_objects(list(objs)) == objs

    def test_update_ref_condition_failed(self, persist: Persist) -> None:
        """A stale expected hash fails with expected and actual; nothing is written."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        persist.create_ref(RefRecord("other", "BRANCH", commit_hash("x")))
        persist.update_ref("main", commit_hash("0"), commit_hash("1"))
        objs = make_objects("lost", 3)
        with pytest.raises(RefConditionFailed) as info:
            persist.update_ref("main", commit_hash("0"), commit_hash("2"), objs)
        err = info.value
        assert (err.name, err.expected, err.actual) == ("main", commit_hash("0"), commit_hash("1"))
        assert isinstance(err, ReferenceConflictError)
        assert isinstance(err, StoreError)
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))
        assert persist.get_ref("other") == RefRecord("other", "BRANCH", commit_hash("x"))
        assert_absent(persist, objs)

    def test_update_ref_after_failure_still_works(self, persist: Persist) -> None:
        """A failed CAS leaves the store usable: the next correct CAS succeeds."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        lost = make_objects("lost", 2)
        kept = make_objects("kept", 2)
        with pytest.raises(RefConditionFailed):
            persist.update_ref("main", commit_hash("wrong"), commit_hash("1"), lost)
        with pytest.raises(RefMissing):
            persist.update_ref("nope", commit_hash("0"), commit_hash("1"), lost)
        persist.update_ref("main", commit_hash("0"), commit_hash("1"), kept)
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))
        assert persist.get_objects(list(lost) + list(kept)) == kept

    def test_update_ref_stale_after_chain(self, persist: Persist) -> None:
        """After several moves, every old hash is stale and reports the newest actual."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        for i in range(5):
            persist.update_ref("main", commit_hash(str(i)), commit_hash(str(i + 1)))
        for i in range(5):
            with pytest.raises(RefConditionFailed) as info:
                persist.update_ref("main", commit_hash(str(i)), commit_hash("z"))
            assert info.value.actual == commit_hash("5")
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("5"))

    def test_update_ref_missing(self, persist: Persist) -> None:
        """Updating an unknown reference raises RefMissing and writes nothing."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        objs = make_objects("orphan", 3)
        with pytest.raises(RefMissing) as info:
            persist.update_ref("nope", commit_hash("0"), commit_hash("1"), objs)
        assert info.value.name == "nope"
        assert isinstance(info.value, ReferenceNotFoundError)
        assert isinstance(info.value, StoreError)
        assert persist.get_ref("nope") is None
        assert [r.name for r in persist.list_refs()] == ["main"]
        assert_absent(persist, objs)

    # references: delete --------------------------------------------------------------------

    def test_delete_ref(self, persist: Persist) -> None:
        """A CAS delete removes the reference; the name can be created again."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        persist.create_ref(RefRecord("dev", "BRANCH", commit_hash("d")))
        persist.delete_ref("dev", commit_hash("d"))
        assert persist.get_ref("dev") is None
        assert [r.name for r in persist.list_refs()] == ["main"]
        persist.create_ref(RefRecord("dev", "TAG", commit_hash("e")))
        assert persist.get_ref("dev") == RefRecord("dev", "TAG", commit_hash("e"))

    def test_delete_ref_keeps_objects(self, persist: Persist) -> None:
        """Deleting a reference does not delete the objects it published."""
        objs = make_objects("keep", 3)
        persist.create_ref(RefRecord("dev", "BRANCH", commit_hash("d")), objs)
        persist.delete_ref("dev", commit_hash("d"))
        assert persist.get_objects(list(objs)) == objs

    def test_delete_ref_condition_failed(self, persist: Persist) -> None:
        """Deleting at a stale hash fails with expected and actual; the reference stays."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("1")))
        with pytest.raises(RefConditionFailed) as info:
            persist.delete_ref("main", commit_hash("0"))
        err = info.value
        assert (err.name, err.expected, err.actual) == ("main", commit_hash("0"), commit_hash("1"))
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))

    def test_delete_ref_missing(self, persist: Persist) -> None:
        """Deleting an unknown (or already deleted) reference raises RefMissing."""
        with pytest.raises(RefMissing) as info:
            persist.delete_ref("nope", commit_hash("0"))
        assert info.value.name == "nope"
        persist.create_ref(RefRecord("gone", "BRANCH", commit_hash("0")))
        persist.delete_ref("gone", commit_hash("0"))
        with pytest.raises(RefMissing):
            persist.delete_ref("gone", commit_hash("0"))
        with pytest.raises(RefMissing):
            persist.update_ref("gone", commit_hash("0"), commit_hash("1"))

    # reference log -------------------------------------------------------------------------

    def test_ref_log_records_create_and_updates(self, persist: Persist) -> None:
        """The log lists every hash a reference pointed at, newest (current) first."""
        assert persist.ref_log("main", 10) == []
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        assert persist.ref_log("main", 10) == [commit_hash("0")]
        for i in range(1, 6):
            persist.update_ref("main", commit_hash(str(i - 1)), commit_hash(str(i)))
        assert persist.ref_log("main", 10) == [commit_hash(str(i)) for i in range(5, -1, -1)]
        assert persist.ref_log("main", 2) == [commit_hash("5"), commit_hash("4")]
        assert persist.ref_log("main", 1) == [commit_hash("5")]
        # every update is logged, also one to the same hash
        persist.update_ref("main", commit_hash("5"), commit_hash("5"))
        assert persist.ref_log("main", 2) == [commit_hash("5"), commit_hash("5")]

    def test_ref_log_is_per_reference(self, persist: Persist) -> None:
        """Each reference has its own log; unknown names have an empty one."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("m0")))
        persist.create_ref(RefRecord("日本語", "TAG", commit_hash("t0")))
        persist.update_ref("main", commit_hash("m0"), commit_hash("m1"))
        assert persist.ref_log("main", 10) == [commit_hash("m1"), commit_hash("m0")]
        assert persist.ref_log("日本語", 10) == [commit_hash("t0")]
        assert persist.ref_log("nope", 10) == []

    def test_ref_log_skips_failed_changes(self, persist: Persist) -> None:
        """Failed creations and failed CAS updates leave no log entry."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        with pytest.raises(RefAlreadyExists):
            persist.create_ref(RefRecord("main", "BRANCH", commit_hash("dup")))
        with pytest.raises(RefConditionFailed):
            persist.update_ref("main", commit_hash("stale"), commit_hash("x"))
        with pytest.raises(RefMissing):
            persist.update_ref("nope", commit_hash("0"), commit_hash("x"))
        assert persist.ref_log("main", 10) == [commit_hash("0")]
        assert persist.ref_log("nope", 10) == []

    def test_ref_log_after_recreate(self, persist: Persist) -> None:
        """A reference deleted and created again logs its new hash as the newest."""
        persist.create_ref(RefRecord("dev", "BRANCH", commit_hash("0")))
        persist.delete_ref("dev", commit_hash("0"))
        persist.create_ref(RefRecord("dev", "BRANCH", commit_hash("1")))
        assert persist.ref_log("dev", 1) == [commit_hash("1")]

    def test_ref_log_limit_zero(self, persist: Persist) -> None:
        """``limit`` is a maximum: a limit of 0 answers nothing."""
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        persist.update_ref("main", commit_hash("0"), commit_hash("1"))
        assert persist.ref_log("main", 0) == []

    # concurrency ---------------------------------------------------------------------------

    def test_concurrent_cas_loses_no_update(self, persist: Persist) -> None:
        """Threads incrementing a counter by CAS-and-retry lose no increment."""
        persist.create_ref(RefRecord("counter", "BRANCH", counter_hash(0)))
        threads, times = 4, 25
        run_threads([partial(increment, persist, "counter", times)] * threads)
        assert persist.get_ref("counter") == RefRecord(
            "counter", "BRANCH", counter_hash(threads * times)
        )

    def test_concurrent_create_has_one_winner(self, persist: Persist) -> None:
        """Of threads creating the same name, exactly one succeeds."""
        winners: list[int] = []
        losers: list[int] = []
        lock = threading.Lock()

        def create(i: int) -> None:
            try:
                persist.create_ref(RefRecord("race", "BRANCH", commit_hash(str(i))))
            except RefAlreadyExists:
                with lock:
                    losers.append(i)
            else:
                with lock:
                    winners.append(i)

        run_threads([partial(create, i) for i in range(8)])
        assert len(winners) == 1 and len(losers) == 7
        assert persist.get_ref("race") == RefRecord("race", "BRANCH", commit_hash(str(winners[0])))

    # repository settings -------------------------------------------------------------------

    def test_meta_get_set(self, persist: Persist) -> None:
        """Unknown settings are None; set_meta stores and overwrites."""
        assert persist.get_meta("created") is None
        persist.set_meta("created", "2024-01-01T00:00:00Z")
        assert persist.get_meta("created") == "2024-01-01T00:00:00Z"
        persist.set_meta("created", "later")
        assert persist.get_meta("created") == "later"
        assert persist.get_meta("other") is None

    def test_meta_remove(self, persist: Persist) -> None:
        """set_meta with None removes; removing an absent setting is harmless."""
        persist.set_meta("k", "v")
        persist.set_meta("k", None)
        assert persist.get_meta("k") is None
        persist.set_meta("k", None)
        persist.set_meta("never", None)
        assert persist.get_meta("never") is None

    def test_meta_set_if_absent(self, persist: Persist) -> None:
        """set_meta_if_absent sets once and otherwise answers the stored value."""
        assert persist.set_meta_if_absent("k", "first") == "first"
        assert persist.get_meta("k") == "first"
        assert persist.set_meta_if_absent("k", "second") == "first"
        assert persist.get_meta("k") == "first"
        persist.set_meta("k", "overwritten")
        assert persist.set_meta_if_absent("k", "third") == "overwritten"
        persist.set_meta("k", None)
        assert persist.set_meta_if_absent("k", "fourth") == "fourth"

    def test_meta_empty_and_unicode_values(self, persist: Persist) -> None:
        """An empty string is a value (not absent); keys and values may be any text."""
        persist.set_meta("empty", "")
        assert persist.get_meta("empty") == ""
        assert persist.set_meta_if_absent("empty", "x") == ""
        persist.set_meta("ключ 🔑", "värde — 値 😀\n\ttabs")
        assert persist.get_meta("ключ 🔑") == "värde — 値 😀\n\ttabs"

    def test_meta_keys_are_independent(self, persist: Persist) -> None:
        """Settings do not interfere with each other or with references."""
        persist.set_meta("a", "1")
        persist.set_meta("b", "2")
        persist.set_meta("main", "3")
        persist.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        persist.set_meta("a", None)
        assert (persist.get_meta("a"), persist.get_meta("b")) == (None, "2")
        assert persist.get_meta("main") == "3"
        assert persist.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("0"))

    def test_concurrent_set_meta_if_absent_has_one_value(self, persist: Persist) -> None:
        """Racing set_meta_if_absent calls all answer the single value stored."""
        answers: list[str] = []
        lock = threading.Lock()

        def race(i: int) -> None:
            got = persist.set_meta_if_absent("created", f"value {i}")
            with lock:
                answers.append(got)

        run_threads([partial(race, i) for i in range(8)])
        stored = persist.get_meta("created")
        assert stored is not None
        assert answers == [stored] * 8


class DurablePersistContract:
    """Behaviour of backends whose data outlives a handle; needs ``persist_factory``."""

    def test_reopen_keeps_everything(self, persist_factory: PersistFactory) -> None:
        """Objects, references (with types) and settings survive closing and reopening."""
        first = persist_factory()
        objs = make_objects("durable", 700)
        first.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        first.update_ref("main", commit_hash("0"), commit_hash("1"), objs)
        first.create_ref(RefRecord("v1", "TAG", commit_hash("t")))
        first.create_ref(RefRecord("gone", "BRANCH", commit_hash("g")))
        first.delete_ref("gone", commit_hash("g"))
        first.set_meta("created", "now")
        first.set_meta("removed", "x")
        first.set_meta("removed", None)
        first.close()

        second = persist_factory()
        assert second.get_objects(list(objs)) == objs
        assert second.list_refs() == [
            RefRecord("main", "BRANCH", commit_hash("1")),
            RefRecord("v1", "TAG", commit_hash("t")),
        ]
        assert second.get_ref("gone") is None
        assert second.ref_log("main", 5) == [commit_hash("1"), commit_hash("0")]
        assert second.get_meta("created") == "now"
        assert second.get_meta("removed") is None
        # and it is writable, with CAS against the persisted state
        with pytest.raises(RefConditionFailed):
            second.update_ref("main", commit_hash("0"), commit_hash("2"))
        second.update_ref("main", commit_hash("1"), commit_hash("2"))
        second.close()

        third = persist_factory()
        assert third.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("2"))

    def test_handles_see_each_others_writes(self, persist_factory: PersistFactory) -> None:
        """What one handle writes, another handle reads at once."""
        a, b = persist_factory(), persist_factory()
        objs = make_objects("shared", 3)
        a.put_objects(objs)
        assert b.get_objects(list(objs)) == objs
        b.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        assert a.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("0"))
        more = make_objects("shared-more", 2)
        a.update_ref("main", commit_hash("0"), commit_hash("1"), more)
        assert b.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("1"))
        assert b.get_objects(list(more)) == more
        b.set_meta("k", "v")
        assert a.get_meta("k") == "v"
        a.delete_ref("main", commit_hash("1"))
        assert b.get_ref("main") is None
        assert b.list_refs() == []

    def test_cas_across_handles(self, persist_factory: PersistFactory) -> None:
        """A handle that read a reference before another moved it loses its CAS."""
        a, b = persist_factory(), persist_factory()
        a.create_ref(RefRecord("main", "BRANCH", commit_hash("0")))
        seen_by_b = b.get_ref("main")
        assert seen_by_b is not None
        a.update_ref("main", commit_hash("0"), commit_hash("a"))
        lost = make_objects("b-lost", 3)
        with pytest.raises(RefConditionFailed) as info:
            b.update_ref("main", seen_by_b.hash, commit_hash("b"), lost)
        assert (info.value.expected, info.value.actual) == (commit_hash("0"), commit_hash("a"))
        assert_absent(a, lost)
        assert_absent(b, lost)
        with pytest.raises(RefConditionFailed):
            b.delete_ref("main", seen_by_b.hash)
        assert a.get_ref("main") == RefRecord("main", "BRANCH", commit_hash("a"))
        with pytest.raises(RefAlreadyExists):
            b.create_ref(RefRecord("main", "TAG", commit_hash("b")))
        b.delete_ref("main", commit_hash("a"))
        with pytest.raises(RefMissing):
            a.update_ref("main", commit_hash("a"), commit_hash("c"))

    def test_meta_if_absent_across_handles(self, persist_factory: PersistFactory) -> None:
        """The first handle to set a setting wins; the other answers its value."""
        a, b = persist_factory(), persist_factory()
        assert a.set_meta_if_absent("created", "by a") == "by a"
        assert b.set_meta_if_absent("created", "by b") == "by a"

    def test_concurrent_cas_across_handles(self, persist_factory: PersistFactory) -> None:
        """Threads on two handles incrementing by CAS-and-retry lose no increment."""
        a, b = persist_factory(), persist_factory()
        a.create_ref(RefRecord("counter", "BRANCH", counter_hash(0)))
        times = 20
        run_threads([partial(increment, h, "counter", times) for h in (a, b, a, b)])
        expected = RefRecord("counter", "BRANCH", counter_hash(4 * times))
        assert a.get_ref("counter") == expected
        assert b.get_ref("counter") == expected
