"""Any sentence-transformers model folder works properly: the prompts its texts need are read from it,
put before queries and passages, recorded with the dataset and used by its searches; the languages
its card names are its record too. Fast tests use the shared backend code over a folder made here;
the slow ones run a tiny random BERT on ONNX Runtime and on torch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from model_fixtures import RecordingEmbedder, add_random_weights, model_folder

from mcpower import embedding
from mcpower.embedding import resolve_model, with_prompts
from mcpower.errors import EmbeddingModelError
from mcpower.ingestion import IngestOptions, fit_window, ingest
from mcpower.manifest import read_manifest
from mcpower.registry import Registry
from mcpower.search import search

E5_PROMPTS = {"query": "query: ", "passage": "passage: "}
CARD = "---\nlanguage:\n- en\n- de\nlicense: mit\n---\n\n# A tiny model\n"


def recording(folder: Path) -> RecordingEmbedder:
    return RecordingEmbedder(resolve_model(str(folder)))


@pytest.mark.parametrize(
    ("prompts", "default", "expected"),
    [
        (E5_PROMPTS, None, ("query: ", "passage: ")),
        ({"query": "q: ", "document": "d: ", "passage": "p: "}, None, ("q: ", "d: ")),  # encode_document's order
        ({"query": "q: ", "corpus": "c: "}, None, ("q: ", "c: ")),
        ({"retrieval": "Represent this: "}, "retrieval", ("Represent this: ", "Represent this: ")),
        ({"retrieval": "Represent this: ", "query": "q: "}, "retrieval", ("q: ", "Represent this: ")),
        ({"query": "q: "}, None, ("q: ", "")),
        ({}, None, ("", "")),
        (None, None, ("", "")),  # no config_sentence_transformers.json at all
    ],
)
def test_prompts_are_read_as_sentence_transformers_reads_them(
    tmp_path: Path, prompts: dict[str, str] | None, default: str | None, expected: tuple[str, str]
) -> None:
    spec = resolve_model(str(model_folder(tmp_path / "m", prompts, default)))
    assert (spec.query_prompt, spec.document_prompt) == expected


@pytest.mark.parametrize("prompt", [5, "x" * 257])
def test_a_prompt_that_is_not_short_text_is_refused(tmp_path: Path, prompt: object) -> None:
    folder = model_folder(tmp_path / "m", {"query": prompt})  # type: ignore[dict-item]
    with pytest.raises(EmbeddingModelError, match="prompt 'query'"):
        resolve_model(str(folder))


@pytest.mark.parametrize(
    ("card", "expected"),
    [
        (CARD, {"en", "de"}),
        ("---\nlanguage: en\nlicense: apache-2.0\n---\n", {"en"}),
        ("---\nlanguage: [fr, 'ja']\n---\n", {"fr", "ja"}),
        ("---\nlanguage:\n- multilingual\n---\n", None),  # names no language
        ("---\nlicense: mit\n---\n", None),
        ("# no front matter\n\nlanguage: en\n", None),
        (None, None),
    ],
)
def test_the_model_card_names_the_languages_it_reads(tmp_path: Path, card: str | None, expected: set[str]) -> None:
    assert resolve_model(str(model_folder(tmp_path / "m", card=card))).languages == (
        frozenset(expected) if expected else None
    )


def test_prompts_are_put_before_passages_and_queries_and_not_counted(tmp_path: Path) -> None:
    emb = recording(model_folder(tmp_path / "m", E5_PROMPTS))
    vectors = emb.embed_documents(["install the daemon", "the widget"])
    emb.embed_query("boot the widget")
    assert sorted(emb.seen) == ["passage: install the daemon", "passage: the widget", "query: boot the widget"]
    assert vectors.shape == (2, 32)
    assert emb.count_tokens(["install the daemon"]) == [3]  # what a chunk's budget counts: its text alone
    other = with_prompts(emb, "search_query: ", "")
    other.embed_query("boot")
    other.embed_documents(["widget"])
    assert emb.seen[-2:] == ["search_query: boot", "widget"]
    assert emb.query_prompt == "query: "  # the view has its own prompts, the model is shared


def test_the_prompt_takes_its_tokens_from_the_window() -> None:
    assert fit_window(250, 32, 256) == (250, 32)
    assert fit_window(250, 32, 256, prompt_tokens=10) == (244, 31)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "install.md").write_text("# Install\n\nInstall the zephyrine daemon, it starts on boot.\n")
    (root / "widget.md").write_text("# Widget\n\nThe widget of the toolkit.\n")
    return root


def test_the_dataset_records_its_prompts_and_its_searches_use_them(tmp_path: Path, docs: Path) -> None:
    folder = model_folder(tmp_path / "m", E5_PROMPTS, card=CARD)
    emb = recording(folder)
    datasets = tmp_path / "datasets"
    opts = IngestOptions(dataset_id="docs", model=str(folder), query_prompt="search_query: ")
    ingest(docs, datasets, opts, embedder=emb)
    record = read_manifest(datasets / "docs" / "manifest.json").embedding
    assert (record.query_prompt, record.document_prompt) == ("search_query: ", "passage: ")
    assert record.languages == ("de", "en")
    assert emb.seen and all(text.startswith("passage: ") for text in emb.seen)

    # A search loads the model as its folder says (query: ), and embeds with the dataset's prompt.
    searcher = recording(folder)
    registry = Registry(datasets, embedder_factory=lambda model: searcher, cache_dir=tmp_path / "cache")
    assert search(registry, "zephyrine daemon", "docs").results
    assert searcher.seen == ["search_query: zephyrine daemon"]


def test_a_reingest_keeps_the_prompts_and_other_prompts_rebuild(tmp_path: Path, docs: Path) -> None:
    folder = model_folder(tmp_path / "m", E5_PROMPTS)
    datasets = tmp_path / "datasets"
    first = IngestOptions(dataset_id="docs", model=str(folder), document_prompt="doc: ")
    ingest(docs, datasets, first, embedder=recording(folder))
    (docs / "widget.md").write_text("# Widget\n\nThe widget of the toolkit, now blue.\n")
    again = ingest(docs, datasets, IngestOptions(dataset_id="docs", model=str(folder)), embedder=recording(folder))
    assert not again.full_rebuild and again.embedded >= 1  # the prompts as recorded: vectors reused
    assert read_manifest(datasets / "docs" / "manifest.json").embedding.document_prompt == "doc: "
    other = IngestOptions(dataset_id="docs", model=str(folder), document_prompt="passage: ")
    rebuilt = ingest(docs, datasets, other, embedder=recording(folder))
    assert rebuilt.full_rebuild and rebuilt.rebuild_reason == "the model or chunking settings changed"


def test_a_dataset_without_prompts_keeps_its_fingerprint(tmp_path: Path, docs: Path) -> None:
    """Datasets built before prompts existed are not rebuilt for them by the next ingest."""
    folder = model_folder(tmp_path / "m")
    datasets = tmp_path / "datasets"
    ingest(docs, datasets, IngestOptions(dataset_id="docs", model=str(folder)), embedder=recording(folder))
    manifest = read_manifest(datasets / "docs" / "manifest.json")
    assert "queryPrompt" not in manifest.to_json()
    import hashlib

    from mcpower.chunking import CHUNKER

    spec = resolve_model(str(folder))
    key = f"{spec.fingerprint}|{spec.dimension}|fp32|{CHUNKER}|{manifest.chunking.chunk_tokens}|{manifest.chunking.overlap}"
    assert manifest.fingerprint == hashlib.sha256(key.encode()).hexdigest()[:32]


# --- slow: a tiny random BERT on the real backends ----------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The same random weights twice: with E5's prompts, and without any."""
    root = tmp_path_factory.mktemp("tiny")
    with_ = model_folder(root / "prompted", E5_PROMPTS)
    add_random_weights(with_)
    plain = model_folder(root / "plain")
    for f in with_.iterdir():
        if f.is_file() and f.name not in ("config_sentence_transformers.json",) and not (plain / f.name).exists():
            (plain / f.name).write_bytes(f.read_bytes())
    return with_, plain


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_a_real_model_embeds_with_its_prompts(tiny_bert: tuple[Path, Path], tmp_path: Path, backend: str) -> None:
    prompted = embedding.load_embedder(str(tiny_bert[0]), backend, tmp_path)
    plain = embedding.load_embedder(str(tiny_bert[1]), backend, tmp_path)
    assert (prompted.query_prompt, prompted.document_prompt) == ("query: ", "passage: ")
    np.testing.assert_allclose(
        prompted.embed_query("install the daemon"), plain.embed_query("query: install the daemon"), atol=1e-5
    )
    docs = prompted.embed_documents(["the widget", "boot"])
    np.testing.assert_allclose(docs, plain.embed_documents(["passage: the widget", "passage: boot"]), atol=1e-5)
    assert not np.allclose(docs[0], plain.embed_documents(["the widget"])[0], atol=1e-3)  # the prompt matters
