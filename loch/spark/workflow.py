"""Write, audit, publish: a Spark pipeline run on its own Loch branch.

:func:`branch_workflow` is a context manager around one pipeline run::

    from loch.spark import Audit, branch_workflow

    def audit(run):
        checks = Audit()
        n = run.spark.table(run.table("db", "t")).count()
        checks.check("rows", n > 0, f"{n} rows")
        return checks

    with branch_workflow(spark, pipeline="daily", audit=audit) as run:
        run.sql(f"INSERT INTO {run.table('db', 't')} SELECT ...")

It

1. creates a branch from the head of ``base`` (``main`` by default);
2. registers a Spark catalog bound to that branch (a fresh name per run, because Spark
   keeps a catalog once used) and yields a :class:`BranchRun` whose
   :meth:`~BranchRun.table` names tables in it;
3. when the block ends normally, runs the audit: a callback given to
   :func:`branch_workflow` (returning False, or checks of which one failed, rejects the
   data), or :class:`AuditFailed` raised in the block or by the callback;
4. if the audit passes, merges the branch into ``base`` with a commit message and commit
   properties naming the pipeline run (``pipeline``, ``pipeline.run-id``,
   ``pipeline.branch``, ``pipeline.branch-head`` and any given), optionally tags the
   merge commit, and deletes the branch (unless ``keep_branch``).

If the block raises, or the audit rejects the data, nothing is merged: ``base`` is left
exactly as it was and the branch is kept for inspection (``run.branch``, also on
:class:`AuditFailed`). A merge whose keys changed on ``base`` since the branch was created
raises :class:`MergeConflict`, listing the conflicting keys; the branch is kept then too.

Catalogs of ``base`` cache the tables they loaded: after a merge, ``REFRESH TABLE`` them
(or use catalogs with ``cache-enabled=false``) to see the published data.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from loch.client import LochClient, MergeResponse, Reference
from loch.errors import LochError, ReferenceConflictError, TooManyRequestsError
from loch.model.keys import Key, key_str
from loch.spark.errors import SparkSetupError
from loch.spark.session import DEFAULT_CATALOG, add_catalog, nessie_uri

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "RUN_PROPERTIES",
    "Audit",
    "AuditFailed",
    "AuditResult",
    "BranchRun",
    "Check",
    "MergeConflict",
    "RunState",
    "api_uri",
    "branch_workflow",
    "catalog_setting",
    "quote_identifier",
]

RUN_PROPERTIES = ("pipeline", "pipeline.run-id", "pipeline.branch", "pipeline.branch-head")
"""Commit properties of a merge commit that name the pipeline run it published."""

RunState = Literal["running", "failed", "audit-failed", "conflict", "merged"]

_SIMPLE_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_catalog_counter = itertools.count(1)
_catalog_lock = threading.Lock()
_MERGE_ATTEMPTS = 5


# --- errors ----------------------------------------------------------------------------------


class AuditFailed(LochError):
    """The audit rejected the data written on a branch; nothing was merged.

    Raise it inside a :func:`branch_workflow` block (or from its audit callback) to reject
    a run; the workflow raises it itself when the callback returns a failing result.

    Attributes:
        failures: What failed, one line per failed check.
        branch: The branch kept for inspection (set by the workflow).
    """

    def __init__(
        self,
        message: str = "audit failed",
        failures: Sequence[str] = (),
        *,
        branch: str | None = None,
    ) -> None:
        super().__init__(message)
        self.failures = list(failures)
        self.branch = branch

    def __str__(self) -> str:
        text = self.message
        if self.failures:
            text += ": " + "; ".join(self.failures)
        if self.branch:
            text += f" (branch '{self.branch}' kept)"
        return text


class MergeConflict(ReferenceConflictError):
    """Merging a run's branch conflicts: keys changed on both the base and the branch.

    Nothing was merged and the branch is kept.

    Attributes:
        keys: The conflicting content keys (tuples of elements), sorted.
        base: The branch that was merged into.
        branch: The run's branch.
    """

    def __init__(self, base: str, branch: str, conflict: ReferenceConflictError) -> None:
        keys = sorted({c.key for c in conflict.conflicts if c.key is not None})
        listed = ", ".join(key_str(k) for k in keys) or "(no key given)"
        super().__init__(
            f"merging '{branch}' into '{base}' conflicts on {listed}; branch '{branch}' kept",
            conflict.conflicts,
        )
        self.keys: list[Key] = keys
        self.base = base
        self.branch = branch


# --- audits ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One audit check: its name, whether it passed, and what was found."""

    name: str
    passed: bool
    detail: str = ""

    def __str__(self) -> str:
        mark = "ok" if self.passed else "FAILED"
        return f"{self.name}: {mark}" + (f" ({self.detail})" if self.detail else "")


class Audit:
    """Collects the checks of an audit; iterable, so an audit callback can return it.

    Example:
        >>> a = Audit()
        >>> a.equal("row count", 3, 3).passed
        True
        >>> a.check("no null keys", False, "2 null ids").passed
        False
        >>> a.failures
        ['no null keys: FAILED (2 null ids)']
    """

    def __init__(self) -> None:
        self.checks: list[Check] = []

    def __iter__(self) -> Iterator[Check]:
        return iter(self.checks)

    def __len__(self) -> int:
        return len(self.checks)

    def check(self, name: str, passed: bool, detail: str = "") -> Check:
        """Record a check."""
        c = Check(name, bool(passed), detail)
        self.checks.append(c)
        return c

    def equal(self, name: str, actual: object, expected: object) -> Check:
        """Record that ``actual`` must equal ``expected``."""
        if actual == expected:
            return self.check(name, True, f"{actual}")
        return self.check(name, False, f"{actual}, expected {expected}")

    def within(
        self, name: str, value: float | None, low: float | None, high: float | None
    ) -> Check:
        """Record that ``value`` lies in ``[low, high]`` (a None bound is open)."""
        ok = value is not None and (low is None or value >= low) and (high is None or value <= high)
        return self.check(name, ok, f"{value} in [{low}, {high}]")

    @property
    def passed(self) -> bool:
        """True if every check passed."""
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[str]:
        """The failed checks, as text."""
        return [str(c) for c in self.checks if not c.passed]


AuditResult = bool | Iterable[Check] | None
"""What an audit callback returns: None or True pass, False fails, and checks fail if
any of them did not pass."""


def _evaluate(result: AuditResult) -> tuple[bool, list[Check]]:
    if result is None or result is True:
        return True, []
    if result is False:
        return False, [Check("audit", False, "the audit callback returned False")]
    checks = list(result)
    return all(c.passed for c in checks), checks


# --- helpers ---------------------------------------------------------------------------------


def quote_identifier(part: str) -> str:
    """One part of a Spark identifier, back-quoted unless it is a plain name."""
    if _SIMPLE_IDENTIFIER.fullmatch(part):
        return part
    return "`" + part.replace("`", "``") + "`"


def catalog_setting(spark: SparkSession, catalog: str, key: str) -> str | None:
    """A setting of a registered Spark catalog (``spark.sql.catalog.<catalog>.<key>``)."""
    value = spark.conf.get(f"spark.sql.catalog.{catalog}.{key}", None)
    return None if value is None else str(value)


def api_uri(uri: str) -> str:
    """The API v2 base URI (``…/api/v2``) of a server address in any accepted form.

    Raises:
        SparkSetupError: If the address is not an http(s) URL or names another API version.
    """
    base = nessie_uri(uri)
    if not base.endswith("/api/v2"):
        raise SparkSetupError(f"branch workflows need Nessie API v2, got '{uri}'")
    return base


def _fresh_catalog(spark: SparkSession, prefix: str, branch: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9_]+", "_", branch).strip("_")[:40] or "branch"
    with _catalog_lock:
        while True:
            name = f"{prefix}_{slug}_{next(_catalog_counter)}"
            if spark.conf.get(f"spark.sql.catalog.{name}", None) is None:
                return name


def _new_run_id() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


# --- the run ---------------------------------------------------------------------------------


@dataclass
class BranchRun:
    """One pipeline run on its branch, as yielded by :func:`branch_workflow`.

    Attributes:
        spark: The session.
        client: Client of the Loch server; closed when the block ends unless it was
            passed to :func:`branch_workflow` (so :meth:`head` and
            :meth:`changed_keys` work inside the block, or with your own client).
        pipeline: Name of the pipeline.
        run_id: Id of this run.
        base: The branch the run forked from and merges into.
        branch: The run's branch.
        catalog: Spark catalog bound to ``branch``.
        fork_hash: Head of ``base`` when the branch was created.
        uri: The server's API v2 base URI.
        warehouse: Warehouse of the catalog.
        state: ``running``, then ``merged``, ``failed``, ``audit-failed`` or ``conflict``.
        checks: The checks of the audit callback, once it ran.
        merge: The server's answer to the merge, once merged.
        base_before: Head of ``base`` just before the merge.
        merged_hash: Head of ``base`` after the merge (the merge commit, or the unchanged
            head when the branch had nothing new).
        tag: The tag created at ``merged_hash``, if any.
        branch_deleted: Whether the branch was deleted after the merge.
    """

    spark: SparkSession
    client: LochClient
    pipeline: str
    run_id: str
    base: str
    branch: str
    catalog: str
    fork_hash: str
    uri: str
    warehouse: str
    state: RunState = "running"
    checks: list[Check] = field(default_factory=list)
    merge: MergeResponse | None = None
    base_before: str | None = None
    merged_hash: str | None = None
    tag: str | None = None
    branch_deleted: bool = False

    def table(self, *parts: str) -> str:
        """The SQL name of a table (or namespace) in the branch's catalog.

        Example: ``run.table("db", "t")`` gives ``<catalog>.db.t``; parts that are not
        plain names are back-quoted.
        """
        return ".".join([self.catalog, *(quote_identifier(p) for p in parts)])

    def sql(self, query: str) -> DataFrame:
        """``spark.sql(query)``."""
        return self.spark.sql(query)

    def head(self) -> str:
        """The current head of the run's branch."""
        return _hash(self.client.get_reference(self.branch))

    def changed_keys(self) -> list[Key]:
        """Keys whose content differs between the fork point and the branch head."""
        return [d.key for d in self.client.diff(f"{self.base}@{self.fork_hash}", self.branch)]

    def properties(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The commit properties naming this run (see :data:`RUN_PROPERTIES`)."""
        props = {
            "pipeline": self.pipeline,
            "pipeline.run-id": self.run_id,
            "pipeline.branch": self.branch,
        }
        props.update(extra or {})
        return props


def _hash(ref: Reference) -> str:
    if ref.hash is None:
        raise LochError(f"reference '{ref.name}' has no hash")
    return ref.hash


def _merge(
    run: BranchRun, message: str, properties: Mapping[str, str]
) -> tuple[MergeResponse, str]:
    """Merge the run's branch into its base with ``message`` and ``properties``,
    retrying while the base keeps moving (429)."""
    source = run.head()
    props = dict(properties)
    props["pipeline.branch-head"] = source
    for attempt in range(_MERGE_ATTEMPTS):
        expected = _hash(run.client.get_reference(run.base))
        try:
            answer = run.client.merge(
                run.base,
                run.branch,
                from_hash=source,
                expected_hash=expected,
                message=message,
                properties=props,
            )
        except TooManyRequestsError:
            if attempt == _MERGE_ATTEMPTS - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
            continue
        return answer, expected
    raise AssertionError("unreachable")


@contextlib.contextmanager
def branch_workflow(
    spark: SparkSession,
    *,
    pipeline: str = "pipeline",
    base: str = "main",
    branch: str | None = None,
    run_id: str | None = None,
    audit: Callable[[BranchRun], AuditResult] | None = None,
    message: str | None = None,
    properties: Mapping[str, str] | None = None,
    tag: str | None = None,
    keep_branch: bool = False,
    uri: str | None = None,
    warehouse: str | Path | None = None,
    catalog: str = DEFAULT_CATALOG,
    catalog_prefix: str | None = None,
    catalog_options: Mapping[str, str] | None = None,
    client: LochClient | None = None,
) -> Iterator[BranchRun]:
    """Run a pipeline on a new branch; publish it to ``base`` if it succeeds and passes.

    Args:
        spark: A session started by :func:`loch.spark.build_session` (Iceberg on the
            classpath).
        pipeline: Name of the pipeline, recorded on the merge commit.
        base: Branch to fork from and merge into.
        branch: Name of the new branch; default ``<pipeline>/<run_id>``.
        run_id: Id of the run; default a UTC timestamp plus a random suffix.
        audit: Called with the run after the block ended normally, before merging.
            Returning False, or checks (e.g. an :class:`Audit`) of which one failed,
            rejects the data; so does raising :class:`AuditFailed`.
        message: Message of the merge commit; default
            ``"<pipeline>: publish run <run_id>"``.
        properties: More commit properties for the merge commit.
        tag: Create this tag at the merge commit.
        keep_branch: Keep the branch after a successful merge (it is always kept
            otherwise).
        uri: Server address; default that of the Spark catalog ``catalog``.
        warehouse: Warehouse; default that of the Spark catalog ``catalog``.
        catalog: A Loch catalog of the session, where ``uri`` and ``warehouse`` are
            read from when not given.
        catalog_prefix: Prefix of the branch catalog's name; default ``catalog``.
        catalog_options: More keys for the branch catalog (e.g. ``cache-enabled``).
        client: Client to use (not closed here); default a new one for ``uri``.

    Yields:
        The run: its branch, catalog (use :meth:`BranchRun.table`) and, after the block,
        its outcome.

    Raises:
        AuditFailed: The audit rejected the data (branch kept, ``base`` untouched).
        MergeConflict: Keys changed on both sides (branch kept, ``base`` untouched).
        SparkSetupError: No server address or warehouse is known.
        LochError: The server refused a request (e.g. the branch exists already).
    """
    uri = uri or catalog_setting(spark, catalog, "uri")
    warehouse = warehouse or catalog_setting(spark, catalog, "warehouse")
    if not uri or not warehouse:
        raise SparkSetupError(
            f"no server uri or warehouse given and catalog '{catalog}' has none; pass "
            "uri= and warehouse="
        )
    base_uri = api_uri(uri)
    own_client = client is None
    lc = client if client is not None else LochClient(base_uri)
    try:
        run_id = run_id or _new_run_id()
        branch = branch or f"{pipeline}/{run_id}"
        fork = _hash(lc.get_reference(base))
        lc.create_branch(branch, fork, from_ref=base)
        name = _fresh_catalog(spark, catalog_prefix or catalog, branch)
        add_catalog(spark, name, base_uri, branch, warehouse, catalog_options)
        run = BranchRun(
            spark, lc, pipeline, run_id, base, branch, name, fork, base_uri, str(warehouse)
        )
        try:
            yield run
        except AuditFailed as e:
            run.state = "audit-failed"
            e.branch = e.branch or run.branch
            raise
        except BaseException:
            run.state = "failed"
            raise
        _publish(run, audit, message, properties, tag, keep_branch)
    finally:
        if own_client:
            lc.close()


def _publish(
    run: BranchRun,
    audit: Callable[[BranchRun], AuditResult] | None,
    message: str | None,
    properties: Mapping[str, str] | None,
    tag: str | None,
    keep_branch: bool,
) -> None:
    if audit is not None:
        try:
            passed, run.checks = _evaluate(audit(run))
        except AuditFailed as e:
            run.state = "audit-failed"
            e.branch = e.branch or run.branch
            raise
        except BaseException:
            run.state = "failed"
            raise
        if not passed:
            run.state = "audit-failed"
            raise AuditFailed(
                f"audit of {run.pipeline} run {run.run_id} failed",
                [str(c) for c in run.checks if not c.passed],
                branch=run.branch,
            )
    text = message or f"{run.pipeline}: publish run {run.run_id}"
    try:
        run.merge, run.base_before = _merge(run, text, run.properties(properties))
    except ReferenceConflictError as e:
        run.state = "conflict"
        raise MergeConflict(run.base, run.branch, e) from e
    run.merged_hash = run.merge.resultant_target_hash or run.base_before
    run.state = "merged"
    if tag:
        run.client.create_tag(tag, run.merged_hash, from_ref=run.base)
        run.tag = tag
    if not keep_branch:
        run.client.delete(run.branch, run.head(), ref_type="BRANCH")
        run.branch_deleted = True
