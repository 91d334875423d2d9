"""benchmarks/languages.py's figures: per-question results pooled into rows, and the Markdown tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.langsets import CJK, QuestionSet
from suite.report import pct

LANGUAGE_NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "ja": "Japanese",
    "ko": "Korean",
    "ru": "Russian",
    "zh-cn": "Chinese",
    "zh-tw": "Chinese (trad.)",
}


def pooled(cells: Sequence[tuple[dict[str, Any], set[str] | None]], modes: list[str]) -> dict[str, Any]:
    """The questions of several (row result, ids to keep) cells as one row: per mode, the mean nDCG@10
    and MRR@10, the questions with no result, the low-confidence share and the search p95."""
    out: dict[str, Any] = {}
    for mode in modes:
        qs = [
            q
            for row, keep in cells
            if mode in row
            for qid, q in row[mode]["questions"].items()
            if keep is None or qid in keep
        ]
        ms = [t for row, _ in cells if mode in row for t in row[mode].get("seconds_ms", [])]
        if not qs:
            continue
        out[mode] = {
            "ndcg@10": round(sum(q["ndcg@10"] for q in qs) / len(qs), 4),
            "mrr@10": round(sum(q["mrr@10"] for q in qs) / len(qs), 4),
            "no_result": sum(q["empty"] for q in qs),
            "low_confidence": round(sum(q["low_confidence"] for q in qs) / len(qs), 4),
            "p95_ms": round(pct(ms, 95), 1) if ms else max(row[mode]["latency"]["p95_ms"] for row, _ in cells),
        }
        out["questions"] = len(qs)
    return out


def summarize(
    results: dict[str, Any], qsets: dict[str, QuestionSet], datasets: dict[str, dict[str, Any]], modes: list[str]
) -> dict[str, Any]:
    """Rows per book and language pair; per language; the CJK questions without a Latin letter; the
    cross-lingual pairs; each dataset's ingest speed and section-mapping coverage."""
    rows = []
    by_lang: dict[str, list[str]] = {}
    by_pair: dict[tuple[str, str], list[str]] = {}
    for key in results:
        book, qlang, blang = key.split("|")
        rows.append(
            {"book": book, "questions_lang": qlang, "book_lang": blang, **pooled([(results[key], None)], modes)}
        )
        (by_lang.setdefault(qlang, []) if qlang == blang else by_pair.setdefault((qlang, blang), [])).append(key)
    languages = []
    for lang, keys in by_lang.items():
        facts = [datasets[f"{k.split('|')[0]}|{lang}"] for k in keys]
        chunks, seconds = sum(f["chunks"] for f in facts), sum(f["work_seconds"] for f in facts)
        languages.append(
            {
                "lang": lang,
                "books": len(keys),
                **pooled([(results[k], None) for k in keys], modes),
                "chunks": chunks,
                "chunks_per_second": round(chunks / seconds, 1) if seconds else None,
            }
        )
    cjk_cells = [
        (results[k], qsets[k.split("|")[0]].no_latin.get(lang, set()))
        for lang, keys in by_lang.items()
        if lang in CJK
        for k in keys
    ]
    cross = [
        {"questions_lang": q, "book_lang": b, "books": len(keys), **pooled([(results[k], None) for k in keys], modes)}
        for (q, b), keys in by_pair.items()
    ]
    return {
        "rows": rows,
        "languages": languages,
        "cjk_no_latin": pooled(cjk_cells, modes) if cjk_cells else {},
        "cross": cross,
        "datasets": {
            k: {
                "chunks": f["chunks"],
                "chunks_per_second": f["chunks_per_second"],
                "seconds": f["seconds"],
                "work_seconds": f["work_seconds"],
                "coverage": f.get("coverage"),
            }
            for k, f in datasets.items()
        },
    }


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _modes(row: dict[str, Any], modes: list[str], field: str, digits: int = 3) -> list[str]:
    return [_f(row.get(m, {}).get(field), digits) for m in modes]


def _name(lang: str) -> str:
    return LANGUAGE_NAMES.get(lang, lang)


def markdown_report(summary: dict[str, Any], modes: list[str], quick: bool = False) -> str:
    """The tables of docs/benchmarks.md ("Languages")."""
    first = modes[0]
    lines = []
    if quick:
        lines.append("**QUICK run (a few questions per book): for checking the harness, not for quoting.**\n")
    head = ["questions → book", "questions", *[f"nDCG@10 {m}" for m in modes], f"MRR@10 {first}"]
    head += [f"no result ({'/'.join(m[0] for m in modes)})", f"low conf {first}", "chunks/s", f"p95 ms {first}"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in sorted(
        summary["languages"], key=lambda r: list(LANGUAGE_NAMES).index(r["lang"]) if r["lang"] in LANGUAGE_NAMES else 99
    ):
        name = _name(r["lang"])
        cells = [f"{name} → {name}", str(r.get("questions", 0)), *_modes(r, modes, "ndcg@10")]
        cells += [_f(r.get(first, {}).get("mrr@10")), "/".join(_modes(r, modes, "no_result"))]
        cells += [_f(r.get(first, {}).get("low_confidence"), 2), _f(r["chunks_per_second"], 1)]
        cells += [_f(r.get(first, {}).get("p95_ms"), 1)]
        lines.append("| " + " | ".join(cells) + " |")
    c = summary.get("cjk_no_latin") or {}
    if c:
        cells = [
            "Japanese/Chinese questions with no Latin letter",
            str(c.get("questions", 0)),
            *_modes(c, modes, "ndcg@10"),
        ]
        cells += [_f(c.get(first, {}).get("mrr@10")), "/".join(_modes(c, modes, "no_result"))]
        cells += [_f(c.get(first, {}).get("low_confidence"), 2), "", _f(c.get(first, {}).get("p95_ms"), 1)]
        lines.append("| " + " | ".join(cells) + " |")
    for r in sorted(summary["cross"], key=lambda r: (r["questions_lang"] != "en", r["questions_lang"], r["book_lang"])):
        cells = [f"{_name(r['questions_lang'])} → {_name(r['book_lang'])} book", str(r.get("questions", 0))]
        cells += [*_modes(r, modes, "ndcg@10"), _f(r.get(first, {}).get("mrr@10"))]
        cells += ["/".join(_modes(r, modes, "no_result")), _f(r.get(first, {}).get("low_confidence"), 2), ""]
        cells += [_f(r.get(first, {}).get("p95_ms"), 1)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "| book | questions → book | questions | "
        + " | ".join(f"nDCG@10 {m}" for m in modes)
        + " | chunks | chunks/s | exact map |",
    ]
    lines.append("|" + " --- |" * (6 + len(modes)))
    for r in sorted(
        summary["rows"],
        key=lambda r: (r["book"], r["questions_lang"] != r["book_lang"], r["book_lang"], r["questions_lang"]),
    ):
        d = summary["datasets"].get(f"{r['book']}|{r['book_lang']}", {})
        cov = (d.get("coverage") or {}).get("exact")
        cells = [r["book"], f"{r['questions_lang']} → {r['book_lang']}", str(r.get("questions", 0))]
        cells += [*_modes(r, modes, "ndcg@10"), str(d.get("chunks", "-")), _f(d.get("chunks_per_second"), 1)]
        cells += [f"{cov:.1%}" if isinstance(cov, float) else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
