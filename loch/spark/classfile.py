"""Just enough of the JVM class-file format to relocate and cross-check classes.

A class file starts with ``magic, minor, major, constant_pool_count`` followed by the
constant pool. Everything after the pool refers to constants by index, so a pool whose
``CONSTANT_Utf8`` entries change length can be re-emitted and the rest of the file
copied unchanged (JVMS §4.1, §4.4). Long and Double constants take two slots.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

__all__ = [
    "ClassFormatError",
    "ClassInfo",
    "ConstantPool",
    "MemberRef",
    "parse_class",
    "parse_constant_pool",
    "rewrite_utf8",
]

MAGIC = 0xCAFEBABE

UTF8 = 1
CLASS = 7
FIELDREF = 9
METHODREF = 10
INTERFACE_METHODREF = 11
NAME_AND_TYPE = 12

# Payload sizes of the fixed-size constant kinds (Utf8 is variable).
_FIXED_SIZES = {
    3: 4,  # Integer
    4: 4,  # Float
    5: 8,  # Long (two slots)
    6: 8,  # Double (two slots)
    7: 2,  # Class
    8: 2,  # String
    9: 4,  # Fieldref
    10: 4,  # Methodref
    11: 4,  # InterfaceMethodref
    12: 4,  # NameAndType
    15: 3,  # MethodHandle
    16: 2,  # MethodType
    17: 4,  # Dynamic
    18: 4,  # InvokeDynamic
    19: 2,  # Module
    20: 2,  # Package
}
_WIDE = (5, 6)


class ClassFormatError(ValueError):
    """The bytes are not a class file this module can read."""


@dataclass(frozen=True)
class ConstantPool:
    """A parsed constant pool.

    Attributes:
        tags: Tag of each slot (index 0 and the second slot of Long/Double are 0).
        utf8: Decoded ``CONSTANT_Utf8`` values by index.
        refs: Index payloads of Class (one index), NameAndType and the member refs
            (two indexes), by index.
        end: Offset of the first byte after the pool.
    """

    tags: tuple[int, ...]
    utf8: dict[int, str]
    refs: dict[int, tuple[int, ...]]
    end: int

    def class_name(self, index: int) -> str:
        """The internal name a ``CONSTANT_Class`` entry points to."""
        return self.utf8[self.refs[index][0]]

    def class_names(self) -> list[str]:
        """Every ``CONSTANT_Class`` name (array descriptors included)."""
        return [self.class_name(i) for i, t in enumerate(self.tags) if t == CLASS]

    def member_refs(self) -> list[MemberRef]:
        """Every field, method and interface-method reference."""
        out = []
        for i, tag in enumerate(self.tags):
            if tag in (FIELDREF, METHODREF, INTERFACE_METHODREF):
                class_index, nat_index = self.refs[i]
                name_index, desc_index = self.refs[nat_index]
                out.append(
                    MemberRef(
                        kind=tag,
                        owner=self.class_name(class_index),
                        name=self.utf8[name_index],
                        descriptor=self.utf8[desc_index],
                    )
                )
        return out


@dataclass(frozen=True)
class MemberRef:
    """A symbolic reference to a field or method of another class."""

    kind: int
    owner: str
    name: str
    descriptor: str

    @property
    def is_field(self) -> bool:
        """True for a ``Fieldref``."""
        return self.kind == FIELDREF


@dataclass(frozen=True)
class ClassInfo:
    """The parts of a class that symbolic resolution needs."""

    name: str
    super_name: str | None
    interfaces: tuple[str, ...]
    fields: frozenset[tuple[str, str]]
    methods: frozenset[tuple[str, str]]


def _decode(raw: bytes) -> str:
    # Modified UTF-8 differs from UTF-8 only for NUL and supplementary characters;
    # surrogateescape keeps any such bytes distinct instead of failing.
    return raw.decode("utf-8", errors="surrogateescape")


def _walk_pool(data: bytes, on_utf8: Callable[[int, bytes], None] | None = None) -> ConstantPool:
    if len(data) < 10 or struct.unpack_from(">I", data, 0)[0] != MAGIC:
        raise ClassFormatError("not a class file (bad magic)")
    (count,) = struct.unpack_from(">H", data, 8)
    tags = [0] * count
    utf8: dict[int, str] = {}
    refs: dict[int, tuple[int, ...]] = {}
    pos = 10
    index = 1
    try:
        while index < count:
            tag = data[pos]
            tags[index] = tag
            if tag == UTF8:
                (length,) = struct.unpack_from(">H", data, pos + 1)
                raw = data[pos + 3 : pos + 3 + length]
                if len(raw) != length:
                    raise ClassFormatError("truncated Utf8 constant")
                utf8[index] = _decode(raw)
                if on_utf8 is not None:
                    on_utf8(index, raw)
                pos += 3 + length
                index += 1
                continue
            size = _FIXED_SIZES.get(tag)
            if size is None:
                raise ClassFormatError(f"unknown constant tag {tag} at index {index}")
            if tag == CLASS:
                refs[index] = struct.unpack_from(">H", data, pos + 1)
            elif tag in (FIELDREF, METHODREF, INTERFACE_METHODREF, NAME_AND_TYPE):
                refs[index] = struct.unpack_from(">HH", data, pos + 1)
            pos += 1 + size
            index += 2 if tag in _WIDE else 1
    except (IndexError, struct.error) as e:
        raise ClassFormatError(f"truncated constant pool: {e}") from e
    return ConstantPool(tuple(tags), utf8, refs, pos)


def parse_constant_pool(data: bytes) -> ConstantPool:
    """Parse the constant pool of a class file.

    Args:
        data: The whole class file.

    Returns:
        The pool, with decoded Utf8 values and index payloads.

    Raises:
        ClassFormatError: If the bytes are not a readable class file.
    """
    return _walk_pool(data)


def rewrite_utf8(data: bytes, transform: Callable[[bytes], bytes]) -> bytes:
    """Return the class file with every ``CONSTANT_Utf8`` value passed through ``transform``.

    ``transform`` gets and returns the raw (modified UTF-8) bytes of one entry. Only the
    pool is re-emitted; the bytes after it are copied unchanged, which is valid because
    the rest of the file refers to constants by index only.

    Raises:
        ClassFormatError: If the input is unreadable or a new value exceeds 65535 bytes.
    """
    spans: list[tuple[int, bytes]] = []

    def collect(index: int, raw: bytes) -> None:
        spans.append((index, raw))

    pool = _walk_pool(data, collect)
    out = bytearray(data[:10])
    pos = 10
    index = 1
    replaced = {i: transform(raw) for i, raw in spans}
    count = len(pool.tags)
    while index < count:
        tag = data[pos]
        if tag == UTF8:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            new = replaced[index]
            if len(new) > 0xFFFF:
                raise ClassFormatError(f"Utf8 constant {index} too long after rewriting")
            out.append(UTF8)
            out += struct.pack(">H", len(new))
            out += new
            pos += 3 + length
            index += 1
        else:
            size = _FIXED_SIZES[tag]
            out += data[pos : pos + 1 + size]
            pos += 1 + size
            index += 2 if tag in _WIDE else 1
    out += data[pool.end :]
    return bytes(out)


def _skip_members(data: bytes, pos: int, pool: ConstantPool) -> tuple[int, set[tuple[str, str]]]:
    (count,) = struct.unpack_from(">H", data, pos)
    pos += 2
    members: set[tuple[str, str]] = set()
    for _ in range(count):
        _flags, name_index, desc_index, attr_count = struct.unpack_from(">HHHH", data, pos)
        pos += 8
        members.add((pool.utf8[name_index], pool.utf8[desc_index]))
        for _ in range(attr_count):
            (length,) = struct.unpack_from(">I", data, pos + 2)
            pos += 6 + length
    return pos, members


def parse_class(data: bytes) -> tuple[ClassInfo, ConstantPool]:
    """Parse a class's name, supertypes and declared members.

    Returns:
        The class summary and its constant pool.

    Raises:
        ClassFormatError: If the bytes are not a readable class file.
    """
    pool = _walk_pool(data)
    try:
        pos = pool.end
        _flags, this_index, super_index, n_interfaces = struct.unpack_from(">HHHH", data, pos)
        pos += 8
        interfaces = tuple(
            pool.class_name(struct.unpack_from(">H", data, pos + 2 * i)[0])
            for i in range(n_interfaces)
        )
        pos += 2 * n_interfaces
        pos, fields = _skip_members(data, pos, pool)
        pos, methods = _skip_members(data, pos, pool)
    except (IndexError, KeyError, struct.error) as e:
        raise ClassFormatError(f"unreadable class structure: {e}") from e
    info = ClassInfo(
        name=pool.class_name(this_index),
        super_name=pool.class_name(super_index) if super_index else None,
        interfaces=interfaces,
        fields=frozenset(fields),
        methods=frozenset(methods),
    )
    return info, pool
