"""Nessie REST API v2 (``/api/v2``)."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.concurrency import run_in_threadpool

from loch.api.common import (
    JSON_OBJECT_BODY,
    body_keys,
    commit_meta_from_headers,
    decode_param,
    etag,
    hidden_types,
    json_object,
    path_key,
    query_key,
    query_keys,
    store,
    visible_content,
    visible_diffs,
    write_target,
)
from loch.api.responses import JSONResponse
from loch.api.routes import DirectRoute
from loch.errors import BadRequestError, ReferenceNotFoundError
from loch.model.views import (
    commit_meta_v2,
    key_json,
    log_entry,
    merge_response,
    ref_json,
)
from loch.store import NO_ANCESTOR, RefRecord
from loch.versioning import KeyMergeMode, KeyRange, Resolved, VersionStore, parse_operations
from loch.versioning.merge import MergeResult
from loch.versioning.refs import validate_hash

__all__ = ["config_json", "merge_modes", "merge_or_transplant", "router", "target_ref"]

router = APIRouter(prefix="/api/v2", tags=["v2"])

SPEC_VERSION = "2.2.0"
RECENT_CHANGES_LIMIT = 20  # previous HEADs answered by recent-changes

MaxRecords = Annotated[int | None, Query(alias="max-records")]
PageToken = Annotated[str | None, Query(alias="page-token")]
Filter = Annotated[str | None, Query()]
Fetch = Annotated[str | None, Query()]
JsonBody = Annotated[dict[str, Any], Body()]


def _ok(body: dict[str, Any], hash_: str | None = None) -> JSONResponse:
    return JSONResponse(body, headers=etag(hash_) if hash_ else None)


def _fetch_all(fetch: str | None) -> bool:
    if fetch is None or fetch == "":
        return False
    f = fetch.upper()
    if f not in ("MINIMAL", "ALL"):
        raise BadRequestError(f"fetch must be MINIMAL or ALL, not '{fetch}'")
    return f == "ALL"


def _max_records(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise BadRequestError("max-records must be a positive number")
    return value


def _resolve(vs: VersionStore, ref: str) -> Resolved:
    return vs.resolve(decode_param(ref))


def config_json(vs: VersionStore) -> dict[str, Any]:
    """NessieConfiguration (v2 view)."""
    return {
        "defaultBranch": vs.default_branch,
        "minSupportedApiVersion": 1,
        "maxSupportedApiVersion": 2,
        "actualApiVersion": 2,
        "specVersion": SPEC_VERSION,
        "noAncestorHash": NO_ANCESTOR,
        "repositoryCreationTimestamp": vs.created_at,
        "oldestPossibleCommitTimestamp": vs.created_at,
    }


# -- config --------------------------------------------------------------------------------


@router.get("/config", summary="Server configuration")
def get_config(request: Request) -> JSONResponse:
    return _ok(config_json(store(request)))


_GC_FIELDS = (
    "defaultCutoffPolicy",
    "perRefCutoffPolicies",
    "newFilesGracePeriod",
    "expectedFileCountPerContent",
)
_REPO_CONFIG_TYPES = {"GARBAGE_COLLECTOR": _GC_FIELDS}


def _repo_config_key(t: str) -> str:
    return f"repository-config:{t}"


@router.get("/config/repository", summary="Repository configuration objects")
def get_repository_config(
    request: Request, type: Annotated[list[str] | None, Query()] = None
) -> JSONResponse:
    vs = store(request)
    configs = []
    for t in type or list(_REPO_CONFIG_TYPES):
        t = t.upper()
        if t not in _REPO_CONFIG_TYPES:
            raise BadRequestError(f"Unknown repository config type '{t}'")
        raw = vs.persist.get_meta(_repo_config_key(t))
        if raw is not None:
            configs.append(json.loads(raw))
    return _ok({"configs": configs} if configs else {})


@router.post("/config/repository", summary="Create or update a repository configuration")
def update_repository_config(request: Request, body: JsonBody) -> JSONResponse:
    vs = store(request)
    config = body.get("config")
    if not isinstance(config, dict):
        raise BadRequestError('Body must be {"config": RepositoryConfig}')
    t = str(config.get("type", "")).upper()
    if t not in _REPO_CONFIG_TYPES:
        raise BadRequestError(f"Unknown repository config type '{config.get('type')}'")
    value = {
        "type": t,
        **{k: config[k] for k in _REPO_CONFIG_TYPES[t] if config.get(k) is not None},
    }
    key = _repo_config_key(t)
    previous = vs.persist.get_meta(key)
    vs.persist.set_meta(key, json.dumps(value))
    return _ok({"previous": json.loads(previous) if previous else None})


# -- references ----------------------------------------------------------------------------


def _ref_out(vs: VersionStore, rec: RefRecord, fetch_all: bool) -> dict[str, Any]:
    if not fetch_all:
        return ref_json(rec)
    meta = vs.reference_metadata(rec)
    if meta.get("commitMetaOfHEAD") is not None:
        meta["commitMetaOfHEAD"] = commit_meta_v2(meta["commitMetaOfHEAD"])
    return ref_json(rec, meta)


@router.get("/trees", summary="List references")
def list_references(
    request: Request,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
    fetch: Fetch = None,
    filter: Filter = None,
) -> JSONResponse:
    vs = store(request)
    fetch_all = _fetch_all(fetch)
    limit = _max_records(max_records)
    refs = vs.list_references()
    if page_token:
        refs = [r for r in refs if r.name > decode_param(page_token)]
    refs = vs.filter_references(refs, filter)
    token = None
    if limit is not None and len(refs) > limit:
        refs = refs[:limit]
        token = refs[-1].name
    return _ok(
        {
            "references": [_ref_out(vs, r, fetch_all) for r in refs],
            "hasMore": token is not None,
            "token": token,
        }
    )


@router.post("/trees", summary="Create a reference")
def create_reference(
    request: Request,
    name: Annotated[str, Query()],
    type: Annotated[str, Query()],
    body: Annotated[dict[str, Any] | None, Body()] = None,
) -> JSONResponse:
    vs = store(request)
    source = body or {}
    src_hash = source.get("hash")
    src_name = source.get("name")
    if src_hash is not None:
        src_hash = validate_hash(src_hash, "source hash")
    if src_name and source.get("type") != "DETACHED" and src_name != "DETACHED":
        vs.get_reference(src_name)
        if src_hash is None and name != vs.default_branch:
            raise BadRequestError("Source reference hash must be provided.")
    rec = vs.create_reference(name, type, src_hash)
    return _ok({"reference": ref_json(rec)}, rec.hash)


@router.get("/trees/{ref}", summary="Get a reference")
def get_reference(request: Request, ref: str, fetch: Fetch = None) -> JSONResponse:
    vs = store(request)
    spec = vs.parse(decode_param(ref))
    if spec.hash is not None or spec.relative or spec.name is None:
        raise BadRequestError("Reference to fetch must not contain a hash or relative part.")
    rec = vs.get_reference(spec.name)
    return _ok({"reference": _ref_out(vs, rec, _fetch_all(fetch))}, rec.hash)


@router.put("/trees/{ref}", summary="Assign a reference to a commit")
def assign_reference(
    request: Request,
    ref: str,
    body: JsonBody,
    type: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    vs = store(request)
    name, expected = write_target(request, vs.parse(decode_param(ref)), "Assigned")
    if expected is None:
        raise BadRequestError("Expected hash must be provided.")
    target = body.get("hash")
    if not target:
        raise BadRequestError("Target hash must be provided.")
    rec = vs.assign_reference(name, expected, target, type, target_ref(vs, body))
    return _ok({"reference": ref_json(rec)}, rec.hash)


def target_ref(vs: VersionStore, body: dict[str, Any]) -> tuple[str, str | None]:
    """The (type, name) an assign target was given as (for the REFERENCE_ASSIGNED event).

    A named target must exist, be of that type, and have the target hash in its history.
    """
    t = body.get("type")
    name = body.get("name")
    if t not in ("BRANCH", "TAG") or not isinstance(name, str) or not name or name == "DETACHED":
        return "DETACHED", None
    rec = vs.get_reference(name)
    if rec.type != t:
        raise ReferenceNotFoundError(f"Named reference '{name}' is not a {t.lower()}")
    target = body.get("hash")
    if isinstance(target, str):
        vs.check_in_history(name, rec.hash, validate_hash(target, "target hash"))
    return t, name


@router.delete("/trees/{ref}", summary="Delete a reference")
def delete_reference(
    request: Request, ref: str, type: Annotated[str | None, Query()] = None
) -> JSONResponse:
    vs = store(request)
    name, expected = write_target(request, vs.parse(decode_param(ref)), "Deleted")
    if expected is None:
        raise BadRequestError("Expected hash must be provided.")
    rec = vs.delete_reference(name, expected, type)
    return _ok({"reference": ref_json(rec)})


@router.get("/trees/{ref}/recent-changes", summary="Recent changes of a reference")
def recent_changes(
    request: Request,
    ref: str,
    scan_commits: Annotated[int | None, Query(alias="scan-commits")] = None,
) -> JSONResponse:
    vs = store(request)
    spec = vs.parse(decode_param(ref))
    if spec.hash is not None or spec.relative or spec.name is None:
        raise BadRequestError("Reference must not contain a hash or relative part.")
    rec = vs.get_reference(spec.name)
    if scan_commits is not None and scan_commits < 0:
        raise BadRequestError("scan-commits must not be negative")
    history = vs.persist.ref_log(rec.name, RECENT_CHANGES_LIMIT + 1)
    if not history or history[0] != rec.hash:
        history.insert(0, rec.hash)

    def point(h: str) -> dict[str, Any]:
        meta = None
        if h != NO_ANCESTOR and vs.objects.has_commit(h):
            meta = commit_meta_v2(vs.commit_of(h))
        return {"commitHash": h, "commitConsistency": "NOT_CHECKED", "meta": meta}

    return _ok(
        {
            "reference": ref_json(rec),
            "current": point(history[0]),
            "previous": [point(h) for h in history[1 : RECENT_CHANGES_LIMIT + 1]],
            "commitLogConsistency": "NOT_CHECKED",
        },
        rec.hash,
    )


# -- entries, history, diff ----------------------------------------------------------------


def _key_range(
    keys: list[str] | None, min_key: str | None, max_key: str | None, prefix: str | None
) -> KeyRange:
    return KeyRange(query_keys(keys), query_key(min_key), query_key(max_key), query_key(prefix))


@router.get("/trees/{ref}/entries", summary="List the content keys of a reference")
def get_entries(
    request: Request,
    ref: str,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
    key: Annotated[list[str] | None, Query()] = None,
    min_key: Annotated[str | None, Query(alias="min-key")] = None,
    max_key: Annotated[str | None, Query(alias="max-key")] = None,
    prefix_key: Annotated[str | None, Query(alias="prefix-key")] = None,
    filter: Filter = None,
    content: Annotated[bool, Query()] = False,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref)
    page = vs.entries(
        r.hash,
        _key_range(key, min_key, max_key, prefix_key),
        filter=filter,
        page_token=page_token,
        max_records=_max_records(max_records),
    )
    hidden = hidden_types(request)
    items = [(k, v) for k, v in page.items if v[1] not in hidden]
    values = vs.values([v[2] for _, v in items]) if content else {}
    entries = []
    for k, (cid, ctype, vid) in items:
        e: dict[str, Any] = {"name": key_json(k), "type": ctype, "contentId": cid}
        if content:
            e["content"] = values[vid].content
        entries.append(e)
    return _ok(
        {
            "entries": entries,
            "effectiveReference": ref_json(r),
            "hasMore": page.has_more,
            "token": page.token,
        },
        r.hash,
    )


@router.get("/trees/{ref}/history", summary="Commit log of a reference")
def get_history(
    request: Request,
    ref: str,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
    limit_hash: Annotated[str | None, Query(alias="limit-hash")] = None,
    filter: Filter = None,
    fetch: Fetch = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref)
    with_ops = _fetch_all(fetch)
    page = vs.log(
        r.hash,
        limit_hash=limit_hash,
        filter=filter,
        page_token=page_token,
        max_records=_max_records(max_records),
    )
    return _ok(
        {
            "logEntries": [
                log_entry(vs, c, v1=False, with_ops=with_ops, hidden=hidden_types(request))
                for c in page.items
            ],
            "hasMore": page.has_more,
            "token": page.token,
        },
        r.hash,
    )


@router.get("/trees/{from_ref}/diff/{to_ref}", summary="Differences between two references")
def get_diff(
    request: Request,
    from_ref: str,
    to_ref: str,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
    key: Annotated[list[str] | None, Query()] = None,
    min_key: Annotated[str | None, Query(alias="min-key")] = None,
    max_key: Annotated[str | None, Query(alias="max-key")] = None,
    prefix_key: Annotated[str | None, Query(alias="prefix-key")] = None,
    filter: Filter = None,
) -> JSONResponse:
    vs = store(request)
    a, b = _resolve(vs, from_ref), _resolve(vs, to_ref)
    page = vs.diff(
        a.hash,
        b.hash,
        _key_range(key, min_key, max_key, prefix_key),
        filter=filter,
        page_token=page_token,
        max_records=_max_records(max_records),
    )
    items = visible_diffs(page.items, hidden_types(request))
    vids = [v[2] for _, x, y in items for v in (x, y) if v is not None]
    values = vs.values(vids)
    diffs = [
        {
            "key": key_json(k),
            "from": values[x[2]].content if x else None,
            "to": values[y[2]].content if y else None,
        }
        for k, x, y in items
    ]
    return _ok(
        {
            "diffs": diffs,
            "effectiveFromReference": ref_json(a),
            "effectiveToReference": ref_json(b),
            "hasMore": page.has_more,
            "token": page.token,
        }
    )


# -- contents ------------------------------------------------------------------------------


def _label(r: Resolved) -> str:
    return r.name if r.name is not None else r.hash


@router.get("/trees/{ref}/contents/{key}", summary="Content under one key")
def get_content(
    request: Request,
    ref: str,
    key: str,
    with_doc: Annotated[bool, Query(alias="with-doc")] = False,
    for_write: Annotated[bool, Query(alias="for-write")] = False,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref)
    value = visible_content(vs, r.hash, path_key(key), _label(r), hidden_types(request))
    body: dict[str, Any] = {"content": value.content, "effectiveReference": ref_json(r)}
    if with_doc and value.documentation is not None:
        body["documentation"] = value.documentation
    return _ok(body, r.hash)


def _contents(
    vs: VersionStore, r: Resolved, keys: list[Any], with_doc: bool, hidden: frozenset[str]
) -> JSONResponse:
    items = []
    for k, value in vs.get_contents(r.hash, keys):
        if value.content["type"] in hidden:
            continue
        item: dict[str, Any] = {"key": key_json(k), "content": value.content}
        if with_doc and value.documentation is not None:
            item["documentation"] = value.documentation
        items.append(item)
    return _ok({"contents": items, "effectiveReference": ref_json(r)}, r.hash)


@router.get("/trees/{ref}/contents", summary="Contents under several keys")
def get_multiple_contents(
    request: Request,
    ref: str,
    key: Annotated[list[str] | None, Query()] = None,
    with_doc: Annotated[bool, Query(alias="with-doc")] = False,
    for_write: Annotated[bool, Query(alias="for-write")] = False,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref)
    return _contents(vs, r, list(query_keys(key)), with_doc, hidden_types(request))


@router.post("/trees/{ref}/contents", summary="Contents under several keys")
def post_multiple_contents(
    request: Request,
    ref: str,
    body: JsonBody,
    with_doc: Annotated[bool, Query(alias="with-doc")] = False,
    for_write: Annotated[bool, Query(alias="for-write")] = False,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref)
    return _contents(vs, r, body_keys(body), with_doc, hidden_types(request))


# -- writes --------------------------------------------------------------------------------


async def commit(request: Request, ref: str) -> JSONResponse:
    # Runs on the event loop: the request is checked here without I/O, and the commit
    # joins its branch's batch (see VersionStore.commit_async).
    body = await json_object(request)
    vs = store(request)
    spec = vs.parse(decode_param(ref))
    if spec.relative:  # resolving name~N@hash reads the store: not on the loop
        name, expected = await run_in_threadpool(write_target, request, spec, "Commit")
    else:
        name, expected = write_target(request, spec, "Commit")
    if "commitMeta" not in body or body["commitMeta"] is None:
        raise BadRequestError("commitMeta must be provided")
    ops = parse_operations(body.get("operations"))
    meta = commit_meta_from_headers(request, body["commitMeta"])
    result = await vs.commit_async(name, expected, meta, ops)
    return _ok(
        {
            "targetBranch": {"type": "BRANCH", "name": name, "hash": result.hash},
            "addedContents": [
                {"key": key_json(k), "contentId": cid} for k, cid in result.added_contents
            ],
        },
        result.hash,
    )


router.add_api_route(
    "/trees/{ref}/history/commit",
    commit,
    methods=["POST"],
    summary="Commit operations to a branch",
    openapi_extra=JSON_OBJECT_BODY,
    route_class_override=DirectRoute,
)


def merge_modes(body: dict[str, Any]) -> list[KeyMergeMode]:
    """``keyMergeModes`` of a merge or transplant body."""
    from loch.model.keys import key_from_json

    modes = body.get("keyMergeModes") or []
    if not isinstance(modes, list):
        raise BadRequestError("keyMergeModes must be a list")
    out = []
    for m in modes:
        if not isinstance(m, dict):
            raise BadRequestError("Each key merge mode must be an object")
        out.append(
            KeyMergeMode(
                key_from_json(m.get("key")),
                m.get("mergeBehavior") or "NORMAL",
                m.get("expectedTargetContent"),
                m.get("resolvedContent"),
                m.get("resolvedDocumentation"),
            )
        )
    return out


def _flag(body: dict[str, Any], name: str) -> bool:
    value = body.get(name)
    if value is None:
        value = body.get(name[2].lower() + name[3:]) if name.startswith("is") else None
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequestError(f"'{name}' must be a boolean")
    return value


def merge_or_transplant(
    request: Request,
    vs: VersionStore,
    name: str,
    expected: str | None,
    body: dict[str, Any],
    transplant: bool,
    message: str | None = None,
) -> MergeResult:
    """Run a merge or transplant from a v1 or v2 request body."""
    from_ref = body.get("fromRefName")
    if not from_ref or not isinstance(from_ref, str):
        raise BadRequestError("fromRefName must be provided as a string")
    for field in ("fromHash", "message", "defaultKeyMergeMode"):
        if body.get(field) is not None and not isinstance(body[field], str):
            raise BadRequestError(f"{field} must be a string")
    common: dict[str, Any] = {
        "key_modes": merge_modes(body),
        "default_mode": body.get("defaultKeyMergeMode"),
        "dry_run": _flag(body, "isDryRun"),
        "return_conflicts": _flag(body, "isReturnConflictAsResult"),
    }
    if transplant:
        hashes = body.get("hashesToTransplant")
        if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
            raise BadRequestError("hashesToTransplant must be a non-empty list of hashes")
        return vs.transplant(
            name, expected, from_ref, hashes, message=message or body.get("message"), **common
        )
    meta = body.get("commitMeta")
    if meta is not None and not isinstance(meta, dict):
        raise BadRequestError("commitMeta must be an object")
    meta = commit_meta_from_headers(request, meta)
    return vs.merge(
        name,
        expected,
        from_ref,
        body.get("fromHash"),
        meta=meta,
        message=body.get("message"),
        **common,
    )


@router.post("/trees/{ref}/history/merge", summary="Merge a reference into a branch")
def merge(request: Request, ref: str, body: JsonBody) -> JSONResponse:
    vs = store(request)
    name, expected = write_target(request, vs.parse(decode_param(ref)), "Merge")
    result = merge_or_transplant(request, vs, name, expected, body, transplant=False)
    return _ok(merge_response(result, v1=False))


@router.post("/trees/{ref}/history/transplant", summary="Transplant commits onto a branch")
def transplant(request: Request, ref: str, body: JsonBody) -> JSONResponse:
    vs = store(request)
    name, expected = write_target(request, vs.parse(decode_param(ref)), "Transplant")
    result = merge_or_transplant(request, vs, name, expected, body, transplant=True)
    return _ok(merge_response(result, v1=False))


# FastAPI matches a request against its routes one after the other. The requests every
# table operation of Iceberg's NessieCatalog makes come first (no two paths of this API
# overlap, so the order changes nothing else).
_HOT_PATHS = [
    "/api/v2/trees/{ref}/history/commit",
    "/api/v2/trees/{ref}/contents/{key}",
    "/api/v2/trees/{ref}",
    "/api/v2/config",
]
router.routes.sort(
    key=lambda r: _HOT_PATHS.index(p) if (p := getattr(r, "path", "")) in _HOT_PATHS else 99
)
