"""The documents as MCP resources: ``mcpower://<dataset>/<path>``, listed, read, and completed.

:func:`add_documents` adds the resource template to a server (app.py); :func:`list_documents` is
what ``resources/list`` answers. Every one sees only the datasets of the caller (auth/callers.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.types import Resource as MCPResource

from mcpower.errors import McpowerError
from mcpower.registry import Registry
from mcpower.results import clip_json
from mcpower.server.auth.callers import current_caller, visible

URI_SCHEME = "mcpower"
# Resource reads and listings are capped as tool results are (tools.py): under 1 MB on the wire.
MAX_RESOURCE_CHARS = 300_000
MAX_RESOURCE_JSON_BYTES = 1_000_000  # the text as JSON: 300,000 emoji or control characters would be 1.2-1.8 MB
MAX_LISTED_RESOURCES = 2_000  # ~0.5 MB of resources/list


def document_uri(dataset: str, path: str) -> str:
    return f"{URI_SCHEME}://{dataset}/{quote(path, safe='/')}"


# Markdown files, and the formats whose stored text mcpower extracts and writes as Markdown.
_MARKDOWN_TYPES = frozenset({".md", ".markdown", ".mdx", ".rst", ".rest", ".html", ".htm", ".pdf", ".docx", ".ipynb"})


def mime_type(file_type: str) -> str:
    """The MIME type a document of this file type is served as (its stored text: reST, HTML, PDF,
    Word and notebooks are stored as the Markdown mcpower extracts from them)."""
    return "text/markdown" if file_type in _MARKDOWN_TYPES else "text/plain"


def list_documents(registry: Registry) -> list[MCPResource]:
    """The documents of ``registry``'s ready datasets as resources, at most MAX_LISTED_RESOURCES."""
    out: list[MCPResource] = []
    for ds in registry.ready_ids():
        if len(out) >= MAX_LISTED_RESOURCES:
            break
        try:  # only as many as the listing still takes: a huge dataset costs what is shown
            docs = registry.store(ds).documents(limit=MAX_LISTED_RESOURCES - len(out))
        except McpowerError:
            continue
        for doc in docs:
            out.append(
                MCPResource(
                    uri=document_uri(ds, doc.path),
                    name=f"{ds}/{doc.path}",
                    title=doc.title,
                    mime_type=mime_type(doc.file_type),
                    size=doc.size,
                )
            )
            if len(out) >= MAX_LISTED_RESOURCES:
                return out
    return out


def add_documents(server: MCPServer, registry: Registry, run: Callable[[Callable[[], Any]], Awaitable[Any]]) -> None:
    """Adds the document resource template to ``server``, reading on ``run``."""

    @server.resource(
        f"{URI_SCHEME}://{{dataset}}/{{+path}}",
        name="document",
        title="Dataset document",
        description="A whole source document of a dataset, from the text stored at ingest.",
        mime_type="text/markdown",
    )
    async def read_document(dataset: str, path: str) -> str:
        scoped = visible(registry, current_caller())

        def read() -> str:
            try:
                doc = scoped.store(dataset).document(path)
            except McpowerError as e:
                raise ResourceNotFoundError(e.message) from None
            if doc is None:
                raise ResourceNotFoundError(f"no document {path[:200]!r} in dataset {dataset!r}")
            return clip_json(doc.content[:MAX_RESOURCE_CHARS], MAX_RESOURCE_JSON_BYTES)

        return str(await run(read))
