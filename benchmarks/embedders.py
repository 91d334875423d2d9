"""Compare the embedding backends: agreement with torch, throughput, query latency, start-up cost.

    python benchmarks/embedders.py [--n 2000] [--corpus DIR] [--threads 2] [--repeat 1] [--cache-dir DIR]

The corpus is a folder of text/markdown files (default: the SciFact abstracts); the first ``--n``
files in name order, each cut to 1000 characters, are the chunks. Agreement with torch is measured
on the first 200 of them; queries come from ``queries.jsonl`` next to the folder if there is one.
Throughput rounds alternate between backends and the best round is reported (other processes on
the machine only ever slow a round down; the load average is printed too). Start-up is measured
in fresh interpreters, which also check that a cached ONNX export loads and answers a query
without importing torch. Needs the ``mcpower`` package importable (installed, or PYTHONPATH=.).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from suite.questions import question_texts

from mcpower.embedding import Embedder, resolve_model
from mcpower.embedding.onnx import OnnxEmbedder
from mcpower.embedding.torch import TorchEmbedder

DEFAULT_CORPUS = Path("/work/shared/bench/scifact/docs")
CHARS, N_AGREE, N_QUERIES = 1000, 200, 100

_EXPORT = """
import sys
from pathlib import Path
from mcpower.embedding import resolve_model
from mcpower.embedding.onnx import export_onnx
for quantized in (False, True):
    export_onnx(resolve_model(), Path(sys.argv[1]), quantized=quantized)
"""
# Construct an OnnxEmbedder from the cache in a fresh interpreter, embed one query.
_CHILD = """
import json, sys, time
from pathlib import Path
t0 = time.perf_counter()
from mcpower.embedding import resolve_model
from mcpower.embedding.onnx import OnnxEmbedder
t1 = time.perf_counter()
emb = OnnxEmbedder(resolve_model(), quantized=sys.argv[2] == "1", cache_dir=Path(sys.argv[1]))
t2 = time.perf_counter()
emb.embed_query("does aspirin prevent heart attacks?")
t3 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "construct": t2 - t1, "query": t3 - t2, "torch": "torch" in sys.modules}))
"""


def load_texts(corpus: Path, n: int) -> list[str]:
    files = sorted(p for p in corpus.iterdir() if p.is_file())[:n]
    return [p.read_text(encoding="utf-8", errors="replace")[:CHARS] for p in files]


def load_queries(corpus: Path, texts: list[str]) -> list[str]:
    file = corpus.parent / "queries.jsonl"
    if file.is_file():
        return question_texts(file, N_QUERIES)
    return [t[:100] for t in texts[:N_QUERIES]]


def fresh_python(code: str, *args: str) -> tuple[float, str]:
    """Wall time of a new interpreter running ``code``, and its stdout."""
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return time.perf_counter() - t, out.stdout


def load() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="number of chunks for throughput")
    ap.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of text files")
    ap.add_argument("--threads", type=int, default=2, help="CPUs to use (pins the process)")
    ap.add_argument("--repeat", type=int, default=1, help="throughput rounds per backend (best is shown)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="ONNX cache (default: a new temp dir)")
    args = ap.parse_args()

    # Pin before any thread pool starts: onnxruntime sizes its pool from the affinity mask (and
    # child processes inherit it); torch is told explicitly.
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[: args.threads])
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="mcpower-onnx-"))
    texts = load_texts(args.corpus, args.n)
    queries, sample, spec = load_queries(args.corpus, texts), texts[:N_AGREE], resolve_model()
    print(f"{len(texts)} chunks from {args.corpus}, {len(queries)} queries, {args.threads} threads; {load()}")
    wall, _ = fresh_python(_EXPORT, str(cache))
    print(f"ONNX export fp32 + int8 in a fresh process (instant if cached): {wall:.1f} s, in {cache}")

    def build_torch() -> Embedder:
        import torch  # timed: part of what the torch backend costs at start-up

        torch.set_num_threads(args.threads)
        return TorchEmbedder(spec)

    builders: dict[str, Callable[[], Embedder]] = {
        "torch": build_torch,
        "onnx": lambda: OnnxEmbedder(spec, cache_dir=cache),
        "onnx-int8": lambda: OnnxEmbedder(spec, quantized=True, cache_dir=cache),
    }
    embedders, construct, cosines, latency = {}, {}, {}, {}
    reference = np.zeros(0, dtype=np.float32)
    for name, build in builders.items():
        t = time.perf_counter()
        embedders[name] = emb = build()
        construct[name] = time.perf_counter() - t
        vecs = emb.embed_documents(sample)  # also the warm-up
        reference = vecs if name == "torch" else reference
        cosines[name] = np.sum(vecs * reference, axis=1)
        lat = []
        for q in queries:
            t = time.perf_counter()
            emb.embed_query(q)
            lat.append(time.perf_counter() - t)
        latency[name] = statistics.median(lat)
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    for _ in range(args.repeat):
        for name, emb in embedders.items():
            t = time.perf_counter()
            emb.embed_documents(texts)
            rates[name].append(len(texts) / (time.perf_counter() - t))

    head = ("backend", "construct s", "chunks/s", "query ms", "cos mean", "cos min")
    print("\n{:<10} {:>11} {:>9} {:>9} {:>9} {:>9}".format(*head))
    for name in embedders:
        c = cosines[name]
        print(
            f"{name:<10} {construct[name]:>11.2f} {max(rates[name]):>9.1f} {1000 * latency[name]:>9.2f} "
            f"{c.mean():>9.5f} {c.min():>9.5f}"
        )
    print("(torch construct includes importing torch and sentence-transformers; cosines vs torch on")
    print(f" {len(sample)} chunks; chunks/s best of {args.repeat}; query ms median of {len(queries)}; {load()})")

    bare = min(fresh_python("pass")[0] for _ in range(3))
    imp = min(fresh_python("import mcpower.embedding.onnx")[0] for _ in range(3))
    print(f"\n`python -c 'import mcpower.embedding.onnx'`: {imp:.2f} s (bare interpreter {bare:.2f} s)")
    for quantized in ("0", "1"):
        runs = [fresh_python(_CHILD, str(cache), quantized) for _ in range(3)]
        wall, out = min(runs)
        r = json.loads(out)
        print(
            f"fresh process, cached {'int8' if quantized == '1' else 'fp32'}: import {r['import']:.2f} s, "
            f"construct {r['construct']:.2f} s, first query {1000 * r['query']:.1f} ms, "
            f"total {wall:.2f} s, torch imported: {any(json.loads(o)['torch'] for _, o in runs)}"
        )
    if args.cache_dir is None:
        shutil.rmtree(cache)


if __name__ == "__main__":
    main()
