"""What an ingest is asked to do (:class:`IngestOptions`) and what it did (:class:`IngestReport`);
mcpower/ingestion.py runs it, and exports both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpower import embedding
from mcpower.defaults import DEFAULT_CHUNK_TOKENS, DEFAULT_OVERLAP
from mcpower.discover import DEFAULT_MAX_FILE_BYTES
from mcpower.duplicates import Duplicate
from mcpower.manifest import Origin, SourceInfo
from mcpower.plan import IngestPlan
from mcpower.results import ReindexCounts

__all__ = ["IngestOptions", "IngestReport"]


@dataclass(frozen=True)
class IngestOptions:
    """How to build a dataset; every field has the default `mcpower ingest` uses."""

    dataset_id: str | None = None  # default: the folder name as a slug
    name: str | None = None  # default: the folder name
    description: str | None = None  # default: the previous version's, else "Documents from <name>"
    # None: the previous version's model, else the one the documents' languages call for
    # (model_choice.py: all-MiniLM-L6-v2 for English, multilingual-e5-small for the rest).
    model: str | None = None
    # The prompts put before each query and document text; None: the model's own (its folder's
    # config_sentence_transformers.json), else the previous version's if it used this model.
    query_prompt: str | None = None
    document_prompt: str | None = None
    # None: the previous version's backend if it used the same model (an int8 dataset stays int8: its
    # vectors are compared only with vectors of its own precision), else DEFAULT_BACKEND.
    backend: str | None = None
    cache_dir: Path | None = None  # where ONNX exports are cached (default: config.default_cache_dir())
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS
    overlap: int = DEFAULT_OVERLAP
    include: Sequence[str] = ()
    exclude: Sequence[str] = ()
    code: bool = False  # also read source code (.py, .js, .go ...); an include glob naming a suffix does too
    keep_site_files: bool = False  # read a built site's furniture too (_sources, genindex ...: mcpower/sites.py)
    keep_duplicates: bool = False  # index a text another document holds too (mcpower/duplicates.py)
    follow_symlinks: bool = False
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    default_top_k: int | None = None  # default: the previous version's, else DEFAULT_TOP_K
    full: bool = False  # re-embed everything: nothing carried over, nothing taken from the embedding store
    dry_run: bool = False  # read, chunk and plan, but embed nothing (a timed sample aside) and publish nothing
    # The embedding store's limit (mcpower/embedding/store.py); 0: none. Off for a caller of the
    # library that does not ask for it (it lives in the user's cache folder); `mcpower ingest` and the
    # watcher pass MCPOWER_EMBEDDING_STORE_MB (DEFAULT_EMBEDDING_STORE_MB unless set).
    embedding_store_mb: float = 0.0
    wait: bool = False  # wait for another ingest of the dataset instead of failing
    # Publish nothing when no file was added, changed, removed or touched and no option changed: a
    # re-ingest (or a watcher's save) that changed nothing must not make a new version.
    skip_unchanged: bool = True
    # Rebuild the dataset from ``source`` even if it was built from another folder (without it,
    # that is an error: a folder name used twice must not silently replace the other dataset).
    replace: bool = False
    # The documents' language (an ISO 639 code, 'zh-CN' and 'DE' accepted): every chunk is taken
    # to be in it and nothing is detected; "auto" detects each chunk's; None: as the previous
    # version recorded (a forced language is kept by re-ingests and --watch), else "auto".
    language: str | None = None
    # Recorded as the source's options instead of the ones above (the watcher re-ingests within its
    # operator's limits, and keeps the record as the dataset's owner made it: watch/limits.py).
    source_record: SourceInfo | None = None
    # A fetched source (mcpower/sources/): where the folder came from, recorded with it.
    origin: Origin | None = None


@dataclass
class IngestReport:
    """What an ingest did, for the CLI summary and for tests."""

    dataset_id: str
    location: str  # where the dataset lives (its folder, for the local store)
    documents: int = 0
    chunks: int = 0
    embedded: int = 0  # chunks embedded in this run (the rest: carried over, or from the embedding store)
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    duplicates: list[Duplicate] = field(default_factory=list)  # files not indexed: another document holds them
    plan: IngestPlan = field(default_factory=IngestPlan)  # what it would do (a dry run) or did
    file_notes: list[tuple[str, str]] = field(default_factory=list)  # (relative path, how it was read)
    full_rebuild: bool = True
    rebuild_reason: str = ""
    seconds: float = 0.0
    # Each phase's own time (the total is ``seconds``): loading the model (a first ONNX export
    # included), waiting for another ingest (--wait), reading and chunking, embedding, writing.
    model_seconds: float = 0.0
    wait_seconds: float = 0.0
    read_seconds: float = 0.0
    embed_seconds: float = 0.0
    write_seconds: float = 0.0
    touched: int = 0  # unchanged content, but another size or modification time: recorded anew
    published: bool = True  # False when skip_unchanged found nothing to publish, and for a dry run
    notes: list[str] = field(default_factory=list)  # worth telling the user, not errors
    languages: dict[str, int] = field(default_factory=dict)  # chunks per language, as published
    language: str | None = None  # the language forced for every chunk, if one was (--language)
    model: str = ""  # the embedding model the dataset is built with
    model_reason: str = ""  # why that one, when it was chosen rather than named (model_choice.py)
    # The model loaded for this ingest, for a caller that goes on using it (`ingest --watch`).
    embedder: embedding.Embedder | None = field(default=None, repr=False, compare=False)
    fetch: Any = None  # a fetched source's report (sources.crawl.CrawlReport, sources.git.GitReport)

    def changes(self) -> ReindexCounts:
        """What this ingest changed, as a watcher reports its last re-index."""
        return ReindexCounts(
            added=self.added,
            changed=self.changed,
            removed=self.removed,
            embedded=self.embedded,
            seconds=round(self.seconds, 2),
        )

    @property
    def chunks_per_second(self) -> float:
        """Embedding speed: chunks embedded per second of the embedding phase alone."""
        return self.embedded / self.embed_seconds if self.embed_seconds else 0.0

    def phases(self) -> dict[str, float]:
        """Seconds per phase, for reports: model, waiting, reading, embedding, writing."""
        return {
            "model": self.model_seconds,
            "waiting": self.wait_seconds,
            "reading": self.read_seconds,
            "embedding": self.embed_seconds,
            "writing": self.write_seconds,
        }
