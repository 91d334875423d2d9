"""What a search returns — the search response envelope (status, results, meta), the source and
metadata lookups, dataset summaries — as pydantic models the CLI and the MCP server share, and the
filters a search takes."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

Mode = Literal["hybrid", "semantic", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "semantic", "keyword")
MAX_SNIPPET_CHARS = 2048
# A heading path is context, not content: a 20,000-character heading must not fill a response.
MAX_HEADING_CHARS = 512
_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_surrogates(text: str) -> str:
    """``text`` with lone surrogates (argv bytes that are not UTF-8) replaced: SQLite, tokenizers and
    JSON encoders cannot take them."""
    return _SURROGATE.sub("\ufffd", text)


def normalize_rel(path: str) -> str:
    """A user-typed relative path in the form documents are stored: 'a/b.md' (no ./, no slashes around)."""
    parts = [p for p in path.replace("\\", "/").split("/") if p not in ("", ".")]
    return "/".join(parts)


class SearchFilters(BaseModel):
    """Which documents a search may return; filters combine (AND) and apply before the top k is taken.

    Frozen, so a store can cache what a filter allows.
    """

    model_config = ConfigDict(frozen=True)

    path: str | None = Field(None, description="exact document path, relative to the dataset root")
    folder: str | None = Field(None, description="folder prefix, e.g. 'guide' or 'guide/install'")
    file_type: str | None = Field(None, description="file suffix, e.g. '.md'")

    @field_validator("path", "folder", "file_type")
    @classmethod
    def _encodable(cls, v: str | None) -> str | None:
        return replace_surrogates(v) if v else v

    @property
    def active(self) -> bool:
        return bool(self.path or self.folder or self.file_type)


class Lines(BaseModel):
    start: int = Field(
        description="first line of the chunk in the document's stored text, from 1: the file's own "
        "lines for text formats, the extracted text's for HTML, PDF, Word, reST and notebooks"
    )
    end: int = Field(description="last line of the chunk, inclusive")


class Pages(BaseModel):
    start: int = Field(description="first page, from 1 (the page's position in the file)")
    end: int = Field(description="last page, inclusive")


def _absent(value: object) -> bool:
    return value is None


class SearchResult(BaseModel):
    """One matching chunk."""

    result_id: str = Field(description="stable id; pass it to get_source / get_metadata")
    score: float = Field(ge=0.0, le=1.0, description="relevance in 0..1, higher is better")
    title: str = Field(description="document title")
    path: str = Field(description="document path relative to the dataset root, for citation")
    snippet: str = Field(max_length=MAX_SNIPPET_CHARS, description="the best-matching part of the chunk")
    file_type: str
    heading_path: str = Field(description="headings above the chunk, 'Guide > Install > Linux'")
    lines: Lines
    dataset: str
    pages: Pages | None = Field(None, description="the PDF pages the chunk is on; null for formats without pages")
    indexed_at: str = Field("", description="when the document was indexed (ISO 8601, UTC)")
    stale: bool = Field(
        False, description="true when the source file has changed or vanished since it was indexed: re-ingest it"
    )
    stale_reason: str | None = Field(
        None,
        exclude_if=_absent,
        description="with stale: 'changed', 'deleted' (the file is gone) or 'folder gone' (the source folder moved)",
    )
    url: str | None = Field(
        None,
        exclude_if=_absent,
        description="where the document lives on the web, for citation: the page's URL for a crawled site, the "
        "file at the commit read for a repository on a known host; absent for local files",
    )


class SearchMeta(BaseModel):
    datasets: list[str] = Field(description="datasets searched")
    mode: Mode
    limit: int
    count: int
    duration_ms: float
    low_confidence: bool = Field(
        description="true when even the best result matches weakly: the answer may not be in the data"
    )
    min_score: float = 0.0
    notes: list[str] = Field(
        default_factory=list, description="what the caller should know about this answer: datasets skipped and why"
    )
    # Paging and budgets: absent unless the caller asked for them (or a size cap cut the answer),
    # so a plain search answers exactly as before they existed.
    offset: int | None = Field(None, exclude_if=_absent, description="rank of the first result, from 0")
    next_offset: int | None = Field(
        None, exclude_if=_absent, description="pass as `offset` for the next page; absent on the last page"
    )
    truncated: bool | None = Field(
        None, exclude_if=_absent, description="true when snippets were shortened or results left out to fit the budget"
    )
    estimated_tokens: int | None = Field(
        None, exclude_if=_absent, description="estimated tokens of this response (max_tokens given)"
    )


class SearchResponse(BaseModel):
    """The search response envelope: status ok or empty, results and meta.

    A failed call answers with :class:`ErrorResponse` instead (status "error").
    """

    status: Literal["ok", "empty", "error"]
    results: list[SearchResult] = Field(default_factory=list)
    meta: SearchMeta


class ErrorInfo(BaseModel):
    code: str = Field(description="stable machine-readable name, e.g. DATASET_NOT_FOUND")
    message: str = Field(description="what went wrong and how to fix it")


class ErrorResponse(BaseModel):
    """What a failed tool call carries: status "error" and the coded error."""

    status: Literal["error"] = "error"
    error: ErrorInfo


class SourceResponse(BaseModel):
    """The text behind a result id (the original design's DocumentSource)."""

    result_id: str
    dataset: str
    content: str = Field(description="the requested text, taken from the stored document")
    scope: Literal["chunk", "neighbors", "section"] = Field(
        description="chunk: the chunk alone; neighbors: with the chunks around it; section: its whole heading section"
    )
    source_path: str
    title: str
    heading_path: str
    chunk_index: int = Field(description="position of the chunk in its document, from 0")
    lines: Lines = Field(description="line range of `content` in the document's stored text")
    pages: Pages | None = Field(None, description="the PDF pages `content` is on; null for formats without pages")
    truncated: bool = Field(description="true when content was cut to the size limit or the token budget")
    retrieved_at: str
    indexed_at: str = Field("", description="when the document was indexed (ISO 8601, UTC)")
    stale: bool = Field(False, description="true when the source file has changed or vanished since it was indexed")
    url: str | None = Field(None, exclude_if=_absent, description="the document's URL, as in search results")


class MetadataResponse(BaseModel):
    """Facts about the document behind a result id (the original design's DocumentMetadata)."""

    result_id: str
    dataset: str
    file_name: str
    file_type: str
    source_path: str
    title: str
    size: int
    content_hash: str = Field(description="sha256 of the file as ingested")
    indexed_at: str
    chunk_index: int
    chunk_count: int = Field(description="chunks in the document")
    stale: bool = Field(False, description="true when the source file has changed or vanished since it was indexed")
    url: str | None = Field(None, exclude_if=_absent, description="the document's URL, as in search results")


class DatasetSummary(BaseModel):
    """A dataset as list_datasets shows it; error entries carry only id, status and error."""

    id: str
    status: Literal["ready", "error"]
    name: str | None = None
    description: str | None = None
    default_top_k: int | None = None
    documents: int | None = None
    chunks: int | None = None
    file_types: dict[str, int] | None = Field(None, description="documents per file type, e.g. {'.md': 12, '.pdf': 3}")
    languages: dict[str, int] | None = Field(
        None,
        description="chunks per language (ISO 639 code; 'und': not determined), e.g. {'de': 812, 'en': 40}",
    )
    model: str | None = None
    backend: str | None = None
    updated_at: str | None = None
    format: Literal["mcpower", "original"] | None = Field(
        None,
        description="mcpower, or original: built by the original system and served read-only "
        "(`mcpower import` converts it to mcpower's format)",
    )
    error: str | None = None
    watched: bool | None = Field(None, description="true while an mcpower process re-indexes it as its files change")
    watch_state: Literal["watching", "indexing", "source_missing", "failed"] | None = None
    watch_message: str | None = Field(None, description="why the watch needs attention, if it does")


class ReindexCounts(BaseModel):
    """What a watcher's last published re-index changed (the web page's "last re-index")."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    added: int = Field(0, ge=0)
    changed: int = Field(0, ge=0)
    removed: int = Field(0, ge=0)
    embedded: int = Field(0, ge=0, description="chunks embedded (the rest were carried over)")
    seconds: float = Field(0.0, ge=0)


class WatchState(BaseModel):
    """What a watcher reports about a dataset it watches (kept beside the dataset, read by anyone)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    state: Literal["watching", "indexing", "source_missing", "failed"]
    message: str | None = Field(None, max_length=500)
    pid: int = Field(ge=0)
    since: str = Field("", max_length=40)
    last_update: str | None = Field(None, max_length=40)
    last_counts: ReindexCounts | None = None


def json_size(text: str) -> int:
    """Bytes ``text`` takes as a JSON string in UTF-8 (emoji take 4, control characters 6)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def estimate_tokens(text: str) -> int:
    """Approximate LLM tokens of ``text``: 3.5 ASCII characters a token (JSON's quotes, keys and
    punctuation make it denser than prose's 4), one token for any other character, two for one
    outside the Basic Multilingual Plane (emoji).

    On search and get_source responses over the FastAPI docs this is within 5% of OpenAI's cl100k
    and o200k tokenizers in total (0.87-1.13 per response); other models' tokenizers differ more
    (docs/search.md).
    """
    ascii_chars = len(text.encode("ascii", "ignore"))
    astral = len(text.encode("utf-16-le", "surrogatepass")) // 2 - len(text)
    return -(-2 * ascii_chars // 7) + len(text) - ascii_chars + astral


def json_tokens(text: str) -> int:
    """Estimated tokens ``text`` takes as a JSON string."""
    return estimate_tokens(json.dumps(text, ensure_ascii=False))


def clip_json(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose JSON encoding fits in ``max_bytes``.

    Caps on characters alone do not bound a response: the same number of characters can take
    six times the bytes once encoded.
    """
    if len(text) * 6 + 2 <= max_bytes:
        return text
    return _longest_prefix(text, lambda t: json_size(t) <= max_bytes)


def clip_json_tokens(text: str, max_tokens: int) -> str:
    """The longest prefix of ``text`` whose JSON encoding is estimated at ``max_tokens`` tokens or fewer."""
    return _longest_prefix(text, lambda t: json_tokens(t) <= max_tokens)


def _longest_prefix(text: str, fits: Callable[[str], bool]) -> str:
    """The longest prefix of ``text`` that ``fits`` (which must hold for every prefix of one that does)."""
    if fits(text):
        return text
    lo, hi = 0, len(text)
    while lo < hi:  # binary search on the prefix length; json.dumps is C-fast
        mid = (lo + hi + 1) // 2
        if fits(text[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return text[:lo]


def clip_chars(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


# The shortest snippet a result keeps while a response is shrunk to fit its budget: snippets are
# halved while one is longer than 64 characters of English would be in tokens, so a Chinese or
# Japanese snippet (a token a character) shrinks as far in tokens as an English one does.
MIN_SNIPPET_CHARS = 64
MIN_SNIPPET_TOKENS = estimate_tokens("x" * MIN_SNIPPET_CHARS)
_RESULT = TypeAdapter(SearchResult)


def fit_results(
    results_of: Callable[[int], list[SearchResult]],
    snippet_chars: int,
    max_bytes: int | None,
    max_tokens: int | None,
    meta: SearchMeta,
) -> tuple[list[SearchResult], bool]:
    """The results (``results_of`` a snippet length), shortened to fit the budgets; and whether
    anything was cut.

    Long or multi-byte chunks: shorter snippets, then fewer results (never none), until the results
    take at most ``max_bytes`` as JSON and the whole response at most ``max_tokens`` (estimated).
    """
    if max_bytes is None and max_tokens is None:
        return results_of(snippet_chars), False

    def build(chars: int) -> tuple[list[SearchResult], list[int], list[int]]:
        results = results_of(chars)
        dumped = [_RESULT.dump_json(r) for r in results]
        tokens = [estimate_tokens(d.decode()) for d in dumped] if max_tokens is not None else []
        return results, [len(d) for d in dumped], tokens

    # The response around the results, with every field the budget may add, is a fixed cost.
    frame = SearchMeta(**{**meta.model_dump(), "truncated": True, "next_offset": 10**6, "estimated_tokens": 10**6})
    envelope = estimate_tokens(SearchResponse(status="empty", meta=frame).model_dump_json())

    def fits(sizes: list[int], tokens: list[int], n: int) -> bool:
        json_bytes = sum(sizes[:n]) + max(n - 1, 0) + 2  # "[a,b]"
        return (max_bytes is None or json_bytes <= max_bytes) and (
            max_tokens is None or envelope + sum(tokens[:n]) + n <= max_tokens
        )

    chars = snippet_chars
    results, sizes, tokens = build(chars)
    while (
        not fits(sizes, tokens, len(results))
        and chars > 1
        and any(estimate_tokens(r.snippet) > MIN_SNIPPET_TOKENS for r in results)
    ):
        chars //= 2
        results, sizes, tokens = build(chars)
    n = len(results)
    while n > 1 and not fits(sizes, tokens, n):
        n -= 1
    return results[:n], chars < snippet_chars or n < len(results)
