"""The change-notes prior (mcpower/priors.py) measured: how many chunks it marks, how often change
notes reach a top 5, and nDCG@10, for several factors (1.0 = no prior).

Usage: python benchmarks/priors_study.py DATASETS_DIR DATASET [QUESTIONS QRELS] [--factors 1,0.9,0.85,0.8]
Without judged questions it only counts the chunks the rule marks (SciFact, Cranfield: none must be).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from mcpower import priors
from mcpower.evaluation import evaluate, load_qrels, load_queries
from mcpower.registry import Registry
from mcpower.search import rank_paths, search


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    factors = [1.0, 0.9, 0.85, 0.8, 0.7]
    for a in sys.argv[1:]:
        if a.startswith("--factors="):
            factors = [float(f) for f in a.split("=", 1)[1].split(",")]
    reg = Registry(Path(args[0]))
    dataset = args[1]
    store = reg.store(dataset)
    marked: Counter[str] = Counter()
    total = 0
    for doc, chunks in store.iter_documents():
        for c in chunks:
            total += 1
            if priors.is_change_notes(doc.path, doc.title, c.heading_path):
                marked[doc.path] += 1
    print(f"{dataset}: {sum(marked.values())} of {total} chunks marked change notes, in {len(marked)} documents")
    for path, n in marked.most_common(8):
        print(f"  {n:>5}  {path}")
    if len(args) < 4:
        return
    queries, judged = load_queries(Path(args[2])), load_qrels(Path(args[3]))
    asked = {q: t for q, t in queries.items() if q in judged}
    about = sum(1 for t in asked.values() if priors.about_changes(t))
    print(f"{len(asked)} judged questions, {about} about versions or changes (no prior for them)")
    print(f"{'factor':>7} {'ndcg@10':>8} {'mrr@10':>7} {'notes in top 5':>15}")
    for factor in factors:
        priors.CHANGE_NOTES_FACTOR = factor
        report = evaluate(lambda text, k: rank_paths(reg, text, dataset, k), asked, judged, 100, dataset, "hybrid")
        in_top5 = 0
        for text in asked.values():
            results = search(reg, text, dataset, top_k=5).results
            if any(priors.is_change_notes(r.path, r.title, r.heading_path) for r in results):
                in_top5 += 1
        m = report.metrics
        print(f"{factor:>7.2f} {m['ndcg@10']:>8.4f} {m['mrr@10']:>7.4f} {in_top5:>15}")


if __name__ == "__main__":
    main()
