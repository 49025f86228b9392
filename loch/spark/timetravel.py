"""Read a table as it was: at a tag, at a commit hash, or at a point in time.

Iceberg's ``NessieCatalog`` reads another reference through the table name:
``` catalog.db.`t@tag` ``` reads the tag. It rejects timestamps, so
:func:`resolve_timestamp` asks the server which commit was the head of a branch at an
instant (``GET /api/v2/trees/{branch}*{ISO instant}/entries``, whose
``effectiveReference`` is that commit), and the table is then read at that hash.

Commits are read through a catalog pinned to the hash (``ref.hash``, registered on
first use by :func:`pinned_catalog`), not through ``` `t@branch#<hash>` ```: Iceberg
1.10's ``NessieIcebergClient.withReference`` hands back the catalog's own client when
the branch and hash equal the ones that client last saw, and that client then refreshes
to the branch head, so such a name can silently read the head instead of the commit::

    from loch.spark import read_at

    read_at(spark, "nessie.db.t", tag="release-1")
    read_at(spark, "nessie.db.t", hash="2e1c…")             # on the catalog's ref
    read_at(spark, "nessie.db.t", at=datetime(2024, 5, 1, tzinfo=UTC))

Versions read this way are read-only.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from loch.client import LochClient
from loch.errors import BadRequestError
from loch.spark.workflow import api_uri, catalog_setting, quote_identifier

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "format_instant",
    "pinned_catalog",
    "read_at",
    "resolve_timestamp",
    "split_identifier",
    "table_at",
]

_INSTANT = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z")


def split_identifier(name: str) -> list[str]:
    """Split a Spark multi-part identifier on dots outside back-quotes.

    Example:
        >>> split_identifier("nessie.`odd.ns`.t")
        ['nessie', 'odd.ns', 't']

    Raises:
        BadRequestError: An unbalanced back-quote or an empty part.
    """
    parts: list[str] = []
    current: list[str] = []
    quoted = False
    was_quoted = False
    i = 0
    while i < len(name):
        ch = name[i]
        if quoted:
            if ch == "`":
                if name[i + 1 : i + 2] == "`":
                    current.append("`")
                    i += 1
                else:
                    quoted = False
            else:
                current.append(ch)
        elif ch == "`":
            quoted = was_quoted = True
        elif ch == ".":
            if not current and not was_quoted:
                raise BadRequestError(f"empty part in identifier '{name}'")
            parts.append("".join(current))
            current, was_quoted = [], False
        else:
            current.append(ch)
        i += 1
    if quoted:
        raise BadRequestError(f"unbalanced back-quote in identifier '{name}'")
    if not current and not was_quoted:
        raise BadRequestError(f"empty part in identifier '{name}'")
    parts.append("".join(current))
    return parts


def table_at(table: str, ref: str, hash: str | None = None) -> str:
    """The Spark name of ``table`` read at ``ref`` (and commit ``hash`` on it).

    Example:
        >>> table_at("nessie.db.t", "release-1")
        'nessie.db.`t@release-1`'
        >>> table_at("nessie.db.t", "main", "2e1cfa82b035c26c")
        'nessie.db.`t@main#2e1cfa82b035c26c`'

    A ``hash`` on the catalog's own ref may read the head instead (see the module
    docstring); :func:`read_at` reads commits through :func:`pinned_catalog`.

    Args:
        table: ``catalog.namespace….table``.
        ref: A branch or tag.
        hash: A commit; the version is then read-only.

    Raises:
        BadRequestError: ``table`` has fewer than three parts, already names a ref, or
            ``ref`` is empty.
    """
    parts = split_identifier(table)
    if len(parts) < 3:
        raise BadRequestError(f"'{table}' must be catalog.namespace.table")
    if "@" in parts[-1] or "#" in parts[-1]:
        raise BadRequestError(f"'{table}' already names a reference or hash")
    if not ref:
        raise BadRequestError("a reference is needed to read a table at a commit")
    last = f"{parts[-1]}@{ref}" + (f"#{hash}" if hash else "")
    return ".".join([*(quote_identifier(p) for p in parts[:-1]), quote_identifier(last)])


def _catalog_settings(spark: SparkSession, catalog: str) -> dict[str, str]:
    """Every ``spark.sql.catalog.<catalog>[.*]`` setting of the session."""
    prefix = f"spark.sql.catalog.{catalog}"
    return {
        str(r["key"]): str(r["value"])
        for r in spark.sql("SET").collect()
        if r["key"] == prefix or str(r["key"]).startswith(prefix + ".")
    }


def pinned_catalog(spark: SparkSession, catalog: str, ref: str, hash: str) -> str:
    """A catalog like ``catalog`` but bound to commit ``hash`` of ``ref`` (read-only).

    Registered on the session on first use, with every setting of ``catalog`` copied and
    ``ref``/``ref.hash`` set; later calls for the same commit return the same name.

    Args:
        spark: The session.
        catalog: A Loch catalog of the session.
        ref: Branch or tag the commit is on.
        hash: The commit.

    Returns:
        The name of the pinned catalog.

    Raises:
        BadRequestError: ``catalog`` is not registered or ``hash`` is not hexadecimal.
    """
    if not re.fullmatch(r"[0-9a-fA-F]{8,64}", hash):
        raise BadRequestError(f"'{hash}' is not a commit hash")
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", ref).strip("_")[:40]
    name = f"{catalog}_at_{slug}_{hash.lower()}"
    if catalog_setting(spark, name, "ref.hash") == hash.lower():
        return name
    settings = _catalog_settings(spark, catalog)
    if not settings:
        raise BadRequestError(f"no Spark catalog '{catalog}' is registered")
    old = f"spark.sql.catalog.{catalog}"
    new = f"spark.sql.catalog.{name}"
    for key, value in settings.items():
        spark.conf.set(new + key[len(old) :], value)
    spark.conf.set(f"{new}.ref", ref)
    spark.conf.set(f"{new}.ref.hash", hash.lower())
    return name


def format_instant(when: datetime | str) -> str:
    """An instant as the server's reference syntax wants it: ``2013-12-31T23:59:59Z``.

    Naive datetimes are taken as UTC; fractions of a second are kept (microseconds).

    Raises:
        BadRequestError: A string that is not such an instant.
    """
    if isinstance(when, str):
        if not _INSTANT.fullmatch(when):
            raise BadRequestError(f"'{when}' is not an ISO-8601 UTC instant (…T…Z)")
        return when
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    when = when.astimezone(UTC)
    text = when.strftime("%Y-%m-%dT%H:%M:%S")
    if when.microsecond:
        text += f".{when.microsecond:06d}"
    return text + "Z"


def resolve_timestamp(client: LochClient | str, branch: str, when: datetime | str) -> str:
    """The commit that was the head of ``branch`` at ``when``, as the server resolves it.

    Sends ``GET /api/v2/trees/{branch}*{instant}/entries?max-records=1`` and returns the
    hash of its ``effectiveReference``: the newest commit on the branch's first-parent
    history committed at or before ``when``.

    Args:
        client: A client, or the server's address.
        branch: Branch (or tag) whose history is searched.
        when: The instant.

    Raises:
        ReferenceNotFoundError: Unknown branch, or no commit that old.
    """
    lc = client if isinstance(client, LochClient) else LochClient(api_uri(client))
    try:
        ref = lc.resolve(f"{branch}*{format_instant(when)}")
    finally:
        if lc is not client:
            lc.close()
    if ref.hash is None:
        raise BadRequestError(f"the server resolved '{branch}' at {when} without a hash")
    return ref.hash


def read_at(
    spark: SparkSession,
    table: str,
    *,
    tag: str | None = None,
    ref: str | None = None,
    hash: str | None = None,
    at: datetime | str | None = None,
    client: LochClient | None = None,
) -> DataFrame:
    """Read ``table`` at a tag, a commit hash or an instant.

    Give exactly one of ``tag``, ``hash`` and ``at``. ``hash`` and ``at`` apply to the
    branch ``ref`` (default: the ref of the table's catalog) and are read through a
    catalog pinned to the commit (:func:`pinned_catalog`).

    Args:
        spark: The session.
        table: ``catalog.namespace….table`` in a Loch catalog.
        tag: Read the table at this tag.
        ref: The branch for ``hash``/``at``; default the catalog's ``ref`` setting.
        hash: Read the table at this commit of ``ref``.
        at: Read the table as it was on ``ref`` at this instant (naive = UTC).
        client: Client for resolving ``at``; default one for the catalog's ``uri``.

    Returns:
        The table's rows at that version (a lazy DataFrame).

    Raises:
        BadRequestError: Not exactly one of ``tag``/``hash``/``at``, or no ref known.
        ReferenceNotFoundError: ``at`` is before the branch's first commit.
    """
    if sum(x is not None for x in (tag, hash, at)) != 1:
        raise BadRequestError("give exactly one of tag, hash and at")
    if tag is not None:
        return spark.table(table_at(table, tag))
    catalog = split_identifier(table)[0]
    ref = ref or catalog_setting(spark, catalog, "ref")
    if not ref:
        raise BadRequestError(f"catalog '{catalog}' has no ref setting; pass ref=")
    if at is not None:
        if client is None:
            uri = catalog_setting(spark, catalog, "uri")
            if not uri:
                raise BadRequestError(f"catalog '{catalog}' has no uri setting; pass client=")
            hash = resolve_timestamp(uri, ref, at)
        else:
            hash = resolve_timestamp(client, ref, at)
    assert hash is not None
    parts = split_identifier(table)
    if len(parts) < 3:
        raise BadRequestError(f"'{table}' must be catalog.namespace.table")
    pinned = pinned_catalog(spark, catalog, ref, hash)
    return spark.table(".".join(quote_identifier(p) for p in [pinned, *parts[1:]]))
