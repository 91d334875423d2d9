"""benchmarks/languages.py, the measuring stick of issue 27: a result is mapped to the section it is in
(the same section key in every language), sections count once at their best rank, nDCG and MRR are
what they say, and the judged sets in benchmarks/data are consistent. A tiny synthetic two-language
book (one DocBook page, one Sphinx page) and the fake embedder stand in for Debian's books and the model."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from conftest import FakeEmbedder

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"

# A DocBook chapter: sections are divs whose title carries the anchor; a "Note" admonition has a
# heading of the same level as the section it is in, so nesting headings by level alone would put
# the text after it under the wrong section; its <pre> holds a line that looks like a heading.
GUIDE = """<html><head><title>{title}</title></head><body>
<div class="navheader"><table><tr><td>prev</td><td>next</td></tr></table></div>
<div class="chapter"><div class="titlepage"><h1 class="title"><a id="guide"></a>Chapter 1. {title}</h1></div>
<p>{intro} alpha alpha alpha words enough for a chunk of its own here.</p>
<div class="section"><div class="titlepage"><h2 class="title"><a id="install"></a>1.1. {install}</h2></div>
<p>{install_text} bravo bravo bravo with more words to make the section body long enough.</p>
<div class="section"><div class="titlepage"><h3 class="title"><a id="offline"></a>1.1.1. {offline}</h3></div>
<p>{offline_text} charlie charlie charlie copy the bundle onto the machine first of all.</p>
<div class="note"><h3 class="title">{note}</h3><p>{note_text} delta delta delta the note is part of the offline section.</p></div>
<pre># not a heading
cp bundle /opt</pre>
<p>{after_text} foxtrot foxtrot still the offline section after its note and its code.</p>
</div></div>
<div class="section"><div class="titlepage"><h2 class="title"><a id="remove"></a>1.2. {remove}</h2></div>
<p>{remove_text} echo echo echo uninstall the widget and delete its configuration files.</p>
</div></div></body></html>
"""

# A Sphinx page: nested <section id>, permalink marks, and a sidebar heading outside the main content.
FAQ = """<html><head><title>{title}</title></head><body>
<div class="document"><div class="body" role="main">
<section id="faq"><h1>2. {title}<a class="headerlink" href="#faq">¶</a></h1>
<p>{intro} golf golf golf questions that come up again and again answered here.</p>
<section id="licence"><h2>2.1. {licence}<a class="headerlink" href="#licence">¶</a></h2>
<p>{licence_text} hotel hotel hotel the widget is free software under the licence.</p>
</section></section></div></div>
<div class="sphinxsidebar" role="navigation"><h3>Table of Contents</h3><p>links</p></div>
</body></html>
"""

TEXTS = {
    "en": {
        "guide": dict(
            title="Guide",
            intro="This guide explains the widget.",
            install="Installing",
            install_text="To install the widget run the installer.",
            offline="Offline install",
            offline_text="Without a network,",
            note="Note",
            note_text="Keep the bundle.",
            after_text="Then run the installer from the copy,",
            remove="Removing",
            remove_text="To remove it,",
        ),
        "faq": dict(
            title="Questions",
            intro="Frequently asked,",
            licence="Licence",
            licence_text="Under which licence?",
        ),
    },
    "de": {
        "guide": dict(
            title="Anleitung",
            intro="Diese Anleitung erklärt das Widget.",
            install="Installation",
            install_text="Zum Installieren das Installationsprogramm starten.",
            offline="Installation ohne Netz",
            offline_text="Ohne Netzwerk",
            note="Hinweis",
            note_text="Das Paket aufbewahren.",
            after_text="Dann das Installationsprogramm aus der Kopie starten,",
            remove="Entfernen",
            remove_text="To remove it,",  # left untranslated, as real translations leave paragraphs
        ),
        "faq": dict(
            title="Fragen",
            intro="Häufig gefragt,",
            licence="Lizenz",
            licence_text="Unter welcher Lizenz?",
        ),
    },
}
MARKERS = {  # a word only one section's text holds -> that section
    "alpha": "guide#guide",
    "bravo": "guide#install",
    "charlie": "guide#offline",
    "delta": "guide#offline",
    "foxtrot": "guide#offline",
    "echo": "guide#remove",
    "golf": "faq#faq",
    "hotel": "faq#licence",
}


@pytest.fixture(scope="module")
def bench() -> Iterator[dict[str, ModuleType]]:
    """The harness and its suite modules, imported the way the script imports them."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("mcpower_languages_bench", BENCHMARKS / "languages.py")
        assert spec is not None and spec.loader is not None
        harness = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(harness)
        import suite.book_sections as sections
        import suite.langsets as langsets

        yield {"harness": harness, "langsets": langsets, "sections": sections}
    finally:
        sys.path.remove(str(BENCHMARKS))


def write_book(root: Path) -> Path:
    """The two-language book as a set folder (books.json, questions, qrels) with its pages."""
    books: dict[str, Any] = {
        "tiny": {
            "title": "Tiny",
            "version": "1",
            "licence": "test",
            "pages": "*.{lang}.html",
            "exclude": [],
            "languages": {},
        }
    }
    for lang, pages in TEXTS.items():
        folder = root / "pages" / lang
        folder.mkdir(parents=True)
        (folder / f"guide.{lang}.html").write_text(GUIDE.format(**pages["guide"]), encoding="utf-8")
        (folder / f"faq.{lang}.html").write_text(FAQ.format(**pages["faq"]), encoding="utf-8")
        (folder / "style.css").write_text("body {}")
        books["tiny"]["languages"][lang] = {"package": f"tiny-{lang}", "root": str(folder)}
    sets = root / "set"
    (sets / "tiny").mkdir(parents=True)
    (sets / "books.json").write_text(json.dumps(books))
    questions = {
        "en": [("q1", "charlie bundle offline"), ("q2", "hotel licence")],
        "de": [("q1", "charlie Paket ohne Netzwerk"), ("q2", "hotel Lizenz")],
    }
    for lang, rows in questions.items():
        lines = [json.dumps({"_id": q, "text": t, "kind": "keyword"}) for q, t in rows]
        (sets / "tiny" / f"questions.{lang}.jsonl").write_text("\n".join(lines) + "\n")
    qrels = "query-id\tcorpus-id\tscore\nq1\tguide#offline\t2\nq1\tguide#install\t1\nq2\tfaq#licence\t2\n"
    (sets / "tiny" / "qrels.tsv").write_text(qrels)
    return sets


def test_a_page_is_parsed_into_its_sections(bench: dict[str, ModuleType]) -> None:
    sections = bench["sections"]
    page = sections.parse_page(GUIDE.format(**TEXTS["en"]["guide"]).encode(), "guide")
    assert page.order == ["guide#guide", "guide#install", "guide#offline", "guide#remove"]
    assert page.parent == {
        "guide#guide": None,
        "guide#install": "guide#guide",
        "guide#offline": "guide#install",
        "guide#remove": "guide#guide",
    }
    norm = sections.norm_title
    # The note's heading has the level of 1.1.1: nested by level, its path replaces 1.1.1's last step,
    # yet it belongs to the section around it in the page.
    note_path = (norm("Chapter 1. Guide"), norm("1.1. Installing"), norm("Note"))
    assert page.by_path[note_path] == "guide#offline"
    assert page.lookup(note_path) == ("guide#offline", True)
    assert page.lookup((norm("Chapter 1. Guide"), norm("1.1. Installing"), norm("Unknown"))) == ("guide#install", False)
    faq = sections.parse_page(FAQ.format(**TEXTS["de"]["faq"]).encode(), "faq")
    assert faq.order == ["faq#faq", "faq#licence"]  # the sidebar's heading is not part of the page
    assert faq.title["faq#licence"] == "2.1. Lizenz"  # the permalink mark left out
    assert faq.lookup((norm("2. Fragen¶"), norm("2.1. Lizenz"))) == ("faq#licence", True)


def test_lines_map_to_sections_outside_code_and_by_majority(bench: dict[str, ModuleType]) -> None:
    sections = bench["sections"]
    page = sections.parse_page(GUIDE.format(**TEXTS["en"]["guide"]).encode(), "guide")
    text = "intro\n# Chapter 1. Guide\nalpha\n## 1.1. Installing\nbravo\n```\n# not a heading\n```\n### 1.1.1. Offline install\ncharlie\ncharlie"
    keys, exact = sections.line_sections(text, page)
    assert keys == ["guide#guide"] * 3 + ["guide#install"] * 5 + ["guide#offline"] * 3
    assert all(exact)
    assert sections.majority(keys, exact, 4, 11) == ("guide#install", True)  # 5 lines against 3
    assert sections.majority(keys, exact, 3, 8) == ("guide#install", True)  # not the first line's
    assert sections.majority(keys, exact, 9, 11) == ("guide#offline", True)
    assert sections.majority(keys, exact, 40, 50) is None


def test_metrics_by_hand(bench: dict[str, ModuleType]) -> None:
    ls = bench["langsets"]
    judged = {"a": 2.0, "b": 1.0, "c": 0.0}
    ideal = 2 + 1 / math.log2(3)
    assert ls.ndcg(["a", "b"], judged) == pytest.approx(1.0)
    assert ls.ndcg(["x", "a", "b"], judged) == pytest.approx((2 / math.log2(3) + 1 / 2) / ideal)
    assert ls.ndcg(["b", "a"], judged) == pytest.approx((1 + 2 / math.log2(3)) / ideal)
    assert ls.ndcg(["x"] * 10 + ["a"], judged) == 0.0  # past the 10th place
    assert ls.mrr(["x", "c", "b", "a"], judged) == pytest.approx(1 / 3)  # grade 0 is not relevant
    assert ls.mrr([], judged) == 0.0
    assert ls.unique(["a", "x", "a", "b", "x"]) == ["a", "x", "b"]


def test_results_map_to_their_section_in_each_language_and_count_once(
    bench: dict[str, ModuleType], tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    ls, harness = bench["langsets"], bench["harness"]
    sets = write_book(tmp_path)
    book = ls.load_books(sets)["tiny"]
    qset = ls.load_questions(sets, "tiny")
    registry = make_registry()
    for lang in ("en", "de"):
        corpus = ls.copy_pages(book.page_files(lang), tmp_path / "corpora" / lang)
        assert sorted(p.name for p in corpus.iterdir()) == [f"faq.{lang}.html", f"guide.{lang}.html"]
        ingest(corpus, datasets_dir, IngestOptions(dataset_id=f"tiny-{lang}"), embedder=FakeEmbedder())
        pages = ls.parse_book(book, lang, corpus)
        assert ls.missing_sections(qset, pages) == []
        store = registry.store(f"tiny-{lang}")

        def content(path: str, store: Any = store) -> str | None:
            doc = store.document(path)
            return doc.content if doc is not None else None

        mapper = ls.SectionMapper(book, lang, pages, content)
        seen = 0
        for doc, rows in store.iter_documents():
            for row in rows:
                want = {MARKERS[w] for w in MARKERS if w in row.text.split()}
                got = mapper.section(doc.path, row.heading_path, row.start_line, row.end_line)
                assert got in want or not want, (lang, row.heading_path, row.text[:80])
                seen += bool(want)
        assert seen >= 6
        assert mapper.coverage()["exact"] == 1.0 and mapper.coverage()["unmapped"] == 0

        # Asked through the search path knowledge_search takes: the offline section's chunks
        # (before and after its note) count once, at the best rank.
        for qlang in ("en", lang):
            row_result = harness.run_row(registry, f"tiny-{lang}", mapper, qset.queries[qlang], qset, "hybrid")
            for qid, q in row_result["questions"].items():
                assert q["sections"] == ls.unique(q["sections"])
                assert q["ndcg@10"] == pytest.approx(round(ls.ndcg(q["sections"], qset.qrels[qid]), 4))
                assert q["mrr@10"] == pytest.approx(round(ls.mrr(q["sections"], qset.qrels[qid]), 4))
            q1 = row_result["questions"]["q1"]
            assert q1["sections"][0] == "guide#offline"
            assert q1["mrr@10"] == 1.0 and not q1["empty"]
            assert len(row_result["seconds_ms"]) == 2
    share = ls.untranslated_share(
        book.page_files("en"), book.page_files("de"), book, "de", qset.judged_keys() | {"guide#remove"}
    )
    assert share["english"] == 1 and share["paragraphs"] > 8  # the one paragraph left in English
    assert share["judged_sections_in_english"] == ["guide#remove"]


def test_question_sets_that_contradict_themselves_are_refused(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    ls = bench["langsets"]
    sets = write_book(tmp_path)
    folder = sets / "tiny"
    ls.load_questions(sets, "tiny")  # the good one loads

    def write(lang: str, rows: list[dict[str, Any]]) -> None:
        (folder / f"questions.{lang}.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))

    ok = [{"_id": "q1", "text": "Paket", "kind": "keyword"}, {"_id": "q2", "text": "Lizenz", "kind": "keyword"}]
    bad_cases = [
        (
            "ja",
            [{"_id": "q1", "text": "パッケージ dpkg", "no_latin": True, "kind": "keyword"}, ok[1]],
            "marked no_latin",
        ),
        ("ja", [{"_id": "q1", "text": "パッケージ", "kind": "keyword"}, ok[1]], "not marked no_latin"),
        ("de", ok[:1], "ids differ"),
        ("de", [ok[0], {**ok[1], "kind": "sentence"}], "question here but a .* one elsewhere"),
    ]
    for lang, rows, message in bad_cases:
        write(lang, rows)
        with pytest.raises(ls.SetError, match=message):
            ls.load_questions(sets, "tiny")
        (folder / f"questions.{lang}.jsonl").unlink()
        if lang == "de":
            write("de", ok)
    (folder / "qrels.tsv").write_text("q1\tguide#offline\t1\nq2\tfaq#licence\t2\n")
    with pytest.raises(ls.SetError, match="no section of grade 2"):
        ls.load_questions(sets, "tiny")


def test_the_judged_sets_in_the_repository_are_consistent(bench: dict[str, ModuleType]) -> None:
    ls = bench["langsets"]
    counted = 0
    for folder in (ls.TUNING, ls.HELDOUT):
        for name, book in ls.load_books(folder).items():
            qset = ls.load_questions(folder, name)  # ids, marks and kinds agree across languages
            assert set(qset.queries) == set(book.languages), name
            assert 35 <= len(qset.queries["en"]) <= 45, name
            for lang in ls.CJK:
                if lang in qset.queries:  # at least half without a Latin letter (issue 27's hardest row)
                    assert 2 * len(qset.no_latin.get(lang, ())) >= len(qset.queries[lang]), (name, lang)
            assert all("#" in key for key in qset.judged_keys()), name
            counted += len(qset.queries["en"])
    assert counted >= 150


def test_cross_lingual_rows(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    ls, harness = bench["langsets"], bench["harness"]
    books = ls.load_books(write_book(tmp_path))
    assert harness.rows_for(books, None, "default") == [
        ("tiny", "en", "en"),
        ("tiny", "de", "de"),
        ("tiny", "en", "de"),
        ("tiny", "de", "en"),
    ]
    assert harness.rows_for(books, {"de"}, "none") == [("tiny", "de", "de")]


def test_a_comparison_uses_the_questions_both_runs_answered(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    ls, harness = bench["langsets"], bench["harness"]
    from suite.langreport import compare_report, summarize

    sets = write_book(tmp_path)
    qset = ls.load_questions(sets, "tiny")

    def q(ndcg: float) -> dict[str, Any]:
        return {"ndcg@10": ndcg, "mrr@10": ndcg, "empty": False, "low_confidence": False, "sections": []}

    before = {"tiny|en|en": {"hybrid": {"questions": {"q1": q(1.0), "q2": q(0.0)}, "seconds_ms": [1.0, 2.0]}}}
    now = {"tiny|en|en": {"hybrid": {"questions": {"q2": q(0.5)}, "seconds_ms": [1.0]}}}  # a quick run: q2 only
    facts = {"tiny|en": {"chunks": 10, "work_seconds": 1.0}}
    same = harness.same_questions(before, now)
    assert list(same["tiny|en|en"]["hybrid"]["questions"]) == ["q2"]
    report = compare_report(
        summarize(now, {"tiny": qset}, facts, ["hybrid"]),
        summarize(same, {"tiny": qset}, facts, ["hybrid"]),
        ["hybrid"],
        "main",
    )
    assert "| English → English | 1 / 1 | 0.500 / 0.000 / +0.500 |" in report


def test_datasets_of_an_earlier_code_never_ingest(bench: dict[str, ModuleType], tmp_path: Path) -> None:
    """--datasets-of searches what an earlier code ingested: a book it lacks is refused, not ingested."""
    ls, harness = bench["langsets"], bench["harness"]
    book = ls.load_books(write_book(tmp_path))["tiny"]
    args = argparse.Namespace(
        doc_roots={}, cache=tmp_path / "cache", set="tuning", datasets_of="0123abcd", ingest_arg=[]
    )
    args.datasets_dir = harness.ingest_dir(args.cache, "tuning", [], "0123abcd")
    args.datasets_dir.mkdir(parents=True)
    assert args.datasets_dir.name == "0123abcd-plain"

    with pytest.raises(SystemExit, match=r"tiny-en: not in .*only searches what that code ingested"):
        harness.ensure_dataset(book, "en", args)
    assert list(args.datasets_dir.iterdir()) == []
