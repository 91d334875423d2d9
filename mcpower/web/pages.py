"""The three pages: datasets (``/``), search (``/search``) and a document at a result (``/doc``).

Each gathers its data once and hands it to :func:`render.page`, which answers HTML or, with
``?format=json``, the same data as JSON. Searches and source lookups go through the MCP tools
themselves (:meth:`KnowledgeServer.answer`): the page shows what an agent is given, redacted the
same way, under the same access rules. What a caller may read is decided by
:func:`callers.visible`, as for every other door.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import urlencode

import anyio
from starlette.requests import Request
from starlette.responses import Response

from mcpower.analysis import query_languages
from mcpower.errors import McpowerError
from mcpower.registry import Registry
from mcpower.results import MODES
from mcpower.server.app import KnowledgeServer
from mcpower.server.auth import callers
from mcpower.web.overview import Sizes, dataset_rows
from mcpower.web.reading import WINDOW_LINES, document_window
from mcpower.web.render import error_page, page, signed_in

# The search form's fields: URL parameter -> knowledge_search argument.
SEARCH_FIELDS = {
    "q": "query",
    "dataset": "dataset",
    "mode": "mode",
    "path": "path",
    "folder": "folder",
    "type": "file_type",
    "k": "top_k",
    "max_tokens": "max_tokens",
    "offset": "offset",
    "group": "group",
}
_INTEGERS = {"top_k", "max_tokens", "offset"}
# HTTP statuses for the tools' error codes (a bad request, a missing thing, or a dataset that cannot be served).
_STATUS = {
    "DATASET_NOT_FOUND": 404,
    "RESULT_NOT_FOUND": 404,
    "INVALID_QUERY": 400,
    "INVALID_TOP_K": 400,
    "INVALID_ARGUMENT": 400,
}


def status_of(code: str) -> int:
    return _STATUS.get(code, 503)


class Pages:
    """The page handlers over one server (its registry, workers and tools)."""

    def __init__(self, server: KnowledgeServer, registry: Registry, call_timeout: float) -> None:
        self.server = server
        self.registry = registry
        self.call_timeout = call_timeout
        self.sizes = Sizes()

    def _visible(self, request: Request) -> Registry:
        return callers.visible(self.registry, callers.caller_from_scope(request.scope))

    def caller_name(self, request: Request) -> str | None:
        """The signed-in caller's name, shown in the header (None: no token needed here)."""
        return signed_in(request)

    async def _run(self, fn: Any) -> Any:
        with anyio.fail_after(self.call_timeout):
            return await self.server.workers.run(fn)

    async def _answer(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        with anyio.fail_after(self.call_timeout):
            return await self.server.answer(tool, arguments)

    async def datasets(self, request: Request) -> Response:
        # The operator (the server's all-datasets token; nobody authenticated on a loopback server
        # without tokens: the user who started it) sees the real source folders; any other caller
        # sees them as MCP clients see paths.
        reveal = callers.caller_from_scope(request.scope).name in (callers.OPERATOR, callers.LOCAL.name)

        def gather() -> dict[str, Any]:
            self.registry.scan()
            view = self._visible(request)
            return dataset_rows(view, view.entries(), self.server.redactor, self.sizes, reveal)

        try:
            data = await self._run(gather)
        except TimeoutError:
            return error_page(request, 504, "TIMEOUT", "listing the datasets took too long; try again")
        return page(request, "datasets.html", data, caller=self.caller_name(request))

    async def search(self, request: Request) -> Response:
        params = request.query_params
        form = {name: params.get(name, "") for name in SEARCH_FIELDS}
        form["mode"] = form["mode"] or "hybrid"
        form["group"] = form["group"] or "passages"
        ready = await self._run(lambda: self._visible(request).ready_ids())
        data: dict[str, Any] = {"form": form, "datasets": ready, "modes": list(MODES), "response": None}
        data["error"] = None
        if not form["q"].strip():
            return page(request, "search.html", data, caller=self.caller_name(request))
        arguments = {SEARCH_FIELDS[name]: _argument(SEARCH_FIELDS[name], v) for name, v in form.items() if v != ""}
        arguments.setdefault("offset", 0)  # given, the answer says where the next page starts
        started = time.perf_counter()
        try:
            is_error, content = await self._answer("search", arguments)
        except TimeoutError:
            return error_page(request, 504, "TIMEOUT", "the search took too long; try a narrower one")
        data["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 1)
        if is_error:
            data["error"] = content.get("error", {"code": "ERROR", "message": "the search failed"})
            return page(
                request, "search.html", data, status_of(data["error"]["code"]), caller=self.caller_name(request)
            )
        data["response"] = content
        # Each dataset's languages: its results' words are marked as its keyword index analyses them.
        data["languages"] = await self._run(lambda: _languages(self._visible(request)))
        next_offset = content.get("meta", {}).get("next_offset")
        data["next_url"] = (
            "/search?" + urlencode({**{k: v for k, v in form.items() if v}, "offset": next_offset})
            if next_offset is not None
            else None
        )
        return page(request, "search.html", data, caller=self.caller_name(request), query=form["q"])

    async def document(self, request: Request) -> Response:
        params = request.query_params
        result_id = params.get("id", "")
        if not result_id:
            return error_page(request, 400, "INVALID_ARGUMENT", "give a result id: /doc?id=<result_id from a search>")
        first = _whole(params.get("from"))
        size = _whole(params.get("lines")) or WINDOW_LINES
        try:
            is_error, source = await self._answer("source", {"result_id": result_id, "scope": "chunk"})
            if is_error:
                error = source.get("error", {"code": "ERROR", "message": "no such result"})
                return error_page(request, status_of(error["code"]), error["code"], error["message"])
            view = self._visible(request)
            window = await self._run(
                lambda: document_window(view, result_id, source, self.server.redactor, first, size)
            )
        except TimeoutError:
            return error_page(request, 504, "TIMEOUT", "reading the document took too long; try again")
        except McpowerError as e:
            return error_page(request, status_of(e.code), e.code, self.server.redactor.message(e.message))
        chunks_shown = params.get("chunks") == "1"
        data = {"result_id": result_id, "source": source, "window": window, "chunks_shown": chunks_shown}
        links = _doc_links(result_id, window, chunks_shown)
        return page(request, "doc.html", data, caller=self.caller_name(request), links=links)


def _argument(name: str, value: str) -> Any:
    """A form value as the tool takes it: whole numbers as numbers; anything else as typed, so the
    tool's own validation answers a bad one as it would answer an agent."""
    if name in _INTEGERS and value.strip().isdigit() and len(value.strip()) < 10:
        return int(value)
    return value


def _whole(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and len(value) < 10 else None


def _doc_links(result_id: str, window: dict[str, Any], chunks: bool) -> dict[str, str | None]:
    def url(**extra: Any) -> str:
        query: dict[str, Any] = {"id": result_id, **({"chunks": 1} if chunks else {})}
        query.update({k: v for k, v in extra.items() if v is not None})
        return "/doc?" + urlencode(query)

    toggle = {"id": result_id, "from": window["first"], "lines": window["size"]}
    if not chunks:
        toggle["chunks"] = 1
    return {
        "previous": url(**{"from": window["previous"], "lines": window["size"]}) if window["previous"] else None,
        "next": url(**{"from": window["next"], "lines": window["size"]}) if window["next"] else None,
        "passage": url() + "#passage",
        "chunks": "/doc?" + urlencode(toggle),
        "json": url(format="json"),
    }


def _languages(registry: Registry) -> dict[str, list[str] | None]:
    """Each ready dataset's languages as its keyword index analyses them; None for one indexed
    before analysis (its words are marked as FTS5 found them)."""
    out: dict[str, list[str] | None] = {}
    for e in registry.entries():
        info = e.info
        if info is None or e.error is not None:
            continue
        analysed = info.analysis is not None and info.analysis.scheme is not None
        undetermined = info.analysis.undetermined if info.analysis is not None else None
        out[e.id] = list(query_languages(info.counts.languages, undetermined)) if analysed else None
    return out
