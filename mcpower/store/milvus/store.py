"""A dataset version in Milvus, read through the Store interface.

Candidates come from the engine, scores are fused in mcpower (ranking.fuse) as for every store:
the dense search gives cosines (inner product of unit vectors), the BM25 search gives the engine's
BM25 (global statistics, k1 1.2, b 0.75), and the BM25 of given ids is a BM25 search filtered to
them. The keyword search returns the candidates' vectors with their ids, so the cosines of keyword
candidates missing from the vector list cost no extra call. Filters are engine expressions applied
before the top k.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import numpy as np

from mcpower.analysis import query_languages, query_terms
from mcpower.manifest import DatasetInfo
from mcpower.results import SearchFilters, normalize_rel
from mcpower.store import ChunkHit, ChunkRow, DocumentRow, DocumentSummary
from mcpower.store.milvus.client import CALL_TIMEOUT, guarded, int_list, literal
from mcpower.store.milvus.schema import CHUNK_FIELDS, DOC_FACTS, OPTIONAL_FIELDS, document_of, hit_of
from mcpower.terms import split_terms

if TYPE_CHECKING:
    from numpy.typing import NDArray

# The most a search may ask of the engine (Milvus' topk limit).
MAX_LIMIT = 16384
VECTOR_CACHE = 4096  # vectors of recent keyword candidates, by chunk id
PAGE = 1000  # rows per page when reading a whole collection


class MilvusKeywordMatches:
    """The keyword candidates of one query: asked of the engine as needed."""

    def __init__(self, store: MilvusStore, text: str, expr: str) -> None:
        self._store, self._text, self._expr = store, text, expr
        self._known: dict[int, float] = {}

    def top(self, k: int) -> list[tuple[int, float]]:
        if not self._text or k <= 0:
            return []
        found = self._store.bm25(self._text, self._expr, min(k, MAX_LIMIT), with_vectors=True)
        self._known.update(found)
        return sorted(found.items(), key=lambda kv: (-kv[1], kv[0]))[:k]

    def scores_of(self, ids: Iterable[int]) -> dict[int, float]:
        wanted = list(dict.fromkeys(int(i) for i in ids))
        if not self._text:
            return {}
        missing = [i for i in wanted if i not in self._known]
        for start in range(0, len(missing), MAX_LIMIT):
            batch = missing[start : start + MAX_LIMIT]
            expr = f"id in {int_list(batch)}" + (f" and ({self._expr})" if self._expr else "")
            self._known.update(self._store.bm25(self._text, expr, len(batch)))
            self._known.update({i: 0.0 for i in batch if i not in self._known})
        return {i: self._known[i] for i in wanted if self._known.get(i, 0.0) > 0}


class MilvusStore:
    """One published version of one dataset: its chunks and documents collections. Thread-safe
    (pymilvus clients are); never changes once published.

    ``client`` gives the catalog's current client and ``watch`` reports each call's outcome to the
    catalog, so a store loaded before the engine went away works again once it is back.
    """

    def __init__(
        self,
        client: Callable[[], Any],
        watch: Callable[[], AbstractContextManager[None]],
        info: DatasetInfo,
        chunks: str,
        docs: str,
        where: str,
    ) -> None:
        self._client, self._watch = client, watch
        self._info = info
        self.chunks_collection, self.docs_collection = chunks, docs
        self._where = where  # for messages: the engine and the dataset
        self._lock = threading.Lock()
        self._vectors: OrderedDict[int, NDArray[np.float32]] = OrderedDict()
        self._paths: list[tuple[int, str, str]] | None = None  # (doc id, path, file type), for odd filters
        self._optional_fields: tuple[str, ...] | None = None

    @property
    def info(self) -> DatasetInfo:
        return self._info

    def close(self) -> None:
        """Nothing to release: the connection belongs to the catalog."""

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._watch():
            return guarded(self._where, getattr(self._client(), method), *args, timeout=CALL_TIMEOUT, **kwargs)

    # -- search

    def semantic(
        self, vector: NDArray[np.float32], k: int, where: SearchFilters | None = None
    ) -> list[tuple[int, float]]:
        expr = self.expression(where)
        if expr is None or k <= 0:
            return []
        hits = self._call(
            "search",
            self.chunks_collection,
            data=[np.asarray(vector, dtype=np.float32).tolist()],
            anns_field="dense",
            limit=min(k, MAX_LIMIT),
            filter=expr,
            search_params={"metric_type": "IP", "params": {}},
            output_fields=["id"],
        )[0]
        pairs = [(int(h["id"]), float(h["distance"])) for h in hits]
        return sorted(pairs, key=lambda kv: (-kv[1], kv[0]))

    def keyword(self, query: str, where: SearchFilters | None = None) -> MilvusKeywordMatches:
        expr = self.expression(where)
        analysis = self._info.analysis
        if expr is None:
            text = ""
        elif analysis is not None and analysis.scheme is not None:  # the terms field: analysed as the index
            text = " ".join(query_terms(query, query_languages(self._info.counts.languages, analysis.undetermined)))
        else:  # the engine's English analyzer: each distinct word once (it counts a repeat twice; FTS5 once)
            text = " ".join(dict.fromkeys(split_terms(query)))
        return MilvusKeywordMatches(self, text, expr or "")

    def bm25(self, text: str, expr: str, limit: int, with_vectors: bool = False) -> dict[int, float]:
        """Engine BM25 of the best ``limit`` chunks ``expr`` allows (their vectors remembered)."""
        hits = self._call(
            "search",
            self.chunks_collection,
            data=[text],
            anns_field="sparse",
            limit=limit,
            filter=expr,
            search_params={"metric_type": "BM25", "params": {}},
            output_fields=["id", "dense"] if with_vectors else ["id"],
        )[0]
        found: dict[int, float] = {}
        with self._lock:
            for h in hits:
                cid = int(h["id"])
                found[cid] = abs(float(h["distance"]))  # milvus-lite 3 reports BM25 negated
                vec = h.get("entity", {}).get("dense") if with_vectors else None
                if vec is not None:
                    self._vectors[cid] = np.asarray(vec, dtype=np.float32)
                    self._vectors.move_to_end(cid)
            while len(self._vectors) > VECTOR_CACHE:
                self._vectors.popitem(last=False)
        return {i: s for i, s in found.items() if s > 0}

    def expression(self, where: SearchFilters | None) -> str | None:
        """The filter as an engine expression ('' for none), or None when nothing can pass."""
        if where is None or not where.active:
            return ""
        parts: list[str] = []
        odd = False  # a path no literal can carry: the documents it names are found here instead
        if where.path:
            lit = literal(normalize_rel(where.path))
            if lit is None:
                odd = True
            else:
                parts.append(f"path == {lit}")
        folder = normalize_rel(where.folder) if where.folder else ""
        if folder:
            lo, hi = literal(folder + "/"), literal(folder + "0")  # '0' follows '/': the range is the prefix
            if lo is None or hi is None:
                odd = True
            else:
                parts.append(f"(path >= {lo} and path < {hi})")
        if where.file_type:
            ft = where.file_type.lower()
            lit = literal(ft if ft.startswith(".") else "." + ft)
            if lit is None:
                return None
            parts.append(f"file_type == {lit}")
        if odd:
            ids = [d for d, p, _ in self._doc_paths() if _passes(p, where.path, folder)]
            if not ids:
                return None
            parts.append(f"doc_id in {int_list(ids)}")
        return " and ".join(parts)

    def _doc_paths(self) -> list[tuple[int, str, str]]:
        if self._paths is None:
            rows = self._query_all(self.docs_collection, "part == 0", ["doc_id", "path", "file_type"])
            self._paths = sorted((int(r["doc_id"]), str(r["path"]), str(r["file_type"])) for r in rows)
        return self._paths

    # -- lookups

    def vectors(self, ids: Sequence[int]) -> NDArray[np.float32]:
        dim = self._info.embedding.dimension
        with self._lock:
            found = {i: self._vectors[i] for i in ids if i in self._vectors}
        missing = [int(i) for i in ids if i not in found]
        for start in range(0, len(missing), PAGE):
            batch = missing[start : start + PAGE]
            rows = self._call(
                "query", self.chunks_collection, filter=f"id in {int_list(batch)}", output_fields=["id", "dense"]
            )
            found.update({int(r["id"]): np.asarray(r["dense"], dtype=np.float32) for r in rows})
        if not ids:
            return np.zeros((0, dim), dtype=np.float32)
        zero = np.zeros(dim, dtype=np.float32)
        return np.vstack([found.get(int(i), zero) for i in ids]).astype(np.float32)

    def chunks(self, ids: Sequence[int], text: bool = True) -> dict[int, ChunkHit]:
        """The rows of ``ids``, always with their text (a second round trip for the results' text
        would cost more than reading it with the rows), read by a vector search filtered to them: milvus-lite answers a
        primary-key ``query`` by scanning every row (13-16 ms at 100k chunks), a filtered search in
        2-3 ms. Rows the search did not return (an approximate index on a server may skip some)
        are then asked of ``query``."""
        wanted = list(dict.fromkeys(int(i) for i in ids))
        found: dict[int, ChunkHit] = {}
        fields = [*CHUNK_FIELDS, *self._optional()]
        probe = [1.0] + [0.0] * (self._info.embedding.dimension - 1)  # any vector: every row passing is returned
        for start in range(0, len(wanted), MAX_LIMIT):
            batch = wanted[start : start + MAX_LIMIT]
            hits = self._call(
                "search",
                self.chunks_collection,
                data=[probe],
                anns_field="dense",
                limit=len(batch),
                filter=f"id in {int_list(batch)}",
                search_params={"metric_type": "IP", "params": {}},
                output_fields=fields,
            )[0]
            found.update((int(h["id"]), hit_of({**h.get("entity", {}), "id": h["id"]})) for h in hits)
        missing = [i for i in wanted if i not in found]
        if missing:
            rows = self._call(
                "query", self.chunks_collection, filter=f"id in {int_list(missing)}", output_fields=fields
            )
            found.update((hit.id, hit) for hit in map(hit_of, rows))
        return found

    def neighbors(self, hit: ChunkHit, before: int, after: int) -> list[ChunkHit]:
        lo, hi = hit.ordinal - before, hit.ordinal + after
        expr = f"doc_id == {int(hit.document_id)} and ordinal >= {int(lo)} and ordinal <= {int(hi)}"
        rows = self._call(
            "query", self.chunks_collection, filter=expr, output_fields=[*CHUNK_FIELDS, *self._optional()]
        )
        return sorted(map(hit_of, rows), key=lambda h: h.ordinal)

    def chunk_count(self, document_id: int) -> int:
        rows = self._call(
            "query", self.chunks_collection, filter=f"doc_id == {int(document_id)}", output_fields=["count(*)"]
        )
        return int(rows[0]["count(*)"]) if rows else 0

    def document(self, path: str) -> DocumentRow | None:
        lit = literal(path)
        if lit is None:
            found = [d for d, p, _ in self._doc_paths() if p == path]
            return self.document_by_id(found[0]) if found else None
        return self._document(f"path == {lit}")

    def document_by_id(self, document_id: int) -> DocumentRow | None:
        return self._document(f"doc_id == {int(document_id)}")

    def _document(self, expr: str) -> DocumentRow | None:
        rows = self._query_all(self.docs_collection, expr, [*DOC_FACTS, "part", "content"])
        if not rows:
            return None
        first = min(int(r["doc_id"]) for r in rows)  # one document (paths are unique in a version)
        return document_of([r for r in rows if int(r["doc_id"]) == first])

    def documents(self, limit: int | None = None) -> list[DocumentSummary]:
        expr = "part == 0"
        if limit is not None:
            if limit <= 0:
                return []
            expr += f" and doc_id <= {int(limit)}"  # ids count documents from 1: the first `limit`
        rows = self._query_all(self.docs_collection, expr, ["path", "title", "file_type", "size"], limit)
        out = [DocumentSummary(str(r["path"]), str(r["title"]), str(r["file_type"]), int(r["size"])) for r in rows]
        return sorted(out, key=lambda d: d.path)

    def iter_documents(self) -> Iterator[tuple[DocumentRow, list[ChunkRow]]]:
        parts: dict[int, list[dict[str, Any]]] = {}
        for r in self._query_all(self.docs_collection, "part >= 0", [*DOC_FACTS, "part", "content"]):
            parts.setdefault(int(r["doc_id"]), []).append(r)
        fields = [
            "id",
            "doc_id",
            "ordinal",
            "heading_path",
            "start_line",
            "end_line",
            "body",
            "text_at",
            *self._optional(),
        ]
        by_doc: dict[int, list[ChunkRow]] = {}
        for r in self._query_all(self.chunks_collection, "id >= 0", fields):
            h = hit_of({**r, "path": "", "title": "", "file_type": ""})
            by_doc.setdefault(h.document_id, []).append(
                ChunkRow(
                    h.id,
                    h.document_id,
                    h.ordinal,
                    h.heading_path,
                    h.start_line,
                    h.end_line,
                    h.text,
                    h.page_start,
                    h.page_end,
                    h.language,
                )
            )
        for doc_id in sorted(parts):
            yield document_of(parts[doc_id]), sorted(by_doc.get(doc_id, []), key=lambda c: c.ordinal)

    def _optional(self) -> tuple[str, ...]:
        """The page and language fields this version's chunks collection has (asked of the engine once)."""
        if self._optional_fields is None:
            described = self._call("describe_collection", self.chunks_collection)
            names = {f.get("name") for f in described.get("fields", [])}
            self._optional_fields = tuple(f for f in OPTIONAL_FIELDS if f in names)
        return self._optional_fields

    def _query_all(
        self, collection: str, expr: str, fields: list[str], limit: int | None = None
    ) -> list[dict[str, Any]]:
        """Every row ``expr`` selects (at most ``limit``), page by page (a single query is capped at
        16,384 rows)."""
        with self._watch():
            it = guarded(
                self._where,
                self._client().query_iterator,
                collection,
                batch_size=PAGE if limit is None else min(PAGE, limit),
                limit=-1 if limit is None else limit,
                filter=expr,
                output_fields=fields,
                timeout=CALL_TIMEOUT,
            )
            rows: list[dict[str, Any]] = []
            try:
                while batch := guarded(self._where, it.next):
                    rows.extend(batch)
            finally:
                it.close()
            return rows


def _passes(path: str, exact: str | None, folder: str) -> bool:
    if exact and path != normalize_rel(exact):
        return False
    return not folder or path.startswith(folder + "/")
