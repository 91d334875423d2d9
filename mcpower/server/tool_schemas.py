"""The tools' JSON schemas, precomputed: a server answers ``initialize`` without building the
pydantic models behind them (~0.02-0.03 s of every start, more under load).

The SDK's ``Tool.from_function`` builds, for a tool function, a pydantic model of its arguments,
the JSON schema of that model (the input schema tools/list shows) and the JSON schema of its
result (the output schema); the model validates each call and the result's model checks each
answer. :func:`deferred_tool` makes the same Tool with both schemas read from tool_schemas.json and
the rest built by ``from_function`` itself when first used: by the warm-up after the handshake
(middleware.py, :func:`build`), or by a call that comes first. tests/test_tool_schemas.py checks
that the file holds exactly what ``from_function`` generates, and rewrites it when asked.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Any, cast

from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import FuncMetadata
from mcp.types import ToolAnnotations

SCHEMAS_FILE = Path(__file__).with_name("tool_schemas.json")


@cache
def _stored() -> str:
    return SCHEMAS_FILE.read_text(encoding="utf-8")


def stored() -> dict[str, dict[str, Any]]:
    """Each tool function's schemas by its name: ``{"input": ..., "output": ...}`` (a fresh copy)."""
    schemas: dict[str, dict[str, Any]] = json.loads(_stored())
    return schemas


def generated(fn: Callable[..., Any]) -> dict[str, Any]:
    """What ``Tool.from_function`` generates for ``fn`` (what the file must hold for it)."""
    tool = Tool.from_function(fn)
    return {"input": tool.parameters, "output": tool.output_schema}


class DeferredMetadata:
    """A Tool's ``fn_metadata`` (the SDK's FuncMetadata): the output schema at once, everything else
    from the FuncMetadata ``Tool.from_function`` builds, at the first use of anything else."""

    def __init__(self, fn: Callable[..., Any], output_schema: dict[str, Any] | None) -> None:
        self.fn = fn
        self.output_schema = output_schema
        self._built: FuncMetadata | None = None
        self._lock = threading.Lock()

    def build(self) -> FuncMetadata:
        with self._lock:  # the warm-up thread and a first call may ask at once
            if self._built is None:
                self._built = Tool.from_function(self.fn).fn_metadata
            return self._built

    @property
    def built(self) -> bool:
        return self._built is not None

    def __getattr__(self, name: str) -> Any:  # anything but the above: the real metadata's
        if name.startswith("__") or name in ("_built", "_lock"):  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self.build(), name)


def deferred_tool(
    fn: Callable[..., Any], *, name: str, title: str, description: str, annotations: ToolAnnotations
) -> Tool:
    """``Tool.from_function(fn, name=..., title=..., description=..., annotations=...)`` for a tool
    function without a Context parameter or resolvers (the four tools), its schemas from the file;
    one the file does not know (a new tool, before the file is rewritten) is built at once."""
    schemas = stored().get(fn.__name__)
    if schemas is None:
        return Tool.from_function(fn, name=name, title=title, description=description, annotations=annotations)
    return Tool.model_construct(
        fn=fn,
        name=name,
        title=title,
        description=description,
        parameters=schemas["input"],
        fn_metadata=cast(FuncMetadata, DeferredMetadata(fn, schemas["output"])),  # it stands in for one
        is_async=inspect.iscoroutinefunction(fn),
        context_kwarg=None,
        annotations=annotations,
    )


def build(tools: Iterable[Tool]) -> None:
    """Build what ``tools`` deferred (the warm-up does, so that no call waits for it)."""
    for tool in tools:
        metadata = tool.fn_metadata
        if isinstance(metadata, DeferredMetadata):
            metadata.build()
