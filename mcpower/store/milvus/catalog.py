"""The Milvus catalog: datasets in a Milvus database (a milvus-lite file or a server), published
atomically by a pointer record.

Publishing builds the version's collections beside the current ones, checks their counts, then
upserts the dataset's pointer record in one step; readers resolve the pointer, so they see the old
version or the new one, never a half-built one. An ingest killed at any point leaves its
collections unreferenced: the next ingest of that dataset drops them. The previous version is
kept until then too, so servers still reading it finish their searches (aliases would do the
switch as well, but milvus-lite 2.5 has none).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from mcpower.errors import (
    DatasetUnavailableError,
    EngineUnavailableError,
    IndexMismatchError,
    IngestError,
    InvalidManifestError,
    McpowerError,
)
from mcpower.manifest import DatasetInfo, is_valid_id
from mcpower.store import DatasetBuild, DatasetEntry, unexpected_error
from mcpower.store.milvus.client import (
    CALL_TIMEOUT,
    LOG_FOLDER,
    EngineUnreachableError,
    connect,
    disconnect,
    display_uri,
    guarded,
    import_pymilvus,
)
from mcpower.store.milvus.lease import Lease
from mcpower.store.milvus.schema import (
    CATALOG,
    INSERT_BATCH,
    MAX_VERSION,
    PAD_DIM,
    REQUEST_CHARS,
    SCHEMA_VERSION,
    Pointer,
    catalog_schema,
    chunk_rows,
    chunks_schema,
    collection_names,
    doc_rows,
    docs_schema,
    is_count,
    read_pointer,
    too_long,
    version_of,
)
from mcpower.store.milvus.store import MilvusStore

logger = logging.getLogger(__name__)


class MilvusCatalog:
    """The datasets of the Milvus database at ``uri`` (``x.db``: milvus-lite; ``http(s)://``: a server).

    ``refresh_seconds``: how long a dataset's pointer is trusted before a search re-reads it (a
    republish from another machine is seen within that time). ``lease_seconds`` / ``settle_seconds``:
    the write lease (lease.py). A lite file is created only by a writer (:meth:`lock`): a reader
    given a path that does not exist gets an error saying so. ``cache_dir``: its engine's log files
    go to ``milvus-logs`` there (default: the user's cache folder).
    """

    def __init__(
        self,
        uri: str,
        token: str | None = None,
        *,
        refresh_seconds: float = 1.0,
        lease_seconds: float = 60.0,
        settle_seconds: float = 0.3,
        cache_dir: Path | None = None,
    ) -> None:
        self.uri = uri
        self.where = display_uri(uri)
        self._token = token
        self._refresh, self._lease_ttl, self._settle = refresh_seconds, lease_seconds, settle_seconds
        self._log_dir = cache_dir / LOG_FOLDER if cache_dir is not None else None
        self._client: Any = None
        self._lock = threading.Lock()
        self._checked: dict[str, float] = {}  # dataset id -> when its pointer was last read
        self._known: list[str] = []  # dataset ids of the last scan that reached the engine
        # Bumped when the engine answers again after failing: entries marked with an older epoch
        # are re-read, so a dataset that failed to load while the engine was down recovers.
        self._epoch, self._down = 0, False
        self._reconnect = False  # the engine did not answer: the next call connects anew
        self._lease: Lease | None = None  # held by the ingest running in this process
        self._logged: set[str] = set()  # unexpected failures already logged (unexpected_error)

    # ------------------------------------------------------------ the engine

    def client(self, create: bool = False) -> Any:
        """The connection; ``create``: a lite file that does not exist may be created (writers only)."""
        with self._lock:
            if self._reconnect and self._client is not None:
                # The engine went away under this client: a lite file's engine process is released
                # (the next connect starts a new one), a server's channel is replaced.
                self._reconnect = False
                disconnect(self._client, self.uri)
                self._client = None
            if self._client is None:
                self._client = connect(self.uri, self._token, create=create, log_dir=self._log_dir)
            return self._client

    def close(self) -> None:
        """Disconnect (a milvus-lite file's engine stops, so another process may open it); a later
        call connects again."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            disconnect(client, self.uri)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        client = self.client()
        return guarded(self.where, getattr(client, method), *args, timeout=CALL_TIMEOUT, **kwargs)

    @contextlib.contextmanager
    def _engine(self) -> Iterator[None]:
        """Notes whether the engine answered: a failure marks it down, the next success bumps the epoch."""
        try:
            yield
        except EngineUnavailableError as e:
            self._down = True
            self._reconnect = self._reconnect or isinstance(e, EngineUnreachableError)
            raise
        if self._down:
            self._down = False
            self._epoch += 1

    def _has_catalog(self) -> bool:
        return bool(self._call("has_collection", CATALOG))

    def _ensure_catalog(self) -> None:
        if not self._has_catalog():
            schema, index = catalog_schema(import_pymilvus())
            self._call("create_collection", CATALOG, schema=schema, index_params=index)

    def _get(self, key: str) -> dict[str, Any] | None:
        if not self._has_catalog():
            return None
        rows = self._call("get", CATALOG, ids=[key], output_fields=["value"])
        value = rows[0].get("value") if rows else None
        return value if isinstance(value, dict) else None

    def _put(self, key: str, kind: str, value: dict[str, Any]) -> None:
        row = {"key": key, "kind": kind, "value": value, "updated_ms": int(time.time() * 1000), "pad": [0.0] * PAD_DIM}
        self._call("upsert", CATALOG, data=[row])

    def _delete(self, key: str) -> None:
        self._call("delete", CATALOG, ids=[key])

    # ------------------------------------------------------------ finding

    def scan(self) -> list[DatasetEntry]:
        """Every dataset with a pointer record. An unreachable engine is an error entry for each
        dataset it held at the last look (or one for the engine), never an exception."""
        try:
            with self._engine():
                rows = (
                    self._call(
                        "query", CATALOG, filter='kind == "dataset"', output_fields=["key", "value"], limit=16384
                    )
                    if self._has_catalog()
                    else []
                )
        except McpowerError as e:
            ids = self._known or [f"milvus@{self.where}"]
            return [DatasetEntry(i, None, e, location=self._location(i)) for i in ids]
        entries = [self._row(r) for r in rows]
        self._known = sorted(e.id for e in entries)
        now = time.monotonic()
        self._checked.update({e.id: now for e in entries})
        return entries

    def _row(self, row: dict[str, Any]) -> DatasetEntry:
        """The entry of a pointer record as a query returns it (``key``: ``dataset:<id>``)."""
        key = row.get("key")
        dataset_id = key.removeprefix("dataset:") if isinstance(key, str) else ""
        if is_valid_id(dataset_id):
            return self._entry(dataset_id, row.get("value"))
        # Listed under a name of its own (the key may be any text): there for someone to remove.
        name = "invalid-" + hashlib.sha256(repr(key).encode()).hexdigest()[:12]
        error = InvalidManifestError(
            f"milvus: the pointer record {str(key)[:64]!r} holds no valid dataset id; remove it from {CATALOG}"
        )
        return DatasetEntry(name, None, error, self._location(name))

    def _entry(self, dataset_id: str, value: object) -> DatasetEntry:
        """The dataset a pointer record describes, or its error: any failure to read the record,
        foreseen or not, is that dataset's error, never the listing's."""
        where = self._location(dataset_id)
        try:
            pointer = read_pointer(dataset_id, value, where)
            info = DatasetInfo.model_validate(pointer.info)
        except McpowerError as e:
            return DatasetEntry(dataset_id, None, e, where)
        except ValidationError as e:
            err = e.errors()[0]
            loc = ".".join(str(x) for x in err["loc"])
            return DatasetEntry(dataset_id, None, InvalidManifestError(f"{where}: {loc}: {err['msg']}"), where)
        except Exception as e:
            return DatasetEntry(dataset_id, None, unexpected_error(where, e, self._logged), where)
        if info.id != dataset_id:
            return DatasetEntry(dataset_id, None, InvalidManifestError(f"{where}: its record names {info.id!r}"), where)
        return DatasetEntry(dataset_id, info, None, where, (pointer.chunks, self._epoch), pointer)

    def refresh(self, entry: DatasetEntry) -> DatasetEntry:
        if entry.id.startswith("milvus@"):
            return entry
        last = self._checked.get(entry.id)
        if entry.error is None and last is not None and time.monotonic() - last < self._refresh:
            return entry
        try:
            with self._engine():
                value = self._get(f"dataset:{entry.id}")
        except McpowerError as e:
            return entry if entry.error is not None else DatasetEntry(entry.id, None, e, entry.location)
        self._checked[entry.id] = time.monotonic()
        if value is None:
            gone = DatasetUnavailableError(f"{entry.location}: no longer in Milvus (removed since the last look)")
            return entry if entry.error is not None and entry.info is None else DatasetEntry(entry.id, None, gone)
        fresh = self._entry(entry.id, value)
        if fresh.version == entry.version and fresh.info == entry.info and entry.error is None:
            return entry
        return fresh

    def open(self, entry: DatasetEntry) -> MilvusStore:
        pointer = entry.handle
        if not isinstance(pointer, Pointer) or entry.info is None:
            raise DatasetUnavailableError(f"{entry.id}: not a dataset of this Milvus database")  # pragma: no cover
        with self._engine():
            return self._open(pointer, entry.info)

    def _open(self, pointer: Pointer, info: DatasetInfo) -> MilvusStore:
        where = self._location(pointer.dataset_id)
        for name in (pointer.chunks, pointer.docs):
            if not self._call("has_collection", name):
                raise IndexMismatchError(f"{where}: its collection {name} is missing (dropped?); re-ingest it")
            state = self._call("get_load_state", name)
            if "Loaded" not in str(state.get("state") if isinstance(state, dict) else state):
                self._call("load_collection", name)  # milvus-lite 3 and servers keep collections released
        fields = {f["name"]: f for f in self._call("describe_collection", pointer.chunks).get("fields", [])}
        dim = fields.get("dense", {}).get("params", {}).get("dim")
        if dim is None or int(dim) != info.embedding.dimension:
            raise IndexMismatchError(
                f"{where}: vector dimension {dim} != model dimension {info.embedding.dimension}; re-ingest it"
            )
        count = self._count(pointer.chunks)
        if count != info.counts.chunks:
            raise IndexMismatchError(
                f"{where}: counts disagree (collection {count} chunks, record {info.counts.chunks}); re-ingest it"
            )
        return MilvusStore(self.client, self._engine, info, pointer.chunks, pointer.docs, where)

    def _count(self, collection: str) -> int:
        rows = self._call("query", collection, filter="", output_fields=["count(*)"])
        return int(rows[0]["count(*)"]) if rows else 0

    def location(self, dataset_id: str) -> str:
        return f"{self._location(dataset_id)} ({self.where})"

    def _location(self, dataset_id: str) -> str:
        return f"milvus:{dataset_id}"

    def contains(self, dataset_id: str) -> bool:
        try:
            return self._get(f"dataset:{dataset_id}") is not None
        except McpowerError:
            return False

    # ------------------------------------------------------------ writing

    @contextlib.contextmanager
    def lock(self, dataset_id: str, wait: bool = False) -> Iterator[None]:
        self.client(create=True)  # a writer's: the only call that may create a lite file
        self._ensure_catalog()
        lease = Lease(
            lambda key: self._get(key),
            lambda key, value: self._put(key, "lease", value),
            self._delete,
            dataset_id,
            self._lease_ttl,
            self._settle,
        )
        lease.acquire(wait)
        self._lease = lease
        try:
            self._drop_stale(dataset_id)  # what writers that died left behind (nobody else writes now)
            yield
        finally:
            self._lease = None
            with contextlib.suppress(McpowerError):
                lease.release()

    def _drop_stale(self, dataset_id: str) -> None:
        value = self._get(f"dataset:{dataset_id}") or {}
        keep = {name for name in (value.get("chunks"), value.get("docs")) if isinstance(name, str)}
        for name in self._call("list_collections"):
            if version_of(dataset_id, name) is not None and name not in keep:
                logger.info("dropping %s, left by an earlier ingest of %s", name, dataset_id)
                self._call("drop_collection", name)

    def current(self, dataset_id: str) -> MilvusStore | None:
        try:
            entry = self._entry(dataset_id, self._get(f"dataset:{dataset_id}"))
            if entry.info is None or entry.error is not None:
                return None
            return self.open(entry)
        except McpowerError as e:
            logger.warning("existing dataset %s is unusable (%s); rebuilding it from scratch", dataset_id, e.message)
            return None

    def publish(self, build: DatasetBuild) -> DatasetInfo:
        info = build.info
        docs = {d.id: d for d in build.documents}
        problem = too_long(build.chunks, docs)
        if problem:
            raise IngestError(f"{info.id}: {problem}; exclude that file (--exclude) or shorten it")
        version = self._next_version(info.id)
        chunks_name, docs_name = collection_names(info.id, version)
        created: list[str] = []
        try:
            pymilvus = import_pymilvus()
            analysed = info.analysis is not None and info.analysis.scheme is not None
            undetermined = info.analysis.undetermined if info.analysis is not None else None
            schema, index = chunks_schema(pymilvus, info.embedding.dimension, analysed)
            self._call("create_collection", chunks_name, schema=schema, index_params=index)
            created.append(chunks_name)
            for start in range(0, len(build.chunks), INSERT_BATCH):
                stop = min(start + INSERT_BATCH, len(build.chunks))
                self._call(
                    "insert",
                    chunks_name,
                    data=chunk_rows(build.chunks, docs, build.vectors, start, stop, analysed, undetermined),
                )
            schema, index = docs_schema(pymilvus)
            self._call("create_collection", docs_name, schema=schema, index_params=index)
            created.append(docs_name)
            batch: list[dict[str, Any]] = []
            size = 0
            for row in doc_rows(build.documents):
                batch.append(row)
                size += len(row["content"])
                if len(batch) >= INSERT_BATCH or size >= REQUEST_CHARS:  # big requests are slow on lite
                    self._call("insert", docs_name, data=batch)
                    batch, size = [], 0
            if batch:
                self._call("insert", docs_name, data=batch)
            for name in created:
                self._call("flush", name)
            count = self._count(chunks_name)
            if count != len(build.chunks):
                raise IngestError(f"{info.id}: Milvus holds {count} of {len(build.chunks)} chunks after the insert")
            if self._lease is not None:
                self._lease.check()
            value = {
                "schema": SCHEMA_VERSION,
                "version": version,
                "chunks": chunks_name,
                "docs": docs_name,
                "info": info.model_dump(mode="json"),
            }
            self._put(f"dataset:{info.id}", "dataset", value)  # the switch: one upsert
        except BaseException as e:
            for name in created:  # best effort; the next ingest drops what is left
                with contextlib.suppress(Exception):
                    self._call("drop_collection", name)
            if isinstance(e, EngineUnavailableError):
                raise IngestError(f"{info.id}: {e.message}; the previous version is untouched") from e
            raise
        self._checked.pop(info.id, None)
        return info

    def _next_version(self, dataset_id: str) -> int:
        """One more than the current version and than every version the engine holds collections
        of. A pointer record that cannot be read is replaced, not trusted: its version counts only
        if it is a whole number in range, and the new collections' names are new either way.

        Raises:
            IngestError: the dataset's collections claim the last version there may be.
        """
        previous = self._get(f"dataset:{dataset_id}") or {}
        claimed = previous.get("version")
        versions = [v for v in (version_of(dataset_id, n) for n in self._call("list_collections")) if v is not None]
        if previous and self._entry(dataset_id, previous).error is not None:
            logger.info("the pointer record of %s cannot be read; this ingest replaces it", dataset_id)
        if is_count(claimed) and 1 <= claimed <= MAX_VERSION:
            versions.append(claimed)
        version = max(versions, default=0) + 1
        if version > MAX_VERSION:
            raise IngestError(f"{dataset_id}: Milvus holds its version {MAX_VERSION}, the last; drop its collections")
        return version


if TYPE_CHECKING:  # mypy proves the classes implement the interfaces (nothing runs)
    from mcpower.store import Catalog, Store

    def _implements(catalog: MilvusCatalog, store: MilvusStore) -> tuple[Catalog, Store]:
        return catalog, store
