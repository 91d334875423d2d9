"""Distinct results and one ranking across datasets (issue 20, items 1 and 6).

Usage:
    python benchmarks/distinct.py DATASETS_DIR [--corpora DIR] [--part distinct across] [--json FILE]

DATASETS_DIR holds datasets ingested with the default model under these ids (any may be missing):
``docs`` (this repository's docs/), ``fastapi`` (shared/bench/docs-fastapi/corpus), ``cranfield``,
``scifact`` (shared/bench/<name>/docs). Judged questions: benchmarks/data/ for docs and fastapi,
the collections' own for cranfield and scifact.

distinct   per dataset and grouping (raw chunks as before; passages as by default, "passages/None": two
           per document over the first five results, then by place; passages with a cap of 1, 2 or 3
           per document over every result):
           distinct documents in the top 5, recall@5 counted over distinct documents, nDCG@10 of the
           top 10 results (documents once, at their best result), and search latency (median, p95)
across     every dataset searched at once, on each dataset's own questions: where the relevant document
           lands in the merged top 10 (MRR@10, share in the top 5) for each way of merging the
           datasets' lists; "search" is what mcpower.search does for dataset=None
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from mcpower.evaluation import doc_keys, load_qrels, load_queries, ndcg_at
from mcpower.ranking import LOW_CONFIDENCE
from mcpower.registry import Registry
from mcpower.results import SearchResult
from mcpower.search import search

DATA = Path(__file__).resolve().parent / "data"
# ("passages", None) is the default: two per document over the first five, then by place (passages.py).
CONFIGS: list[tuple[str, int | None]] = [
    ("none", None),
    ("passages", None),
    ("passages", 1),
    ("passages", 2),
    ("passages", 3),
]


def judged(name: str, corpora: Path) -> tuple[dict[str, str], dict[str, dict[str, float]]]:
    base = {"docs": DATA / "mcpower_docs", "fastapi": DATA / "fastapi"}.get(name)
    if base is not None:
        q, r = Path(f"{base}_questions.jsonl"), Path(f"{base}_qrels.tsv")
    else:
        q, r = corpora / name / "queries.jsonl", corpora / name / "qrels.tsv"
    queries, qrels = load_queries(q), load_qrels(r)
    return queries, {k: v for k, v in qrels.items() if k in queries and any(g > 0 for g in v.values())}


def doc_of(path: str, judgments: dict[str, float]) -> str:
    return next((key for key in doc_keys(path) if key in judgments), doc_keys(path)[-1])


def docs_in_order(results: list[SearchResult], judgments: dict[str, float]) -> list[str]:
    out: list[str] = []
    for r in results:
        d = doc_of(r.path, judgments)
        if d not in out:
            out.append(d)
    return out


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def distinct_part(reg: Registry, names: list[str], corpora: Path) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in names:
        queries, qrels = judged(name, corpora)
        rows: dict[str, dict[str, float]] = {}
        times: dict[str, list[float]] = {f"{g}/{p}": [] for g, p in CONFIGS}
        sums: dict[str, list[list[float]]] = {key: [] for key in times}
        search(reg, "warm up", dataset=name)
        for qid, judgments in qrels.items():
            relevant = {d for d, g in judgments.items() if g > 0}
            for group, per in CONFIGS:  # interleaved, so load changes touch every configuration alike
                key = f"{group}/{per}"
                started = time.perf_counter()
                results = search(reg, queries[qid], dataset=name, top_k=10, group=group, per_document=per).results
                times[key].append((time.perf_counter() - started) * 1000)
                top5 = docs_in_order(results[:5], judgments)
                sums[key].append(
                    [
                        len(top5),
                        len(relevant & set(top5)) / len(relevant),
                        ndcg_at(docs_in_order(results, judgments), judgments, 10),
                    ]
                )
        for key, per_query in sums.items():
            n = len(per_query)
            rows[key] = {
                "distinct@5": round(sum(r[0] for r in per_query) / n, 3),
                "recall@5": round(sum(r[1] for r in per_query) / n, 4),
                "ndcg@10": round(sum(r[2] for r in per_query) / n, 4),
                "ms_p50": round(statistics.median(times[key]), 2),
                "ms_p95": round(pct(times[key], 0.95), 2),
            }
        out[name] = {"queries": len(qrels), "configs": rows}
        print(f"\n{name}: {len(qrels)} judged queries, top 10 searched (ms: the whole search call)")
        print(f"{'grouping':<14}{'distinct@5':>11}{'recall@5':>10}{'nDCG@10':>9}{'p50 ms':>8}{'p95 ms':>8}")
        for key, r in rows.items():
            print(
                f"{key:<14}{r['distinct@5']:>11.2f}{r['recall@5']:>10.4f}{r['ndcg@10']:>9.4f}"
                f"{r['ms_p50']:>8.1f}{r['ms_p95']:>8.1f}"
            )
    return out


Ranked = list[tuple[str, SearchResult]]  # (dataset, result) in one dataset's order
MERGES: dict[str, Callable[[dict[str, list[SearchResult]]], Ranked]] = {}


def merge(name: str) -> Callable[[Callable[[dict[str, list[SearchResult]]], Ranked]], Callable[..., Ranked]]:
    def register(f: Callable[[dict[str, list[SearchResult]]], Ranked]) -> Callable[..., Ranked]:
        MERGES[name] = f
        return f

    return register


@merge("raw score")
def _raw(lists: dict[str, list[SearchResult]]) -> Ranked:
    return sorted(((d, r) for d, rs in lists.items() for r in rs), key=lambda t: -t[1].score)


@merge("rank fusion")
def _rrf(lists: dict[str, list[SearchResult]]) -> Ranked:
    keyed = [(1 / (60 + i), r.score, d, r) for d, rs in lists.items() for i, r in enumerate(rs, 1)]
    return [(d, r) for _, _, d, r in sorted(keyed, key=lambda t: (-t[0], -t[1]))]


@merge("rank fusion, confident datasets first")
def _rrf_gated(lists: dict[str, list[SearchResult]]) -> Ranked:
    sure = {d: rs for d, rs in lists.items() if rs and rs[0].score >= LOW_CONFIDENCE["hybrid"]}
    rest = {d: rs for d, rs in lists.items() if d not in sure}
    return _rrf(sure) + _raw(rest)


@merge("score / dataset's best")
def _maxnorm(lists: dict[str, list[SearchResult]]) -> Ranked:
    keyed = [(r.score / max(rs[0].score, 1e-9), r.score, d, r) for d, rs in lists.items() for r in rs]
    return [(d, r) for _, _, d, r in sorted(keyed, key=lambda t: (-t[0], -t[1]))]


@merge("score / max(dataset's best, low-confidence line)")
def _maxnorm_gated(lists: dict[str, list[SearchResult]]) -> Ranked:
    line = LOW_CONFIDENCE["hybrid"]
    keyed = [(r.score / max(rs[0].score, line), r.score, d, r) for d, rs in lists.items() for r in rs]
    return [(d, r) for _, _, d, r in sorted(keyed, key=lambda t: (-t[0], -t[1]))]


@merge("mean of score and score / dataset's best")
def _half(lists: dict[str, list[SearchResult]]) -> Ranked:
    keyed = [((r.score + r.score / max(rs[0].score, 1e-9)) / 2, d, r) for d, rs in lists.items() for r in rs]
    return [(d, r) for _, d, r in sorted(keyed, key=lambda t: -t[0])]


def _z(rs: list[SearchResult], r: SearchResult) -> float:
    scores = [x.score for x in rs]
    sd = statistics.pstdev(scores) if len(scores) > 1 else 0.0
    return (r.score - statistics.fmean(scores)) / sd if sd > 1e-6 else 0.0


@merge("z of the dataset's top 10")
def _zscore(lists: dict[str, list[SearchResult]]) -> Ranked:
    keyed = [(_z(rs, r), r.score, d, r) for d, rs in lists.items() for r in rs]
    return [(d, r) for _, _, d, r in sorted(keyed, key=lambda t: (-t[0], -t[1]))]


@merge("score + 0.05 z")
def _score_z(lists: dict[str, list[SearchResult]]) -> Ranked:
    keyed = [(r.score + 0.05 * _z(rs, r), d, r) for d, rs in lists.items() for r in rs]
    return [(d, r) for _, d, r in sorted(keyed, key=lambda t: -t[0])]


def across_part(reg: Registry, names: list[str], corpora: Path, limit: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for name in names:
        queries, qrels = judged(name, corpora)
        picked = list(qrels.items())[:limit]
        scores: dict[str, list[tuple[float, float]]] = {m: [] for m in [*MERGES, "search", "(its own dataset alone)"]}
        for qid, judgments in picked:
            lists = {d: search(reg, queries[qid], dataset=d, top_k=10).results for d in names}
            merged = {m: f(lists)[:10] for m, f in MERGES.items()}
            merged["search"] = [(r.dataset, r) for r in search(reg, queries[qid], top_k=10).results]
            merged["(its own dataset alone)"] = [(name, r) for r in lists[name]]
            for m, ranked in merged.items():
                hits = [
                    i
                    for i, (d, r) in enumerate(ranked)
                    if d == name and judgments.get(doc_of(r.path, judgments), 0) > 0
                ]
                scores[m].append((1 / (hits[0] + 1) if hits else 0.0, 1.0 if hits and hits[0] < 5 else 0.0))
        rows = {
            m: {"mrr@10": round(sum(a for a, _ in v) / len(v), 4), "in_top5": round(sum(b for _, b in v) / len(v), 4)}
            for m, v in scores.items()
        }
        out[name] = {"queries": len(picked), "merges": rows}
        print(f"\nall of {', '.join(names)} searched at once, {len(picked)} questions of {name}")
        print(f"{'merge':<50}{'MRR@10':>8}{'in top 5':>10}")
        for m, r in rows.items():
            print(f"{m:<50}{r['mrr@10']:>8.4f}{r['in_top5']:>10.4f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets_dir", type=Path)
    ap.add_argument("--corpora", type=Path, default=Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench")))
    ap.add_argument("--part", nargs="+", choices=["distinct", "across"], default=["distinct", "across"])
    ap.add_argument("--limit", type=int, default=100, help="questions per dataset in `across`")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args()
    reg = Registry(args.datasets_dir)
    names: list[str] = [n for n in ("docs", "fastapi", "cranfield", "scifact") if n in reg.ready_ids()]
    result: dict[str, object] = {"datasets": names, "load_before": os.getloadavg()}
    if "distinct" in args.part:
        result["distinct"] = distinct_part(reg, names, args.corpora)
    if "across" in args.part:
        result["across"] = across_part(reg, names, args.corpora, args.limit)
    result["load_after"] = os.getloadavg()
    print(f"\nload average before {result['load_before']}, after {result['load_after']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
