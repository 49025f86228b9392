"""Flat combining: concurrent requests on one key are processed in batches by one thread.

Concurrent commits to a branch would otherwise each build against the same HEAD, and all
but one would lose the compare-and-swap and start over. Instead, requests queue per key
and one thread at a time, the *leader*, takes every request queued for that key,
processes them as one batch (one after the other, each on the result of the previous),
and publishes the batch at once. Waiting callers get their own result or error.

Two kinds of callers share a queue. A thread calling :meth:`Combiner.submit` leads
itself when the queue is idle, and otherwise sleeps until its job is done or leadership
passes to it (the oldest waiting job is promoted, so no caller waits for batches that
came after its own). A coroutine calling :meth:`Combiner.submit_async` never blocks its
event loop: batches holding only such jobs run on the combiner's own worker threads, and
each batch is settled on the loop with one hand-off, instead of one worker thread per
request.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
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
    _wake: threading.Event | None = None
    _future: asyncio.Future[Any] | None = None
    _promoted: bool = False


@dataclass(eq=False)
class _Lane:
    lock: threading.Lock = field(default_factory=threading.Lock)
    pending: list[Job[Any]] = field(default_factory=list)
    busy: bool = False


def _settle(jobs: list[Job[Any]]) -> None:
    """On the event loop: hand finished jobs to their awaiting coroutines."""
    for j in jobs:
        fut = j._future
        if fut is None or fut.done():  # a cancelled request: the work stands regardless
            continue
        if j.error is not None:
            fut.set_exception(j.error)
        else:
            fut.set_result(j.result)


class Combiner(Generic[P]):
    """Runs ``process(key, jobs)`` on batches of jobs submitted for the same key.

    ``process`` must set ``result`` or ``error`` on every job; if it raises, the error
    is given to every job of the batch.
    """

    def __init__(
        self,
        process: Callable[[Hashable, Sequence[Job[P]]], None],
        max_batch: int = 64,
        workers: int = 4,
    ) -> None:
        self._process = process
        self.max_batch = max_batch
        self._lanes: dict[Hashable, _Lane] = {}
        self._lanes_lock = threading.Lock()
        self._workers = workers
        self._executor: ThreadPoolExecutor | None = None

    def _lane(self, key: Hashable) -> _Lane:
        lane = self._lanes.get(key)  # lanes are never removed: no lock needed to find one
        if lane is not None:
            return lane
        with self._lanes_lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = _Lane()
            return lane

    def _pool(self) -> ThreadPoolExecutor:
        with self._lanes_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(
                    self._workers, thread_name_prefix="loch-combiner"
                )
            return self._executor

    def close(self) -> None:
        """Stop the worker threads once queued batches are done."""
        with self._lanes_lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True)

    def submit(self, key: Hashable, payload: P) -> Any:
        """Process ``payload`` (possibly in another thread's batch); return its result."""
        job: Job[P] = Job(payload, _wake=threading.Event())
        assert job._wake is not None
        lane = self._lane(key)
        with lane.lock:
            lane.pending.append(job)
            lead = not lane.busy
            lane.busy = True
        while not job.finished:
            if lead:
                self._lead(key, lane, worker=False)
                break
            job._wake.wait()
            job._wake.clear()
            if job._promoted:
                job._promoted = False
                lead = True
        if job.error is not None:
            raise job.error
        return job.result

    async def submit_async(self, key: Hashable, payload: P) -> Any:
        """Like :meth:`submit`, awaited on an event loop that it never blocks."""
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        job: Job[P] = Job(payload, _future=fut)
        lane = self._lane(key)
        with lane.lock:
            lane.pending.append(job)
            start = not lane.busy
            lane.busy = True
        if start:
            self._pool().submit(self._lead, key, lane, True)
        return await fut

    def _lead(self, key: Hashable, lane: _Lane, worker: bool) -> None:
        """Process batches while this thread leads ``lane``, then hand over or stop.

        A worker thread goes on with the next batch as long as it holds only jobs of
        coroutines; a waiting thread's job is promoted to lead its own batch, and a
        calling thread hands batches of coroutines' jobs to a worker.
        """
        while True:
            self._drain(key, lane)
            with lane.lock:
                if not lane.pending:
                    lane.busy = False
                    return
                nxt = lane.pending[0]
                if nxt._wake is not None:
                    nxt._promoted = True
                    nxt._wake.set()
                    return
            if not worker:
                self._pool().submit(self._lead, key, lane, True)
                return

    def _drain(self, key: Hashable, lane: _Lane) -> None:
        """Process one batch: the oldest pending jobs, up to ``max_batch``."""
        with lane.lock:
            batch = lane.pending[: self.max_batch]
            del lane.pending[: self.max_batch]
        try:
            self._process(key, batch)
        except BaseException as e:  # every caller of the batch must learn of it
            for j in batch:
                if j.result is None and j.error is None:
                    j.error = e
        by_loop: dict[asyncio.AbstractEventLoop, list[Job[Any]]] = {}
        for j in batch:
            j.finished = True
            if j._wake is not None:
                j._wake.set()
            elif j._future is not None:
                by_loop.setdefault(j._future.get_loop(), []).append(j)
        for loop, jobs in by_loop.items():
            # A closed loop raises RuntimeError: nobody awaits these jobs any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, jobs)
