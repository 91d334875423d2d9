"""Keyword analysis per language (mcpower/analysis/analyzers.py) and the keyword index built on it:
stems that meet across inflections, CJK character pairs, the same analysis for queries, BM25 still
exact against FTS5's bm25(), and datasets built before it searched as they always were."""

from __future__ import annotations

import itertools
import json
import random
import shutil
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files
from milvus_fixtures import needs_milvus
from typer.testing import CliRunner

from mcpower.analysis import index_terms, query_terms, snippet_terms
from mcpower.cli.app import app
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import DatasetInfo, read_manifest
from mcpower.registry import Registry
from mcpower.search import search
from mcpower.store import ChunkRow, DocumentRow, chunk_id
from mcpower.store.local.build import write_metadata
from mcpower.store.local.keyword import COLUMN_WEIGHTS
from mcpower.store.local.store import LocalStore

LEGACY = Path(__file__).parent / "legacy"


def meet(language: str, *forms: str) -> bool:
    """Whether every form gives the same single term."""
    return len({tuple(index_terms(f, language)) for f in forms}) == 1


# ---------------------------------------------------------------- analysers on real text


@pytest.mark.parametrize(
    ("language", "forms"),
    [
        ("de", ("Paket", "Pakete", "Paketen", "Pakets")),  # plural and genitive
        ("de", ("Abhängigkeit", "Abhängigkeiten", "abhangigkeit")),  # with and without the umlaut
        ("de", ("Signatur", "Signaturen")),
        ("fr", ("paquet", "paquets")),
        ("fr", ("dépendance", "dépendances", "dependance")),  # accents folded after stemming
        ("fr", ("vérification", "vérifications", "verification")),
        ("es", ("paquete", "paquetes")),
        ("it", ("pacchetto", "pacchetti")),
        ("pt", ("pacote", "pacotes")),
        ("nl", ("pakket", "pakketten")),
        ("sv", ("paket", "paketet", "paketen")),
        ("ru", ("пакет", "пакета", "пакетов", "пакетами", "пакете")),  # the cases of one noun
        ("en", ("install", "installs", "installing", "installed")),
    ],
)
def test_inflections_of_a_word_meet_in_one_term(language: str, forms: tuple[str, ...]) -> None:
    assert meet(language, *forms)


def test_german_compounds_stay_whole_and_their_parts_do_not_match() -> None:
    # Decided: no decompounding (docs/search.md#languages). A compound is one term.
    assert index_terms("Bauabhängigkeiten", "de") == index_terms("Bauabhängigkeit", "de")
    assert index_terms("Bauabhängigkeiten", "de") != index_terms("Abhängigkeiten", "de")


def test_french_elisions_leave_the_word_itself() -> None:
    terms = index_terms("l'archive d'un paquet", "fr")

    assert index_terms("archive", "fr")[0] in terms and index_terms("paquet", "fr")[0] in terms


def test_japanese_and_chinese_sentences_become_overlapping_character_pairs() -> None:
    ja = index_terms("フリーズしたプログラムを強制終了する", "ja")
    zh = index_terms("硬链接与符号链接的区别", "zh")

    assert ja[:3] == ["フリ", "リー", "ーズ"] and "強制" in ja and "終了" in ja
    pairs = ["硬链", "链接", "接与", "与符", "符号", "号链", "链接", "接的", "的区", "区别"]
    assert zh == [*pairs, *"硬链接与符号链接的区别"]  # pairs, then each character
    assert index_terms("中", "zh") == ["中"]  # a lone character is itself


def test_a_chinese_question_shares_its_words_with_the_sentence_that_answers_it() -> None:
    question = set(query_terms("硬链接和符号链接有什么区别", ["zh"]))
    answer = set(index_terms("硬链接与符号链接的区别在于是否指向同一个索引节点。", "zh"))

    assert {"硬链", "链接", "符号", "区别"} <= question & answer


def test_korean_words_with_particles_match_the_bare_word() -> None:
    answer = set(index_terms("패키지를 설치합니다", "ko"))

    assert set(query_terms("패키지 설치", ["ko"])) <= answer


def test_latin_words_in_a_cjk_chunk_get_english_stems_and_an_undetermined_chunk_none() -> None:
    assert index_terms("apt で packages を", "ja") == ["apt", "で", "packag", "を"]
    assert index_terms("installing packages", "und") == ["installing", "packages"]


def test_full_width_latin_and_case_are_normalised() -> None:
    assert index_terms("ＤＰＵＴ Upload", "en") == index_terms("dput upload", "en")


def test_query_terms_are_the_union_over_the_datasets_languages_without_their_stopwords() -> None:
    terms = query_terms("Wie baue ich die Pakete?", ["de", "en"])

    assert index_terms("Pakete", "de")[0] in terms  # German stem
    assert "wie" not in terms and "ich" not in terms and "die" not in terms  # a German question: its stopwords
    assert index_terms("Pakete", "en")[0] in terms  # the English analysis of a German word: each language is a guess
    assert "man" in query_terms("how do I read a man page", ["de", "en"])  # an English one: "man" stays
    assert len(terms) == len(set(terms))
    assert query_terms("the and of", ["en"]) == ["the", "and", "of"]  # only stopwords: kept


def test_queries_are_analysed_in_the_languages_holding_a_fifth_of_the_dataset() -> None:
    from mcpower.analysis import query_languages

    assert query_languages({"de": 900, "en": 100}) == ("de",)  # a translated book's English leftovers
    assert query_languages({"de": 500, "en": 400, "und": 100}) == ("de", "en")
    assert query_languages({"ru": 1, "en": 1, "fr": 1, "de": 1}) == ("de", "en", "fr", "ru")
    assert query_languages({}) == ("und",)


def test_undetermined_chunks_are_analysed_and_searched_as_the_datasets_main_language() -> None:
    from mcpower.analysis import analysis_language, query_languages, undetermined_as

    assert undetermined_as({"en": 17, "und": 5}) == "en"
    assert undetermined_as({"und": 138, "en": 12, "de": 12}) == "de"  # the most chunks, then the first code
    assert undetermined_as({"und": 4}) is None and undetermined_as({}) is None
    assert (analysis_language("und", "de"), analysis_language("fr", "de"), analysis_language("und", None)) == (
        "de",
        "fr",
        "und",
    )
    # Counted as what they were analysed as: no unstemmed forms beside the stems of the same words ...
    assert query_languages({"en": 17, "und": 5}, "en") == ("en",)
    # ... and a dataset mostly of them is searched in its told language's stems.
    assert query_languages({"und": 138, "en": 12}, "en") == ("en",)
    assert query_languages({"en": 17, "und": 5}) == ("en", "und")  # a dataset written before: as it was indexed


def test_chunks_too_short_to_tell_are_found_by_the_stems_of_the_datasets_language(
    tmp_path: Path, datasets_dir: Path
) -> None:
    english = "The archive checks the signatures of uploaded packages before it accepts them, every night."
    files: dict[str, str | bytes] = {f"guide{n}.md": f"# Guide {n}\n\n{english} {english}\n" for n in range(4)}
    files |= {f"short{n}.md": f"# Short {n}\n\nPackages {n}.\n" for n in range(2)}
    ingest(write_files(tmp_path / "src", files), datasets_dir, IngestOptions(dataset_id="d"), embedder=FakeEmbedder())
    registry = Registry(
        datasets_dir, embedder_factory=lambda m: FakeEmbedder(), allowed_models=[FakeEmbedder.model_name]
    )
    info = read_manifest(datasets_dir / "d" / "manifest.json")
    assert info.counts.languages.get("und", 0) >= 2 and info.analysis is not None  # too short to tell
    assert info.analysis.undetermined == "en"

    found = search(registry, "package", "d", mode="keyword", top_k=10, group="none").results

    # "Packages" in a short chunk is the term "packag", as in the guides: one term, one weight.
    assert {r.path for r in found} == {*(f"guide{n}.md" for n in range(4)), "short0.md", "short1.md"}
    registry.close()


def test_snippet_terms_hold_words_stems_and_pairs() -> None:
    terms = snippet_terms("Abhängigkeiten 强制终了", ["de"])

    assert "abhängigkeiten" in terms and "abhang" in terms and "强制" in terms


# ---------------------------------------------------------------- the index: BM25 exact


WORDS = {
    "en": [
        "package",
        "packages",
        "install",
        "installing",
        "archive",
        "upload",
        "signature",
        "link",
        "links",
        "file",
        "files",
    ],
    "de": ["Paket", "Pakete", "Paketen", "Archiv", "hochladen", "Abhängigkeiten", "prüfen", "Signatur", "Bau", "bauen"],
    "ru": ["пакет", "пакета", "пакетов", "архив", "подпись", "загрузка", "установка"],
    "ja": ["強制終了", "プログラム", "パッケージ", "アーカイブ", "署名"],
    "zh": ["硬链接", "符号链接", "软件包", "归档", "签名"],
}


def _corpus(seed: int) -> tuple[list[DocumentRow], list[ChunkRow]]:
    rng = random.Random(seed)
    docs: list[DocumentRow] = []
    chunks: list[ChunkRow] = []
    for d in range(1, 13):
        language = list(WORDS)[d % len(WORDS)]
        path = f"{language}/doc{d}.md"
        docs.append(DocumentRow(d, path, f"{rng.choice(WORDS[language])} title", ".md", 1, 0.0, "h", "t", ""))
        for o in range(rng.randint(1, 5)):
            sep = "" if language in ("ja", "zh") else " "
            text = sep.join(rng.choice(WORDS[language]) for _ in range(rng.randint(3, 30)))
            heading = rng.choice(WORDS[language])
            chunks.append(ChunkRow(chunk_id(path, text, o), d, o, heading, 1, 2, text, language=language))
    return docs, chunks


@pytest.fixture(scope="module")
def analysed_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[sqlite3.Connection]:
    path = tmp_path_factory.mktemp("analysed") / "meta.sqlite"
    write_metadata(path, *_corpus(7), analysed=True)
    with closing(sqlite3.connect(path, check_same_thread=False)) as db:
        yield db


LANGUAGES = ("en", "de", "ru", "ja", "zh")


def analysed_store(db: sqlite3.Connection) -> LocalStore:
    from conftest import valid_manifest

    from mcpower.manifest import Manifest
    from mcpower.store.local.keyword import chunk_ids

    data = valid_manifest()
    data["counts"]["languages"] = dict.fromkeys(LANGUAGES, 1)  # a fifth each: queries analysed in all five
    data["analysis"] = {"scheme": "mcpower-text-1", "language": None}
    return LocalStore(Manifest.model_validate(data), Path("."), None, db, chunk_ids(db), postings=True)


def fts5_bm25(db: sqlite3.Connection, terms: list[str]) -> dict[int, float]:
    if not terms:
        return {}
    match = " OR ".join(f'"{t}"' for t in terms)
    rows = db.execute(
        "SELECT rowid, -bm25(chunks_fts, ?, ?, ?) FROM chunks_fts WHERE chunks_fts MATCH ?", (*COLUMN_WEIGHTS, match)
    )
    return {i: s for i, s in rows if s > 0}


QUERIES = [
    "Wie lade ich Pakete in das Archiv hoch?",
    "installing packages and links",
    "硬链接和符号链接有什么区别",
    "フリーズしたプログラムを強制終了する",
    "загрузка пакетов",
    "Signatur prüfen signature",
    "zzz unknown words",
]


@pytest.mark.parametrize("query", QUERIES)
def test_postings_of_analysed_terms_score_exactly_as_fts5_bm25(analysed_db: sqlite3.Connection, query: str) -> None:
    store = analysed_store(analysed_db)
    hits = store.keyword(query)
    expected = fts5_bm25(analysed_db, query_terms(query, LANGUAGES))

    assert dict(zip(hits.ids.tolist(), hits.scores.tolist())) == pytest.approx(expected, rel=1e-5)
    assert (len(hits) > 0) == (query != "zzz unknown words")


def test_every_stored_term_is_one_fts5_token(analysed_db: sqlite3.Connection) -> None:
    """The ascii tokenizer splits the stored terms at the spaces only: vocabulary == analysed terms."""
    docs, chunks = _corpus(7)
    titles = {d.id: d.title for d in docs}
    expected = {
        t
        for c in chunks
        for field in (c.text, titles[c.document_id], c.heading_path)
        for t in index_terms(field, c.language)
    }
    analysed_db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(main, chunks_fts, 'row')")

    assert {t for (t,) in analysed_db.execute("SELECT term FROM temp.v")} == expected


def test_random_multilingual_queries_stay_exact(analysed_db: sqlite3.Connection) -> None:
    rng = random.Random(3)
    store = analysed_store(analysed_db)
    pool = [w for words in WORDS.values() for w in words] + ["the", "die", "和", "を"]
    for _ in range(40):
        query = " ".join(rng.sample(pool, rng.randint(1, 6)))
        hits = store.keyword(query)
        expected = fts5_bm25(analysed_db, query_terms(query, LANGUAGES))
        assert dict(zip(hits.ids.tolist(), np.asarray(hits.scores).tolist())) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------- end to end


def invoke(*args: str | Path) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def books(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Registry]]:
    """The legacy fixture's sources (en, de, fr, zh, ja) ingested by this mcpower as 'books'."""
    root = tmp_path_factory.mktemp("books")
    ingest(LEGACY / "source", root, IngestOptions(dataset_id="books"), embedder=FakeEmbedder())
    registry = Registry(root, embedder_factory=lambda model: FakeEmbedder(), allowed_models=[FakeEmbedder.model_name])
    yield root, registry
    registry.close()


@pytest.mark.parametrize(
    ("query", "path", "heading"),
    [
        ("硬链接和符号链接有什么区别", "zh/links.md", "链接 > 硬链接与符号链接"),
        ("フリーズしたプログラムを強制終了する", "ja/kill.md", "プロセスの管理 > 強制終了"),
        ("Welche Abhängigkeit fehlt beim Bauen?", "de/pakete.md", "Pakete bauen > Abhängigkeiten prüfen"),
        ("vérifier la dépendance", "fr/paquets.md", "Construire des paquets > Vérifier les dépendances"),
        ("symbolic link target renamed", "en/links.md", "Links > Symbolic links"),
    ],
)
def test_a_question_in_each_language_finds_its_section(
    books: tuple[Path, Registry], query: str, path: str, heading: str
) -> None:
    _, registry = books
    for mode in ("keyword", "hybrid"):
        best = search(registry, query, "books", mode=mode, top_k=3).results[0]
        assert (best.path, best.heading_path) == (path, heading), mode


def test_a_cjk_question_through_the_cli_finds_its_section_and_marks_its_words(
    books: tuple[Path, Registry], fake_embedder: FakeEmbedder
) -> None:
    root, _ = books
    result = CliRunner().invoke(
        app, ["search", "books", "硬链接和符号链接有什么区别", "--datasets-dir", str(root), "--json"]
    )

    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["results"][0]
    assert top["path"] == "zh/links.md" and "符号链接" in top["snippet"]


def test_a_dataset_built_before_analysis_is_searched_as_before_and_re_ingesting_analyses_it(
    tmp_path: Path, make_registry: Callable[[], Registry], fake_embedder: FakeEmbedder
) -> None:
    """tests/legacy/datasets was written by mcpower 7568930 (before languages), from tests/legacy/source."""
    root = tmp_path / "datasets"
    shutil.copytree(LEGACY / "datasets", root)
    registry = make_registry()

    validated = CliRunner().invoke(app, ["validate", "--datasets-dir", str(root)])
    old = search(registry, "硬链接和符号链接有什么区别", "legacy", mode="keyword")
    phrase = search(registry, "符号链接", "legacy", mode="keyword")
    porter = search(registry, "installing the links", "legacy", mode="keyword")
    info = read_manifest(root / "legacy" / "manifest.json")
    ingest(LEGACY / "source", root, IngestOptions(dataset_id="legacy", replace=True), embedder=FakeEmbedder())
    new = search(registry, "硬链接和符号链接有什么区别", "legacy", mode="keyword")

    assert validated.exit_code == 0, validated.output
    assert info.analysis is None and isinstance(info, DatasetInfo)
    assert old.results == []  # as before: a CJK run is a phrase that must appear verbatim
    assert phrase.results[0].path == "zh/links.md"  # ... and does when it does
    assert porter.results[0].path == "en/links.md"  # FTS5's Porter stems still serve its English
    assert new.results[0].path == "zh/links.md"  # analysed now: the question finds its section
    assert read_manifest(root / "legacy" / "manifest.json").analysis is not None


def test_a_mixed_language_dataset_finds_each_languages_words(tmp_path: Path, datasets_dir: Path) -> None:
    write_files(
        tmp_path / "mixed",
        {
            "handbuch.md": "# Handbuch\n\nDie Signaturen der hochgeladenen Pakete werden vom Archiv geprüft.\n",
            "guide.md": "# Guide\n\nThe archive checks the signatures of uploaded packages before it accepts them.\n",
            "guide-fr.md": "# Guide\n\nL'archive vérifie les signatures des paquets envoyés avant de les accepter.\n",
            "руководство.md": "# Руководство\n\nАрхив проверяет подписи загруженных пакетов перед их принятием.\n",
        },
    )
    ingest(tmp_path / "mixed", datasets_dir, IngestOptions(dataset_id="mixed"), embedder=FakeEmbedder())
    registry = Registry(
        datasets_dir, embedder_factory=lambda m: FakeEmbedder(), allowed_models=[FakeEmbedder.model_name]
    )

    def top(query: str) -> str:
        return search(registry, query, "mixed", mode="keyword", top_k=1).results[0].path

    assert set(read_manifest(datasets_dir / "mixed" / "manifest.json").counts.languages) >= {"de", "en", "fr", "ru"}
    assert top("Paket Signatur") == "handbuch.md"
    assert top("package signature") == "guide.md"
    assert top("paquet signature vérifiée") == "guide-fr.md"
    assert top("подпись пакета") == "руководство.md"
    registry.close()


def test_the_web_marks_stems_and_cjk_words_whole_and_old_datasets_as_before() -> None:
    from mcpower.web.text import highlight

    german = highlight("Die fertigen Pakete werden in das <Archiv> hochgeladen", "Paket Archiv", ["de", "en"])
    chinese = highlight("硬链接与符号链接的区别在于", "硬链接和符号链接有什么区别", ["zh"])
    legacy = highlight("Installing the packages", "install package", None)

    assert german == "Die fertigen <mark>Pakete</mark> werden in das &lt;<mark>Archiv</mark>&gt; hochgeladen"
    assert chinese == "<mark>硬链接</mark>与<mark>符号链接</mark>的<mark>区别</mark>在于"
    assert "<mark>" not in legacy  # whole words only, as FTS5's words were marked


# ---------------------------------------------------------------- chunks of CJK text


def per_character(texts: object) -> list[int]:
    return [len(t) for t in texts]  # type: ignore[attr-defined]


def test_a_cjk_chapter_title_alone_is_not_a_chunk() -> None:
    from mcpower.chunking import chunk_document

    # The chapter's body is its title again, as Debian's HTML manuals print it above the sections:
    # 12 characters, which counted as 12 words and made a chunk of its own.
    page = (
        "# 第6章\n\n第6章 パッケージのビルド\n\n## 6.1. 完全な（再）ビルド\n\n"
        + "パッケージを完全にビルドするには、次のコマンドを実行します。" * 3
        + "\n"
    )
    chunks = chunk_document(page, ".md", "build.md", per_character, 250, 32).chunks

    assert len(chunks) == 1 and "パッケージのビルド" in chunks[0].text and "コマンド" in chunks[0].text


def test_a_long_cjk_paragraph_is_cut_between_sentences_with_overlap_and_no_added_spaces() -> None:
    from mcpower.chunking import chunk_document

    sentences = [f"第{i}の文は" + "硬链接と符号链接" * (i % 3 + 1) + "について説明します。" for i in range(40)]
    paragraph = "".join(sentences)
    chunks = chunk_document(f"# 説明\n\n{paragraph}\n", ".md", "p.md", per_character, 160, 60).chunks

    assert len(chunks) > 3
    for chunk in chunks:
        body = chunk.text.removeprefix("# 説明\n\n")
        assert body in paragraph and body.endswith("。") and body.startswith("第")  # whole sentences
    for a, b in itertools.pairwise(chunks):
        assert a.text.rsplit("第", 1)[-1] in b.text  # the last sentence of one starts the next


@needs_milvus
def test_milvus_keyword_search_uses_the_same_analysis_and_finds_what_the_local_store_finds(
    milvus_catalog: Any, books: tuple[Path, Registry]
) -> None:
    _, local = books
    ingest(LEGACY / "source", milvus_catalog, IngestOptions(dataset_id="books"), embedder=FakeEmbedder())
    milvus = Registry(catalogs=[milvus_catalog], embedder_factory=lambda model: FakeEmbedder())
    queries = [
        "硬链接和符号链接有什么区别",
        "フリーズしたプログラムを強制終了する",
        "Welche Abhängigkeit fehlt beim Bauen?",
        "vérifier la dépendance",
        "symbolic link target renamed",
        "软件包签名",
    ]

    def tops(registry: Registry) -> list[tuple[str, str]]:
        return [
            (r.path, r.heading_path)
            for q in queries
            for r in search(registry, q, "books", mode="keyword", top_k=1, group="none").results
        ]

    found = tops(milvus)
    milvus.close()
    assert found == tops(local) and len(found) == len(queries)


def test_a_token_budget_holds_for_cjk_results(books: tuple[Path, Registry]) -> None:
    from mcpower.results import estimate_tokens

    _, registry = books
    whole = search(registry, "软件包签名 硬链接 强制终了 パッケージ", "books", mode="keyword", top_k=5)
    cut = search(registry, "软件包签名 硬链接 强制终了 パッケージ", "books", mode="keyword", top_k=5, max_tokens=200)

    assert estimate_tokens(whole.model_dump_json()) > 200
    assert cut.meta.estimated_tokens is not None and cut.meta.estimated_tokens <= 200
    assert estimate_tokens(cut.model_dump_json(exclude_none=True)) <= 200 * 1.1
    assert cut.meta.truncated and cut.results and cut.results[0].result_id == whole.results[0].result_id
