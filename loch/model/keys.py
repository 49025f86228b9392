"""Content keys: validation, ordering and Nessie's path-string encodings.

A key is a tuple of string elements. Python's tuple ordering (element-wise, then by
length) is Nessie's key order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from loch.errors import BadRequestError

__all__ = [
    "MAX_ELEMENTS",
    "MAX_KEY_LENGTH",
    "Key",
    "decode_path_key",
    "encode_canonical",
    "encode_escaped",
    "encode_legacy",
    "key_from_json",
    "key_str",
    "validate_key",
]

Key = tuple[str, ...]

MAX_ELEMENTS = 20
MAX_KEY_LENGTH = 500

_GROUP_SEP = "\u001d"
_ESCAPES = {".": "*.", "*": "**", "/": "*{", "\\": "*}", "%": "*["}
_UNESCAPES = {v[1]: k for k, v in _ESCAPES.items()}


def validate_key(elements: Sequence[str]) -> Key:
    """Check a key against Nessie's limits and return it as a tuple.

    Raises:
        BadRequestError: empty, too many elements, too long, empty elements or
            control characters.
    """
    if not isinstance(elements, (list, tuple)) or not elements:
        raise BadRequestError("Content key must have at least one element")
    if len(elements) > MAX_ELEMENTS:
        raise BadRequestError(f"Key too long, max allowed number of elements: {MAX_ELEMENTS}")
    total = 0
    for e in elements:
        if not isinstance(e, str):
            raise BadRequestError("Content key elements must be strings")
        if not e:
            raise BadRequestError("An object key must not contain an empty name (element)")
        for ch in e:
            if ord(ch) < 0x20 or ord(ch) == 0x7F:
                raise BadRequestError(
                    f"An object key must not contain control characters (element {e!r})"
                )
        total += len(e)
    if total > MAX_KEY_LENGTH:  # Nessie counts the elements' characters
        raise BadRequestError(f"Key too long, max allowed length: {MAX_KEY_LENGTH}")
    return tuple(elements)


def key_from_json(obj: Any) -> Key:
    """A key from its wire form ``{"elements": [...]}``."""
    if not isinstance(obj, dict) or "elements" not in obj:
        raise BadRequestError("Content key must be an object with 'elements'")
    return validate_key(obj["elements"])


def key_str(key: Iterable[str]) -> str:
    """Display form used in messages: elements joined by '.'."""
    return ".".join(key)


def encode_legacy(key: Iterable[str]) -> str:
    """Legacy path form: '.'-joined, inner dots as U+001D (also used by CEL filters)."""
    return ".".join(e.replace(".", _GROUP_SEP) for e in key)


def encode_escaped(key: Iterable[str]) -> str:
    """Escaped path form of spec 2.2.0 (only needed when an element has . / \\ or %)."""
    elements = list(key)
    if not any(c in e for e in elements for c in "./\\%"):
        return ".".join(elements)
    return "." + ".".join("".join(_ESCAPES.get(c, c) for c in e) for e in elements)


def encode_canonical(key: Iterable[str]) -> str:
    """Canonical display form: like the escaped form, escaping only '.' and '*'."""
    elements = list(key)
    if not any(c in e for e in elements for c in ".*"):
        return ".".join(elements)
    parts = [e.replace("*", "**").replace(".", "*.") for e in elements]
    return "." + ".".join(parts)


def decode_path_key(text: str) -> Key:
    """Parse a key from any of Nessie's path-string forms.

    Raises:
        BadRequestError: malformed escapes or an invalid key.
    """
    if not text:
        raise BadRequestError("Content key must not be empty")
    if text.startswith("."):
        elements: list[str] = []
        cur: list[str] = []
        i = 1
        while i < len(text):
            c = text[i]
            if c == "*":
                if i + 1 >= len(text) or text[i + 1] not in _UNESCAPES:
                    raise BadRequestError(f"Illegal escape sequence in content key '{text}'")
                cur.append(_UNESCAPES[text[i + 1]])
                i += 2
                continue
            if c == ".":
                elements.append("".join(cur))
                cur = []
            else:
                cur.append(c)
            i += 1
        elements.append("".join(cur))
        return validate_key(elements)
    parts = text.split(".")
    return validate_key([p.replace(_GROUP_SEP, ".").replace("\u0000", ".") for p in parts])
