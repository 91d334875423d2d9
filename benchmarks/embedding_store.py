"""What the embedding store costs an ingest: a whole ingest with it and without it, interleaved.

    python benchmarks/embedding_store.py [--corpus DIR] [--rounds 5]

The tests' fake embedder stands in for the model (it embeds in microseconds), so the difference is
the store's own work — hashing each chunk's text, one SQLite transaction per slice, the clean-up
after the ingest — not hidden behind the model's seconds. Each round ingests the corpus afresh
three ways: without a store, with an empty one (every vector written), and again with the store
full (every vector read back and checked, nothing embedded: a resumed ingest). Printed: medians
and their ratios to the run without a store, and the store's cost per 1,000 chunks, to set against
the model's time for them (all-MiniLM-L6-v2 on onnx: 3 to 50 chunks a second, 20 s to 5 min per
1,000, by machine and load). Default corpus: FastAPI's docs (shared/bench, 155 pages, ~3,400 chunks).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR.parent / "tests"))

from conftest import FakeEmbedder  # noqa: E402

from mcpower.ingestion import IngestOptions, ingest  # noqa: E402

CORPUS = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench")) / "docs-fastapi" / "corpus"


def one(source: Path, work: Path, cache: Path, store_mb: float) -> tuple[float, int, int]:
    """Seconds of one fresh ingest, chunks embedded, chunks taken from the store."""
    datasets = work / "datasets"
    shutil.rmtree(datasets, ignore_errors=True)
    started = time.perf_counter()
    report = ingest(
        source,
        datasets,
        IngestOptions(dataset_id="bench", cache_dir=cache, embedding_store_mb=store_mb),
        embedder=FakeEmbedder(),
    )
    return time.perf_counter() - started, report.embedded, report.plan.from_store


def store_alone(cache: Path, n: int, rounds: int) -> tuple[float, float]:
    """Seconds to key and store ``n`` vectors a slice at a time, and to read them all back checked:
    the store's own work, apart from the ingest around it (medians of ``rounds``)."""
    import numpy as np

    from mcpower.embedding.store import EmbeddingStore
    from mcpower.plan import SLICE

    emb = FakeEmbedder()
    texts = [f"chunk {i} of the zephyrine daemon, quokka diagnostics and harpsichord tuning {i * 7}" for i in range(n)]
    vectors = emb.embed_documents(texts)
    writes, reads = [], []
    for _ in range(rounds):
        shutil.rmtree(cache, ignore_errors=True)
        store = EmbeddingStore.open(cache, emb)
        assert store is not None
        started = time.perf_counter()
        keys = store.keys(texts)
        for i in range(0, n, SLICE):
            store.put(keys[i : i + SLICE], vectors[i : i + SLICE])
        writes.append(time.perf_counter() - started)
        out = np.zeros_like(vectors)
        started = time.perf_counter()
        assert store.load(store.keys(texts), out, range(n)).all()
        reads.append(time.perf_counter() - started)
        store.close()
    return statistics.median(writes), statistics.median(reads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with open("/proc/loadavg") as f:
        print(f"load average at start: {f.read().split()[0]}")
    times: dict[str, list[float]] = {"none": [], "writing": [], "reading": []}
    chunks = 0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        one(args.corpus, work, work / "warm-up", 0)  # imports, the reader worker, the page cache
        for _ in range(args.rounds):
            cache = work / "cache"
            shutil.rmtree(cache, ignore_errors=True)
            seconds, chunks, _ = one(args.corpus, work, cache, 0)
            times["none"].append(seconds)
            seconds, embedded, _ = one(args.corpus, work, cache, 1024)
            times["writing"].append(seconds)
            seconds, embedded, stored = one(args.corpus, work, cache, 1024)
            assert embedded == 0 and stored == chunks
            times["reading"].append(seconds)
        write, read = store_alone(work / "alone", chunks, args.rounds)
    base = statistics.median(times["none"])
    print(f"{args.corpus.name}: {chunks:,} chunks, {args.rounds} rounds, medians:")
    for name, values in times.items():
        med = statistics.median(values)
        extra = f", {1000 * (med - base) / chunks * 1000:.0f} ms per 1,000 chunks" if name != "none" else ""
        print(f"  {name:8} {med:6.2f} s  ({med / base:.2f}x the ingest without a store{extra})")
    per = 1000 / chunks
    print(
        f"the store alone: writing {write * per * 1000:.0f} ms and reading back {read * per * 1000:.0f} ms per 1,000 chunks"
    )


if __name__ == "__main__":
    main()
