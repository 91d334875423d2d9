"""Measuring and printing: percentiles, aligned tables, progress notes, the machine's description."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def pct(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of ``values``; NaN if empty."""
    vals = sorted(values)
    if not vals:
        return math.nan
    return vals[max(0, math.ceil(p / 100 * len(vals)) - 1)]


def lat_stats(seconds: Sequence[float]) -> dict[str, float]:
    """p50 / p95 / mean / max in milliseconds."""
    ms = [s * 1000 for s in seconds]
    return {
        "p50_ms": round(pct(ms, 50), 3),
        "p95_ms": round(pct(ms, 95), 3),
        "mean_ms": round(statistics.fmean(ms), 3) if ms else math.nan,
        "max_ms": round(max(ms), 3) if ms else math.nan,
        "n": len(ms),
    }


def table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print an aligned text table: the first column left-aligned, the rest right-aligned."""

    def cell(v: Any) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
        return str(v)

    text = [[cell(v) for v in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in text)) if text else len(h) for i, h in enumerate(headers)]
    print(f"\n{title}")
    line = "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths)))
    print(line)
    print("-" * len(line))
    for r in text:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths))))
    sys.stdout.flush()


def note(msg: str) -> None:
    """Progress and diagnostics go to stderr, tables to stdout."""
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


def load_avg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else []


def size_label(n: int) -> str:
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000}m"
    return f"{n // 1000}k" if n % 1000 == 0 else str(n)


def git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "--no-optional-locks", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment() -> dict[str, Any]:
    from importlib.metadata import PackageNotFoundError, version

    versions: dict[str, str | None] = {}
    for pkg in ("mcpower", "faiss-cpu", "onnxruntime", "torch", "sentence-transformers", "mcp", "numpy"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            versions[pkg] = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": _cpu_model(),
        "cpus": cpus,
        "versions": versions,
        "commit": git_commit(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
