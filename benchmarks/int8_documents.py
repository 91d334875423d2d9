"""Documents embedded by the int8 model, queries in fp32: does retrieval hold, and how much faster is ingest?

    nice -n 10 python benchmarks/int8_documents.py [--sets NAME ...] [--datasets-dir DIR] [--out FILE]

Issue 30 item 4: should a plain `mcpower ingest` embed documents with the int8 (dynamically
quantised) export? For each judged set (as agent_results.py reads them: flask, jinja, click, fastapi
with their judged questions; scifact and cranfield as run.py ingests them), the corpus is ingested
twice with the default model, once with the `onnx` (fp32) backend and once with `onnx-int8`, one
after the other in this run (an ingest already in the cache with the same model, backend, chunking
and corpus is reused, and its recorded time is then not from this run: the table says so). Both
datasets are evaluated as `mcpower eval` computes it (each document once, at its best chunk, depth
300) with query vectors from the fp32 model — what search does for every dataset. Printed per set:
hybrid and semantic nDCG@10 of both, the differences, and ingest chunks/s of both with their ratio.
The bar for int8 documents as the default: hybrid nDCG@10 within 0.005 of fp32 on every set.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_results import CACHE, DEFAULT_CORPORA, DOC_SETS, SETS, evaluate_pages, package_tree
from suite.datasets import collection_dataset, ensure_dataset
from suite.report import environment, load_avg, note, table

BACKENDS = ("onnx", "onnx-int8")


def datasets(name: str, args: argparse.Namespace) -> tuple[dict[str, dict[str, Any]], dict[str, str], Any]:
    from agent_results import load_set

    out: dict[str, dict[str, Any]] = {}
    if name in ("scifact", "cranfield"):
        for backend in BACKENDS:
            out[backend], queries, qrels = collection_dataset(args.corpora, name, args.datasets_dir, False, backend)
        return out, queries, qrels
    queries, qrels, _ = load_set(name)
    corpus = args.corpora / "docs-fastapi" / "corpus" if name == "fastapi" else args.doc_roots[name]
    if not corpus.is_dir():
        raise SystemExit(f"{name}: no folder {corpus} (install the Debian package)")
    for backend in BACKENDS:
        suffix = "" if backend == "onnx" else "-int8"
        out[backend] = ensure_dataset(corpus, args.datasets_dir, f"{name}-docs{suffix}", backend)
    return out, queries, qrels


def evaluate_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from mcpower.embedding import load_embedder
    from mcpower.registry import Registry

    built, queries, qrels = datasets(name, args)
    fp32 = load_embedder(backend="onnx")  # the query model of every dataset (embedding/__init__.py)
    registry = Registry(args.datasets_dir, embedder_factory=lambda model: fp32, query_cache=0)
    out: dict[str, Any] = {"ingest": built, "modes": {}}
    try:
        for mode in ("hybrid", "semantic"):
            row: dict[str, Any] = {}
            for backend, info in built.items():
                report = evaluate_pages(registry, info["id"], queries, qrels, mode)
                row[backend] = round(report.metrics["ndcg@10"], 4)
            row["delta"] = round(row["onnx-int8"] - row["onnx"], 4)
            out["modes"][mode] = row
            note(f"{name} {mode}: fp32 docs {row['onnx']:.4f}, int8 docs {row['onnx-int8']:.4f} ({row['delta']:+.4f})")
    finally:
        registry.close()
    speeds = [built[b].get("chunks_per_second") for b in BACKENDS]
    out["speed_ratio"] = round(speeds[1] / speeds[0], 2) if all(speeds) else None
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=SETS, default=["fastapi", "cranfield", "click", "jinja", "flask"])
    ap.add_argument("--datasets-dir", type=Path, default=CACHE / package_tree())
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.doc_roots = dict(DOC_SETS)
    args.datasets_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment(), "load_average_before": load_avg(), "sets": {}}
    for name in args.sets:
        results["sets"][name] = evaluate_set(name, args)
        if args.out:  # after each set: a long run keeps what it measured
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    results["load_average_after"] = load_avg()

    def speed(r: dict[str, Any], backend: str) -> str:
        info = r["ingest"][backend]
        return "reused" if info.get("reused") else str(info.get("chunks_per_second"))

    table(
        "int8 documents, fp32 queries: nDCG@10 (eval depth 300) and ingest chunks/s",
        [
            "set",
            "chunks",
            "hybrid fp32",
            "hybrid int8 d",
            "delta",
            "sem fp32",
            "sem int8 d",
            "delta",
            "c/s fp32",
            "c/s int8",
            "x",
        ],
        [
            [
                name,
                r["ingest"]["onnx"].get("chunks"),
                r["modes"]["hybrid"]["onnx"],
                r["modes"]["hybrid"]["onnx-int8"],
                f"{r['modes']['hybrid']['delta']:+.4f}",
                r["modes"]["semantic"]["onnx"],
                r["modes"]["semantic"]["onnx-int8"],
                f"{r['modes']['semantic']['delta']:+.4f}",
                speed(r, "onnx"),
                speed(r, "onnx-int8"),
                r["speed_ratio"] or "-",
            ]
            for name, r in results["sets"].items()
        ],
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
