"""Commit operations and commit metadata, parsed from their wire form."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from loch.errors import BadRequestError
from loch.model.keys import Key, key_from_json, key_str
from loch.store.objects import check_encodable

__all__ = [
    "Delete",
    "Operation",
    "Put",
    "Unchanged",
    "check_unique_keys",
    "format_time",
    "normalize_meta",
    "parse_operation",
    "parse_operations",
]


@dataclass(frozen=True, slots=True)
class Put:
    """Store ``content`` under ``key`` (``content["id"]`` None for new content)."""

    key: Key
    content: dict[str, Any]
    documentation: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove the content under ``key``."""

    key: Key


@dataclass(frozen=True, slots=True)
class Unchanged:
    """Check ``key`` for conflicts without changing it."""

    key: Key


Operation = Put | Delete | Unchanged


def parse_operation(obj: Any) -> Operation:
    """An operation from its wire JSON. Its content is checked by the version store when
    it commits (:func:`~loch.model.content.parse_content`), for every caller alike.

    Raises:
        BadRequestError: unknown type, missing key or content, invalid documentation.
    """
    if not isinstance(obj, dict):
        raise BadRequestError("Operation must be a JSON object")
    kind = obj.get("type")
    key = key_from_json(obj.get("key"))
    if kind == "PUT":
        content = obj.get("content")
        if content is None:
            raise BadRequestError(f"PUT operation for key '{key_str(key)}' has no content")
        doc = obj.get("documentation")
        if doc is not None and not isinstance(doc, dict):
            raise BadRequestError("Documentation must be an object")
        if doc is not None:
            try:
                check_encodable(doc)
            except ValueError as e:
                raise BadRequestError(f"Invalid documentation: {e}") from None
        return Put(key, content, doc)
    if kind == "DELETE":
        return Delete(key)
    if kind == "UNCHANGED":
        return Unchanged(key)
    raise BadRequestError(f"Unknown operation type '{kind}'")


def parse_operations(objs: Any) -> list[Operation]:
    """Operations of a commit body (the version store checks them further)."""
    if not isinstance(objs, list) or not objs:
        raise BadRequestError("A commit must have at least one operation")
    return [parse_operation(o) for o in objs]


def check_unique_keys(ops: list[Operation]) -> None:
    """Keys must be unique in a commit, except one DELETE plus one PUT of a key."""
    seen: dict[Key, list[str]] = {}
    for op in ops:
        kinds = seen.setdefault(op.key, [])
        kinds.append(type(op).__name__)
        if len(kinds) > 1 and sorted(kinds) != ["Delete", "Put"]:
            raise BadRequestError(f"Duplicate key in commit operations: '{key_str(op.key)}'")


def format_time(us: int) -> str:
    """Epoch microseconds as an ISO-8601 instant with microseconds and ``Z``."""
    seconds, micros = divmod(us, 1_000_000)
    return f"{_format_second(seconds)}.{micros:06d}Z"


@lru_cache(maxsize=256)
def _format_second(seconds: int) -> str:
    # Every commit formats the current time a few times: strftime once per second.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _parse_instant(value: Any) -> int:
    """An ISO-8601 instant (with ``Z`` or an offset) as epoch microseconds."""
    if not isinstance(value, str):
        raise BadRequestError("Commit meta 'authorTime' must be an ISO-8601 instant")
    try:
        dt = datetime.fromisoformat(value)
    except ValueError:
        raise BadRequestError(
            f"Commit meta 'authorTime' '{value}' is not an ISO-8601 instant"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    delta = dt - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _str_list(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequestError(f"Commit meta field '{field}' must be a list of strings")
    return [v for v in value if v]


def normalize_meta(meta: Any, committer: str, now_us: int) -> dict[str, Any]:
    """Server-side commit metadata from a client's CommitMeta (either API view).

    The client must not set ``committer``, ``commitTime``, ``hash`` or parents; the
    server sets them. ``authors`` defaults to the committer.

    Raises:
        BadRequestError: server-owned fields set, or fields of the wrong type.
    """
    if meta is None:
        meta = {}
    if not isinstance(meta, dict):
        raise BadRequestError("Commit meta must be a JSON object")
    for field in ("committer", "commitTime", "hash"):
        if meta.get(field):
            raise BadRequestError(f"Cannot set the '{field}' of a commit: the server does")
    if meta.get("parentCommitHashes"):
        raise BadRequestError("Cannot set the parent commit hashes of a commit")
    message = meta.get("message") or ""
    if not isinstance(message, str):
        raise BadRequestError("Commit message must be a string")
    authors = _str_list(meta.get("authors"), "authors") or _str_list(meta.get("author"), "author")
    signed = _str_list(meta.get("allSignedOffBy"), "allSignedOffBy") or _str_list(
        meta.get("signedOffBy"), "signedOffBy"
    )
    props: dict[str, list[str]] = {}
    all_props = meta.get("allProperties")
    if all_props:
        if not isinstance(all_props, dict):
            raise BadRequestError("Commit meta 'allProperties' must be an object")
        for k, v in all_props.items():
            props[str(k)] = _str_list(v, f"allProperties.{k}")
    elif meta.get("properties"):
        if not isinstance(meta["properties"], dict):
            raise BadRequestError("Commit meta 'properties' must be an object")
        for k, v in meta["properties"].items():
            if not isinstance(v, str):
                raise BadRequestError(f"Commit property '{k}' must be a string")
            props[str(k)] = [v]
    now = format_time(now_us)
    author_time = meta.get("authorTime")
    if author_time is not None:
        _parse_instant(author_time)  # validated, kept as the author wrote it
    return {
        "committer": committer,
        "authors": authors or [committer],
        "allSignedOffBy": signed,
        "message": message,
        "commitTime": now,
        "authorTime": author_time or now,
        "allProperties": props,
    }
