"""A real ``loch serve`` process for tests: start, wait until it serves, stop, read its log.

:class:`LochServer` runs ``loch serve --port P --store URL`` as a child process with its
output appended to a log file. :meth:`LochServer.start` returns once the server answers
``/healthz`` (or another readiness path), and fails with the end of the log if the
process exits first or does not answer in time. The process can be stopped gracefully
(SIGTERM; :meth:`~LochServer.stop` returns the exit status), killed (SIGKILL) and
started again on the same store and log, so that crash and restart tests need nothing
else. Used as a context manager it is started on entry and stopped on exit::

    with LochServer(f"sqlite:///{tmp_path / 'loch.db'}", tmp_path / "server.log") as server:
        httpx.get(f"{server.url}/api/v2/config")

Ports are never fixed: by default :func:`free_port` picks one once and every start of
the server uses it; with ``port=0`` the server binds a port of the system's choosing at
each start and the port is read from its log (no window in which another process could
take it).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Self

import httpx

__all__ = ["LochServer", "LochServerError", "end_process", "free_port", "loch_executable"]

_LISTENING = re.compile(r"Uvicorn running on http://[^\s:]+:(\d+)")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (the kernel's pick for port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def loch_executable() -> str:
    """The ``loch`` script of the running interpreter's environment."""
    return str(Path(sys.prefix) / "bin" / "loch")


def end_process(proc: subprocess.Popen[bytes], sig: int, timeout: float) -> int:
    """Send ``sig`` to ``proc`` unless it has exited, and reap it; its exit status.

    If it has not exited after ``timeout`` seconds it is killed (status ``-SIGKILL``).
    """
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


class LochServerError(AssertionError):
    """``loch serve`` exited before it served, or did not serve in time.

    The message ends with the tail of the server's log. It is an :class:`AssertionError`
    so that a test or fixture that meets it fails like on any other broken expectation.
    """


class LochServer:
    """A ``loch serve`` child process on a loopback port, restartable on the same store.

    Args:
        store: the ``--store`` URL (``sqlite:///…``, ``memory://``, ``postgresql://…``).
        log_path: where the process's stdout and stderr are appended, over all its runs.
        port: ``None`` (default): a :func:`free_port` picked now and kept across restarts
            (a restarted server answers at the same :attr:`url`). ``0``: the server binds
            port 0 at each start and :attr:`port` is read from its log, so it may change
            on a restart (needs ``log_level`` info or lower). Any other number: that
            port (tests should not fix ports).
        host: the ``--host`` option; ``None`` leaves it out (``loch serve`` then listens
            on 127.0.0.1 unless ``LOCH_HOST`` says otherwise).
        log_level: the ``--log-level`` option; ``None`` leaves it out (``info``).
        env: changes to the inherited environment of the process: a ``None`` value
            removes the variable. Read at each start, so a change to :attr:`env` applies
            from the next start on.
        name: what messages call the server.
        ready_path: the path that must answer 200 for the server to count as ready.
        ready_timeout: default seconds :meth:`start` waits for the server to be ready.
        stop_timeout: default seconds :meth:`stop` waits after SIGTERM before it kills.
        interval: seconds between two readiness checks.
        executable: the ``loch`` script to run (default: :func:`loch_executable`).
    """

    def __init__(
        self,
        store: str,
        log_path: Path | str,
        *,
        port: int | None = None,
        host: str | None = None,
        log_level: str | None = None,
        env: Mapping[str, str | None] | None = None,
        name: str = "loch serve",
        ready_path: str = "/healthz",
        ready_timeout: float = 30.0,
        stop_timeout: float = 15.0,
        interval: float = 0.05,
        executable: str | None = None,
    ) -> None:
        if port == 0 and log_level not in (None, "info", "debug", "trace"):
            raise ValueError("port=0 reads the port from uvicorn's info log: log_level too high")
        self.store = store
        self.log_path = Path(log_path)
        self.requested_port = free_port(host or "127.0.0.1") if port is None else port
        self.port = self.requested_port
        """The port the server listens on (0 until known with ``port=0``)."""
        self.host = host
        self.log_level = log_level
        self.env: dict[str, str | None] = dict(env or {})
        self.name = name
        self.ready_path = ready_path
        self.ready_timeout = ready_timeout
        self.stop_timeout = stop_timeout
        self.interval = interval
        self.executable = executable or loch_executable()
        self.proc: subprocess.Popen[bytes] | None = None
        """The process of the current (or last) run; None before the first start."""
        self.starts = 0
        """How many times the process was spawned."""
        self._log_offset = 0

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<LochServer {self.name!r} {self.url} {self.store} {state}>"

    # -- addresses and state

    @property
    def url(self) -> str:
        """The server root, ``http://HOST:PORT`` (no trailing slash)."""
        return f"http://{self.host or '127.0.0.1'}:{self.port}"

    @property
    def running(self) -> bool:
        """Whether the process was started and has not exited."""
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The process id while it runs, else None."""
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def command(self) -> list[str]:
        """The command line of the next start."""
        cmd = [self.executable, "serve"]
        if self.host is not None:
            cmd += ["--host", self.host]
        cmd += ["--port", str(self.requested_port), "--store", self.store]
        if self.log_level is not None:
            cmd += ["--log-level", self.log_level]
        return cmd

    def environment(self) -> dict[str, str]:
        """The environment of the next start: this process's, changed by :attr:`env`."""
        env = dict(os.environ)
        for name, value in self.env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value
        return env

    # -- the log

    def log(self, since: int = 0) -> str:
        """What the server printed over all its runs (from byte offset ``since``)."""
        try:
            with self.log_path.open("rb") as f:
                f.seek(since)
                return f.read().decode(errors="replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        """The log's size in bytes now: an offset for :meth:`log` to read what comes next."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_tail(self, chars: int = 4000) -> str:
        """The last ``chars`` characters of the log."""
        return self.log()[-chars:]

    # -- starting

    def spawn(self) -> Self:
        """Start the process and return at once (see :meth:`wait_ready`)."""
        if self.running:
            raise RuntimeError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_size()
        if self.requested_port == 0:
            self.port = 0
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.environment()
            )
        self.starts += 1
        return self

    def ready(self) -> bool:
        """Whether the server answers 200 at :attr:`ready_path` now.

        Raises :class:`LochServerError` if the process has exited (or was never started).
        """
        proc = self.proc
        if proc is None:
            raise LochServerError(f"{self.name} was not started")
        if proc.poll() is not None:
            raise LochServerError(
                f"{self.name} exited with {proc.returncode} before it served; "
                f"log tail ({self.log_path}):\n{self.log_tail()}"
            )
        if self.port == 0:
            found = _LISTENING.search(self.log(self._log_offset))
            if found is None:
                return False
            self.port = int(found.group(1))
        try:
            return httpx.get(self.url + self.ready_path, timeout=1.0).status_code == 200
        except httpx.TransportError:
            return False

    def wait_ready(self, timeout: float | None = None) -> Self:
        """Wait until :meth:`ready`; after ``timeout`` seconds (default
        :attr:`ready_timeout`) kill the process and raise :class:`LochServerError` with
        the log tail. The process is killed too if it exits or the wait is interrupted."""
        timeout = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        try:
            while not self.ready():
                if time.monotonic() > deadline:
                    raise LochServerError(
                        f"{self.name} did not answer {self.ready_path} at {self.url} within "
                        f"{timeout:g} s; log tail ({self.log_path}):\n{self.log_tail()}"
                    )
                time.sleep(self.interval)
        except BaseException:
            self.kill()
            raise
        return self

    def start(self, timeout: float | None = None) -> Self:
        """Spawn the process and wait until it is ready (see :meth:`wait_ready`)."""
        return self.spawn().wait_ready(timeout)

    # -- stopping

    def stop(self, timeout: float | None = None) -> int | None:
        """SIGTERM (a graceful shutdown) and wait; the exit status (0 for a clean stop).

        After ``timeout`` seconds (default :attr:`stop_timeout`) the process is killed
        and the status is ``-SIGKILL``. An exited process is only reaped; None if it was
        never started.
        """
        return self._end(signal.SIGTERM, self.stop_timeout if timeout is None else timeout)

    def kill(self) -> int | None:
        """SIGKILL (no shutdown at all) and reap; the exit status, None if never started."""
        return self._end(signal.SIGKILL, 10.0)

    def restart(self, timeout: float | None = None) -> Self:
        """:meth:`stop`, then :meth:`start` again on the same store and log."""
        self.stop()
        return self.start(timeout)

    def _end(self, sig: int, timeout: float) -> int | None:
        return None if self.proc is None else end_process(self.proc, sig, timeout)

    # -- a context manager

    def __enter__(self) -> Self:
        """Start (unless running) and return the server."""
        return self if self.running else self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the server (SIGTERM, then SIGKILL after :attr:`stop_timeout`)."""
        self.stop()
