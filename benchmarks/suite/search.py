"""Section search: Registry.search latency on the FastAPI docs (3.4k chunks) and on synthetic datasets
of 10k, 100k (and 1M) chunks, each against its floor (latency.py); HNSW recall.

The synthetic chunks are made of real material, so both sides of search do realistic work: words
drawn with SciFact's word frequencies at SciFact's chunk lengths (so FTS5 posting lists are as long
as a real corpus of that size would make them), and vectors mixed from two real SciFact chunk
vectors plus noise, renormalised (their similarity statistics match the real vectors'; see
docs/benchmarks.md). Queries are real SciFact claims, embedded by the real ONNX query embedder.
Datasets are published as ingest publishes them (write_metadata, write_vectors, a Manifest) and
cached under ``<datasets-dir>/synthetic/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import statistics
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from suite.datasets import collection_dataset, collection_files
from suite.latency import docs, print_docs, timed
from suite.report import lat_stats, note, size_label, table

SYNTH_VERSION = (
    4  # bump when the generator changes: cached datasets are rebuilt (3: hnsw_sq above 50k; 4: analysed English)
)
CHUNKS_PER_DOC = 4
MIX_ALPHA, NOISE = 0.5, 0.3  # two real vectors mixed with Dirichlet(0.5) weights, plus noise: see docs/benchmarks.md
EF_SWEEP = (64, 128, 256, 512, 1024)


class SyntheticSource:
    """What synthetic chunks are made of: SciFact's word frequencies, chunk lengths and chunk vectors."""

    def __init__(self, scifact_folder: Path, docs_dir: Path) -> None:
        import faiss
        import numpy as np

        from mcpower.manifest import MANIFEST_NAME, read_manifest

        m = read_manifest(scifact_folder / MANIFEST_NAME)
        index: Any = faiss.read_index(str(scifact_folder / m.index))
        self.vectors = index.index.reconstruct_n(0, index.ntotal)
        self.fingerprint = m.checksums.index[:16]
        words: Counter[str] = Counter()
        for f in sorted(docs_dir.iterdir()):
            words.update(re.findall(r"\w+", f.read_text(encoding="utf-8")))
        self.vocab = np.array([w for w, _ in words.most_common(50_000)], dtype=object)
        counts = np.array([c for _, c in words.most_common(50_000)], dtype=np.float64)
        self.cdf = np.cumsum(counts) / counts.sum()
        import sqlite3

        db = sqlite3.connect(f"{(scifact_folder / m.metadata).as_uri()}?mode=ro&immutable=1", uri=True)
        self.lengths = np.array([len(t.split()) for (t,) in db.execute("SELECT text FROM chunks")], dtype=np.int64)
        db.close()

    def texts(self, rng: Any, n: int) -> list[str]:
        import numpy as np

        lengths = self.lengths[rng.integers(0, len(self.lengths), n)]
        ids = np.searchsorted(self.cdf, rng.random(int(lengths.sum())))
        words = self.vocab[np.minimum(ids, len(self.vocab) - 1)].tolist()
        out, pos = [], 0
        for k in lengths.tolist():
            out.append(" ".join(words[pos : pos + k]))
            pos += k
        return out

    def vectors_for(self, rng: Any, n: int) -> Any:
        import numpy as np

        a = rng.integers(0, len(self.vectors), (n, 2))
        w = rng.dirichlet([MIX_ALPHA, MIX_ALPHA], n).astype(np.float32)
        v = self.vectors[a[:, 0]] * w[:, :1] + self.vectors[a[:, 1]] * w[:, 1:]
        v += rng.standard_normal(v.shape, dtype=np.float32) * (NOISE / math.sqrt(v.shape[1]))
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        return v


def _synthetic_docs(source: SyntheticSource, size: int, seed: int) -> Iterator[tuple[Any, list[str]]]:
    """(DocumentRow, chunk texts) for ``size`` chunks, CHUNKS_PER_DOC to a document; deterministic per seed."""
    import numpy as np

    from mcpower.store import DocumentRow

    rng = np.random.default_rng(seed)
    batch = 4096 * CHUNKS_PER_DOC
    doc = 0
    for start in range(0, size, batch):
        n = min(batch, size - start)
        texts = source.texts(rng, n)
        titles = source.texts(rng, math.ceil(n / CHUNKS_PER_DOC))
        for j in range(0, n, CHUNKS_PER_DOC):
            chunk_texts = texts[j : j + CHUNKS_PER_DOC]
            title = " ".join(titles[j // CHUNKS_PER_DOC].split()[:6]).capitalize()
            content = f"# {title}\n\n" + "\n\n".join(chunk_texts) + "\n"
            doc += 1
            row = DocumentRow(
                doc,
                f"part-{doc // 1000:04d}/doc-{doc:07d}.md",
                title,
                ".md",
                len(content.encode()),
                0.0,
                hashlib.sha256(content.encode()).hexdigest(),
                "2026-01-01T00:00:00+00:00",
                content,
            )
            yield row, chunk_texts


def build_synthetic(source: SyntheticSource, root: Path, size: int) -> dict[str, Any]:
    """``root/synthetic-<size>``: a dataset published like ingest does, cached while its recipe is unchanged."""
    import numpy as np

    from mcpower.analysis import SCHEME
    from mcpower.chunking import CHUNKER
    from mcpower.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_MODEL, DEFAULT_OVERLAP
    from mcpower.embedding import resolve_model
    from mcpower.errors import McpowerError
    from mcpower.layout import dataset_lock, publish
    from mcpower.manifest import (
        MANIFEST_NAME,
        AnalysisInfo,
        Checksums,
        ChunkingInfo,
        Counts,
        EmbeddingInfo,
        Manifest,
        VectorIndexInfo,
        now_utc,
        read_manifest,
    )
    from mcpower.store import ChunkRow, chunk_id
    from mcpower.store.local.build import sha256_file, write_metadata, write_vectors
    from mcpower.store.local.schema import INDEX_FILE, METADATA_FILE

    ds_id = f"synthetic-{size_label(size)}"
    folder = root / ds_id
    recipe = f"synthetic v{SYNTH_VERSION}, {size} chunks from SciFact words and vectors {source.fingerprint}"
    info_file = folder / "bench-build.json"
    try:
        m = read_manifest(folder / MANIFEST_NAME)
        if m.description == recipe and m.counts.chunks == size and info_file.exists():
            return {"id": ds_id, "cached": True, **json.loads(info_file.read_text())}
    except McpowerError:
        pass
    shutil.rmtree(folder, ignore_errors=True)
    note(f"generating {ds_id} ...")
    ids: list[int] = []
    info: dict[str, Any] = {}

    def chunk_rows() -> Iterator[ChunkRow]:
        for d, chunk_texts in _synthetic_docs(source, size, seed=size):
            for o, text in enumerate(chunk_texts):
                cid = chunk_id(d.path, text, 0)
                ids.append(cid)
                yield ChunkRow(cid, d.id, o, d.title, 3 + 2 * o, 3 + 2 * o, text, language="en")

    def write(staging: Path, version: str) -> Manifest:
        """The files, streamed (a million chunks do not fit a DatasetBuild's lists), and their manifest."""
        t = time.perf_counter()
        docs = (d for d, _ in _synthetic_docs(source, size, seed=size))
        write_metadata(staging / METADATA_FILE, docs, chunk_rows(), analysed=True)  # analysed as ingest does
        metadata_s = time.perf_counter() - t
        rng = np.random.default_rng(size + 1)
        vectors = np.vstack([source.vectors_for(rng, min(65536, size - s)) for s in range(0, size, 65536)])
        note(f"{ds_id}: metadata (SQLite + FTS5) written in {metadata_s:.0f} s; building the vector index ...")
        t = time.perf_counter()
        index_info = write_vectors(staging / INDEX_FILE, np.asarray(ids, dtype=np.int64), vectors)
        index_s = time.perf_counter() - t
        del vectors
        floats = index_info.pop("vectors_file", None)  # an hnsw_sq index's exact vectors
        info.update(index_kind=index_info["kind"], metadata_s=round(metadata_s, 1), index_build_s=round(index_s, 1))
        spec = resolve_model(DEFAULT_MODEL)
        now = now_utc()
        return Manifest(
            id=ds_id,
            name=ds_id,
            description=recipe,
            index=f"{version}/{INDEX_FILE}",
            metadata=f"{version}/{METADATA_FILE}",
            vectors=f"{version}/{floats}" if floats else None,
            embedding=EmbeddingInfo(
                model=spec.name,
                backend="onnx",
                dimension=spec.dimension,
                max_tokens=spec.max_tokens,
                model_fingerprint=spec.fingerprint,
            ),
            chunking=ChunkingInfo(chunker=CHUNKER, chunk_tokens=DEFAULT_CHUNK_TOKENS, overlap=DEFAULT_OVERLAP),
            vector_index=VectorIndexInfo(**index_info),
            fingerprint=f"synthetic-v{SYNTH_VERSION}",
            counts=Counts(documents=math.ceil(size / CHUNKS_PER_DOC), chunks=size, languages={"en": size}),
            analysis=AnalysisInfo(scheme=SCHEME),
            checksums=Checksums(
                index=sha256_file(staging / INDEX_FILE),
                metadata=sha256_file(staging / METADATA_FILE),
                vectors=sha256_file(staging / floats) if floats else None,
            ),
            created_at=now,
            updated_at=now,
            mcpower_version="bench",
        )

    with dataset_lock(folder):
        publish(folder, write)
    info_file.write_text(json.dumps(info))
    note(f"{ds_id}: {info['index_kind']} index built in {info['index_build_s']:.0f} s")
    return {"id": ds_id, "cached": False, **info}


def run(args: argparse.Namespace) -> dict[str, Any]:
    import faiss
    import numpy as np

    from mcpower.evaluation import load_queries
    from mcpower.manifest import Manifest
    from mcpower.registry import Registry
    from mcpower.store.local.build import HNSW_THRESHOLD
    from mcpower.store.local.store import LocalStore

    sizes = args.scale or ([10_000] if args.quick else [10_000, 100_000])
    scifact, _, _ = collection_dataset(args.corpora, "scifact", args.datasets_dir, args.quick)
    docs_dir, qpath, _ = collection_files(args.corpora, "scifact")
    source = SyntheticSource(args.datasets_dir / scifact["id"], docs_dir)
    queries = list(load_queries(qpath).values())[: 100 if args.quick else 300]
    root = args.datasets_dir / "synthetic"
    out: dict[str, Any] = {
        "queries": len(queries),
        "top_k": 10,
        "hnsw_threshold": HNSW_THRESHOLD,
        "blas_threshold": int(faiss.cvar.distance_compute_blas_threshold),
        "faiss_omp_threads": faiss.omp_get_max_threads(),
        "sizes": {},
    }
    for size in sizes:
        build = build_synthetic(source, root, size)
        ds = build["id"]
        # No query cache: every search embeds its query, as a new question does (the cache's gain
        # on repeated questions is measured apart, by its tests' embedder counts).
        registry = Registry(root, query_cache=0)
        t = time.perf_counter()
        store = registry.store(ds)  # verifies checksums, reads the index and opens SQLite
        load_s = time.perf_counter() - t
        assert isinstance(store, LocalStore)  # the HNSW recall below reads its FAISS index
        assert isinstance(store.manifest, Manifest)  # a dataset on disk, not one built in memory
        entry, qvecs = timed(registry, store, ds, queries)
        entry = {"dataset": build, "load_s": round(load_s, 2), **entry, "rss_mb": rss_mb()}
        if store.manifest.vector_index.kind in ("hnsw", "hnsw_sq"):
            entry["hnsw"] = hnsw_recall(store, np.stack(qvecs))
        out["sizes"][str(size)] = entry
        registry.close()
        del store, registry
    # The real documentation (3.4k chunks, half a minute), after the sizes whose memory is reported.
    out["docs"] = docs(args)
    print_docs(out["docs"])
    print_search(out)
    estimate_1m(out, root)
    return out


def hnsw_recall(store: Any, qvecs: Any) -> dict[str, Any]:
    """recall@10 of the store's HNSW search (as Registry.search runs it) against exact inner-product search.

    Also times the exact search of a 100-query batch three ways: faiss >= 1.15 takes the BLAS path
    only when nq * d >= distance_compute_blas_threshold (128,000), which a batch of 100 384-d
    queries is not; lowering the threshold to 0 forces BLAS, and one OpenMP thread avoids BLAS and
    OpenMP threads fighting over few CPUs.
    """
    import faiss
    import numpy as np

    index: Any = faiss.read_index(str(store.folder / store.manifest.index))
    ids = faiss.vector_to_array(index.id_map)
    flat = faiss.IndexFlatIP(index.d)
    if store.manifest.vectors:  # hnsw_sq: the exact vectors are in their own file (the index holds codes)
        floats = np.fromfile(store.folder / store.manifest.vectors, dtype="<f4").reshape(-1, index.d)
        flat.add(floats)
        del floats
    else:
        flat.add(index.index.reconstruct_n(0, index.ntotal))
    batch = np.ascontiguousarray(qvecs[:100])
    default_threshold, threads = faiss.cvar.distance_compute_blas_threshold, faiss.omp_get_max_threads()
    exact_ms = {}
    for label, threshold, n_threads in (
        ("default", default_threshold, threads),
        ("blas", 0, threads),
        ("blas_1_thread", 0, 1),
    ):
        faiss.cvar.distance_compute_blas_threshold = threshold
        faiss.omp_set_num_threads(n_threads)
        t = time.perf_counter()
        flat.search(batch, 10)
        exact_ms[label] = round((time.perf_counter() - t) * 1000, 1)
    _, exact = flat.search(np.ascontiguousarray(qvecs), 10)  # still BLAS, one thread
    faiss.cvar.distance_compute_blas_threshold = default_threshold
    truth = [set(ids[row].tolist()) for row in exact]
    faiss.omp_set_num_threads(threads)
    found = [[i for i, _ in store.semantic(qv, 50)[:10]] for qv in qvecs]
    recall = statistics.fmean(len(truth[i] & set(f)) / 10 for i, f in enumerate(found))
    sweep = {}
    hnsw: Any = faiss.downcast_index(index.index)
    faiss.omp_set_num_threads(1)  # as LocalStore.semantic searches
    for ef in EF_SWEEP:
        hnsw.hnsw.efSearch = ef
        times, hits = [], []
        for i, qv in enumerate(qvecs):
            t = time.perf_counter()
            _, got = index.search(qv.reshape(1, -1), 10)
            times.append(time.perf_counter() - t)
            hits.append(len(truth[i] & set(got[0].tolist())) / 10)
        sweep[str(ef)] = {"recall@10": round(statistics.fmean(hits), 4), **lat_stats(times)}
    faiss.omp_set_num_threads(threads)
    return {
        "recall@10": round(recall, 4),
        "ef_search": store.manifest.vector_index.ef_search,
        "ef_sweep": sweep,
        "exact_100_queries_ms": exact_ms,
    }


def rss_mb() -> dict[str, float]:
    """This process's resident memory now (VmRSS) and at its peak (VmHWM), MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(value.split()[0]) / 1024, 1)
    return out


def print_search(out: dict[str, Any]) -> None:
    rows = []
    for size, e in out["sizes"].items():
        b = e["dataset"]
        row = [size_label(int(size)), b["index_kind"]]
        row += [f"{e['modes'][m][p]:.1f}" for m in ("hybrid", "semantic", "keyword") for p in ("p50_ms", "p95_ms")]
        row += [e.get("hnsw", {}).get("recall@10"), f"{b['index_build_s']:.1f}", f"{e['load_s']:.2f}"]
        floor = e.get("floor")
        row += [
            f"{floor['p50_ms']:.1f} / {floor['p95_ms']:.1f}" if floor else "-",
            " / ".join(f"{e['hybrid_vs_floor'][p]:.2f}" for p in ("p50", "p95")) if floor else "-",
            e.get("rss_mb", {}).get("VmRSS", "-"),
        ]
        rows.append(row)
    heads = ["chunks", "index", "hyb p50", "hyb p95", "sem p50", "sem p95", "kw p50", "kw p95"]
    table(
        f"search: Registry.search top_k 10, ms, {out['queries']} SciFact queries on synthetic data",
        [*heads, "recall@10", "build s", "load s", "floor p50 / p95", "hybrid x floor", "RSS MB"],
        rows,
    )
    parts = ("embed_query", "vector", "keyword")
    table(
        "search parts, p50 / p95 ms: query embedding (ONNX), vector search k=50,"
        " BM25 of every match and its top 50 (keyword postings)",
        ["chunks", *parts],
        [
            [size_label(int(s)), *(f"{e['parts'][p]['p50_ms']:.2f} / {e['parts'][p]['p95_ms']:.2f}" for p in parts)]
            for s, e in out["sizes"].items()
        ],
    )
    for size, e in out["sizes"].items():
        if "hnsw" in e:
            h = e["hnsw"]
            sweep = ", ".join(
                f"ef {ef}: recall {v['recall@10']:.4f} p50 {v['p50_ms']:.2f} ms" for ef, v in h["ef_sweep"].items()
            )
            print(
                f"HNSW at {size_label(int(size))}: recall@10 {h['recall@10']:.4f} (efSearch {h['ef_search']}); {sweep}"
            )
            x = h["exact_100_queries_ms"]
            print(
                f"  exact search, 100 queries in one batch: {x['default']:.0f} ms with faiss's defaults, "
                f"{x['blas']:.0f} ms with distance_compute_blas_threshold = 0, {x['blas_1_thread']:.0f} ms with "
                "that and one OpenMP thread"
            )


def estimate_1m(out: dict[str, Any], root: Path) -> None:
    """Extrapolate the 1M HNSW build from the 100k one: n log n."""
    done = out["sizes"]
    source = done.get("100000", {}).get("dataset")
    if source is None:
        cached = root / "synthetic-100k" / "bench-build.json"
        source = json.loads(cached.read_text()) if cached.exists() else None
    if source is None or "1000000" in done:
        return
    est = source["index_build_s"] * 10 * math.log(1e6) / math.log(1e5)
    out["hnsw_build_1m_estimate_s"] = round(est)
    print(
        f"HNSW build at 1M estimated from 100k ({source['index_build_s']:.0f} s x 12): ~{est / 60:.0f} min"
        + (" -> 1M is opt-in (--scale 1m)" if est > 1200 else "")
    )
