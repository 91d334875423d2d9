"""Serving a dataset of the original format: read, verified, and loaded into the local store's
in-memory form.

What mcpower needs and the format lacks is built at load, in memory: an SQLite database with the
documents, chunks, the FTS5 index and the BM25 postings (the local store's own code, so keyword
and hybrid search score exactly as they do on an ingested dataset), and a FAISS index keyed by
chunk ids over the dataset's own vectors, unchanged (so semantic search computes the inner
products the original system computed). The result is a :class:`LocalStore`: every search and
lookup is the local store's. Nothing is written to disk; ``mcpower import`` writes the same build
as a dataset of mcpower's format.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from mcpower.checksums import FileHashes
from mcpower.errors import DatasetUnavailableError
from mcpower.manifest import DatasetInfo, read_manifest_json
from mcpower.store import DatasetBuild
from mcpower.store.local.build import fill_metadata, vector_index
from mcpower.store.local.keyword import chunk_ids
from mcpower.store.local.store import LocalStore
from mcpower.store.original.files import OriginalDataset, read_dataset, read_vectors
from mcpower.store.original.info import OriginalInfo, describe
from mcpower.store.original.rows import build_rows


def open_original(folder: Path, info: OriginalInfo, hashes: FileHashes | None = None) -> LocalStore:
    """Load the dataset ``info`` describes (as the catalog read it) into memory.

    Raises:
        DatasetUnavailableError (and subclasses): a file is malformed, or they disagree, or the
            dataset changed since ``info`` was read (the registry then reads it again).
    """
    ds = read_dataset(folder, read_manifest_json(folder / "manifest.json"))
    if describe(ds, hashes) != info:
        raise DatasetUnavailableError(f"{info.id}: changed while it was being loaded; try again")
    return in_memory(original_build(ds, info), folder)


def original_build(ds: OriginalDataset, info: DatasetInfo, vectors: np.ndarray | None = None) -> DatasetBuild:
    """The dataset as a :class:`DatasetBuild` described by ``info``: its records as documents and
    chunks, with its own vectors (read and checked here) or ``vectors`` (one row per record).

    Raises:
        IndexMismatchError: the vectors are not finite unit vectors, or the FAISS file changed.
    """
    own = read_vectors(ds) if vectors is None else vectors  # read (and refused) before the rows are built
    rows = build_rows(ds.records, ds.updated_at)
    order = np.asarray(rows.record_of, dtype=np.intp)
    if np.array_equal(order, np.arange(len(order))):  # records already grouped by path: no copy
        return DatasetBuild(info, rows.documents, rows.chunks, np.ascontiguousarray(own))
    return DatasetBuild(info, rows.documents, rows.chunks, np.ascontiguousarray(own[order]))


def in_memory(build: DatasetBuild, folder: Path) -> LocalStore:
    """A local store over ``build``, held in memory: an SQLite database and a flat (exact) FAISS index."""
    db = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        fill_metadata(db, build.documents, build.chunks, analysed=False)  # served exactly as it always was
        db.commit()
    except sqlite3.Error as e:  # pragma: no cover - the rows were checked; memory may run out
        db.close()
        raise DatasetUnavailableError(f"{build.info.id}: cannot build its keyword index in memory ({e})") from e
    ids = np.asarray([c.id for c in build.chunks], dtype=np.int64)
    index, _ = vector_index(ids, build.vectors, exact=True)
    return LocalStore(build.info, folder, index, db, chunk_ids(db), postings=True)
