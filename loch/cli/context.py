"""What every ``loch`` command shares: settings, the client, exit codes, refs and keys.

The root group builds one :class:`State` (``ctx.obj``) from the global options. Commands
get it with :data:`pass_state` and ask it for the client, the output and the reference
they act on. References are given in Nessie's syntax (``name``, ``name@hash``, ``@hash``,
``-``, ``~N``, ``^N``, ``*timestamp``) and checked here before anything is sent; keys are
given dotted (``db.t``) or in the escaped path form (``.db.*.x`` for ``["db", ".x"]``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.shell_completion import CompletionItem

from loch.cli.output import Output
from loch.client import DEFAULT_URI, LochClient, ServerUnreachableError
from loch.errors import BadRequestError, LochError
from loch.model.keys import Key, decode_path_key, encode_canonical

__all__ = [
    "EXIT_ERROR",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "KEY",
    "NAME_RE",
    "REF",
    "CliError",
    "RefSpec",
    "State",
    "completion_client",
    "exit_code_for",
    "json_option",
    "parse_ref",
    "pass_state",
]

EXIT_OK = 0
"""The command did what it was asked."""
EXIT_ERROR = 1
"""The server refused or failed (not found, conflict, invalid request), or a merge conflicts."""
EXIT_USAGE = 2
"""Bad command line: unknown option, malformed reference or key, unreadable JSON."""
EXIT_UNREACHABLE = 3
"""No answer from the server: connection refused, DNS failure, timeout."""

_HEX_RE = re.compile(r"^[0-9a-fA-F]{8,64}$")
NAME_RE = re.compile(r"^(?:[A-Za-z](?:(?:(?![.][.])[A-Za-z0-9./_-])*[A-Za-z0-9_-])?|-)$")
_SPEC_RE = re.compile(r"^(?P<name>[^@~^*]*)(?:@(?P<hash>[^~^*]*))?(?P<rel>[~^*].*)?$")
_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z"
_REL_RE = re.compile(rf"^(?:[~^]\d+|\*(?:{_TIME}|\d+))+$")


class CliError(Exception):
    """An error the command line reports itself, with its exit code (1 unless given)."""

    def __init__(self, message: str, exit_code: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


# -- references ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RefSpec:
    """A reference as given on the command line, checked and normalised.

    Attributes:
        text: The form sent to the server (a bare hash becomes ``@hash``).
        name: The branch or tag name (``-`` for the default branch), or None if detached.
        hash: The absolute hash after ``@``, or None.
        relative: The ``~N``/``^N``/``*T`` steps, or "".
    """

    text: str
    name: str | None
    hash: str | None
    relative: str = ""

    @property
    def is_plain_name(self) -> bool:
        """A name alone: its head is the commit meant."""
        return self.hash is None and not self.relative

    def __str__(self) -> str:
        return self.text


def parse_ref(text: str) -> RefSpec:
    """Check a reference expression and split it into name, hash and relative steps.

    A bare 8-64 digit hex string is a commit hash (Loch refuses to create references
    with hash-like names, so this is never ambiguous).

    Raises:
        click.BadParameter: the expression is malformed.
    """
    if _HEX_RE.match(text):
        return RefSpec(f"@{text.lower()}", None, text.lower())
    m = _SPEC_RE.match(text)
    if not text or m is None:
        raise click.BadParameter(f"'{text}' is not a reference (name, name@hash, @hash, -)")
    name, hash_, rel = m.group("name"), m.group("hash"), m.group("rel") or ""
    if name and not NAME_RE.match(name):
        raise click.BadParameter(
            f"'{name}' is not a valid reference name (a letter, then letters, digits "
            "and ./_-, no '..', not ending in '.' or '/')"
        )
    if hash_ and not _HEX_RE.match(hash_):
        raise click.BadParameter(f"'{hash_}' is not a commit hash (8 to 64 hex digits)")
    if not name and not hash_:
        raise click.BadParameter(f"'{text}' has neither a reference name nor a hash")
    if rel and not _REL_RE.match(rel):
        raise click.BadParameter(
            f"'{rel}' in '{text}' is not a relative part (~N, ^N, *2024-01-31T12:00:00Z, *millis)"
        )
    return RefSpec(text, name or None, hash_.lower() if hash_ else None, rel)


def completion_client(ctx: click.Context) -> LochClient:
    params = ctx.find_root().params
    return LochClient(params.get("uri") or DEFAULT_URI, token=params.get("token"), timeout=2.0)


if TYPE_CHECKING:
    _RefParam = click.ParamType[RefSpec, Any]
    _KeyParam = click.ParamType[Key, Any]
else:  # ParamType is generic from click 8.4 on
    _RefParam = _KeyParam = click.ParamType


class RefType(_RefParam):
    """A reference expression, converted to a :class:`RefSpec`; completes reference names."""

    name = "ref"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, RefSpec):
            return value
        try:
            return parse_ref(str(value))
        except click.BadParameter as e:
            self.fail(e.message, param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        try:
            with completion_client(ctx) as client:
                names = [r.name for r in client.references() if r.name]
        except Exception:  # completion must never fail loudly
            return []
        return [CompletionItem(n) for n in names if n.startswith(incomplete)]


class KeyType(_KeyParam):
    """A content key, dotted (``db.t``) or escaped (``.db.*.x``); completes existing keys."""

    name = "key"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, tuple):
            return value
        try:
            return decode_path_key(str(value))
        except BadRequestError as e:
            self.fail(f"'{value}' is not a valid key: {e.message}", param, ctx)

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        ref = ctx.params.get("ref") or ctx.find_root().params.get("ref") or "-"
        try:
            with completion_client(ctx) as client:
                keys = [encode_canonical(e.key) for e in islice(client.entries(str(ref)), 1000)]
        except Exception:  # completion must never fail loudly
            return []
        return [CompletionItem(k) for k in keys if k.startswith(incomplete)]


REF = RefType()
"""Click type of reference arguments and options."""
KEY = KeyType()
"""Click type of content-key arguments and options."""


# -- state -----------------------------------------------------------------------------------


@dataclass
class State:
    """Global options of one ``loch`` invocation, and the objects built from them.

    Attributes:
        uri: Base URI of the server's API v2.
        ref: Default reference of commands (``--ref``/``LOCH_REF``), None for the
            server's default branch.
        json: Write JSON to stdout instead of text.
        color: ``auto``, ``always`` or ``never``.
        debug: Show tracebacks.
        timeout: Seconds to wait for each HTTP request.
        token: Bearer token, if any.
    """

    uri: str = DEFAULT_URI
    ref: RefSpec | None = None
    json: bool = False
    color: str = "auto"
    debug: bool = False
    timeout: float = 30.0
    token: str | None = None
    _client: LochClient | None = field(default=None, repr=False)
    _out: Output | None = field(default=None, repr=False)
    _config: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def client(self) -> LochClient:
        """The HTTP client, created on first use."""
        if self._client is None:
            self._client = LochClient(self.uri, token=self.token, timeout=self.timeout)
        return self._client

    @property
    def out(self) -> Output:
        """Where results go (text on a terminal or piped, or JSON)."""
        if self._out is None:
            self._out = Output(color=self.color, json_mode=self.json)
        return self._out

    def use_json(self) -> None:
        """Switch the output to JSON (a command's own ``--json``)."""
        self.json = True
        self._out = None

    def close(self) -> None:
        """Close the client's connections."""
        if self._client is not None:
            self._client.close()
            self._client = None

    def server_config(self) -> dict[str, Any]:
        """The server's configuration (fetched once)."""
        if self._config is None:
            self._config = self.client.config()
        return self._config

    def default_branch(self) -> str:
        """Name of the server's default branch."""
        return str(self.server_config().get("defaultBranch") or "main")

    def read_ref(self, given: RefSpec | None) -> RefSpec:
        """The reference a read acts on: ``given``, else ``--ref``, else the default branch."""
        return given or self.ref or RefSpec("-", "-", None)

    def branch_target(self, given: RefSpec | None, what: str = "branch") -> tuple[str, str | None]:
        """The branch a write goes to, and its expected hash (None: its current head).

        Args:
            given: The branch named on the command line, if any (``name`` or ``name@hash``).
            what: How the option is called in error messages.

        Raises:
            click.BadParameter: a detached hash or relative steps were given.
        """
        spec = self.read_ref(given)
        if spec.name is None or spec.relative:
            raise click.BadParameter(
                f"'{spec.text}' must be a branch name, optionally with @hash", param_hint=what
            )
        name = self.default_branch() if spec.name == "-" else spec.name
        return name, spec.hash

    def resolve_hash(self, spec: RefSpec) -> str:
        """The absolute commit hash ``spec`` points at (asks the server when needed).

        Names and expressions with ``~N``/``^N``/``*T`` steps are resolved by the server
        (:meth:`LochClient.resolve`); ``name@hash`` and ``@hash`` give their hash as is.
        """
        if spec.hash is not None and not spec.relative:
            return spec.hash
        resolved = self.client.resolve(spec.text).hash
        if resolved is None:
            raise CliError(f"Reference '{spec.text}' has no hash")
        return resolved

    def ref_name(self, spec: RefSpec) -> str:
        """The name ``spec`` refers to: the default branch for ``-``, DETACHED for a hash."""
        if spec.name is None:
            return "DETACHED"
        return self.default_branch() if spec.name == "-" else spec.name


pass_state = click.make_pass_decorator(State)
"""Decorator passing the invocation's :class:`State` as the first argument."""

F = TypeVar("F", bound=Callable[..., Any])


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    state = ctx.find_object(State)
    if value and state is not None:
        state.use_json()


def json_option(f: F) -> F:
    """Add ``--json`` to a command (same as the global ``loch --json``)."""
    option = click.option(
        "--json",
        is_flag=True,
        expose_value=False,
        callback=_set_json,
        help="Write JSON to stdout instead of text.",
    )
    return option(f)


def exit_code_for(error: LochError) -> int:
    """The exit code of a client error: 3 if no server answered, else 1."""
    return EXIT_UNREACHABLE if isinstance(error, ServerUnreachableError) else EXIT_ERROR
