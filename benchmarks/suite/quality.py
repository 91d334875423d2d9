"""Sections quality and int8-quality: nDCG@10, R@10, R@100, MRR@10 per mode, next to published baselines."""

from __future__ import annotations

import argparse
from typing import Any

from suite.datasets import EVAL_DEPTH, collection_dataset, evaluate_modes, has_full_ingest
from suite.report import note, table

# Published figures and sanity checks (the collections' SOURCE.md files give the sources).
BASELINES: dict[str, list[dict[str, Any]]] = {
    "scifact": [
        {"system": "BM25 (BEIR paper)", "ndcg@10": 0.665, "recall@100": 0.908},
        {"system": "all-MiniLM-L6-v2 (MTEB)", "ndcg@10": 0.645, "recall@10": 0.783, "recall@100": 0.925},
        {"system": "original system, dense only", "ndcg@10": 0.652},
    ],
    "cranfield": [
        {
            "system": "stdlib BM25 (SOURCE.md check)",
            "ndcg@10": 0.3635,
            "recall@10": 0.3885,
            "recall@100": 0.7386,
            "mrr@10": 0.5235,
        },
    ],
}


def run(args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"depth": EVAL_DEPTH, "collections": {}}
    for name in ("scifact", "cranfield"):
        info, queries, qrels = collection_dataset(args.corpora, name, args.datasets_dir, args.quick)
        note(f"evaluating {info['id']} on {len(qrels)} queries x 3 modes ...")
        modes = evaluate_modes(args.datasets_dir, info["id"], queries, qrels)
        result["collections"][name] = {"dataset": info, "modes": modes, "baselines": BASELINES[name]}
        rows: list[list[Any]] = [
            [f"mcpower {m}", r["ndcg@10"], r["recall@10"], r["recall@100"], r["mrr@10"], r["ms_per_query"]]
            for m, r in modes.items()
        ]
        rows += [
            [b["system"], b.get("ndcg@10"), b.get("recall@10"), b.get("recall@100"), b.get("mrr@10"), None]
            for b in BASELINES[name]
        ]
        subset = " (QUICK SUBSET: not comparable with the baselines)" if info["subset"] else ""
        table(
            f"quality: {name}, {modes['hybrid']['queries']} queries, {info['chunks']} chunks{subset}",
            ["system", "nDCG@10", "R@10", "R@100", "MRR@10", "ms/query"],
            rows,
        )
    return result


def run_int8(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"depth": EVAL_DEPTH}
    backends = ("onnx", "onnx-int8")
    # Both on the same corpus: in --quick, the subset unless both full ingests are already there.
    subset = args.quick and not all(has_full_ingest(args.datasets_dir, "scifact", b) for b in backends)
    for backend in backends:
        info, queries, qrels = collection_dataset(
            args.corpora, "scifact", args.datasets_dir, args.quick, backend, subset
        )
        note(f"evaluating {info['id']} on {len(qrels)} queries x 3 modes ...")
        out[backend] = {"dataset": info, "modes": evaluate_modes(args.datasets_dir, info["id"], queries, qrels)}
    fp32, int8 = out["onnx"]["modes"], out["onnx-int8"]["modes"]
    out["ndcg_loss"] = {m: round(fp32[m]["ndcg@10"] - int8[m]["ndcg@10"], 4) for m in fp32}
    rows = [
        [m, fp32[m]["ndcg@10"], int8[m]["ndcg@10"], out["ndcg_loss"][m], fp32[m]["recall@100"], int8[m]["recall@100"]]
        for m in fp32
    ]
    table(
        "int8-quality: SciFact, fp32 (onnx = torch's vectors) vs onnx-int8 documents (queries fp32, as search does)",
        ["mode", "nDCG fp32", "nDCG int8", "loss", "R@100 fp32", "R@100 int8"],
        rows,
    )
    return out
