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
            "p95_ms": round(pct(ms, 95), 1) if ms else None,
        }
        out["questions"] = len(qs)
    return out


def answered_in_english(qset: QuestionSet, facts: dict[str, Any]) -> set[str]:
    """The questions whose answering sections (grade 2) are all still English in this translation."""
    english = set((facts.get("translation") or {}).get("judged_sections_in_english", ()))
    return {q for q, judged in qset.qrels.items() if all(k in english for k, g in judged.items() if g >= 2)}


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
        in_english = sum(len(answered_in_english(qsets[k.split("|")[0]], f)) for k, f in zip(keys, facts))
        chunks, seconds = sum(f["chunks"] for f in facts), sum(f["work_seconds"] for f in facts)
        languages.append(
            {
                "lang": lang,
                "books": len(keys),
                **pooled([(results[k], None) for k in keys], modes),
                "chunks": chunks,
                "chunks_per_second": round(chunks / seconds, 1) if seconds else None,
                "answer_in_english": in_english,
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
                "chunks": f.get("chunks"),
                "chunks_per_second": f.get("chunks_per_second"),
                "seconds": f.get("seconds"),
                "work_seconds": f.get("work_seconds"),
                "coverage": f.get("coverage"),
                "translation": f.get("translation"),
            }
            for k, f in datasets.items()
        },
    }


def _f(v: Any, digits: int = 3) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if isinstance(v, float) else str(v)


def _name(lang: str) -> str:
    return LANGUAGE_NAMES.get(lang, lang)


def _order(lang: str) -> int:
    return list(LANGUAGE_NAMES).index(lang) if lang in LANGUAGE_NAMES else len(LANGUAGE_NAMES)


def _cells(row: dict[str, Any], modes: list[str]) -> list[str]:
    """questions, nDCG@10 per mode, MRR@10, no result per mode, low confidence, p95 (first mode)."""
    first = row.get(modes[0], {})
    return [
        str(row.get("questions", 0)),
        *[_f(row.get(m, {}).get("ndcg@10")) for m in modes],
        _f(first.get("mrr@10")),
        "/".join(_f(row.get(m, {}).get("no_result")) for m in modes),
        _f(first.get("low_confidence"), 2),
        _f(first.get("p95_ms"), 1),
    ]


def markdown_report(summary: dict[str, Any], modes: list[str], quick: bool = False) -> str:
    """The tables of docs/benchmarks.md ("Languages"): per language (and the CJK questions without a
    Latin letter, and the cross-lingual pairs), then per book."""
    first = modes[0]
    lines = (
        ["**QUICK run (a few questions per book): for checking the harness, not for quoting.**", ""] if quick else []
    )
    head = ["questions → book", "questions", *[f"nDCG@10 {m}" for m in modes], f"MRR@10 {first}"]
    head += [f"no result ({'/'.join(m[0] for m in modes)})", f"low conf {first}", f"p95 ms {first}"]
    head += ["chunks/s", "answer still English"]
    lines += ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in sorted(summary["languages"], key=lambda r: _order(r["lang"])):
        name = _name(r["lang"])
        english = str(r["answer_in_english"]) if r["lang"] != "en" else ""
        lines.append(
            "| " + " | ".join([f"{name} → {name}", *_cells(r, modes), _f(r["chunks_per_second"], 1), english]) + " |"
        )
    c = summary.get("cjk_no_latin") or {}
    if c:
        lines.append(
            "| " + " | ".join(["Japanese/Chinese questions with no Latin letter", *_cells(c, modes), "", ""]) + " |"
        )
    for r in sorted(
        summary["cross"],
        key=lambda r: (r["questions_lang"] != "en", _order(r["questions_lang"]), _order(r["book_lang"])),
    ):
        label = f"{_name(r['questions_lang'])} → {_name(r['book_lang'])} book"
        lines.append("| " + " | ".join([label, *_cells(r, modes), "", ""]) + " |")
    head = [
        "book",
        "questions → book",
        *[f"nDCG@10 {m}" for m in modes],
        "chunks",
        "chunks/s",
        "English left",
        "exact map",
    ]
    lines += ["", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    rows = sorted(
        summary["rows"],
        key=lambda r: (
            r["book"],
            r["questions_lang"] != r["book_lang"],
            _order(r["book_lang"]),
            _order(r["questions_lang"]),
        ),
    )
    for r in rows:
        d = summary["datasets"].get(f"{r['book']}|{r['book_lang']}", {})
        cov = (d.get("coverage") or {}).get("exact")
        left = (d.get("translation") or {}).get("share")
        cells = [
            r["book"],
            f"{r['questions_lang']} → {r['book_lang']}",
            *[_f(r.get(m, {}).get("ndcg@10")) for m in modes],
        ]
        cells += [str(d.get("chunks", "-")), _f(d.get("chunks_per_second"), 1)]
        cells += [f"{left:.1%}" if isinstance(left, float) else "", f"{cov:.1%}" if isinstance(cov, float) else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _labelled(summary: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every pooled row of a summary under the label its table gives it."""
    out = {f"{_name(r['lang'])} → {_name(r['lang'])}": r for r in summary.get("languages", [])}
    if summary.get("cjk_no_latin"):
        out["Japanese/Chinese questions with no Latin letter"] = summary["cjk_no_latin"]
    for r in summary.get("cross", []):
        out[f"{_name(r['questions_lang'])} → {_name(r['book_lang'])} book"] = r
    for r in summary.get("rows", []):
        out[f"{r['book']}: {r['questions_lang']} → {r['book_lang']}"] = r
    return out


def compare_report(summary: dict[str, Any], base: dict[str, Any], modes: list[str], base_name: str) -> str:
    """nDCG@10 per mode against an earlier run's summary, row by row: the rows both runs have, and
    the questions each pooled (the same, when ``base`` was summarized from languages.same_questions)."""
    now, before = _labelled(summary), _labelled(base)
    head = ["row", "questions", *[f"{m} now / before / Δ" for m in modes]]
    lines = [f"Against {base_name}:", "", "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, row in now.items():
        old = before.get(label)
        if old is None:
            continue
        cells = [label, f"{row.get('questions', 0)} / {old.get('questions', 0)}"]
        for m in modes:
            a, b = row.get(m, {}).get("ndcg@10"), old.get(m, {}).get("ndcg@10")
            delta = f"{a - b:+.3f}" if isinstance(a, float) and isinstance(b, float) else "-"
            cells.append(f"{_f(a)} / {_f(b)} / {delta}")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
