"""Languages: each chunk's language detected at ingest (or forced with --language), recorded in
every store and in the manifest, and shown by `mcpower datasets` and knowledge_list_datasets."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, write_files
from milvus_fixtures import needs_milvus
from typer.testing import CliRunner, Result

from mcpower.analysis import chunk_languages, detect, normalize_language
from mcpower.cli.app import app
from mcpower.errors import IngestError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import read_manifest
from mcpower.registry import Registry
from mcpower.search import search

# Real sentences, as the manuals these languages are searched in say them.
SENTENCES = {
    "en": "The package maintainer uploads a new version of the package to the archive.",
    "de": "Der Paketbetreuer lädt eine neue Version des Pakets in das Archiv hoch.",
    "fr": "Le responsable du paquet envoie une nouvelle version du paquet dans l'archive.",
    "es": "El responsable del paquete sube una nueva versión del paquete al archivo.",
    "it": "Il manutentore del pacchetto carica una nuova versione del pacchetto nell'archivio.",
    "pt": "O mantenedor do pacote envia uma nova versão do pacote para o arquivo.",
    "nl": "De pakketbeheerder uploadt een nieuwe versie van het pakket naar het archief.",
    "sv": "Paketansvarig laddar upp en ny version av paketet till arkivet.",
    "ru": "Сопровождающий пакета загружает новую версию пакета в архив.",
    "ja": "パッケージのメンテナはパッケージの新しいバージョンをアーカイブにアップロードします。",
    "zh": "软件包维护者将软件包的新版本上传到归档中。",
    "ko": "패키지 관리자는 패키지의 새 버전을 아카이브에 업로드합니다.",
}

GERMAN_CHAPTER = """# Pakete bauen

Bevor Sie ein Paket bauen, prüfen Sie, ob alle Abhängigkeiten installiert sind. Das Werkzeug
dpkg-checkbuilddeps meldet fehlende Bauabhängigkeiten und bricht den Bau ab.

## Zusammenfassung

Kurz.

## Upload

This section has not been translated yet. Upload the package with dput once the signature has
been checked, and watch the archive's mail for the acceptance message.
"""

JAPANESE_PAGE = """# 強制終了

フリーズしたプログラムを強制終了するには、別の端末から kill コマンドを使います。
応答しないプロセスには、シグナル KILL を送ることができます。
"""

ENGLISH_PAGE = """# Hard links

A hard link is another name for the same file; removing one name leaves the others working.
Symbolic links instead point to a path and break when the target is removed.
"""


@pytest.mark.parametrize("code", sorted(SENTENCES))
def test_each_language_is_detected_from_one_sentence(code: str) -> None:
    found = detect(SENTENCES[code])

    assert found.language == code and found.confidence >= 0.5


@pytest.mark.parametrize(
    "text",
    [
        "Siehe",  # a word: too little to tell
        "```\nfoo_bar(x) == baz.qux[0]\n```\n/usr/bin/dh_make --native $HOME",  # only code and a path
        "",
    ],
)
def test_text_too_short_or_only_code_is_undetermined(text: str) -> None:
    assert detect(text).language == "und"


def test_a_kanji_heavy_japanese_sentence_is_japanese_not_chinese() -> None:
    assert detect("設定ファイルを編集して再起動する").language == "ja"
    assert detect("硬链接和符号链接有什么区别").language == "zh"


def test_a_partly_translated_document_keeps_each_chunks_language() -> None:
    chunks = [
        "Bevor Sie ein Paket bauen, prüfen Sie, ob alle Abhängigkeiten installiert sind.",
        "Kurz.",  # too short alone: the document's language
        "This section has not been translated yet; upload the package with dput.",
        "Das Werkzeug meldet fehlende Bauabhängigkeiten und bricht den Bau des Pakets ab.",
    ]

    assert chunk_languages(chunks) == ["de", "de", "en", "de"]
    assert chunk_languages(chunks, forced="fr") == ["fr"] * 4


def test_language_codes_as_people_type_them() -> None:
    assert [normalize_language(c) for c in ("DE", "zh-CN", "pt_BR", "jp", "klingon", "xx")] == [
        "de",
        "zh",
        "pt",
        "ja",
        None,
        None,
    ]


# ---------------------------------------------------------------- ingest


def mixed(root: Path) -> Path:
    return write_files(root, {"de/bauen.md": GERMAN_CHAPTER, "ja/kill.md": JAPANESE_PAGE, "en/links.md": ENGLISH_PAGE})


def chunk_languages_in(registry: Registry, dataset: str) -> dict[str, set[str]]:
    store = registry.store(dataset)
    out: dict[str, set[str]] = {}
    for doc, chunks in store.iter_documents():
        out[doc.path] = {c.language for c in chunks}
    return out


def test_ingest_records_each_chunks_language_and_the_datasets_languages(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    report = ingest(mixed(tmp_path / "m"), datasets_dir, IngestOptions(dataset_id="m"), embedder=FakeEmbedder())
    manifest = read_manifest(datasets_dir / "m" / "manifest.json")
    registry = make_registry()

    by_path = chunk_languages_in(registry, "m")
    hit = search(registry, "dput", "m", mode="keyword").results[0]
    summary = next(e.summary() for e in registry.entries() if e.id == "m")

    assert by_path["ja/kill.md"] == {"ja"} and by_path["en/links.md"] == {"en"}
    assert by_path["de/bauen.md"] >= {"de", "en"}  # the untranslated section is English
    assert report.languages == manifest.counts.languages == summary.languages
    assert set(manifest.counts.languages) >= {"de", "en", "ja"}
    assert sum(manifest.counts.languages.values()) == manifest.counts.chunks
    assert manifest.analysis is not None and manifest.analysis.language is None  # detected, not forced
    chunk = int(hit.result_id.split(":")[1], 16)
    assert registry.store("m").chunks([chunk])[chunk].language == "en"


def invoke(*args: str | Path) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.usefixtures("fake_embedder")
def test_language_forced_on_the_command_line_is_kept_by_re_ingests_until_auto(
    tmp_path: Path, datasets_dir: Path
) -> None:
    src = mixed(tmp_path / "m")
    manifest_path = datasets_dir / "m" / "manifest.json"

    forced = invoke("ingest", src, "--id", "m", "--datasets-dir", datasets_dir, "--language", "FR", "-q")
    (src / "more.md").write_text("# Plus\n\nEncore un paragraphe sur les paquets et leur construction.\n")
    again = invoke("ingest", src, "--id", "m", "--datasets-dir", datasets_dir, "-q", "--json")
    kept = read_manifest(manifest_path)
    auto = invoke("ingest", src, "--id", "m", "--datasets-dir", datasets_dir, "--language", "auto", "-q", "--json")
    detected = read_manifest(manifest_path)
    listing = invoke("datasets", "--datasets-dir", datasets_dir)

    assert forced.exit_code == 0, forced.output
    assert "languages (chunks): fr " in forced.stdout and "(set with --language fr)" in forced.stdout
    assert json.loads(again.stdout)["language"] == "fr"
    assert kept.analysis is not None and kept.analysis.language == "fr"
    assert list(kept.counts.languages) == ["fr"]
    # auto: every chunk detected again, carried over without being embedded again
    assert json.loads(auto.stdout)["embedded"] == 0 and json.loads(auto.stdout)["language"] is None
    assert detected.analysis is not None and detected.analysis.language is None
    assert set(detected.counts.languages) >= {"de", "en", "ja", "fr"}
    assert "languages (chunks): " in listing.stdout and "ja " in listing.stdout


@pytest.mark.usefixtures("fake_embedder")
def test_an_unknown_language_is_one_error_line_naming_what_to_pass(tmp_path: Path, datasets_dir: Path) -> None:
    result = invoke("ingest", mixed(tmp_path / "m"), "--datasets-dir", datasets_dir, "--language", "klingon")

    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.startswith("Error: --language 'klingon': not a language code") and "auto" in result.stderr
    assert "Traceback" not in result.output and not (datasets_dir / "m").exists()


def test_a_missing_detector_model_is_an_ingest_error_that_says_how_to_fix_it(
    tmp_path: Path, datasets_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mcpower.analysis import detection as detect_module

    monkeypatch.setattr(detect_module, "_loaded", [])
    monkeypatch.setattr(detect_module, "MODEL_FILE", ("resources", "missing.ftz"))

    with pytest.raises(IngestError, match=r"language detector cannot be loaded.*--language CODE"):
        ingest(mixed(tmp_path / "m"), datasets_dir, IngestOptions(dataset_id="m"), embedder=FakeEmbedder())
    assert not (datasets_dir / "m").exists()
    # forced, nothing is detected: the ingest needs no model
    ingest(mixed(tmp_path / "m"), datasets_dir, IngestOptions(dataset_id="m", language="de"), embedder=FakeEmbedder())


def test_a_dataset_written_before_languages_loads_as_undetermined_and_a_re_ingest_labels_it(
    tmp_path: Path, datasets_dir: Path, make_registry: Callable[[], Registry]
) -> None:
    src = mixed(tmp_path / "m")
    ingest(src, datasets_dir, IngestOptions(dataset_id="old"), embedder=FakeEmbedder())
    manifest_path = datasets_dir / "old" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    db_path = datasets_dir / "old" / manifest["metadata"]
    with sqlite3.connect(db_path) as db:  # the chunks table as it was before languages
        db.execute("ALTER TABLE chunks DROP COLUMN language")
    db.close()
    manifest["checksums"]["metadata"] = hashlib.sha256(db_path.read_bytes()).hexdigest()
    del manifest["counts"]["languages"], manifest["analysis"]
    manifest_path.write_text(json.dumps(manifest))

    registry = make_registry()
    hit = search(registry, "kill", "old", mode="keyword").results[0]
    summary = next(e.summary() for e in registry.entries() if e.id == "old")
    before = chunk_languages_in(registry, "old")
    relabelled = ingest(src, datasets_dir, IngestOptions(dataset_id="old"), embedder=FakeEmbedder())

    assert hit.path == "ja/kill.md" and summary.languages is None
    assert before["ja/kill.md"] == {"und"}
    assert relabelled.published and relabelled.embedded == 0  # labelled without embedding again
    assert set(relabelled.languages) >= {"de", "en", "ja"}


@needs_milvus
def test_milvus_keeps_each_chunks_language_through_a_re_ingest(milvus_catalog: Any, tmp_path: Path) -> None:
    src = mixed(tmp_path / "m")
    first = ingest(src, milvus_catalog, IngestOptions(dataset_id="m"), embedder=FakeEmbedder())
    (src / "en/links.md").write_text(ENGLISH_PAGE + "\nA third kind, the reflink, shares blocks until written.\n")
    again = ingest(src, milvus_catalog, IngestOptions(dataset_id="m"), embedder=FakeEmbedder())
    registry = Registry(catalogs=[milvus_catalog], embedder_factory=lambda model: FakeEmbedder())

    by_path = chunk_languages_in(registry, "m")
    hit = search(registry, "kill", "m", mode="keyword").results[0]
    chunk = int(hit.result_id.split(":")[1], 16)

    assert again.unchanged == 2  # the German and Japanese pages were carried over from the engine
    assert by_path["ja/kill.md"] == {"ja"} and by_path["en/links.md"] == {"en"} and "de" in by_path["de/bauen.md"]
    assert registry.store("m").chunks([chunk])[chunk].language == "ja"
    assert again.languages == first.languages | {"en": again.languages["en"]}
    assert next(e.summary() for e in registry.entries() if e.id == "m").languages == again.languages
    registry.close()
