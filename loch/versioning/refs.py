"""Reference names and Nessie's reference syntax ``[name][@[hash]]{relative}*``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from loch.errors import BadRequestError

__all__ = [
    "HASH_RE",
    "RefSpec",
    "Relative",
    "parse_ref_spec",
    "parse_timestamp_us",
    "validate_hash",
    "validate_ref_name",
]

HASH_RE = re.compile(r"^[0-9a-fA-F]{8,64}$")
REF_NAME_RE = re.compile(r"^(?:[A-Za-z](?:(?:(?![.][.])[A-Za-z0-9./_-])*[A-Za-z0-9_-])?)$")
_RELATIVE_RE = re.compile(r"([~*^])(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z|[0-9]+)")
_RESERVED = {"HEAD", "DETACHED"}


def validate_ref_name(name: str, for_create: bool = False) -> str:
    """Check a reference name against Nessie's pattern.

    With ``for_create``, also reject ``HEAD``, ``DETACHED`` and hash-like names.

    Raises:
        BadRequestError: the name is invalid.
    """
    if not isinstance(name, str) or not REF_NAME_RE.match(name):
        raise BadRequestError(
            f"Reference name '{name}' must start with a letter, followed by letters, "
            "digits, one of the ./_- characters, not end with a slash or dot, "
            "not contain '..'"
        )
    if for_create:
        if name.upper() in _RESERVED:
            raise BadRequestError(f"Reference name '{name}' is reserved")
        if HASH_RE.match(name):
            raise BadRequestError(f"Reference name '{name}' must not look like a commit hash")
    return name


def validate_hash(value: str, what: str = "hash") -> str:
    """Check a commit hash (8-64 hex digits) and return it in lowercase."""
    if not isinstance(value, str) or not HASH_RE.match(value):
        raise BadRequestError(f"Invalid {what} '{value}': must be 8 to 64 hex digits")
    return value.lower()


def parse_timestamp_us(text: str) -> int:
    """An ISO-8601 instant (``...Z``) or epoch milliseconds, as epoch microseconds."""
    if text.isdigit():
        return int(text) * 1000
    frac = ""
    base = text[:-1] if text.endswith("Z") else text
    if "." in base:
        base, frac = base.split(".", 1)
    try:
        dt = datetime.fromisoformat(base + "+00:00")
    except ValueError:
        raise BadRequestError(f"Invalid timestamp '{text}'") from None
    micros = int((frac + "000000")[:6]) if frac else 0
    return int(dt.timestamp()) * 1_000_000 + micros


@dataclass(frozen=True, slots=True)
class Relative:
    """One relative step: ``~N`` ancestor, ``^N`` parent, or ``*T`` time travel."""

    kind: str
    value: str


@dataclass(frozen=True, slots=True)
class RefSpec:
    """A parsed reference expression."""

    name: str | None
    hash: str | None
    relative: tuple[Relative, ...] = ()

    @property
    def is_detached(self) -> bool:
        return self.name is None


def parse_ref_spec(text: str, default_branch: str) -> RefSpec:
    """Parse ``name``, ``name@hash``, ``@hash``, ``-``, with ``~N``, ``^N``, ``*T`` steps.

    ``-`` names the default branch.

    Raises:
        BadRequestError: empty or malformed.
    """
    if not text:
        raise BadRequestError("Reference must not be empty")
    m = re.search(r"[~^*]", text)
    head, rel_text = (text[: m.start()], text[m.start() :]) if m else (text, "")
    relative: list[Relative] = []
    pos = 0
    while pos < len(rel_text):
        rm = _RELATIVE_RE.match(rel_text, pos)
        if rm is None:
            raise BadRequestError(f"Invalid relative reference part in '{text}'")
        relative.append(Relative(rm.group(1), rm.group(2)))
        pos = rm.end()
    name: str | None
    hash_: str | None = None
    if "@" in head:
        name_part, hash_part = head.split("@", 1)
        name = name_part or None
        if hash_part:
            hash_ = validate_hash(hash_part)
    else:
        name = head or None
        if name is not None and HASH_RE.match(name) and not REF_NAME_RE.match(name):
            hash_, name = name.lower(), None
    if name == "-":
        name = default_branch
    elif name is not None:
        validate_ref_name(name)
    if name is None and hash_ is None:
        raise BadRequestError(f"Reference '{text}' has neither a name nor a hash")
    return RefSpec(name, hash_, tuple(relative))
