"""The lookups behind a result id: what a result id is, the chunk it names, its source text
(get_source) and its document's facts (get_metadata) — over any store, as search.py searches."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from mcpower.errors import DatasetNotFoundError, InvalidQueryError, ResultNotFoundError
from mcpower.manifest import MAX_ID_CHARS, is_valid_id
from mcpower.registry import Registry
from mcpower.results import (
    MAX_HEADING_CHARS,
    Lines,
    MetadataResponse,
    Pages,
    SourceResponse,
    clip_chars,
    clip_json,
    clip_json_tokens,
    estimate_tokens,
)
from mcpower.sources.citation import url_of
from mcpower.store import MAX_CHUNK_ID, ChunkHit, Store

SCOPES = ("chunk", "neighbors", "section")


def make_result_id(dataset: str, chunk_id: int) -> str:
    """``<dataset>:<chunk id as 16 hex digits>``: names one chunk for get_source / get_metadata."""
    return f"{dataset}:{chunk_id:016x}"


def parse_result_id(result_id: str) -> tuple[str, int]:
    """The dataset id and chunk id a result id names.

    Raises:
        ResultNotFoundError: not of the form make_result_id() gives.
    """
    dataset, _, hex_id = result_id.rpartition(":") if isinstance(result_id, str) else ("", "", "")
    try:
        cid = int(hex_id, 16) if len(hex_id) == 16 else -1
    except ValueError:
        cid = -1
    if not 0 <= cid <= MAX_CHUNK_ID or not is_valid_id(dataset) or len(dataset) > MAX_ID_CHARS:
        raise ResultNotFoundError(
            f"{str(result_id)[:80]!r} is not a result id; use one from a search result (like 'docs:0123456789abcdef')"
        )
    return dataset, cid


def resolve(registry: Registry, result_id: str) -> tuple[Store, ChunkHit]:
    """The store and chunk a result id names.

    Raises:
        ResultNotFoundError: malformed id, unknown dataset, or no such chunk (e.g. re-ingested away).
    """
    dataset, cid = parse_result_id(result_id)
    try:
        store = registry.store(dataset)
    except DatasetNotFoundError as e:
        raise ResultNotFoundError(f"no result {result_id!r}: {e.message}") from e
    hit = store.chunks([cid]).get(cid)
    if hit is None:
        raise ResultNotFoundError(
            f"no result {result_id!r} in dataset {dataset!r}; it may have changed since it was re-ingested "
            "— search again for fresh ids"
        )
    return store, hit


def get_source(
    registry: Registry,
    result_id: str,
    scope: str = "neighbors",
    max_chars: int | None = None,
    max_bytes: int | None = None,
    max_tokens: int | None = None,
) -> SourceResponse:
    """The text behind a result: the chunk, the chunk with its neighbors, or its heading section.

    Text comes from the stored document by line range, so overlapping chunks are not repeated. It
    is cut to ``max_chars`` characters and to ``max_bytes`` bytes as JSON, if given, and so that the
    whole response takes at most ``max_tokens`` (estimated; the other fields are never cut).

    Raises:
        ResultNotFoundError, InvalidQueryError (bad scope).
    """
    if scope not in SCOPES:
        raise InvalidQueryError(f"scope must be chunk, neighbors or section, got {str(scope)[:20]!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise InvalidQueryError(f"max_tokens must be a positive whole number, got {str(max_tokens)[:20]}")
    store, hit = resolve(registry, result_id)
    if scope == "chunk":
        around = [hit]
    elif scope == "neighbors":
        around = store.neighbors(hit, 1, 1)
    else:
        around = [c for c in store.neighbors(hit, 10**6, 10**6) if c.heading_path == hit.heading_path]
    start, end = min(c.start_line for c in around), max(c.end_line for c in around)
    from mcpower.chunking import source_lines  # the chunkers are not loaded for a search

    doc = store.document_by_id(hit.document_id)
    lines = source_lines(doc.content) if doc else []
    content = "\n".join(lines[start - 1 : end]) if scope != "chunk" else hit.text
    clipped = content[:max_chars] if max_chars is not None else content
    if max_bytes is not None:
        clipped = clip_json(clipped, max_bytes)
    response = SourceResponse(
        result_id=result_id,
        dataset=store.info.id,
        content="",
        scope=scope,
        source_path=hit.path,
        title=hit.title,
        heading_path=clip_chars(hit.heading_path, MAX_HEADING_CHARS),
        chunk_index=hit.ordinal,
        lines=Lines(start=start, end=end),
        pages=pages_of(around),
        truncated=True,  # the longer of the two values, while the frame is measured
        retrieved_at=utc_now_iso(),
        indexed_at=hit.indexed_at,
        stale=registry.freshness.stale(store.info.source, hit.path, hit.size, hit.mtime),
        url=url_of(store.info.source, hit.path),
    )
    if max_tokens is not None:
        frame = estimate_tokens(response.model_dump_json()) - 1  # less the empty content's quotes
        clipped = clip_json_tokens(clipped, max(max_tokens - frame, 0))
    response.content, response.truncated = clipped, len(clipped) < len(content)
    return response


def get_metadata(registry: Registry, result_id: str) -> MetadataResponse:
    """Facts about the document behind a result.

    Raises:
        ResultNotFoundError.
    """
    store, hit = resolve(registry, result_id)
    doc = store.document_by_id(hit.document_id)
    if doc is None:  # pragma: no cover - the schema's foreign key guarantees it
        raise ResultNotFoundError(f"no document for result {result_id!r}")
    return MetadataResponse(
        result_id=result_id,
        dataset=store.info.id,
        file_name=Path(doc.path).name,
        file_type=doc.file_type,
        source_path=doc.path,
        title=doc.title,
        size=doc.size,
        content_hash=doc.content_hash,
        indexed_at=doc.indexed_at,
        chunk_index=hit.ordinal,
        chunk_count=store.chunk_count(hit.document_id),
        stale=registry.freshness.stale(store.info.source, doc.path, doc.size, doc.mtime),
        url=url_of(store.info.source, doc.path),
    )


def pages_of(hits: list[ChunkHit]) -> Pages | None:
    """The pages the chunks are on, for a paged document (PDF); None otherwise."""
    starts = [h.page_start for h in hits if h.page_start is not None]
    ends = [h.page_end for h in hits if h.page_end is not None]
    return Pages(start=min(starts), end=max(ends)) if starts and ends else None


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()
