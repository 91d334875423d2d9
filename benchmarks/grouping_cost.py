"""What the default grouping costs against ``group: none`` in a warm core search (issue 30).

    python benchmarks/grouping_cost.py DATASETS_DIR DATASET QUESTIONS.jsonl [--rounds 4] [--top-k 5]
                                       [--profile]

Every question is searched once grouped and once not, to warm the store and cache the questions'
vectors (the model is left out: what remains is the index, SQLite and mcpower's own code). Then
``--rounds`` rounds, the two ways alternating question by question (and which goes first, round by
round), each call's CPU time measured with ``time.process_time`` (less swayed by other processes than
wall time; every thread of the process, since a hybrid search's vector side runs on a worker
beside the keyword side: mcpower/meanwhile.py). Prints p50 / p95 of each and their ratios; ``--profile`` adds a cProfile of the grouped
searches (cumulative time per function, per search).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time
from pathlib import Path

from suite.questions import question_texts

from mcpower.registry import Registry
from mcpower.search import search


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.95 * len(s)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("datasets_dir", type=Path)
    ap.add_argument("dataset")
    ap.add_argument("questions", type=Path, help="JSON lines with a 'text' field (benchmarks/data/*_questions.jsonl)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    questions = question_texts(args.questions)
    reg = Registry(args.datasets_dir)
    for q in questions:
        for g in ("passages", "none"):
            search(reg, q, dataset=args.dataset, group=g, top_k=args.top_k)
    cpu: dict[str, list[float]] = {"passages": [], "none": []}
    for r in range(args.rounds):
        order = ("passages", "none") if r % 2 == 0 else ("none", "passages")
        for q in questions:
            for g in order:
                started = time.process_time()
                search(reg, q, dataset=args.dataset, group=g, top_k=args.top_k)
                cpu[g].append(time.process_time() - started)
    for g, v in cpu.items():
        print(f"{g:<9} CPU ms p50 {1000 * statistics.median(v):.2f}  p95 {1000 * p95(v):.2f}  ({len(v)} calls)")
    ratio50 = statistics.median(cpu["passages"]) / statistics.median(cpu["none"])
    print(f"grouped / none: p50 {ratio50:.3f}  p95 {p95(cpu['passages']) / p95(cpu['none']):.3f}")
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        for q in questions:
            search(reg, q, dataset=args.dataset, top_k=args.top_k)
        profile.disable()
        stats = pstats.Stats(profile)
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][3])[:30]  # type: ignore[attr-defined]
        for (file, _, name), (_, calls, _, cumulative, _) in rows:
            per = len(questions)
            print(f"{1000 * cumulative / per:8.3f} ms/search {calls / per:7.2f} calls  {Path(file).name}:{name}")


if __name__ == "__main__":
    main()
