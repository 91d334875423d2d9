"""The rules about a watched dataset's source folder: which changes matter, how to ingest it again,
whether it changed at all, whether it is the dataset's folder, and whether its manifest is ours."""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from mcpower.chunking import CODE_TYPES, SUPPORTED_TYPES
from mcpower.discover import discover
from mcpower.duplicates import same_files
from mcpower.ingestion import IngestOptions
from mcpower.manifest import MANIFEST_NAME, MAX_MANIFEST_BYTES, DatasetInfo, SourceInfo
from mcpower.registry import Registry
from mcpower.store import Catalog, Store
from mcpower.store.local import LocalCatalog
from mcpower.watch.limits import WatchLimits, within

# Documents compared to tie a recorded source folder to its dataset (see bound).
BIND_PROBES = 32
_NOFOLLOW, _NONBLOCK = getattr(os, "O_NOFOLLOW", 0), getattr(os, "O_NONBLOCK", 0)
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
    suffix = PurePosixPath(name).suffix.lower()
    return suffix in SUPPORTED_TYPES or suffix in CODE_TYPES or not os.path.isfile(path)


def ingest_options(info: DatasetInfo, limits: WatchLimits, cache_dir: Path | None = None) -> IngestOptions:
    """Ingest it again the way it was ingested (the manifest says how), within ``limits``; the
    manifest's record is kept as it is (watch/limits.py). New vectors go through the embedding
    store under ``cache_dir``, as the command's do, so a re-ingest cut short resumes."""
    assert info.source is not None
    sel = within(info.source, limits)
    return IngestOptions(
        dataset_id=info.id,
        name=info.name,
        description=info.description,
        model=info.embedding.model,
        backend=info.embedding.backend,
        chunk_tokens=info.chunking.chunk_tokens,
        overlap=info.chunking.overlap,
        include=sel.include,
        exclude=sel.exclude,
        code=sel.code,
        keep_site_files=sel.keep_site_files,
        keep_duplicates=sel.keep_duplicates,
        follow_symlinks=sel.follow_symlinks,
        max_file_bytes=sel.max_file_bytes,
        default_top_k=info.default_top_k,
        cache_dir=cache_dir,
        embedding_store_mb=limits.embedding_store_mb,
        skip_unchanged=True,
        source_record=info.source,
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


def unchanged(
    store: Store, root: str, info: DatasetInfo, skip: Sequence[str], limits: WatchLimits | None = None
) -> bool:
    """Whether the folder holds exactly the documents the dataset has, at their recorded size and
    modification time (then there is nothing to ingest, and no model to load)."""
    assert info.source is not None
    sel = within(info.source, limits or WatchLimits())
    skip_dirs = [Path(s) for s in skip]
    files, _ = discover(
        Path(root),
        sel.include,
        sel.exclude,
        sel.follow_symlinks,
        sel.max_file_bytes,
        skip_dirs,
        code=sel.code,
        keep_site_files=sel.keep_site_files,
    )
    files, _ = same_files(files)  # a file reached twice is one document (mcpower/duplicates.py)
    now = {f.rel: (f.size, f.mtime) for f in files}
    return now == {d.path: (d.size, d.mtime) for d in store.documents()}


def bound(store: Store, root: str) -> bool:
    """Whether the folder at ``root`` holds a document of the dataset as it was ingested (same path,
    same sha256). A manifest is untrusted: its source path must not make a watcher ingest, and then
    serve, some other folder of this machine. Only documents whose content an outsider cannot
    simply know are compared (not an empty one, not a hidden one such as ``.profile``), and each is
    opened without following a symlink or blocking, and read only if it is a regular file."""
    probes = 0
    for d in store.documents():
        parts = PurePosixPath(d.path).parts
        if d.size == 0 or not parts or PurePosixPath(d.path).is_absolute() or any(p.startswith(".") for p in parts):
            continue  # ('..' is hidden too)
        try:
            digest = _sha256(os.path.join(root, d.path), d.size)
        except OSError:
            continue
        if digest is None:
            continue
        doc = store.document(d.path)
        if doc is not None and digest == doc.content_hash:
            return True
        probes += 1
        if probes >= BIND_PROBES:
            break
    return False


def _sha256(path: str, size: int) -> str | None:
    """The sha256 of the regular file at ``path`` if it has ``size`` bytes (None: another size, or
    not a regular file: a FIFO or a device is never opened for reading, or waited on)."""
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size != size:
            return None
        digest = hashlib.sha256()
        remaining = size + 1
        while remaining > 0 and (block := os.read(fd, min(remaining, 1 << 20))):
            digest.update(block)
            remaining -= len(block)
        return digest.hexdigest()
    finally:
        os.close(fd)


def foreign(folder: Path, src: SourceInfo) -> str | None:
    """Why this user's watcher must not trust the manifest of the dataset in ``folder``, or None.

    Its manifest must belong to this user and be writable by nobody else, and record ``src``: it is
    read again through the descriptor that is checked, so a manifest swapped after the registry
    read it is not trusted either. (Windows has no owner to compare: None.)
    """
    if not hasattr(os, "geteuid"):
        return None
    try:
        fd = os.open(folder / MANIFEST_NAME, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError as e:
        return f"its manifest cannot be read ({e.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MANIFEST_BYTES:
            return "its manifest is not a regular file of a manifest's size"
        if st.st_uid != os.geteuid():
            return "its manifest belongs to another user"
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return "its manifest can be written by other users"
        data = os.read(fd, MAX_MANIFEST_BYTES + 1)
    finally:
        os.close(fd)
    try:
        recorded = SourceInfo.model_validate(json.loads(data)["source"])
    except (ValueError, KeyError, TypeError, RecursionError):
        recorded = None
    return None if recorded == src else "its manifest changed while it was read"


def scrub(message: str, root: str) -> str:
    """``message`` without absolute paths (the source folder named as such): watch states are shown
    to MCP clients, which must never see where things are on disk."""
    return _ABSOLUTE.sub("<path>", message.replace(root, "<source folder>"))
