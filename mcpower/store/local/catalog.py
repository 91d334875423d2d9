"""The local catalog: datasets as folders under a datasets root, one manifest.json each.

Manifests are found recursively; an invalid one is reported with its reason and the rest stay
usable. A manifest is re-read only when its file changed (a stat per look). A manifest of the
original system's format (seed 000's six fields) is a dataset too: store/original/ reads and
serves it, read-only, and it is re-read when its manifest, metadata or FAISS file changed.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mcpower.checksums import FileHashes
from mcpower.errors import DatasetUnavailableError, InvalidManifestError, McpowerError
from mcpower.layout import (
    clean_leftovers,
    dataset_lock,
    find_manifests,
    leftover_staging,
    publish,
    read_watch,
    remove_if_unpublished,
    stamp_of,
    write_error,
)
from mcpower.manifest import (
    MANIFEST_NAME,
    Checksums,
    DatasetInfo,
    Manifest,
    VectorIndexInfo,
    read_manifest,
    read_manifest_json,
)
from mcpower.store import DatasetBuild, DatasetEntry, unexpected_error

if TYPE_CHECKING:  # the store pulls in numpy and FAISS: imported when a dataset is opened, not to list them
    from mcpower.store.local.store import LocalStore
    from mcpower.store.original import OriginalInfo


def _original(info: DatasetInfo | None) -> OriginalInfo | None:
    """``info`` if it describes a dataset of the original format (store/original/, imported only
    for such a dataset: its pydantic models took ~5 ms of every `serve` and `search` start)."""
    if info is None or info.format != "original":
        return None
    from mcpower.store.original import OriginalInfo

    return info if isinstance(info, OriginalInfo) else None


def read_info(folder: Path, data: dict[str, Any], hashes: FileHashes) -> tuple[OriginalInfo, object]:
    """The info of a dataset of the original format and its files' stamps (store.original.read_info,
    imported when such a dataset is found)."""
    from mcpower.store.original import read_info as read

    return read(folder, data, hashes)


logger = logging.getLogger(__name__)


class LocalCatalog:
    """Datasets under ``root``: ``<root>/<id>/manifest.json`` and its version folders."""

    def __init__(self, root: Path, hashes: FileHashes | None = None) -> None:
        self.root = root
        self._hashes = hashes or FileHashes(None)  # remembers the checksums of verified files
        # Datasets as last read, by manifest path and version mark: a scan re-reads only those that changed.
        self._read: dict[Path, tuple[object, DatasetInfo]] = {}
        self._logged: set[str] = set()  # unexpected failures already logged (unexpected_error)

    # ------------------------------------------------------------ finding

    def scan(self) -> list[DatasetEntry]:
        """Every dataset folder under the root. ``<root>/<id>/`` owns its id: a dataset deeper down
        (a copied folder, say) that claims the same id is reported as an error, never preferred."""
        found: dict[str, DatasetEntry] = {}
        misnamed: list[tuple[Path, DatasetInfo]] = []
        known, reads = self._read, {}
        # Top-level folders first: they own the ids they are named after.
        paths = sorted(find_manifests(self.root), key=lambda p: p.parent.parent != self.root)
        for path in paths:
            folder = path.parent
            try:
                seen = known.get(path)
                version, manifest = (
                    seen if seen is not None and seen[0] == self._version(path, seen[1]) else self._load(path)
                )
                reads[path] = (version, manifest)
            except Exception as e:  # any failure is this dataset's error, never the listing's
                key = self._rel(folder)
                error = e if isinstance(e, McpowerError) else unexpected_error(key, e, self._logged)
                found[key] = DatasetEntry(key, None, error, location=key, handle=folder)
                continue
            if folder.name != manifest.id and folder.parent == self.root:
                misnamed.append((folder, manifest))  # after the others: it must not displace the real one
                continue
            entry = DatasetEntry(manifest.id, manifest, None, self._rel(folder), version, folder)
            if manifest.id in found:
                other = found[manifest.id].location
                entry.error = DatasetUnavailableError(
                    f"{entry.location}: dataset id {manifest.id!r} is already used by {other}; "
                    "give one of them another id"
                )
                found[f"{manifest.id}@{entry.location}"] = entry
                continue
            found[manifest.id] = entry
        for entry in found.values():
            if isinstance(entry.handle, Path):
                entry.notes = [
                    f"leftover {name} from an interrupted ingest (the next ingest removes it)"
                    for name in leftover_staging(entry.handle)
                ]
                entry.watch = read_watch(entry.handle)
                if _original(entry.info) is not None:
                    from mcpower.store.original import upgrade_note

                    entry.notes.append(upgrade_note(entry.location))
        for folder, manifest in misnamed:
            # Under the id it claims (so a search for that id explains), unless a dataset has it.
            rel = self._rel(folder)
            key = next((k for k in (manifest.id, rel) if k not in found), f"{manifest.id}@{rel}")
            error = DatasetUnavailableError(
                f"{folder.name}/manifest.json: id {manifest.id!r} differs from its folder name; "
                f"rename the folder to {manifest.id!r}"
            )
            found[key] = DatasetEntry(key, None, error, location=rel, handle=folder)
        self._read = reads
        return list(found.values())

    def refresh(self, entry: DatasetEntry) -> DatasetEntry:
        folder = entry.handle
        if entry.info is None or not isinstance(folder, Path):
            return entry
        path = folder / MANIFEST_NAME
        version: object = None
        try:
            version = self._version(path, entry.info)
            if version == entry.version:
                return entry
            version, manifest = self._load(path)
        except Exception as e:  # as in scan: this dataset's error
            error = e if isinstance(e, McpowerError) else unexpected_error(entry.location, e, self._logged)
            return DatasetEntry(entry.id, None, error, entry.location, version, folder)
        if manifest.id != entry.id:
            return entry
        return DatasetEntry(manifest.id, manifest, None, entry.location, version, folder)

    def _load(self, path: Path) -> tuple[object, DatasetInfo]:
        """(version mark, info) of the dataset whose manifest is ``path``, in either format.

        The mark is taken before reading, so a publish racing the read is seen next time.
        """
        stamp = stamp_of(path)
        try:
            return stamp, read_manifest(path)
        except InvalidManifestError:
            from mcpower.store.original import is_original_manifest

            data = read_manifest_json(path)  # not mcpower's; the original format's? (re-read: at most 10 KB)
            if not is_original_manifest(data):
                raise
        info, files = read_info(path.parent, data, self._hashes)
        return (stamp, files), info

    def _version(self, path: Path, info: DatasetInfo | None) -> object:
        """The mark that changes when the dataset changes: its manifest's stamp, and for the
        original format its files' stamps too (the format has no manifest to republish)."""
        stamp = stamp_of(path)
        original = _original(info)
        if original is not None:
            from mcpower.store.original import file_stamps

            return stamp, file_stamps(path.parent, original.metadata, original.index_file)
        return stamp

    def open(self, entry: DatasetEntry) -> LocalStore:
        from mcpower.store.local.store import open_store

        original = _original(entry.info)
        if original is not None and isinstance(entry.handle, Path):
            from mcpower.store.original.store import open_original

            return open_original(entry.handle, original, self._hashes)
        if not isinstance(entry.info, Manifest) or not isinstance(entry.handle, Path):
            raise DatasetUnavailableError(f"{entry.id}: not a dataset of this folder")  # pragma: no cover
        return open_store(entry.handle, entry.info, hashes=self._hashes)

    def location(self, dataset_id: str) -> str:
        return str(self._folder(dataset_id))

    def contains(self, dataset_id: str) -> bool:
        """Only ``<root>/<id>/manifest.json`` is looked at: the folder named after an id owns it
        (a dataset deeper down is found by the next full scan)."""
        return (self.root / dataset_id / MANIFEST_NAME).exists()

    # ------------------------------------------------------------ writing

    @contextmanager
    def lock(self, dataset_id: str, wait: bool = False) -> Iterator[None]:
        folder = self._folder(dataset_id)
        with dataset_lock(folder, wait):
            clean_leftovers(folder)  # what writers that died left behind (nobody else writes now)
            try:
                yield
            finally:
                remove_if_unpublished(folder)  # a failed first ingest leaves no empty dataset folder

    def current(self, dataset_id: str) -> LocalStore | None:
        from mcpower.store.local.store import open_store

        folder = self._folder(dataset_id)
        path = folder / MANIFEST_NAME
        if not path.exists():
            return None
        try:
            return open_store(folder, read_manifest(path), hashes=self._hashes)
        except McpowerError as e:
            if not _is_original(path):  # one of the original format has nothing to carry over: no warning
                logger.warning(
                    "existing dataset %s is unusable (%s); rebuilding it from scratch", dataset_id, e.message
                )
            return None

    def publish(self, build: DatasetBuild) -> DatasetInfo:
        import numpy as np

        from mcpower.store.local.build import sha256_file, write_metadata, write_vectors
        from mcpower.store.local.schema import INDEX_FILE, METADATA_FILE

        info = build.info

        def write(staging: Path, version: str) -> Manifest:
            ids = np.asarray([c.id for c in build.chunks], dtype=np.int64)
            try:
                analysed = info.analysis is not None and info.analysis.scheme is not None
                undetermined = info.analysis.undetermined if info.analysis is not None else None
                write_metadata(
                    staging / METADATA_FILE, build.documents, build.chunks, analysed=analysed, undetermined=undetermined
                )
                index_info = write_vectors(staging / INDEX_FILE, ids, build.vectors)
            except (sqlite3.Error, RuntimeError) as e:  # FAISS reports write failures as RuntimeError
                raise write_error(info.id, e) from e
            floats = index_info.pop("vectors_file", None)  # the exact vectors of an hnsw_sq index
            return Manifest(
                **info.model_dump(),
                index=f"{version}/{INDEX_FILE}",
                metadata=f"{version}/{METADATA_FILE}",
                vectors=f"{version}/{floats}" if floats else None,
                vector_index=VectorIndexInfo(**index_info),
                checksums=Checksums(
                    index=sha256_file(staging / INDEX_FILE),
                    metadata=sha256_file(staging / METADATA_FILE),
                    vectors=sha256_file(staging / floats) if floats else None,
                ),
            )

        return publish(self._folder(info.id), write)

    # ------------------------------------------------------------ helpers

    def _folder(self, dataset_id: str) -> Path:
        return self.root.expanduser().resolve() / dataset_id

    def _rel(self, folder: Path) -> str:
        try:
            return folder.relative_to(self.root).as_posix() or folder.name
        except ValueError:
            return folder.name


def _is_original(path: Path) -> bool:
    """Whether ``path`` is a manifest of the original format."""
    from mcpower.store.original import is_original_manifest

    try:
        return is_original_manifest(read_manifest_json(path))
    except McpowerError:
        return False


if TYPE_CHECKING:  # mypy proves the local classes implement the interfaces (nothing runs)
    from mcpower.store import Catalog, Store

    def _implements(catalog: LocalCatalog, store: LocalStore) -> tuple[Catalog, Store]:
        return catalog, store
