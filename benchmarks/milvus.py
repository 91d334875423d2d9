"""The Milvus store (milvus-lite) against the local store, in the same run, on the same data.

    python benchmarks/milvus.py [--datasets DIR ...] [--corpora DIR] [--queries N] [--depth K] [--out FILE]

For each prebuilt local dataset (default: the SciFact and Cranfield datasets ingested with the real
model in /work/bench/ds; copied, never written), the same build (documents, chunks, vectors) is:

    publish   written by each store's Catalog.publish (the part of an ingest that differs between
              stores; embedding is the same code and dominates a whole ingest): chunks/s, median of
              --rounds, and the Milvus/local ratio
    quality   searched as `mcpower eval` does (depth 100, the real query model) in every mode:
              nDCG@10 per store and the difference
    latency   search.search() p50/p95 per mode, the two stores' calls interleaved query by query

Needs the milvus extra (pip install -e '.[milvus]'). Prints a table and writes JSON (--out).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mcpower.evaluation import SearchFn, evaluate, load_qrels, load_queries
from mcpower.manifest import DatasetInfo
from mcpower.registry import Registry
from mcpower.search import rank_paths, search
from mcpower.store import DatasetBuild
from mcpower.store.local import LocalCatalog
from mcpower.store.milvus import MilvusCatalog

MODES = ("keyword", "semantic", "hybrid")


def read_build(root: Path, dataset_id: str) -> DatasetBuild:
    store = LocalCatalog(root).current(dataset_id)
    if store is None:
        raise SystemExit(f"{root / dataset_id}: not a readable dataset")
    docs, chunks = [], []
    for doc, doc_chunks in store.iter_documents():
        docs.append(doc)
        chunks.extend(doc_chunks)
    vectors = store.vectors([c.id for c in chunks])
    fields = store.info.model_dump()
    info = DatasetInfo(**{k: v for k, v in fields.items() if k in DatasetInfo.model_fields})  # not the Manifest
    store.close()
    return DatasetBuild(info, docs, chunks, np.ascontiguousarray(vectors, dtype=np.float32))


def timed_publish(catalog: Any, build: DatasetBuild) -> float:
    started = time.perf_counter()
    with catalog.lock(build.info.id):
        catalog.publish(build)
    return time.perf_counter() - started


def ranker(registry: Registry, dataset: str, mode: str) -> SearchFn:
    return lambda text, k: rank_paths(registry, text, dataset, k, mode)


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def run_dataset(source: Path, corpora: Path, work: Path, args: argparse.Namespace) -> dict[str, Any]:
    name = source.name
    local_root = work / "local"
    shutil.copytree(source, local_root / name)
    build = read_build(local_root, name)
    out: dict[str, Any] = {"dataset": name, "chunks": len(build.chunks), "documents": len(build.documents)}
    milvus = MilvusCatalog(str(work / f"{name[:20]}.db"), refresh_seconds=1.0)
    copies = work / "copies"
    local_s, milvus_s = [], []
    for _ in range(args.rounds):  # alternate, so both see the same machine load
        local_s.append(timed_publish(LocalCatalog(copies), build))
        milvus_s.append(timed_publish(milvus, build))
    n = len(build.chunks)
    out["publish"] = {
        "local_chunks_per_s": n / statistics.median(local_s),
        "milvus_chunks_per_s": n / statistics.median(milvus_s),
        "ratio": statistics.median(local_s) / statistics.median(milvus_s),
        "rounds": args.rounds,
    }
    milvus_id = name  # the same id in both stores: each is searched through its own registry
    registries = {"local": Registry(local_root), "milvus": Registry(catalogs=[milvus])}
    bench = corpora / name
    queries, qrels = load_queries(bench / "queries.jsonl"), load_qrels(bench / "qrels.tsv")
    if args.queries:
        keep = sorted(qrels)[: args.queries]
        qrels = {q: qrels[q] for q in keep}
    out["quality"] = {}
    for mode in MODES:
        row = {}
        for store, reg in registries.items():
            report = evaluate(ranker(reg, milvus_id, mode), queries, qrels, args.depth)
            row[store] = report.metrics["ndcg@10"]
        row["diff"] = row["milvus"] - row["local"]
        out["quality"][mode] = row
    texts = [queries[q] for q in sorted(qrels) if q in queries][: args.latency_queries]
    out["latency_ms"] = {}
    for mode in MODES:
        times: dict[str, list[float]] = {"local": [], "milvus": []}
        for text in texts[:5]:  # warm-up
            for reg in registries.values():
                search(reg, text, dataset=milvus_id, mode=mode, top_k=10)
        for text in texts:
            for store, reg in registries.items():
                started = time.perf_counter()
                search(reg, text, dataset=milvus_id, mode=mode, top_k=10)
                times[store].append((time.perf_counter() - started) * 1000)
        out["latency_ms"][mode] = {
            store: {"p50": pct(t, 50), "p95": pct(t, 95), "n": len(t)} for store, t in times.items()
        }
    milvus.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--datasets", nargs="+", type=Path, default=[Path("/work/bench/ds/scifact"), Path("/work/bench/ds/cranfield")]
    )
    p.add_argument("--corpora", type=Path, default=Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench")))
    p.add_argument("--queries", type=int, default=0, help="judged queries for quality (0: all)")
    p.add_argument("--latency-queries", type=int, default=200)
    p.add_argument("--depth", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    started = time.time()
    load_before = os.getloadavg()
    results = []
    for source in args.datasets:
        with tempfile.TemporaryDirectory(prefix="mcb") as tmp:
            results.append(run_dataset(source, args.corpora, Path(tmp), args))
    report = {
        "results": results,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "seconds": round(time.time() - started, 1),
        "python": sys.version.split()[0],
    }
    for r in results:
        pub = r["publish"]
        print(f"\n{r['dataset']}: {r['documents']} documents, {r['chunks']} chunks")
        print(
            f"  publish: local {pub['local_chunks_per_s']:.0f} chunks/s, milvus {pub['milvus_chunks_per_s']:.0f} "
            f"chunks/s (milvus/local {pub['ratio']:.2f}x, median of {pub['rounds']})"
        )
        for mode, q in r["quality"].items():
            lat = r["latency_ms"][mode]
            print(
                f"  {mode:<8} nDCG@10 local {q['local']:.4f} milvus {q['milvus']:.4f} ({q['diff']:+.4f});  "
                f"p50/p95 ms local {lat['local']['p50']:.1f}/{lat['local']['p95']:.1f} "
                f"milvus {lat['milvus']['p50']:.1f}/{lat['milvus']['p95']:.1f}"
            )
    print(f"\nload average before {load_before}, after {report['load_average_after']}; {report['seconds']} s")
    if args.out:
        args.out.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
