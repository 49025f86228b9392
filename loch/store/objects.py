"""Canonical encoding and hashing of immutable objects."""

from __future__ import annotations

import hashlib
import json
from typing import Any

__all__ = ["NO_ANCESTOR", "canonical_bytes", "decode", "object_id"]

NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
"""Nessie's "no ancestor" hash: SHA-256 of ``b"empty"``, the root of every history."""

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), sort_keys=True, allow_nan=False
)


def canonical_bytes(obj: Any) -> bytes:
    """Deterministic bytes of a JSON-able object: sorted keys, no whitespace, UTF-8."""
    return _ENCODER.encode(obj).encode("utf-8")


def object_id(data: bytes) -> str:
    """The id of an object: SHA-256 of its canonical bytes, 64 lowercase hex."""
    return hashlib.sha256(data).hexdigest()


def decode(data: bytes) -> Any:
    """Parse canonical bytes back into JSON values."""
    return json.loads(data)
