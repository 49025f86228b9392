"""A throwaway PostgreSQL cluster for tests: initdb in a temporary directory, started on a
free port as a non-root user, removed when stopped."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from loch.testing.server import free_port

__all__ = ["PostgresCluster", "find_pg_bin"]


def find_pg_bin() -> Path | None:
    """The directory of the newest installed ``initdb``/``pg_ctl``, or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


class PostgresCluster:
    """Start with :meth:`start`, use :attr:`url`, stop with :meth:`stop`."""

    def __init__(self, bin_dir: Path | None = None, user: str = "postgres") -> None:
        found = bin_dir or find_pg_bin()
        if found is None:
            raise RuntimeError("PostgreSQL is not installed (no initdb found)")
        self.bin_dir = found
        self.os_user = user if os.geteuid() == 0 else None
        self.dir = Path(tempfile.mkdtemp(prefix="loch-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.url = f"postgresql://loch@127.0.0.1:{self.port}/loch"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = list(args)
        if self.os_user is not None:
            cmd = ["runuser", "-u", self.os_user, "--", *cmd]
        return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=120)

    def start(self) -> PostgresCluster:
        """initdb, start on the free port, create role and database ``loch``."""
        if self.os_user is not None:
            shutil.chown(self.dir, self.os_user)
        self._run(
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "loch",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        )
        self._pg_ctl_start()
        self._run(
            str(self.bin_dir / "createdb"),
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            "loch",
            "loch",
        )
        return self

    def restart(self, down_seconds: float = 0.0) -> None:
        """Stop (fast), wait, and start again on the same port and data."""
        self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        time.sleep(down_seconds)
        self._pg_ctl_start()

    def _pg_ctl_start(self) -> None:
        self._run(
            str(self.bin_dir / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.dir / "log"),
            "-w",
            "-o",
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 -c fsync=on "
            "-c max_connections=200",
            "start",
        )

    def stop(self) -> None:
        """Stop the server and remove its files."""
        if self.data.exists():
            self._run(
                str(self.bin_dir / "pg_ctl"),
                "-D",
                str(self.data),
                "-m",
                "immediate",
                "stop",
                check=False,
            )
        shutil.rmtree(self.dir, ignore_errors=True)
