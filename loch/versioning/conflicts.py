"""Conflict rules shared by commit, merge and transplant."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from loch.errors import Conflict, ConflictType
from loch.model.keys import Key, key_str
from loch.versioning.index import LeafValue

__all__ = ["KeyLookup", "key_change_conflict", "namespace_conflicts"]

KeyLookup = Callable[[Key], LeafValue | None]
"""State of a key after the change under check (None = absent)."""


def key_change_conflict(
    key: Key, expected: LeafValue | None, actual: LeafValue | None
) -> Conflict | None:
    """The conflict when a key's state at the target differs from the expected state."""
    if expected == actual:
        return None
    k = key_str(key)
    if expected is None:
        return Conflict(ConflictType.KEY_EXISTS, key, f"key '{k}' already exists")
    if actual is None:
        return Conflict(ConflictType.KEY_DOES_NOT_EXIST, key, f"key '{k}' does not exist")
    if expected[1] != actual[1]:
        return Conflict(
            ConflictType.PAYLOAD_DIFFERS,
            key,
            f"payload of existing and expected content for key '{k}' are different",
        )
    if expected[0] != actual[0]:
        return Conflict(
            ConflictType.CONTENT_ID_DIFFERS,
            key,
            f"content IDs of existing and expected content for key '{k}' are different",
        )
    return Conflict(
        ConflictType.VALUE_DIFFERS,
        key,
        f"values of existing and expected content for key '{k}' are different",
    )


def namespace_conflicts(
    new_keys: Iterable[Key],
    deleted_namespaces: Iterable[Key],
    after: KeyLookup,
    first_child_after: Callable[[Key], Key | None],
) -> list[Conflict]:
    """Namespace rules for the state after a change.

    Every new key with more than one element needs each ancestor to be a NAMESPACE;
    a deleted namespace must have no live key below it.
    """
    out: list[Conflict] = []
    reported: set[Key] = set()
    for key in sorted(set(new_keys)):
        for n in range(len(key) - 1, 0, -1):
            ns = key[:n]
            if ns in reported:
                continue
            state = after(ns)
            if state is None:
                reported.add(ns)
                out.append(
                    Conflict(
                        ConflictType.NAMESPACE_ABSENT, ns, f"namespace '{key_str(ns)}' must exist"
                    )
                )
            elif state[1] != "NAMESPACE":
                reported.add(ns)
                out.append(
                    Conflict(
                        ConflictType.NOT_A_NAMESPACE,
                        ns,
                        f"expecting the key '{key_str(ns)}' to be a namespace, but is not a "
                        f"namespace (using a content object of type {state[1]})",
                    )
                )
    for ns in sorted(set(deleted_namespaces)):
        if first_child_after(ns) is not None:
            out.append(
                Conflict(
                    ConflictType.NAMESPACE_NOT_EMPTY,
                    ns,
                    f"namespace '{key_str(ns)}' is not empty",
                )
            )
    return out


def apply_overlay(base: KeyLookup, overlay: Mapping[Key, LeafValue | None]) -> KeyLookup:
    """A lookup of ``base`` with pending edits on top."""

    def lookup(key: Key) -> LeafValue | None:
        if key in overlay:
            return overlay[key]
        return base(key)

    return lookup
