"""The Milvus store (milvus-lite) against the local store, in the same run, on the same data.

    python benchmarks/milvus.py [--datasets DIR ...] [--corpora DIR] [--queries N] [--depth K] [--out FILE]
    python benchmarks/milvus.py --synthetic DIR ... [--rounds N] [--latency-queries N] [--out FILE]
    python benchmarks/milvus.py --cli-ingest DOCS [--rounds N] [--out FILE]

For each prebuilt local dataset (default: the SciFact and Cranfield datasets ingested with the real
model in /work/bench/ds; copied, never written), the same build (documents, chunks, vectors) is:

    publish   written by each store's Catalog.publish (the part of an ingest that differs between
              stores; embedding is the same code and dominates a whole ingest): chunks/s, median of
              --rounds, and the Milvus/local ratio
    quality   searched as `mcpower eval` does (depth 100, the real query model) in every mode:
              nDCG@10 per store and the difference
    latency   search.search() p50/p95 per mode, the two stores' calls interleaved query by query

--synthetic takes prebuilt synthetic datasets instead (benchmarks/suite/search.py build_synthetic:
SciFact words and vectors at 10k, 100k chunks; copied, never written): the same build is published
into both stores (--rounds 0: into Milvus only, timed once), then real SciFact claims, embedded once
by the real query model and reused, are searched in every mode, the stores' calls interleaved and
the modes rotated; p50/p95 per store and the Milvus/local ratio. No quality (no judgments there).

--cli-ingest times whole ingests end to end: `mcpower ingest DOCS` (the real model, the default
backend) into a fresh datasets folder and into a fresh milvus-lite file, alternating (the order
swapped each round), --rounds each; wall time of the process (start-up, model load, embedding,
publish), median chunks/s per store and the Milvus/local ratio.

Needs the milvus extra (pip install -e '.[milvus]'). Prints a table and writes JSON (--out).
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
from pathlib import Path
from typing import Any

import numpy as np

from mcpower.defaults import DEFAULT_MODEL
from mcpower.embedding import Embedder, ProgressFn, load_query_embedder
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


class QueryCache:
    """The real query embedder, each benchmark query embedded once: latency is the stores' and the
    fusion's, the same for both stores, without ONNX's share (and its noise)."""

    def __init__(self, inner: Embedder, texts: list[str]) -> None:
        self._inner = inner
        self.model_name, self.model_fingerprint = inner.model_name, inner.model_fingerprint
        self.legacy_fingerprint, self.backend = inner.legacy_fingerprint, inner.backend
        self.dimension, self.max_tokens = inner.dimension, inner.max_tokens
        self.query_prompt, self.document_prompt = inner.query_prompt, inner.document_prompt
        self.languages = inner.languages
        self._vectors = {t: inner.embed_query(t) for t in dict.fromkeys(texts)}

    def count_tokens(self, texts: Any) -> list[int]:
        return self._inner.count_tokens(texts)

    @property
    def token_counter(self) -> Any:
        return self._inner.token_counter

    def embed_documents(self, texts: Any, progress: ProgressFn | None = None) -> Any:
        return self._inner.embed_documents(texts, progress)

    def embed_query(self, text: str) -> Any:
        found = self._vectors.get(text)
        return found if found is not None else self._inner.embed_query(text)


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


def run_synthetic(
    source: Path, texts: list[str], embedder: Embedder, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    name = source.name
    local_root = work / "local"
    shutil.copytree(source, local_root / name)
    build = read_build(local_root, name)
    n = len(build.chunks)
    out: dict[str, Any] = {"dataset": name, "chunks": n, "documents": len(build.documents)}
    milvus = MilvusCatalog(str(work / f"{name[:20]}.db"), refresh_seconds=1.0)
    local_s, milvus_s = [], []
    for _ in range(args.rounds):  # alternate, so both see the same machine load
        local_s.append(timed_publish(LocalCatalog(work / "copies"), build))
        milvus_s.append(timed_publish(milvus, build))
    if not milvus_s:
        milvus_s.append(timed_publish(milvus, build))
    out["publish"] = {
        "local_chunks_per_s": n / statistics.median(local_s) if local_s else None,
        "milvus_chunks_per_s": n / statistics.median(milvus_s),
        "ratio": statistics.median(local_s) / statistics.median(milvus_s) if local_s else None,
        "rounds": len(milvus_s),
        "load_average": os.getloadavg(),
    }
    del build
    registries = {
        "local": Registry(local_root, embedder_factory=lambda model: embedder),
        "milvus": Registry(catalogs=[milvus], embedder_factory=lambda model: embedder),
    }
    out["open_s"] = {}
    for store, reg in registries.items():
        started = time.perf_counter()
        reg.store(name)  # local: checksums, index, SQLite; milvus-lite: the collections loaded
        out["open_s"][store] = round(time.perf_counter() - started, 2)
    for text in texts[:10]:  # warm-up
        for mode in MODES:
            for reg in registries.values():
                search(reg, text, dataset=name, mode=mode, top_k=10)
    times: dict[str, dict[str, list[float]]] = {m: {"local": [], "milvus": []} for m in MODES}
    order = list(registries.items())
    for i, text in enumerate(texts):
        for mode in MODES[i % 3 :] + MODES[: i % 3]:  # rotate the modes, and which store goes first
            for store, reg in order if i % 2 else order[::-1]:
                started = time.perf_counter()
                search(reg, text, dataset=name, mode=mode, top_k=10)
                times[mode][store].append((time.perf_counter() - started) * 1000)
    out["latency_ms"] = {
        mode: {store: {"p50": pct(t, 50), "p95": pct(t, 95), "n": len(t)} for store, t in by.items()}
        for mode, by in times.items()
    }
    out["load_average"] = os.getloadavg()
    for reg in registries.values():
        reg.close()
    milvus.close()
    return out


def print_synthetic(results: list[dict[str, Any]]) -> None:
    for r in results:
        pub = r["publish"]
        local = f"local {pub['local_chunks_per_s']:.0f} chunks/s, " if pub["local_chunks_per_s"] else ""
        ratio = f" (milvus/local {pub['ratio']:.2f}x)" if pub["ratio"] else ""
        print(f"\n{r['dataset']}: {r['documents']} documents, {r['chunks']} chunks; opened in {r['open_s']}")
        print(f"  publish: {local}milvus {pub['milvus_chunks_per_s']:.0f} chunks/s{ratio}, {pub['rounds']} round(s)")
        for mode, lat in r["latency_ms"].items():
            lo, mi = lat["local"], lat["milvus"]
            print(
                f"  {mode:<8} p50/p95 ms local {lo['p50']:.1f}/{lo['p95']:.1f} milvus {mi['p50']:.1f}/{mi['p95']:.1f}"
                f"  (milvus/local p50 {mi['p50'] / lo['p50']:.2f}x, p95 {mi['p95'] / lo['p95']:.2f}x; n {mi['n']})"
            )


def cli_ingest(docs: Path, rounds: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "milvus": []}
    with tempfile.TemporaryDirectory(prefix="mcb") as tmp:
        for r in range(rounds):
            for store in ("local", "milvus") if r % 2 == 0 else ("milvus", "local"):
                cmd = [sys.executable, "-m", "mcpower", "ingest", str(docs), "--id", "bench", "--json", "-q"]
                cmd += ["--datasets-dir", f"{tmp}/datasets-{r}"]
                if store == "milvus":
                    cmd += ["--milvus-uri", f"{tmp}/ingest{r}.db"]
                started = time.perf_counter()
                done = subprocess.run(cmd, capture_output=True, text=True, check=False)
                seconds = time.perf_counter() - started
                if done.returncode != 0:
                    raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
                chunks = int(json.loads(done.stdout)["chunks"])
                runs[store].append({"seconds": round(seconds, 2), "chunks": chunks, "load": os.getloadavg()[0]})
                print(
                    f"  round {r + 1} {store:<6} {chunks} chunks in {seconds:.1f} s ({chunks / seconds:.1f} chunks/s)",
                    flush=True,
                )
    rate = {k: statistics.median(x["chunks"] / x["seconds"] for x in v) for k, v in runs.items()}
    return {"runs": runs, "chunks_per_s": rate, "ratio": rate["milvus"] / rate["local"]}


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
    p.add_argument("--synthetic", nargs="+", type=Path, default=None, help="prebuilt synthetic dataset folders")
    p.add_argument("--cli-ingest", type=Path, default=None, help="a documents folder: time whole CLI ingests")
    args = p.parse_args()
    started = time.time()
    load_before = os.getloadavg()
    if args.cli_ingest:
        found = cli_ingest(args.cli_ingest, args.rounds)
        rate = found["chunks_per_s"]
        print(
            f"whole ingest, median of {args.rounds}: local {rate['local']:.1f} chunks/s, milvus {rate['milvus']:.1f} "
            f"chunks/s, milvus/local {found['ratio']:.2f}x; load average before {load_before}, after {os.getloadavg()}"
        )
        if args.out:
            args.out.write_text(json.dumps({**found, "load_average_before": load_before}, indent=2))
        return
    results = []
    if args.synthetic:
        texts = list(load_queries(args.corpora / "scifact" / "queries.jsonl").values())[: args.latency_queries]
        embedder = QueryCache(load_query_embedder(DEFAULT_MODEL), texts)
        for source in args.synthetic:
            with tempfile.TemporaryDirectory(prefix="mcb") as tmp:
                results.append(run_synthetic(source, texts, embedder, Path(tmp), args))
        print_synthetic(results)
        after = os.getloadavg()
        print(f"\nload average before {load_before}, after {after}; {round(time.time() - started)} s")
        if args.out:
            seconds = round(time.time() - started, 1)
            found = {"results": results, "load_average_before": load_before, "load_average_after": after}
            args.out.write_text(json.dumps({**found, "seconds": seconds}, indent=2))
        return
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
