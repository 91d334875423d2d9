"""The MCP server in process, through the SDK's in-memory client, over two small fake-embedded datasets."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from conftest import FakeEmbedder, join_warm_up, write_files
from mcp import Client, MCPError
from mcp.types import CallToolResult, PromptReference, ResourceListChangedNotification, ResourceTemplateReference
from server_fixtures import (
    HANDBOOK,
    RECIPES,
    add_broken_dataset,
    corrupt_index,
    ingest_handbook,
)

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.results import SearchResponse
from mcpower.server.app import create_server
from mcpower.server.tools import with_links
from mcpower.watch.watcher import WatchEvent

pytestmark = pytest.mark.anyio

DEFAULT_NAMES = {"knowledge_search", "knowledge_list_datasets", "knowledge_get_source", "knowledge_get_metadata"}
SEED_NAMES = {"knowledge.search", "knowledge.listDatasets", "knowledge.getSource", "knowledge.getMetadata"}
RESULT_FIELDS = {
    *("result_id", "score", "title", "path", "snippet", "file_type", "heading_path", "lines", "dataset"),
    *("indexed_at", "stale", "pages"),
}


# ---------------------------------------------------------------- fixtures


@pytest.fixture
def make_registry() -> Iterator[Callable[[Path], Registry]]:
    """Registries searching with the fake embedder; the warm-up thread is awaited and stores closed at teardown."""
    made: list[Registry] = []

    def make(root: Path) -> Registry:
        registry = Registry(root, embedder_factory=lambda model: FakeEmbedder())
        made.append(registry)
        return registry

    yield make
    join_warm_up()
    for registry in made:
        registry.close()


@pytest.fixture
def registry(datasets: Path, make_registry: Callable[[Path], Registry]) -> Registry:
    return make_registry(datasets)


@pytest.fixture
async def client(registry: Registry) -> AsyncIterator[Client]:
    async with Client(create_server(registry)) as c:
        yield c


async def search(client: Client, **args: Any) -> dict[str, Any]:
    """A search that must succeed; returns the structured content after checking it equals the text JSON."""
    r = await client.call_tool("knowledge_search", args)
    assert not r.is_error, r.content
    return structured(r)


def structured(r: CallToolResult) -> dict[str, Any]:
    assert r.structured_content is not None
    assert r.content[0].type == "text"
    assert json.loads(r.content[0].text) == r.structured_content
    return r.structured_content


def assert_error(r: CallToolResult, code: str, tmp_path: Path) -> str:
    """An isError result with {"status": "error", "error": {code, message}} and no absolute path; returns the message."""
    assert r.is_error
    assert r.structured_content is not None
    assert r.structured_content["status"] == "error"
    assert r.structured_content["error"]["code"] == code, r.structured_content
    message = r.structured_content["error"]["message"]
    assert message
    text = r.content[0].text
    assert text.startswith(code)
    for where in (str(tmp_path), str(tmp_path.resolve())):
        assert where not in text
        assert where not in json.dumps(r.structured_content)
    return str(message)


async def assert_search_works(client: Client) -> None:
    data = await search(client, query="zephyrine package", dataset="handbook")
    assert data["status"] == "ok" and data["results"]


# ---------------------------------------------------------------- tools/list


async def test_tools_list_default_names_schemas_and_descriptions(client: Client) -> None:
    tools = {t.name: t for t in (await client.list_tools()).tools}
    assert set(tools) == DEFAULT_NAMES
    for tool in tools.values():
        assert tool.output_schema is not None and tool.output_schema.get("properties"), tool.name
        assert tool.description and "untrusted" in tool.description, tool.name
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    props = tools["knowledge_search"].input_schema["properties"]
    assert tools["knowledge_search"].input_schema["required"] == ["query"]
    assert {"query", "dataset", "top_k", "mode", "path", "folder", "file_type", "min_score"} <= set(props)
    assert {"max_tokens", "offset", "group", "per_document"} <= set(props)
    assert set(tools["knowledge_search"].output_schema["properties"]) >= {"status", "results", "meta"}
    assert set(tools["knowledge_get_source"].input_schema["properties"]) == {"result_id", "scope", "max_tokens"}


async def test_tool_names_seed(registry: Registry) -> None:
    async with Client(create_server(registry, "seed")) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert set(tools) == SEED_NAMES
        # Descriptions point at tools that exist under these names.
        for tool in tools.values():
            assert tool.description is not None
            assert not any(name in tool.description for name in DEFAULT_NAMES), tool.name
        r = await client.call_tool("knowledge.search", {"query": "harpsichord"})
        assert structured(r)["status"] == "ok"
        r = await client.call_tool("knowledge_search", {"query": "harpsichord"})
        assert r.is_error and r.structured_content is not None
        assert r.structured_content["error"]["code"] == "UNKNOWN_TOOL"


async def test_output_schemas_admit_results_and_errors(client: Client) -> None:
    """Every structuredContent, error or not, validates against the tool's outputSchema.

    The TypeScript SDK's client checks this even for isError results and throws when it fails.
    """
    schemas = {t.name: t.output_schema for t in (await client.list_tools()).tools}
    hit = (await search(client, query="harpsichord"))["results"][0]["result_id"]
    calls = [
        ("knowledge_search", {"query": "harpsichord"}, False),
        ("knowledge_search", {"query": "xylophone", "mode": "keyword"}, False),
        ("knowledge_search", {"query": "x", "dataset": "nope"}, True),
        ("knowledge_search", {"query": "x", "top_k": 0}, True),
        ("knowledge_list_datasets", {}, False),
        ("knowledge_get_source", {"result_id": hit}, False),
        ("knowledge_get_source", {"result_id": "garbage"}, True),
        ("knowledge_get_metadata", {"result_id": hit}, False),
        ("knowledge_get_metadata", {"result_id": "handbook:00000000000000ff"}, True),
        ("knowledge_search", {"query": "zephyrine daemon", "max_tokens": 200}, False),
        ("knowledge_search", {"query": "zephyrine daemon", "offset": 2, "top_k": 2}, False),
        ("knowledge_search", {"query": "zephyrine daemon", "max_tokens": 0}, True),
        ("knowledge_get_source", {"result_id": hit, "max_tokens": 100}, False),
    ]
    for name, args, is_error in calls:
        r = await client.call_tool(name, args)
        assert bool(r.is_error) is is_error, (name, args)
        jsonschema.validate(r.structured_content, schemas[name])
    # ... while a success payload missing a required field is still refused.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "ok", "results": []}, schemas["knowledge_search"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"status": "ok", "error": None}, schemas["knowledge_get_metadata"])


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_both_connect_modes_search(registry: Registry, mode: str) -> None:
    async with Client(create_server(registry), mode=mode) as client:  # type: ignore[arg-type]
        assert len((await client.list_tools()).tools) == 4
        data = await search(client, query="harpsichord feature")
        assert data["results"][0]["path"] == "notes.txt"


# ---------------------------------------------------------------- knowledge_search


async def test_search_result_shape(client: Client) -> None:
    data = await search(client, query="zephyrine package", dataset="handbook", top_k=3)
    assert data["status"] == "ok"
    assert 1 <= len(data["results"]) <= 3
    for result in data["results"]:
        assert set(result) == RESULT_FIELDS
        assert 0.0 <= result["score"] <= 1.0
        assert result["dataset"] == "handbook"
        assert result["result_id"].startswith("handbook:")
        assert result["file_type"] in (".md", ".txt")
        assert result["pages"] is None  # pages are for PDF results
        assert 1 <= result["lines"]["start"] <= result["lines"]["end"]
        assert result["title"] and result["path"] and result["snippet"]
    scores = [r["score"] for r in data["results"]]
    assert scores == sorted(scores, reverse=True)
    top = data["results"][0]
    assert top["path"] == "guide/install.md"
    assert "zephyrine package" in top["snippet"]
    assert top["heading_path"] == "Installation > Linux"
    meta = data["meta"]
    assert meta["datasets"] == ["handbook"]
    assert meta["limit"] == 3
    assert meta["count"] == len(data["results"])
    assert meta["mode"] == "hybrid"
    assert isinstance(meta["duration_ms"], (int, float)) and meta["duration_ms"] >= 0
    assert isinstance(meta["low_confidence"], bool)
    assert len({r["result_id"] for r in data["results"]}) == len(data["results"])


async def test_search_results_link_each_document_once_in_rank_order(client: Client) -> None:
    r = await client.call_tool("knowledge_search", {"query": "toolkit", "top_k": 10, "group": "none"})
    data = structured(r)
    links = [c for c in r.content if c.type == "resource_link"]
    documents = list(dict.fromkeys((x["dataset"], x["path"]) for x in data["results"]))
    assert len(data["results"]) > len(documents) > 1  # some document has two results: linked once
    assert [link.uri for link in links] == [f"mcpower://{ds}/{path}" for ds, path in documents]
    by_path = {(x["dataset"], x["path"]): x for x in data["results"]}
    for link in links:
        ds, _, path = link.uri.removeprefix("mcpower://").partition("/")
        assert link.name == f"{ds}/{path}" and link.title == by_path[(ds, path)]["title"]
        assert link.mime_type == ("text/plain" if path.endswith(".txt") else "text/markdown")
        read = await client.read_resource(link.uri)  # each link opens its document
        assert read.contents[0].text == {"handbook": HANDBOOK, "recipes": RECIPES}[ds][path]  # type: ignore[union-attr]
    # A crawled page's web address rides along in its link's _meta.url.
    crawled = SearchResponse.model_validate(data)
    crawled.results[0].url = "https://example.org/guide/install"
    linked = with_links(CallToolResult(content=[]), crawled).content
    assert linked[0].meta == {"url": "https://example.org/guide/install"} and linked[1].meta is None  # type: ignore[union-attr]
    empty = await client.call_tool("knowledge_search", {"query": "qqqxqqq", "mode": "keyword"})
    assert [c.type for c in empty.content] == ["text"]


async def test_search_without_dataset_merges_all(client: Client) -> None:
    data = await search(client, query="toolkit", top_k=10)
    assert sorted(data["meta"]["datasets"]) == ["handbook", "recipes"]
    found = {(r["dataset"], r["path"]) for r in data["results"]}
    assert ("recipes", "bread.md") in found
    assert ("handbook", "guide/install.md") in found
    scores = [r["score"] for r in data["results"]]
    assert scores == sorted(scores, reverse=True)


async def test_search_default_top_k_is_the_datasets(client: Client) -> None:
    data = await search(client, query="zephyrine daemon", dataset="handbook")
    assert data["meta"]["limit"] == 5
    assert data["meta"]["count"] == len(data["results"]) <= 5


@pytest.mark.parametrize(
    ("filters", "check"),
    [
        ({"path": "guide/usage.md"}, lambda r: r["path"] == "guide/usage.md"),
        ({"folder": "guide"}, lambda r: r["path"].startswith("guide/")),
        ({"folder": "api"}, lambda r: r["path"] == "api/reference.md"),
        ({"file_type": ".txt"}, lambda r: r["file_type"] == ".txt"),
        ({"folder": "guide", "file_type": ".md"}, lambda r: r["path"].startswith("guide/") and r["file_type"] == ".md"),
    ],
)
async def test_search_filters(client: Client, filters: dict[str, str], check: Callable[[dict[str, Any]], bool]) -> None:
    # "toolkit" and "session" words sit in several documents; filters must narrow before the top k.
    data = await search(client, query="toolkit session marmalade harpsichord quokka", dataset="handbook", **filters)
    assert data["status"] == "ok" and data["results"]
    assert all(check(r) for r in data["results"]), data["results"]


async def test_search_filters_with_no_match_are_empty(client: Client) -> None:
    data = await search(client, query="harpsichord", dataset="handbook", folder="guide", file_type=".txt")
    assert data["status"] == "empty"
    assert data["results"] == []
    assert data["meta"]["count"] == 0


@pytest.mark.parametrize("mode", ["keyword", "semantic", "hybrid"])
async def test_search_modes(client: Client, mode: str) -> None:
    data = await search(client, query="harpsichord feature", dataset="handbook", mode=mode)
    assert data["meta"]["mode"] == mode
    assert data["results"][0]["path"] == "notes.txt"
    assert all(0.0 <= r["score"] <= 1.0 for r in data["results"])


async def test_keyword_search_for_an_absent_word_is_empty(client: Client) -> None:
    data = await search(client, query="xylophone", mode="keyword")
    assert data["status"] == "empty"
    assert data["results"] == []
    assert data["meta"]["low_confidence"] is True


async def test_min_score_drops_weak_results(client: Client) -> None:
    everything = await search(client, query="harpsichord", dataset="handbook", top_k=20)
    assert any(r["score"] < 0.5 for r in everything["results"])
    strong = await search(client, query="harpsichord", dataset="handbook", top_k=20, min_score=0.5)
    assert all(r["score"] >= 0.5 for r in strong["results"])
    assert strong["meta"]["min_score"] == 0.5


# ---------------------------------------------------------------- errors


SEARCH_ERRORS = [
    ("DATASET_NOT_FOUND", {"query": "toolkit", "dataset": "nope"}),
    ("INVALID_QUERY", {"query": ""}),
    ("INVALID_QUERY", {"query": "   \t\n "}),
    ("INVALID_QUERY", {"query": "x" * 1025}),
    ("INVALID_TOP_K", {"query": "toolkit", "top_k": 0}),
    ("INVALID_TOP_K", {"query": "toolkit", "top_k": -1}),
    ("INVALID_TOP_K", {"query": "toolkit", "top_k": 2.5}),
    ("INVALID_TOP_K", {"query": "toolkit", "top_k": 101}),
    ("INVALID_TOP_K", {"query": "toolkit", "top_k": 1e30}),
    ("INVALID_QUERY", {"query": "toolkit", "mode": "fuzzy"}),
    ("INVALID_QUERY", {"query": "toolkit", "min_score": 1.5}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "dataset": "d" * 65}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "folder": 7}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "max_tokens": 0}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "max_tokens": True}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "max_tokens": 10**7}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "offset": -1}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "offset": 1001}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "offset": "next"}),
    ("INVALID_QUERY", {"query": "toolkit", "group": "chunks"}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "per_document": 0}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "per_document": True}),
    ("INVALID_ARGUMENT", {"query": "toolkit", "per_document": 101}),
]


@pytest.mark.parametrize(("code", "args"), SEARCH_ERRORS, ids=[f"{c}-{i}" for i, (c, _) in enumerate(SEARCH_ERRORS)])
async def test_search_errors_then_recovery(client: Client, tmp_path: Path, code: str, args: dict[str, Any]) -> None:
    r = await client.call_tool("knowledge_search", args)
    assert_error(r, code, tmp_path)
    await assert_search_works(client)


async def test_dataset_not_found_lists_available_ids(client: Client, tmp_path: Path) -> None:
    message = assert_error(
        await client.call_tool("knowledge_search", {"query": "x", "dataset": "nope"}), "DATASET_NOT_FOUND", tmp_path
    )
    assert "handbook" in message and "recipes" in message


@pytest.mark.parametrize("tool", ["knowledge_get_source", "knowledge_get_metadata"])
@pytest.mark.parametrize(
    "result_id",
    ["handbook:00000000000000ff", "nope:0123456789abcdef", "garbage", "handbook:zzzzzzzzzzzzzzzz", ":", "handbook:"],
)
async def test_result_not_found(client: Client, tmp_path: Path, tool: str, result_id: str) -> None:
    assert_error(await client.call_tool(tool, {"result_id": result_id}), "RESULT_NOT_FOUND", tmp_path)
    await assert_search_works(client)


async def test_unknown_tool(client: Client, tmp_path: Path) -> None:
    message = assert_error(await client.call_tool("knowledge.search", {"query": "x"}), "UNKNOWN_TOOL", tmp_path)
    assert "knowledge.search" in message
    await assert_search_works(client)


@pytest.mark.parametrize(
    ("tool", "args", "unknown"),
    [
        ("knowledge_search", {"query": "zephyrine", "k": 2}, "'k'"),
        ("knowledge_search", {"query": "zephyrine", "topK": 2, "datasets": "handbook"}, "'topK', 'datasets'"),
        ("knowledge_list_datasets", {"verbose": True}, "'verbose'"),
        ("knowledge_get_source", {"result_id": "handbook:0", "scope": "chunk", "lines": 3}, "'lines'"),
        ("knowledge_get_metadata", {"result_id": "handbook:0", "path": "x"}, "'path'"),
    ],
)
async def test_unknown_arguments_are_refused_naming_them_and_the_accepted_ones(
    client: Client, tmp_path: Path, tool: str, args: dict[str, Any], unknown: str
) -> None:
    message = assert_error(await client.call_tool(tool, args), "UNKNOWN_ARGUMENT", tmp_path)
    assert unknown in message and tool in message
    schema = {t.name: t.input_schema for t in (await client.list_tools()).tools}[tool]
    assert schema["additionalProperties"] is False  # what the schema promised
    accepted = list(schema["properties"])
    assert (f"it takes {', '.join(accepted)}" if accepted else "it takes no arguments") in message
    await assert_search_works(client)


async def test_many_unknown_arguments_are_named_within_bounds(client: Client, tmp_path: Path) -> None:
    args = {"query": "x", **{f"{'z' * 5000}{i}": i for i in range(50)}}
    message = assert_error(await client.call_tool("knowledge_search", args), "UNKNOWN_ARGUMENT", tmp_path)
    assert "and 45 more" in message and len(message) < 600


async def test_corrupt_index_is_an_error_for_that_dataset_only(
    datasets: Path, make_registry: Callable[[Path], Registry], tmp_path: Path
) -> None:
    corrupt_index(datasets, "recipes")
    async with Client(create_server(make_registry(datasets))) as client:
        # The checksum failure is IndexMismatchError, the INDEX_MISMATCH subclass of DATASET_UNAVAILABLE.
        r = await client.call_tool("knowledge_search", {"query": "sourdough", "dataset": "recipes"})
        message = assert_error(r, "INDEX_MISMATCH", tmp_path)
        assert "checksum" in message and "mcpower ingest" in message
        await assert_search_works(client)
        # Searching everything skips the broken dataset instead of failing.
        data = await search(client, query="toolkit", top_k=10)
        assert data["meta"]["datasets"] == ["handbook"]
        # ... and it is listed with its reason, even after a re-scan.
        listed = {d["id"]: d for d in structured(await client.call_tool("knowledge_list_datasets", {}))["datasets"]}
        assert listed["recipes"]["status"] == "error"
        assert "checksum" in listed["recipes"]["error"]
        r = await client.call_tool("knowledge_search", {"query": "sourdough", "dataset": "recipes"})
        assert_error(r, "INDEX_MISMATCH", tmp_path)


async def test_dataset_unavailable(datasets: Path, make_registry: Callable[[Path], Registry], tmp_path: Path) -> None:
    # A dataset folder whose name differs from the manifest id is found but refused.
    (datasets / "recipes").rename(datasets / "cookbook")
    async with Client(create_server(make_registry(datasets))) as client:
        r = await client.call_tool("knowledge_search", {"query": "sourdough", "dataset": "recipes"})
        message = assert_error(r, "DATASET_UNAVAILABLE", tmp_path)
        assert "cookbook" in message
        await assert_search_works(client)


# ---------------------------------------------------------------- list datasets


async def test_list_datasets_with_a_broken_manifest(
    datasets: Path, make_registry: Callable[[Path], Registry], tmp_path: Path
) -> None:
    add_broken_dataset(datasets)
    async with Client(create_server(make_registry(datasets))) as client:
        data = structured(await client.call_tool("knowledge_list_datasets", {}))
        listed = {d["id"]: d for d in data["datasets"]}
        assert set(listed) == {"broken", "handbook", "recipes"}
        assert listed["broken"]["status"] == "error"
        assert "manifest.json" in listed["broken"]["error"] and "JSON" in listed["broken"]["error"]
        assert str(tmp_path) not in json.dumps(data)
        handbook = listed["handbook"]
        assert handbook["status"] == "ready" and handbook["error"] is None
        assert handbook["name"] == "Handbook" and handbook["description"] == "The widget toolkit manual"
        assert handbook["documents"] == len(HANDBOOK)
        assert handbook["chunks"] > handbook["documents"]
        assert sum(handbook["file_types"].values()) == len(HANDBOOK)  # documents per file type
        assert set(handbook["file_types"]) == {"." + p.rsplit(".", 1)[1] for p in HANDBOOK}
        assert handbook["model"] == FakeEmbedder.model_name
        assert listed["recipes"]["status"] == "ready" and listed["recipes"]["documents"] == len(RECIPES)
        # The good datasets still search, one by one and all together.
        await assert_search_works(client)
        data = await search(client, query="toolkit", top_k=10)
        assert sorted(data["meta"]["datasets"]) == ["handbook", "recipes"]


async def test_list_datasets_sees_a_dataset_ingested_later(
    tmp_path: Path, datasets: Path, make_registry: Callable[[Path], Registry]
) -> None:
    shutil.rmtree(datasets / "recipes")
    async with Client(create_server(make_registry(datasets))) as client:
        ids = [d["id"] for d in structured(await client.call_tool("knowledge_list_datasets", {}))["datasets"]]
        assert ids == ["handbook"]
        from mcpower.ingestion import IngestOptions, ingest

        ingest(tmp_path / "src" / "recipes", datasets, IngestOptions(dataset_id="recipes"), embedder=FakeEmbedder())
        ids = [d["id"] for d in structured(await client.call_tool("knowledge_list_datasets", {}))["datasets"]]
        assert ids == ["handbook", "recipes"]
        data = await search(client, query="pumpkin cardamom", dataset="recipes")
        assert data["results"][0]["path"] == "soup/pumpkin.md"


# ---------------------------------------------------------------- get_source / get_metadata


async def _setup_step_result(client: Client) -> dict[str, Any]:
    data = await search(client, query="zephyrine daemon option number 7", dataset="handbook", mode="keyword")
    top = data["results"][0]
    assert top["heading_path"] == "Installation > Setup"
    return top


async def test_get_source_scopes(client: Client) -> None:
    top = await _setup_step_result(client)
    rid = top["result_id"]
    chunk = structured(await client.call_tool("knowledge_get_source", {"result_id": rid, "scope": "chunk"}))
    neighbors = structured(await client.call_tool("knowledge_get_source", {"result_id": rid, "scope": "neighbors"}))
    section = structured(await client.call_tool("knowledge_get_source", {"result_id": rid, "scope": "section"}))
    default = structured(await client.call_tool("knowledge_get_source", {"result_id": rid}))
    assert default["scope"] == "neighbors" and default["content"] == neighbors["content"]

    for src, scope in ((chunk, "chunk"), (neighbors, "neighbors"), (section, "section")):
        assert src["scope"] == scope
        assert src["result_id"] == rid and src["dataset"] == "handbook"
        assert src["source_path"] == "guide/install.md"
        assert src["heading_path"] == "Installation > Setup"
        assert src["truncated"] is False
        assert src["retrieved_at"]
        assert "Step 7:" in src["content"]

    # The result is a passage named by its best chunk: the chunk lies within the passage's lines.
    assert top["lines"]["start"] <= chunk["lines"]["start"] <= chunk["lines"]["end"] <= top["lines"]["end"]
    # Text comes from the stored document, line range by line range.
    install = HANDBOOK["guide/install.md"].split("\n")
    for src in (neighbors, section):
        start, end = src["lines"]["start"], src["lines"]["end"]
        assert src["content"] == "\n".join(install[start - 1 : end])
    # chunk < neighbors < section, each containing the last.
    assert neighbors["lines"]["start"] < chunk["lines"]["start"] and neighbors["lines"]["end"] > chunk["lines"]["end"]
    assert section["lines"]["start"] <= neighbors["lines"]["start"]
    assert section["lines"]["end"] >= neighbors["lines"]["end"]
    assert len(chunk["content"]) < len(neighbors["content"]) < len(section["content"])
    # The section is the whole "Setup" section, and nothing of the others.
    assert "Step 1:" in section["content"] and "Step 12:" in section["content"]
    assert "zephyrine package" not in section["content"]
    assert "Run the installer" not in section["content"]


async def test_get_source_bad_scope(client: Client, tmp_path: Path) -> None:
    top = await _setup_step_result(client)
    r = await client.call_tool("knowledge_get_source", {"result_id": top["result_id"], "scope": "page"})
    assert_error(r, "INVALID_QUERY", tmp_path)
    r = await client.call_tool("knowledge_get_source", {"result_id": ""})
    assert_error(r, "INVALID_ARGUMENT", tmp_path)


async def test_get_metadata(client: Client) -> None:
    top = await _setup_step_result(client)
    meta = structured(await client.call_tool("knowledge_get_metadata", {"result_id": top["result_id"]}))
    assert meta["result_id"] == top["result_id"]
    assert meta["dataset"] == "handbook"
    assert meta["file_name"] == "install.md"
    assert meta["file_type"] == ".md"
    assert meta["source_path"] == "guide/install.md"
    assert meta["title"] == "Installation"
    assert meta["size"] == len(HANDBOOK["guide/install.md"].encode())
    import hashlib

    assert meta["content_hash"] == hashlib.sha256(HANDBOOK["guide/install.md"].encode()).hexdigest()
    assert meta["indexed_at"][:2] == "20"
    assert 0 <= meta["chunk_index"] < meta["chunk_count"]
    assert meta["chunk_count"] > 3


async def test_get_source_and_metadata_seed_names(registry: Registry) -> None:
    async with Client(create_server(registry, "seed")) as client:
        r = await client.call_tool("knowledge.search", {"query": "harpsichord", "dataset": "handbook"})
        rid = structured(r)["results"][0]["result_id"]
        source = structured(await client.call_tool("knowledge.getSource", {"result_id": rid, "scope": "chunk"}))
        assert "harpsichord" in source["content"]
        meta = structured(await client.call_tool("knowledge.getMetadata", {"result_id": rid}))
        assert meta["file_name"] == "notes.txt"
        listed = structured(await client.call_tool("knowledge.listDatasets", {}))
        assert [d["id"] for d in listed["datasets"]] == ["handbook", "recipes"]


# ---------------------------------------------------------------- resources


async def test_resources_list_every_document(client: Client) -> None:
    resources = (await client.list_resources()).resources
    uris = {str(r.uri) for r in resources}
    expected = {f"mcpower://handbook/{p}" for p in HANDBOOK} | {f"mcpower://recipes/{p}" for p in RECIPES}
    assert uris == expected
    by_uri = {str(r.uri): r for r in resources}
    install = by_uri["mcpower://handbook/guide/install.md"]
    assert install.mime_type == "text/markdown"
    assert install.name == "handbook/guide/install.md"
    assert install.title == "Installation"
    assert by_uri["mcpower://handbook/notes.txt"].mime_type == "text/plain"


async def test_read_resource_returns_the_stored_text(client: Client) -> None:
    for dataset, files in (("handbook", HANDBOOK), ("recipes", RECIPES)):
        for path, text in files.items():
            res = await client.read_resource(f"mcpower://{dataset}/{path}")
            assert len(res.contents) == 1
            assert res.contents[0].text == text  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "uri",
    ["mcpower://handbook/missing.md", "mcpower://nope/guide/install.md", "mcpower://handbook/../recipes/bread.md"],
)
async def test_read_unknown_resource_is_an_error(client: Client, tmp_path: Path, uri: str) -> None:
    with pytest.raises(MCPError) as exc:
        await client.read_resource(uri)
    # -32602 with the URI in data: resource not found as the 2026-07-28 spec has it (SEP-2164 replaced
    # the older -32002, which clients are told to accept as legacy); docs/mcp-tools.md says so
    assert exc.value.error.code == -32602
    assert exc.value.error.data == {"uri": uri}
    assert str(tmp_path) not in exc.value.error.message
    # The connection still works.
    res = await client.read_resource("mcpower://recipes/bread.md")
    assert res.contents[0].text == RECIPES["bread.md"]  # type: ignore[union-attr]


async def test_resource_template(client: Client) -> None:
    templates = (await client.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["mcpower://{dataset}/{+path}"]
    assert templates[0].name == "document"


TEMPLATE = ResourceTemplateReference(uri="mcpower://{dataset}/{+path}")


async def complete(client: Client, name: str, value: str, **context: str) -> Any:
    return (await client.complete(TEMPLATE, {"name": name, "value": value}, context or None)).completion


async def test_completions_of_dataset_ids_and_paths(client: Client, datasets: Path) -> None:
    assert client.server_capabilities is not None and client.server_capabilities.completions is not None
    assert (await complete(client, "dataset", "")).values == ["handbook", "recipes"]
    found = await complete(client, "dataset", "Re")  # ids are matched whatever the case typed
    assert found.values == ["recipes"] and found.total == 1 and not found.has_more
    assert (await complete(client, "dataset", "zz")).values == []
    assert (await complete(client, "path", "", dataset="recipes")).values == sorted(RECIPES)
    assert (await complete(client, "path", "soup/", dataset="recipes")).values == ["soup/pumpkin.md"]
    assert (await complete(client, "path", "guide/", dataset="handbook")).values == sorted(
        p for p in HANDBOOK if p.startswith("guide/")
    )
    # A path without its dataset, or in one that does not exist (or is broken), completes nothing.
    add_broken_dataset(datasets)
    for context in ({}, {"dataset": "nope"}, {"dataset": "broken"}):
        assert (await complete(client, "path", "", **context)).values == []
    assert "broken" not in (await complete(client, "dataset", "")).values  # only ready datasets
    prompt = await client.complete(PromptReference(name="x"), {"name": "dataset", "value": ""})
    assert prompt.completion.values == []  # there are no prompts


async def test_path_completions_are_bounded_and_fold_into_folders(
    make_registry: Callable[[Path], Registry], tmp_path: Path
) -> None:
    files = {f"api/v{i % 3}/page{i:03}.md": f"# Page {i}\n\nText {i}.\n" for i in range(150)}
    files["api.md"] = "# API\n\nThe index.\n"
    ingest(
        write_files(tmp_path / "src", files), tmp_path / "ds", IngestOptions(dataset_id="big"), embedder=FakeEmbedder()
    )
    async with Client(create_server(make_registry(tmp_path / "ds"))) as c:
        top = await complete(c, "path", "", dataset="big")  # 151 paths: folded to their first part
        assert top.values == ["api.md", "api/"] and top.total == 2
        assert (await complete(c, "path", "api/", dataset="big")).values == ["api/v0/", "api/v1/", "api/v2/"]
        v1 = await complete(c, "path", "api/v1/", dataset="big")
        assert v1.values == sorted(p for p in files if p.startswith("api/v1/")) and len(v1.values) == 50


async def test_a_republished_dataset_is_announced_to_connected_clients(registry: Registry) -> None:
    """A watcher's re-index (on its own thread) reaches a 2025-11-25 client as
    notifications/resources/list_changed, and a 2026-07-28 client on its subscriptions/listen stream;
    its other events are not announced. Waits on the notifications themselves."""
    server = create_server(registry)
    announce = server.changes.observer()
    seen: list[Any] = []
    arrived = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceListChangedNotification):
            seen.append(message)
            arrived.set()

    async with Client(server, mode="legacy", message_handler=on_message) as old:
        await old.list_resources()  # connected
        await anyio.to_thread.run_sync(announce, WatchEvent("handbook", "watching"))  # not a change
        await anyio.to_thread.run_sync(announce, WatchEvent("handbook", "reindexed"))
        with anyio.fail_after(30):
            await arrived.wait()
        assert len(seen) == 1
    async with Client(server, mode="auto") as new, new.listen(resources_list_changed=True) as stream:
        await anyio.to_thread.run_sync(announce, WatchEvent("handbook", "reindexed"))
        with anyio.fail_after(30):
            event = await stream.__anext__()
        assert type(event).__name__ == "ResourcesListChanged"


# ---------------------------------------------------------------- re-ingest while serving


async def test_reingest_is_picked_up_without_a_new_server(client: Client, tmp_path: Path) -> None:
    before = await search(client, query="pelican", dataset="handbook", mode="keyword")
    assert before["status"] == "empty"
    kept = await search(client, query="marmalade", dataset="handbook", mode="keyword")
    old_id = kept["results"][0]["result_id"]

    write_files(tmp_path / "src" / "handbook", {"notes.txt": "The pelican release ships on Friday.\n"})
    write_files(tmp_path / "src" / "handbook", {"guide/birds.md": "# Birds\n\nA flamingo stands on one leg.\n"})
    ingest_handbook(tmp_path)

    after = await search(client, query="pelican", dataset="handbook", mode="keyword")
    assert after["status"] == "ok"
    assert after["results"][0]["path"] == "notes.txt"
    assert "pelican" in after["results"][0]["snippet"]
    gone = await search(client, query="harpsichord", dataset="handbook", mode="keyword")
    assert gone["status"] == "empty"
    both = await search(client, query="flamingo", top_k=10)
    assert both["results"][0]["path"] == "guide/birds.md"
    # Unchanged chunks keep their ids; resources list the new document.
    meta = structured(await client.call_tool("knowledge_get_metadata", {"result_id": old_id}))
    assert meta["source_path"] == "api/reference.md"
    uris = {str(r.uri) for r in (await client.list_resources()).resources}
    assert "mcpower://handbook/guide/birds.md" in uris
    res = await client.read_resource("mcpower://handbook/notes.txt")
    assert "pelican" in res.contents[0].text  # type: ignore[union-attr]


# ---------------------------------------------------------------- budgets, pages, freshness, watching


async def test_search_budget_and_pages(client: Client) -> None:
    plain = await search(client, query="zephyrine daemon option", dataset="handbook", top_k=6)
    assert set(plain["meta"]) == {
        "datasets",
        "mode",
        "limit",
        "count",
        "duration_ms",
        "low_confidence",
        "min_score",
        "notes",
    }
    first = await search(client, query="zephyrine daemon option", dataset="handbook", top_k=3, offset=0)
    second = await search(client, query="zephyrine daemon option", dataset="handbook", top_k=3, offset=3)
    assert first["meta"]["next_offset"] == 3
    ids = [r["result_id"] for r in first["results"] + second["results"]]
    assert ids == [r["result_id"] for r in plain["results"]]
    small = await search(client, query="zephyrine daemon option", dataset="handbook", top_k=6, max_tokens=250)
    assert small["meta"]["truncated"] is True and small["meta"]["estimated_tokens"] <= 250
    assert small["meta"]["next_offset"] == len(small["results"]) < 6


async def test_get_source_budget(client: Client) -> None:
    hit = (await search(client, query="zephyrine daemon", dataset="handbook"))["results"][0]["result_id"]
    whole = structured(await client.call_tool("knowledge_get_source", {"result_id": hit, "scope": "section"}))
    cut = structured(
        await client.call_tool("knowledge_get_source", {"result_id": hit, "scope": "section", "max_tokens": 120})
    )
    assert whole["truncated"] is False and cut["truncated"] is True
    assert whole["content"].startswith(cut["content"]) and len(cut["content"]) < len(whole["content"])


async def test_results_and_documents_carry_freshness(client: Client) -> None:
    result = (await search(client, query="harpsichord", dataset="handbook"))["results"][0]
    assert result["stale"] is False and result["indexed_at"].endswith("+00:00")
    meta = structured(await client.call_tool("knowledge_get_metadata", {"result_id": result["result_id"]}))
    assert meta["stale"] is False and meta["indexed_at"] == result["indexed_at"]


async def test_list_datasets_shows_updates_and_watching(client: Client, datasets: Path) -> None:
    from mcpower.layout import WatchClaim
    from mcpower.results import WatchState

    listed = {d["id"]: d for d in structured(await client.call_tool("knowledge_list_datasets", {}))["datasets"]}
    assert listed["handbook"]["watched"] is False and listed["handbook"]["updated_at"]
    claim = WatchClaim.take(datasets / "handbook")
    assert claim is not None
    try:
        claim.write(WatchState(state="source_missing", message="its source folder was deleted or renamed", pid=1))
        listed = {d["id"]: d for d in structured(await client.call_tool("knowledge_list_datasets", {}))["datasets"]}
        assert (listed["handbook"]["watched"], listed["handbook"]["watch_state"]) == (True, "source_missing")
        assert "deleted or renamed" in listed["handbook"]["watch_message"]
        assert listed["recipes"]["watched"] is False
        schema = {t.name: t.output_schema for t in (await client.list_tools()).tools}["knowledge_list_datasets"]
        jsonschema.validate({"datasets": list(listed.values())}, schema)
    finally:
        claim.release()
