"""Compare fusion rules on a judged dataset (how SEMANTIC_WEIGHT / KEYWORD_HALF were chosen).

Usage: python benchmarks/fusion_study.py DATASETS_DIR DATASET QUERIES QRELS
Gathers, per query, the union of the top-200 semantic and keyword candidates with both scores,
then scores every fusion rule on the same candidates.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcpower.evaluation import doc_keys, load_qrels, load_queries, score_run
from mcpower.registry import Registry

DEPTH = 200


def main() -> None:
    root, ds, qpath, rpath = sys.argv[1:5]
    reg = Registry(Path(root))
    store = reg.store(ds)
    emb = reg.embedder_for(store.info)
    queries, qrels = load_queries(Path(qpath)), load_qrels(Path(rpath))
    cands = {}
    for qid, judged in qrels.items():
        if qid not in queries:
            continue
        q = queries[qid]
        qv = emb.embed_query(q)
        cos = dict(store.semantic(qv, DEPTH))
        every = store.keyword(q)
        bm = dict(every.top(DEPTH))
        miss = [i for i in bm if i not in cos]
        if miss:
            cos.update(zip(miss, (store.vectors(miss) @ qv).tolist()))
        bm.update(every.scores_of(cos))
        paths = {i: h.path for i, h in store.chunks(list(cos)).items()}
        cands[qid] = (cos, bm, paths, judged)

    def evaluate(scorer):
        tot: dict[str, float] = {}
        for _qid, (cos, bm, paths, judged) in cands.items():
            s = scorer(cos, bm)
            ranked, seen = [], set()
            for i in sorted(s, key=lambda i: -s[i]):
                keys = doc_keys(paths[i])
                d = next((k for k in keys if k in judged), keys[-1])
                if d not in seen:
                    seen.add(d)
                    ranked.append(d)
            for k, v in score_run(ranked, judged).items():
                tot[k] = tot.get(k, 0) + v
        return {k: v / len(cands) for k, v in tot.items()}

    def show(name, r):
        print(
            f"{name:<34} ndcg@10 {r['ndcg@10']:.4f}  R@10 {r['recall@10']:.4f}  R@100 {r['recall@100']:.4f}  MRR {r['mrr@10']:.4f}"
        )

    show("semantic", evaluate(lambda c, b: dict(c)))
    show("keyword", evaluate(lambda c, b: {i: b.get(i, 0.0) for i in c}))
    for k in (60,):

        def rrf(c, b, k=k):
            rc = {i: r for r, i in enumerate(sorted(c, key=lambda i: -c[i]))}
            rb = {i: r for r, i in enumerate(sorted(b, key=lambda i: -b[i]))}
            return {i: 1 / (k + rc.get(i, 10**6)) + (1 / (k + rb[i]) if i in rb and b[i] > 0 else 0) for i in c}

        show(f"rrf k={k}", evaluate(rrf))
    for half in (4.0, 8.0, 16.0):
        for a in (0.4, 0.5, 0.6, 0.7, 0.8):
            show(
                f"convex a={a} half={half}",
                evaluate(
                    lambda c, b, a=a, h=half: {
                        i: a * max(c[i], 0) + (1 - a) * (b.get(i, 0) / (b.get(i, 0) + h)) for i in c
                    }
                ),
            )
    for a in (0.5, 0.6, 0.7):

        def mm(c, b, a=a):
            mx = max(b.values(), default=0) or 1
            return {i: a * max(c[i], 0) + (1 - a) * b.get(i, 0) / mx for i in c}

        show(f"convex a={a} bm25/max", evaluate(mm))


if __name__ == "__main__":
    main()
