"""Section cold: `mcpower search` in a fresh process against the floor, measured in one run.

The floor is what any local search with this model pays before it does anything: a Python process
that imports numpy, faiss, tokenizers and onnxruntime, reads the tokenizer and opens an ONNX
Runtime session on the same model file mcpower's query embedder opens (the int8 export for the
packaged model: `mcpower.embedding.query_backend`). Runs alternate (floor, search on each dataset), so every
side sees the same machine; the first round is discarded (it fills the page cache). The targets
are medians of each round's ratio to the floor run beside it: at most 1.2x the floor on the FastAPI
docs (issue 30; 1.3x in issue 10), 2x at 100k chunks. The ratio of the medians is reported too.

mcpower's modules are byte-compiled first, as `pip install` does: an editable install under
PYTHONDONTWRITEBYTECODE=1 (as on the CI machines) would otherwise compile them from source in every
process, 0.04 s the libraries of the floor, installed by pip, never pay.
"""

from __future__ import annotations

import argparse
import compileall
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from suite.datasets import collection_dataset, collection_files, ensure_dataset
from suite.report import load_avg, table
from suite.search import SyntheticSource, build_synthetic
from suite.server import mcpower_argv

FLOOR = """
import sys
import faiss, numpy, onnxruntime, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[1])
opts = onnxruntime.SessionOptions()
opts.log_severity_level = 3
onnxruntime.InferenceSession(sys.argv[2], opts, providers=["CPUExecutionProvider"])
"""


def run(args: argparse.Namespace) -> dict[str, Any]:
    import mcpower
    from mcpower.checksums import FileHashes
    from mcpower.config import default_cache_dir
    from mcpower.defaults import DEFAULT_MODEL
    from mcpower.embedding import query_backend, resolve_model
    from mcpower.embedding.export import export_onnx

    compileall.compile_dir(Path(mcpower.__file__).parent, quiet=1)
    cache = default_cache_dir()
    spec = resolve_model(DEFAULT_MODEL, FileHashes(cache))
    onnx_file = export_onnx(spec, cache, quantized=query_backend(DEFAULT_MODEL) == "onnx-int8")
    floor = [sys.executable, "-c", FLOOR, str(spec.path / "tokenizer.json"), str(onnx_file)]

    fastapi_root = args.datasets_dir / "mcp"
    ensure_dataset(args.corpora / "docs-fastapi" / "corpus", fastapi_root, "fastapi")
    size = 10_000 if args.quick else 100_000
    scifact, _, _ = collection_dataset(args.corpora, "scifact", args.datasets_dir, args.quick)
    docs_dir, _, _ = collection_files(args.corpora, "scifact")
    synthetic_root = args.datasets_dir / "synthetic"
    synthetic = build_synthetic(SyntheticSource(args.datasets_dir / scifact["id"], docs_dir), synthetic_root, size)

    search = [*mcpower_argv(), "search"]
    commands = {
        "floor": floor,
        "fastapi": [*search, "fastapi", "how do I declare a path parameter", "--datasets-dir", str(fastapi_root)],
        f"synthetic-{size}": [
            *search,
            synthetic["id"],
            "vitamin D deficiency increases the risk of infection",
            "--datasets-dir",
            str(synthetic_root),
        ],
    }
    rounds = 3 if args.quick else 9
    times: dict[str, list[float]] = {name: [] for name in commands}
    cpu: dict[str, list[float]] = {name: [] for name in commands}  # user + system: less swayed by other load
    for i in range(rounds + 1):
        for name, argv in commands.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t = time.perf_counter()
            subprocess.run(argv, check=True, capture_output=True)
            wall = time.perf_counter() - t
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if i:  # the first round fills the page cache
                times[name].append(wall)
                cpu[name].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    cpu_medians = {name: statistics.median(ts) for name, ts in cpu.items()}
    # Each round's search against the floor run just before it: the host's speed drifts between
    # rounds (here it flips between two speeds, ~0.55 and ~0.75 s for the floor), which a ratio of
    # medians taken over different rounds mixes in; a pair sees the same host (issue 30: medians of
    # interleaved pairs).
    paired = {
        name: statistics.median(t / f for t, f in zip(ts, times["floor"], strict=True))
        for name, ts in times.items()
        if name != "floor"
    }
    cpu_paired = {
        name: statistics.median(t / f for t, f in zip(ts, cpu["floor"], strict=True))
        for name, ts in cpu.items()
        if name != "floor"
    }
    out: dict[str, Any] = {
        "rounds": rounds,
        "load_average": load_avg(),
        "median_s": {name: round(m, 3) for name, m in medians.items()},
        "runs_s": {name: [round(t, 3) for t in ts] for name, ts in times.items()},
        "ratio_to_floor": {name: round(m / medians["floor"], 3) for name, m in medians.items() if name != "floor"},
        "cpu_median_s": {name: round(m, 3) for name, m in cpu_medians.items()},
        "cpu_ratio_to_floor": {
            name: round(m / cpu_medians["floor"], 3) for name, m in cpu_medians.items() if name != "floor"
        },
        "paired_ratio_to_floor": {name: round(r, 3) for name, r in paired.items()},
        "cpu_paired_ratio_to_floor": {name: round(r, 3) for name, r in cpu_paired.items()},
        "synthetic_size": size,
    }
    table(
        "cold search vs floor (medians of alternating runs)",
        ["process", "median s", "min s", "x floor", "pairs x floor", "CPU s", "CPU x floor", "CPU pairs x floor"],
        [
            [
                name,
                f"{medians[name]:.3f}",
                f"{min(times[name]):.3f}",
                out["ratio_to_floor"].get(name, 1.0),
                out["paired_ratio_to_floor"].get(name, 1.0),
                f"{cpu_medians[name]:.3f}",
                out["cpu_ratio_to_floor"].get(name, 1.0),
                out["cpu_paired_ratio_to_floor"].get(name, 1.0),
            ]
            for name in commands
        ],
    )
    return out
