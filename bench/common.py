"""Shared pieces of the benchmarks: result files, statistics, ``loch serve`` processes,
the ``wrk`` load generator, resident memory and ``py-spy`` profiles.

Every benchmark writes ``bench/results/<name>.json`` with a ``figures`` list (see
:class:`Figure`): each figure next to the baseline it was measured side by side with,
their ratio, the target if the issue sets one, and the peak resident memory of the
process that did the work. :mod:`bench.report` turns those files into
``docs/benchmarks.md``.
"""

from __future__ import annotations

import collections
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = Path(__file__).with_name("results")
PROFILES_DIR = RESULTS_DIR / "profiles"


# -- statistics ----------------------------------------------------------------------------------


@dataclass
class Stats:
    """Latencies of one operation, in milliseconds."""

    n: int
    median_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float

    @classmethod
    def of_seconds(cls, samples: Sequence[float]) -> Stats:
        """Statistics of samples given in seconds."""
        ms = sorted(s * 1000 for s in samples)
        p90 = ms[min(len(ms) - 1, round(0.9 * (len(ms) - 1)))]
        return cls(len(ms), statistics.median(ms), p90, ms[0], ms[-1])


def timed(fn: Callable[[], Any], repeat: int, warmup: int = 3) -> list[float]:
    """Seconds of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def interleaved(
    cases: dict[str, Callable[[], Any]], rounds: int, per_round: int, warmup: int = 3
) -> dict[str, list[float]]:
    """Time several cases side by side: each round runs ``per_round`` calls of every case,
    the cases taking turns (order rotated each round). Seconds per call, by case."""
    for fn in cases.values():
        for _ in range(warmup):
            fn()
    names = list(cases)
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            fn = cases[name]
            for _ in range(per_round):
                t0 = time.perf_counter()
                fn()
                out[name].append(time.perf_counter() - t0)
    return out


# -- figures and result files ------------------------------------------------------------------


@dataclass
class Figure:
    """One reported figure, measured side by side with its baseline.

    ``ratio`` is ``value / baseline_value``; ``target`` says in words what the issue asks,
    ``met`` whether this run meets it (None when no target applies).
    """

    name: str
    value: float
    unit: str
    baseline: str | None = None
    baseline_value: float | None = None
    ratio: float | None = None
    target: str | None = None
    met: bool | None = None
    peak_rss_mb: float | None = None
    note: str | None = None

    def __post_init__(self) -> None:
        if self.ratio is None and self.baseline_value:
            self.ratio = self.value / self.baseline_value


def machine() -> dict[str, Any]:
    """Python, SQLite, platform, CPU count and load average (call before and after)."""
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg": list(os.getloadavg()),
    }


def revision() -> dict[str, Any]:
    """The git commit of the checkout, and whether ``loch/`` has local changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "loch"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "loch_modified": None}
    return {"commit": head, "loch_modified": bool(dirty)}


def command(module: str, argv: Sequence[str] | None) -> str:
    """The command line that reproduces a run."""
    args = list(argv) if argv is not None else sys.argv[1:]
    return shlex.join(["python", "-m", module, *args])


def write_result(
    name: str,
    module: str,
    argv: Sequence[str] | None,
    started: dict[str, Any],
    settings: dict[str, Any],
    figures: list[Figure],
    details: dict[str, Any],
    out: Path | None = None,
) -> Path:
    """Write ``bench/results/<name>.json`` (or ``out``) and return its path."""
    path = out or RESULTS_DIR / f"{name}.json"
    report = {
        "benchmark": name,
        "command": command(module, argv),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {**started, "loadavg_after": list(os.getloadavg())},
        "revision": revision(),
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()},
        "figures": [asdict(f) for f in figures],
        "details": details,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    return path


def print_figures(figures: Sequence[Figure]) -> None:
    """The figures as a plain text table."""
    for f in figures:
        line = f"{f.name}: {fmt(f.value)} {f.unit}"
        if f.baseline is not None and f.baseline_value is not None:
            line += f"  vs {f.baseline}: {fmt(f.baseline_value)}"
        if f.ratio is not None:
            line += f"  ratio {f.ratio:.2f}"
        if f.met is not None:
            line += f"  [{'met' if f.met else 'MISSED'}: {f.target}]"
        if f.peak_rss_mb is not None:
            line += f"  peak RSS {f.peak_rss_mb:.0f} MB"
        print(line, flush=True)


def fmt(x: float) -> str:
    """A number with about three significant digits."""
    if x == 0 or abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    if abs(x) >= 1:
        return f"{x:.2f}"
    return f"{x:.3g}"


def log(msg: str) -> None:
    """Progress on stderr."""
    print(msg, file=sys.stderr, flush=True)


def parse_known(parser: Any, argv: Sequence[str] | None) -> Any:
    """Parse this benchmark's arguments; ``python -m bench`` hands every benchmark the same
    arguments, so unknown ones are ignored (with a note)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        log(f"{parser.prog}: ignoring {' '.join(unknown)}")
    return args


# -- memory ------------------------------------------------------------------------------------


def _status_kb(pid: int | str, field_name: str) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field_name + ":"):
                return float(line.split()[1])
    raise KeyError(field_name)


def rss_mb(pid: int | str = "self") -> float:
    """Current resident set size of a process, in MB (MiB)."""
    return _status_kb(pid, "VmRSS") / 1024


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident set size (``VmHWM``) since start or the last :func:`reset_peak_rss`."""
    return _status_kb(pid, "VmHWM") / 1024


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Reset the peak RSS of a process (``clear_refs`` 5), so that a peak can be
    attributed to one figure; False when the kernel refuses."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# -- servers -----------------------------------------------------------------------------------


def free_port() -> int:
    """A port the kernel handed out for port 0 a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    """A ``loch serve`` process (single uvicorn worker, ``--log-level warning`` so that no
    access log is written) on a store URL."""

    def __init__(self, store_url: str, log_path: Path, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log_path.open("wb")
        base = {k: v for k, v in os.environ.items() if not k.startswith("LOCH_")}
        self.proc = subprocess.Popen(
            [
                sys.prefix + "/bin/loch",
                "serve",
                "--port",
                str(self.port),
                "--store",
                store_url,
                "--log-level",
                "warning",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**base, **(env or {})},
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"loch serve exited with {self.proc.returncode}: {log_path}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("loch serve did not start in 60 s")
            time.sleep(0.1)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def head(self, branch: str = "main") -> str:
        """The hash of a branch."""
        r = httpx.get(f"{self.url}/api/v2/trees/{branch}", timeout=30)
        r.raise_for_status()
        h: str = r.json()["reference"]["hash"]
        return h

    def commits(self, branch: str = "main") -> int:
        """Number of commits on the first-parent chain of a branch."""
        r = httpx.get(f"{self.url}/api/v2/trees/{branch}", params={"fetch": "ALL"}, timeout=60)
        r.raise_for_status()
        n: int = r.json()["reference"]["metadata"]["numTotalCommits"]
        return n

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextmanager
def serving(store_url: str, log_path: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A :class:`Server` for the duration of a ``with`` block."""
    server = Server(store_url, log_path, env)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def workdir(prefix: str, parent: Path | None) -> Iterator[Path]:
    """A temporary directory (removed afterwards), on disk unless ``parent`` says otherwise."""
    with tempfile.TemporaryDirectory(prefix=prefix, dir=parent) as tmp:
        yield Path(tmp)


# -- wrk -------------------------------------------------------------------------------------------

_WRK_DONE = """
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,'
    .. '"status":%d,"timeout":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d}\\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max))
end
"""

COMMIT_LUA = """
-- One commit per request: a new ICEBERG_TABLE under namespace NS, a key of its own
-- (PREFIX + thread + counter), expected hash = the latest hash this thread saw.
local head = os.getenv("LOCH_HEAD")
local ns = os.getenv("LOCH_NS")
local prefix = os.getenv("LOCH_PREFIX")
local branch = os.getenv("LOCH_BRANCH")
local n = 0
local counter = 0
setup = function(thread)
  counter = counter + 1
  thread:set("tid", counter)
end
init = function(args)
  wrk.method = "POST"
  wrk.headers["Content-Type"] = "application/json"
end
request = function()
  n = n + 1
  local body = '{"commitMeta":{"message":"bench commit","authors":["bench"]},'
    .. '"operations":[{"type":"PUT","key":{"elements":["' .. ns .. '","' .. prefix
    .. tostring(tid or 0) .. '_' .. n .. '"]},"content":{"type":"ICEBERG_TABLE",'
    .. '"metadataLocation":"s3://bench/' .. prefix .. n .. '/metadata.json",'
    .. '"snapshotId":' .. n .. ',"schemaId":0,"specId":0,"sortOrderId":0}}]}'
  return wrk.format(nil, "/api/v2/trees/" .. branch .. "@" .. head .. "/history/commit",
    nil, body)
end
response = function(status, headers, body)
  if status == 200 then
    local h = string.match(body, '"hash":"(%x+)"')
    if h then head = h end
  elseif status >= 400 then
    io.stderr:write("commit " .. status .. ": " .. string.sub(body, 1, 300) .. "\\n")
  end
end
"""


@dataclass
class WrkRun:
    """One ``wrk`` run: completed requests, failures, rate and latency percentiles."""

    connections: int
    requests: int
    errors: int
    seconds: float
    rate: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    stderr: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def wrk_available() -> bool:
    """Whether the ``wrk`` binary is on the PATH."""
    return shutil.which("wrk") is not None


def run_wrk(
    url: str,
    connections: int,
    seconds: float,
    script: str = "",
    env: dict[str, str] | None = None,
    threads: int = 1,
) -> WrkRun:
    """Run ``wrk`` (one OS thread: ``connections`` keep-alive connections on epoll) against
    ``url``; ``script`` is Lua run in each thread (a ``done`` hook is added)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script + _WRK_DONE)
        lua = f.name
    try:
        proc = subprocess.run(
            [
                "wrk",
                f"-t{threads}",
                f"-c{connections}",
                f"-d{max(1, round(seconds))}s",
                "--timeout",
                "30s",
                "-s",
                lua,
                url,
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            check=False,
        )
    finally:
        os.unlink(lua)
    m = re.search(r"WRKJSON (\{.*\})", proc.stdout)
    if proc.returncode != 0 or m is None:
        raise RuntimeError(f"wrk failed ({proc.returncode}): {proc.stdout}\n{proc.stderr}")
    d = json.loads(m.group(1))
    errors = d["connect"] + d["read"] + d["write"] + d["status"] + d["timeout"]
    secs = d["duration_us"] / 1e6
    ok = d["requests"] - errors
    return WrkRun(
        connections=connections,
        requests=ok,
        errors=errors,
        seconds=secs,
        rate=ok / secs,
        p50_ms=d["p50_us"] / 1000,
        p90_ms=d["p90_us"] / 1000,
        p99_ms=d["p99_us"] / 1000,
        max_ms=d["max_us"] / 1000,
        stderr=proc.stderr[-2000:],
    )


# -- profiles ----------------------------------------------------------------------------------


def pyspy_binary() -> str | None:
    """``py-spy`` next to the interpreter, else on the PATH."""
    local = Path(sys.prefix) / "bin" / "py-spy"
    if local.exists():
        return str(local)
    return shutil.which("py-spy")


def start_profile(pid: int, seconds: float, out: Path, rate: int = 200) -> subprocess.Popen[bytes]:
    """``py-spy record --gil -f raw`` of a process for ``seconds`` (samples only while a
    thread holds the GIL, i.e. Python work, not waits for I/O or locks)."""
    exe = pyspy_binary()
    if exe is None:
        raise RuntimeError("py-spy not found")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            exe,
            "record",
            "-r",
            str(rate),
            "--gil",
            "-f",
            "raw",
            "-p",
            str(pid),
            "-d",
            str(max(1, round(seconds))),
            "-o",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def _frame_name(frame: str) -> str:
    # "func (path/to/file.py:123)" -> "func (path/to/file.py)"
    frame = re.sub(r":\d+\)$", ")", frame)
    return frame.replace(str(ROOT) + "/", "").replace(sys.prefix + "/lib/", "")


# Where a sample's time goes, by the first rule matching its stack (root to leaf).
PROFILE_GROUPS: list[tuple[str, tuple[str, ...]]] = [
    ("webhook dispatcher thread", ("loch/events/dispatcher.py",)),
    ("SQLite calls (backend)", ("loch/backends/sqlite.py",)),
    ("object encoding and hashing", ("loch/store/objects.py", "loch/versioning/index.py")),
    ("commit logic (VersionStore, combiner)", ("loch/versioning/",)),
    ("reference views", ("loch/model/views.py",)),
    (
        "endpoint code (parse, validate, respond)",
        ("loch/api/v2.py", "loch/api/v1.py", "loch/api/common.py", "loch/api/responses.py"),
    ),
    ("thread hand-off (anyio workers, locks)", ("anyio/", "threading.py", "concurrent/")),
    (
        "HTTP stack (uvicorn, starlette, fastapi, middleware)",
        ("uvicorn/", "starlette/", "fastapi/", "loch/api/middleware.py"),
    ),
]


def profile_groups(raw: Path) -> list[tuple[str, float]]:
    """Share of samples per :data:`PROFILE_GROUPS` entry (``other`` for the rest)."""
    counts: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        total += int(n)
        group = "other"
        for name, marks in PROFILE_GROUPS:
            if any(m in stack for m in marks):
                group = name
                break
        counts[group] = counts.get(group, 0) + int(n)
    if not total:
        return []
    return sorted(((g, c / total) for g, c in counts.items()), key=lambda x: -x[1])


def summarize_profile(raw: Path, top: int = 25) -> dict[str, Any]:
    """Self and inclusive shares of the hottest frames of a ``py-spy -f raw`` file, and the
    share of each part of the server (:data:`PROFILE_GROUPS`)."""
    own: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame_name(f) for f in stack.split(";")]
        own[frames[-1]] += n
        for fr in set(frames):
            incl[fr] += n
    if not total:
        return {"samples": 0, "self": [], "inclusive": []}

    def share(c: collections.Counter[str], skip: Callable[[str], bool]) -> list[list[Any]]:
        return [[f, round(v / total, 4)] for f, v in c.most_common() if not skip(f)][:top]

    boring = re.compile(r"^(<module>|main|run|Thread\.|Command\.|Context\.|Group\.|LochGroup)")
    return {
        "samples": total,
        "groups": [[g, round(v, 4)] for g, v in profile_groups(raw)],
        "self": share(own, lambda f: False),
        "inclusive": share(incl, lambda f: bool(boring.match(f))),
    }
