"""Static check: do a jar's references into a shaded package resolve in other jars?

:func:`check_references` scans the constant pools of every class in a *consumer* jar
(Iceberg's Spark runtime) for class names under a package prefix (the relocated
Jackson), in ``CONSTANT_Class`` entries, descriptors and signatures, and for field and
method references whose owner is under that prefix. Each class must exist in the
*provider* jars; each member must be declared by the class or a supertype, following
the JVM's resolution order. Supertypes outside the provider jars (JDK classes) cannot
be inspected: a member that could only come from one of those is counted as
``external`` rather than missing; ``java/lang/Object``'s own methods are known.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loch.spark.classfile import (
    INTERFACE_METHODREF,
    ClassFormatError,
    ClassInfo,
    MemberRef,
    parse_class,
    parse_constant_pool,
)
from loch.spark.errors import SparkSetupError

__all__ = ["SHADED_JACKSON_PREFIX", "CheckReport", "check_references"]

SHADED_JACKSON_PREFIX = "org/apache/iceberg/shaded/com/fasterxml/jackson/"
"""Where Iceberg's Spark runtime expects Jackson (internal-name form)."""

_OBJECT = "java/lang/Object"
_OBJECT_METHODS = frozenset(
    {
        ("<init>", "()V"),
        ("hashCode", "()I"),
        ("equals", "(Ljava/lang/Object;)Z"),
        ("toString", "()Ljava/lang/String;"),
        ("getClass", "()Ljava/lang/Class;"),
        ("clone", "()Ljava/lang/Object;"),
        ("finalize", "()V"),
        ("notify", "()V"),
        ("notifyAll", "()V"),
        ("wait", "()V"),
        ("wait", "(J)V"),
        ("wait", "(JI)V"),
    }
)


@dataclass(frozen=True)
class CheckReport:
    """The outcome of :func:`check_references`.

    Attributes:
        consumer_classes: Classes of the consumer jar that reference the prefix.
        classes: Distinct referenced classes under the prefix.
        members: Distinct referenced fields and methods owned by those classes.
        external: Members that can only resolve in a supertype outside the providers.
        missing_classes: Referenced classes absent from the providers.
        missing_members: Referenced members found nowhere (``owner.name:descriptor``).
    """

    consumer_classes: int
    classes: int
    members: int
    external: tuple[str, ...]
    missing_classes: tuple[str, ...]
    missing_members: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """True when every referenced class and member resolves."""
        return not self.missing_classes and not self.missing_members

    def summary(self) -> str:
        """One line for logs and error messages."""
        head = (
            f"{self.consumer_classes} consumer classes reference {self.classes} classes and "
            f"{self.members} members ({len(self.external)} resolved outside the jars)"
        )
        if self.ok:
            return head + "; all resolve"
        return (
            head + f"; missing {len(self.missing_classes)} classes "
            f"{list(self.missing_classes[:5])} and {len(self.missing_members)} members "
            f"{list(self.missing_members[:5])}"
        )


class _Hierarchy:
    """Provider classes by internal name, with JVM-style member lookup."""

    def __init__(self, classes: dict[str, ClassInfo]) -> None:
        self.classes = classes
        self.packages = {name.rsplit("/", 1)[0] for name in classes if "/" in name}

    def _supertypes(self, name: str) -> Iterable[str]:
        info = self.classes.get(name)
        if info is None:
            return ()
        return (*((info.super_name,) if info.super_name else ()), *info.interfaces)

    def find(self, ref: MemberRef) -> str:
        """'found', 'external' or 'missing' for a member reference."""
        if ref.owner not in self.classes:
            return "missing"
        key = (ref.name, ref.descriptor)
        seen: set[str] = set()
        outside: set[str] = set()
        stack = [ref.owner]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            info = self.classes.get(name)
            if info is None:
                outside.add(name)
                continue
            if key in (info.fields if ref.is_field else info.methods):
                return "found"
            stack.extend(self._supertypes(name))
        object_visible = ref.kind == INTERFACE_METHODREF or _OBJECT in outside
        if not ref.is_field and object_visible and key in _OBJECT_METHODS:
            return "found"
        outside.discard(_OBJECT)
        return "external" if outside else "missing"


def _load_providers(jars: Sequence[Path]) -> dict[str, ClassInfo]:
    classes: dict[str, ClassInfo] = {}
    for jar in jars:
        try:
            with zipfile.ZipFile(jar) as z:
                for name in z.namelist():
                    if name.endswith(".class") and not name.startswith("META-INF/"):
                        info, _pool = parse_class(z.read(name))
                        classes.setdefault(info.name, info)
        except (OSError, zipfile.BadZipFile, ClassFormatError) as e:
            raise SparkSetupError(f"check: cannot read {jar}: {e}") from e
    return classes


def check_references(
    consumer: Path, providers: Sequence[Path], prefix: str = SHADED_JACKSON_PREFIX
) -> CheckReport:
    """Check that ``consumer``'s references under ``prefix`` resolve in ``providers``.

    Args:
        consumer: The jar whose references are checked (e.g. Iceberg's Spark runtime).
        providers: The jars that should satisfy them (e.g. the relocated Jackson).
        prefix: Internal-name package prefix, ending in ``/``.

    Returns:
        What was checked and what is missing.

    Raises:
        SparkSetupError: If a jar cannot be read.
    """
    hierarchy = _Hierarchy(_load_providers(providers))
    name_re = re.compile(re.escape(prefix) + r"[\w/$]*")
    needle = prefix.encode()
    class_names: set[str] = set()
    members: set[MemberRef] = set()
    consumers = 0
    try:
        with zipfile.ZipFile(consumer) as z:
            for name in z.namelist():
                if not name.endswith(".class") or name.startswith("META-INF/"):
                    continue
                data = z.read(name)
                if needle not in data:
                    continue
                consumers += 1
                pool = parse_constant_pool(data)
                for value in pool.utf8.values():
                    if prefix in value:
                        class_names.update(m.group(0) for m in name_re.finditer(value))
                members.update(r for r in pool.member_refs() if r.owner.startswith(prefix))
    except (OSError, zipfile.BadZipFile, ClassFormatError) as e:
        raise SparkSetupError(f"check: cannot read {consumer}: {e}") from e
    missing_classes = sorted(
        c
        for c in class_names
        if c not in hierarchy.classes and c.rstrip("/") not in hierarchy.packages
    )
    external: list[str] = []
    missing_members: list[str] = []
    for ref in sorted(members, key=lambda r: (r.owner, r.name, r.descriptor)):
        verdict = hierarchy.find(ref)
        label = f"{ref.owner}.{ref.name}:{ref.descriptor}"
        if verdict == "external":
            external.append(label)
        elif verdict == "missing":
            missing_members.append(label)
    return CheckReport(
        consumer_classes=consumers,
        classes=len(class_names),
        members=len(members),
        external=tuple(external),
        missing_classes=tuple(missing_classes),
        missing_members=tuple(missing_members),
    )
