"""Typed results of the Python client (API v2 wire objects)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loch.model.keys import Key

__all__ = [
    "CommitMeta",
    "CommitResponse",
    "DiffEntry",
    "Entry",
    "KeyDetail",
    "LogEntry",
    "MergeResponse",
    "Reference",
]


@dataclass(frozen=True)
class Reference:
    """A branch, tag or detached commit."""

    type: str
    name: str | None
    hash: str | None
    metadata: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Reference:
        return cls(obj["type"], obj.get("name"), obj.get("hash"), obj.get("metadata"))

    def to_json(self) -> dict[str, Any]:
        if self.type == "DETACHED":
            return {"type": "DETACHED", "hash": self.hash}
        return {"type": self.type, "name": self.name, "hash": self.hash}


@dataclass(frozen=True)
class CommitMeta:
    """Commit metadata (v2 view)."""

    hash: str | None
    committer: str | None
    authors: list[str]
    signed_off_by: list[str]
    message: str
    commit_time: str | None
    author_time: str | None
    properties: dict[str, list[str]]
    parents: list[str]

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CommitMeta:
        return cls(
            obj.get("hash"),
            obj.get("committer"),
            list(obj.get("authors") or []),
            list(obj.get("allSignedOffBy") or []),
            obj.get("message") or "",
            obj.get("commitTime"),
            obj.get("authorTime"),
            dict(obj.get("allProperties") or {}),
            list(obj.get("parentCommitHashes") or []),
        )


@dataclass(frozen=True)
class LogEntry:
    """One commit of a log, with its operations when fetched."""

    meta: CommitMeta
    parent: str | None
    operations: list[dict[str, Any]] | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> LogEntry:
        return cls(
            CommitMeta.from_json(obj["commitMeta"]),
            obj.get("parentCommitHash"),
            obj.get("operations"),
        )


@dataclass(frozen=True)
class Entry:
    """A live key: its type, content id and (when asked) content."""

    key: Key
    type: str
    content_id: str | None
    content: dict[str, Any] | None = None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Entry:
        return cls(
            tuple(obj["name"]["elements"]), obj["type"], obj.get("contentId"), obj.get("content")
        )


@dataclass(frozen=True)
class DiffEntry:
    """A key whose content differs; ``before``/``after`` None where absent."""

    key: Key
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DiffEntry:
        return cls(tuple(obj["key"]["elements"]), obj.get("from"), obj.get("to"))


@dataclass(frozen=True)
class CommitResponse:
    """A landed commit: the branch at its new hash and the content ids assigned."""

    branch: Reference
    added_contents: dict[Key, str]

    @property
    def hash(self) -> str:
        assert self.branch.hash is not None
        return self.branch.hash

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> CommitResponse:
        added = {
            tuple(a["key"]["elements"]): a["contentId"] for a in obj.get("addedContents") or []
        }
        return cls(Reference.from_json(obj["targetBranch"]), added)


@dataclass(frozen=True)
class KeyDetail:
    """What a merge or transplant did with one key."""

    key: Key
    merge_behavior: str
    conflict: dict[str, Any] | None


@dataclass(frozen=True)
class MergeResponse:
    """Outcome of a merge or transplant."""

    was_applied: bool
    was_successful: bool
    resultant_target_hash: str | None
    common_ancestor: str | None
    target_branch: str
    effective_target_hash: str | None
    details: list[KeyDetail] = field(default_factory=list)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> MergeResponse:
        return cls(
            bool(obj.get("wasApplied")),
            bool(obj.get("wasSuccessful")),
            obj.get("resultantTargetHash"),
            obj.get("commonAncestor"),
            obj.get("targetBranch") or "",
            obj.get("effectiveTargetHash"),
            [
                KeyDetail(
                    tuple(d["key"]["elements"]), d.get("mergeBehavior", ""), d.get("conflict")
                )
                for d in obj.get("details") or []
            ],
        )
