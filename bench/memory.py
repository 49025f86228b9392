"""Server memory while serving a 1M-key repository under a long commit load.

A branch ``main`` of ``--keys`` (1,000,000) ICEBERG_TABLE keys is built through the
version store exactly as :mod:`bench.scale` builds it (1,000 namespaces of 1,000
tables, batched commits) in an SQLite file on disk. A ``loch serve`` process then takes
``--commits`` (100,000) commits from 16 ``wrk`` connections (a new table per commit,
disjoint keys, namespace ``ns000``), in segments of ``--segment`` seconds; after each
segment the commits landed so far and the server's resident set (``VmRSS``) are noted.

Reported: RSS after the first segment, at the 10th thousand commit and at the end
(100th thousand), the growth between those two, and the peak (``VmHWM``). The object
cache is bounded by the server's setting (``LOCH_CACHE_MB``, 96 MB by default, since
41edc13; ``LOCH_CACHE_SIZE``, 50,000 objects, before), which ``--cache-mb`` overrides.
Targets: peak under 300 MB, and no growth between the 10th and the
100th thousand commits (within 5% — the allocator's noise).

This takes 5 to 12 minutes (1 to 3 to build, 3 to 9 to commit) and is not part of
``make bench``: run ``python -m bench.memory`` on its own.

Usage: ``python -m bench.memory [--keys 1000000] [--commits 100000] [--segment 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.common import (
    COMMIT_LUA,
    Figure,
    log,
    machine,
    parse_known,
    peak_rss_mb,
    print_figures,
    rss_mb,
    run_wrk,
    serving,
    workdir,
    write_result,
    wrk_available,
)
from bench.scale import Bench

RSS_LIMIT_MB = 300.0
FLAT_TOLERANCE = 0.05


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--keys", type=int, default=1_000_000, help="keys on main")
    p.add_argument("--commits", type=int, default=100_000, help="commits of the soak")
    p.add_argument("--clients", type=int, default=16, help="wrk connections")
    p.add_argument("--segment", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument(
        "--cache-mb", type=int, default=None, help="LOCH_CACHE_MB (default: the server's)"
    )
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def rss_at(samples: list[dict[str, Any]], commits: int) -> float:
    """RSS of the first sample taken at or after ``commits`` commits (else the last)."""
    for s in samples:
        if s["commits"] >= commits:
            return float(s["rss_mb"])
    return float(samples[-1]["rss_mb"])


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    if not wrk_available():
        log("bench.memory: wrk not found (apt-get install wrk); skipped")
        return 1
    started = machine()
    env = {} if args.cache_mb is None else {"LOCH_CACHE_MB": str(args.cache_mb)}
    samples: list[dict[str, Any]] = []
    with workdir("loch-bench-memory-", args.dir) as d:
        b = Bench(d, args.keys, 20_000, 1)
        log(f"building {args.keys:,} keys ...")
        build_commits, build_s = b.build()
        log(f"built in {build_s:.0f} s; serving and committing ...")
        with serving(b.url, d / "server.log", env) as server:
            start_rss = rss_mb(server.pid)
            head = server.head()
            total = 0
            t0 = time.monotonic()
            while total < args.commits:
                run = run_wrk(
                    server.url,
                    args.clients,
                    args.segment,
                    COMMIT_LUA,
                    {
                        "LOCH_HEAD": head,
                        "LOCH_NS": "ns000",
                        "LOCH_BRANCH": "main",
                        "LOCH_PREFIX": "m" + uuid.uuid4().hex[:8] + "_",
                    },
                )
                if run.errors:
                    raise RuntimeError(f"{run.errors} commits failed: {run.stderr}")
                total += run.requests
                head = server.head()
                samples.append(
                    {
                        "commits": total,
                        "seconds": time.monotonic() - t0,
                        "rate": run.rate,
                        "rss_mb": rss_mb(server.pid),
                        "p99_ms": run.p99_ms,
                    }
                )
                log(f"  {total:,} commits, {run.rate:.0f}/s, RSS {samples[-1]['rss_mb']:.0f} MB")
            peak = peak_rss_mb(server.pid)
            soak_s = time.monotonic() - t0
    first = samples[0]["rss_mb"]
    at10k = rss_at(samples, min(10_000, args.commits // 10))
    end = samples[-1]["rss_mb"]
    growth = end / at10k - 1
    k10 = f"{min(10_000, args.commits // 10) // 1000}k"
    kend = f"{samples[-1]['commits'] // 1000}k"
    keys = f"{args.keys // 1_000_000}M" if args.keys >= 1_000_000 else f"{args.keys:,}"
    figures = [
        Figure(
            f"server peak RSS, {keys} keys, {kend} commits",
            peak,
            "MB",
            "RSS after start (repository opened, idle)",
            start_rss,
            target=f"< {RSS_LIMIT_MB:.0f} MB",
            met=peak < RSS_LIMIT_MB,
            peak_rss_mb=peak,
        ),
        Figure(
            f"server RSS at {kend} commits",
            end,
            "MB",
            f"RSS at {k10} commits",
            at10k,
            target=f"no growth (within {FLAT_TOLERANCE:.0%})",
            met=growth <= FLAT_TOLERANCE,
            peak_rss_mb=peak,
        ),
        Figure(
            f"commits/s during the soak ({args.clients} clients, {keys} keys)",
            samples[-1]["commits"] / soak_s,
            "commits/s",
        ),
        Figure(
            f"build of {keys} keys through VersionStore",
            build_s,
            "s",
            note=f"{build_commits} commits of 20,000 puts",
        ),
    ]
    details = {
        "samples": samples,
        "rss_first_segment_mb": first,
        "rss_start_mb": start_rss,
        "growth_10k_to_end": growth,
        "cache_mb": args.cache_mb or "server default",
        "soak_s": soak_s,
    }
    path = write_result(
        "memory", "bench.memory", argv, started, vars(args), figures, details, args.out
    )
    arenas = os.environ.get("MALLOC_ARENA_MAX")
    if arenas:  # the server inherits it: part of the command
        report = json.loads(path.read_text())
        report["command"] = f"MALLOC_ARENA_MAX={arenas} {report['command']}"
        report["settings"]["malloc_arena_max"] = arenas
        path.write_text(json.dumps(report, indent=2) + "\n")
    print_figures(figures)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
