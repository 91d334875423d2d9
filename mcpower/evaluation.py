"""Retrieval evaluation: nDCG@10, Recall@10, Recall@100 and MRR@10 of a dataset against judgments.

Input files follow BEIR: queries as JSON lines with `_id` (or `id`) and `text`; judgments as TSV
`query-id corpus-id score` with an optional header. A result's document id is its path relative to
the dataset root, matched against judged ids by full relative path, path without suffix, or file
stem. Each document counts once, at the rank of its best chunk. Gains are the judged scores
(linear, as trec_eval and BEIR compute nDCG); recall counts documents with score > 0.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mcpower.errors import McpowerError
from mcpower.ranking import MAX_TOP_K

METRICS = ("ndcg@10", "recall@10", "recall@100", "mrr@10")


@dataclass
class EvalReport:
    dataset: str
    mode: str
    queries: int
    metrics: dict[str, float]
    per_query: dict[str, dict[str, float]] = field(repr=False)
    seconds: float
    skipped_queries: int = 0  # queries with no judged relevant document


def load_queries(path: Path) -> dict[str, str]:
    """Query id -> text from a JSON-lines file.

    Raises:
        McpowerError: unreadable file or a line without an id and text.
    """
    out: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise McpowerError(f"{path}: cannot read queries ({e})") from e
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            qid, text = str(row.get("_id", row.get("id"))), row["text"]
        except (ValueError, KeyError, AttributeError) as e:
            raise McpowerError(f"{path}:{n}: expected a JSON object with '_id' (or 'id') and 'text'") from e
        if row.get("_id", row.get("id")) is None or not isinstance(text, str):
            raise McpowerError(f"{path}:{n}: expected a JSON object with '_id' (or 'id') and 'text'")
        out[qid] = text
    return out


def load_qrels(path: Path) -> dict[str, dict[str, float]]:
    """Query id -> {document id: relevance} from a TSV file (header optional).

    Raises:
        McpowerError: unreadable file or a malformed line.
    """
    out: dict[str, dict[str, float]] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise McpowerError(f"{path}: cannot read judgments ({e})") from e
    for n, line in enumerate(lines, 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) == 4:  # TREC format: qid 0 docid rel
            parts = [parts[0], parts[2], parts[3]]
        try:
            qid, doc, rel = parts[0], parts[1], float(parts[2])
        except (IndexError, ValueError) as e:
            if n == 1:
                continue  # header
            raise McpowerError(f"{path}:{n}: expected 'query-id<TAB>corpus-id<TAB>score'") from e
        out.setdefault(qid, {})[doc] = rel
    return out


def doc_keys(path: str) -> tuple[str, ...]:
    """The ids a judged document may go by: relative path, path without suffix, file stem."""
    p = PurePosixPath(path)
    return (path, str(p.with_suffix("")), p.stem)


def missing_documents(qrels: dict[str, dict[str, float]], paths: list[str]) -> tuple[list[str], int]:
    """The relevant judged document ids no document of ``paths`` goes by (doc_keys), sorted, and how
    many relevant judged ids there are."""
    known = {key for path in paths for key in doc_keys(path)}
    relevant = {doc for judged in qrels.values() for doc, gain in judged.items() if gain > 0}
    return sorted(relevant - known), len(relevant)


def ndcg_at(ranked: list[str], judged: dict[str, float], k: int) -> float:
    dcg = sum(judged.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at(ranked: list[str], judged: dict[str, float], k: int) -> float:
    relevant = {d for d, g in judged.items() if g > 0}
    return len(relevant & set(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: list[str], judged: dict[str, float], k: int) -> float:
    for i, d in enumerate(ranked[:k]):
        if judged.get(d, 0.0) > 0:
            return 1.0 / (i + 1)
    return 0.0


def score_run(ranked: list[str], judged: dict[str, float]) -> dict[str, float]:
    return {
        "ndcg@10": ndcg_at(ranked, judged, 10),
        "recall@10": recall_at(ranked, judged, 10),
        "recall@100": recall_at(ranked, judged, 100),
        "mrr@10": mrr_at(ranked, judged, 10),
    }


SearchFn = Callable[[str, int], list[str]]  # (query, k) -> result paths, best first (chunks may repeat a doc)


def evaluate(
    search: SearchFn,
    queries: dict[str, str],
    qrels: dict[str, dict[str, float]],
    k: int = MAX_TOP_K,
    dataset: str = "",
    mode: str = "",
) -> EvalReport:
    """Run every judged query through ``search`` and average the metrics."""
    started = time.perf_counter()
    per_query: dict[str, dict[str, float]] = {}
    skipped = 0
    for qid, judged in qrels.items():
        if qid not in queries or not any(g > 0 for g in judged.values()):
            skipped += 1
            continue
        ranked: list[str] = []
        seen: set[str] = set()
        for path in search(queries[qid], k):
            doc = next((key for key in doc_keys(path) if key in judged), doc_keys(path)[-1])
            if doc not in seen:  # a document counts once, at its best chunk
                seen.add(doc)
                ranked.append(doc)
        per_query[qid] = score_run(ranked, judged)
    n = len(per_query)
    metrics = {m: (sum(q[m] for q in per_query.values()) / n if n else 0.0) for m in METRICS}
    return EvalReport(dataset, mode, n, metrics, per_query, time.perf_counter() - started, skipped)
