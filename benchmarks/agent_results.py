"""Results an agent can use (issue 20): what the top 5 of a search holds, per corpus.

    python benchmarks/agent_results.py [--sets NAME ...] [--datasets-dir DIR] [--out FILE]
                                       [--corpora DIR] [--doc-root NAME=PATH ...] [--quick]

Corpora (``--sets``, all by default):

    flask, jinja, click   Debian's built HTML documentation (python-flask-doc, python-jinja2-doc,
                          python-click-doc under /usr/share/doc/<package>/html; not copied into the
                          repository), with the judged questions of benchmarks/data/<set>_questions.jsonl
                          and <set>_qrels.tsv (benchmarks/data/README.md says how they were written)
    fastapi               the FastAPI docs of ``--corpora``/docs-fastapi with benchmarks/data/fastapi_*
    scifact, cranfield    the judged collections of ``--corpora``, ingested as benchmarks/run.py does

For each corpus it reports, with the real packaged model:

    ndcg@10, recall@10, mrr@10   hybrid, computed by `mcpower eval`'s own functions (each document once, at
                                 its best chunk, depth 300)
    distinct@5                   distinct documents among the top 5 results of `mcpower.search.search` (mean)
    recall@5                     of the relevant documents, the share among those distinct top-5 documents
    canonical@5                  share of questions whose best-graded page is in the top 5
    changelog@5                  share of the questions that are not about a version or a change with a
                                 changelog / release-notes / porting-guide page (CHANGELOG_PATH) in the top 5
    near_empty                   share of chunks with fewer than NEAR_EMPTY_WORDS word tokens once the
                                 heading lines are left out
    no_answer_auroc              with questions that have no answer in the set: how well the best score
                                 separates answerable from unanswerable questions (1.0 perfect, 0.5 chance)
    chunks, documents, ingest_seconds

A Sphinx page and its ``_sources/`` copy count as one document (``canonical_path``): the judgments name
the page, and a top 5 holding both holds the same answer twice.

Datasets are ingested into ``--datasets-dir`` once per version of the mcpower package (the default
folder is named after the git tree of ``mcpower/``, so a branch with other chunking or ingest gets
its own datasets) and reused while their manifest matches. Prints a table; writes JSON to ``--out``
(default benchmarks/results/agent_results.json). ``--quick``: the first QUICK_QUERIES questions of each
corpus and SciFact / Cranfield as run.py's --quick subsets; for checking the harness, not for quoting.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from suite.datasets import EVAL_DEPTH, collection_dataset, ensure_dataset
from suite.report import REPO, environment, note, table

if TYPE_CHECKING:
    from mcpower.registry import Registry

DATA = Path(__file__).resolve().parent / "data"
DEFAULT_CORPORA = Path(os.environ.get("MCPOWER_BENCH_CORPORA", "/work/shared/bench"))
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower" / "agent-results"
DOC_SETS = {  # set -> where Debian installs its built HTML
    "flask": Path("/usr/share/doc/python-flask-doc/html"),
    "jinja": Path("/usr/share/doc/python-jinja2-doc/html"),
    "click": Path("/usr/share/doc/python-click-doc/html"),
}
SETS = (*DOC_SETS, "fastapi", "scifact", "cranfield")
TOP = 5  # what an agent reads: the tool's default top k
QUICK_QUERIES = 15
# A chunk with fewer word tokens than this, heading lines left out, says nothing a search can use
# (a heading over a label, a directive name): the same threshold and word pattern as the chunker's
# MIN_SECTION_WORDS (issue 20 item 2).
NEAR_EMPTY_WORDS = 8
_WORD = re.compile(r"\w+")
_ATTRIBUTES = re.compile(r"\s*\{[^{}]*\}\s*$")
# Pages that record changes rather than document the feature: changelogs, release notes, news,
# porting / upgrade / migration guides, by file or folder name.
CHANGELOG_PATH = re.compile(
    r"(^|/)(changes|changelog|history|news|release[-_ ]?notes|releases?|whatsnew|what-?s-?new|upgrad\w*|"
    r"migrat\w*|porting\w*)(/|\.|$)",
    re.IGNORECASE,
)
# A question about a version or a change, when its file marks none ("kind": "version"); "change" alone
# is left out: "how do I change the title" is not about a change.
VERSION_QUESTION = re.compile(
    r"\b(version|versions|changed|changes|changelog|release[sd]?|new in|deprecat\w*|removed|upgrad\w*|"
    r"migrat\w*|v?\d+\.\d+(\.\d+)?)\b",
    re.IGNORECASE,
)
_SOURCES = re.compile(r"(^|/)_sources/(.+?)(\.rst|\.md|\.ipynb)?\.txt$")


def canonical_path(path: str) -> str:
    """The page a document stands for: a Sphinx ``_sources/x.rst.txt`` copy is ``x.html``."""
    m = _SOURCES.search(path)
    return f"{path[: m.start()]}{m.group(1)}{m.group(2)}.html" if m else path


def evaluate_pages(
    registry: Any, ds_id: str, queries: dict[str, str], qrels: dict[str, dict[str, float]], mode: str
) -> Any:
    """``mcpower eval``'s report of a dataset in ``mode`` (depth EVAL_DEPTH), each result as the page
    it stands for (canonical_path), as this file's sets are judged."""
    from mcpower.evaluation import evaluate
    from mcpower.search import rank_paths

    def ranked(text: str, k: int) -> list[str]:
        return [canonical_path(p) for p in rank_paths(registry, text, ds_id, k, mode)]

    return evaluate(ranked, queries, qrels, EVAL_DEPTH, ds_id, mode)


def judged_key(path: str, judged: dict[str, float]) -> str:
    """The id a result goes by in ``judged`` (evaluation.doc_keys), or its canonical path."""
    from mcpower.evaluation import doc_keys

    canon = canonical_path(path)
    return next((k for k in doc_keys(canon) if k in judged), canon)


def body_words(text: str, heading_path: str) -> int:
    """Word tokens of a chunk's text, heading lines (a line that is one of its headings) left out."""
    headings = {_norm(h) for h in heading_path.split(" > ") if h.strip()}
    return sum(len(_WORD.findall(line)) for line in text.splitlines() if _norm(line) not in headings)


def _norm(line: str) -> str:
    """A line's words, lower-cased, without a Markdown heading's attribute list (``{ #anchor }``)."""
    return " ".join(_WORD.findall(_ATTRIBUTES.sub("", line).lower()))


def auroc(positive: list[float], negative: list[float]) -> float | None:
    """P(a random positive scores above a random negative), ties counting half (Mann-Whitney U)."""
    if not positive or not negative:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in positive for n in negative)
    return round(wins / (len(positive) * len(negative)), 4)


def load_set(name: str) -> tuple[dict[str, str], dict[str, dict[str, float]], set[str]]:
    """Questions, judgments, and the ids of the questions about a version or a change."""
    from mcpower.evaluation import load_qrels, load_queries

    qpath = DATA / f"{name}_questions.jsonl"
    queries, qrels = load_queries(qpath), load_qrels(DATA / f"{name}_qrels.tsv")
    kinds = {}
    for line in qpath.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            kinds[str(row.get("_id", row.get("id")))] = row.get("kind")
    if any(kinds.values()):  # the file marks its questions: trust it
        version = {q for q in queries if kinds.get(q) == "version"}
    else:
        version = {q for q, text in queries.items() if VERSION_QUESTION.search(text)}
    return queries, qrels, version


def dataset_for(
    name: str, args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, str], dict[str, dict[str, float]], set[str]]:
    if name in ("scifact", "cranfield"):
        info, queries, qrels = collection_dataset(args.corpora, name, args.datasets_dir, args.quick)
        return info, queries, qrels, set()
    queries, qrels, version = load_set(name)
    if args.quick:
        queries = dict(list(queries.items())[:QUICK_QUERIES])
        qrels = {q: j for q, j in qrels.items() if q in queries}
    corpus = args.corpora / "docs-fastapi" / "corpus" if name == "fastapi" else args.doc_roots[name]
    if not corpus.is_dir():
        raise SystemExit(f"{name}: no folder {corpus} (install the Debian package, or give --doc-root {name}=PATH)")
    info = ensure_dataset(corpus, args.datasets_dir, f"{name}-docs")
    info["corpus"] = str(corpus)
    return info, queries, qrels, version


def ingest_facts(root: Path, info: dict[str, Any]) -> dict[str, Any]:
    """The ingest time of a dataset built now, or the one recorded when it was built."""
    record = root / f"{info['id']}.ingest.json"
    if not info.get("reused"):
        record.write_text(json.dumps({k: info.get(k) for k in ("ingest_seconds", "chunks", "documents")}))
    elif record.exists():
        info = {**json.loads(record.read_text()), **info}
    return info


def chunk_facts(registry: Registry, ds_id: str) -> dict[str, Any]:
    """Chunks, near-empty chunks and changelog pages of a dataset."""
    store = registry.store(ds_id)
    chunks = near = 0
    changelogs: set[str] = set()
    for doc, rows in store.iter_documents():
        if CHANGELOG_PATH.search(canonical_path(doc.path)):
            changelogs.add(canonical_path(doc.path))
        for row in rows:
            chunks += 1
            near += body_words(row.text, row.heading_path) < NEAR_EMPTY_WORDS
    return {
        "chunks_counted": chunks,
        "near_empty": round(near / chunks, 4) if chunks else None,
        "near_empty_chunks": near,
        "changelog_documents": sorted(changelogs)[:20],
    }


def top_facts(
    registry: Registry, ds_id: str, queries: dict[str, str], qrels: dict[str, dict[str, float]], version: set[str]
) -> dict[str, Any]:
    """What the top 5 of `mcpower.search.search` holds, over every question asked."""
    from mcpower.search import search

    distinct: list[int] = []
    recall: list[float] = []
    canonical: list[float] = []
    changelog: list[float] = []
    answered: list[float] = []
    unanswered: list[float] = []
    seconds: list[float] = []
    tops: dict[str, list[str]] = {}  # question -> its top 5 (paths as returned), to compare runs
    for qid, text in queries.items():
        judged = qrels.get(qid, {})
        started = time.perf_counter()
        response = search(registry, text, dataset=ds_id, top_k=TOP)
        seconds.append(time.perf_counter() - started)
        docs = _unique(judged_key(r.path, judged) for r in response.results)
        distinct.append(len(docs))
        tops[qid] = [f"{r.path}:{r.lines.start}-{r.lines.end}" for r in response.results]
        relevant = {d for d, g in judged.items() if g > 0}
        best = response.results[0].score if response.results else 0.0
        if relevant:
            answered.append(best)
            recall.append(len(relevant & set(docs)) / len(relevant))
            top_grade = max(judged.values())
            canonical.append(float(any(judged.get(d) == top_grade for d in docs)))
        else:
            unanswered.append(best)
        if qid not in version:
            changelog.append(float(any(CHANGELOG_PATH.search(canonical_path(r.path)) for r in response.results)))
    return {
        "questions": len(queries),
        "answerable": len(answered),
        "no_answer": len(unanswered),
        "version_questions": len(version & set(queries)),
        "distinct@5": _mean(distinct),
        "recall@5": _mean(recall),
        "canonical@5": _mean(canonical),
        "changelog@5": _mean(changelog),
        "no_answer_auroc": auroc(answered, unanswered),
        "search_ms_mean": round(1000 * sum(seconds) / max(len(seconds), 1), 1),
        "top5": tops,
    }


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _mean(values: list[float] | list[int]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def run_corpus(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from mcpower.registry import Registry

    info, queries, qrels, version = dataset_for(name, args)
    info = ingest_facts(args.datasets_dir, info)
    ds_id = info["id"]
    registry = Registry(args.datasets_dir)
    try:
        registry.embedder_for(registry.store(ds_id).info).embed_query("warm up")
        note(f"{name}: {len(queries)} questions, {len(qrels)} judged ...")
        report = evaluate_pages(registry, ds_id, queries, qrels, "hybrid")
        result: dict[str, Any] = {
            "dataset": info,
            **{m: round(report.metrics[m], 4) for m in ("ndcg@10", "recall@10", "mrr@10")},
            "judged_queries": report.queries,
            **top_facts(registry, ds_id, queries, qrels, version),
            **chunk_facts(registry, ds_id),
        }
    finally:
        registry.close()
    return result


def package_tree() -> str:
    """The git tree of mcpower/ (changes only when the package does), or 'worktree' outside git."""
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "HEAD:mcpower"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return "worktree"
    return out.stdout.strip()[:12] if out.returncode == 0 else "worktree"


def parse_doc_root(text: str) -> tuple[str, Path]:
    name, sep, path = text.partition("=")
    if not sep or name not in DOC_SETS:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH with NAME one of {', '.join(DOC_SETS)}, got {text!r}")
    return name, Path(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", nargs="+", choices=SETS, default=list(SETS), help="corpora to run (default: all)")
    ap.add_argument("--corpora", type=Path, default=DEFAULT_CORPORA, help="the bench collections (shared/bench)")
    ap.add_argument(
        "--doc-root", type=parse_doc_root, action="append", default=[], help="NAME=PATH: a doc set's HTML folder"
    )
    ap.add_argument(
        "--datasets-dir", type=Path, help=f"where datasets are ingested and reused (default {CACHE}/<mcpower tree>)"
    )
    ap.add_argument("--out", type=Path, help="JSON results (default benchmarks/results/agent_results.json)")
    ap.add_argument("--quick", action="store_true", help="fewer questions, SciFact/Cranfield subsets")
    args = ap.parse_args()
    args.doc_roots = {**DOC_SETS, **dict(args.doc_root)}
    args.datasets_dir = args.datasets_dir or CACHE / package_tree()
    args.datasets_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    corpora: dict[str, Any] = {}
    for name in args.sets:
        corpora[name] = run_corpus(name, args)
    rows = [
        [
            name,
            r["ndcg@10"],
            r["distinct@5"],
            r["recall@5"],
            r["canonical@5"],
            r["changelog@5"] if r["changelog_documents"] else None,
            r["near_empty"],
            r["no_answer_auroc"],
            r["dataset"]["chunks"],
            r["dataset"].get("ingest_seconds"),
        ]
        for name, r in corpora.items()
    ]
    table(
        f"results an agent can use: hybrid, top {TOP}{' (QUICK: not for quoting)' if args.quick else ''}",
        ["corpus", "nDCG@10", "distinct@5", "R@5", "canon@5", "chlog@5", "near-empty", "AUROC", "chunks", "ingest s"],
        rows,
    )
    result = {
        "environment": environment(),
        "datasets_dir": str(args.datasets_dir),
        "quick": args.quick,
        "top": TOP,
        "near_empty_words": NEAR_EMPTY_WORDS,
        "seconds": round(time.perf_counter() - started, 1),
        "corpora": corpora,
    }
    out = args.out or REPO / "benchmarks" / "results" / "agent_results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    note(f"wrote {out}")


if __name__ == "__main__":
    main()
