"""History at 100,000 commits: the log's first page, ``name~N`` and a far merge base.

Built directly through :class:`~loch.versioning.VersionStore` on an SQLite file (in
``/dev/shm`` by default, so that the build does not wait for the disk): ``main`` gets
``--commits`` commits of one new key each; the tag ``at-1k`` marks commit 1,000, the
branch ``side`` forks at commit ``--commits - --diverged`` and gets ``--side-commits``
commits of its own, and the branch ``near`` forks 10 commits before the end and gets
10. Build time is reported.

Each figure is then measured side by side with a baseline in the same store, the cases
taking turns (``--rounds`` rounds of ``--repeat`` calls; ``--slow-repeat`` for the
merge bases, whose far case walks every commit since the fork):

``log first page``
    ``VersionStore.log`` of ``main`` (100k commits) vs of ``at-1k`` (1k commits), 250
    entries (the server's page size), on a warm object cache and on a freshly opened
    store; and ``GET /api/v2/trees/{ref}/history`` from a ``loch serve`` on the file;
``~N``
    ``resolve("main~50000")`` vs ``resolve("at-1k~500")``; over HTTP the history page of
    ``main~50000`` with ``max-records=1``;
``merge base``
    ``merge_base(main, side)`` (forked ``--diverged`` commits ago) vs
    ``merge_base(main, near)`` (10 ago); over HTTP ``GET /api/v2/trees/side?fetch=ALL``
    (ahead/behind counts need the merge base with ``main``) vs the same for ``near``.

Usage: ``python -m bench.history [--commits 100000] [--diverged 50000] [--dir /dev/shm]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
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
    workdir,
    write_result,
)
from loch.backends import open_store
from loch.versioning import Put, VersionStore

NS = "h"
LOG_TARGET_MS = 20.0


def _table(i: int) -> dict[str, Any]:
    return {
        "type": "ICEBERG_TABLE",
        "metadataLocation": f"s3://bench/h/{i}/metadata.json",
        "snapshotId": i,
        "schemaId": 0,
        "specId": 0,
        "sortOrderId": 0,
    }


class Builder:
    """Commits of one new key each, through the version store."""

    def __init__(self, vs: VersionStore) -> None:
        self.vs = vs
        self.n = 0

    def commits(self, branch: str, head: str, count: int) -> str:
        """``count`` commits on ``branch`` from ``head``; the new head."""
        for _ in range(count):
            self.n += 1
            op = Put((NS, f"t{self.n:07d}"), _table(self.n))
            head = self.vs.commit(branch, head, {"message": f"commit {self.n}"}, [op]).hash
        return head


def build(url: str, commits: int, diverged: int, side_commits: int) -> dict[str, Any]:
    """Build the repository; timings of its parts."""
    persist = open_store(url)
    try:
        vs = VersionStore(persist)
        b = Builder(vs)
        t0 = time.perf_counter()
        head = vs.get_reference("main").hash
        ns = Put((NS,), {"type": "NAMESPACE", "elements": [NS]})
        head = vs.commit("main", head, {"message": "namespace"}, [ns]).hash
        fork = commits - diverged
        marks = sorted({1000, fork, commits - 10})
        done = 1
        for mark in marks:
            head = b.commits("main", head, mark - done)
            done = mark
            if mark == 1000:
                vs.create_reference("at-1k", "TAG", head)
            if mark == fork:
                vs.create_reference("side", "BRANCH", head)
            if mark == commits - 10:
                vs.create_reference("near", "BRANCH", head)
            log(f"  {done:,} commits ({time.perf_counter() - t0:.0f} s)")
        head = b.commits("main", head, commits - done)
        main_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        b.commits("side", vs.get_reference("side").hash, side_commits)
        b.commits("near", vs.get_reference("near").hash, 10)
        side_s = time.perf_counter() - t1
        depth = vs.commit_of(vs.get_reference("main").hash).depth
        return {
            "main_commits": depth,
            "main_build_s": main_s,
            "side_commits": side_commits,
            "side_build_s": side_s,
            "commits_per_s": (depth + side_commits + 10) / (main_s + side_s),
        }
    finally:
        persist.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__)
    p.add_argument("--commits", type=int, default=100_000, help="commits on main")
    p.add_argument("--diverged", type=int, default=50_000, help="main commits since the fork")
    p.add_argument("--side-commits", type=int, default=1000, help="commits on the side branch")
    p.add_argument("--rounds", type=int, default=5, help="rounds (cases take turns)")
    p.add_argument("--repeat", type=int, default=20, help="calls per case and round")
    p.add_argument(
        "--slow-repeat", type=int, default=1, help="far merge-base calls per case and round"
    )
    p.add_argument("--dir", type=Path, default=Path("/dev/shm"), help="work directory parent")
    p.add_argument("--out", type=Path, default=None, help="JSON results file")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def _med(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    if args.commits < 2000 or not 10 < args.diverged < args.commits - 1000:
        log("need --commits >= 2000 and 10 < --diverged < commits - 1000")
        return 2
    started = machine()
    parent = args.dir if args.dir.is_dir() else None
    half = args.commits // 2
    with workdir("loch-bench-history-", parent) as d:
        url = f"sqlite:///{d / 'history.db'}"
        log(f"building {args.commits:,} commits ...")
        reset_peak_rss()
        built = build(url, args.commits, args.diverged, args.side_commits)
        build_rss = peak_rss_mb()
        log(f"built in {built['main_build_s'] + built['side_build_s']:.0f} s")

        persist = open_store(url)
        vs = VersionStore(persist)
        main_h = vs.get_reference("main").hash
        tag_h = vs.get_reference("at-1k").hash
        side_h = vs.get_reference("side").hash
        near_h = vs.get_reference("near").hash

        def cold_log(h: str) -> None:
            p = open_store(url)
            try:
                assert len(VersionStore(p).log(h).items) == 250
            finally:
                p.close()

        reset_peak_rss()
        vs_samples = interleaved(
            {
                "log_100k": lambda: vs.log(main_h),
                "log_1k": lambda: vs.log(tag_h),
                "log_cold_100k": lambda: cold_log(main_h),
                "log_cold_1k": lambda: cold_log(tag_h),
                "tilde_100k": lambda: vs.resolve(f"main~{half}"),
                "tilde_1k": lambda: vs.resolve("at-1k~500"),
            },
            args.rounds,
            args.repeat,
        )
        # a far merge base walks every commit since the fork: a few calls per round
        vs_samples.update(
            interleaved(
                {
                    "mergebase_far": lambda: vs.merge_base(main_h, side_h),
                    "mergebase_near": lambda: vs.merge_base(main_h, near_h),
                },
                args.rounds,
                args.slow_repeat,
                warmup=1,
            )
        )
        vs_rss = peak_rss_mb()
        depth = vs.commit_of(main_h).depth
        assert vs.resolve(f"main~{half}").hash == vs.ancestor_at(main_h, depth - half).id
        persist.close()

        log("over HTTP ...")
        with (
            serving(url, d / "server.log") as server,
            httpx.Client(base_url=server.url + "/api/v2", timeout=60) as http,
        ):

            def get(path: str, **params: Any) -> None:
                r = http.get(path, params=params)
                r.raise_for_status()

            http_samples = interleaved(
                {
                    "log_100k": lambda: get("/trees/main/history"),
                    "log_1k": lambda: get("/trees/at-1k/history"),
                    "tilde_100k": lambda: get(f"/trees/main~{half}/history", **{"max-records": 1}),
                    "tilde_1k": lambda: get("/trees/at-1k~500/history", **{"max-records": 1}),
                },
                args.rounds,
                args.repeat,
            )
            http_samples.update(
                interleaved(
                    {
                        "mergebase_far": lambda: get("/trees/side", fetch="ALL"),
                        "mergebase_near": lambda: get("/trees/near", fetch="ALL"),
                    },
                    args.rounds,
                    args.slow_repeat,
                    warmup=1,
                )
            )
            server_rss = peak_rss_mb(server.pid)

    v = {k: _med(s) for k, s in vs_samples.items()}
    h = {k: _med(s) for k, s in http_samples.items()}
    n = f"{args.commits // 1000}k"
    far = f"{args.diverged // 1000}k"
    figures = [
        Figure(
            f"log first page at {n} commits, HTTP",
            h["log_100k"],
            "ms",
            "same at 1k commits",
            h["log_1k"],
            target=f"<= {LOG_TARGET_MS:.0f} ms",
            met=h["log_100k"] <= LOG_TARGET_MS,
            peak_rss_mb=server_rss,
        ),
        Figure(
            f"log first page at {n} commits, VersionStore",
            v["log_100k"],
            "ms",
            "same at 1k commits",
            v["log_1k"],
            peak_rss_mb=vs_rss,
        ),
        Figure(
            f"log first page at {n} commits, VersionStore, cold cache",
            v["log_cold_100k"],
            "ms",
            "same at 1k commits",
            v["log_cold_1k"],
            peak_rss_mb=vs_rss,
        ),
        Figure(
            f"main~{half} at {n} commits, HTTP",
            h["tilde_100k"],
            "ms",
            "at-1k~500",
            h["tilde_1k"],
            peak_rss_mb=server_rss,
        ),
        Figure(
            f"main~{half} at {n} commits, VersionStore",
            v["tilde_100k"],
            "ms",
            "at-1k~500",
            v["tilde_1k"],
            peak_rss_mb=vs_rss,
        ),
        Figure(
            f"merge base, diverged {far} commits ago, VersionStore",
            v["mergebase_far"],
            "ms",
            "diverged 10 commits ago",
            v["mergebase_near"],
            peak_rss_mb=vs_rss,
        ),
        Figure(
            f"branch with ahead/behind (merge base {far} back), HTTP",
            h["mergebase_far"],
            "ms",
            "merge base 10 back",
            h["mergebase_near"],
            peak_rss_mb=server_rss,
        ),
        Figure(
            f"history build, {n} + {args.side_commits} commits of one key",
            built["main_build_s"] + built["side_build_s"],
            "s",
            note=(
                f"{built['commits_per_s']:.0f} commits/s through VersionStore on "
                f"{'tmpfs' if str(args.dir).startswith('/dev/shm') else args.dir}"
            ),
            peak_rss_mb=build_rss,
        ),
    ]
    details = {
        "build": built,
        "versionstore_ms": {k: Stats.of_seconds(s).__dict__ for k, s in vs_samples.items()},
        "http_ms": {k: Stats.of_seconds(s).__dict__ for k, s in http_samples.items()},
    }
    path = write_result(
        "history", "bench.history", argv, started, vars(args), figures, details, args.out
    )
    print_figures(figures)
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
