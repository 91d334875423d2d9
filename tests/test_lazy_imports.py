"""The CLI's light paths never import the heavy libraries (qmd's cli-lazy-llm-import test, in Python).

Each check runs in a fresh interpreter: this test process has long since imported everything.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import format_fixtures as ff
import pytest
from conftest import FakeEmbedder, fresh_python, tagged_json, write_files
from server_fixtures import PROTOCOL_VERSION, StdioServer, subprocess_env

from mcpower.cli.app import app, app_for
from mcpower.ingestion import IngestOptions, ingest

HEAVY = ("torch", "sentence_transformers", "faiss", "onnxruntime", "transformers", "watchfiles")
# Document parsers: only ingest imports them, and only for files of their format.
PARSERS = ("lxml", "pypdf", "docutils", "defusedxml", "cryptography", "markdown_it", "protego")

# Runs `mcpower ARGS...` (or just imports a module) in this interpreter, then prints which heavy
# modules ended up in sys.modules, as the last line of stdout.
WRAPPER = """
import json, runpy, sys
heavy, args = json.loads(sys.argv[1]), json.loads(sys.argv[2])
heavy += json.loads(sys.argv[3]) if len(sys.argv) > 3 else []
if args and args[0] == "import":
    __import__(args[1])
else:
    sys.argv = ["mcpower", *args]
    try:
        runpy.run_module("mcpower", run_name="__main__", alter_sys=True)
    except SystemExit as e:
        print(f"exit {e.code}", file=sys.stderr)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy)
print("\\nLOADED " + json.dumps(loaded))
"""


def loaded_after(*args: str | Path, watch: tuple[str, ...] = ()) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    proc = fresh_python(WRAPPER, json.dumps(HEAVY), json.dumps([str(a) for a in args]), json.dumps(watch))
    return tagged_json(proc, "LOADED"), proc


def test_the_wrapper_sees_heavy_imports() -> None:
    loaded, _ = loaded_after("import", "faiss")

    assert "faiss" in loaded  # so an empty list below means something


@pytest.mark.parametrize("module", ["mcpower", "mcpower.cli", "mcpower.watch"])
def test_importing_loads_nothing_heavy(module: str) -> None:
    loaded, _ = loaded_after("import", module)

    assert loaded == []


def test_help_loads_nothing_heavy() -> None:
    loaded, proc = loaded_after("--help")

    assert "exit 0" in proc.stderr
    assert "ingest" in proc.stdout
    assert loaded == []


def test_validate_of_an_empty_folder_loads_nothing_heavy(tmp_path: Path) -> None:
    loaded, proc = loaded_after("validate", "--datasets-dir", tmp_path)

    assert "no datasets under" in proc.stderr  # it really ran
    assert loaded == []


def test_datasets_listing_loads_nothing_heavy(corpus: Path, datasets_dir: Path) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"), embedder=FakeEmbedder())

    loaded, proc = loaded_after("datasets", "--datasets-dir", datasets_dir)

    assert proc.stdout.splitlines()[1].startswith("docs ")  # under the header
    assert loaded == []


def test_listing_a_dataset_of_the_original_format_loads_nothing_heavy(datasets_dir: Path) -> None:
    from original_fixtures import RECORDS, embed, write_original

    write_original(datasets_dir / "orig", vectors=embed([r["content"] for r in RECORDS], 384))

    loaded, proc = loaded_after("datasets", "--datasets-dir", datasets_dir)

    assert "\norig " in proc.stdout and "original system's format" in proc.stdout  # listed ready
    assert loaded == []


def test_a_cold_search_loads_no_document_parser(corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"))

    loaded, proc = loaded_after(
        "search", "docs", "zephyrine", "--mode", "keyword", "--datasets-dir", datasets_dir, watch=PARSERS
    )

    assert "install.md" in proc.stdout  # it really searched
    assert not [m for m in loaded if m.split(".")[0] in PARSERS]


def test_a_cold_search_of_pdf_word_and_html_documents_loads_no_parser(
    tmp_path: Path, datasets_dir: Path, fake_embedder: FakeEmbedder
) -> None:
    folder = write_files(
        tmp_path / "mixed",
        {
            "manual.pdf": ff.pdf([["Lumenator manual."], ["Calibrate the zephyrine lens monthly."]]),
            "handbook.docx": ff.docx([("h1", "Permits"), ("p", "Zephyrine permits are free.")]),
            "page.html": "<html><body><main><h1>Berries</h1><p>Zephyrine berries.</p></main></body></html>",
            "notes.rst": "Notes\n=====\n\n.. note:: Zephyrine notes.\n",
        },
    )
    ingest(folder, datasets_dir, IngestOptions(dataset_id="mixed"))

    loaded, proc = loaded_after(
        "search", "mixed", "zephyrine", "--mode", "keyword", "--datasets-dir", datasets_dir, watch=PARSERS
    )

    assert "manual.pdf:1-3 (pages 1-2)" in proc.stdout and "handbook.docx" in proc.stdout  # it really searched
    assert not [m for m in loaded if m.split(".")[0] in PARSERS]


# The web pages (mcpower/web) and their templates: only `serve --http` builds them.
WEB = ("jinja2",)


def test_a_cold_search_loads_no_web_page(corpus: Path, datasets_dir: Path, fake_embedder: FakeEmbedder) -> None:
    ingest(corpus, datasets_dir, IngestOptions(dataset_id="docs"))

    loaded, proc = loaded_after(
        "search", "docs", "zephyrine", "--mode", "keyword", "--datasets-dir", datasets_dir, watch=WEB
    )

    assert "install.md" in proc.stdout  # it really searched
    assert "jinja2" not in loaded


def test_the_wrapper_sees_the_web_pages_imports() -> None:
    loaded, _ = loaded_after("import", "mcpower.web", watch=WEB)

    assert "jinja2" in loaded  # mcpower.web imports it as it loads: its absence means no web module


def test_the_wrapper_sees_parser_imports() -> None:
    loaded, _ = loaded_after("import", "lxml.html", watch=PARSERS)

    assert "lxml" in loaded


# ---------------------------------------------------------------- `serve --stdio` before the handshake

# What a server must not load before it answers initialize (without --watch or a Milvus URI): the
# stores, the model and the watcher load after the handshake, in the warm-up thread or on demand;
# so does the core's search module (mcpower.search, with mcpower.coverage, mcpower.priors and the
# rest it imports).
SERVER_HEAVY = (
    "numpy",
    "faiss",
    "onnxruntime",
    "pymilvus",
    "milvus_lite",
    "watchfiles",
    "jinja2",
    "prometheus_client",
    "protego",
    "rich",  # the SDK's own log handler: the CLI has configured logging already (server/app.py)
    "typer",  # a plain `serve --stdio` runs without the command line library (cli/serve_fast.py)
    *HEAVY,
)
# Runs `mcpower ARGS...`; as the server ends (with os._exit), writes what it had imported to stderr,
# and the tool functions whose pydantic models the SDK built (server/tool_schemas.py defers them).
REPORT_AT_EXIT = """
import json, os, sys
heavy = json.loads(sys.argv.pop(1))
exit_now = os._exit
import mcpower.cli  # first, as in the `mcpower` command (it sets up pydantic's environment)
import mcp.server.mcpserver.tools.base as tool_base
built, make = [], tool_base.func_metadata

def counting(fn, *args, **kwargs):
    built.append(fn.__name__)
    return make(fn, *args, **kwargs)

tool_base.func_metadata = counting

def report_and_exit(code):
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy or m in ("mcpower.search", "mcpower.coverage", "mcpower.priors")
                    or m.startswith(("mcpower.store.milvus", "mcpower.web")))
    os.write(2, ("LOADED " + json.dumps(loaded) + "\\n").encode())
    os.write(2, ("BUILT " + json.dumps(built) + "\\n").encode())
    exit_now(code)

os._exit = report_and_exit
sys.argv = ["mcpower", *sys.argv[1:]]
from mcpower.cli import main
main()
"""
# What the MCP SDK itself loads for any stdio server (uvicorn, through the SDK, imports watchfiles).
SDK_SERVER = """
import json, sys
from mcp.server import MCPServer
import mcp.server.stdio
MCPServer("bare")
heavy = json.loads(sys.argv[1])
print("LOADED " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_serve_stdio_answers_initialize_before_loading_anything_heavy(tmp_path: Path, datasets: Path) -> None:
    script = tmp_path / "report_at_exit.py"
    script.write_text(REPORT_AT_EXIT, encoding="utf-8")
    server = StdioServer(
        [sys.executable, str(script), json.dumps(SERVER_HEAVY), "serve", "--stdio", "--datasets-dir", str(datasets)],
        env=subprocess_env(),
    )
    try:
        init = server.call(
            "initialize",
            {"protocolVersion": PROTOCOL_VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            timeout=120,
        )
        server.close_stdin()  # nothing after initialize: the server ends as it was when it answered
        assert server.wait_exit(60) == 0
    finally:
        server.stop()
    sdk = tagged_json(fresh_python(SDK_SERVER, json.dumps(SERVER_HEAVY)), "LOADED")

    assert init["serverInfo"]["name"] == "mcpower"
    reports = [line.decode() for line in server.stderr_lines if line.startswith(b"LOADED ")]
    assert len(reports) == 1, server.stderr()
    loaded = json.loads(reports[0][len("LOADED ") :])
    assert "mcpower.server.app" not in sdk and "numpy" not in sdk  # the SDK alone loads none of these
    assert [m for m in loaded if m not in sdk] == []
    assert "rich" in sdk and "rich" not in loaded  # a bare MCPServer builds a rich handler; ours does not
    assert "typer" not in sdk
    assert _reported(server, "BUILT") == []  # the tools' schemas were precomputed; their models wait


def _reported(server: StdioServer, tag: str) -> Any:
    lines = [line.decode() for line in server.stderr_lines if line.startswith(tag.encode() + b" ")]
    assert len(lines) == 1, server.stderr()
    return json.loads(lines[0][len(tag) + 1 :])


def test_the_sdk_configures_logging_only_where_nobody_has(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rich handler is skipped only when the root logger has a handler (the CLI's): a library
    caller with none still gets the SDK's logging, and the SDK's function is put back either way."""
    import logging

    from mcp.server.mcpserver import server as sdk_server

    from mcpower.server.app import sdk_logging_kept

    calls: list[str] = []
    monkeypatch.setattr(sdk_server, "configure_logging", lambda level="INFO": calls.append(level))
    original = sdk_server.configure_logging
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    with sdk_logging_kept():
        sdk_server.configure_logging("INFO")
    monkeypatch.setattr(root, "handlers", [])
    with sdk_logging_kept():
        sdk_server.configure_logging("DEBUG")

    assert calls == ["DEBUG"] and sdk_server.configure_logging is original


def test_the_serve_report_sees_heavy_imports(tmp_path: Path, datasets: Path) -> None:
    """The same report, from a server that did load numpy (the search's store): it is not blind."""
    script = tmp_path / "report_at_exit.py"
    script.write_text(REPORT_AT_EXIT, encoding="utf-8")
    server = StdioServer(
        [sys.executable, str(script), json.dumps(SERVER_HEAVY), "serve", "--stdio", "--datasets-dir", str(datasets)],
        env=subprocess_env(),
    )
    try:
        server.initialize()
        result = server.call_tool("knowledge_search", {"query": "zephyrine", "dataset": "handbook", "mode": "keyword"})
        server.close_stdin()
        server.wait_exit(60)
    finally:
        server.stop()

    assert not result.get("isError"), result
    reports = [line.decode() for line in server.stderr_lines if line.startswith(b"LOADED ")]
    loaded = json.loads(reports[0][len("LOADED ") :])
    assert "numpy" in loaded and "mcpower.search" in loaded and "mcpower.coverage" in loaded
    assert "knowledge_search" in _reported(server, "BUILT")  # the search's model, built for its call


# ---------------------------------------------------------------- the command line builds one command

COUNT_BUILDS = """
import sys, typer.main
built = []
build = typer.main.get_command_from_info
def counting(*args, **kwargs):
    info = kwargs.get("command_info") or args[0]
    built.append(info.name or info.callback.__name__)
    return build(*args, **kwargs)
typer.main.get_command_from_info = counting
sys.argv = ["mcpower", *sys.argv[1:]]
from mcpower.cli import main
try:
    main()
except SystemExit:
    pass
print("BUILT " + __import__("json").dumps(built))
"""


def test_a_command_line_builds_only_the_command_it_names() -> None:
    built = tagged_json(fresh_python(COUNT_BUILDS, "serve", "--help"), "BUILT")

    assert built == ["serve"]  # not the six others: ~15 ms of every start


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--help"],
        ["search", "-h"],
        ["import", "--help"],
        ["eval", "--help"],
        ["token", "--help"],
        ["token", "add", "--help"],
        ["token"],
        ["serve", "--stdio", "--http"],
        ["search"],
        ["serv"],
        ["--help"],
        ["--version"],
        [],
    ],
)
def test_the_one_command_app_answers_as_the_whole_app(args: list[str]) -> None:
    from typer.testing import CliRunner

    runner = CliRunner()
    whole = runner.invoke(app, args, prog_name="mcpower")
    lean = runner.invoke(app_for(args), args, prog_name="mcpower")

    assert (lean.exit_code, lean.output) == (whole.exit_code, whole.output)


OTHER_COMMANDS = (
    "mcpower.cli.ingest",
    "mcpower.cli.importing",
    "mcpower.cli.datasets",
    "mcpower.cli.search",
    "mcpower.cli.serve",
    "mcpower.cli.tokens",
    "mcpower.cli.progress",
    "mcpower.sites",
    "mcpower.store.original",
)
IMPORTED_FROM = """
import json, sys
sys.argv = ["mcpower", *sys.argv[2:]]
from mcpower.cli import main
try:
    main()
except SystemExit:
    pass
watched = json.loads(__import__("os").environ["WATCHED"])
print("\\nLOADED " + json.dumps(sorted(m for m in watched if m in sys.modules)))
"""


@pytest.mark.parametrize(
    ("args", "own"),
    [
        (["serve", "--help"], {"mcpower.cli.serve"}),
        (["search", "--help"], {"mcpower.cli.search", "mcpower.cli.progress"}),  # its `plural`
        (["token", "--help"], {"mcpower.cli.tokens"}),
    ],
)
def test_a_command_imports_no_other_commands_module(
    args: list[str], own: set[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # serve --stdio and a cold search start faster without the other commands' modules (and the
    # original format's reader, needed only for such a dataset).
    monkeypatch.setenv("WATCHED", json.dumps(OTHER_COMMANDS))
    loaded = tagged_json(fresh_python(IMPORTED_FROM, "-", *args), "LOADED")

    assert set(loaded) == own
