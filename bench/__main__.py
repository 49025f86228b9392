"""Run every benchmark, then regenerate ``docs/benchmarks.md``: ``python -m bench [ARGS]``.

``BENCHMARKS`` is the registry: each entry is a benchmark module's ``main``. Each one runs
in a process of its own (``python -m <module> ARGS``), so that one benchmark's memory
peak or crash does not touch the next; a failed benchmark is reported and the others
still run. Arguments go to every benchmark, each ignoring those it does not know.

Example: ``python -m bench --sizes 1000,100000`` for a quicker scale run.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable

from bench import history, peer, refs, replicas, report, scale, spark_catalog, throughput, webhooks

BENCHMARKS: list[Callable[[list[str] | None], int]] = [
    throughput.main,
    scale.main,
    history.main,
    refs.main,
    peer.main,
    webhooks.main,
    replicas.main,
    spark_catalog.main,
]


def main(argv: list[str] | None = None) -> int:
    """Run the registered benchmarks, then the report; non-zero if any failed."""
    args = list(argv or [])
    failed: list[str] = []
    started = time.monotonic()
    for bench in BENCHMARKS:
        module = bench.__module__
        t0 = time.monotonic()
        print(f"== {module}", flush=True)
        rc = subprocess.run([sys.executable, "-m", module, *args], check=False).returncode
        print(f"== {module}: exit {rc}, {time.monotonic() - t0:.0f} s", flush=True)
        if rc:
            failed.append(module)
    report.main([])
    print(f"all benchmarks: {time.monotonic() - started:.0f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
