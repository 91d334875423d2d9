"""The tools' JSON schemas are precomputed (mcpower/server/tool_schemas.py): what they must match.

`python tests/test_tool_schemas.py` rewrites mcpower/server/tool_schemas.json from what the SDK
generates now (after changing a tool's arguments or result models), for review in the diff.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from mcp.server.mcpserver.tools import Tool

from mcpower.registry import Registry
from mcpower.server.tool_schemas import SCHEMAS_FILE, DeferredMetadata, build, generated, stored
from mcpower.server.tools import TOOL_NAMES, build_tools


async def _run(fn: Any) -> Any:
    return fn()


def tools(root: Path, names: str = "default") -> list[Tool]:
    return build_tools(Registry(root), _run, TOOL_NAMES[names])


def fresh_schemas(root: Path) -> dict[str, dict[str, Any]]:
    return {tool.fn.__name__: generated(tool.fn) for tool in tools(root)}


def test_the_stored_schemas_are_what_the_sdk_generates(tmp_path: Path) -> None:
    # Compared as text: the keys' order too is what tools/list shows.
    assert json.dumps(stored()) == json.dumps(fresh_schemas(tmp_path)), (
        "mcpower/server/tool_schemas.json is out of date: run `python tests/test_tool_schemas.py` and review the diff"
    )


FIELDS = ("name", "title", "description", "parameters", "output_schema", "is_async", "context_kwarg", "annotations")
FIELDS += ("resolved_params", "resolver_plans", "icons", "meta")


@pytest.mark.parametrize("names", ["default", "seed"])
def test_a_deferred_tool_is_the_tool_from_function_makes(tmp_path: Path, names: str) -> None:
    for tool in tools(tmp_path, names):
        made = Tool.from_function(tool.fn, name=tool.name, title=tool.title, description=tool.description)
        made.parameters["additionalProperties"] = False  # as build_tools sets it
        made.annotations = tool.annotations

        assert isinstance(tool.fn_metadata, DeferredMetadata) and not tool.fn_metadata.built
        assert {f: getattr(tool, f) for f in FIELDS} == {f: getattr(made, f) for f in FIELDS}
        assert not tool.fn_metadata.built  # listing a tool builds nothing


def test_the_models_are_built_at_first_use_and_once(tmp_path: Path) -> None:
    listed = tools(tmp_path)
    search = listed[0].fn_metadata
    assert isinstance(search, DeferredMetadata)

    arguments = search.validate_arguments({"query": "zephyrine", "top_k": 3})  # what a call does first

    assert arguments["query"] == "zephyrine" and arguments["top_k"] == 3 and search.built
    assert search.build() is search.build()  # built once
    assert [t.fn_metadata.built for t in listed[1:]] == [False, False, False]
    build(listed)  # the warm-up's
    assert all(t.fn_metadata.built for t in listed)
    schema = search.arg_model.model_json_schema(by_alias=True)
    assert schema == {k: v for k, v in listed[0].parameters.items() if k != "additionalProperties"}


if __name__ == "__main__":  # rewrite the file
    with tempfile.TemporaryDirectory() as folder:
        text = json.dumps(fresh_schemas(Path(folder)), indent=1, ensure_ascii=False) + "\n"
    SCHEMAS_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {SCHEMAS_FILE}", file=sys.stderr)
