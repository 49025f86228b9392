"""Fixtures of the notification tests: receivers and ``loch serve`` processes that are
stopped after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from .harness import LochServer, Receiver, webhook_server

ReceiverFactory = Callable[..., Receiver]
ServerFactory = Callable[..., LochServer]


@pytest.fixture
def receivers(tmp_path: Path) -> Iterator[ReceiverFactory]:
    """``receivers(name, **behaviour)``: a started receiver, killed after the test."""
    started: list[Receiver] = []

    def make(name: str, start: bool = True, **behaviour: Any) -> Receiver:
        r = Receiver(tmp_path, name, **behaviour)
        started.append(r)
        return r.start() if start else r

    yield make
    for r in started:
        r.stop()


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[ServerFactory]:
    """``servers(db="n.db", **env)``: a started ``loch serve``, stopped after the test."""
    started: list[LochServer] = []

    def make(db: str = "n.db", start: bool = True, **env: str) -> LochServer:
        s = webhook_server(tmp_path / db, tmp_path / f"{db}.log", env)
        started.append(s)
        return s.start() if start else s

    yield make
    for s in started:
        s.kill()


@pytest.fixture
def server(servers: ServerFactory) -> LochServer:
    """A fresh ``loch serve`` with the fast retry settings."""
    return servers()
