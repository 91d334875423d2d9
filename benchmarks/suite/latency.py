"""One dataset's search latency against its floor, question by question: what the search section
reports for each synthetic size and for the FastAPI docs (3.4k chunks of real documentation).

Each question is searched in the three modes, their order rotated so load drift hits every mode
alike, and then its floor's parts are timed alone at the depth search asks for (50): the query
embedding, the vector search and the keyword side (BM25 of every match and its top 50). Their sum,
question by question, is the floor; hybrid search is reported as a ratio to it (issue 30: ≤ 1.3×).
The dataset's files are read once first: what is timed is a warm search of a served dataset, not
the disk (a 100k run after an idle hour gave hybrid p95 21.5 ms, against 14.3–15.8 ms warm).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from suite.datasets import ensure_dataset
from suite.questions import question_texts
from suite.report import REPO, lat_stats, load_avg, table

MODES = ("hybrid", "semantic", "keyword")
DOCS_QUESTIONS = REPO / "benchmarks" / "data" / "fastapi_questions.jsonl"
DOCS_ROUNDS = 4  # the 50 judged FastAPI questions, four times over (once with --quick)


def timed(registry: Any, store: Any, ds: str, queries: list[str]) -> tuple[dict[str, Any], list[Any]]:
    """Each mode's latency, the floor's parts and the floor, and hybrid's ratio to it, after ten
    questions of warm-up (page cache, first-call allocations); with the questions' vectors (for the
    HNSW recall)."""
    from mcpower.search import search

    warm_page_cache(store)
    emb = registry.embedder_for(store.info)
    for q in queries[:10]:
        for mode in MODES:
            search(registry, q, ds, 10, mode)
    times: dict[str, list[float]] = {m: [] for m in MODES}
    parts: dict[str, list[float]] = {"embed_query": [], "vector": [], "keyword": []}
    qvecs: list[Any] = []
    for i, q in enumerate(queries):
        for mode in MODES[i % 3 :] + MODES[: i % 3]:
            t = time.perf_counter()
            search(registry, q, ds, 10, mode)
            times[mode].append(time.perf_counter() - t)
        t = time.perf_counter()
        qv = emb.embed_query(q)
        parts["embed_query"].append(time.perf_counter() - t)
        t = time.perf_counter()
        store.semantic(qv, 50)
        parts["vector"].append(time.perf_counter() - t)
        t = time.perf_counter()
        store.keyword(q).top(50)
        parts["keyword"].append(time.perf_counter() - t)
        qvecs.append(qv)
    floor = [a + b + c for a, b, c in zip(parts["embed_query"], parts["vector"], parts["keyword"], strict=True)]
    hybrid, floor_stats = lat_stats(times["hybrid"]), lat_stats(floor)
    entry = {
        "modes": {m: lat_stats(v) for m, v in times.items()},
        "parts": {k: lat_stats(v) for k, v in parts.items()},
        "floor": floor_stats,
        "hybrid_vs_floor": {
            p: round(hybrid[f"{p}_ms"] / floor_stats[f"{p}_ms"], 3) for p in ("p50", "p95") if floor_stats[f"{p}_ms"]
        },
        "load_average": load_avg(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),  # sizes are merged across runs
    }
    return entry, qvecs


def warm_page_cache(store: Any) -> None:
    """Read a local store's files once: its index, its SQLite database and its exact vectors, if any."""
    manifest = store.manifest
    for rel in (manifest.index, manifest.metadata, manifest.vectors):
        if rel:
            with open(store.folder / rel, "rb") as f:
                while f.read(1 << 20):
                    pass


def docs(args: argparse.Namespace) -> dict[str, Any]:
    """The FastAPI docs (ingested into ``<datasets-dir>/mcp`` on first use, as the mcp section does),
    asked their 50 judged questions: real documentation, real questions, no query cache."""
    from mcpower.registry import Registry

    root = args.datasets_dir / "mcp"
    dataset = ensure_dataset(args.corpora / "docs-fastapi" / "corpus", root, "fastapi")
    registry = Registry(root, query_cache=0)
    try:
        store = registry.store("fastapi")
        queries = question_texts(DOCS_QUESTIONS) * (1 if args.quick else DOCS_ROUNDS)
        entry, _ = timed(registry, store, "fastapi", queries)
        entry["chunks"] = store.info.counts.chunks
    finally:
        registry.close()
    entry["questions"] = len(queries)
    entry["dataset"] = dataset
    return entry


def print_docs(e: dict[str, Any]) -> None:
    modes = [f"{e['modes'][m]['p50_ms']:.1f} / {e['modes'][m]['p95_ms']:.1f}" for m in MODES]
    floor = f"{e['floor']['p50_ms']:.1f} / {e['floor']['p95_ms']:.1f}"
    ratio = " / ".join(f"{e['hybrid_vs_floor'][p]:.2f}" for p in ("p50", "p95"))
    parts = [f"{e['parts'][p]['p50_ms']:.2f} / {e['parts'][p]['p95_ms']:.2f}" for p in e["parts"]]
    table(
        f"search on the FastAPI docs ({e['chunks']} chunks), {e['questions']} questions, p50 / p95 ms",
        ["hybrid", "semantic", "keyword", "floor", "hybrid x floor", "embed_query", "vector", "keyword part"],
        [[*modes, floor, ratio, *parts]],
    )
