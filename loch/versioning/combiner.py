"""Flat combining: concurrent requests on one key are processed in batches by one thread.

Concurrent commits to a branch would otherwise each build against the same HEAD, and all
but one would lose the compare-and-swap and start over. Instead, the first caller on a
key becomes the *leader*: it takes every request queued for that key, processes them as
one batch (one after the other, each on the result of the previous), and publishes the
batch at once. Waiting callers get their own result or error. When more requests
arrived meanwhile, leadership passes to the oldest of them, so no caller waits for
batches that came after its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = ["Combiner", "Job"]

P = TypeVar("P")


@dataclass(eq=False)
class Job(Generic[P]):
    """One request: its payload, and its result or error once processed."""

    payload: P
    result: Any = None
    error: BaseException | None = None
    finished: bool = False
    _wake: threading.Event = field(default_factory=threading.Event)
    _promoted: bool = False


@dataclass(eq=False)
class _Lane:
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[Job[Any]] = field(default_factory=list)
    busy: bool = False


class Combiner(Generic[P]):
    """Runs ``process(key, jobs)`` on batches of jobs submitted for the same key.

    ``process`` must set ``result`` or ``error`` on every job; if it raises, the error
    is given to every job of the batch.
    """

    def __init__(
        self, process: Callable[[Hashable, Sequence[Job[P]]], None], max_batch: int = 64
    ) -> None:
        self._process = process
        self.max_batch = max_batch
        self._lanes: dict[Hashable, _Lane] = {}
        self._lanes_lock = threading.Lock()

    def _lane(self, key: Hashable) -> _Lane:
        with self._lanes_lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane()
            return lane

    def submit(self, key: Hashable, payload: P) -> Any:
        """Process ``payload`` (possibly in another thread's batch); return its result."""
        job: Job[P] = Job(payload)
        lane = self._lane(key)
        with lane.lock:
            lane.pending.append(job)
            lead = not lane.busy
            lane.busy = True
        while not job.finished:
            if lead:
                self._drain(key, lane)
                break
            job._wake.wait()
            job._wake.clear()
            if job._promoted:
                job._promoted = False
                lead = True
        if job.error is not None:
            raise job.error
        return job.result

    def _drain(self, key: Hashable, lane: _Lane) -> None:
        """Process one batch (it holds the leader's own job), then hand over or stop."""
        with lane.lock:
            batch = lane.pending[: self.max_batch]
            del lane.pending[: self.max_batch]
        try:
            self._process(key, batch)
        except BaseException as e:  # every caller of the batch must learn of it
            for j in batch:
                if j.result is None and j.error is None:
                    j.error = e
        for j in batch:
            j.finished = True
            j._wake.set()
        with lane.lock:
            if not lane.pending:
                lane.busy = False
                return
            nxt = lane.pending[0]
            nxt._promoted = True
            nxt._wake.set()
