"""What a search returns: the seed-003 envelope, as pydantic models the CLI and the MCP server share."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Mode = Literal["hybrid", "semantic", "keyword"]
MODES: tuple[Mode, ...] = ("hybrid", "semantic", "keyword")
MAX_SNIPPET_CHARS = 2048


class SearchFilters(BaseModel):
    """Filters from seed 003; they combine (AND) and apply before the top k is taken."""

    path: str | None = Field(None, description="exact document path, relative to the dataset root")
    folder: str | None = Field(None, description="folder prefix, e.g. 'guide' or 'guide/install'")
    file_type: str | None = Field(None, description="file suffix, e.g. '.md'")

    @property
    def active(self) -> bool:
        return bool(self.path or self.folder or self.file_type)


class Lines(BaseModel):
    start: int = Field(description="first line of the chunk in the source file, from 1")
    end: int = Field(description="last line of the chunk in the source file, inclusive")


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


class ErrorInfo(BaseModel):
    code: str
    message: str


class SearchResponse(BaseModel):
    """The seed-003 envelope: status ok / empty / error, results and meta."""

    status: Literal["ok", "empty", "error"]
    results: list[SearchResult] = Field(default_factory=list)
    meta: SearchMeta
    error: ErrorInfo | None = None
