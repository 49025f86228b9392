"""References: listing 40,000 tags over HTTP, and creating 10,000 branches.

``listing``
    two ``loch serve`` processes side by side, on SQLite stores with ``--tags`` (40,000)
    and ``--tags / 100`` tags (tags created through the version store on tmpfs, the file
    then copied to the work directory); ``GET /api/v2/trees`` (all references, default
    fetch) is timed on both, taking turns, and ``GET /api/v2/config`` on the big one
    gives the HTTP floor. ``VersionStore.list_references`` in-process is timed too.
    A Nessie user reported 4-5 s for this case; the target is 200 ms. The server is
    profiled with ``py-spy`` while it answers the big listing.
``create``
    ``--branches`` (10,000) branches created one after the other over HTTP
    (``POST /api/v2/trees``, one keep-alive client) on the 40k-tag server, and through
    ``VersionStore.create_reference`` on a copy of the same store, in chunks that take
    turns. Both stores are on disk (WAL, ``synchronous=FULL``): each creation is one
    durable transaction.

Usage: ``python -m bench.refs [--tags 40000] [--branches 10000] [--dir DIR]``
"""

from __future__ import annotations

import argparse
import shutil
import sqlite3
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    PROFILES_DIR,
    ROOT,
    Figure,
    Stats,
    interleaved,
    log,
    machine,
    parse_known,
    peak_rss_mb,
    print_figures,
    reset_peak_rss,
    serving,
    start_profile,
    summarize_profile,
    workdir,
    write_result,
)
from loch.backends import open_store
from loch.versioning import Put, VersionStore

LIST_TARGET_MS = 200.0


def build_tags(path: Path, tags: int) -> float:
    """A store whose ``main`` has one commit and ``tags`` tags; seconds it took."""
    persist = open_store(f"sqlite:///{path}")
    try:
        vs = VersionStore(persist)
        t0 = time.perf_counter()
        head = vs.get_reference("main").hash
        ns = Put(("ns",), {"type": "NAMESPACE", "elements": ["ns"]})
        head = vs.commit("main", head, {"message": "one commit"}, [ns]).hash
        for i in range(tags):
            vs.create_reference(f"tag-{i:06d}", "TAG", head)
        return time.perf_counter() - t0
    finally:
        persist.close()


def copy_db(src: Path, dst: Path) -> None:
    """Checkpoint the WAL of ``src`` and copy the database file to ``dst``."""
    conn = sqlite3.connect(src)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    shutil.copyfile(src, dst)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.refs", description=__doc__)
    p.add_argument("--tags", type=int, default=40_000, help="tags in the big repository")
    p.add_argument("--branches", type=int, default=10_000, help="branches to create")
    p.add_argument("--chunk", type=int, default=500, help="branches per turn (HTTP, VS)")
    p.add_argument("--rounds", type=int, default=5, help="listing rounds")
    p.add_argument("--repeat", type=int, default=6, help="listings per case and round")
    p.add_argument("--profile-seconds", type=float, default=8.0, help="py-spy run (0: none)")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    started = machine()
    small_tags = max(1, args.tags // 100)
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    profile: dict[str, Any] | None = None
    with workdir("loch-bench-refs-", args.dir) as d, workdir("loch-bench-refs-", shm) as fast:
        log(f"creating {args.tags:,} and {small_tags:,} tags ...")
        build_big_s = build_tags(fast / "big.db", args.tags)
        build_tags(fast / "small.db", small_tags)
        for name in ("big", "small"):
            copy_db(fast / f"{name}.db", d / f"{name}.db")
        shutil.copyfile(d / "big.db", d / "vs.db")

        persist = open_store(f"sqlite:///{d / 'big.db'}")
        vs = VersionStore(persist)
        with (
            serving(f"sqlite:///{d / 'big.db'}", d / "big.log") as big,
            serving(f"sqlite:///{d / 'small.db'}", d / "small.log") as small,
            httpx.Client(timeout=60) as http,
        ):

            def listing(url: str, count: int, check: bool = False) -> None:
                r = http.get(url + "/api/v2/trees")
                r.raise_for_status()
                if check:
                    assert len(r.json()["references"]) == count

            def config(url: str) -> None:
                http.get(url + "/api/v2/config").raise_for_status()

            log("listing ...")
            listing(big.url, args.tags + 1, check=True)
            listing(small.url, small_tags + 1, check=True)
            reset_peak_rss(big.pid)
            listing_s = interleaved(
                {
                    "http_big": lambda: listing(big.url, args.tags + 1),
                    "http_small": lambda: listing(small.url, small_tags + 1),
                    "http_config": lambda: config(big.url),
                    "vs_big": lambda: vs.list_references(),
                },
                args.rounds,
                args.repeat,
            )
            list_rss = peak_rss_mb(big.pid)
            persist.close()
            raw_bytes = len(http.get(big.url + "/api/v2/trees").content)

            if args.profile_seconds > 0:
                log("profiling the big listing ...")
                raw = PROFILES_DIR / "list-40k-tags.txt"
                spy = start_profile(big.pid, args.profile_seconds, raw)
                time.sleep(0.5)
                end = time.monotonic() + args.profile_seconds + 0.5
                n = 0
                while time.monotonic() < end:
                    listing(big.url, args.tags + 1)
                    n += 1
                spy.wait(60)
                if raw.exists():
                    profile = {
                        "raw": str(raw.relative_to(ROOT)),
                        "listings_while_profiled": n,
                        **summarize_profile(raw),
                    }

            log(f"creating {args.branches:,} branches (HTTP and VersionStore) ...")
            head = big.head()
            vs_persist = open_store(f"sqlite:///{d / 'vs.db'}")
            vs2 = VersionStore(vs_persist)
            create_s: dict[str, float] = {"http": 0.0, "vs": 0.0}
            create_lat: dict[str, list[float]] = {"http": [], "vs": []}
            reset_peak_rss(big.pid)
            reset_peak_rss()
            done = 0
            turn = 0
            while done < args.branches:
                k = min(args.chunk, args.branches - done)
                sides = ["http", "vs"] if turn % 2 == 0 else ["vs", "http"]
                for side in sides:
                    for i in range(done, done + k):
                        name = f"branch-{i:06d}"
                        t0 = time.perf_counter()
                        if side == "http":
                            r = http.post(
                                big.url + "/api/v2/trees",
                                params={"name": name, "type": "BRANCH"},
                                json={"type": "BRANCH", "name": "main", "hash": head},
                            )
                            r.raise_for_status()
                        else:
                            vs2.create_reference(name, "BRANCH", head)
                        dt = time.perf_counter() - t0
                        create_s[side] += dt
                        create_lat[side].append(dt)
                done += k
                turn += 1
            create_http_rss = peak_rss_mb(big.pid)
            create_vs_rss = peak_rss_mb()
            assert len(vs2.list_references()) == args.tags + 1 + args.branches
            vs_persist.close()

    med = {k: statistics.median(v) * 1000 for k, v in listing_s.items()}
    tn = f"{args.tags // 1000}k" if args.tags >= 1000 else str(args.tags)
    figures = [
        Figure(
            f"GET /api/v2/trees, {tn} tags",
            med["http_big"],
            "ms",
            f"same, {small_tags:,} tags",
            med["http_small"],
            target=f"<= {LIST_TARGET_MS:.0f} ms",
            met=med["http_big"] <= LIST_TARGET_MS,
            peak_rss_mb=list_rss,
        ),
        Figure(
            f"GET /api/v2/trees, {tn} tags, vs trivial request",
            med["http_big"],
            "ms",
            "GET /api/v2/config, same server",
            med["http_config"],
        ),
        Figure(
            f"VersionStore.list_references, {tn} tags",
            med["vs_big"],
            "ms",
            f"HTTP listing of the same {tn} tags",
            med["http_big"],
        ),
        Figure(
            f"create {args.branches:,} branches over HTTP",
            create_s["http"],
            "s",
            "through VersionStore, same store contents",
            create_s["vs"],
            peak_rss_mb=create_http_rss,
            note=f"{args.branches / create_s['http']:.0f} branches/s over HTTP, "
            f"{args.branches / create_s['vs']:.0f}/s through VersionStore (disk, "
            "one durable transaction each)",
        ),
        Figure(
            f"create {args.branches:,} branches through VersionStore",
            create_s["vs"],
            "s",
            peak_rss_mb=create_vs_rss,
        ),
        Figure(f"create {tn} tags through VersionStore (tmpfs, fixture)", build_big_s, "s"),
    ]
    details = {
        "listing_ms": {k: Stats.of_seconds(v).__dict__ for k, v in listing_s.items()},
        "listing_response_bytes": raw_bytes,
        "create_ms": {k: Stats.of_seconds(v).__dict__ for k, v in create_lat.items()},
        "create_total_s": create_s,
        "profile": profile,
    }
    path = write_result("refs", "bench.refs", argv, started, vars(args), figures, details, args.out)
    print_figures(figures)
    if profile:
        print("top self frames of the listing (share of GIL-holding samples):")
        for f, s in profile["self"][:10]:
            print(f"  {s:6.1%}  {f}")
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
