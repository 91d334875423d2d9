"""The rules about a watched dataset's source folder: which changes matter, how to ingest it again,
whether it changed at all, and whether it is the dataset's folder."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from mcpower.chunking import SUPPORTED_TYPES
from mcpower.discover import discover
from mcpower.ingestion import IngestOptions
from mcpower.manifest import DatasetInfo
from mcpower.registry import Registry
from mcpower.store import Catalog, Store
from mcpower.store.local import LocalCatalog

# Documents compared to tie a recorded source folder to its dataset (see bound).
BIND_PROBES = 32
_ABSOLUTE = re.compile(r"(?<![\w.~])/[^\s'\"]+")


def relevant(rel: str, path: str) -> bool:
    """Whether a change at ``rel`` (relative to a source folder) can change what ingest finds there."""
    parts = rel.split(os.sep)
    if any(p.startswith(".") for p in parts[:-1]):
        return False  # inside a hidden folder: never ingested
    name = parts[-1]
    if name == ".gitignore":
        return True
    if name.startswith("."):
        return False
    # A document, or a folder (or something gone, which may have been one).
    return PurePosixPath(name).suffix.lower() in SUPPORTED_TYPES or not os.path.isfile(path)


def ingest_options(info: DatasetInfo) -> IngestOptions:
    """Ingest it again the way it was ingested (the manifest says how)."""
    assert info.source is not None
    src = info.source
    return IngestOptions(
        dataset_id=info.id,
        name=info.name,
        description=info.description,
        model=info.embedding.model,
        backend=info.embedding.backend,
        chunk_tokens=info.chunking.chunk_tokens,
        overlap=info.chunking.overlap,
        include=src.include,
        exclude=src.exclude,
        follow_symlinks=src.follow_symlinks,
        max_file_bytes=src.max_file_bytes,
        default_top_k=info.default_top_k,
        skip_unchanged=True,
    )


class Embedders:
    """The embedder each re-ingest needs, loaded once: the registry's query embedder when it is the
    dataset's backend (one model in memory, not two), else the dataset's own."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self._loaded: dict[tuple[str, str], Any] = {}

    def __call__(self, info: DatasetInfo) -> Any:
        """Raises EmbeddingModelError: the model cannot be loaded."""
        key = (info.embedding.model, info.embedding.backend)
        emb = self._loaded.get(key)
        if emb is None:
            emb = self.registry.embedder_for(info)
            if emb.backend != info.embedding.backend:
                from mcpower import embedding

                emb = embedding.load_embedder(info.embedding.model, info.embedding.backend)
            self._loaded[key] = emb
        return emb


def ingest_target(catalog: Catalog) -> Path | Catalog:
    # A datasets folder rather than its catalog, so ingest never reads the datasets as documents.
    return catalog.root if isinstance(catalog, LocalCatalog) else catalog


def unchanged(store: Store, root: str, info: DatasetInfo, skip: Sequence[str]) -> bool:
    """Whether the folder holds exactly the documents the dataset has, at their recorded size and
    modification time (then there is nothing to ingest, and no model to load)."""
    assert info.source is not None
    src = info.source
    skip_dirs = [Path(s) for s in skip]
    files, _ = discover(Path(root), src.include, src.exclude, src.follow_symlinks, src.max_file_bytes, skip_dirs)
    now = {f.rel: (f.size, f.mtime) for f in files}
    return now == {d.path: (d.size, d.mtime) for d in store.documents()}


def bound(store: Store, root: str) -> bool:
    """Whether the folder at ``root`` holds a document of the dataset as it was ingested (same path,
    same sha256). A manifest is untrusted: its source path must not make a watcher ingest, and then
    serve, some other folder of this machine."""
    probes = 0
    for d in store.documents():
        parts = PurePosixPath(d.path).parts
        if not parts or ".." in parts or PurePosixPath(d.path).is_absolute():
            continue
        path = os.path.join(root, d.path)
        try:
            if os.stat(path).st_size != d.size:
                continue
            doc = store.document(d.path)
            with open(path, "rb") as f:
                digest = hashlib.sha256(f.read(d.size + 1)).hexdigest()
        except OSError:
            continue
        if doc is not None and digest == doc.content_hash:
            return True
        probes += 1
        if probes >= BIND_PROBES:
            break
    return False


def scrub(message: str, root: str) -> str:
    """``message`` without absolute paths (the source folder named as such): watch states are shown
    to MCP clients, which must never see where things are on disk."""
    return _ABSOLUTE.sub("<path>", message.replace(root, "<source folder>"))
