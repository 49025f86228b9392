"""A typed Python client for Loch's REST API v2, over httpx."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any
from urllib.parse import quote

import httpx

from loch.client.errors import ServerUnreachableError, with_http_status
from loch.client.models import (
    CommitResponse,
    Delivery,
    DiffEntry,
    Entry,
    LogEntry,
    MergeResponse,
    Notification,
    Reference,
)
from loch.errors import BadRequestError, UnknownError, error_from_json
from loch.model.keys import Key, encode_escaped

__all__ = ["CommitBuilder", "LochClient"]

DEFAULT_URI = "http://127.0.0.1:19120/api/v2"


def _ref_path(ref: str, hash_: str | None = None) -> str:
    text = ref if hash_ is None else f"{ref}@{hash_}"
    return quote(text, safe="")


def _key_path(key: Sequence[str]) -> str:
    return quote(encode_escaped(key), safe="")


def _key_json(key: Sequence[str]) -> dict[str, Any]:
    return {"elements": list(key)}


def _id_path(text: str) -> str:
    return quote(text, safe="")


def _merge_modes(
    body: dict[str, Any], default_mode: str | None, key_modes: dict[Key, str] | None
) -> None:
    if default_mode:
        body["defaultKeyMergeMode"] = default_mode
    if key_modes:
        body["keyMergeModes"] = [
            {"key": _key_json(k), "mergeBehavior": m} for k, m in key_modes.items()
        ]


class LochClient:
    """Client for one Loch (or Nessie) server.

    Errors come back as the :mod:`loch.errors` exceptions the server raised, rebuilt
    from the response's ``errorCode`` (conflicts included), with the HTTP status of the
    answer in their ``http_status`` attribute (see :func:`loch.client.http_status`). If
    no server answers, :class:`~loch.client.ServerUnreachableError` is raised. Listings
    page automatically. Use it as a context manager, or call :meth:`close`.

    Example:
        >>> with LochClient("http://127.0.0.1:19120/api/v2") as c:  # doctest: +SKIP
        ...     main = c.get_reference("main")
        ...     c.create_branch("etl", main.hash)
    """

    def __init__(
        self,
        uri: str = DEFAULT_URI,
        *,
        token: str | None = None,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {
            "Nessie-Client-Spec": "2",
            "Accept": "application/json",
            # this client knows every content type, Hive tables and databases included
            "Loch-Content-Types": "*",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.uri = uri.rstrip("/")
        self._http = httpx.Client(
            base_url=self.uri, headers=headers, timeout=timeout, transport=transport
        )

    def __enter__(self) -> LochClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close pooled connections."""
        self._http.close()

    # -- transport ------------------------------------------------------------------------

    def _request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Any:
        try:
            resp = self._http.request(method, path, params=params, json=json, headers=headers)
        except httpx.TimeoutException as e:
            raise ServerUnreachableError(f"Timed out talking to {self.uri}: {e}") from e
        except httpx.TransportError as e:
            raise ServerUnreachableError(f"Cannot reach {self.uri}: {e}") from e
        status = resp.status_code
        if status >= 400:
            try:
                body = resp.json()
            except ValueError:
                text = " ".join(resp.text.split())
                body = {"message": text[:300] or resp.reason_phrase or f"HTTP {status}"}
            raise with_http_status(error_from_json(status, body), status)
        if not resp.content:
            return {}
        try:
            return resp.json()
        except ValueError:
            raise with_http_status(
                UnknownError(
                    f"{method} {self.uri}{path} answered HTTP {status} without JSON; "
                    f"is {self.uri} a Nessie API v2 base URI?"
                ),
                status,
            ) from None

    def _pages(self, path: str, params: dict[str, Any], field: str) -> Iterator[dict[str, Any]]:
        params = {k: v for k, v in params.items() if v is not None}
        while True:
            body = self._request("GET", path, params=params)
            yield from body.get(field) or []
            token = body.get("token")
            if not body.get("hasMore") or not token:
                return
            params["page-token"] = token

    # -- config and references ------------------------------------------------------------

    def config(self) -> dict[str, Any]:
        """The server's NessieConfiguration."""
        result: dict[str, Any] = self._request("GET", "/config")
        return result

    def references(
        self, *, fetch_all: bool = False, filter: str | None = None, page_size: int | None = None
    ) -> Iterator[Reference]:
        """All branches and tags (paged transparently)."""
        params = {
            "fetch": "ALL" if fetch_all else None,
            "filter": filter,
            "max-records": page_size,
        }
        for obj in self._pages("/trees", params, "references"):
            yield Reference.from_json(obj)

    def get_reference(self, name: str, *, fetch_all: bool = False) -> Reference:
        """One branch or tag."""
        body = self._request(
            "GET", f"/trees/{_ref_path(name)}", params={"fetch": "ALL"} if fetch_all else None
        )
        return Reference.from_json(body["reference"])

    def resolve(self, ref: str) -> Reference:
        """The commit a reference expression points at, as the server resolves it.

        Takes everything Nessie's reference syntax allows: ``name``, ``-`` (the default
        branch), ``name@hash``, ``@hash``, and relative steps such as ``main~1``,
        ``main^2`` or ``main*2024-01-01T00:00:00Z``. Works for a branch without commits
        too (its hash is then the server's ``noAncestorHash``).

        Args:
            ref: The reference expression.

        Returns:
            The effective reference: a BRANCH or TAG with its name and the resolved
            hash, or DETACHED with the hash alone for ``@hash`` expressions.

        Raises:
            ReferenceNotFoundError: the reference or a commit does not exist, or the
                relative steps lead before the beginning of history.
            BadRequestError: the expression is malformed.
        """
        body = self._request("GET", f"/trees/{_ref_path(ref)}/entries", params={"max-records": 1})
        return Reference.from_json(body["effectiveReference"])

    def _create(self, name: str, ref_type: str, source: Reference) -> Reference:
        body = self._request(
            "POST", "/trees", params={"name": name, "type": ref_type}, json=source.to_json()
        )
        return Reference.from_json(body["reference"])

    def _source(self, from_ref: str | None, hash_: str | None) -> Reference:
        if hash_ is None:
            src = self.get_reference(from_ref or "-")
            return src
        if from_ref is None:
            return Reference("DETACHED", None, hash_)
        return Reference("BRANCH", from_ref, hash_)

    def create_branch(
        self, name: str, hash: str | None = None, *, from_ref: str | None = None
    ) -> Reference:
        """Create a branch at ``hash`` (or at the head of ``from_ref``/the default branch)."""
        return self._create(name, "BRANCH", self._source(from_ref, hash))

    def create_tag(
        self, name: str, hash: str | None = None, *, from_ref: str | None = None
    ) -> Reference:
        """Create a tag at ``hash`` (or at the head of ``from_ref``/the default branch)."""
        return self._create(name, "TAG", self._source(from_ref, hash))

    def assign(
        self, name: str, expected_hash: str, target_hash: str, *, ref_type: str | None = None
    ) -> Reference:
        """Point a branch or tag at ``target_hash`` if it is at ``expected_hash``."""
        body = self._request(
            "PUT",
            f"/trees/{_ref_path(name, expected_hash)}",
            params={"type": ref_type} if ref_type else None,
            json={"type": "DETACHED", "hash": target_hash},
        )
        return Reference.from_json(body["reference"])

    def delete(self, name: str, expected_hash: str, *, ref_type: str | None = None) -> Reference:
        """Delete a branch or tag if it is at ``expected_hash``."""
        body = self._request(
            "DELETE",
            f"/trees/{_ref_path(name, expected_hash)}",
            params={"type": ref_type} if ref_type else None,
        )
        return Reference.from_json(body["reference"])

    # -- commits ---------------------------------------------------------------------------

    def commit(
        self,
        branch: str,
        expected_hash: str,
        operations: Sequence[dict[str, Any]],
        *,
        message: str,
        authors: Sequence[str] = (),
        properties: dict[str, str] | None = None,
    ) -> CommitResponse:
        """Commit wire operations (see :class:`CommitBuilder` for building them)."""
        meta: dict[str, Any] = {"message": message, "authors": list(authors)}
        if properties:
            meta["allProperties"] = {k: [v] for k, v in properties.items()}
        body = self._request(
            "POST",
            f"/trees/{_ref_path(branch, expected_hash)}/history/commit",
            json={"commitMeta": meta, "operations": list(operations)},
        )
        return CommitResponse.from_json(body)

    def commit_builder(self, branch: str, expected_hash: str | None = None) -> CommitBuilder:
        """Start a commit on ``branch`` (its current head unless ``expected_hash``)."""
        return CommitBuilder(self, branch, expected_hash)

    def merge(
        self,
        branch: str,
        from_ref: str,
        *,
        from_hash: str | None = None,
        expected_hash: str | None = None,
        message: str | None = None,
        properties: dict[str, str] | None = None,
        dry_run: bool = False,
        return_conflicts: bool = False,
        default_mode: str | None = None,
        key_modes: dict[Key, str] | None = None,
    ) -> MergeResponse:
        """Merge ``from_ref`` (at ``from_hash`` or its head) into ``branch``.

        ``message`` and ``properties`` go into the merge commit's metadata.
        """
        if from_hash is None:
            from_hash = self.get_reference(from_ref).hash
        if expected_hash is None:
            expected_hash = self.get_reference(branch).hash
        body: dict[str, Any] = {
            "fromRefName": from_ref,
            "fromHash": from_hash,
            "isDryRun": dry_run,
            "isReturnConflictAsResult": return_conflicts,
        }
        meta: dict[str, Any] = {}
        if message:
            meta["message"] = message
        if properties:
            meta["allProperties"] = {k: [v] for k, v in properties.items()}
        if meta:
            body["commitMeta"] = meta
        _merge_modes(body, default_mode, key_modes)
        resp = self._request(
            "POST", f"/trees/{_ref_path(branch, expected_hash)}/history/merge", json=body
        )
        return MergeResponse.from_json(resp)

    def transplant(
        self,
        branch: str,
        from_ref: str,
        hashes: Sequence[str],
        *,
        expected_hash: str | None = None,
        message: str | None = None,
        dry_run: bool = False,
        return_conflicts: bool = False,
        default_mode: str | None = None,
        key_modes: dict[Key, str] | None = None,
    ) -> MergeResponse:
        """Cherry-pick ``hashes`` (oldest first) from ``from_ref`` onto ``branch``.

        Args:
            branch: The branch to replay the commits on.
            from_ref: The reference the commits are on.
            hashes: The commits, oldest first, forming a chain of parents.
            expected_hash: Only if ``branch`` is still there (default: its head now).
            message: Message of the new commit (when transplanting one commit).
            dry_run: Only check; write nothing.
            return_conflicts: Answer conflicts as a :class:`MergeResponse` whose
                ``was_successful`` is False (with the conflict of each key in
                ``details``) instead of raising :class:`ReferenceConflictError`.
            default_mode: ``NORMAL``, ``FORCE`` (take the picked content) or ``DROP``
                (keep the target's) for every key.
            key_modes: Modes of single keys, overriding ``default_mode``.
        """
        if expected_hash is None:
            expected_hash = self.get_reference(branch).hash
        body: dict[str, Any] = {
            "fromRefName": from_ref,
            "hashesToTransplant": list(hashes),
            "isDryRun": dry_run,
            "isReturnConflictAsResult": return_conflicts,
        }
        if message:
            body["message"] = message
        _merge_modes(body, default_mode, key_modes)
        resp = self._request(
            "POST", f"/trees/{_ref_path(branch, expected_hash)}/history/transplant", json=body
        )
        return MergeResponse.from_json(resp)

    # -- reads ------------------------------------------------------------------------------

    def log(
        self,
        ref: str = "-",
        *,
        filter: str | None = None,
        limit_hash: str | None = None,
        fetch_operations: bool = False,
        page_size: int | None = None,
    ) -> Iterator[LogEntry]:
        """Commits from ``ref`` back to the root (or ``limit_hash``), newest first."""
        params = {
            "filter": filter,
            "limit-hash": limit_hash,
            "fetch": "ALL" if fetch_operations else None,
            "max-records": page_size,
        }
        for obj in self._pages(f"/trees/{_ref_path(ref)}/history", params, "logEntries"):
            yield LogEntry.from_json(obj)

    def entries(
        self,
        ref: str = "-",
        *,
        prefix: Sequence[str] | None = None,
        filter: str | None = None,
        content: bool = False,
        page_size: int | None = None,
    ) -> Iterator[Entry]:
        """Live keys of ``ref`` in key order."""
        params = {
            "prefix-key": encode_escaped(prefix) if prefix else None,
            "filter": filter,
            "content": "true" if content else None,
            "max-records": page_size,
        }
        for obj in self._pages(f"/trees/{_ref_path(ref)}/entries", params, "entries"):
            yield Entry.from_json(obj)

    def diff(
        self, from_ref: str, to_ref: str, *, prefix: Sequence[str] | None = None
    ) -> Iterator[DiffEntry]:
        """Keys whose content differs between two refs."""
        params = {"prefix-key": encode_escaped(prefix) if prefix else None}
        path = f"/trees/{_ref_path(from_ref)}/diff/{_ref_path(to_ref)}"
        for obj in self._pages(path, params, "diffs"):
            yield DiffEntry.from_json(obj)

    def get_content(self, ref: str, key: Sequence[str]) -> dict[str, Any]:
        """The content under ``key`` (raises ContentNotFoundError)."""
        body = self._request("GET", f"/trees/{_ref_path(ref)}/contents/{_key_path(key)}")
        content: dict[str, Any] = body["content"]
        return content

    def get_contents(self, ref: str, keys: Iterable[Sequence[str]]) -> dict[Key, dict[str, Any]]:
        """Contents of those ``keys`` that exist."""
        body = self._request(
            "POST",
            f"/trees/{_ref_path(ref)}/contents",
            json={"requestedKeys": [_key_json(k) for k in keys]},
        )
        return {tuple(c["key"]["elements"]): c["content"] for c in body.get("contents") or []}

    # -- notifications (Loch's webhooks) -----------------------------------------------------

    def add_notification(self, kind: str, url: str, secret: str | None = None) -> Notification:
        """Subscribe a webhook to one kind of event.

        Args:
            kind: One of :data:`~loch.client.NOTIFICATION_KINDS`: ``commits``,
                ``merges``, ``transplants``, ``references-created``,
                ``references-deleted`` or ``references-assigned``.
            url: The absolute http(s) URL events are POSTed to.
            secret: Sign each delivery with HMAC-SHA256 of this secret
                (``Loch-Signature: sha256=…``).

        Returns:
            The new notification; it receives the events recorded from now on.

        Raises:
            BadRequestError: unknown kind, or a URL or secret the server refuses.
        """
        body: dict[str, Any] = {"type": "WEBHOOK", "url": url}
        if secret is not None:
            body["secret"] = secret
        obj = self._request("POST", f"/notifications/{_id_path(kind)}", json=body)
        return Notification.from_json(obj)

    def notifications(self) -> list[Notification]:
        """All notifications, oldest first."""
        body = self._request("GET", "/notifications")
        return [Notification.from_json(n) for n in body.get("notifications") or []]

    def get_notification(self, notification_id: str) -> Notification:
        """One notification (raises NotificationNotFoundError)."""
        obj = self._request("GET", f"/notifications/{_id_path(notification_id)}")
        return Notification.from_json(obj)

    def update_notification(
        self, notification_id: str, url: str, secret: str | None = None
    ) -> Notification:
        """Replace a notification's target: its URL and secret.

        The kind of events it receives stays. The secret is replaced too: without
        ``secret``, deliveries are no longer signed.
        """
        body: dict[str, Any] = {"type": "WEBHOOK", "url": url}
        if secret is not None:
            body["secret"] = secret
        obj = self._request("PUT", f"/notifications/{_id_path(notification_id)}", json=body)
        return Notification.from_json(obj)

    def delete_notification(self, notification_id: str) -> None:
        """Delete a notification and its pending deliveries (raises NotificationNotFoundError)."""
        self._request("DELETE", f"/notifications/{_id_path(notification_id)}")

    def deliveries(
        self, notification_id: str, status: str | None = None, limit: int = 100
    ) -> list[Delivery]:
        """A notification's deliveries, newest first, each with its attempts.

        Args:
            notification_id: The notification.
            status: Only deliveries in this state: ``PENDING``, ``DELIVERED`` or ``FAILED``.
            limit: At most this many (1 to 1000).
        """
        params: dict[str, Any] = {"max-records": limit}
        if status is not None:
            params["status"] = status
        body = self._request(
            "GET", f"/notifications/{_id_path(notification_id)}/deliveries", params=params
        )
        return [Delivery.from_json(d) for d in body.get("deliveries") or []]

    def redeliver(self, notification_id: str, delivery_id: int) -> Delivery:
        """Queue a delivery to be sent again (whatever its state); returns it, PENDING."""
        obj = self._request(
            "POST",
            f"/notifications/{_id_path(notification_id)}/deliveries/{int(delivery_id)}/redeliver",
        )
        return Delivery.from_json(obj)


class CommitBuilder:
    """Collects operations for one commit.

    Example:
        >>> (client.commit_builder("etl")  # doctest: +SKIP
        ...     .put(("db",), {"type": "NAMESPACE", "elements": ["db"]})
        ...     .put(("db", "t"), {"type": "ICEBERG_TABLE", "metadataLocation": "s3://…"})
        ...     .commit("create db.t"))
    """

    def __init__(self, client: LochClient, branch: str, expected_hash: str | None) -> None:
        self._client = client
        self.branch = branch
        self.expected_hash = expected_hash
        self.operations: list[dict[str, Any]] = []

    def put(self, key: Sequence[str], content: dict[str, Any]) -> CommitBuilder:
        """Store ``content`` under ``key`` (``content["id"]`` needed for existing keys)."""
        self.operations.append({"type": "PUT", "key": _key_json(key), "content": content})
        return self

    def delete(self, key: Sequence[str]) -> CommitBuilder:
        """Remove ``key``."""
        self.operations.append({"type": "DELETE", "key": _key_json(key)})
        return self

    def unchanged(self, key: Sequence[str]) -> CommitBuilder:
        """Fail the commit if ``key`` changed since the expected hash."""
        self.operations.append({"type": "UNCHANGED", "key": _key_json(key)})
        return self

    def commit(
        self,
        message: str,
        *,
        authors: Sequence[str] = (),
        properties: dict[str, str] | None = None,
    ) -> CommitResponse:
        """Send the commit."""
        if not self.operations:
            raise BadRequestError("A commit needs at least one operation")
        expected = self.expected_hash
        if expected is None:
            head = self._client.get_reference(self.branch).hash
            assert head is not None
            expected = head
        return self._client.commit(
            self.branch,
            expected,
            self.operations,
            message=message,
            authors=authors,
            properties=properties,
        )
