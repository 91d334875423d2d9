"""Every language (issue 27): the judged multilingual sets asked through `knowledge_search`'s own path.

    python benchmarks/languages.py [--books NAME ...] [--langs CODE ...] [--modes MODE ...]
                                   [--cross default|none|all] [--ingest-arg ARG ...] [--quick N]
                                   [--cache DIR] [--out FILE] [--doc-root BOOK:LANG=PATH ...]
                                   [--set tuning|heldout] [--coverage-only] [--ingest-only]
                                   [--datasets-of CODE_VERSION]

For each book (benchmarks/data/languages/books.json: Debian's maint-guide, developers-reference and
debian-faq, each in English and its translations) and each language it is installed in, the book's
HTML pages are copied into the cache and ingested with ``python -m mcpower ingest`` of the tree this
runs in: a plain ingest (no MCPOWER_* variables passed on), plus ``--ingest-arg`` (repeatable;
``--ingest-arg=--model=/path/to/model``). Datasets are cached by book, language, ingest arguments and
the code of ``mcpower/`` (its git tree, plus a hash of uncommitted changes), so a re-run only searches.

Every question is then asked with ``mcpower.search.search`` (what the knowledge_search tool calls:
passages, the per-document cap, priors; top 10) in each ``--modes`` (hybrid, keyword, semantic), and
each result is mapped to its section of that language's pages (suite/book_sections.py). Reported per
book and language, per language, for the Chinese and Japanese questions without a Latin letter, and
for cross-lingual rows (``--cross default``: the English questions on every translation and each
translation's questions on the English book; ``all``: every pair; ``none``):

    nDCG@10      sections as graded in qrels.tsv, each counted once, at its best rank (linear gains)
    MRR@10       1 / rank of the first judged section
    no result    questions the search answered with nothing
    low conf     share of questions whose answer says meta.low_confidence
    chunks/s     the ingest's chunks per second: chunks / (its seconds less the model's loading), so
                 reading, chunking, text analysis, embedding and writing all count
    p95 ms       the search's wall time, 95th percentile over the row's questions

Markdown tables go to stdout, everything (per question: the sections and results) to ``--out``
(default benchmarks/results/languages.json); ``--compare FILE`` adds a table of nDCG@10 against an
earlier run's JSON (main's, for a feature branch), row by row, over the same questions (a --quick
run or one book is compared with what the earlier run answered to those questions). ``--coverage-only`` neither ingests nor searches: it reads
each page with mcpower's own reader and maps every line of the text a dataset would store to its
section (how much maps through an exact heading path, which judged sections nothing reaches), and
says how much of each translation is still English. It is the check to run on the held-out set
(``--set heldout``), whose rankings are for the integrator alone (they need ``--confirm-heldout``).

``--ingest-only`` ingests what the rows need and searches nothing (so the held-out datasets can be
built before the code is final, without a ranking seen). ``--datasets-of CODE_VERSION`` searches the
datasets an earlier code version ingested (``2191f843a1ad`` for ``datasets/tuning/2191f843a1ad-plain``)
with this code, and never ingests: a search-side change measured in minutes instead of re-ingesting
every book; valid only while the ingest side (reading, chunking, analysis, the model) is unchanged
since, which the results JSON records as ``datasets_of``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from suite.langreport import compare_report, markdown_report, summarize
from suite.langsets import (
    HELDOUT,
    TOP,
    TUNING,
    Book,
    QuestionSet,
    SectionMapper,
    SetError,
    copy_pages,
    corpus_digest,
    load_books,
    load_questions,
    missing_sections,
    mrr,
    ndcg,
    parse_book,
    reader_coverage,
    unique,
    untranslated_share,
)
from suite.report import REPO, environment, lat_stats, load_avg, note

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower" / "languages"
MODES = ("hybrid", "keyword", "semantic")


def code_version() -> str:
    """The git tree of mcpower/, with a hash of its uncommitted changes if there are any."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=30)
        return out.stdout if out.returncode == 0 else ""

    tree = git("rev-parse", "HEAD:mcpower").strip()[:12] or "no-git"
    untracked = sorted(git("ls-files", "--others", "--exclude-standard", "--", "mcpower").split())
    diff = git("diff", "HEAD", "--", "mcpower")
    if not diff and not untracked:
        return tree
    h = hashlib.sha256(diff.encode())
    for name in untracked:
        h.update(name.encode() + b"\0" + (REPO / name).read_bytes())
    return f"{tree}+{h.hexdigest()[:8]}"


def ingest_dir(cache: Path, set_name: str, ingest_args: list[str], version: str | None = None) -> Path:
    """The datasets folder for this code (or the code ``version`` named) and these ingest arguments."""
    args_hash = hashlib.sha256(json.dumps(ingest_args).encode()).hexdigest()[:8] if ingest_args else "plain"
    return cache / "datasets" / set_name / f"{version or code_version()}-{args_hash}"


def ensure_dataset(book: Book, lang: str, args: argparse.Namespace) -> dict[str, Any]:
    """The book's pages in ``lang`` copied into the cache and ingested there, unless that copy and these
    arguments were ingested by this code already. Returns the ingest's facts."""
    root = args.doc_roots.get((book.name, lang))
    src = book.page_files(lang, root)
    if not src:
        folder = root or book.languages[lang][1]
        raise SystemExit(f"{book.name} ({lang}): no pages in {folder} - apt-get install {book.languages[lang][0]}")
    corpus = copy_pages(src, args.cache / "corpora" / args.set / book.name / lang)
    digest = corpus_digest(corpus)
    ds_id = f"{book.name}-{lang}"
    facts_file = args.datasets_dir / f"{ds_id}.ingest.json"
    if facts_file.exists() and (args.datasets_dir / ds_id).is_dir():
        facts = json.loads(facts_file.read_text())
        if facts.get("corpus") == digest and facts.get("ingest_args") == args.ingest_arg:
            return {**facts, "reused": True}
    if args.datasets_of:
        raise SystemExit(
            f"{ds_id}: not in {args.datasets_dir} (--datasets-of {args.datasets_of} only searches what that code "
            "ingested); leave --datasets-of out to ingest it with this code"
        )
    note(f"ingesting {book.name} ({lang}): {len(src)} pages into {args.datasets_dir} ...")
    cmd = [sys.executable, "-m", "mcpower", "ingest", str(corpus), "--datasets-dir", str(args.datasets_dir)]
    cmd += ["--id", ds_id, "--full", "--json", "-q", *args.ingest_arg]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"ingest of {book.name} ({lang}) failed:\n{out.stderr[-2000:]}")
    report = json.loads(out.stdout)
    phases = report.get("phases", {})
    # The ingest's work (reading, chunking, analysing, embedding, writing), the model's loading left out.
    work = max(report["seconds"] - phases.get("model", 0.0) - phases.get("waiting", 0.0), 1e-9)
    facts = {
        "dataset": ds_id,
        "corpus": digest,
        "ingest_args": args.ingest_arg,
        "pages": len(src),
        "documents": report["documents"],
        "chunks": report["chunks"],
        "seconds": report["seconds"],
        "wall_seconds": round(wall, 1),
        "work_seconds": round(work, 2),
        "chunks_per_second": round(report["chunks"] / work, 1),
        "embed_chunks_per_second": report["chunks_per_second"],
        "phases": phases,
        "load_at_ingest": load_avg(),
    }
    facts_file.write_text(json.dumps(facts, indent=1) + "\n")
    note(f"  {ds_id}: {facts['chunks']} chunks in {facts['seconds']} s ({facts['chunks_per_second']} chunks/s)")
    return {**facts, "reused": False}


def dataset_models(root: Path, datasets: Any) -> list[str]:
    """The embedding models the manifests of these datasets name."""
    from mcpower.manifest import MANIFEST_NAME, read_manifest

    return sorted({read_manifest(root / f["dataset"] / MANIFEST_NAME).embedding.model for f in datasets})


def translation_facts(book: Book, lang: str, args: argparse.Namespace, qset: QuestionSet) -> dict[str, Any] | None:
    """How much of the book in ``lang`` is still English, and which judged sections are."""
    if lang == "en":
        return None
    english = book.page_files("en", args.doc_roots.get((book.name, "en")))
    translated = book.page_files(lang, args.doc_roots.get((book.name, lang)))
    return untranslated_share(english, translated, book, lang, qset.judged_keys()) if english else None


def chunk_coverage(registry: Any, ds_id: str, mapper: SectionMapper, qset: QuestionSet) -> dict[str, Any]:
    """Every stored chunk mapped to its section: how many map through an exact heading path, and the
    judged sections no chunk maps to (questions that cannot reach a full score)."""
    store = registry.store(ds_id)
    reached: set[str] = set()
    for doc, rows in store.iter_documents():
        for row in rows:
            reached.add(mapper.section(doc.path, row.heading_path, row.start_line, row.end_line))
    out = mapper.coverage()
    mapper.results = mapper.exact = mapper.unmapped = 0
    unreached = sorted(qset.judged_keys() - reached)
    return {"chunks": out["results"], "exact": out["exact"], "unmapped": out["unmapped"], "judged_unreached": unreached}


def run_row(
    registry: Any, ds_id: str, mapper: SectionMapper, queries: dict[str, str], qset: QuestionSet, mode: str
) -> dict[str, Any]:
    """Every question of a row asked in one mode; per-question sections and scores."""
    from mcpower.search import search

    per_q: dict[str, Any] = {}
    seconds: list[float] = []
    for qid, text in queries.items():
        started = time.perf_counter()
        response = search(registry, text, dataset=ds_id, top_k=TOP, mode=mode)
        seconds.append(time.perf_counter() - started)
        keys = [mapper.section(r.path, r.heading_path, r.lines.start, r.lines.end) for r in response.results]
        ranked = unique(keys)
        judged = qset.qrels[qid]
        per_q[qid] = {
            "ndcg@10": round(ndcg(ranked, judged), 4),
            "mrr@10": round(mrr(ranked, judged), 4),
            "empty": not response.results,
            "low_confidence": response.meta.low_confidence,
            "sections": ranked,
            "results": [f"{r.path}:{r.lines.start}-{r.lines.end} {r.heading_path}"[:160] for r in response.results],
        }
    return {"questions": per_q, "latency": lat_stats(seconds), "seconds_ms": [round(s * 1000, 2) for s in seconds]}


def earlier_rows(run: dict[str, Any]) -> dict[str, Any]:
    """An earlier run's rows: as this script writes them, or in the compact form of the baseline kept
    in benchmarks/data/languages (question -> [nDCG@10, MRR@10, no result, low confidence])."""
    if "rows" in run:
        return dict(run["rows"])
    fields = ("ndcg@10", "mrr@10", "empty", "low_confidence")
    return {
        key: {mode: {"questions": {q: dict(zip(fields, v)) for q, v in qs.items()}} for mode, qs in modes.items()}
        for key, modes in run["compact_rows"].items()
    }


def same_questions(base: dict[str, Any], now: dict[str, Any]) -> dict[str, Any]:
    """An earlier run's rows cut to the rows, modes and questions of this run, so that a --quick run
    or one book is compared with the same questions answered before."""
    out: dict[str, Any] = {}
    for key, modes in now.items():
        for mode, row in modes.items():
            old = base.get(key, {}).get(mode)
            if old is None:
                continue
            questions = {q: v for q, v in old["questions"].items() if q in row["questions"]}
            out.setdefault(key, {})[mode] = {**old, "questions": questions, "seconds_ms": []}
    return out


def rows_for(books: dict[str, Book], langs: set[str] | None, cross: str) -> list[tuple[str, str, str]]:
    """(book, question language, book language) pairs to run."""
    rows: list[tuple[str, str, str]] = []
    for name, book in books.items():
        have = [lang for lang in book.languages if langs is None or lang in langs]
        rows += [(name, lang, lang) for lang in have]
        if cross == "default" and "en" in book.languages:
            rows += [(name, "en", lang) for lang in have if lang != "en"]
            rows += [(name, lang, "en") for lang in have if lang != "en"]
        elif cross == "all":
            rows += [(name, q, b) for q in book.languages for b in have if q != b]
    return list(dict.fromkeys(rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", choices=("tuning", "heldout"), default="tuning", help="which judged sets (default tuning)")
    ap.add_argument("--books", nargs="+", help="books to run (default: all of the set)")
    ap.add_argument("--langs", nargs="+", help="book languages to run (default: every language of each book)")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES), help="search modes (default all three)")
    ap.add_argument("--cross", choices=("default", "none", "all"), default="default", help="cross-lingual rows")
    ap.add_argument("--ingest-arg", action="append", default=[], help="passed to `mcpower ingest` (repeatable)")
    ap.add_argument("--quick", type=int, metavar="N", help="only the first N questions of each book")
    ap.add_argument("--cache", type=Path, default=CACHE, help=f"page copies and datasets (default {CACHE})")
    ap.add_argument("--out", type=Path, help="JSON results (default benchmarks/results/languages[-heldout].json)")
    ap.add_argument(
        "--compare", type=Path, help="an earlier run's JSON (e.g. main's): nDCG@10 now, then, and the change"
    )
    ap.add_argument("--doc-root", action="append", default=[], help="BOOK:LANG=PATH, another copy of a book's pages")
    ap.add_argument(
        "--coverage-only", action="store_true", help="map each page's text to sections; no ingest, no search"
    )
    ap.add_argument("--confirm-heldout", action="store_true", help="run searches on the held-out set (integrator)")
    ap.add_argument(
        "--ingest-only", action="store_true", help="ingest what the rows need (cached as usual); search nothing"
    )
    ap.add_argument(
        "--datasets-of",
        metavar="CODE_VERSION",
        help="search the datasets an earlier code version ingested (a folder name's first part under the cache's "
        "datasets/SET/, e.g. 2191f843a1ad) with this code: a search-side change measured without re-ingesting; "
        "valid only while ingest-side code is unchanged since. Never ingests.",
    )
    args = ap.parse_args()
    if args.set == "heldout" and not (args.coverage_only or args.confirm_heldout or args.ingest_only):
        raise SystemExit(
            "the held-out set is run once, by the integrator: --coverage-only, --ingest-only, or --confirm-heldout"
        )
    folder = HELDOUT if args.set == "heldout" else TUNING
    books = load_books(folder)
    if args.books:
        unknown = set(args.books) - set(books)
        if unknown:
            raise SystemExit(f"unknown books {sorted(unknown)}; the set has {sorted(books)}")
        books = {n: b for n, b in books.items() if n in args.books}
    args.doc_roots = {}
    for item in args.doc_root:
        spec, sep, path = item.partition("=")
        book_name, colon, lang = spec.partition(":")
        if not (sep and colon and book_name in books and lang in books[book_name].languages):
            raise SystemExit(f"--doc-root wants BOOK:LANG=PATH with a book and language of the set, got {item!r}")
        args.doc_roots[(book_name, lang)] = Path(path)
    args.datasets_dir = ingest_dir(args.cache, args.set, args.ingest_arg, args.datasets_of)
    if args.datasets_of and not args.datasets_dir.is_dir():
        raise SystemExit(f"--datasets-of {args.datasets_of}: no datasets at {args.datasets_dir}")
    args.datasets_dir.mkdir(parents=True, exist_ok=True)
    try:
        qsets = {name: load_questions(folder, name) for name in books}
    except SetError as e:
        raise SystemExit(str(e)) from e
    if args.quick:
        for qs in qsets.values():
            keep = list(qs.queries["en"])[: args.quick]
            qs.queries = {lang: {q: t for q, t in qq.items() if q in keep} for lang, qq in qs.queries.items()}
            qs.qrels = {q: j for q, j in qs.qrels.items() if q in keep}
    rows = rows_for(books, set(args.langs) if args.langs else None, "none" if args.coverage_only else args.cross)
    run(args, books, qsets, rows)


def coverage_only(
    args: argparse.Namespace, books: dict[str, Book], qsets: dict[str, QuestionSet], rows: list[tuple[str, str, str]]
) -> None:
    """Every book's pages read by mcpower's reader and mapped to sections: no ingest, no search."""
    report: dict[str, Any] = {}
    failed = False
    for name, lang in dict.fromkeys((n, b) for n, _, b in rows):
        book = books[name]
        src = book.page_files(lang, args.doc_roots.get((name, lang)))
        corpus = copy_pages(src, args.cache / "corpora" / args.set / name / lang)
        pages = parse_book(book, lang, corpus)
        missing = missing_sections(qsets[name], pages)
        cov = reader_coverage(book, lang, corpus, pages, qsets[name])
        translation = translation_facts(book, lang, args, qsets[name])
        report[f"{name}|{lang}"] = {"pages": len(src), "missing": missing, **cov, "translation": translation}
        failed |= bool(missing or cov["judged_unreached"])
        left = f", {translation['share']:.1%} of its prose still English" if translation else ""
        print(
            f"{name} ({lang}): {len(src)} pages, {cov['lines']} lines, {cov['exact']:.1%} mapped by exact heading "
            f"path; judged sections missing: {missing or 'none'}; reached by no line: {cov['judged_unreached'] or 'none'}"
            f"{left}"
        )
    out = args.out or REPO / "benchmarks" / "results" / f"languages-coverage-{args.set}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"code": code_version(), "set": args.set, "coverage": report}, indent=1) + "\n")
    note(f"wrote {out}")
    if failed:
        raise SystemExit(1)


def run(
    args: argparse.Namespace, books: dict[str, Book], qsets: dict[str, QuestionSet], rows: list[tuple[str, str, str]]
) -> None:
    from mcpower.registry import Registry

    started = time.perf_counter()
    if args.coverage_only:
        coverage_only(args, books, qsets, rows)
        return
    datasets: dict[tuple[str, str], dict[str, Any]] = {}
    for name, _, blang in rows:
        if (name, blang) not in datasets:
            datasets[(name, blang)] = ensure_dataset(books[name], blang, args)
    if args.ingest_only:
        for facts in datasets.values():
            reused = "already there" if facts.get("reused") else f"{facts['seconds']:.0f} s"
            print(f"{facts['dataset']}: {facts['chunks']} chunks ({reused})")
        note(f"ingested into {args.datasets_dir}; nothing searched (--ingest-only)")
        return
    # The harness built these datasets itself, with the model its --ingest-arg named: it may load it.
    registry = Registry(args.datasets_dir, allowed_models=dataset_models(args.datasets_dir, datasets.values()))
    results: dict[str, Any] = {}
    try:
        mappers: dict[tuple[str, str], SectionMapper] = {}
        for (name, blang), facts in datasets.items():
            book = books[name]
            corpus = args.cache / "corpora" / args.set / name / blang
            pages = parse_book(book, blang, corpus)
            missing = missing_sections(qsets[name], pages)
            if missing:
                raise SystemExit(f"{name} ({blang}): judged sections not in the pages: {missing[:10]}")
            store = registry.store(facts["dataset"])

            def content(path: str, store: Any = store) -> str | None:
                doc = store.document(path)
                return doc.content if doc is not None else None

            mappers[(name, blang)] = SectionMapper(book, blang, pages, content)
            facts["translation"] = translation_facts(book, blang, args, qsets[name])
            facts["coverage"] = chunk_coverage(registry, facts["dataset"], mappers[(name, blang)], qsets[name])
            cov = facts["coverage"]
            note(
                f"{name} ({blang}): {cov['chunks']} chunks, {cov['exact']:.1%} mapped by exact heading path, "
                f"{cov['unmapped']} unmapped; judged sections no chunk maps to: {cov['judged_unreached'] or 'none'}"
            )
        for name, qlang, blang in rows:
            ds_id = datasets[(name, blang)]["dataset"]
            registry.embedder_for(registry.store(ds_id).info).embed_query("warm up")
            for mode in args.modes:
                note(f"{name}: {qlang} questions on the {blang} book, {mode} ...")
                queries = qsets[name].queries[qlang]
                row = run_row(registry, ds_id, mappers[(name, blang)], queries, qsets[name], mode)
                results.setdefault(f"{name}|{qlang}|{blang}", {})[mode] = row
    finally:
        registry.close()
    summary = summarize(results, qsets, {f"{n}|{lang}": f for (n, lang), f in datasets.items()}, args.modes)
    print(markdown_report(summary, args.modes, quick=bool(args.quick)))
    if args.compare:
        base = json.loads(args.compare.read_text(encoding="utf-8"))
        same = same_questions(earlier_rows(base), results)
        base_summary = summarize(
            same, qsets, base["datasets"], [m for m in args.modes if any(m in r for r in same.values())]
        )
        print("\n" + compare_report(summary, base_summary, args.modes, f"{args.compare} ({base.get('code')})"))
    out = args.out or REPO / "benchmarks" / "results" / f"languages{'-heldout' if args.set == 'heldout' else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    document = {
        "environment": environment(),
        "load": load_avg(),
        "code": code_version(),
        "datasets_of": args.datasets_of,
        "set": args.set,
        "ingest_args": args.ingest_arg,
        "datasets_dir": str(args.datasets_dir),
        "quick": args.quick,
        "seconds": round(time.perf_counter() - started, 1),
        "datasets": {f"{n}|{lang}": f for (n, lang), f in datasets.items()},
        "summary": summary,
        "rows": results,
    }
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False, default=str) + "\n")
    note(f"wrote {out}")


if __name__ == "__main__":
    main()
