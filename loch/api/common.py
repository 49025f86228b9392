"""Helpers shared by the API v1 and v2 handlers."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import orjson
from fastapi import Request

from loch.errors import BadRequestError, ContentNotFoundError
from loch.model.keys import Key, decode_path_key, key_from_json, key_str
from loch.versioning import Value, VersionStore
from loch.versioning.refs import RefSpec, validate_hash

__all__ = [
    "JSON_OBJECT_BODY",
    "commit_meta_from_headers",
    "decode_param",
    "etag_hash",
    "json_object",
    "path_key",
    "query_keys",
    "store",
]


EXTENSION_TYPES = frozenset({"HIVE_TABLE", "HIVE_DATABASE"})
"""Content types Nessie's clients do not know: Iceberg's Java client fails to parse a
listing that holds one, and pynessie rejects their content. They are answered only to
requests that ask for them with ``Loch-Content-Types: HIVE_TABLE,HIVE_DATABASE`` (or ``*``).
"""


def hidden_types(request: Request) -> frozenset[str]:
    """The content types left out of this request's answers."""
    raw = request.headers.get("loch-content-types")
    if raw is None:
        return EXTENSION_TYPES
    wanted = {t.strip().upper() for t in raw.split(",")}
    if "*" in wanted:
        return frozenset()
    return EXTENSION_TYPES - wanted


def visible_diffs(
    items: list[tuple[Key, Any, Any]], hidden: frozenset[str]
) -> list[tuple[Key, Any, Any]]:
    """Diff entries whose content on either side is not of a hidden type."""
    return [
        (k, x, y)
        for k, x, y in items
        if (x is None or x[1] not in hidden) and (y is None or y[1] not in hidden)
    ]


def visible_content(
    vs: VersionStore, commit_hash: str, key: Key, label: str, hidden: frozenset[str]
) -> Value:
    """The content under ``key``; content of a hidden type answers 404 like a missing key."""
    value = vs.get_content(commit_hash, key, label)
    if value.content["type"] in hidden:
        raise ContentNotFoundError(
            f"Could not find content for key '{key_str(key)}' in reference '{label}'.", key
        )
    return value


def store(request: Request) -> VersionStore:
    """The repository of this app."""
    vs: VersionStore = request.app.state.version_store
    return vs


def decode_param(value: str) -> str:
    """Decode a path parameter (the router leaves them percent-encoded)."""
    try:
        return unquote(value, encoding="utf-8", errors="strict")
    except UnicodeDecodeError:
        raise BadRequestError(f"Path parameter '{value}' is not valid UTF-8") from None


def path_key(value: str) -> Key:
    """A content key from a path segment (legacy or escaped form)."""
    return decode_path_key(decode_param(value))


def query_key(value: str | None) -> Key | None:
    """A content key from a query parameter, or None."""
    return None if value is None or value == "" else decode_path_key(value)


def query_keys(values: list[str] | None) -> tuple[Key, ...]:
    """Repeated ``key`` query parameters."""
    return tuple(decode_path_key(v) for v in values or [])


def body_keys(body: Any) -> list[Key]:
    """``requestedKeys`` of a GetMultipleContentsRequest."""
    if not isinstance(body, dict):
        raise BadRequestError("Request body must be a JSON object")
    keys = body.get("requestedKeys")
    if keys is None:
        return []
    if not isinstance(keys, list):
        raise BadRequestError("requestedKeys must be a list of content keys")
    return [key_from_json(k) for k in keys]


JSON_OBJECT_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": {"type": "object", "additionalProperties": True}}
        },
    }
}
"""``openapi_extra`` of a route that reads its JSON object body with :func:`json_object`."""


async def json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object, parsed by orjson (hot write paths: FastAPI's
    body handling parses with the stdlib and validates the dict again)."""
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        raise BadRequestError(f"Bad request: the body is not valid JSON ({e})") from None
    if not isinstance(body, dict):
        raise BadRequestError("Bad request: the body must be a JSON object")
    return body


def etag_hash(request: Request) -> str | None:
    """The expected hash given as ``If-Match: "<hash>"`` (seed: client-to-server locking)."""
    raw = request.headers.get("if-match")
    if raw is None:
        return None
    value = raw.strip()
    if value.startswith("W/"):
        value = value[2:]
    value = value.strip('"')
    if not value or value == "*":
        return None
    return validate_hash(value, "If-Match hash")


def write_target(request: Request, spec: RefSpec, what: str) -> tuple[str, str | None]:
    """Branch name and expected hash of a write: from ``name@hash``, else ``If-Match``."""
    if spec.name is None:
        raise BadRequestError(f"{what} reference must be a named branch, not a detached hash.")
    expected = spec.hash
    if expected is None:
        expected = etag_hash(request)
    if expected is not None and spec.relative:
        vs = store(request)
        expected = vs.resolve(RefSpec(spec.name, expected, spec.relative)).hash
    return spec.name, expected


def commit_meta_from_headers(request: Request, meta: dict[str, Any] | None) -> dict[str, Any]:
    """Merge the ``Nessie-Commit-*`` headers into a commit meta."""
    if meta is not None and not isinstance(meta, dict):
        raise BadRequestError("commitMeta must be a JSON object")
    out = dict(meta or {})
    if not any(name.startswith(b"nessie-commit-") for name, _ in request.scope["headers"]):
        return out
    h = request.headers
    if h.get("nessie-commit-message"):
        out["message"] = h["nessie-commit-message"]
    authors = h.getlist("nessie-commit-authors")
    if authors:
        out["authors"] = [a.strip() for v in authors for a in v.split(",") if a.strip()]
        out.pop("author", None)
    signed = h.getlist("nessie-commit-signedoffby")
    if signed:
        out["allSignedOffBy"] = [a.strip() for v in signed for a in v.split(",") if a.strip()]
        out.pop("signedOffBy", None)
    props: dict[str, list[str]] = {}
    for name, value in h.items():
        if name.lower().startswith("nessie-commit-property-"):
            props.setdefault(name[len("nessie-commit-property-") :], []).append(value)
    if props:
        merged = dict(out.get("allProperties") or {})
        if not merged and out.get("properties"):
            merged = {k: [v] for k, v in out["properties"].items()}
        merged.update(props)
        out["allProperties"] = merged
    return out


def etag(hash_: str) -> dict[str, str]:
    """An ``ETag`` header carrying a commit hash."""
    return {"ETag": f'"{hash_}"'}
