"""``mcpower import``: a dataset of the original format converted into one of mcpower's format.

The conversion is the build the original store serves (store.py), published through a catalog
like any ingest: under the dataset's write lock, crash-safe (a crash leaves whatever was there
before, serving). Chunks, titles and paths are kept; the stored vectors are kept too when their
model is the packaged one, else (or with ``re_embed``) the chunks are embedded again.

Imported into the folder it came from, the dataset is upgraded in place: mcpower's manifest
replaces the original one (kept beside it as ``manifest.original.json``), and the original files
stay where they are, unused.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from mcpower import __version__
from mcpower.analysis import SCHEME, chunk_languages, undetermined_as
from mcpower.checksums import FileHashes
from mcpower.defaults import DEFAULT_BACKEND, DEFAULT_MODEL, precision_of
from mcpower.errors import IndexMismatchError, IngestError, InvalidManifestError
from mcpower.layout import VERSION_PREFIX, fsync_path
from mcpower.manifest import (
    MANIFEST_NAME,
    MAX_LANGUAGES,
    AnalysisInfo,
    DatasetInfo,
    EmbeddingInfo,
    Manifest,
    is_valid_id,
    now_utc,
    read_manifest_json,
)
from mcpower.store import Catalog, DatasetBuild
from mcpower.store.original.files import OriginalDataset, is_original_manifest, read_dataset, read_vectors
from mcpower.store.original.info import (
    ORIGINAL_CHUNKING,
    QueryModel,
    fingerprint,
    original_counts,
    query_model,
    shown_model,
)
from mcpower.store.original.store import original_build

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

BACKUP_NAME = "manifest.original.json"  # the original manifest, kept when a dataset is upgraded in place


@dataclass(frozen=True)
class ImportReport:
    """What an import did."""

    dataset_id: str
    location: str  # where the dataset now lives
    documents: int
    chunks: int
    embedded: int  # chunks embedded again (0: the stored vectors were kept)
    reason: str  # why they were embedded again ('' when they were not)
    in_place: bool  # the dataset's own folder was upgraded
    seconds: float


def import_original(
    source: Path,
    target: Path | Catalog,
    dataset_id: str | None = None,
    *,
    re_embed: bool = False,
    backend: str = DEFAULT_BACKEND,
    cache_dir: Path | None = None,
    wait: bool = False,
) -> ImportReport:
    """Convert the original-format dataset in the folder ``source`` into a dataset of ``target``
    (a datasets folder or a catalog), under ``dataset_id`` (default: the id in its manifest).

    Raises:
        IngestError: ``source`` is not such a dataset, the id is taken, or the disk is full.
        DatasetUnavailableError (and subclasses): its files are malformed or disagree.
        DatasetLockedError: another writer holds the dataset.
        EmbeddingModelError: the chunks must be embedded again and the model cannot be loaded.
    """
    from mcpower.store.local import LocalCatalog

    started = time.perf_counter()
    src = source.expanduser()
    ds = read_dataset(src, _original_manifest(src))
    ds_id = dataset_id if dataset_id is not None else ds.id
    if not is_valid_id(ds_id):
        raise IngestError(f"invalid dataset id {ds_id[:80]!r}: use 1-64 lowercase letters, digits and hyphens (--id)")
    catalog = LocalCatalog(target) if isinstance(target, Path) else target
    location = catalog.location(ds_id)
    in_place = Path(location).resolve() == src.resolve()
    if in_place and any(
        PurePosixPath(p).parts[0].startswith(VERSION_PREFIX) for p in (ds.index_file, ds.manifest.metadata)
    ):
        raise IngestError(
            f"{ds.id}: its files live in a folder named {VERSION_PREFIX}…, as mcpower's versions do, so it "
            "cannot be upgraded in place; pass --id to import it beside itself"
        )
    info, vectors, reason = _vectors(ds, ds_id, re_embed, backend, cache_dir)
    build = _with_languages(original_build(ds, info, vectors))
    with catalog.lock(ds_id, wait):
        existing = catalog.current(ds_id)
        if existing is not None:
            existing.close()
        if existing is not None or (not in_place and (Path(location) / MANIFEST_NAME).exists()):
            raise IngestError(
                f"dataset {ds_id!r} already exists in {location}; pass --id to import under another id, "
                "or remove that dataset first"
            )
        if in_place:
            _backup_manifest(src)
        published = catalog.publish(build)
    return ImportReport(
        dataset_id=ds_id,
        location=location,
        documents=published.counts.documents,
        chunks=published.counts.chunks,
        embedded=len(build.chunks) if reason else 0,
        reason=reason,
        in_place=in_place,
        seconds=time.perf_counter() - started,
    )


def _original_manifest(src: Path) -> dict[str, object]:
    if not (src / MANIFEST_NAME).is_file():
        raise IngestError(
            f"{src}: no {MANIFEST_NAME} there; pass the folder of a dataset in the original system's format"
        )
    data = read_manifest_json(src / MANIFEST_NAME)
    if is_original_manifest(data):
        return data
    try:
        Manifest.model_validate(data)
    except ValueError:
        raise InvalidManifestError(
            f"{src.name}/{MANIFEST_NAME}: neither the original system's format (exactly id, name, description, "
            "index, metadata and defaultTopK) nor mcpower's"
        ) from None
    raise IngestError(f"{src.name}: already in mcpower's format; there is nothing to import")


def _vectors(
    ds: OriginalDataset, ds_id: str, re_embed: bool, backend: str, cache_dir: Path | None
) -> tuple[DatasetInfo, NDArray[np.float32], str]:
    """The imported dataset's info, its vectors (one row per record) and why they were embedded again."""
    from mcpower import embedding

    model = query_model(ds.model, FileHashes(cache_dir))
    reason = ""
    if re_embed:
        reason = "--re-embed"
    elif model is None:
        reason = f"its model {shown_model(ds.model)!r} is not available offline here"
    elif model.dimension != ds.dimension:
        reason = f"its {ds.dimension}-dimensional vectors were not made by {shown_model(ds.model)!r}"
    vectors: NDArray[np.float32]
    if not reason and model is not None:
        try:
            vectors = read_vectors(ds)
        except IndexMismatchError as e:
            raise IndexMismatchError(f"{e.message}; `mcpower import --re-embed` embeds the chunks again") from e
        backend_used, precision = "torch", "fp32"  # the original indexer ran sentence-transformers
    else:
        emb = embedding.load_embedder(DEFAULT_MODEL, backend, cache_dir)
        vectors = emb.embed_documents([r.content for r in ds.records])
        model = QueryModel(emb.model_name, emb.dimension, emb.max_tokens, emb.model_fingerprint)
        backend_used, precision = emb.backend, precision_of(emb.backend)
    now = now_utc()
    m = ds.manifest
    info = DatasetInfo(
        id=ds_id,
        name=m.name,
        description=m.description,
        default_top_k=m.default_top_k,
        embedding=EmbeddingInfo.model_validate(
            {
                "model": model.name,
                "backend": backend_used,
                "dimension": model.dimension,
                "max_tokens": model.max_tokens,
                "model_fingerprint": model.fingerprint,
            }
        ),
        chunking=ORIGINAL_CHUNKING,
        fingerprint=fingerprint(model, precision),
        counts=original_counts(ds),
        created_at=ds.created_at,
        updated_at=now,
        mcpower_version=__version__,
    )
    return info, vectors, reason


def _with_languages(build: DatasetBuild) -> DatasetBuild:
    """The build with each chunk's language detected, as an ingest gives it (mcpower.analysis)."""
    by_doc: dict[int, list[int]] = {}
    for i, c in enumerate(build.chunks):
        by_doc.setdefault(c.document_id, []).append(i)
    chunks = list(build.chunks)
    for members in by_doc.values():
        for i, lang in zip(members, chunk_languages([chunks[i].text for i in members])):
            chunks[i] = dataclasses.replace(chunks[i], language=lang)
    counts = build.info.counts.model_copy(
        update={"languages": dict(Counter(c.language for c in chunks).most_common(MAX_LANGUAGES))}
    )
    analysis = AnalysisInfo(scheme=SCHEME, undetermined=undetermined_as(counts.languages))
    info = build.info.model_copy(update={"counts": counts, "analysis": analysis})
    return dataclasses.replace(build, info=info, chunks=chunks)


def _backup_manifest(folder: Path) -> None:
    """Keep the original manifest beside the new one (written whole, then renamed into place)."""
    data = (folder / MANIFEST_NAME).read_bytes()
    tmp = folder / f".{MANIFEST_NAME}.original.{os.getpid()}.tmp"  # a leftover one: removed by layout.clean_leftovers
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / BACKUP_NAME)
        fsync_path(folder)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise IngestError(f"cannot write {BACKUP_NAME} in {folder.name} ({e.strerror}); nothing was changed") from e
