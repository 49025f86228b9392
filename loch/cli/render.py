"""JSON shapes of ``--json`` output and the text rendering of commits.

The JSON written by the commands is Nessie's API v2 wire form of each object, so that it
is documented by the Nessie spec and stable across Loch versions:

* references: ``{"type", "name", "hash"}`` (plus ``"metadata"`` with ``--verbose``)
* log entries and ``show``: ``{"commitMeta": {...}, "parentCommitHash", "operations"}``
* diff entries: ``{"key": {"elements"}, "from", "to"}``
* content entries: ``{"name": {"elements"}, "type", "contentId"}`` (plus ``"content"``)
* merge and cherry-pick: a MergeResponse; commits: a CommitResponse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from loch.cli.output import Cell, Column, Output, content_summary, key_text, styled
from loch.client import CommitMeta, CommitResponse, LogEntry, MergeResponse, Reference
from loch.model.keys import Key

__all__ = [
    "commit_response_json",
    "first_line",
    "key_json",
    "log_entry_json",
    "merge_json",
    "meta_json",
    "reference_json",
    "render_commit",
    "render_merge_details",
    "render_operations",
]


def key_json(key: Sequence[str]) -> dict[str, Any]:
    """A key in wire form."""
    return {"elements": list(key)}


def reference_json(ref: Reference) -> dict[str, Any]:
    """A reference in wire form (``metadata`` only when the server sent it)."""
    obj: dict[str, Any] = {"type": ref.type, "name": ref.name, "hash": ref.hash}
    if ref.type == "DETACHED":
        del obj["name"]
    if ref.metadata is not None:
        obj["metadata"] = ref.metadata
    return obj


def meta_json(meta: CommitMeta) -> dict[str, Any]:
    """Commit metadata in the v2 wire form."""
    obj: dict[str, Any] = {
        "hash": meta.hash,
        "committer": meta.committer,
        "authors": meta.authors,
        "allSignedOffBy": meta.signed_off_by,
        "message": meta.message,
        "commitTime": meta.commit_time,
        "authorTime": meta.author_time,
    }
    if meta.properties:
        obj["allProperties"] = meta.properties
    if meta.parents:
        obj["parentCommitHashes"] = meta.parents
    return obj


def log_entry_json(entry: LogEntry) -> dict[str, Any]:
    """A log entry in wire form (``operations`` null unless fetched)."""
    return {
        "commitMeta": meta_json(entry.meta),
        "parentCommitHash": entry.parent,
        "operations": entry.operations,
    }


def merge_json(resp: MergeResponse) -> dict[str, Any]:
    """A merge or transplant outcome in wire form."""
    details = []
    for d in resp.details:
        item: dict[str, Any] = {"key": key_json(d.key), "mergeBehavior": d.merge_behavior}
        if d.conflict is not None:
            item["conflict"] = d.conflict
        details.append(item)
    return {
        "wasApplied": resp.was_applied,
        "wasSuccessful": resp.was_successful,
        "resultantTargetHash": resp.resultant_target_hash,
        "commonAncestor": resp.common_ancestor,
        "targetBranch": resp.target_branch,
        "effectiveTargetHash": resp.effective_target_hash,
        "details": details,
    }


def commit_response_json(resp: CommitResponse) -> dict[str, Any]:
    """A landed commit in wire form."""
    return {
        "targetBranch": reference_json(resp.branch),
        "addedContents": [
            {"key": key_json(k), "contentId": cid} for k, cid in resp.added_contents.items()
        ],
    }


def _authors(meta: CommitMeta) -> str:
    names = [a for a in meta.authors if a]
    return ", ".join(names) if names else (meta.committer or "")


def first_line(message: str) -> str:
    """The subject line of a commit message."""
    return message.splitlines()[0] if message else ""


def render_commit(
    out: Output, entry: LogEntry, *, oneline: bool = False, parents: bool = False
) -> None:
    """Write one commit like ``git log`` does.

    Args:
        out: Where to write.
        entry: The commit (its operations are listed when present).
        oneline: Write ``hash subject`` only.
        parents: Also write the parent of a single-parent commit.
    """
    meta = entry.meta
    if oneline:
        line = styled(meta.hash or "", "yellow")
        line.append(" " + first_line(meta.message))
        out.line(line)
        if entry.operations:
            render_operations(out, entry.operations, indent="    ")
        return
    out.line(styled(f"commit {meta.hash}", "yellow"))
    if len(meta.parents) > 1:
        out.line("Merge:  " + " ".join(meta.parents))
    elif parents and meta.parents:
        out.line(f"Parent: {meta.parents[0]}")
    author = _authors(meta)
    if author:
        out.line(f"Author: {author}")
    if meta.committer and meta.committer != author:
        out.line(f"Commit: {meta.committer}")
    out.line(f"Date:   {meta.commit_time or meta.author_time or ''}")
    for name, values in sorted(meta.properties.items()):
        out.line(f"Property: {name}={', '.join(values)}")
    out.line()
    for text in (meta.message or "").splitlines() or [""]:
        out.line("    " + text)
    if entry.operations:
        out.line()
        render_operations(out, entry.operations, indent="    ")
    out.line()


_OP_STYLES = {"PUT": "green", "DELETE": "red", "UNCHANGED": "dim"}


def render_operations(out: Output, operations: Sequence[dict[str, Any]], indent: str = "") -> None:
    """Write a commit's operations: one line per key (type of operation, key, content)."""
    keys: list[Key] = [tuple(op.get("key", {}).get("elements") or ()) for op in operations]
    width = max((len(key_text(k)) for k in keys), default=0)
    types = [str((op.get("content") or {}).get("type", "")) for op in operations]
    type_width = max((len(t) for t in types), default=0)
    for op, key, kind in zip(operations, keys, types, strict=True):
        line = Text(indent)
        line.append(f"{op.get('type', '')!s:<7}", style=_OP_STYLES.get(str(op.get("type"))))
        line.append(key_text(key), style="bold")
        summary = content_summary(op.get("content"))
        if kind:
            line.append(" " * (width - len(key_text(key))) + "  ")
            line.append(kind.ljust(type_width) if summary else kind, style="cyan")
        if summary:
            line.append(f"  {summary}")
        out.line(line)


def render_merge_details(out: Output, resp: MergeResponse, *, title: str) -> None:
    """Write the keys a merge or cherry-pick touched, with the conflict of each, if any."""
    rows: list[list[Cell]] = []
    for d in resp.details:
        conflict = d.conflict or {}
        kind = str(conflict.get("conflictType", "")) if conflict else ""
        rows.append(
            [
                key_text(d.key),
                d.merge_behavior,
                styled(kind, "bold red") if kind else styled("ok", "green"),
                str(conflict.get("message", "")) if conflict else "",
            ]
        )
    out.table(
        [Column("Key", "bold"), Column("Mode"), Column("Result"), Column("Message")],
        rows,
        title=title,
    )
