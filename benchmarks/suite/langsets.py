"""The judged multilingual sets (benchmarks/data/languages/, benchmarks/data/heldout/): books, questions,
judgments, the copy of a book's pages that is ingested, and the scores of a ranking of sections.

A set is a folder holding ``books.json`` (which Debian package installs each language of each book,
where, and which of its files are the book's pages) and one folder per book with
``questions.<lang>.jsonl`` (BEIR queries: ``_id``, ``text``, ``kind`` "keyword" or "sentence", and
``no_latin`` on Chinese and Japanese questions without a Latin letter) and ``qrels.tsv``
(``query-id``, ``corpus-id``, ``score``; the corpus id is a section, ``page#anchor``, the same in
every language). benchmarks/data/README.md says how they were written.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.book_sections import PageSections, line_sections, majority, norm_title, parse_page

DATA = Path(__file__).resolve().parents[1] / "data"
TUNING = DATA / "languages"
HELDOUT = DATA / "heldout"
CJK = ("ja", "zh-cn", "zh-tw")  # the languages whose questions are marked no_latin
LATIN = re.compile(r"[A-Za-z]")
TOP = 10  # what nDCG@10 and MRR@10 look at: the first 10 results a search returns
PROSE_WORDS = 5  # an English paragraph this long left in a translation is untranslated prose


class SetError(ValueError):
    """A question set that contradicts itself (ids, marks, judged sections): fix the files."""


@dataclass(frozen=True)
class Book:
    name: str
    title: str
    version: str
    licence: str
    pages: str  # glob of the page files, "{lang}" standing for the language code
    exclude: tuple[str, ...]
    languages: dict[str, tuple[str, Path]]  # language -> (Debian package, folder it installs)

    def page_files(self, lang: str, root: Path | None = None) -> list[Path]:
        """The book's pages in ``lang``: its HTML files (the single-page edition, search and index
        pages of the site left out), sorted."""
        folder = root or self.languages[lang][1]
        pattern = self.pages.replace("{lang}", lang)
        return sorted(
            p
            for p in folder.iterdir()
            if p.is_file() and fnmatch.fnmatch(p.name, pattern) and p.name not in self.exclude
        )

    def page_key(self, filename: str, lang: str) -> str:
        """A page's language-neutral name: ``dreq.zh-cn.html`` -> ``dreq``."""
        stem = filename.rsplit("/", 1)[-1]
        stem = stem[: -len(".html")] if stem.endswith(".html") else stem
        return stem[: -len(lang) - 1] if stem.endswith(f".{lang}") else stem


def load_books(folder: Path) -> dict[str, Book]:
    """The books of a set folder (its books.json)."""
    raw = json.loads((folder / "books.json").read_text(encoding="utf-8"))
    return {
        name: Book(
            name=name,
            title=b["title"],
            version=b["version"],
            licence=b["licence"],
            pages=b["pages"],
            exclude=tuple(b.get("exclude", ())),
            languages={lang: (v["package"], Path(v["root"])) for lang, v in b["languages"].items()},
        )
        for name, b in raw.items()
    }


@dataclass
class QuestionSet:
    """One book's questions in every language it was written in, and its judgments."""

    book: str
    queries: dict[str, dict[str, str]]  # language -> question id -> text
    qrels: dict[str, dict[str, float]]  # question id -> section key -> grade
    kinds: dict[str, str] = field(default_factory=dict)  # question id -> "keyword" | "sentence"
    no_latin: dict[str, set[str]] = field(default_factory=dict)  # language -> ids without a Latin letter

    def judged_keys(self) -> set[str]:
        return {key for judged in self.qrels.values() for key in judged}


def load_questions(folder: Path, book: str) -> QuestionSet:
    """A book's questions and judgments, checked: every language has the English ids and only them,
    every question is judged, ``no_latin`` marks are true, kinds agree across languages.

    Raises:
        SetError: the files contradict themselves.
    """
    from mcpower.evaluation import load_qrels

    base = folder / book
    queries: dict[str, dict[str, str]] = {}
    kinds: dict[str, str] = {}
    no_latin: dict[str, set[str]] = {}
    for path in sorted(base.glob("questions.*.jsonl")):
        lang = path.name[len("questions.") : -len(".jsonl")]
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        queries[lang] = {str(r["_id"]): str(r["text"]) for r in rows}
        if len(queries[lang]) != len(rows):
            raise SetError(f"{path}: a question id is used twice")
        for r in rows:
            qid, text = str(r["_id"]), str(r["text"])
            kind = r.get("kind", "sentence")
            if kinds.setdefault(qid, kind) != kind:
                raise SetError(f"{path}: {qid} is a {kind} question here but a {kinds[qid]} one elsewhere")
            marked = bool(r.get("no_latin", False))
            if marked and LATIN.search(text):
                raise SetError(f"{path}: {qid} is marked no_latin but has a Latin letter: {text!r}")
            if lang in CJK and not marked and not LATIN.search(text):
                raise SetError(f"{path}: {qid} has no Latin letter but is not marked no_latin")
            if marked:
                no_latin.setdefault(lang, set()).add(qid)
    if "en" not in queries:
        raise SetError(f"{base}: no questions.en.jsonl (the questions are written in English first)")
    ids = set(queries["en"])
    for lang, q in queries.items():
        if set(q) != ids:
            raise SetError(f"{base}/questions.{lang}.jsonl: ids differ from English ({sorted(set(q) ^ ids)[:5]})")
    qrels = load_qrels(base / "qrels.tsv")
    if set(qrels) - ids or ids - set(qrels):
        raise SetError(f"{base}/qrels.tsv: judged and asked questions differ ({sorted(set(qrels) ^ ids)[:5]})")
    for qid, judged in qrels.items():
        if not any(g >= 2 for g in judged.values()):
            raise SetError(f"{base}/qrels.tsv: {qid} has no section of grade 2 (the one that answers)")
    return QuestionSet(book, queries, qrels, kinds, no_latin)


def copy_pages(files: list[Path], dest: Path) -> Path:
    """``dest`` holding exactly these files (by name and content), copied anew only if they changed,
    so a dataset ingested from it stays reusable."""
    dest.mkdir(parents=True, exist_ok=True)
    want = {f.name: f for f in files}
    for old in dest.iterdir():
        if old.name not in want:
            shutil.rmtree(old) if old.is_dir() else old.unlink()
    for name, src in want.items():
        target = dest / name
        if not target.exists() or target.read_bytes() != src.read_bytes():
            shutil.copyfile(src, target)
    return dest


def corpus_digest(folder: Path) -> str:
    """A short hash of a corpus folder's file names and bytes."""
    h = hashlib.sha256()
    for f in sorted(folder.iterdir()):
        h.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()[:16]


def parse_book(book: Book, lang: str, folder: Path) -> dict[str, PageSections]:
    """Page key -> the sections of that page, for the copy of the book in ``folder``."""
    return {
        book.page_key(f.name, lang): parse_page(f.read_bytes(), book.page_key(f.name, lang))
        for f in sorted(folder.iterdir())
        if f.suffix == ".html"
    }


def missing_sections(qset: QuestionSet, pages: dict[str, PageSections]) -> list[str]:
    """Judged sections that the parsed book does not have (a typo, or a book of another version)."""
    known = {key for p in pages.values() for key in p.order}
    return sorted(k for k in qset.judged_keys() if k not in known)


class SectionMapper:
    """The section of a search result, through its document's stored text (book_sections)."""

    def __init__(
        self, book: Book, lang: str, pages: dict[str, PageSections], content: Callable[[str], str | None]
    ) -> None:
        self.book, self.lang, self.pages, self.content = book, lang, pages, content
        self._lines: dict[str, tuple[list[str], list[bool]] | None] = {}
        self.results = self.exact = self.unmapped = 0

    def section(self, path: str, heading_path: str, start: int, end: int) -> str:
        """The key of the section a result (path, heading path, 1-based line range) is in."""
        self.results += 1
        page = self.book.page_key(path, self.lang)
        sections = self.pages.get(page)
        if sections is None:
            self.unmapped += 1
            return f"{page}#?"
        if path not in self._lines:
            text = self.content(path)
            self._lines[path] = line_sections(text, sections) if isinstance(text, str) else None
        lines = self._lines[path]
        found = majority(*lines, start, end) if lines else None
        if found is None:  # no stored text, or lines outside it: the result's own heading path
            found = sections.lookup(tuple(norm_title(h) for h in heading_path.split(" > ") if norm_title(h)))
        key, exact = found
        self.exact += exact
        return key

    def coverage(self) -> dict[str, float | int]:
        """How many results were mapped, and the share mapped through an exact heading path."""
        return {
            "results": self.results,
            "exact": round(self.exact / self.results, 4) if self.results else 1.0,
            "unmapped": self.unmapped,
        }


def unique(keys: Iterable[str]) -> list[str]:
    """Each section once, at its best rank."""
    return list(dict.fromkeys(keys))


def ndcg(ranked: list[str], judged: dict[str, float], k: int = TOP) -> float:
    """nDCG@k with linear gains (the judged grades), as trec_eval and `mcpower eval` compute it."""
    dcg = sum(judged.get(d, 0.0) / math.log2(i + 2) for i, d in enumerate(ranked[:k]))
    ideal = sorted((g for g in judged.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg > 0 else 0.0


def mrr(ranked: list[str], judged: dict[str, float], k: int = TOP) -> float:
    """1 / rank of the first relevant section within the first k (0 if none)."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:k]) if judged.get(d, 0.0) > 0), 0.0)


def untranslated_share(
    english: list[Path], translated: list[Path], book: Book, lang: str, sections: Iterable[str] = ()
) -> dict[str, Any]:
    """How much of a translation is still English: of its prose paragraphs (paragraphs, list items,
    terms, cells and headings; code left out), the share that are word for word a paragraph of the
    English page, leaving out short ones (under PROSE_WORDS words: a command, a file name, a table
    cell are the same in every language). Also which of ``sections`` are mostly English."""
    from suite.book_sections import paragraphs

    en = {book.page_key(p.name, "en"): {t for _, t, _ in paragraphs(p.read_bytes(), "")} for p in english}
    total = same = 0
    per_section: dict[str, list[int]] = {}
    for page in translated:
        key = book.page_key(page.name, lang)
        originals = en.get(key, set())
        for section, text, heading in paragraphs(page.read_bytes(), key):
            if text in originals and len(text.split()) < PROSE_WORDS:
                continue
            total += 1
            same += text in originals
            if heading:
                continue  # a section is judged by its body
            counts = per_section.setdefault(section, [0, 0])
            counts[0] += 1
            counts[1] += text in originals
    english_sections = sorted(k for k in sections if k in per_section and per_section[k][1] * 2 > per_section[k][0])
    return {
        "paragraphs": total,
        "english": same,
        "share": round(same / total, 4) if total else 0.0,
        "judged_sections_in_english": english_sections,
    }


def reader_coverage(
    book: Book, lang: str, folder: Path, pages: dict[str, PageSections], qset: QuestionSet
) -> dict[str, Any]:
    """Section mapping checked without an ingest: each page read by mcpower's own reader (the text a
    dataset would store), every line of it mapped to its section. Reports the share of lines mapped
    through an exact heading path and the judged sections no line maps to. Runs no search and needs
    no model: the check for the held-out set."""
    from mcpower.chunking import parse_document

    lines = exact = 0
    reached: set[str] = set()
    for f in sorted(folder.iterdir()):
        page = book.page_key(f.name, lang)
        if f.suffix != ".html" or page not in pages:
            continue
        text = parse_document(f.read_bytes(), ".html").text or ""
        keys, known = line_sections(text, pages[page])
        lines += len(keys)
        exact += sum(known)
        reached.update(keys)
    return {
        "lines": lines,
        "exact": round(exact / lines, 4) if lines else 1.0,
        "judged_unreached": sorted(qset.judged_keys() - reached),
    }
