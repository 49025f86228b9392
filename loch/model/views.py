"""Wire views of the model: exactly the fields of Nessie's API v1 and v2 JSON."""

from __future__ import annotations

from typing import Any

from loch.model.keys import Key
from loch.store import RefRecord
from loch.versioning import Commit, MergeResult, Resolved, Value, VersionStore, commit_meta

__all__ = [
    "commit_meta_v1",
    "commit_meta_v2",
    "key_json",
    "log_entry",
    "merge_response",
    "ref_json",
]


def key_json(key: Key) -> dict[str, Any]:
    """``{"elements": [...]}``."""
    return {"elements": list(key)}


def ref_json(ref: RefRecord | Resolved, metadata: dict[str, Any] | None = None) -> dict[str, Any]:
    """A Reference: BRANCH/TAG with name and hash, or DETACHED with only a hash."""
    if ref.type == "DETACHED" or ref.name is None:
        return {"type": "DETACHED", "hash": ref.hash}
    out: dict[str, Any] = {"type": ref.type, "name": ref.name, "hash": ref.hash}
    if metadata is not None:
        out["metadata"] = metadata
    return out


def commit_meta_v2(c: Commit | dict[str, Any]) -> dict[str, Any]:
    """v2 CommitMeta (``allProperties`` and ``parentCommitHashes`` omitted when empty)."""
    m = commit_meta(c) if isinstance(c, Commit) else c
    out: dict[str, Any] = {
        "hash": m["hash"],
        "committer": m.get("committer"),
        "authors": m.get("authors") or [],
        "allSignedOffBy": m.get("allSignedOffBy") or [],
        "message": m.get("message", ""),
        "commitTime": m.get("commitTime"),
        "authorTime": m.get("authorTime"),
    }
    if m.get("allProperties"):
        out["allProperties"] = m["allProperties"]
    if m.get("parentCommitHashes"):
        out["parentCommitHashes"] = m["parentCommitHashes"]
    return out


def commit_meta_v1(c: Commit | dict[str, Any]) -> dict[str, Any]:
    """v1 CommitMeta: single author, signer and property values."""
    meta = commit_meta(c) if isinstance(c, Commit) else c
    authors = meta.get("authors") or []
    signed = meta.get("allSignedOffBy") or []
    return {
        "hash": meta["hash"],
        "committer": meta.get("committer"),
        "author": authors[0] if authors else None,
        "signedOffBy": signed[0] if signed else None,
        "message": meta.get("message", ""),
        "commitTime": meta.get("commitTime"),
        "authorTime": meta.get("authorTime"),
        "properties": {k: v[0] for k, v in (meta.get("allProperties") or {}).items() if v},
    }


def operations_json(
    vs: VersionStore, c: Commit, hidden: frozenset[str] = frozenset()
) -> list[dict[str, Any]]:
    """The operations of a commit, with the content of each PUT (PUTs of ``hidden``
    content types left out)."""
    ops = vs.objects.operations(c)
    vids = [op[2] for op in ops if op[0] == "PUT" and op[4] not in hidden]
    values = vs.values(vids)
    out: list[dict[str, Any]] = []
    for op in ops:
        if op[0] == "PUT" and op[4] in hidden:
            continue
        if op[0] == "PUT":
            v = values[op[2]]
            o: dict[str, Any] = {"type": "PUT", "key": key_json(tuple(op[1])), "content": v.content}
            out.append(o)
        else:
            out.append({"type": "DELETE", "key": key_json(tuple(op[1]))})
    return out


def log_entry(
    vs: VersionStore,
    c: Commit,
    v1: bool,
    with_ops: bool,
    hidden: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """A LogEntry in the v1 or v2 view."""
    return {
        "commitMeta": commit_meta_v1(c) if v1 else commit_meta_v2(c),
        "parentCommitHash": c.parents[0] if c.parents else None,
        "operations": operations_json(vs, c, hidden) if with_ops else None,
    }


def content_response(value: Value) -> dict[str, Any]:
    """The content of a value (documentation handled by the caller)."""
    return value.content


def merge_response(r: MergeResult, v1: bool) -> dict[str, Any]:
    """MergeResponse in the v1 or v2 view."""
    details: list[dict[str, Any]] = []
    for d in r.details:
        item: dict[str, Any] = {"key": key_json(d.key), "mergeBehavior": d.behavior}
        if v1:
            item["conflictType"] = "UNRESOLVABLE" if d.conflict else "NONE"
            item["sourceCommits"] = []
            item["targetCommits"] = []
        elif d.conflict is not None:
            item["conflict"] = d.conflict.to_json()
        details.append(item)
    out: dict[str, Any] = {
        "wasApplied": r.was_applied,
        "wasSuccessful": r.was_successful,
        "resultantTargetHash": r.resultant_target_hash,
        "commonAncestor": r.common_ancestor,
        "targetBranch": r.target_branch,
        "effectiveTargetHash": r.effective_target_hash,
        "expectedHash": r.expected_hash,
        "details": details,
    }
    if v1:
        out["sourceCommits"] = []
        out["targetCommits"] = None
    return out
