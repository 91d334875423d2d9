"""Incremental re-ingest: after editing one file of a corpus, how long does `mcpower ingest` take?

    python benchmarks/reingest.py                  # SciFact (5,183 abstracts), packaged model, onnx
    python benchmarks/reingest.py --backend onnx-int8
    python benchmarks/reingest.py --fake           # the tests' fake embedder: a quick run of the plumbing

Copies the corpus into a temporary folder, runs a full `mcpower ingest` (a subprocess, as a user
would), appends a paragraph to one file, runs `mcpower ingest` again, and reports both wall times,
their ratio (target: the re-ingest under 10% of the full ingest), and the second run's counts.
A one-file warm-up ingest first makes sure the model (and its ONNX export) is cached, so the full
run is not charged for it. With --fake embedding costs nothing, so the ratio says little: it shows
the fixed costs (reading, hashing, writing SQLite and FAISS) that a re-ingest still pays.
Prints a table; writes JSON to benchmarks/results/reingest.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
TESTS_DIR = BENCH_DIR.parent / "tests"
DEFAULT_DOCS = Path("/work/shared/bench/scifact/docs")
DATASET = "reingest"
TARGET_RATIO = 0.10


def ingest(
    command: list[str], source: Path, datasets: Path, backend: str | None, dataset: str = DATASET
) -> dict[str, Any]:
    """One `mcpower ingest --json` run: its JSON summary plus the wall time."""
    argv = [*command, "ingest", str(source), "--id", dataset, "--datasets-dir", str(datasets), "--json", "--quiet"]
    if backend:
        argv += ["--backend", backend]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"ingest failed ({done.returncode}): {done.stderr[-2000:]}")
    return {**json.loads(done.stdout), "wall_seconds": round(wall, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=Path, default=DEFAULT_DOCS, help="corpus folder to copy")
    parser.add_argument("--backend", help="onnx (default), onnx-int8 or torch")
    parser.add_argument("--fake", action="store_true", help="use the tests' fake embedder (no model)")
    parser.add_argument("--workdir", type=Path, help="keep the copy and the dataset here")
    parser.add_argument("--json-out", type=Path, default=BENCH_DIR / "results" / "reingest.json")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mcpower-reingest-") as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        if args.fake:
            sys.path.insert(0, str(TESTS_DIR))
            from server_fixtures import write_launcher

            command = [sys.executable, str(write_launcher(root))]
        else:
            command = [sys.executable, "-m", "mcpower"]
        source, datasets = root / "src", root / "datasets"
        shutil.rmtree(source, ignore_errors=True)
        shutil.rmtree(datasets, ignore_errors=True)
        shutil.copytree(args.docs, source)
        files = sorted(p for p in source.rglob("*") if p.is_file())

        warm = root / "warm"
        warm.mkdir(exist_ok=True)
        shutil.copy(files[0], warm / files[0].name)
        print("warm-up ingest (model load and export) ...", file=sys.stderr, flush=True)
        warm_up = ingest(command, warm, datasets, args.backend, dataset="warm-up")

        print(f"full ingest of {len(files)} files ...", file=sys.stderr, flush=True)
        full = ingest(command, source, datasets, args.backend)
        edited = files[len(files) // 2]
        with open(edited, "a", encoding="utf-8") as f:
            f.write("\n\nAn added paragraph: the re-ingest benchmark edited this file.\n")
        print(f"re-ingest after editing {edited.name} ...", file=sys.stderr, flush=True)
        again = ingest(command, source, datasets, args.backend)

    ratio = again["wall_seconds"] / full["wall_seconds"]
    result = {
        "corpus": str(args.docs),
        "files": len(files),
        "model": "fake" if args.fake else "all-MiniLM-L6-v2",
        "backend": args.backend or "onnx",
        "edited": edited.name,
        "warm_up_seconds": warm_up["wall_seconds"],
        "full": full,
        "reingest": again,
        "ratio": round(ratio, 4),
        "ingest_seconds_ratio": round(again["seconds"] / full["seconds"], 4) if full["seconds"] else None,
        "target_ratio": TARGET_RATIO,
    }
    rows = [
        ("corpus", f"{result['files']} files from {args.docs}"),
        ("embedder", f"{result['model']} ({result['backend']})"),
        ("full ingest", f"{full['wall_seconds']:.1f} s wall, {full['chunks']} chunks, {full['embedded']} embedded"),
        ("re-ingest", f"{again['wall_seconds']:.1f} s wall ({again['seconds']:.1f} s in ingest)"),
        ("ratio", f"{ratio:.1%} (target < {TARGET_RATIO:.0%})"),
        (
            "re-ingest counts",
            f"{again['added']} added, {again['changed']} changed, {again['removed']} removed, "
            f"{again['unchanged']} unchanged; {again['embedded']} chunks embedded",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json_out}", file=sys.stderr)


if __name__ == "__main__":
    main()
