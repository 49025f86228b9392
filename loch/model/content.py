"""Content values: the table pointers stored under content keys.

Content is kept everywhere as its API v2 wire dict (``{"type": ..., "id": ..., ...}``),
normalised by :func:`parse_content` so that equal values have equal canonical bytes.
Validation uses one pydantic model per content type.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictStr,
    TypeAdapter,
    ValidationError,
)

from loch.errors import BadRequestError
from loch.store.objects import check_encodable

__all__ = ["ContentType", "parse_content"]


class ContentType(enum.StrEnum):
    """Content types Loch stores.

    ``HIVE_TABLE`` and ``HIVE_DATABASE`` come from the seed's table model (Nessie dropped
    them): an id, a ``metadataLocation`` (the table's or database's storage location)
    and an optional free-form ``metadata`` object.
    """

    ICEBERG_TABLE = "ICEBERG_TABLE"
    ICEBERG_VIEW = "ICEBERG_VIEW"
    DELTA_LAKE_TABLE = "DELTA_LAKE_TABLE"
    NAMESPACE = "NAMESPACE"
    UDF = "UDF"
    HIVE_TABLE = "HIVE_TABLE"
    HIVE_DATABASE = "HIVE_DATABASE"


# Java's long and int: Iceberg reads these fields into primitives.
Long = Annotated[int, Field(strict=True, ge=-(2**63), le=2**63 - 1)]
Int = Annotated[int, Field(strict=True, ge=-(2**31), le=2**31 - 1)]


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)
    id: StrictStr | None = None


class _IcebergTable(_Base):
    type: Literal["ICEBERG_TABLE"]
    metadataLocation: StrictStr
    snapshotId: Long = -1
    schemaId: Int = -1
    specId: Int = -1
    sortOrderId: Int = -1


class _IcebergView(_Base):
    type: Literal["ICEBERG_VIEW"]
    metadataLocation: StrictStr
    versionId: Long = -1
    schemaId: Int = -1
    sqlText: StrictStr | None = None
    dialect: StrictStr | None = None


class _DeltaLakeTable(_Base):
    type: Literal["DELTA_LAKE_TABLE"]
    metadataLocationHistory: list[StrictStr] = Field(default_factory=list)
    checkpointLocationHistory: list[StrictStr] = Field(default_factory=list)
    lastCheckpoint: StrictStr | None = None


class _Namespace(_Base):
    type: Literal["NAMESPACE"]
    elements: list[StrictStr] = Field(default_factory=list)
    properties: dict[StrictStr, StrictStr] = Field(default_factory=dict)


class _Udf(_Base):
    type: Literal["UDF"]
    metadataLocation: StrictStr | None = None
    versionId: StrictStr | None = None
    signatureId: StrictStr | None = None
    sqlText: StrictStr | None = None
    dialect: StrictStr | None = None


class _HiveTable(_Base):
    type: Literal["HIVE_TABLE"]
    metadataLocation: StrictStr
    metadata: dict[StrictStr, Any] | None = None


class _HiveDatabase(_Base):
    type: Literal["HIVE_DATABASE"]
    metadataLocation: StrictStr | None = None
    metadata: dict[StrictStr, Any] | None = None


_AnyContent = Annotated[
    _IcebergTable | _IcebergView | _DeltaLakeTable | _Namespace | _Udf | _HiveTable | _HiveDatabase,
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(_AnyContent)

# Fields written even when null (all others are omitted when null, and the listed
# "omit when empty" ones when empty), per Nessie's JSON views.
_ALWAYS = {"id", "type", "lastCheckpoint"}
_OMIT_EMPTY = {"properties"}


def parse_content(obj: Any) -> dict[str, Any]:
    """Validate a wire content object and return its normalised dict.

    Raises:
        BadRequestError: not an object, unknown ``type``, missing or mistyped fields.
    """
    if not isinstance(obj, dict):
        raise BadRequestError("Content must be a JSON object")
    ctype = obj.get("type")
    if ctype not in ContentType.__members__:
        raise BadRequestError(f"Unknown content type '{ctype}'")
    try:
        model = _ADAPTER.validate_python(obj)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"][1:]) or "content"
        raise BadRequestError(f"Invalid {ctype} content: {loc}: {first['msg']}") from None
    out: dict[str, Any] = {}
    for name, value in model.model_dump().items():
        if value is None and name not in _ALWAYS:
            continue
        if name in _OMIT_EMPTY and not value:
            continue
        out[name] = value
    out["type"] = ctype
    try:
        check_encodable(out)
    except ValueError as e:
        raise BadRequestError(f"Invalid {ctype} content: {e}") from None
    return out
