"""Webhook delivery: a background dispatcher that POSTs outbox events to subscribers.

At-least-once and in commit order per notification: an event is fanned out into one
delivery per matching notification (atomically with the outbox cursor), and each
notification's oldest pending delivery is attempted until it is delivered or given up.
Attempts run concurrently across notifications, each under a lease, so a slow or dead
receiver delays only itself, and a dispatcher that dies mid-attempt has its claim taken
over when the lease runs out. Retries back off exponentially with full jitter on 5xx,
408, 429, timeouts and connection errors; other answers fail the delivery at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import random
import threading
import time
import uuid
from dataclasses import dataclass

import httpx

from loch.errors import LochError
from loch.events.store import Claim, DeliveryStatus, NotificationStore, Outcome
from loch.store import Persist

__all__ = ["Dispatcher", "DispatcherSettings", "sign"]

log = logging.getLogger("loch.events")

SIGNATURE_HEADER = "Loch-Signature"
USER_AGENT = "loch-webhooks/0.1"


def sign(secret: str, body: bytes) -> str:
    """The signature header value of a body: ``sha256=<hex HMAC-SHA256>``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class DispatcherSettings:
    """Timeouts and retry policy of webhook deliveries."""

    timeout: float = 10.0
    give_up_after: float = 24 * 3600.0
    base_backoff: float = 1.0
    max_backoff: float = 300.0
    poll_interval: float = 0.2
    batch: int = 100

    @property
    def lease_seconds(self) -> float:
        """How long a claim is held: a whole attempt plus margin."""
        return 2 * self.timeout + 5.0

    def backoff(self, attempt: int) -> float:
        """Delay before retry number ``attempt`` (1-based): exponential, full jitter."""
        ceiling = min(self.max_backoff, self.base_backoff * 2 ** max(0, attempt - 1))
        return random.uniform(ceiling / 2, ceiling)


class Dispatcher:
    """Runs deliveries on an asyncio loop in a daemon thread."""

    def __init__(
        self,
        persist: Persist,
        store: NotificationStore,
        settings: DispatcherSettings | None = None,
    ) -> None:
        self.persist = persist
        self.store = store
        self.settings = settings or DispatcherSettings()
        self.owner = f"dispatcher-{uuid.uuid4()}"
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._stopping = False
        self._started = threading.Event()
        self._watching = True

    # -- lifecycle -------------------------------------------------------------------------

    def start(self) -> None:
        """Start delivering in the background."""
        self._thread = threading.Thread(target=self._run, name="loch-webhooks", daemon=True)
        self._thread.start()
        self._started.wait(5)

    def wake(self) -> None:
        """Look for new events now (called after a reference change)."""
        loop, event = self._loop, self._wakeup
        if loop is not None and event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop shut down meanwhile
                loop.call_soon_threadsafe(event.set)

    def changed(self) -> None:
        """A reference changed: look for new events now, unless there is no notification
        (then the next poll notices one created meanwhile, e.g. through another replica;
        one created here wakes the dispatcher itself)."""
        if self._watching:
            self.wake()

    def subscribed(self) -> None:
        """A notification was created here: follow reference changes from now on."""
        self._watching = True
        self.wake()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop, letting attempts in flight finish for up to ``timeout`` seconds.

        Attempts still running are abandoned; their leases expire and they are retried
        later (deliveries are at-least-once).
        """
        self._stopping = True
        self.wake()
        if self._thread is not None:
            self._thread.join(timeout + 2)

    def _run(self) -> None:
        asyncio.run(self._main())

    # -- loop ------------------------------------------------------------------------------

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wakeup = asyncio.Event()
        self._started.set()
        inflight: set[asyncio.Task[None]] = set()
        limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)
        async with httpx.AsyncClient(
            timeout=self.settings.timeout, follow_redirects=False, limits=limits
        ) as http:
            while not self._stopping:
                try:
                    await asyncio.to_thread(self.fan_out)
                    claims = await asyncio.to_thread(
                        self.store.claim_due,
                        time.time(),
                        self.settings.lease_seconds,
                        self.settings.batch,
                        self.owner,
                    )
                except LochError as e:
                    log.warning("Webhook dispatcher cannot reach the store (%s); retrying", e)
                    claims = []
                    await asyncio.sleep(1.0)
                except Exception:
                    log.exception("Webhook dispatcher could not read the store; retrying")
                    claims = []
                    await asyncio.sleep(1.0)
                for claim in claims:
                    task = asyncio.create_task(self._deliver(http, claim))
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), self.settings.poll_interval)
                self._wakeup.clear()
            if inflight:
                _, pending = await asyncio.wait(inflight, timeout=self.settings.timeout)
                for task in pending:
                    task.cancel()

    def fan_out(self) -> int:
        """Turn new outbox events into deliveries; returns how many were created."""
        self._watching = bool(self.store.list_all())
        return self.store.fan_out_new(self.persist) if self._watching else 0

    async def _deliver(self, http: httpx.AsyncClient, claim: Claim) -> None:
        d, n = claim.delivery, claim.notification
        attempt = d.attempts + 1
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Loch-Event-Id": d.event_id,
            "Loch-Event-Type": d.event_type,
            "Loch-Delivery-Id": str(d.id),
            "Loch-Delivery-Attempt": str(attempt),
        }
        if n.secret:
            headers[SIGNATURE_HEADER] = sign(n.secret, claim.payload)
        started = time.time()
        t0 = time.monotonic()
        code: int | None = None
        error: str | None = None
        retry = False
        try:
            resp = await http.post(n.url, content=claim.payload, headers=headers)
            code = resp.status_code
            if not 200 <= code < 300:
                retry = code >= 500 or code in (408, 429)
                error = f"HTTP {code}"
        except httpx.TimeoutException:
            retry, error = True, f"timed out after {self.settings.timeout:g} s"
        except httpx.HTTPError as e:
            retry, error = True, f"{type(e).__name__}: {e}"
        duration = (time.monotonic() - t0) * 1000
        now = time.time()
        if error is None:
            outcome = Outcome(DeliveryStatus.DELIVERED, code, None, duration)
        elif retry and now - d.created_at < self.settings.give_up_after:
            outcome = Outcome(
                DeliveryStatus.PENDING,
                code,
                error,
                duration,
                retry_at=now + self.settings.backoff(attempt),
            )
        else:
            if retry:
                error = f"gave up after {attempt} attempts: {error}"
            outcome = Outcome(DeliveryStatus.FAILED, code, error, duration)
        try:
            await asyncio.to_thread(self.store.record, d.id, self.owner, started, outcome)
        except Exception:
            log.exception("Could not record webhook delivery %s; it will be retried", d.id)
        if self._wakeup is not None:
            self._wakeup.set()
            if outcome.retry_at is not None and self._loop is not None:
                # look again when the retry is due, not only at the next poll
                self._loop.call_later(max(0.0, outcome.retry_at - time.time()), self._wakeup.set)
