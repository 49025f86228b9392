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

What grows is attributed from outside the process after every segment: threads
(``/proc/<pid>/task``), ``RssAnon``/``RssFile`` (``/proc/<pid>/status``), and the
resident memory of each kind of mapping in ``/proc/<pid>/smaps``: the main malloc arena
(``[heap]``), glibc's per-thread malloc arenas (64 MiB-aligned heaps: SQLite's page
caches and large Python objects allocated off the main thread), other anonymous memory
(Python's object allocator arenas, large blocks malloc maps on their own, thread
stacks), file mappings (code), and the ``-shm`` mapping of the WAL index; plus the size
of the ``-wal`` file. The report compares them at the 10th thousand commit, at the end
and after the extra commits below.

The server holds bounded caches that a commit soak fills at different speeds: the SQLite
writer's page cache (32 MiB) and the object cache fill within the first few thousand
commits (the readers' 4 MiB caches stay small: commits read through the object cache,
and the threads, hence reader connections, do not grow), and
:func:`loch.versioning.index.key_height`'s ``lru_cache`` holds 4,096 keys (since a352c23).
Before, it held 65,536 keys (key tuples included, outside ``LOCH_CACHE_MB``, ~20 MB), and
every soak commit adds one key it has not hashed yet: it was full only after 65,536
commits, and the dict behind it was resized once more when 87,381 keys (2/3 of its
131,072 slots) had gone in, so the 10k-to-100k window included that cache filling
(measured in 147b19d: +21%). An additional figure, kept apart from the target above,
continues the same soak for ``--extra-commits`` (50,000) commits from the first sample
at or after ``--full-after`` (90,000) commits, once every bounded cache is surely full
(they were with the old cache too), and reports the growth over those commits (within
5%: flat).

This takes 6 to 16 minutes (1 to 3 to build, 5 to 13 to commit) and is not part of
``make bench``: run ``python -m bench.memory`` on its own.

Usage: ``python -m bench.memory [--keys 1000000] [--commits 100000] [--segment 5]
[--extra-commits 50000] [--full-after 90000]``
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
    Server,
    fmt,
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
from loch.versioning.index import key_height

RSS_LIMIT_MB = 300.0
FLAT_TOLERANCE = 0.05
MIB = 1024 * 1024
# glibc's per-thread malloc heaps are reserved as HEAP_MAX_SIZE (64 MiB on 64-bit)
# regions aligned on their size: the used part is read-write, the rest PROT_NONE.
ARENA_HEAP = 64 * MIB
KEY_HEIGHT_KEYS = key_height.cache_info().maxsize or 0

# What each sample attributes, in the order reported (MiB unless said otherwise).
PARTS = {
    "rss_mb": "RSS (VmRSS)",
    "rss_anon_mb": "anonymous (RssAnon)",
    "rss_file_mb": "file-backed (RssFile)",
    "threads": "threads (/proc/<pid>/task)",
    "heap_mb": "main malloc arena ([heap])",
    "thread_arenas_mb": "glibc thread arenas (64 MiB heaps)",
    "other_anon_mb": "other anonymous (Python allocator, large blocks, stacks)",
    "files_mb": "file mappings (code, libraries)",
    "wal_index_mb": "WAL index mapping (-shm)",
    "wal_file_mb": "WAL file size (-wal, on disk)",
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    p.add_argument("--keys", type=int, default=1_000_000, help="keys on main")
    p.add_argument("--commits", type=int, default=100_000, help="commits of the soak")
    p.add_argument("--clients", type=int, default=16, help="wrk connections")
    p.add_argument("--segment", type=float, default=5.0, help="seconds per wrk run")
    p.add_argument(
        "--cache-mb", type=int, default=None, help="LOCH_CACHE_MB (default: the server's)"
    )
    p.add_argument(
        "--extra-commits",
        type=int,
        default=50_000,
        help="commits after --full-after for the caches-full figure (0: none)",
    )
    p.add_argument(
        "--full-after",
        type=int,
        default=90_000,
        help="commits after which every bounded cache is full (key_height's at 87,381)",
    )
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def rss_at(samples: list[dict[str, Any]], commits: int) -> float:
    """RSS of the first sample taken at or after ``commits`` commits (else the last)."""
    return float(sample_at(samples, commits)["rss_mb"])


def sample_at(samples: list[dict[str, Any]], commits: int) -> dict[str, Any]:
    """The first sample taken at or after ``commits`` commits (else the last)."""
    for s in samples:
        if s["commits"] >= commits:
            return s
    return samples[-1]


# -- attribution from outside the process ----------------------------------------------------


def _status(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[name] = float(value.split()[0]) / 1024
    return out


def _mappings(pid: int) -> list[dict[str, Any]]:
    """Every mapping of ``/proc/<pid>/smaps``: start, end, permissions, name, Rss (KiB)."""
    maps: list[dict[str, Any]] = []
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if not fields:
                continue
            if not fields[0].endswith(":"):  # a mapping's header line
                lo, hi = fields[0].split("-")
                name = fields[5].strip() if len(fields) > 5 else ""
                maps.append(
                    {"start": int(lo, 16), "end": int(hi, 16), "perms": fields[1], "name": name}
                )
                maps[-1]["rss_kib"] = 0
            elif fields[0] == "Rss:" and maps:
                maps[-1]["rss_kib"] = int(fields[1])
    return maps


def attribution(pid: int, db: Path) -> dict[str, float]:
    """Where a process's resident memory is, by kind of mapping (see :data:`PARTS`)."""
    st = _status(pid)
    maps = _mappings(pid)
    # The reserved (PROT_NONE) tail of a glibc heap ends on a 64 MiB boundary; the
    # read-write mapping just before it, or one starting on a boundary, is its used part.
    reserved_starts = {
        m["start"]
        for m in maps
        if not m["name"] and m["perms"] == "---p" and m["end"] % ARENA_HEAP == 0
    }
    parts = dict.fromkeys(
        ("heap_mb", "thread_arenas_mb", "other_anon_mb", "files_mb", "wal_index_mb"), 0.0
    )
    for m in maps:
        mib = m["rss_kib"] / 1024
        name = m["name"]
        if name == "[heap]":
            parts["heap_mb"] += mib
        elif name.endswith("-shm"):
            parts["wal_index_mb"] += mib
        elif name.startswith("/"):
            parts["files_mb"] += mib
        elif not name and (m["start"] % ARENA_HEAP == 0 or m["end"] in reserved_starts):
            parts["thread_arenas_mb"] += mib
        else:  # anonymous, [stack], [vdso] ...
            parts["other_anon_mb"] += mib
    wal = Path(f"{db}-wal")
    return {
        "rss_mb": st["VmRSS"],
        "rss_anon_mb": st.get("RssAnon", 0.0),
        "rss_file_mb": st.get("RssFile", 0.0),
        "rss_shmem_mb": st.get("RssShmem", 0.0),
        "threads": float(len(os.listdir(f"/proc/{pid}/task"))),
        **parts,
        "wal_file_mb": wal.stat().st_size / MIB if wal.exists() else 0.0,
    }


def attribution_table(
    points: dict[str, dict[str, Any]], changes: list[tuple[str, str]]
) -> list[str]:
    """Plain text: each part at each point (MiB, threads), then its change between the
    pairs of points in ``changes``."""
    heads = list(points) + [f"{a}->{b}" for a, b in changes]
    width = max(11, *(len(h) + 2 for h in heads))
    lines = [f"{'':57}" + "".join(f"{h:>{width}}" for h in heads)]
    for key, label in PARTS.items():
        row = [points[n][key] for n in points]
        row += [points[b][key] - points[a][key] for a, b in changes]
        cells = (f"{v:.0f}" if key == "threads" else fmt(v) for v in row)
        lines.append(f"{label:57}" + "".join(f"{c:>{width}}" for c in cells))
    return lines


# -- the soak --------------------------------------------------------------------------------


def soak(
    server: Server,
    db: Path,
    args: argparse.Namespace,
    until: int,
    total: int,
    phase: str,
    samples: list[dict[str, Any]],
    t0: float,
) -> int:
    """Commit from ``wrk`` in segments until ``until`` commits have landed in all; a sample
    after each segment. Returns the commits landed."""
    head = server.head()
    while total < until:
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
        parts = attribution(server.pid, db)
        samples.append(
            {
                "commits": total,
                "phase": phase,
                "seconds": time.monotonic() - t0,
                "rate": run.rate,
                "rss_mb": parts["rss_mb"],
                "p99_ms": run.p99_ms,
                "memory": parts,
            }
        )
        log(
            f"  {total:,} commits, {run.rate:.0f}/s, RSS {samples[-1]['rss_mb']:.0f} MB "
            f"(threads {parts['threads']:.0f}, arenas {parts['thread_arenas_mb']:.0f}, "
            f"other anon {parts['other_anon_mb']:.0f}, -shm {parts['wal_index_mb']:.1f})"
        )
    return total


def kilo(commits: int) -> str:
    """A sample's label in the attribution: ``10.2k`` for 10,162 commits."""
    return f"{commits / 1000:.1f}k"


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    if not wrk_available():
        log("bench.memory: wrk not found (apt-get install wrk); skipped")
        return 1
    started = machine()
    env = {} if args.cache_mb is None else {"LOCH_CACHE_MB": str(args.cache_mb)}
    samples: list[dict[str, Any]] = []
    extra: list[dict[str, Any]] = []
    with workdir("loch-bench-memory-", args.dir) as d:
        b = Bench(d, args.keys, 20_000, 1)
        log(f"building {args.keys:,} keys ...")
        build_commits, build_s = b.build()
        log(f"built in {build_s:.0f} s; serving and committing ...")
        with serving(b.url, d / "server.log", env) as server:
            start_rss = rss_mb(server.pid)
            start_parts = attribution(server.pid, b.db)
            t0 = time.monotonic()
            total = soak(server, b.db, args, args.commits, 0, "soak", samples, t0)
            peak = peak_rss_mb(server.pid)
            soak_s = time.monotonic() - t0
            if args.extra_commits > 0:
                # The same soak goes on until every bounded cache is full, then for
                # --extra-commits more: the additional, caches-full figure.
                log(f"continuing: {args.extra_commits:,} commits after {args.full_after:,} ...")
                total = soak(server, b.db, args, args.full_after, total, "filling", extra, t0)
                full_from = sample_at(samples + extra, args.full_after)["commits"]
                soak(server, b.db, args, full_from + args.extra_commits, total, "full", extra, t0)
            peak_all = peak_rss_mb(server.pid)
    first = samples[0]["rss_mb"]
    k10_commits = min(10_000, args.commits // 10)
    at10k = rss_at(samples, k10_commits)
    end = samples[-1]["rss_mb"]
    growth = end / at10k - 1
    k10 = f"{k10_commits // 1000}k"
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
    s10, send = sample_at(samples, k10_commits), samples[-1]
    points: dict[str, dict[str, Any]] = {
        "start": start_parts,
        kilo(s10["commits"]): s10["memory"],
        kilo(send["commits"]): send["memory"],
    }
    changes = [(kilo(s10["commits"]), kilo(send["commits"]))]
    details: dict[str, Any] = {
        "samples": samples + extra,
        "rss_first_segment_mb": first,
        "rss_start_mb": start_rss,
        "growth_10k_to_end": growth,
        "cache_mb": args.cache_mb or "server default",
        "soak_s": soak_s,
        "memory_parts": PARTS,
    }
    if extra:
        full = sample_at(samples + extra, args.full_after)
        last = extra[-1]
        growth_full = last["rss_mb"] / full["rss_mb"] - 1
        kfull, klast = f"{full['commits'] // 1000}k", f"{last['commits'] // 1000}k"
        figures.append(
            Figure(
                f"additional: server RSS at {klast} commits, bounded caches full "
                f"(the soak went on after {kend})",
                last["rss_mb"],
                "MB",
                f"RSS at {kfull} commits (caches full from {args.full_after // 1000}k)",
                full["rss_mb"],
                target=f"no growth once the caches are full (within {FLAT_TOLERANCE:.0%})",
                met=growth_full <= FLAT_TOLERANCE,
                peak_rss_mb=peak_all,
                note=(
                    f"{last['commits'] - full['commits']:,} commits from the "
                    f"{full['commits']:,}th; key_height's lru_cache ({KEY_HEIGHT_KEYS:,} keys) "
                    f"is full after {KEY_HEIGHT_KEYS:,} soak commits (one new key each)"
                ),
            )
        )
        points[kilo(full["commits"])] = full["memory"]
        points[kilo(last["commits"])] = last["memory"]
        changes.append((kilo(full["commits"]), kilo(last["commits"])))
        details["growth_full_window"] = growth_full
        details["full_window"] = [full["commits"], last["commits"]]
    order = sorted(points, key=lambda n: -1.0 if n == "start" else float(n[:-1]))
    points = {n: points[n] for n in order}
    details["attribution"] = points
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
    print("server memory by kind of mapping (MiB; threads: count), at each point and the changes:")
    for line in attribution_table(points, changes):
        print(line)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
