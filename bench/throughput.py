"""Commit throughput over HTTP against two floors measured in the same run.

A real ``loch serve`` process (one uvicorn worker, SQLite store in a temporary directory
on disk, WAL + ``synchronous=FULL``) takes commits on ``main`` from 1, 4 and 16
concurrent clients. Each commit is API v2 ``POST /trees/main@HASH/history/commit`` with
one PUT of a new ICEBERG_TABLE under a key of its own (disjoint keys, one branch),
``HASH`` being the latest hash that client thread saw.

Floors, in the same run, the cases taking turns round after round:

``config``
    the same server's trivial request rate, ``GET /api/v2/config``, same client, same
    number of connections: the price of the HTTP stack alone;
``sqlite``
    single-row SQLite transactions (``BEGIN IMMEDIATE``, one INSERT, ``COMMIT``) on a
    file in the same directory, one writer, at the store's durability settings: WAL with
    ``synchronous=FULL`` syncs the WAL on every commit, so an acknowledged transaction
    survives a process crash and a power loss (as far as the disk honours flushes).

Load generator: ``wrk`` (C, epoll, one OS thread, keep-alive connections; a Lua script
builds the commit bodies), a separate process from the server, so the client costs
little of the two cores. Without ``wrk`` the benchmark stops and says so
(``make bench`` installs it from Debian when it can).

The server is profiled with ``py-spy record --gil`` during an extra 16-client commit run
(the raw profile goes to ``bench/results/profiles/``). The server's peak RSS is reported.

Usage: ``python -m bench.throughput [--clients 1,4,16] [--seconds 4] [--rounds 5]``
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    COMMIT_LUA,
    PROFILES_DIR,
    ROOT,
    Figure,
    Server,
    WrkRun,
    log,
    machine,
    parse_known,
    peak_rss_mb,
    print_figures,
    reset_peak_rss,
    rss_mb,
    run_wrk,
    start_profile,
    summarize_profile,
    workdir,
    write_result,
    wrk_available,
)

NS = "bench"
TARGET_SHARE = 0.5


def sqlite_floor(path: Path, seconds: float) -> float:
    """Single-row write transactions per second at WAL + synchronous=FULL, one writer."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)")
        row = os.urandom(200)
        n = 0
        t0 = time.perf_counter()
        deadline = t0 + seconds
        while True:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (v) VALUES (?)", (row,))
            conn.execute("COMMIT")
            n += 1
            now = time.perf_counter()
            if now >= deadline:
                return n / (now - t0)
    finally:
        conn.close()


def create_namespace(server: Server) -> None:
    """The namespace the benchmark commits its tables under."""
    head = server.head()
    body = {
        "commitMeta": {"message": "namespace"},
        "operations": [
            {
                "type": "PUT",
                "key": {"elements": [NS]},
                "content": {"type": "NAMESPACE", "elements": [NS]},
            }
        ],
    }
    r = httpx.post(f"{server.url}/api/v2/trees/main@{head}/history/commit", json=body, timeout=30)
    r.raise_for_status()


def commit_run(server: Server, clients: int, seconds: float) -> WrkRun:
    """``clients`` connections committing new tables to ``main`` for ``seconds``."""
    env = {
        "LOCH_HEAD": server.head(),
        "LOCH_NS": NS,
        "LOCH_BRANCH": "main",
        "LOCH_PREFIX": "t" + uuid.uuid4().hex[:8] + "_",
    }
    run = run_wrk(server.url, clients, seconds, COMMIT_LUA, env)
    if run.errors:
        raise RuntimeError(f"{run.errors} commits failed: {run.stderr}")
    return run


def config_run(server: Server, clients: int, seconds: float) -> WrkRun:
    """``clients`` connections getting ``/api/v2/config`` for ``seconds``."""
    run = run_wrk(server.url + "/api/v2/config", clients, seconds)
    if run.errors:
        raise RuntimeError(f"{run.errors} config requests failed: {run.stderr}")
    return run


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__)
    p.add_argument("--clients", default="1,4,16", help="concurrent clients (comma-separated)")
    p.add_argument("--seconds", type=float, default=4.0, help="seconds per measured run")
    p.add_argument("--rounds", type=int, default=5, help="rounds (cases take turns)")
    p.add_argument("--profile-seconds", type=float, default=10.0, help="py-spy run (0: none)")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    if not wrk_available():
        log("bench.throughput: wrk not found (apt-get install wrk); skipped")
        return 1
    clients = [int(c) for c in args.clients.split(",") if c.strip()]
    started = machine()
    runs: dict[str, list[dict[str, Any]]] = {}
    floors: list[float] = []
    profile: dict[str, Any] | None = None
    with workdir("loch-bench-throughput-", args.dir) as d:
        server = Server(f"sqlite:///{d / 'loch.db'}", d / "server.log")
        try:
            create_namespace(server)
            reset_peak_rss(server.pid)
            log(f"warm-up ({max(clients)} clients) ...")
            commit_run(server, max(clients), 2)
            config_run(server, max(clients), 1)
            sqlite_floor(d / "floor.db", 1)
            for r in range(args.rounds):
                order = clients[r % len(clients) :] + clients[: r % len(clients)]
                for c in order:
                    pair = [("commit", commit_run), ("config", config_run)]
                    if r % 2:
                        pair.reverse()
                    for kind, fn in pair:
                        run = fn(server, c, args.seconds)
                        runs.setdefault(f"{kind}-{c}", []).append(asdict(run))
                        log(f"round {r + 1} {kind} c={c}: {run.rate:.0f}/s")
                floors.append(sqlite_floor(d / "floor.db", args.seconds))
                log(f"round {r + 1} sqlite: {floors[-1]:.0f} tx/s")
            landed = sum(
                x["requests"] for k, v in runs.items() if k.startswith("commit") for x in v
            )
            server_peak = peak_rss_mb(server.pid)
            server_rss = rss_mb(server.pid)
            depth = server.commits()
            if args.profile_seconds > 0:
                log("profiling 16-client commits ...")
                raw = PROFILES_DIR / "commit-16.txt"
                spy = start_profile(server.pid, args.profile_seconds, raw)
                time.sleep(0.5)
                prun = commit_run(server, 16, args.profile_seconds + 1)
                spy.wait(60)
                if raw.exists():
                    profile = {
                        "raw": str(raw.relative_to(ROOT)),
                        "commits_per_s_while_profiled": prun.rate,
                        **summarize_profile(raw),
                    }
        finally:
            server.stop()
    med = {k: statistics.median(x["rate"] for x in v) for k, v in runs.items()}
    sqlite_med = statistics.median(floors)
    figures: list[Figure] = []
    for c in clients:
        commits, config = med[f"commit-{c}"], med[f"config-{c}"]
        floor = min(config, sqlite_med)
        last = c == max(clients)
        figures.append(
            Figure(
                f"commits/s over HTTP, {c} client{'s' if c > 1 else ''}",
                commits,
                "commits/s",
                f"GET /api/v2/config, {c} client{'s' if c > 1 else ''}",
                config,
                peak_rss_mb=server_peak,
            )
        )
        figures.append(
            Figure(
                f"commits/s over HTTP, {c} client{'s' if c > 1 else ''} vs SQLite",
                commits,
                "commits/s",
                "single-row SQLite transactions (WAL, synchronous=FULL)",
                sqlite_med,
            )
        )
        if last:
            figures.append(
                Figure(
                    f"commits/s, {c} clients, share of the lower floor",
                    commits,
                    "commits/s",
                    "lower floor (config rate or SQLite tx/s)",
                    floor,
                    target=f">= {TARGET_SHARE:.0%} of the lower floor",
                    met=commits / floor >= TARGET_SHARE,
                    peak_rss_mb=server_peak,
                )
            )
    details = {
        "medians_per_s": {**med, "sqlite": sqlite_med},
        "sqlite_floor_runs": floors,
        "runs": runs,
        "commits_landed_counted": landed,
        "branch_commits_at_end": depth,
        "server_peak_rss_mb": server_peak,
        "server_rss_mb_at_end": server_rss,
        "load_generator": "wrk 1 thread, keep-alive connections, Lua-built commit bodies",
        "durability": "WAL + synchronous=FULL: survives process crash and power loss",
        "profile": profile,
    }
    path = write_result(
        "throughput",
        "bench.throughput",
        argv,
        started,
        {k: v for k, v in vars(args).items()},
        figures,
        details,
        args.out,
    )
    print_figures(figures)
    if profile:
        print("top self frames (share of GIL-holding samples):")
        for f, s in profile["self"][:10]:
            print(f"  {s:6.1%}  {f}")
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
