"""Real MCP clients over a datasets folder full of broken datasets (the fault table's): the Python
SDK and the TypeScript SDK, each spawning `mcpower serve --stdio`. Every search answers with a coded
error or a result that explains itself (an empty one says why); none is uncoded, none leaks a path."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from hostile_cases import BROKEN_BASE, DATASET, ORIGINAL, build_root
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import ResourceTemplateReference
from server_fixtures import CLIENTS_DIR, npm_install, run_node, subprocess_env, write_launcher

from mcpower.errors import McpowerError

QUERY = "sourdough starter"
# The codes a search may answer with: the core's errors (INVALID_* come from argument checks).
CODES = {cls.code for cls in McpowerError.__subclasses__()} | {
    sub.code for cls in McpowerError.__subclasses__() for sub in cls.__subclasses__()
}
BROKEN = {case.id for case in [*DATASET, *ORIGINAL]}


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The fault table's datasets root (good datasets and a broken copy per case) and a launcher."""
    base = tmp_path_factory.mktemp("broken")
    datasets, _ = build_root(base)
    return datasets, write_launcher(base)


def check(answers: list[dict[str, Any]], listed: dict[str, str]) -> None:
    """Each answer: a coded error naming no absolute path, or results, or an empty answer with notes."""
    assert len(answers) == len(listed) + 2  # every dataset, then all of them, then an unknown id
    for a in answers:
        where = f"search of {a['dataset'] or 'all datasets'}"
        if a["isError"]:
            assert a["code"] in CODES, f"{where}: uncoded error {a}"
            assert a["message"] and "/tmp" not in a["message"] and str(Path.home()) not in a["message"], where
        else:
            assert a["status"] in ("ok", "empty"), f"{where}: {a}"
            assert a["results"] or a["notes"], f"{where}: an empty answer that does not say why"
        if a["dataset"] in BROKEN:
            assert a["isError"], f"{where}: a broken dataset answered without an error"
        if listed.get(a["dataset"]) == "error":
            assert a["isError"], f"{where}: a dataset listed as broken answered without an error"
    by_id = {a["dataset"]: a for a in answers}
    assert by_id[BROKEN_BASE]["results"], "a good dataset beside the broken ones still answers"
    assert by_id[None]["results"] and any("skipped" in n or "unavailable" in n for n in by_id[None]["notes"])
    assert by_id["no-such-dataset"]["code"] == "DATASET_NOT_FOUND"
    assert set(listed) >= BROKEN, "every broken dataset is listed (as an error, or ready until a search tells)"


@pytest.mark.anyio
async def test_python_sdk_over_broken_datasets(broken_root: tuple[Path, Path]) -> None:
    datasets, launcher = broken_root
    params = StdioServerParameters(
        command=sys.executable,
        args=[str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets)],
        env=subprocess_env(),
    )
    async with Client(params, read_timeout_seconds=120) as client:
        listing = await client.call_tool("knowledge_list_datasets", {})
        assert not listing.is_error and listing.structured_content is not None
        listed = {d["id"]: d["status"] for d in listing.structured_content["datasets"]}
        # completion/complete (the capability declared): the ready datasets, and paths within one
        assert client.server_capabilities is not None and client.server_capabilities.completions is not None
        template = ResourceTemplateReference(uri="mcpower://{dataset}/{+path}")
        ids = (await client.complete(template, {"name": "dataset", "value": ""})).completion.values
        assert BROKEN_BASE in ids and all(listed.get(d) == "ready" for d in ids)  # never one listed as broken
        paths = await client.complete(template, {"name": "path", "value": ""}, {"dataset": BROKEN_BASE})
        assert paths.completion.values and all(isinstance(p, str) for p in paths.completion.values)
        answers = []
        for dataset in [*listed, None, "no-such-dataset"]:
            arguments = {"query": QUERY} if dataset is None else {"query": QUERY, "dataset": dataset}
            result = await client.call_tool("knowledge_search", arguments)
            s = result.structured_content or {}
            answers.append(
                {
                    "dataset": dataset,
                    "isError": bool(result.is_error),
                    "code": (s.get("error") or {}).get("code"),
                    "message": (s.get("error") or {}).get("message"),
                    "status": s.get("status"),
                    "results": len(s.get("results") or []),
                    "notes": (s.get("meta") or {}).get("notes", []),
                }
            )
    check(answers, listed)


@pytest.mark.node
def test_typescript_sdk_over_broken_datasets(broken_root: tuple[Path, Path]) -> None:
    npm_install(CLIENTS_DIR)
    datasets, launcher = broken_root
    serve = [sys.executable, str(launcher), "serve", "--stdio", "--datasets-dir", str(datasets)]
    summary = run_node("broken.mjs", *serve, env=subprocess_env() | {"MCPOWER_TEST_QUERY": QUERY}, timeout=300)
    check(summary["searches"], {d["id"]: d["status"] for d in summary["listed"]})
