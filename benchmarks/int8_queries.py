"""Queries embedded by the int8 model against documents embedded in fp32: does retrieval hold?

    python benchmarks/int8_queries.py [--sets NAME ...] [--datasets-dir DIR] [--out FILE]

For each judged set (as agent_results.py ingests them: flask, jinja, click, fastapi with their
judged questions; scifact and cranfield as run.py ingests them; all with the default fp32 model),
the same fp32 dataset is evaluated twice, as `mcpower eval` computes it (each document once, at its
best chunk, depth 300): with query vectors from the fp32 model (what search does today) and from
the int8 (dynamically quantised) export of the same model. Printed per set and mode: nDCG@10 of
both, the difference, and the cosine of the two query vectors. The issue's bar for adopting int8
queries: hybrid nDCG@10 within 0.005 on every set (or better).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from agent_results import CACHE, DEFAULT_CORPORA, DOC_SETS, SETS, dataset_for, evaluate_pages, package_tree
from suite.report import environment, load_avg, note, table


def evaluate_set(name: str, args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from mcpower.embedding import load_embedder
    from mcpower.registry import Registry

    info, queries, qrels, _ = dataset_for(name, args)
    ds_id = info["id"]
    int8, fp32 = load_embedder(backend="onnx-int8"), load_embedder(backend="onnx")
    out: dict[str, Any] = {"dataset": ds_id, "chunks": info.get("chunks"), "modes": {}}
    registries = {
        "fp32": Registry(args.datasets_dir, embedder_factory=lambda model: fp32, query_cache=0),
        "int8": Registry(args.datasets_dir, embedder_factory=lambda model: int8, query_cache=0),
    }
    try:
        cosines = [float(np.dot(fp32.embed_query(q), int8.embed_query(q))) for q in queries.values()]
        out["query_cosine"] = {"mean": round(statistics.fmean(cosines), 4), "min": round(min(cosines), 4)}
        for mode in ("hybrid", "semantic"):
            row: dict[str, Any] = {}
            for side, registry in registries.items():
                report = evaluate_pages(registry, ds_id, queries, qrels, mode)
                row[side] = round(report.metrics["ndcg@10"], 4)
            row["delta"] = round(row["int8"] - row["fp32"], 4)
            out["modes"][mode] = row
            note(f"{name} {mode}: fp32 {row['fp32']:.4f}, int8 queries {row['int8']:.4f} ({row['delta']:+.4f})")
    finally:
        for registry in registries.values():
            registry.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS))
    ap.add_argument("--datasets-dir", type=Path, default=CACHE / package_tree())
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.quick = False
    args.doc_roots = dict(DOC_SETS)
    args.datasets_dir.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"environment": environment(), "load_average_before": load_avg(), "sets": {}}
    for name in args.sets:
        results["sets"][name] = evaluate_set(name, args)
        if args.out:  # after each set: a long run keeps what it measured
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    results["load_average_after"] = load_avg()
    table(
        "int8 query vectors against fp32 documents: nDCG@10 (eval depth 300)",
        ["set", "chunks", "hybrid fp32", "hybrid int8 q", "delta", "semantic fp32", "semantic int8 q", "delta", "cos"],
        [
            [
                name,
                r["chunks"],
                r["modes"]["hybrid"]["fp32"],
                r["modes"]["hybrid"]["int8"],
                f"{r['modes']['hybrid']['delta']:+.4f}",
                r["modes"]["semantic"]["fp32"],
                r["modes"]["semantic"]["int8"],
                f"{r['modes']['semantic']['delta']:+.4f}",
                f"{r['query_cosine']['mean']} / {r['query_cosine']['min']}",
            ]
            for name, r in results["sets"].items()
        ],
    )
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
