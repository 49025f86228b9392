"""Replica benchmark: commits per second over HTTP with 1 and 3 ``loch serve`` replicas on
one PostgreSQL server, next to the server's floor, a plain single-row transaction loop.

One run starts a throwaway PostgreSQL cluster (:class:`loch.testing.postgres.PostgresCluster`,
``fsync=on``, on a free loopback port) and measures, side by side, in each of ``--rounds``
rounds:

``floor``
    ``--clients`` threads, each with its own psycopg connection, looping
    ``BEGIN; UPDATE counter SET v = v + 1 WHERE id = <own row>; COMMIT`` (and, for
    reference, the same with every thread on one row, which is what a branch's
    reference row sees);
``http``
    for each replica count (``--replicas``, default 1 and 3) an emptied database and
    that many ``loch serve --port P --store postgresql://…`` processes; ``--clients``
    threads (httpx, keep-alive) send commits round-robin through the replicas, each
    commit a PUT of a new ICEBERG_TABLE key with the client's own previous commit as the
    (stale) expected hash. Two loads: every client on one branch, and the clients spread
    over ``--branches`` branches.

Each load runs ``--warmup`` seconds unmeasured, then ``--seconds`` seconds. Reported per
load (the median round, with every round's rate): acknowledged commits per second,
median and p99 latency, non-200 answers, CPU seconds used by the replicas and by
PostgreSQL per 1,000 commits, and the ratio of the commit rate to the floor (a row per
thread). The clients run in this process and share the machine's cores with the
servers: the load average is recorded before and after.

Results go to ``bench/results/replicas.json``.

Usage: ``python -m bench.replicas [--clients 16] [--seconds 10] [--rounds 3] [--replicas 1,3]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg

from bench.common import command, parse_known, revision
from loch.testing.postgres import PostgresCluster

RESULTS = Path(__file__).with_name("results") / "replicas.json"
NO_ANCESTOR = "2e1cfa82b035c26cbbbdae632cea070514eb8b773f616aaeaf668e2f0be8f10d"
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class LoadResult:
    """One measured load."""

    name: str
    replicas: int  # 0 for the floor
    branches: int
    clients: int
    seconds: float
    ops: int
    per_second: float
    p50_ms: float
    p99_ms: float
    errors: dict[str, int] = field(default_factory=dict)
    replica_cpu_s_per_1000: float | None = None
    postgres_cpu_s_per_1000: float | None = None
    ratio_to_floor: float | None = None
    per_second_by_round: list[float] = field(default_factory=list)


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback TCP port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds used so far by these processes (and reaped children)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); utime, stime, cutime, cstime are fields 14-17
        total += sum(int(x) for x in fields[11:15]) / CLK_TCK
    return total


def postgres_pids(cluster: PostgresCluster) -> list[int]:
    """The postmaster of ``cluster`` and its children (backends, WAL writer, …)."""
    pid_file = cluster.data / "postmaster.pid"
    try:
        master = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return []
    out = subprocess.run(
        ["ps", "-o", "pid=", "--ppid", str(master)], capture_output=True, text=True, check=False
    ).stdout
    return [master, *(int(p) for p in out.split())]


class Replica:
    """A ``loch serve`` process on a free loopback port."""

    def __init__(self, store_url: str, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ)
        env.pop("LOCH_STORE", None)
        cmd = [sys.prefix + "/bin/loch", "serve", "--port", str(self.port)]
        cmd += ["--store", store_url, "--log-level", "warning"]
        with log_path.open("ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.log_path = log_path

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loch serve exited: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"loch serve did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def reset_database(url: str) -> None:
    """Drop every table: the next replica starts from an empty schema."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP SCHEMA public CASCADE")
        conn.execute("CREATE SCHEMA public")


# -- loads ---------------------------------------------------------------------------------


class Load:
    """Threads running ``step(client, i)`` until stopped; latencies kept once measuring."""

    def __init__(self, clients: int) -> None:
        self.clients = clients
        self.measuring = False
        self.stop = threading.Event()
        self.latencies: list[list[float]] = [[] for _ in range(clients)]
        self.errors: list[dict[str, int]] = [{} for _ in range(clients)]
        self.failures: list[BaseException] = []

    def run(self, setup: Any, step: Any, warmup: float, seconds: float) -> float:
        """Warm up, measure for ``seconds``; the measured wall time."""

        def body(c: int) -> None:
            try:
                state = setup(c)
                i = 0
                while not self.stop.is_set():
                    started = time.perf_counter()
                    error = step(state, c, i)
                    took = time.perf_counter() - started
                    i += 1
                    if self.measuring:
                        if error is None:
                            self.latencies[c].append(took)
                        else:
                            self.errors[c][error] = self.errors[c].get(error, 0) + 1
            except BaseException as e:  # reported by the caller
                self.failures.append(e)
                self.stop.set()

        threads = [threading.Thread(target=body, args=(c,)) for c in range(self.clients)]
        for t in threads:
            t.start()
        time.sleep(warmup)
        self.measuring = True
        started = time.monotonic()
        self.stop.wait(seconds)
        self.measuring = False
        wall = time.monotonic() - started
        self.stop.set()
        for t in threads:
            t.join(60)
        if self.failures:
            raise self.failures[0]
        return wall

    def result(self, name: str, replicas: int, branches: int, wall: float) -> LoadResult:
        lat = sorted(x for per in self.latencies for x in per)
        errors: dict[str, int] = {}
        for per_client in self.errors:
            for k, v in per_client.items():
                errors[k] = errors.get(k, 0) + v
        return LoadResult(
            name,
            replicas,
            branches,
            self.clients,
            round(wall, 2),
            len(lat),
            round(len(lat) / wall, 1),
            round(statistics.median(lat) * 1000, 2) if lat else 0.0,
            round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1000, 2) if lat else 0.0,
            errors,
        )


def floor(
    url: str, cluster: PostgresCluster, clients: int, warmup: float, seconds: float, same_row: bool
) -> LoadResult:
    """The single-row transaction loop."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS counter")
        conn.execute("CREATE TABLE counter (id INTEGER PRIMARY KEY, v BIGINT NOT NULL)")
        conn.execute(
            "INSERT INTO counter SELECT g, 0 FROM generate_series(0, %s) g", (clients - 1,)
        )
    conns: list[psycopg.Connection[Any]] = []

    def setup(c: int) -> psycopg.Connection[Any]:
        conn = psycopg.connect(url)
        conns.append(conn)
        return conn

    def step(conn: psycopg.Connection[Any], c: int, i: int) -> str | None:
        with conn.transaction():
            conn.execute("UPDATE counter SET v = v + 1 WHERE id = %s", (0 if same_row else c,))
        return None

    load = Load(clients)
    pg_before = cpu_seconds(postgres_pids(cluster))
    try:
        wall = load.run(setup, step, warmup, seconds)
    finally:
        for conn in conns:
            conn.close()
    pg_cpu = cpu_seconds(postgres_pids(cluster)) - pg_before
    name = "floor: UPDATE one row, " + ("all threads one row" if same_row else "a row per thread")
    r = load.result(name, 0, 0, wall)
    r.postgres_cpu_s_per_1000 = round(pg_cpu * 1000 / max(1, r.ops), 3)
    return r


def http_load(
    replicas: list[Replica],
    cluster: PostgresCluster,
    clients: int,
    branches: list[str],
    warmup: float,
    seconds: float,
) -> LoadResult:
    """Commits of new keys through the replicas, round-robin, stale expected hashes."""
    clients_http: list[httpx.Client] = []

    def setup(c: int) -> dict[str, Any]:
        http = httpx.Client(timeout=60.0, headers={"Nessie-Client-Spec": "2"})
        clients_http.append(http)
        return {"http": http, "expected": NO_ANCESTOR, "branch": branches[c % len(branches)]}

    def step(state: dict[str, Any], c: int, i: int) -> str | None:
        r = replicas[(c + i) % len(replicas)]
        branch = state["branch"]
        name = f"{branch.replace('/', '_')}_c{c:02d}_{i:06d}"
        body = {
            "commitMeta": {"message": f"bench {name}"},
            "operations": [
                {
                    "type": "PUT",
                    "key": {"elements": [name]},
                    "content": {
                        "type": "ICEBERG_TABLE",
                        "metadataLocation": f"s3://bench/{name}/00000.metadata.json",
                        "snapshotId": 1,
                        "schemaId": 0,
                        "specId": 0,
                        "sortOrderId": 0,
                    },
                }
            ],
        }
        path = f"/api/v2/trees/{quote(branch + '@' + state['expected'], safe='')}/history/commit"
        try:
            resp = state["http"].post(r.url + path, json=body)
        except httpx.TransportError as e:
            return type(e).__name__
        if resp.status_code != 200:
            return str(resp.status_code)
        state["expected"] = resp.json()["targetBranch"]["hash"]
        return None

    pids = [r.proc.pid for r in replicas]
    replica_before = cpu_seconds(pids)
    pg_before = cpu_seconds(postgres_pids(cluster))
    load = Load(clients)
    try:
        wall = load.run(setup, step, warmup, seconds)
    finally:
        for h in clients_http:
            h.close()
    replica_cpu = cpu_seconds(pids) - replica_before
    pg_cpu = cpu_seconds(postgres_pids(cluster)) - pg_before
    where = "one branch" if len(branches) == 1 else f"{len(branches)} branches"
    r = load.result(
        f"http: {len(replicas)} replica(s), {where}", len(replicas), len(branches), wall
    )
    # CPU is counted over warm-up and measurement alike: scale by the commits of both
    total = max(1, r.ops * (warmup + wall) / wall)
    r.replica_cpu_s_per_1000 = round(replica_cpu * 1000 / total, 3)
    r.postgres_cpu_s_per_1000 = round(pg_cpu * 1000 / total, 3)
    return r


def create_branches(url: str, names: list[str]) -> None:
    with httpx.Client(timeout=30.0) as http:
        for name in names:
            resp = http.post(
                f"{url}/api/v2/trees",
                params={"name": name, "type": "BRANCH"},
                json={"type": "BRANCH", "name": "main", "hash": NO_ANCESTOR},
            )
            resp.raise_for_status()


def pg_settings(url: str) -> dict[str, str]:
    with psycopg.connect(url) as conn:
        out = {}
        for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method"):
            row = conn.execute(f"SHOW {name}").fetchone()
            out[name] = str(row[0]) if row else "?"
        return out


# -- report ----------------------------------------------------------------------------------


def table_text(results: list[LoadResult]) -> str:
    header = [
        "load",
        "commits/s",
        "p50 ms",
        "p99 ms",
        "errors",
        "x floor",
        "replica CPU s/1k",
        "PG CPU s/1k",
        "commits/s by round",
    ]
    rows = [header]
    for r in results:
        rows.append(
            [
                r.name,
                f"{r.per_second:.1f}",
                f"{r.p50_ms:.1f}",
                f"{r.p99_ms:.1f}",
                str(sum(r.errors.values())),
                "" if r.ratio_to_floor is None else f"{r.ratio_to_floor:.3f}",
                "" if r.replica_cpu_s_per_1000 is None else f"{r.replica_cpu_s_per_1000:.2f}",
                "" if r.postgres_cpu_s_per_1000 is None else f"{r.postgres_cpu_s_per_1000:.2f}",
                " ".join(f"{x:.0f}" for x in r.per_second_by_round),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = []
    for row in rows:
        cells = zip(row, widths, strict=True)
        lines.append(
            "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(cells))
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.replicas", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--clients", type=int, default=16, help="concurrent clients [16]")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds per load [10]")
    p.add_argument("--warmup", type=float, default=3.0, help="unmeasured seconds per load [3]")
    p.add_argument("--replicas", default="1,3", help="replica counts to measure [1,3]")
    p.add_argument("--branches", type=int, default=4, help="branches of the spread load [4]")
    p.add_argument("--rounds", type=int, default=3, help="rounds; the median is reported [3]")
    p.add_argument("--out", type=Path, default=RESULTS, help=f"results file [{RESULTS}]")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    counts = [int(x) for x in args.replicas.split(",") if x.strip()]
    if (
        min(args.clients, args.branches, args.rounds) < 1
        or args.seconds <= 0
        or not counts
        or min(counts) < 1
    ):
        print(
            "clients, seconds, branches, rounds and replica counts must be positive",
            file=sys.stderr,
        )
        return 2
    load_before = os.getloadavg()
    cluster = PostgresCluster().start()
    runs: dict[str, list[LoadResult]] = {}

    def add(r: LoadResult) -> None:
        runs.setdefault(r.name, []).append(r)
        print(f"  {r.name}: {r.per_second:.1f}/s", file=sys.stderr, flush=True)

    try:
        url = cluster.url
        settings = pg_settings(url)
        with tempfile.TemporaryDirectory(prefix="loch-bench-replicas-") as tmp:
            for rnd in range(args.rounds):
                print(f"round {rnd + 1}/{args.rounds}", file=sys.stderr, flush=True)
                for same_row in (False, True):
                    add(floor(url, cluster, args.clients, args.warmup, args.seconds, same_row))
                for n in counts:
                    reset_database(url)
                    logs = Path(tmp)
                    replicas = [Replica(url, logs / f"{rnd}-{n}-{i}.log") for i in range(n)]
                    try:
                        for r in replicas:
                            r.wait_ready()
                        spread = [f"bench/{i}" for i in range(args.branches)]
                        create_branches(replicas[0].url, ["bench/one", *spread])
                        for branches in (["bench/one"], spread):
                            add(
                                http_load(
                                    replicas,
                                    cluster,
                                    args.clients,
                                    branches,
                                    args.warmup,
                                    args.seconds,
                                )
                            )
                    finally:
                        for r in replicas:
                            r.stop()
    finally:
        cluster.stop()
    results: list[LoadResult] = []
    for per_round in runs.values():
        ranked = sorted(per_round, key=lambda x: x.per_second)
        chosen = ranked[(len(ranked) - 1) // 2]  # the median round (lower one if even)
        chosen.per_second_by_round = [x.per_second for x in per_round]
        results.append(chosen)
    floor_rate = results[0].per_second
    for res in results:
        res.ratio_to_floor = round(res.per_second / floor_rate, 4) if floor_rate else None
    report: dict[str, Any] = {
        "benchmark": "replicas",
        "command": command("bench.replicas", argv),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "postgres": settings,
        "revision": revision(),
        "settings": {
            "clients": args.clients,
            "seconds": args.seconds,
            "warmup": args.warmup,
            "replicas": counts,
            "branches": args.branches,
            "rounds": args.rounds,
        },
        "floor_commits_per_second": round(floor_rate, 1),
        "results": [asdict(r) for r in results],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"PostgreSQL {settings['server_version']} (fsync={settings['fsync']}, "
        f"synchronous_commit={settings['synchronous_commit']}), {args.clients} clients, "
        f"{args.seconds:g} s per load, median of {args.rounds} round(s)"
    )
    print(table_text(results))
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
