"""Section ingest: chunks/s of the whole ingest against the bare embedder, per backend; int8 against torch."""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from suite.datasets import collection_files
from suite.report import load_avg, note, table


def run(args: argparse.Namespace) -> dict[str, Any]:
    import numpy as np

    from mcpower.chunking import chunk_document
    from mcpower.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP
    from mcpower.embedding import load_embedder
    from mcpower.ingestion import IngestOptions, ingest

    target = 200 if args.quick else 2000
    docs_dir = collection_files(args.corpora, "scifact")[0]
    backends = ("torch", "onnx", "onnx-int8")
    embedders: dict[str, Any] = {}
    construct: dict[str, float] = {}
    for b in backends:  # torch's time includes importing torch and sentence-transformers
        t = time.perf_counter()
        embedders[b] = load_embedder(backend=b)
        construct[b] = time.perf_counter() - t

    # The first N documents (in the order ingest walks them) that give >= target chunks, chunked as ingest does.
    texts: list[str] = []
    files: list[Path] = []
    counter = embedders["onnx"]
    for f in sorted(docs_dir.iterdir()):
        doc = chunk_document(
            f.read_bytes(),
            f.suffix.lower(),
            f.name,
            counter.count_tokens,
            DEFAULT_CHUNK_TOKENS,
            DEFAULT_OVERLAP,
        )
        files.append(f)
        texts += [c.embed_text for c in doc.chunks]
        if len(texts) >= target:
            break
    note(f"ingest: {len(files)} SciFact documents -> {len(texts)} chunks; load average {load_avg()}")

    for b in backends:  # warm-up: first-call allocations, thread pools
        embedders[b].embed_documents(texts[:64])
    bare: dict[str, list[float]] = {b: [] for b in backends}
    whole: dict[str, list[float]] = {b: [] for b in backends}
    embed_part: dict[str, list[float]] = {b: [] for b in backends}
    vectors: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="mcpower-bench-ingest-") as tmp:
        src = Path(tmp) / "scifact"
        src.mkdir()
        for f in files:
            shutil.copyfile(f, src / f.name)
        for r in range(args.rounds):
            # Alternate the order so a drift in machine load does not favour one backend.
            for b in backends if r % 2 == 0 else tuple(reversed(backends)):
                emb = embedders[b]
                t = time.perf_counter()
                vectors[b] = emb.embed_documents(texts)
                bare[b].append(time.perf_counter() - t)
                t = time.perf_counter()
                report = ingest(
                    src, Path(tmp) / f"out-{b}-{r}", IngestOptions(dataset_id="bench", full=True), embedder=emb
                )
                whole[b].append(time.perf_counter() - t)
                embed_part[b].append(report.embed_seconds)
                if report.chunks != len(texts):
                    raise RuntimeError(f"ingest made {report.chunks} chunks, the benchmark chunked {len(texts)}")
                shutil.rmtree(Path(tmp) / f"out-{b}-{r}")
                note(f"ingest round {r + 1}/{args.rounds} {b}: bare {bare[b][-1]:.1f} s, ingest {whole[b][-1]:.1f} s")

    n = len(texts)
    per: dict[str, dict[str, Any]] = {}
    for b in backends:
        best_bare, best_whole = min(bare[b]), min(whole[b])
        cos = np.sum(vectors[b] * vectors["torch"], axis=1)
        per[b] = {
            "construct_s": round(construct[b], 2),
            "bare_chunks_per_s": round(n / best_bare, 1),
            "ingest_chunks_per_s": round(n / best_whole, 1),
            "overhead_pct": round((best_whole / best_bare - 1) * 100, 1),
            # The same question inside one ingest run: the time around its embed_documents call.
            "in_run_overhead_pct": round(min(w / e - 1 for w, e in zip(whole[b], embed_part[b])) * 100, 1),
            "cosine_vs_torch_mean": round(float(cos.mean()), 5),
            "cosine_vs_torch_min": round(float(cos.min()), 5),
            "bare_s": [round(x, 2) for x in bare[b]],
            "ingest_s": [round(x, 2) for x in whole[b]],
        }
    for b in backends:
        per[b]["speed_vs_torch"] = round(per[b]["ingest_chunks_per_s"] / per["torch"]["ingest_chunks_per_s"], 2)
        per[b]["bare_speed_vs_torch"] = round(per[b]["bare_chunks_per_s"] / per["torch"]["bare_chunks_per_s"], 2)
    table(
        f"ingest: {n} SciFact chunks ({len(files)} documents), best of {args.rounds} round(s), {os.cpu_count()} CPUs",
        ["backend", "bare c/s", "ingest c/s", "overhead", "in-run", "x torch", "cos mean", "cos min", "load s"],
        [
            [
                b,
                f"{p['bare_chunks_per_s']:.1f}",
                f"{p['ingest_chunks_per_s']:.1f}",
                f"{p['overhead_pct']:+.1f}%",
                f"{p['in_run_overhead_pct']:+.1f}%",
                f"{p['speed_vs_torch']:.2f}x",
                f"{p['cosine_vs_torch_mean']:.4f}",
                f"{p['cosine_vs_torch_min']:.4f}",
                f"{p['construct_s']:.1f}",
            ]
            for b, p in per.items()
        ],
    )
    print(
        "overhead: whole ingest vs bare embed_documents on the same texts; in-run: ingest's total vs its own "
        "embedding step; x torch: ingest chunks/s; cosines vs torch; load s: building the embedder"
    )
    return {"chunks": n, "documents": len(files), "rounds": args.rounds, "backends": per}
