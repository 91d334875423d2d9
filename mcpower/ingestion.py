"""Ingest: discover -> chunk -> embed -> publish, crash-safe and incremental.

The new version is built in a hidden staging folder inside the dataset folder, fsynced, renamed to
``v-<stamp>`` and only then made current by atomically replacing ``manifest.json``. Until that
rename the previous version is untouched and is what every reader sees; a crash or Ctrl-C at any
point leaves it loadable. One writer per dataset holds ``.lock`` (fcntl.flock).

Re-ingesting an existing dataset with the same model and chunking re-embeds only files whose
content changed and carries the other vectors over.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import hashlib
import logging
import os
import re
import secrets
import shutil
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mcpower import __version__, embedding
from mcpower.chunking import CHUNKER, SUPPORTED_TYPES, chunk_document
from mcpower.config import DEFAULT_MODEL
from mcpower.errors import DatasetLockedError, IngestError, McpowerError
from mcpower.manifest import (
    MANIFEST_NAME,
    Checksums,
    ChunkingInfo,
    Counts,
    EmbeddingInfo,
    Manifest,
    VectorIndexInfo,
    fsync_path,
    now_utc,
    read_manifest,
    write_manifest,
)
from mcpower.store import (
    INDEX_FILE,
    METADATA_FILE,
    ChunkRow,
    DocumentRow,
    KnowledgeStore,
    chunk_id,
    open_store,
    sha256_file,
    write_metadata,
    write_vectors,
)

logger = logging.getLogger(__name__)

DEFAULT_CHUNK_TOKENS = 250  # all-MiniLM-L6-v2 reads 256 word pieces, 2 of them special tokens
DEFAULT_OVERLAP = 32
DEFAULT_MAX_FILE_BYTES = 10 * 1024 * 1024
LOCK_NAME = ".lock"
STAGING_PREFIX = ".staging-"
VERSION_PREFIX = "v-"

# (phase, done, total): phases are "files" and "chunks"
ProgressCallback = Callable[[str, int, int], None]


@dataclass
class IngestReport:
    """What an ingest did, for the CLI summary and for tests."""

    dataset_id: str
    folder: Path
    documents: int = 0
    chunks: int = 0
    embedded: int = 0  # chunks embedded in this run (the rest were carried over)
    added: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (relative path, reason)
    full_rebuild: bool = True
    rebuild_reason: str = ""
    seconds: float = 0.0
    embed_seconds: float = 0.0

    @property
    def chunks_per_second(self) -> float:
        return self.embedded / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class SourceFile:
    rel: str
    path: Path
    size: int
    mtime: float


def slugify(name: str) -> str:
    """A dataset id from a folder name: 'My Docs_v2' -> 'my-docs-v2'."""
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")[:64].strip("-")


def discover(
    root: Path,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    skip_dirs: Sequence[Path] = (),
) -> tuple[list[SourceFile], list[tuple[str, str]]]:
    """Supported files under ``root``, honouring .gitignore files, hidden names and the globs.

    Returns the files (sorted by relative path) and what was skipped with why.
    """
    import pathspec

    root = root.resolve()
    inc = pathspec.GitIgnoreSpec.from_lines(include) if include else None
    exc = pathspec.GitIgnoreSpec.from_lines(exclude)
    skip = {p.resolve() for p in skip_dirs}
    ignores: list[tuple[str, pathspec.GitIgnoreSpec]] = []
    files: list[SourceFile] = []
    skipped: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel_dir = here.relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        gi = here / ".gitignore"
        if gi.is_file():
            ignores.append((rel_dir, pathspec.GitIgnoreSpec.from_lines(gi.read_text(errors="replace").splitlines())))

        def ignored(rel: str, is_dir: bool) -> bool:
            probe = rel + ("/" if is_dir else "")
            return any(probe.startswith(base) and spec.match_file(probe[len(base) :]) for base, spec in ignores)

        dirnames[:] = sorted(
            d
            for d in dirnames
            if not d.startswith(".")
            and not ignored(rel_dir + d, True)
            and (here / d).resolve() not in skip
            and not exc.match_file(rel_dir + d + "/")
        )
        for name in sorted(filenames):
            rel = rel_dir + name
            suffix = Path(name).suffix.lower()
            if name.startswith(".") or suffix not in SUPPORTED_TYPES or ignored(rel, False):
                continue
            if exc.match_file(rel) or (inc is not None and not inc.match_file(rel)):
                continue
            path = here / name
            try:
                st = os.stat(path, follow_symlinks=False)
                if stat.S_ISLNK(st.st_mode):
                    target = path.resolve()
                    if not follow_symlinks and not target.is_relative_to(root):
                        skipped.append((rel, "symlink pointing outside the folder (use --follow-symlinks)"))
                        continue
                    st = os.stat(target)
            except OSError as e:
                skipped.append((rel, f"cannot read: {e.strerror}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                skipped.append((rel, "not a regular file"))
            elif st.st_size > max_file_bytes:
                skipped.append((rel, f"{st.st_size / 1e6:.1f} MB, over the {max_file_bytes / 1e6:g} MB limit"))
            else:
                files.append(SourceFile(rel, path, st.st_size, st.st_mtime))
    return files, skipped


def decode_text(data: bytes) -> str:
    """A file's bytes as UTF-8 text; ValueError with a reason for binary or undecodable content."""
    if b"\x00" in data[:8192]:
        raise ValueError("binary file (contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"not UTF-8 (byte {e.start}); convert it to UTF-8") from e


@contextmanager
def dataset_lock(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold the dataset's write lock; readers never take it.

    Raises:
        DatasetLockedError: another process holds it and ``wait`` is False.
        IngestError: the folder or the lock file cannot be created (read-only or full disk).
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise _write_error(folder.name, e) from e
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown process"
            raise DatasetLockedError(
                f"dataset {folder.name!r} is being written by another ingest ({holder}); "
                "wait for it to finish or pass --wait"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} since {now_utc().isoformat()}".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the flock


def ingest(
    source: Path,
    datasets_dir: Path,
    *,
    dataset_id: str | None = None,
    name: str | None = None,
    description: str | None = None,
    model: str = DEFAULT_MODEL,
    backend: str = "onnx",
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    overlap: int = DEFAULT_OVERLAP,
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
    follow_symlinks: bool = False,
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
    default_top_k: int | None = None,
    full: bool = False,
    wait: bool = False,
    embedder: embedding.Embedder | None = None,
    progress: ProgressCallback | None = None,
) -> IngestReport:
    """Build (or update) the dataset for ``source`` under ``datasets_dir`` and publish it atomically.

    Raises:
        IngestError: bad source folder or id, nothing to ingest, disk full.
        DatasetLockedError: another ingest of the same dataset is running.
        EmbeddingModelError: the model cannot be loaded.
    """
    started = time.perf_counter()
    src = source.expanduser()
    if not src.is_dir():
        raise IngestError(f"{source}: no such folder; pass the folder of documents to ingest")
    src = src.resolve()
    ds_id = dataset_id if dataset_id is not None else slugify(src.name)
    if not ds_id or not re.fullmatch(r"[a-z0-9-]{1,64}", ds_id):
        raise IngestError(
            f"invalid dataset id {ds_id[:80]!r}: use 1-64 lowercase letters, digits and hyphens (--id my-docs)"
        )
    # The manifest's limits: checked here so a bad value fails before anything is embedded.
    if not 16 <= chunk_tokens <= 8192 or not 0 <= overlap < min(chunk_tokens, 4097):
        raise IngestError(
            f"--chunk-tokens must be 16-8192 and --overlap 0-4096 and smaller than it (got {chunk_tokens}, {overlap})"
        )
    folder = datasets_dir.expanduser().resolve() / ds_id
    files, skipped = discover(src, include, exclude, follow_symlinks, max_file_bytes, [datasets_dir])
    if not files:
        raise IngestError(
            f"{source}: no documents to ingest (looked for {', '.join(sorted(SUPPORTED_TYPES))}"
            + (f"; {len(skipped)} skipped" if skipped else "")
            + ")"
        )
    emb = embedder or embedding.load_embedder(model, backend)
    if chunk_tokens > emb.max_tokens - 2:
        logger.info("chunk size %d lowered to the model window %d", chunk_tokens, emb.max_tokens - 2)
        chunk_tokens = emb.max_tokens - 2
        overlap = min(overlap, chunk_tokens - 1)
    report = IngestReport(ds_id, folder, skipped=list(skipped))
    with dataset_lock(folder, wait):
        _clean_leftovers(folder)
        previous = _previous_store(folder, ds_id)
        fingerprint = _fingerprint(emb, chunk_tokens, overlap)
        if previous is not None and not full and previous.manifest.fingerprint != fingerprint:
            report.rebuild_reason = "the model or chunking settings changed"
        reuse = previous if previous is not None and not full and not report.rebuild_reason else None
        report.full_rebuild = reuse is None
        try:
            docs, chunks, vectors = _build(src, files, emb, chunk_tokens, overlap, reuse, report, progress)
            manifest = _publish(
                folder,
                ds_id,
                name or src.name,
                description,
                previous,
                default_top_k,
                emb,
                chunk_tokens,
                overlap,
                fingerprint,
                docs,
                chunks,
                vectors,
            )
        finally:
            if previous is not None:
                previous.close()
    report.documents, report.chunks = manifest.counts.documents, manifest.counts.chunks
    report.seconds = time.perf_counter() - started
    return report


def _fingerprint(emb: embedding.Embedder, chunk_tokens: int, overlap: int) -> str:
    # torch and onnx fp32 give the same vectors; int8 does not, so precision is part of identity.
    precision = "int8" if emb.backend == "onnx-int8" else "fp32"
    key = f"{emb.model_fingerprint}|{emb.dimension}|{precision}|{CHUNKER}|{chunk_tokens}|{overlap}"
    return hashlib.sha256(key.encode()).hexdigest()[:32]


def _previous_store(folder: Path, ds_id: str) -> KnowledgeStore | None:
    path = folder / MANIFEST_NAME
    if not path.exists():
        return None
    try:
        return open_store(folder, read_manifest(path))
    except McpowerError as e:
        logger.warning("existing dataset %s is unusable (%s); rebuilding it from scratch", ds_id, e.message)
        return None


def _build(
    src: Path,
    files: list[SourceFile],
    emb: embedding.Embedder,
    chunk_tokens: int,
    overlap: int,
    reuse: KnowledgeStore | None,
    report: IngestReport,
    progress: ProgressCallback | None,
) -> tuple[list[DocumentRow], list[ChunkRow], np.ndarray]:
    old: dict[str, tuple[DocumentRow, list[ChunkRow]]] = {}
    if reuse is not None:
        old = {d.path: (d, cs) for d, cs in reuse.iter_document_rows()}
    docs: list[DocumentRow] = []
    chunks: list[ChunkRow] = []
    carried: list[int] = []  # chunk ids whose vectors come from the previous version
    to_embed: list[tuple[int, str]] = []  # (position in chunks, text to embed)
    indexed_at = now_utc().isoformat()
    for n, f in enumerate(files, 1):
        if progress:
            progress("files", n, len(files))
        try:
            raw = f.path.read_bytes()
        except OSError as e:
            report.skipped.append((f.rel, f"cannot read: {e.strerror}"))
            continue
        content_hash = hashlib.sha256(raw).hexdigest()
        doc_id = len(docs) + 1
        prev = old.pop(f.rel, None)
        if prev is not None and prev[0].content_hash == content_hash:
            d, cs = prev
            docs.append(
                DocumentRow(doc_id, f.rel, d.title, d.file_type, f.size, f.mtime, content_hash, d.indexed_at, d.content)
            )
            for old_chunk in cs:
                chunks.append(dataclasses.replace(old_chunk, document_id=doc_id))
                carried.append(old_chunk.id)
            report.unchanged += 1
            continue
        try:
            text = decode_text(raw)
        except ValueError as e:
            report.skipped.append((f.rel, str(e)))
            continue
        suffix = Path(f.rel).suffix.lower()
        document = chunk_document(text, suffix, Path(f.rel).name, emb.count_tokens, chunk_tokens, overlap)
        docs.append(DocumentRow(doc_id, f.rel, document.title, suffix, f.size, f.mtime, content_hash, indexed_at, text))
        seen: dict[str, int] = {}
        for c in document.chunks:
            occurrence = seen.get(c.text, 0)
            seen[c.text] = occurrence + 1
            row = ChunkRow(
                chunk_id(f.rel, c.text, occurrence), doc_id, c.ordinal, c.heading, c.start_line, c.end_line, c.text
            )
            to_embed.append((len(chunks), c.embed_text))
            chunks.append(row)
        if prev is None:
            report.added += 1
        else:
            report.changed += 1
    report.removed = len(old)
    if not docs:
        raise IngestError(f"{src.name}: every file was skipped ({report.skipped[0][0]}: {report.skipped[0][1]} ...)")
    _check_unique([c.id for c in chunks])
    vectors = np.zeros((len(chunks), emb.dimension), dtype=np.float32)
    if reuse is not None and carried:
        position = {c.id: i for i, c in enumerate(chunks)}
        vectors[[position[i] for i in carried]] = reuse.vectors(carried)
    if to_embed:
        t0 = time.perf_counter()
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress:
                progress("chunks", done, len(to_embed))

        vectors[[i for i, _ in to_embed]] = emb.embed_documents([t for _, t in to_embed], progress=tick)
        report.embed_seconds = time.perf_counter() - t0
    report.embedded = len(to_embed)
    if not np.isfinite(vectors).all():
        raise IngestError("the model produced non-finite vectors; the model files may be damaged")
    return docs, chunks, vectors


def _check_unique(ids: list[int]) -> None:
    if len(set(ids)) != len(ids):  # 63-bit hashes: only two identical (path, text, occurrence) collide
        raise IngestError("two chunks got the same id; please report this as a bug")


def _publish(
    folder: Path,
    ds_id: str,
    name: str,
    description: str | None,
    previous: KnowledgeStore | None,
    default_top_k: int | None,
    emb: embedding.Embedder,
    chunk_tokens: int,
    overlap: int,
    fingerprint: str,
    docs: list[DocumentRow],
    chunks: list[ChunkRow],
    vectors: np.ndarray,
) -> Manifest:
    staging = folder / f"{STAGING_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    try:
        staging.mkdir()  # inside: a full disk can refuse the folder itself
        write_metadata(staging / METADATA_FILE, docs, chunks)
        index_info = write_vectors(staging / INDEX_FILE, np.asarray([c.id for c in chunks], dtype=np.int64), vectors)
        fsync_path(staging)
        version = f"{VERSION_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"
        prev_m = previous.manifest if previous is not None else None
        now = now_utc()
        manifest = Manifest(
            id=ds_id,
            name=(name.strip() or ds_id)[:128],
            description=(description or (prev_m.description if prev_m else f"Documents from {name}"))[:512],
            index=f"{version}/{INDEX_FILE}",
            metadata=f"{version}/{METADATA_FILE}",
            default_top_k=default_top_k or (prev_m.default_top_k if prev_m else 5),
            embedding=EmbeddingInfo.model_validate(  # validated: backend comes from the embedder at run time
                {
                    "model": emb.model_name,
                    "backend": emb.backend,
                    "dimension": emb.dimension,
                    "max_tokens": emb.max_tokens,
                    "model_fingerprint": emb.model_fingerprint,
                }
            ),
            chunking=ChunkingInfo(chunker=CHUNKER, chunk_tokens=chunk_tokens, overlap=overlap),
            vector_index=VectorIndexInfo(**index_info),
            fingerprint=fingerprint,
            counts=Counts(documents=len(docs), chunks=len(chunks)),
            checksums=Checksums(index=sha256_file(staging / INDEX_FILE), metadata=sha256_file(staging / METADATA_FILE)),
            created_at=prev_m.created_at if prev_m else now,
            updated_at=now,
            mcpower_version=__version__,
        )
        os.rename(staging, folder / version)
        fsync_path(folder)
    except (OSError, sqlite3.Error, RuntimeError) as e:  # FAISS reports write failures as RuntimeError
        shutil.rmtree(staging, ignore_errors=True)
        raise _write_error(ds_id, e) from e
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    try:
        write_manifest(manifest, folder)  # the commit point: readers switch to the new version here
    except BaseException as e:
        if _current_version(folder) != version:  # failed before the rename: the new version is unused
            shutil.rmtree(folder / version, ignore_errors=True)
        if isinstance(e, OSError):
            raise _write_error(ds_id, e) from e
        raise
    _prune_versions(folder, keep={version, *(_version_of(prev_m) if prev_m else ())})
    return manifest


def _write_error(ds_id: str, e: BaseException) -> IngestError:
    full = (isinstance(e, OSError) and e.errno == errno.ENOSPC) or "full" in str(e)
    what = "disk full" if full else f"cannot write ({getattr(e, 'strerror', None) or e})"
    return IngestError(f"{what} while writing dataset {ds_id!r}; the previous version is untouched")


def _current_version(folder: Path) -> str | None:
    try:
        return Path(read_manifest(folder / MANIFEST_NAME).index).parts[0]
    except McpowerError:
        return None


def _version_of(manifest: Manifest) -> set[str]:
    return {Path(manifest.index).parts[0], Path(manifest.metadata).parts[0]}


def _prune_versions(folder: Path, keep: set[str]) -> None:
    """Drop versions older than the previous one; a server still holding the previous one keeps working."""
    for child in folder.iterdir():
        if child.is_dir() and child.name.startswith(VERSION_PREFIX) and child.name not in keep:
            shutil.rmtree(child, ignore_errors=True)


def _clean_leftovers(folder: Path) -> None:
    """Staging folders of writers that died (we hold the lock, so nobody is using them)."""
    for child in folder.iterdir():
        if child.name.startswith(STAGING_PREFIX):
            logger.info("removing leftover staging folder %s", child.name)
            shutil.rmtree(child, ignore_errors=True)
        elif child.name.startswith(f".{MANIFEST_NAME}.") and child.name.endswith(".tmp"):
            child.unlink(missing_ok=True)
