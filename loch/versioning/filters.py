"""CEL filter expressions (``filter`` query parameter), evaluated with cel-python.

Variables follow Nessie: ``entry`` for entries, ``commit`` and ``operations`` for the
log, ``ref``/``refType``/``commit``/``refMeta`` for references, ``key`` for diffs.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

from loch.errors import BadRequestError
from loch.model.keys import Key, encode_legacy

__all__ = ["CelFilter", "compile_filter", "key_variables"]

_env_lock = threading.Lock()
_env: Any = None  # built on first use: building the CEL grammar takes a while


def _environment() -> Any:
    global _env
    if _env is None:
        _env = celpy.Environment()
    return _env


class CelFilter:
    """A compiled filter; ``matches(variables)`` evaluates it."""

    def __init__(self, expression: str, program: Any) -> None:
        self.expression = expression
        self._program = program

    def matches(self, variables: Mapping[str, Any]) -> bool:
        """Evaluate with JSON-like variables. Evaluation errors are 400s.

        Raises:
            BadRequestError: the expression failed (unknown field, type mismatch) or did
                not give a boolean.
        """
        activation = {k: json_to_cel(v) for k, v in variables.items()}
        try:
            result = self._program.evaluate(activation)
        except Exception as e:
            raise BadRequestError(f"Failed to evaluate filter '{self.expression}': {e}") from None
        if isinstance(result, Exception):
            raise BadRequestError(f"Failed to evaluate filter '{self.expression}': {result}")
        if not isinstance(result, celtypes.BoolType):
            raise BadRequestError(f"Filter '{self.expression}' must evaluate to a boolean")
        return bool(result)


@lru_cache(maxsize=256)
def _compile(expression: str) -> CelFilter:
    with _env_lock:
        try:
            env = _environment()
            ast = env.compile(expression)
            program = env.program(ast)
        except Exception as e:
            raise BadRequestError(f"Invalid filter expression '{expression}': {e}") from None
    return CelFilter(expression, program)


def compile_filter(expression: str | None) -> CelFilter | None:
    """Compile a filter (None or blank gives None).

    Raises:
        BadRequestError: the expression does not parse.
    """
    if expression is None or not expression.strip():
        return None
    return _compile(expression)


def key_variables(key: Key) -> dict[str, Any]:
    """The key fields Nessie exposes to filters."""
    return {
        "key": ".".join(key),
        "encodedKey": encode_legacy(key),
        "keyElements": list(key),
        "name": key[-1],
        "namespace": encode_legacy(key[:-1]),
        "namespaceElements": list(key[:-1]),
    }
