"""The original system's two seed datasets (``seed-datasets/`` of the bench corpora), served as they
are and imported with ``mcpower import``, with the real packaged model:

1. semantic search against the original system's own search (FAISS inner product over the seed's
   IndexFlatIP file, rows mapped to records, as python/bridge.py does): top-10 identical?
   With ``--torch`` also against query vectors from sentence-transformers on PyTorch, the
   original bridge's own embedder (mcpower embeds queries with the ONNX export of the same weights);
2. retrieval quality of each mode on fastapi-seed with the judged FastAPI questions
   (benchmarks/data/, docs/benchmarks.md says how they were written);
3. load time of the served dataset (parsed and indexed in memory) against the imported one.

    .venv/bin/python benchmarks/original_seeds.py [--corpora DIR] [--torch] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mcpower.evaluation import METRICS, SearchFn, evaluate, load_qrels, load_queries
from mcpower.registry import Registry
from mcpower.search import rank_paths, search
from mcpower.store.original.convert import import_original

HERE = Path(__file__).resolve().parent
QUERIES = HERE / "data" / "fastapi_questions.jsonl"
QRELS = HERE / "data" / "fastapi_qrels.tsv"
# The example queries of sample-docs' own README.
SAMPLE_QUERIES = [
    "How do I get started?",
    "How to configure a dataset",
    "What tools are available?",
    "Troubleshooting search issues",
]
SEEDS = ("sample-docs", "fastapi-seed")
DEPTH = 10


def oracle(seed: Path, qvec: np.ndarray, k: int) -> list[tuple[str, int]]:
    """The original system's search: (path, position of the record in its document, from 1)."""
    import faiss

    index = faiss.read_index(str(seed / "index" / "docs.index"))
    meta = json.loads((seed / "metadata.json").read_text(encoding="utf-8"))
    docs = meta if isinstance(meta, list) else meta["documents"]
    position: list[int] = []
    seen: dict[str, int] = {}  # the original's `chunk` field where it has one; sample-docs has none
    for d in docs:
        seen[d["path"]] = seen.get(d["path"], 0) + 1
        position.append(seen[d["path"]])
    _, rows = index.search(qvec.reshape(1, -1).astype(np.float32), k)
    return [(docs[i]["path"], position[i]) for i in rows[0] if i >= 0]


def agreement(registry: Registry, seeds: Path, queries: dict[str, list[str]], qvecs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for ds, texts in queries.items():
        same = 0
        for text in texts:
            got = [(r.path, r.lines.start) for r in search(registry, text, ds, top_k=DEPTH, mode="semantic").results]
            same += got == oracle(seeds / ds, qvecs(text), DEPTH)
        out[ds] = f"{same}/{len(texts)}"
    return out


def ranker(registry: Registry, mode: str) -> SearchFn:
    return lambda text, k: rank_paths(registry, text, "fastapi-seed", k, mode)


def loads(root: Path, dataset: str, runs: int) -> float:
    times = []
    for _ in range(runs):
        registry = Registry(root)
        started = time.perf_counter()
        registry.store(dataset)
        times.append(time.perf_counter() - started)
        registry.close()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--corpora", type=Path, default=Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
    )
    parser.add_argument("--torch", action="store_true", help="also compare with sentence-transformers query vectors")
    parser.add_argument("--runs", type=int, default=5, help="loads timed per format (median)")
    args = parser.parse_args()
    seeds = args.corpora / "seed-datasets"
    queries = load_queries(QUERIES)
    qrels = load_qrels(QRELS)
    asked = {"sample-docs": SAMPLE_QUERIES, "fastapi-seed": list(queries.values())}
    with tempfile.TemporaryDirectory(prefix="mcpower-seeds-") as tmp:
        served, imported = Path(tmp) / "served", Path(tmp) / "imported"
        for name in SEEDS:
            shutil.copytree(seeds / name, served / name)
            import_original(seeds / name, imported)
        rows = []
        for label, root in (("served", served), ("imported", imported)):
            registry = Registry(root)
            emb = registry.embedder_for(registry.store("fastapi-seed").info)
            same = agreement(registry, seeds, asked, emb.embed_query)
            print(f"{label}: semantic top-{DEPTH} identical to the original's search (ONNX query vectors): {same}")
            if args.torch:
                from mcpower.embedding import load_embedder

                ref = load_embedder("all-MiniLM-L6-v2", "torch")
                same = agreement(registry, seeds, asked, ref.embed_query)
                print(f"{label}: ... with sentence-transformers (torch) query vectors, as the original bridge: {same}")
            for mode in ("semantic", "keyword", "hybrid"):
                rows.append((label, mode, evaluate(ranker(registry, mode), queries, qrels, 300)))
            registry.close()
        per = {(label, mode): r.per_query for label, mode, r in rows}
        better = {
            lb: sum(per[lb, "hybrid"][q]["ndcg@10"] > per[lb, "semantic"][q]["ndcg@10"] for q in qrels)
            for lb in ("served", "imported")
        }
        worse = {
            lb: sum(per[lb, "hybrid"][q]["ndcg@10"] < per[lb, "semantic"][q]["ndcg@10"] for q in qrels)
            for lb in ("served", "imported")
        }
        print(f"\nfastapi-seed, {len(qrels)} judged questions (one answer page each), 300 chunks ranked per question\n")
        print("| dataset | mode | " + " | ".join(METRICS) + " |")
        print("| --- | --- |" + " --- |" * len(METRICS))
        for label, mode, report in rows:
            print(f"| {label} | {mode} | " + " | ".join(f"{report.metrics[m]:.4f}" for m in METRICS) + " |")
        print(f"\nhybrid vs semantic nDCG@10 per question: better on {better}, worse on {worse}")
        first = loads(served, "fastapi-seed", args.runs)
        native = loads(imported, "fastapi-seed", args.runs)
        print(
            f"\nload fastapi-seed (median of {args.runs}): served from the original files {first * 1000:.0f} ms, "
            f"imported {native * 1000:.0f} ms ({first / native:.1f}x); load average {os.getloadavg()[0]:.2f}"
        )


if __name__ == "__main__":
    main()
