"""The bench datasets: judged collections ingested once and reused, and `mcpower eval`'s metrics over them."""

from __future__ import annotations

import resource
import shutil
import time
from pathlib import Path
from typing import Any

from suite.report import note

EVAL_DEPTH = 300  # chunks retrieved per query: `mcpower eval`'s default --depth
QUICK_QUERIES = 50  # judged queries per collection in --quick
QUICK_EXTRA_DOCS = 500  # unjudged documents added to the --quick subset corpus, so ranking is not trivial


def count_files(corpus: Path) -> int:
    from mcpower.discover import discover

    return len(discover(corpus)[0])


def ensure_dataset(corpus: Path, root: Path, ds_id: str, backend: str = "onnx") -> dict[str, Any]:
    """Ingest ``corpus`` as ``root/ds_id`` unless an ingest with the same model, backend and chunking is there.

    Returns facts about the dataset and, if it was built now, how long that took.
    """
    from mcpower.chunking import CHUNKER
    from mcpower.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_MODEL, DEFAULT_OVERLAP
    from mcpower.embedding import resolve_model
    from mcpower.errors import McpowerError
    from mcpower.ingestion import IngestOptions, ingest
    from mcpower.manifest import MANIFEST_NAME, read_manifest

    path = root / ds_id / MANIFEST_NAME
    want_docs = count_files(corpus)
    spec = resolve_model()
    if path.exists():
        try:
            m = read_manifest(path)
        except McpowerError as e:
            note(f"{ds_id}: unreadable manifest ({e.message}); re-ingesting")
        else:
            same = (
                m.embedding.model == DEFAULT_MODEL
                and m.embedding.backend == backend
                and m.embedding.model_fingerprint in (spec.fingerprint, spec.legacy_fingerprint)
                and (m.chunking.chunker, m.chunking.chunk_tokens, m.chunking.overlap)
                == (CHUNKER, DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP)
                and m.counts.documents == want_docs
            )
            if same:
                return {"id": ds_id, "chunks": m.counts.chunks, "documents": m.counts.documents, "reused": True}
            note(f"{ds_id}: existing ingest differs (model, backend, chunking or corpus); re-ingesting")
    note(f"ingesting {corpus} as {ds_id} ({backend}, {want_docs} files) into {root} ...")
    last = [0.0]

    def progress(phase: str, done: int, total: int) -> None:
        if phase == "chunks" and (time.monotonic() - last[0] > 30 or done == total):
            last[0] = time.monotonic()
            note(f"  {ds_id}: {done}/{total} chunks embedded")

    cpu = cpu_seconds()
    report = ingest(corpus, root, IngestOptions(dataset_id=ds_id, backend=backend, full=True), progress=progress)
    cpu = cpu_seconds() - cpu
    note(f"{ds_id}: {report.chunks} chunks in {report.seconds:.0f} s ({cpu:.0f} s of CPU)")
    return {
        "id": ds_id,
        "chunks": report.chunks,
        "documents": report.documents,
        "reused": False,
        "ingest_seconds": round(report.seconds, 1),
        "chunks_per_second": round(report.chunks / report.seconds, 1),
        # Less swayed by other processes' load than wall time: this process's threads and the
        # reader processes it waited for.
        "cpu_seconds": round(cpu, 1),
        "chunks_per_cpu_second": round(report.chunks / cpu, 1) if cpu > 0 else None,
    }


def cpu_seconds() -> float:
    """CPU time used so far by this process (all threads) and its finished children."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def collection_files(corpora: Path, name: str) -> tuple[Path, Path, Path]:
    base = corpora / name
    return base / "docs", base / "queries.jsonl", base / "qrels.tsv"


def pick_queries(qrels: dict[str, dict[str, float]], quick: bool) -> dict[str, dict[str, float]]:
    """All judged queries, or the first QUICK_QUERIES of them (in file order) in --quick."""
    return dict(list(qrels.items())[:QUICK_QUERIES]) if quick else qrels


def quick_corpus(corpora: Path, name: str, root: Path, qrels: dict[str, dict[str, float]]) -> Path:
    """A small corpus for --quick: the documents judged for the chosen queries plus some others."""
    docs, _, _ = collection_files(corpora, name)
    judged = {d for q in qrels.values() for d in q}
    files = sorted(docs.iterdir())
    keep = [f for f in files if f.stem in judged] + [f for f in files if f.stem not in judged][:QUICK_EXTRA_DOCS]
    out = root / "quick-corpora" / name
    if not out.is_dir() or len(list(out.iterdir())) != len(keep):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        for f in keep:
            shutil.copyfile(f, out / f.name)
    return out


def dataset_id(name: str, backend: str) -> str:
    return name if backend == "onnx" else f"{name}-{backend.replace('onnx-', '')}"


def has_full_ingest(root: Path, name: str, backend: str = "onnx") -> bool:
    from mcpower.manifest import MANIFEST_NAME

    return (root / dataset_id(name, backend) / MANIFEST_NAME).exists()


def collection_dataset(
    corpora: Path, name: str, root: Path, quick: bool, backend: str = "onnx", subset: bool | None = None
) -> tuple[dict[str, Any], dict[str, str], dict[str, dict[str, float]]]:
    """The dataset of a judged collection (ingested if needed), its queries and the judgments to use.

    --quick reuses a full ingest when there is one, else ingests a subset corpus (scores on it are
    higher than on the whole collection and are not comparable with the baselines); ``subset``
    forces the choice.
    """
    from mcpower.evaluation import load_qrels, load_queries

    docs, qpath, rpath = collection_files(corpora, name)
    queries, qrels = load_queries(qpath), pick_queries(load_qrels(rpath), quick)
    ds_id = dataset_id(name, backend)
    if subset is None:
        subset = quick and not has_full_ingest(root, name, backend)
    if subset:
        info = ensure_dataset(quick_corpus(corpora, name, root, qrels), root, f"{ds_id}-quick", backend)
        info["subset"] = True
    else:
        info = ensure_dataset(docs, root, ds_id, backend)
        info["subset"] = False
    return info, queries, qrels


def evaluate_modes(
    root: Path, ds_id: str, queries: dict[str, str], qrels: dict[str, dict[str, float]]
) -> dict[str, dict[str, Any]]:
    """keyword, semantic and hybrid metrics of a dataset, exactly as `mcpower eval --mode all` computes them."""
    from mcpower.evaluation import evaluate
    from mcpower.registry import Registry
    from mcpower.search import rank_paths

    registry = Registry(root)
    registry.store(ds_id)
    registry.embedder_for(registry.store(ds_id).info).embed_query("warm up")
    out: dict[str, dict[str, Any]] = {}
    for mode in ("keyword", "semantic", "hybrid"):

        def search(text: str, k: int, mode: str = mode) -> list[str]:
            return rank_paths(registry, text, ds_id, k, mode)

        r = evaluate(search, queries, qrels, EVAL_DEPTH, ds_id, mode)
        out[mode] = {
            **{m: round(v, 4) for m, v in r.metrics.items()},
            "queries": r.queries,
            "ms_per_query": round(r.seconds * 1000 / max(r.queries, 1), 1),
        }
    registry.close()
    return out
