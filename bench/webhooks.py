"""Webhook benchmark: delivery latency at a sustained commit rate, and the cost of
webhooks on commit throughput, all over HTTP against real ``loch serve`` processes.

Two servers run side by side, each on its own SQLite file: ``plain`` with no
notification and ``hooked`` with ``--hooks`` (10) COMMIT webhooks, all pointing at one
receiver process (a stdlib HTTP server that notes when each request arrived).

``throughput``
    ``--writers`` client threads, each committing to its own branch, make ``--commits``
    commits as fast as the server answers; the servers take turns for ``--rounds``
    rounds (``plain``, ``hooked``, ``plain``, ...), and after each ``hooked`` round the
    receiver must have every delivery before the next round starts, so a backlog never
    slows the other server. Reported: the median commits/s of each server and their
    ratio ``hooked / plain``, plus how long the ``hooked`` backlog took to drain.
``latency``
    one client commits at a steady ``--rate`` for ``--duration`` seconds, first to
    ``plain`` with one webhook subscribed, then to ``hooked`` (``--hooks`` webhooks).
    Event-to-delivery latency is the receiver's arrival time minus the event's
    ``eventTime`` (set by the server when the commit is written); the time from the
    client's acknowledgement to arrival is reported too. Median, p99 and max.

Results go to ``bench/results/webhooks.json`` and a table is printed.

Usage: ``python -m bench.webhooks [--rate 20] [--duration 15] [--commits 300]
[--rounds 5] [--writers 4] [--hooks 10] [--dir DIR]``

The servers and the clients share the machine: on few cores the client threads and the
receiver compete with the server, so the numbers describe this machine under this load
(the load average before and after is recorded).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shlex
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from bench.common import free_port, revision

RESULTS = Path(__file__).with_name("results") / "webhooks.json"
ROOT = Path(__file__).resolve().parents[1]


# -- the receiver (runs as its own process: python -m bench.webhooks --receiver ...) ------------


class _Hook(BaseHTTPRequestHandler):
    """Notes arrival time, eventTime and newHash of each event; answers 200 at once."""

    protocol_version = "HTTP/1.1"
    wbufsize = 1 << 16
    disable_nagle_algorithm = True
    server: _ReceiverServer

    def do_POST(self) -> None:
        at = time.time()
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            event = json.loads(body)
            line = json.dumps(
                {
                    "at": at,
                    "path": self.path,
                    "eventTime": event.get("eventTime"),
                    "newHash": event.get("newHash"),
                },
                separators=(",", ":"),
            )
        except ValueError:
            line = json.dumps({"at": at, "path": self.path, "bad": True})
        with self.server.lock:
            self.server.out.write(line + "\n")
            self.server.out.flush()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


class _ReceiverServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, out: Path) -> None:
        super().__init__(("127.0.0.1", 0), _Hook)
        self.lock = threading.Lock()
        self.out = out.open("a", encoding="utf-8")


def run_receiver(out: Path, port_file: Path) -> None:
    """Serve until killed; the bound port is written to ``port_file``."""
    server = _ReceiverServer(out)
    tmp = port_file.with_suffix(".tmp")
    tmp.write_text(str(server.server_address[1]))
    tmp.replace(port_file)
    server.serve_forever(poll_interval=0.1)


# -- processes ---------------------------------------------------------------------------------


def _wait(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


class Receiver:
    """The receiver process and its log of arrivals."""

    def __init__(self, directory: Path) -> None:
        self.out = directory / "arrivals.jsonl"
        self.out.touch()
        port_file = directory / "receiver.port"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.webhooks",
                "--receiver",
                str(self.out),
                "--port-file",
                str(port_file),
            ],
            cwd=ROOT,
        )
        _wait(port_file.exists, 10, "the receiver")
        self.port = int(port_file.read_text())
        self._offset = 0
        self._lines: list[dict[str, Any]] = []

    def url(self, name: str) -> str:
        """A webhook URL (the path tells subscriptions apart)."""
        return f"http://127.0.0.1:{self.port}/{name}"

    def arrivals(self) -> list[dict[str, Any]]:
        """Every arrival so far (read incrementally)."""
        with self.out.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        self._lines += [json.loads(x) for x in data[:end].splitlines() if x]
        return self._lines

    def stop(self) -> None:
        """Kill the receiver."""
        self.proc.kill()
        self.proc.wait()


class Server:
    """A ``loch serve`` process on its own SQLite file."""

    def __init__(self, directory: Path, name: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (directory / f"{name}.log").open("wb")
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCH_")}
        self.proc = subprocess.Popen(
            [
                sys.prefix + "/bin/loch",
                "serve",
                "--port",
                str(self.port),
                "--store",
                f"sqlite:///{directory / name}.db",
                "--log-level",
                "warning",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
        )

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loch serve exited with {self.proc.returncode}")
            try:
                return httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        _wait(healthy, 30, f"loch serve ({name})")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it hangs."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# -- clients -----------------------------------------------------------------------------------


def _enc(text: str) -> str:
    return quote(text, safe="")


def _commit_body(i: int, tag: str) -> dict[str, Any]:
    return {
        "commitMeta": {"message": f"bench {tag} {i}", "authors": ["bench"]},
        "operations": [
            {
                "type": "PUT",
                "key": {"elements": [tag, f"t{i:07d}"]},
                "content": {
                    "type": "ICEBERG_TABLE",
                    "metadataLocation": f"s3://bench/{tag}/{i}/metadata.json",
                    "snapshotId": i,
                    "schemaId": 0,
                    "specId": 0,
                    "sortOrderId": 0,
                },
            }
        ],
    }


class Branch:
    """A branch one client thread commits to, with its HEAD."""

    def __init__(self, http: httpx.Client, name: str) -> None:
        self.http = http
        self.name = name
        main = http.get("/api/v2/trees/main").json()["reference"]
        resp = http.post("/api/v2/trees", params={"name": name, "type": "BRANCH"}, json=main)
        resp.raise_for_status()
        self.head: str = resp.json()["reference"]["hash"]
        ns = {"type": "NAMESPACE", "elements": [name], "properties": {}}
        body = {
            "commitMeta": {"message": "namespace"},
            "operations": [{"type": "PUT", "key": {"elements": [name]}, "content": ns}],
        }
        self.head = self._post(body)
        self.count = 0

    def _post(self, body: dict[str, Any]) -> str:
        resp = self.http.post(
            f"/api/v2/trees/{_enc(self.name + '@' + self.head)}/history/commit", json=body
        )
        if resp.status_code != 200:
            raise RuntimeError(f"commit failed: {resp.status_code} {resp.text}")
        h: str = resp.json()["targetBranch"]["hash"]
        return h

    def commit(self) -> str:
        """One more commit (a new table); its hash."""
        self.count += 1
        self.head = self._post(_commit_body(self.count, self.name))
        return self.head


def subscribe(url: str, hook: str, n: int) -> None:
    """``n`` COMMIT webhooks to ``hook`` URLs."""
    with httpx.Client(base_url=url, timeout=10) as http:
        for i in range(n):
            resp = http.post(
                "/api/v2/notifications/commits", json={"type": "WEBHOOK", "url": f"{hook}-{i}"}
            )
            resp.raise_for_status()


# -- measurements ------------------------------------------------------------------------------


@dataclass
class ThroughputRound:
    """One round of the throughput comparison."""

    server: str
    commits: int
    seconds: float
    commits_per_s: float
    drain_s: float | None = None


@dataclass
class Latency:
    """Event-to-delivery latency at a steady commit rate."""

    webhooks: int
    rate: float
    duration_s: float
    commits: int
    achieved_rate: float
    deliveries: int
    median_ms: float
    p99_ms: float
    max_ms: float
    ack_median_ms: float
    ack_p99_ms: float
    commit_median_ms: float
    commit_p99_ms: float


@dataclass
class Throughput:
    """Side-by-side commit throughput, with and without webhooks."""

    writers: int
    commits_per_round: int
    hooks: int
    rounds: list[ThroughputRound] = field(default_factory=list)
    plain_median: float = 0.0
    hooked_median: float = 0.0
    ratio: float = 0.0
    drain_median_s: float = 0.0


def p99(values: list[float]) -> float:
    """The 99th percentile (inclusive method)."""
    if len(values) < 2:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def run_round(branches: list[Branch], commits: int) -> float:
    """``commits`` commits split over the branches' threads; seconds taken."""
    per = [
        commits // len(branches) + (1 if i < commits % len(branches) else 0)
        for i in range(len(branches))
    ]
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(branches) + 1)

    def work(b: Branch, n: int) -> None:
        barrier.wait()
        try:
            for _ in range(n):
                b.commit()
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=work, args=(b, n)) for b, n in zip(branches, per, strict=True)
    ]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return elapsed


def throughput(
    plain: Server, hooked: Server, receiver: Receiver, args: argparse.Namespace
) -> Throughput:
    """Alternate rounds on the two servers."""
    result = Throughput(args.writers, args.commits, args.hooks)
    clients = {
        s: [httpx.Client(base_url=s.url, timeout=30) for _ in range(args.writers)]
        for s in (plain, hooked)
    }
    try:
        branches = {s: [Branch(c, f"w{i}") for i, c in enumerate(cs)] for s, cs in clients.items()}
        expected = args.writers * args.hooks  # the namespace commits
        _wait(lambda: len(receiver.arrivals()) >= expected, 60, "the setup deliveries")
        run_round(branches[plain], max(8, args.commits // 10))  # warm-up, not reported
        run_round(branches[hooked], max(8, args.commits // 10))
        expected += max(8, args.commits // 10) * args.hooks
        _wait(lambda: len(receiver.arrivals()) >= expected, 120, "the warm-up deliveries")
        for r in range(args.rounds):
            order = (plain, hooked) if r % 2 == 0 else (hooked, plain)
            for s in order:
                name = "plain" if s is plain else "hooked"
                seconds = run_round(branches[s], args.commits)
                rnd = ThroughputRound(name, args.commits, seconds, args.commits / seconds)
                if s is hooked:
                    expected += args.commits * args.hooks
                    t0 = time.perf_counter()
                    _wait(lambda n=expected: len(receiver.arrivals()) >= n, 300, "the deliveries")
                    rnd.drain_s = time.perf_counter() - t0
                result.rounds.append(rnd)
                print(
                    f"  round {r + 1} {name:6} {rnd.commits_per_s:8.1f} commits/s", file=sys.stderr
                )
    finally:
        for cs in clients.values():
            for c in cs:
                c.close()
    result.plain_median = statistics.median(
        x.commits_per_s for x in result.rounds if x.server == "plain"
    )
    result.hooked_median = statistics.median(
        x.commits_per_s for x in result.rounds if x.server == "hooked"
    )
    result.ratio = result.hooked_median / result.plain_median
    result.drain_median_s = statistics.median(
        x.drain_s for x in result.rounds if x.drain_s is not None
    )
    return result


def latency(
    server: Server, receiver: Receiver, webhooks: int, rate: float, duration: float
) -> Latency:
    """Commits at ``rate`` for ``duration`` seconds; latency of their deliveries."""
    before = len(receiver.arrivals())
    acked: dict[str, float] = {}
    commit_s: list[float] = []
    with httpx.Client(base_url=server.url, timeout=30) as http:
        branch = Branch(http, f"lat{webhooks}")
        n = int(rate * duration)
        t0 = time.perf_counter()
        for i in range(n):
            due = t0 + i / rate
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            c0 = time.perf_counter()
            h = branch.commit()
            commit_s.append(time.perf_counter() - c0)
            acked[h] = time.time()
        elapsed = time.perf_counter() - t0

    def ours() -> list[dict[str, Any]]:
        # deliveries of the branch's first (namespace) commit interleave with these
        return [a for a in receiver.arrivals()[before:] if a.get("newHash") in acked]

    _wait(lambda: len(ours()) >= n * webhooks, 120, "latency deliveries")
    lat, ack = [], []
    for a in ours():
        event_time = dt.datetime.fromisoformat(a["eventTime"]).timestamp()
        lat.append((a["at"] - event_time) * 1000)
        ack.append((a["at"] - acked[a["newHash"]]) * 1000)
    return Latency(
        webhooks=webhooks,
        rate=rate,
        duration_s=duration,
        commits=n,
        achieved_rate=n / elapsed,
        deliveries=len(lat),
        median_ms=statistics.median(lat),
        p99_ms=p99(lat),
        max_ms=max(lat),
        ack_median_ms=statistics.median(ack),
        ack_p99_ms=p99(ack),
        commit_median_ms=statistics.median(commit_s) * 1000,
        commit_p99_ms=p99(commit_s) * 1000,
    )


# -- report ------------------------------------------------------------------------------------


def table_text(tp: Throughput, lats: list[Latency]) -> str:
    """The printed summary."""
    lines = [
        f"commit throughput over HTTP ({tp.writers} writers, {tp.commits_per_round} commits "
        f"x {len(tp.rounds) // 2} rounds per server, alternating)",
        f"  {'webhooks':>8}  {'median commits/s':>16}  {'rounds':<40}",
    ]
    for name, hooks, med in (("plain", 0, tp.plain_median), ("hooked", tp.hooks, tp.hooked_median)):
        rounds = " ".join(f"{r.commits_per_s:.0f}" for r in tp.rounds if r.server == name)
        lines.append(f"  {hooks:>8}  {med:>16.1f}  {rounds:<40}")
    lines.append(
        f"  ratio {tp.hooks}/0 webhooks: {tp.ratio:.2f}  "
        f"(backlog of {tp.commits_per_round * tp.hooks} deliveries drained in "
        f"{tp.drain_median_s:.2f} s median)"
    )
    lines.append("")
    lines.append("event-to-delivery latency (receiver arrival - eventTime)")
    lines.append(
        f"  {'webhooks':>8}  {'rate/s':>6}  {'deliveries':>10}  {'median ms':>9}  "
        f"{'p99 ms':>8}  {'max ms':>8}  {'ack->recv p50/p99 ms':>21}  {'commit p50/p99 ms':>18}"
    )
    for x in lats:
        lines.append(
            f"  {x.webhooks:>8}  {x.achieved_rate:>6.1f}  {x.deliveries:>10}  "
            f"{x.median_ms:>9.1f}  {x.p99_ms:>8.1f}  {x.max_ms:>8.1f}  "
            f"{x.ack_median_ms:>10.1f}/{x.ack_p99_ms:<10.1f}  "
            f"{x.commit_median_ms:>8.1f}/{x.commit_p99_ms:<9.1f}"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.webhooks", description=__doc__.split("\n")[0])
    p.add_argument("--rate", type=float, default=20.0, help="commits/s in the latency runs")
    p.add_argument("--duration", type=float, default=15.0, help="seconds per latency run")
    p.add_argument("--commits", type=int, default=300, help="commits per throughput round")
    p.add_argument("--rounds", type=int, default=5, help="throughput rounds per server")
    p.add_argument("--writers", type=int, default=4, help="client threads (throughput)")
    p.add_argument("--hooks", type=int, default=10, help="webhooks on the hooked server")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: temp)")
    p.add_argument("--out", type=Path, default=RESULTS, help="JSON results file")
    p.add_argument("--receiver", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--port-file", type=Path, help=argparse.SUPPRESS)
    # ``python -m bench`` hands every benchmark the same arguments: ignore the others'
    args, unknown = p.parse_known_args(argv)
    if unknown and args.receiver is None:
        print(f"bench.webhooks: ignoring {' '.join(unknown)}", file=sys.stderr)
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 on success."""
    args = parse_args(argv)
    if args.receiver is not None:
        run_receiver(args.receiver, args.port_file)
        return 0
    if (
        args.rate <= 0
        or args.duration <= 0
        or min(args.commits, args.rounds, args.writers, args.hooks) < 1
    ):
        print(
            "rate, duration, commits, rounds, writers and hooks must be positive", file=sys.stderr
        )
        return 2
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="loch-bench-webhooks-", dir=args.dir) as tmp:
        d = Path(tmp)
        receiver = Receiver(d)
        servers: list[Server] = []
        try:
            plain = Server(d, "plain")
            servers.append(plain)
            hooked = Server(d, "hooked")
            servers.append(hooked)
            subscribe(hooked.url, receiver.url("hooked"), args.hooks)
            print("throughput ...", file=sys.stderr, flush=True)
            tp = throughput(plain, hooked, receiver, args)
            print("latency ...", file=sys.stderr, flush=True)
            subscribe(plain.url, receiver.url("plain"), 1)
            lats = [
                latency(plain, receiver, 1, args.rate, args.duration),
                latency(hooked, receiver, args.hooks, args.rate, args.duration),
            ]
        finally:
            for s in servers:
                s.stop()
            receiver.stop()
    report: dict[str, Any] = {
        "benchmark": "webhooks",
        "command": shlex.join(
            [
                os.path.basename(sys.executable),
                "-m",
                "bench.webhooks",
                *(argv if argv is not None else sys.argv[1:]),
            ]
        ),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "revision": revision(),
        "settings": {
            k: (str(v) if isinstance(v, Path) else v)
            for k, v in vars(args).items()
            if k not in ("receiver", "port_file")
        },
        "throughput": asdict(tp),
        "latency": [asdict(x) for x in lats],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(table_text(tp, lats))
    print(f"results written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
