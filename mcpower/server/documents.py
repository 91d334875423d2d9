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
from mcp.types import Completion, CompletionArgument, PromptReference, ResourceTemplateReference
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
TEMPLATE = f"{URI_SCHEME}://{{dataset}}/{{+path}}"
# completion/complete: at most 100 values (the protocol's limit), from at most this many documents
# of a dataset (the first ingested: the cost of one answer is bounded whatever the dataset's size).
MAX_COMPLETIONS = 100
MAX_COMPLETION_SCAN = 20_000


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
    """Adds the document resource template to ``server``, and completions of its arguments (a
    dataset id; a path within the dataset already given), reading on ``run``."""

    @server.resource(
        TEMPLATE,
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

    async def complete(
        ref: ResourceTemplateReference | PromptReference, argument: CompletionArgument, context: Any
    ) -> Completion | None:
        if not isinstance(ref, ResourceTemplateReference) or ref.uri != TEMPLATE:
            return None  # no prompts, and no other template
        scoped = visible(registry, current_caller())  # only what the caller may read
        if argument.name == "dataset":
            datasets: Completion = await run(lambda: complete_dataset(scoped, argument.value))
            return datasets
        if argument.name == "path":
            given = getattr(context, "arguments", None) or {}
            dataset = given.get("dataset") if isinstance(given, dict) else None
            if isinstance(dataset, str) and dataset:
                paths: Completion = await run(lambda: complete_path(scoped, dataset, argument.value))
                return paths
        return Completion(values=[], total=0, has_more=False)

    server.completion()(complete)  # type: ignore[no-untyped-call]  # the SDK's decorator is untyped


def complete_dataset(registry: Registry, prefix: str) -> Completion:
    """The ready dataset ids starting with ``prefix`` (case-insensitively)."""
    found = [ds for ds in registry.ready_ids() if ds.lower().startswith(prefix.lower())]
    return _completion(found)


def complete_path(registry: Registry, dataset: str, prefix: str) -> Completion:
    """The paths of ``dataset``'s documents starting with ``prefix``. When there are more than a
    completion may hold, they are folded into their next folder (``guide/`` for ``guide/a.md`` ...),
    as a shell completes one part at a time. An unknown or unreadable dataset completes nothing."""
    try:
        docs = registry.store(dataset).documents(limit=MAX_COMPLETION_SCAN)
    except McpowerError:
        return Completion(values=[], total=0, has_more=False)
    paths = [d.path for d in docs if d.path.startswith(prefix)]
    if len(paths) > MAX_COMPLETIONS:
        folded: dict[str, None] = {}
        for path in paths:
            slash = path.find("/", len(prefix))
            folded[path[: slash + 1] if slash >= 0 else path] = None
        paths = list(folded)
    return _completion(paths, more=len(docs) >= MAX_COMPLETION_SCAN)


def _completion(values: list[str], more: bool = False) -> Completion:
    return Completion(
        values=values[:MAX_COMPLETIONS],
        total=None if more else len(values),
        has_more=more or len(values) > MAX_COMPLETIONS,
    )
