"""Registry: the datasets of one or more catalogs, their status, and the loaded stores and query
embedders, cached and shared by the CLI and the MCP server.

An invalid dataset is reported with its reason and the rest stay usable. Stores are loaded once,
cached, and reloaded when their dataset is republished (a stat per search notices, for the
local catalog). Search itself lives in mcpower/search.py.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from mcpower.checksums import FileHashes
from mcpower.errors import (
    NO_DATASETS_YET,
    DatasetNotFoundError,
    DatasetUnavailableError,
    EmbeddingModelError,
    EngineUnavailableError,
    McpowerError,
)
from mcpower.freshness import Freshness
from mcpower.manifest import DatasetInfo, is_valid_id
from mcpower.store import Catalog, DatasetEntry, Store, unexpected_error
from mcpower.store.local import LocalCatalog

if TYPE_CHECKING:  # embedders pull in numpy and onnxruntime: imported when first used
    from mcpower.embedding import Embedder
    from mcpower.embedding.cache import QueryCache

logger = logging.getLogger(__name__)

# model name -> the embedder that turns queries for datasets of that model into vectors
EmbedderFactory = Callable[[str], "Embedder"]


class Registry:
    """The datasets of ``catalogs`` (or of the datasets folder ``root``), and their loaded stores.

    Thread-safe; stores and query embedders are loaded lazily, once.
    """

    def __init__(
        self,
        root: Path | None = None,
        *,
        catalogs: Sequence[Catalog] = (),
        embedder_factory: EmbedderFactory | None = None,
        cache_dir: Path | None = None,
        allowed_models: Collection[str] = (),
        query_cache: int | None = None,
    ) -> None:
        if cache_dir is None:
            from mcpower.config import default_cache_dir

            cache_dir = default_cache_dir()
        local = [LocalCatalog(root, FileHashes(cache_dir))] if root is not None else []
        self.root = root  # the datasets folder, if any
        self.catalogs: list[Catalog] = [*local, *catalogs]
        self._factory = embedder_factory or self._load_query_embedder
        self._cache_dir = cache_dir
        self._allowed_models = tuple(allowed_models)
        self._entries: dict[str, tuple[DatasetEntry, Catalog]] = {}
        self._stores: dict[str, Store] = {}
        self._embedders: dict[str, Embedder] = {}
        # Repeated queries' vectors (embedding/cache.py), for every model; 0 turns it off.
        self._query_cache_size = query_cache
        self._query_cache: QueryCache | None = None
        self._lock = threading.RLock()
        self._load_locks: dict[str, threading.Lock] = {}
        self.freshness = Freshness()  # whether results' source files changed since they were indexed
        self._logged: set[tuple[str, str]] = set()
        self._unexpected: set[str] = set()  # what unexpected_error logged
        self.scan()

    @property
    def cache_dir(self) -> Path:
        """Where derived files are kept: ONNX exports, file hashes, the embedding store."""
        return self._cache_dir

    def close(self) -> None:
        """Close the loaded stores' connections; later calls load them again."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            store.close()

    # ------------------------------------------------------------ discovery

    def scan(self) -> list[DatasetEntry]:
        """Look at every dataset of every catalog again; returns all entries, ready and not."""
        found: dict[str, tuple[DatasetEntry, Catalog]] = {}
        for catalog in self.catalogs:
            for entry in self._scan(catalog):
                with self._lock:
                    known = self._entries.get(entry.id)
                same = known is not None and known[0].info == entry.info and known[0].version == entry.version
                if known is not None and same and entry.info is not None:
                    entry.error = entry.error or known[0].error  # a load failure stays until the dataset changes
                elif entry.error is not None:
                    self._log_error(entry.id, entry.error)
                if entry.id in found:  # the same id in two catalogs: the first keeps it
                    other = found[entry.id][0].location
                    entry.error = DatasetUnavailableError(
                        f"{entry.location}: dataset id {entry.id!r} is already used by {other}; "
                        "give one of them another id"
                    )
                    entry.id = f"{entry.id}@{entry.location}"
                found[entry.id] = (entry, catalog)
        with self._lock:
            self._entries = found
        return [e for e, _ in found.values()]

    def _scan(self, catalog: Catalog) -> list[DatasetEntry]:
        """``catalog.scan()``. A catalog turns a failure of one dataset into that dataset's entry;
        should its scan fail as a whole all the same (a bug), its datasets stay as last seen, and
        the other catalogs are still served."""
        try:
            return catalog.scan()
        except Exception as e:
            key = f"{type(catalog).__name__} failed to list its datasets ({type(e).__name__})"
            if key not in self._unexpected:  # once: every search of all datasets scans again
                self._unexpected.add(key)
                logger.warning("catalog.error: %s", key, exc_info=True, extra={"event": "catalog.error"})
            with self._lock:
                return [e for e, c in self._entries.values() if c is catalog]

    def entries(self) -> list[DatasetEntry]:
        with self._lock:
            return sorted((e for e, _ in self._entries.values()), key=lambda e: e.id)

    def ready_ids(self) -> list[str]:
        return [e.id for e in self.entries() if e.status == "ready"]

    def entry(self, dataset_id: str) -> DatasetEntry:
        """Raises DatasetNotFoundError (listing the ids there are) for an unknown id."""
        return self._find(dataset_id)[0]

    def catalog(self, dataset_id: str) -> Catalog:
        """The catalog that holds a dataset (to write a new version of it).

        Raises:
            DatasetNotFoundError.
        """
        return self._find(dataset_id)[1]

    def _find(self, dataset_id: str) -> tuple[DatasetEntry, Catalog]:
        with self._lock:
            found = self._entries.get(dataset_id) if isinstance(dataset_id, str) else None
        if found is None:
            # A dataset ingested since we last looked; asked of each catalog cheaply first, so a
            # stream of unknown ids does not rescan every dataset each time.
            if is_valid_id(dataset_id) and any(c.contains(dataset_id) for c in self.catalogs):
                self.scan()
                with self._lock:
                    found = self._entries.get(dataset_id)
            if found is None:
                raise self.not_found(dataset_id)
        return found

    def not_found(self, dataset_id: str) -> DatasetNotFoundError:
        """The error an unknown id gets: the ids there are, and why a catalog could not be read."""
        available = [e.id for e in self.entries() if not (_unread(e) and not is_valid_id(e.id))]
        return DatasetNotFoundError(str(dataset_id), available, self.unreadable(), self.root, self.none_here())

    def none_here(self) -> str:
        """What to tell someone who sees no dataset here, and what to do about it: none exists yet."""
        return NO_DATASETS_YET

    def unreadable(self) -> list[str]:
        """Why catalogs could not be read at the last look (a Milvus database held by another
        process, unreachable, not installed ...), each reason once: a dataset not found may be there."""
        reasons = [e.error.message for e in self.entries() if _unread(e) and e.error is not None]
        return list(dict.fromkeys(reasons))

    # ------------------------------------------------------------ loading

    def store(self, dataset_id: str) -> Store:
        """The loaded store of a dataset, reloading it if a newer version was published.

        Raises:
            DatasetNotFoundError, DatasetUnavailableError (and subclasses).
        """
        entry, catalog = self._fresh(*self._find(dataset_id))
        if entry.error:
            raise entry.error
        with self._lock:
            store = self._stores.get(entry.id)
            if store is not None and store.info == entry.info:
                return store
            lock = self._load_locks.setdefault(entry.id, threading.Lock())
        with lock:  # one loader per dataset; others wait for it, then share the result
            with self._lock:
                store = self._stores.get(entry.id)
                if store is not None and store.info == entry.info:
                    return store
            started = time.perf_counter()
            try:
                new = _open(catalog, entry)
            except DatasetUnavailableError:
                # Two publishes while we loaded can prune the version we were reading: load the current one.
                fresh = self._fresh(entry, catalog)[0]
                try:
                    if fresh is entry or fresh.info is None:
                        raise
                    entry = fresh
                    new = _open(catalog, fresh)
                except DatasetUnavailableError as e:
                    entry.error = e
                    self._log_error(entry.id, e)
                    raise
            assert entry.info is not None
            logger.info(
                "dataset.loaded %s",
                entry.id,
                extra={
                    "event": "dataset.loaded",
                    "dataset": entry.id,
                    "chunks": entry.info.counts.chunks,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )
            with self._lock:
                # The old store is not closed: a search running on it in another thread finishes first.
                self._stores[entry.id] = new
            return new

    def _fresh(self, entry: DatasetEntry, catalog: Catalog) -> tuple[DatasetEntry, Catalog]:
        """The entry, re-read if its dataset was republished since it was read."""
        try:
            fresh = catalog.refresh(entry)
        except Exception as e:  # a catalog turns failures into the entry's error; a bug all the same
            error = unexpected_error(entry.location or entry.id, e, self._unexpected)
            fresh = DatasetEntry(entry.id, None, error, entry.location, handle=entry.handle)
        if fresh is not entry:
            with self._lock:
                self._entries[entry.id] = (fresh, catalog)
        return fresh, catalog

    def embedder_for(self, info: DatasetInfo) -> Embedder:
        """The query embedder for a dataset, loaded once per model.

        Raises:
            EmbeddingModelError: the dataset's model cannot be loaded here, or differs from it.
        """
        from mcpower.embedding import check_compatible, with_prompts

        model = info.embedding.model
        with self._lock:
            emb = self._embedders.get(model)
            lock = self._load_locks.setdefault(f"model:{model}", threading.Lock())
        if emb is None:
            with lock:
                emb = self._embedders.get(model)
                if emb is None:
                    try:
                        emb = self._cached(self._factory(model))
                    except EmbeddingModelError as e:
                        raise EmbeddingModelError(
                            f"dataset {info.id!r} was built with model {model!r}, "
                            f"which cannot be loaded here: {e.message}"
                        ) from e
                    with self._lock:
                        self._embedders[model] = emb
        check_compatible(emb, info)  # a cached embedder too: another dataset may need other weights
        # Queries are embedded with the prompt the dataset was built with (a view sharing the model).
        return with_prompts(emb, info.embedding.query_prompt, info.embedding.document_prompt)

    def _cached(self, emb: Embedder) -> Embedder:
        """``emb`` with its query vectors remembered (keyed by its fingerprint, backend and the text)."""
        from mcpower.embedding.cache import QUERY_CACHE_SIZE, CachedQueries, QueryCache

        size = QUERY_CACHE_SIZE if self._query_cache_size is None else self._query_cache_size
        if size <= 0:
            return emb
        with self._lock:
            if self._query_cache is None:
                self._query_cache = QueryCache(size)
            return CachedQueries(emb, self._query_cache)

    def _load_query_embedder(self, model: str) -> Embedder:
        from mcpower import embedding

        return embedding.load_query_embedder(model, self._cache_dir, self._allowed_models)

    def prefetch_embedder(self, dataset: str | None) -> None:
        """Start loading the query model in a thread while the caller loads the store (a cold CLI
        search pays for both otherwise); whoever needs it first waits on the same per-model lock."""
        try:
            entry = self.entry(dataset) if dataset is not None else None
        except McpowerError:
            return
        info = entry.info if entry is not None else next((e.info for e in self.entries() if e.info), None)
        if info is None or info.embedding.model in self._embedders:
            return

        def load() -> None:
            with contextlib.suppress(McpowerError):  # the search itself reports it
                self.embedder_for(info)

        # Not a daemon: a process must not end while ONNX Runtime opens a session in this thread
        # (the interpreter's exit under it aborts the process); a command that fails waits ~0.3 s.
        threading.Thread(target=load, name="mcpower-embedder", daemon=False).start()

    def warm_up(self) -> None:
        """Load every ready dataset and its query embedder now (the server does this after the
        handshake); a dataset that fails is logged and skipped, the others are still warmed."""
        for entry in self.entries():
            if entry.status != "ready":
                continue
            try:
                store = self.store(entry.id)
                self.embedder_for(store.info).embed_query("warm up")
            except McpowerError as e:
                self._log_error(entry.id, e)
            except Exception as e:  # a bug must not stop the warm-up of the datasets after it
                logger.warning("dataset.error %s: %s", entry.id, type(e).__name__, exc_info=True)

    def _log_error(self, dataset_id: str, error: McpowerError) -> None:
        """Log a dataset's error once (at info: it is the dataset's state, which `validate`, the
        dataset list and the failing call report; the server's log shows it once)."""
        key = (dataset_id, error.message)
        with self._lock:
            if key in self._logged:
                return
            self._logged.add(key)
        logger.info(
            "dataset.error %s",
            error.message,
            extra={"event": "dataset.error", "dataset": dataset_id, "code": error.code},
        )


def _unread(entry: DatasetEntry) -> bool:
    """Whether ``entry`` stands for what a catalog could not read: its engine failed (such a catalog
    lists the datasets it held at its last look this way, or one entry of its own, not a dataset id)."""
    return entry.info is None and isinstance(entry.error, EngineUnavailableError)


def _open(catalog: Catalog, entry: DatasetEntry) -> Store:
    """``catalog.open(entry)``; any failure is that dataset's DatasetUnavailableError, never an
    exception that would take a search of every dataset, or the server's warm-up, down with it."""
    try:
        return catalog.open(entry)
    except McpowerError:
        raise
    except Exception as e:
        logger.debug("loading %s failed", entry.id, exc_info=True)
        raise DatasetUnavailableError(
            f"{entry.id}: cannot be loaded ({type(e).__name__}); run `mcpower validate`, or re-ingest it"
        ) from e
