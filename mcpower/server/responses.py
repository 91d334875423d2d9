"""How answers reach MCP clients: output schemas that admit the error envelope, coded error
results with plain messages, and no path of this machine in anything a client reads."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError

from mcpower.ranking import MAX_QUERY_CHARS, MAX_TOP_K
from mcpower.results import (
    DatasetSummary,
    ErrorInfo,
    ErrorResponse,
    MetadataResponse,
    SearchResponse,
    SourceResponse,
)

# An absolute path (a POSIX one with two parts or more, or a Windows drive path), not part of a URI.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~-])(?:/[^\s/'\"`]+){2,}/?|\b[A-Za-z]:\\[^\s'\"`]+")


def redact_paths(message: str, known: tuple[str, ...] = ()) -> str:
    """``message`` with the absolute paths of this machine replaced: ``known`` folders by their names
    for users (``<datasets>`` ...), the home folder by ``~``, any other absolute path by ``<path>``."""
    home = str(Path.home())
    for folder, name in (*zip(known[::2], known[1::2]), (home, "~")):
        if folder and len(folder) > 1:
            message = message.replace(folder, name)
    return _ABSOLUTE_PATH.sub("<path>", message)


def _admit_error_payload(schema: dict[str, Any]) -> None:
    """Let an output schema also accept the error payload of an isError result (ErrorResponse).

    Some clients (the TypeScript SDK's Client.callTool) validate structuredContent against the
    outputSchema even when isError is true, and would otherwise throw instead of showing the error.
    """
    required = schema.pop("required", [])
    schema["properties"].setdefault(
        "error",
        {
            "type": "object",
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
            "required": ["code", "message"],
        },
    )
    schema["anyOf"] = [
        {"required": required},
        {"properties": {"status": {"const": "error"}}, "required": ["status", "error"]},
    ]


_OUTPUT = ConfigDict(json_schema_extra=_admit_error_payload)


class SearchOutput(SearchResponse):
    model_config = _OUTPUT


class SourceOutput(SourceResponse):
    model_config = _OUTPUT


class MetadataOutput(MetadataResponse):
    model_config = _OUTPUT


class DatasetList(BaseModel):
    model_config = _OUTPUT
    datasets: list[DatasetSummary]


def _json_result(model: BaseModel) -> CallToolResult:
    data = model.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))], structured_content=data
    )


def _error_result(code: str, message: str) -> CallToolResult:
    payload = ErrorResponse(error=ErrorInfo(code=code, message=message)).model_dump(mode="json")
    return CallToolResult(
        is_error=True,
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structured_content=payload,
    )


def error_result(code: str, message: str) -> CallToolResult:
    message = redact_paths(message)
    payload = ErrorResponse(error=ErrorInfo(code=code, message=message)).model_dump(mode="json")
    return CallToolResult(
        is_error=True,
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structured_content=payload,
    )


def json_result(model: BaseModel) -> CallToolResult:
    data = model.model_dump(mode="json")
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, ensure_ascii=False))], structured_content=data
    )


def not_bool(v: object) -> object:
    # pydantic would read true as 1; JSON Schema's integer excludes booleans.
    if isinstance(v, bool):
        raise ValueError("Input should be a whole number, not a boolean")
    return v


# What each argument must be, said the way the CLI says it.
_RULES = {
    "query": ("INVALID_QUERY", f"query must be text of 1 to {MAX_QUERY_CHARS} characters"),
    "mode": ("INVALID_QUERY", "mode must be one of hybrid, semantic, keyword"),
    "scope": ("INVALID_QUERY", "scope must be one of chunk, neighbors, section"),
    "min_score": ("INVALID_QUERY", "min_score must be a number from 0 to 1"),
    "top_k": ("INVALID_TOP_K", f"top_k must be a whole number from 1 to {MAX_TOP_K}"),
    "dataset": (
        "INVALID_ARGUMENT",
        "dataset must be a dataset id (see knowledge_list_datasets), at most 64 characters",
    ),
    "result_id": ("INVALID_ARGUMENT", "result_id must be one from a search result, like 'docs:0123456789abcdef'"),
    "path": ("INVALID_ARGUMENT", "path must be a document path of at most 512 characters"),
    "folder": ("INVALID_ARGUMENT", "folder must be a folder path of at most 512 characters"),
    "file_type": ("INVALID_ARGUMENT", "file_type must be a file suffix like '.md', at most 16 characters"),
}


def validation_error(e: ValidationError) -> CallToolResult:
    """The coded error for arguments that break the tool's schema, in plain words."""
    err = e.errors()[0]
    field = str(err["loc"][0]) if err["loc"] else "arguments"
    code, rule = _RULES.get(field, ("INVALID_ARGUMENT", f"{field} is not valid here ({err['msg']})"))
    if err["type"] == "missing":
        return error_result(code, f"{field} is required; {rule}")
    given = err.get("input")
    shown = json.dumps(given, ensure_ascii=False, default=str)[:40] if given is not None else "null"
    return error_result(code, f"{rule}; got {shown}")
