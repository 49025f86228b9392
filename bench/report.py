"""Regenerate ``docs/benchmarks.md`` (and its plots) from ``bench/results/*.json``.

Every result file that is present is included; missing ones are listed as not run.
Files written by :mod:`bench.common` carry a ``figures`` list; ``scale.json``,
``webhooks.json``, ``spark_catalog.json`` and ``replicas.json`` have shapes of their
own and are read here (a file of unknown shape gets its ``figures`` if it has them,
else its numeric ratios).

Usage: ``python -m bench.report [--results DIR] [--out docs/benchmarks.md]``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.common import ROOT, fmt, parse_known, profile_groups

RESULTS = Path(__file__).with_name("results")
DOC = ROOT / "docs" / "benchmarks.md"
MINE = ["throughput", "scale", "scale-1m", "history", "refs", "peer", "memory", "memory-arena2"]
OTHERS = ["webhooks", "replicas", "spark_catalog"]
SCALE_OPS = ["commit", "get_content", "entries_prefix", "diff_10", "merge_10"]
SCALE_LIMIT = 1.5


def load(results: Path, name: str) -> dict[str, Any] | None:
    """A result file, or None when absent or unreadable."""
    path = results / f"{name}.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data


def _size(n: int) -> str:
    for unit, div in (("M", 1_000_000), ("k", 1_000)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return f"{n:,}"


def _cell(x: Any, digits: str = "") -> str:
    if x is None:
        return ""
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int | float):
        return fmt(float(x)) + digits
    return str(x).replace("|", "\\|")


def _status(met: bool | None) -> str:
    return "" if met is None else ("**met**" if met else "**missed**")


def _when(data: dict[str, Any]) -> str:
    m = data.get("machine", {})
    load = m.get("loadavg") or m.get("loadavg_before") or []
    after = m.get("loadavg_after") or []
    rev = (data.get("revision") or {}).get("commit") or "?"
    parts = [f"run {data.get('when', '?')}", f"loch {rev[:10]}"]
    if load:
        parts.append(f"load average {load[0]:.1f} before")
    if after:
        parts.append(f"{after[0]:.1f} after")
    return ", ".join(parts)


# -- figures of each result file ------------------------------------------------------------


def figures_of(name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The figures of one result file, in the :class:`bench.common.Figure` shape."""
    if isinstance(data.get("figures"), list):
        return list(data["figures"])
    if data.get("benchmark") == "scale":
        return scale_figures(data)
    if name == "webhooks":
        return webhooks_figures(data)
    if name == "spark_catalog":
        return spark_figures(data)
    if name == "replicas":
        return replicas_figures(data)
    return generic_figures(data)


def scale_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Each operation at the largest size against the smallest."""
    res = data["results"]
    sizes = sorted(int(s) for s in res)
    lo, hi = str(sizes[0]), str(sizes[-1])
    out = []
    for op in [o for o in res[hi]["ops"] if o in res[lo]["ops"]]:
        a, b = res[hi]["ops"][op]["median_ms"], res[lo]["ops"][op]["median_ms"]
        # the target is for 1M keys against 1k
        target = op in SCALE_OPS and sizes[-1] >= 1_000_000
        out.append(
            {
                "name": f"{op} at {_size(sizes[-1])} keys",
                "value": a,
                "unit": "ms",
                "baseline": f"same at {_size(sizes[0])} keys",
                "baseline_value": b,
                "ratio": a / b,
                "target": f"ratio <= {SCALE_LIMIT}" if target else None,
                "met": (a / b <= SCALE_LIMIT) if target else None,
                "peak_rss_mb": data.get("peak_rss_mb") if op == "commit" else None,
            }
        )
    return out


def webhooks_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Throughput with and without webhooks, and delivery latency."""
    out: list[dict[str, Any]] = []
    tp = data.get("throughput") or {}
    if tp.get("hooked_median") and tp.get("plain_median"):
        out.append(
            {
                "name": f"commits/s with {tp.get('hooks')} webhooks ({tp.get('writers')} writers)",
                "value": tp["hooked_median"],
                "unit": "commits/s",
                "baseline": "same server without webhooks",
                "baseline_value": tp["plain_median"],
                "ratio": tp["hooked_median"] / tp["plain_median"],
            }
        )
    for lat in data.get("latency") or []:
        out.append(
            {
                "name": f"event-to-delivery median, {lat.get('webhooks')} webhook(s) at "
                f"{lat.get('rate')} commits/s",
                "value": lat.get("median_ms"),
                "unit": "ms",
                "baseline": "p99",
                "baseline_value": lat.get("p99_ms"),
            }
        )
    return out


def spark_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """A Spark append through Loch vs through a HadoopCatalog."""
    app = data.get("appends") or {}
    ratio = data.get("ratio_loch_to_hadoop") or {}
    out: list[dict[str, Any]] = []
    if "loch" in app and "hadoop" in app:
        out.append(
            {
                "name": "Spark append (Iceberg NessieCatalog on Loch), median",
                "value": app["loch"].get("median_ms"),
                "unit": "ms",
                "baseline": "same append on a HadoopCatalog",
                "baseline_value": app["hadoop"].get("median_ms"),
                "ratio": ratio.get("median"),
            }
        )
    if ratio.get("create_table") is not None:
        ct = data.get("create_table_ms") or {}
        out.append(
            {
                "name": "Spark create table on Loch",
                "value": ct.get("loch"),
                "unit": "ms",
                "baseline": "on a HadoopCatalog",
                "baseline_value": ct.get("hadoop"),
                "ratio": ratio.get("create_table"),
            }
        )
    return out


def replicas_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Commits/s through 1 and 3 replicas on PostgreSQL against the database's floor."""
    floor = data.get("floor_commits_per_second")
    out = []
    for r in data.get("results") or []:
        if not r.get("replicas"):
            continue
        out.append(
            {
                "name": f"commits/s, {r['replicas']} replica(s), {r.get('branches')} "
                f"branch(es), {r.get('clients')} clients (PostgreSQL)",
                "value": r.get("per_second"),
                "unit": "commits/s",
                "baseline": "PostgreSQL single-row transaction floor",
                "baseline_value": floor,
                "ratio": r.get("ratio_to_floor"),
                "note": f"p99 {r.get('p99_ms', 0):.0f} ms",
            }
        )
    return out


def _numbers(obj: Any, path: str = "") -> Iterator[tuple[str, float]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _numbers(v, f"{path}.{k}" if path else str(k))
    elif isinstance(obj, int | float) and not isinstance(obj, bool):
        yield path, float(obj)


def generic_figures(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Numbers whose name says ratio, median or per-second, outside machine/settings."""
    out = []
    for path, value in _numbers(
        {k: v for k, v in data.items() if k not in ("machine", "settings", "revision")}
    ):
        low = path.lower()
        if any(w in low for w in ("ratio", "median", "per_s", "_ms", "lag")):
            out.append(
                {
                    "name": path,
                    "value": value,
                    "unit": "",
                    "ratio": value if "ratio" in low else None,
                }
            )
    return out[:30]


# -- plots ---------------------------------------------------------------------------------


def plot_scale(data: dict[str, Any], out: Path) -> bool:
    """Median latency of each operation against the number of keys (log-log)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    res = data["results"]
    sizes = sorted(int(s) for s in res)
    ops = list(res[str(sizes[0])]["ops"])
    engine = [op for op in ops if not op.startswith("http_")]
    http = [op for op in ops if op.startswith("http_")]
    panels = [("VersionStore (in process)", engine)]
    if http:
        panels.append(("HTTP (loch serve)", http))
    colors = {op: f"C{i}" for i, op in enumerate(engine)}
    fig, axes = plt.subplots(
        1, len(panels), figsize=(6.5 * len(panels), 4.2), dpi=110, sharey=True, squeeze=False
    )
    for ax, (title, names) in zip(axes[0], panels, strict=True):
        for op in names:
            ys = [res[str(s)]["ops"][op]["median_ms"] for s in sizes]
            base = op.removeprefix("http_")
            ax.plot(sizes, ys, marker="o", label=base, color=colors.get(base))
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("keys on the branch")
        ax.set_title(f"{title}, SQLite")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_ylabel("median latency (ms)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return True


def plot_memory(data: dict[str, Any], out: Path) -> bool:
    """Server RSS against commits landed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    samples = data.get("details", {}).get("samples") or []
    if not samples:
        return False
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=110)
    ax.plot([s["commits"] for s in samples], [s["rss_mb"] for s in samples], marker=".")
    ax.axhline(300, color="red", linestyle="--", linewidth=1, label="target 300 MB")
    ax.set_xlabel("commits landed")
    ax.set_ylabel("server RSS (MB)")
    ax.set_ylim(bottom=0)
    ax.set_title("loch serve RSS under commit load, 1M-key repository")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    return True


# -- the document ------------------------------------------------------------------------

TITLES = {
    "throughput": "Commit throughput over HTTP",
    "scale": "Scale independence (1k to 100k keys, make bench)",
    "scale-1m": "Scale independence at 1M keys (separate command)",
    "history": "History (100k commits)",
    "refs": "References (40k tags, 10k branches)",
    "peer": "Peer: Loch vs pyiceberg's SQL catalog",
    "memory": "Memory under a long commit load (1M keys)",
    "memory-arena2": "Memory soak again, glibc malloc limited to 2 arenas (diagnostic)",
    "webhooks": "Webhooks",
    "replicas": "Replicas",
    "spark_catalog": "Spark catalog overhead",
}


def figure_table(figs: list[dict[str, Any]]) -> list[str]:
    """A Markdown table of figures."""
    lines = [
        "| figure | value | baseline (same run) | baseline value | ratio | target | status "
        "| peak RSS MB |",
        "|---|---:|---|---:|---:|---|---|---:|",
    ]
    for f in figs:
        unit = f" {f['unit']}" if f.get("unit") else ""
        ratio = f.get("ratio")
        lines.append(
            "| "
            + " | ".join(
                [
                    _cell(f.get("name")) + (f" ({_cell(f['note'])})" if f.get("note") else ""),
                    _cell(f.get("value")) + unit,
                    _cell(f.get("baseline")),
                    _cell(f.get("baseline_value")),
                    "" if ratio is None else f"{ratio:.2f}",
                    _cell(f.get("target")),
                    _status(f.get("met")),
                    _cell(f.get("peak_rss_mb")),
                ]
            )
            + " |"
        )
    return lines


def scale_table(data: dict[str, Any]) -> list[str]:
    """Every operation at every size, and the ratios to the smallest."""
    res = data["results"]
    sizes = sorted(int(s) for s in res)
    ops = list(res[str(sizes[0])]["ops"])
    head = ["operation (median ms)", *[_size(s) for s in sizes]]
    head += [f"{_size(s)}/{_size(sizes[0])}" for s in sizes[1:]]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for op in ops:
        base = res[str(sizes[0])]["ops"][op]["median_ms"]
        row = [op] + [f"{res[str(s)]['ops'][op]['median_ms']:.3f}" for s in sizes]
        row += [f"{res[str(s)]['ops'][op]['median_ms'] / base:.2f}" for s in sizes[1:]]
        lines.append("| " + " | ".join(row) + " |")
    lines.append(
        "| build s | "
        + " | ".join(f"{res[str(s)]['build_s']:.1f}" for s in sizes)
        + " |"
        + " |" * (len(sizes) - 1)
    )
    lines.append(
        "| db MB | "
        + " | ".join(f"{res[str(s)]['db_bytes'] / 1e6:.1f}" for s in sizes)
        + " |"
        + " |" * (len(sizes) - 1)
    )
    return lines


def profile_lines(title: str, profile: dict[str, Any] | None) -> list[str]:
    """Where the time of a py-spy profile goes, and its hottest frames."""
    if not profile or not profile.get("samples"):
        return []
    lines = [
        f"**{title}** ({profile['samples']} GIL-holding samples; raw: `{profile.get('raw', '')}`).",
        "",
    ]
    groups = profile.get("groups")
    raw = ROOT / str(profile.get("raw", ""))
    if not groups and raw.is_file():
        groups = profile_groups(raw)
    if groups:
        lines += ["By part (first match from the root of each stack):", ""]
        lines += [f"- {share:.1%} {group}" for group, share in groups]
        lines.append("")
    lines += ["Hottest frames (self time):", ""]
    lines += [f"- {share:.1%} `{frame}`" for frame, share in profile["self"][:12]]
    lines += ["", "Inclusive (Loch and stack frames):", ""]
    lines += [
        f"- {share:.1%} `{frame}`"
        for frame, share in profile["inclusive"][:25]
        if "loch/" in frame or "routing" in frame or "json" in frame or "sqlite" in frame
    ][:14]
    return [*lines, ""]


def render(results: Path, doc: Path) -> str:
    """The Markdown document (plots are written next to it)."""
    plots = doc.parent / "benchmarks"
    data = {n: d for n in MINE + OTHERS if (d := load(results, n)) is not None}
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m bench`, then `python -m bench.report`) from "
        "`bench/results/*.json`; do not edit by hand. Every figure is measured in the same "
        "run as its baseline, the cases taking turns over several rounds, and the median is "
        "reported: the machine is a shared 2-core VM whose load (given per benchmark) moves "
        "absolute numbers by a factor of two or more, while the ratios hold better.",
        "",
        "Commands: `make bench` runs every registered benchmark (`bench/__main__.py`) and "
        "this report; two runs do not fit its 15-minute budget on 2 cores and are commands "
        "of their own, whose result files are committed and included here: the 1M-key size "
        "of the scale benchmark (`python -m bench.scale --sizes 1000,10000,100000,1000000 "
        "--out bench/results/scale-1m.json`, 2 to 6 min) and the memory soak (`python -m "
        "bench.memory`, a 1M-key repository and 100k + 50k commits over HTTP, 5 to 16 min). "
        "Each section names the exact command and time of its result file.",
        "",
        "## Targets",
        "",
        "| target | figure | value | status | command |",
        "|---|---|---:|---|---|",
    ]
    for name, d in data.items():
        for f in figures_of(name, d):
            if f.get("met") is None:
                continue
            shown = f"{_cell(f['value'])} {f.get('unit', '')}".strip()
            relative = any(w in str(f.get("target")) for w in ("ratio", "x ", "%"))
            if f.get("ratio") is not None and relative:
                shown += f" (ratio {f['ratio']:.2f})"
            lines.append(
                f"| {_cell(f.get('target'))} | {_cell(f['name'])} | {shown} | "
                f"{_status(f['met'])} | `{d.get('command')}` |"
            )
    lines.append("")
    for name in MINE + OTHERS:
        title = TITLES.get(name, name)
        d = data.get(name)
        lines += [f"## {title}", ""]
        if d is None:
            lines += [f"Not run: `bench/results/{name}.json` is absent.", ""]
            continue
        lines += [f"Command: `{d.get('command')}` ({_when(d)}).", ""]
        lines += figure_table(figures_of(name, d))
        lines.append("")
        if d.get("benchmark") == "scale":
            lines += scale_table(d)
            lines.append("")
            png = f"{name}.png"
            if plot_scale(d, plots / png):
                lines += [f"![latency vs keys](benchmarks/{png})", ""]
        if name.startswith("memory") and plot_memory(d, plots / f"{name}.png"):
            lines += [f"![RSS vs commits](benchmarks/{name}.png)", ""]
        det = d.get("details") or {}
        if name == "throughput":
            lines += [
                f"Load generator: {det.get('load_generator')}. SQLite floor durability: "
                f"{det.get('durability')}. Commits counted "
                f"{det.get('commits_landed_counted')}, branch length at the end "
                f"{det.get('branch_commits_at_end')}.",
                "",
            ]
            lines += profile_lines("Server profile, 16 clients committing", det.get("profile"))
        if name == "refs":
            lines += profile_lines("Server profile, listing 40k tags", det.get("profile"))
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__)
    p.add_argument("--results", type=Path, default=RESULTS, help="result files")
    p.add_argument("--out", type=Path, default=DOC, help="Markdown file to write")
    args: argparse.Namespace = parse_known(p, argv)
    return args


def main(argv: list[str] | None = None) -> int:
    """Write the report; 0 on success."""
    args = parse_args(argv)
    text = render(args.results, args.out)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(f"report written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
