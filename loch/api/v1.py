"""Nessie REST API v1 (``/api/v1``, deprecated; used by pynessie)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from starlette.responses import Response

from loch.api.common import (
    JSON_OBJECT_BODY,
    body_keys,
    decode_param,
    hidden_types,
    json_object,
    path_key,
    store,
    visible_content,
    visible_diffs,
)
from loch.api.responses import JSONResponse
from loch.api.v2 import merge_or_transplant, target_ref
from loch.errors import (
    BadRequestError,
    ConflictType,
    ContentNotFoundError,
    NamespaceAlreadyExistsError,
    NamespaceNotEmptyError,
    NamespaceNotFoundError,
    ReferenceConflictError,
)
from loch.model.keys import Key, key_str
from loch.model.views import commit_meta_v1, key_json, log_entry, merge_response, ref_json
from loch.store import RefRecord
from loch.versioning import Delete, KeyRange, Put, Resolved, VersionStore
from loch.versioning.refs import RefSpec, validate_hash

__all__ = ["router"]

router = APIRouter(prefix="/api/v1", tags=["v1"])

MaxRecords = Annotated[int | None, Query(alias="maxRecords")]
PageToken = Annotated[str | None, Query(alias="pageToken")]
HashOnRef = Annotated[str | None, Query(alias="hashOnRef")]
ExpectedHash = Annotated[str | None, Query(alias="expectedHash")]
JsonBody = Annotated[dict[str, Any], Body()]


def _no_content() -> Response:
    return Response(status_code=204)


def _resolve(vs: VersionStore, name: str | None, hash_on_ref: str | None) -> Resolved:
    """v1 refs: a name (``DETACHED`` for hash-only) plus an optional hash."""
    h = validate_hash(hash_on_ref, "hashOnRef") if hash_on_ref else None
    if name is None or name == "":
        name = vs.default_branch
    if name.upper() == "DETACHED":
        if h is None:
            raise BadRequestError("A detached reference needs hashOnRef")
        return vs.resolve(RefSpec(None, h))
    return vs.resolve(RefSpec(name, h))


def _ref_out(vs: VersionStore, rec: RefRecord, fetch_all: bool) -> dict[str, Any]:
    meta = None
    if fetch_all:
        meta = vs.reference_metadata(rec)
        if meta.get("commitMetaOfHEAD") is not None:
            meta["commitMetaOfHEAD"] = commit_meta_v1(meta["commitMetaOfHEAD"])
    return ref_json(rec, meta)


def _fetch_all(fetch: str | None) -> bool:
    if not fetch:
        return False
    if fetch.upper() not in ("MINIMAL", "ALL"):
        raise BadRequestError(f"fetch must be MINIMAL or ALL, not '{fetch}'")
    return fetch.upper() == "ALL"


@router.get("/config", summary="Server configuration (v1 view)")
def get_config(request: Request) -> JSONResponse:
    vs = store(request)
    return JSONResponse({"defaultBranch": vs.default_branch, "maxSupportedApiVersion": 2})


@router.get("/trees", summary="List references")
def list_references(
    request: Request,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
    fetch: Annotated[str | None, Query()] = None,
    filter: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    vs = store(request)
    refs = vs.list_references()
    if page_token:
        refs = [r for r in refs if r.name > page_token]
    refs = vs.filter_references(refs, filter)
    token = None
    if max_records is not None and max_records > 0 and len(refs) > max_records:
        refs = refs[:max_records]
        token = refs[-1].name
    fetch_all = _fetch_all(fetch)
    return JSONResponse(
        {
            "references": [_ref_out(vs, r, fetch_all) for r in refs],
            "hasMore": token is not None,
            "token": token,
        }
    )


@router.get("/trees/tree", summary="The default branch")
def get_default_branch(request: Request) -> JSONResponse:
    vs = store(request)
    return JSONResponse(ref_json(vs.get_reference(vs.default_branch)))


@router.post("/trees/tree", summary="Create a reference")
def create_reference(
    request: Request,
    body: JsonBody,
    source_ref_name: Annotated[str | None, Query(alias="sourceRefName")] = None,
) -> JSONResponse:
    vs = store(request)
    name = body.get("name")
    rtype = body.get("type")
    if not isinstance(name, str) or not isinstance(rtype, str):
        raise BadRequestError("The new reference needs a name and a type")
    h = body.get("hash")
    if source_ref_name and source_ref_name.upper() != "DETACHED":
        src = vs.get_reference(source_ref_name)
        if h is None:
            h = src.hash
    rec = vs.create_reference(name, rtype, h)
    return JSONResponse(ref_json(rec))


@router.get("/trees/tree/{ref}", summary="Get a reference")
def get_reference(
    request: Request, ref: str, fetch: Annotated[str | None, Query()] = None
) -> JSONResponse:
    vs = store(request)
    rec = vs.get_reference(decode_param(ref))
    return JSONResponse(_ref_out(vs, rec, _fetch_all(fetch)))


@router.get("/trees/tree/{ref}/entries", summary="List the content keys of a reference")
def get_entries(
    request: Request,
    ref: str,
    hash_on_ref: HashOnRef = None,
    namespace_depth: Annotated[int | None, Query(alias="namespaceDepth")] = None,
    filter: Annotated[str | None, Query()] = None,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, decode_param(ref), hash_on_ref)
    if max_records is not None and max_records < 1:
        raise BadRequestError("maxRecords must be a positive number")
    if namespace_depth is not None and namespace_depth > 0:
        page = vs.entries(r.hash, KeyRange(), filter=filter)
        seen: dict[Key, str] = {}
        hidden = hidden_types(request)
        for k, v in page.items:
            if v[1] in hidden:
                continue
            if len(k) < namespace_depth:
                continue
            short = k[:namespace_depth]
            seen.setdefault(short, v[1] if len(k) == namespace_depth else "NAMESPACE")
        entries = [{"name": key_json(k), "type": t} for k, t in seen.items()]
        return JSONResponse({"entries": entries, "hasMore": False, "token": None})
    page = vs.entries(
        r.hash, KeyRange(), filter=filter, page_token=page_token, max_records=max_records
    )
    return JSONResponse(
        {
            "entries": [
                {"name": key_json(k), "type": v[1]}
                for k, v in page.items
                if v[1] not in hidden_types(request)
            ],
            "hasMore": page.has_more,
            "token": page.token,
        }
    )


@router.get("/trees/tree/{ref}/log", summary="Commit log of a reference")
def get_log(
    request: Request,
    ref: str,
    start_hash: Annotated[str | None, Query(alias="startHash")] = None,
    end_hash: Annotated[str | None, Query(alias="endHash")] = None,
    filter: Annotated[str | None, Query()] = None,
    fetch: Annotated[str | None, Query()] = None,
    max_records: MaxRecords = None,
    page_token: PageToken = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, decode_param(ref), end_hash)
    if max_records is not None and max_records < 1:
        raise BadRequestError("maxRecords must be a positive number")
    page = vs.log(
        r.hash,
        limit_hash=start_hash,
        filter=filter,
        page_token=page_token,
        max_records=max_records,
    )
    with_ops = _fetch_all(fetch)
    return JSONResponse(
        {
            "logEntries": [
                log_entry(vs, c, v1=True, with_ops=with_ops, hidden=hidden_types(request))
                for c in page.items
            ],
            "hasMore": page.has_more,
            "token": page.token,
        }
    )


@router.put("/trees/{ref_type}/{ref_name}", summary="Assign a reference")
def assign_reference(
    request: Request,
    ref_type: str,
    ref_name: str,
    body: JsonBody,
    expected_hash: ExpectedHash = None,
) -> Response:
    vs = store(request)
    if not expected_hash:
        raise BadRequestError("Expected hash must be provided.")
    target = body.get("hash")
    if not target:
        raise BadRequestError("Target hash must be provided.")
    vs.assign_reference(
        decode_param(ref_name), expected_hash, target, ref_type, target_ref(vs, body)
    )
    return _no_content()


@router.delete("/trees/{ref_type}/{ref_name}", summary="Delete a reference")
def delete_reference(
    request: Request, ref_type: str, ref_name: str, expected_hash: ExpectedHash = None
) -> Response:
    vs = store(request)
    if not expected_hash:
        raise BadRequestError("Expected hash must be provided.")
    vs.delete_reference(decode_param(ref_name), expected_hash, ref_type)
    return _no_content()


@router.post(
    "/trees/branch/{branch}/commit",
    summary="Commit operations to a branch",
    openapi_extra=JSON_OBJECT_BODY,
)
async def commit(request: Request, branch: str, expected_hash: ExpectedHash = None) -> JSONResponse:
    from loch.api.common import commit_meta_from_headers
    from loch.versioning import parse_operations

    body = await json_object(request)
    vs = store(request)
    name = decode_param(branch)
    if body.get("commitMeta") is None:
        raise BadRequestError("commitMeta must be provided")
    ops = parse_operations(body.get("operations"))
    result = await vs.commit_async(
        name, expected_hash, commit_meta_from_headers(request, body["commitMeta"]), ops
    )
    return JSONResponse({"type": "BRANCH", "name": name, "hash": result.hash})


@router.post("/trees/branch/{branch}/merge", summary="Merge a reference into a branch")
def merge(
    request: Request, branch: str, body: JsonBody, expected_hash: ExpectedHash = None
) -> JSONResponse:
    vs = store(request)
    result = merge_or_transplant(
        request, vs, decode_param(branch), expected_hash, body, transplant=False
    )
    return JSONResponse(merge_response(result, v1=True))


@router.post("/trees/branch/{branch}/transplant", summary="Transplant commits onto a branch")
def transplant(
    request: Request,
    branch: str,
    body: JsonBody,
    expected_hash: ExpectedHash = None,
    message: Annotated[str | None, Query()] = None,
) -> JSONResponse:
    vs = store(request)
    result = merge_or_transplant(
        request, vs, decode_param(branch), expected_hash, body, transplant=True, message=message
    )
    return JSONResponse(merge_response(result, v1=True))


# -- contents and diffs --------------------------------------------------------------------


@router.get("/contents/{key}", summary="Content under one key")
def get_content(
    request: Request,
    key: str,
    ref: Annotated[str | None, Query()] = None,
    hash_on_ref: HashOnRef = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref, hash_on_ref)
    value = visible_content(vs, r.hash, path_key(key), r.name or r.hash, hidden_types(request))
    return JSONResponse(value.content)


@router.post("/contents", summary="Contents under several keys")
def get_multiple_contents(
    request: Request,
    body: JsonBody,
    ref: Annotated[str | None, Query()] = None,
    hash_on_ref: HashOnRef = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, ref, hash_on_ref)
    items = [
        {"key": key_json(k), "content": v.content}
        for k, v in vs.get_contents(r.hash, body_keys(body))
        if v.content["type"] not in hidden_types(request)
    ]
    return JSONResponse({"contents": items})


def _diff_side(vs: VersionStore, text: str) -> Resolved:
    name, _, h = text.partition("*")
    return _resolve(vs, name, h or None)


@router.get("/diffs/{spec}", summary="Differences between two references")
def get_diff(request: Request, spec: str) -> JSONResponse:
    vs = store(request)
    text = decode_param(spec)
    if "..." not in text:
        raise BadRequestError("Diff must be given as '<from>...<to>'")
    left, right = text.split("...", 1)
    a, b = _diff_side(vs, left), _diff_side(vs, right)
    page = vs.diff(a.hash, b.hash)
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
    return JSONResponse({"diffs": diffs, "hasMore": False, "token": None})


# -- namespaces ----------------------------------------------------------------------------


def _namespace_key(name: str) -> Key:
    return path_key(name)


def _branch_head(vs: VersionStore, ref: str) -> RefRecord:
    rec = vs.get_reference(decode_param(ref))
    if rec.type != "BRANCH":
        raise BadRequestError(f"Reference '{rec.name}' must be a branch.")
    return rec


def _namespace_at(vs: VersionStore, commit_hash: str, key: Key) -> dict[str, Any]:
    try:
        value = vs.get_content(commit_hash, key)
    except ContentNotFoundError:
        raise NamespaceNotFoundError(f"Namespace '{key_str(key)}' does not exist") from None
    if value.content.get("type") != "NAMESPACE":
        raise NamespaceNotFoundError(f"Namespace '{key_str(key)}' does not exist")
    return value.content


@router.put("/namespaces/namespace/{ref}/{name}", summary="Create a namespace")
def create_namespace(
    request: Request, ref: str, name: str, body: Annotated[dict[str, Any] | None, Body()] = None
) -> JSONResponse:
    vs = store(request)
    key = _namespace_key(name)
    rec = _branch_head(vs, ref)
    existing = vs.get_contents(rec.hash, [key])
    if existing:
        what = existing[0][1].content.get("type")
        if what == "NAMESPACE":
            raise NamespaceAlreadyExistsError(f"Namespace '{key_str(key)}' already exists")
        raise NamespaceAlreadyExistsError(
            f"Another content object with name '{key_str(key)}' already exists"
        )
    props = (body or {}).get("properties") or {}
    content = {"type": "NAMESPACE", "elements": list(key), "properties": props}
    from loch.model.content import parse_content

    try:
        result = vs.commit(
            rec.name,
            rec.hash,
            {"message": f"create namespace {key_str(key)}"},
            [Put(key, parse_content(content))],
        )
    except ReferenceConflictError as e:
        if any(c.conflict_type == ConflictType.KEY_EXISTS for c in e.conflicts):
            raise NamespaceAlreadyExistsError(
                f"Namespace '{key_str(key)}' already exists"
            ) from None
        raise
    stored = vs.get_content(result.hash, key).content
    return JSONResponse(stored)


@router.get("/namespaces/namespace/{ref}/{name}", summary="Get a namespace")
def get_namespace(
    request: Request, ref: str, name: str, hash_on_ref: HashOnRef = None
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, decode_param(ref), hash_on_ref)
    return JSONResponse(_namespace_at(vs, r.hash, _namespace_key(name)))


@router.delete("/namespaces/namespace/{ref}/{name}", summary="Delete a namespace")
def delete_namespace(request: Request, ref: str, name: str) -> Response:
    vs = store(request)
    key = _namespace_key(name)
    rec = _branch_head(vs, ref)
    _namespace_at(vs, rec.hash, key)
    try:
        vs.commit(
            rec.name, rec.hash, {"message": f"delete namespace {key_str(key)}"}, [Delete(key)]
        )
    except ReferenceConflictError as e:
        if any(c.conflict_type == ConflictType.NAMESPACE_NOT_EMPTY for c in e.conflicts):
            raise NamespaceNotEmptyError(f"Namespace '{key_str(key)}' is not empty") from None
        raise
    return _no_content()


@router.post("/namespaces/namespace/{ref}/{name}", summary="Update namespace properties")
def update_namespace(request: Request, ref: str, name: str, body: JsonBody) -> Response:
    vs = store(request)
    key = _namespace_key(name)
    rec = _branch_head(vs, ref)
    ns = dict(_namespace_at(vs, rec.hash, key))
    updates = body.get("propertyUpdates") or {}
    removals = body.get("propertyRemovals") or []
    if not isinstance(updates, dict) or not isinstance(removals, list):
        raise BadRequestError("propertyUpdates must be an object, propertyRemovals a list")
    props = dict(ns.get("properties") or {})
    for k in removals:
        props.pop(k, None)
    props.update(updates)
    ns["properties"] = props
    from loch.model.content import parse_content

    vs.commit(
        rec.name,
        rec.hash,
        {"message": f"update properties for namespace {key_str(key)}"},
        [Put(key, parse_content(ns))],
    )
    return _no_content()


@router.get("/namespaces/{ref}", summary="List namespaces")
def list_namespaces(
    request: Request,
    ref: str,
    name: Annotated[str | None, Query()] = None,
    hash_on_ref: HashOnRef = None,
) -> JSONResponse:
    vs = store(request)
    r = _resolve(vs, decode_param(ref), hash_on_ref)
    prefix = path_key(name) if name else None
    page = vs.entries(r.hash, KeyRange(prefix=prefix))
    keys = [k for k, v in page.items if v[1] == "NAMESPACE"]
    return JSONResponse({"namespaces": [c.content for _, c in vs.get_contents(r.hash, keys)]})
