"""Relocate Java packages in jars, the way a shading plugin does, with the stdlib only.

A :class:`Relocation` renames a package prefix in three places: ``CONSTANT_Utf8``
entries of class files (slash and dot forms), entry paths, and ``META-INF/services``
file names and contents. :func:`build_relocated_jar` merges several relocated jars
into one, dropping what would be wrong after relocation (``module-info.class``,
multi-release variants, signatures, the old manifests and Maven metadata).
"""

from __future__ import annotations

import hashlib
import os
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from loch.spark.classfile import ClassFormatError, rewrite_utf8
from loch.spark.errors import SparkSetupError

__all__ = ["JACKSON_RELOCATION", "Relocation", "build_relocated_jar", "manifest"]

# A fixed timestamp makes builds byte-for-byte reproducible.
_ZIP_TIME = (2000, 1, 1, 0, 0, 0)
_SERVICES = "META-INF/services/"
_LEGAL = re.compile(r"(^|[-_])(LICENSE|NOTICE)([-_.].*)?$", re.IGNORECASE)
_SIGNATURE = re.compile(r"^META-INF/[^/]+\.(SF|RSA|DSA|EC)$", re.IGNORECASE)


@dataclass(frozen=True)
class Relocation:
    """Rename the package prefix ``source`` to ``target`` (both dotted, no trailing dot).

    Only whole package prefixes are renamed (the prefix must be followed by a
    separator), and a name that already carries ``target`` is left alone.
    """

    source: str
    target: str

    def __post_init__(self) -> None:
        if not self.source or not self.target or self.source == self.target:
            raise ValueError("a relocation needs two different, non-empty prefixes")

    def _pattern(self, sep: str) -> re.Pattern[bytes]:
        src = self.source.replace(".", sep) + sep
        tgt_head = self.target[: -len(self.source)] if self.target.endswith(self.source) else ""
        guard = re.escape(tgt_head.replace(".", sep).encode()) if tgt_head else b""
        lookbehind = b"(?<!" + guard + b")" if guard else b""
        return re.compile(lookbehind + re.escape(src.encode()))

    def rewrite(self, value: bytes) -> bytes:
        """Rewrite both the slash form (``a/b/``) and the dot form (``a.b.``) in ``value``."""
        for sep in ("/", "."):
            if self.source.replace(".", sep).encode() in value:
                replacement = (self.target.replace(".", sep) + sep).encode()
                value = self._pattern(sep).sub(replacement.replace(b"\\", b"\\\\"), value)
        return value

    def rewrite_text(self, value: str) -> str:
        """:meth:`rewrite` for text (entry names, service files)."""
        return self.rewrite(value.encode("utf-8")).decode("utf-8")

    def rewrite_class(self, data: bytes) -> bytes:
        """Rewrite every ``CONSTANT_Utf8`` entry of a class file."""
        return rewrite_utf8(data, self.rewrite)


JACKSON_RELOCATION = Relocation(
    "com.fasterxml.jackson", "org.apache.iceberg.shaded.com.fasterxml.jackson"
)
"""How Iceberg's Spark runtime shades Jackson."""


def manifest(attributes: Iterable[tuple[str, str]]) -> bytes:
    """A ``META-INF/MANIFEST.MF`` with lines wrapped at 72 bytes as the JAR spec requires."""
    lines = []
    for key, value in [("Manifest-Version", "1.0"), *attributes]:
        line = f"{key}: {value}".encode()
        first, rest = line[:72], line[72:]
        lines.append(first)
        while rest:
            lines.append(b" " + rest[:71])
            rest = rest[71:]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _artifact(jar: Path) -> str:
    return re.sub(r"\.jar$", "", jar.name)


def _target_name(name: str, artifact: str, relocation: Relocation) -> str | None:
    """Where an entry goes in the merged jar, or None to drop it."""
    path = PurePosixPath(name)
    upper = name.upper()
    if name.endswith("/") or path.name == "module-info.class":
        return None
    if upper.startswith("META-INF/"):
        if (
            upper.startswith("META-INF/VERSIONS/")
            or upper.startswith("META-INF/MAVEN/")
            or upper == "META-INF/MANIFEST.MF"
            or upper == "META-INF/INDEX.LIST"
            or _SIGNATURE.match(name)
        ):
            return None
        if name.startswith(_SERVICES):
            return _SERVICES + relocation.rewrite_text(name[len(_SERVICES) :] + ".")[:-1]
        if _LEGAL.search(path.name):
            return f"META-INF/licenses/{artifact}/{path.name}"
        return f"META-INF/{artifact}/{name[len('META-INF/') :]}"
    return relocation.rewrite_text(name)


def _transform(name: str, data: bytes, relocation: Relocation) -> bytes:
    if name.endswith(".class"):
        return relocation.rewrite_class(data)
    if name.startswith(_SERVICES):
        return relocation.rewrite(data)
    return data


def build_relocated_jar(
    sources: Sequence[Path],
    dest: Path,
    relocation: Relocation = JACKSON_RELOCATION,
    *,
    attributes: Iterable[tuple[str, str]] = (),
) -> int:
    """Merge ``sources`` into one relocated jar at ``dest``, written atomically.

    The jar is written to a temporary file in ``dest``'s directory and moved into place
    with :func:`os.replace`, so a concurrent reader sees either no file, an older
    complete file, or this complete file. Output is reproducible: entries keep the
    order of ``sources`` and carry a fixed timestamp.

    Args:
        sources: The jars to relocate, in order.
        dest: Where to write the result.
        relocation: The package rename to apply.
        attributes: Extra manifest attributes.

    Returns:
        The number of entries written (manifest included).

    Raises:
        SparkSetupError: If a source is unreadable or two sources collide on an entry.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd_path = dest.parent / f".{dest.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    written: dict[str, bytes] = {}  # entry name -> SHA-256 of its content
    try:
        with zipfile.ZipFile(fd_path, "w", zipfile.ZIP_DEFLATED) as out:
            _write(out, "META-INF/MANIFEST.MF", manifest(attributes))
            for jar in sources:
                _copy_jar(out, jar, relocation, written)
            count = len(written) + 1
        with open(fd_path, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(fd_path, dest)
    except BaseException:
        fd_path.unlink(missing_ok=True)
        raise
    return count


def _copy_jar(
    out: zipfile.ZipFile, jar: Path, relocation: Relocation, written: dict[str, bytes]
) -> None:
    artifact = _artifact(jar)
    try:
        with zipfile.ZipFile(jar) as src:
            for info in src.infolist():
                target = _target_name(info.filename, artifact, relocation)
                if target is None:
                    continue
                data = _transform(info.filename, src.read(info), relocation)
                digest = hashlib.sha256(data).digest()
                if target in written:
                    if written[target] != digest:
                        raise SparkSetupError(
                            f"relocation: '{target}' comes from two jars with different "
                            f"content (second: {jar})"
                        )
                    continue
                written[target] = digest
                _write(out, target, data)
    except (OSError, zipfile.BadZipFile, ClassFormatError) as e:
        raise SparkSetupError(f"relocation: cannot read {jar}: {e}") from e


def _write(out: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    out.writestr(info, data)
