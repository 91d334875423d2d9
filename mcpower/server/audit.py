"""The audit trail: one log line per tool call, whatever the transport — who asked what, and how it went.

Each line is the event ``audit`` on the ``mcpower.audit`` logger (logging.py: stderr, JSON lines or
text; also a file with ``--audit-log``): the caller's name, the tool, the dataset (``*``: all),
the query's length in characters, the search options the client gave (``top_k``, ``mode``,
``max_tokens``, ``offset``, ``group``, ``per_document``; ``scope`` for a source), the result count,
the status (``ok`` or the error code), and the milliseconds it took. ``denied`` tells the operator
what the client is never told: the dataset it named exists, but is not one the caller may read
(the client got the ``DATASET_NOT_FOUND``/``RESULT_NOT_FOUND`` an unknown id gets). This is the one
line a tool call writes. The query's text is logged only when the operator opts in
(``--audit-queries``): questions can be as private as the documents. Every value is bounded before
it is logged: the arguments are the client's, read here before the tool's own checks.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpower.defaults import is_valid_id
from mcpower.errors import McpowerError
from mcpower.server.auth.callers import allowed, current_caller

logger = logging.getLogger("mcpower.audit")

# A query is at most 1,024 characters (ranking.MAX_QUERY_CHARS); a longer one is refused, and its
# text is cut here so a refused call cannot write megabytes into the log.
MAX_LOGGED_QUERY_CHARS = 1024
MAX_NAME_CHARS = 64
# The options logged with a call, when the client gave them: numbers as they are, words from these sets.
_NUMBER_OPTIONS = ("top_k", "max_tokens", "offset", "per_document")
_WORD_OPTIONS = {
    "mode": {"hybrid", "semantic", "keyword"},
    "group": {"passages", "none"},
    "scope": {"chunk", "neighbors", "section"},
}
_NOT_FOUND = {"DATASET_NOT_FOUND", "RESULT_NOT_FOUND"}


@dataclass(frozen=True)
class ToolCall:
    """What the audit line says about one tool call."""

    caller: str
    tool: str
    dataset: str | None
    query_chars: int | None
    result_count: int | None
    status: str
    duration_ms: float
    query: str | None = None
    door: str = "mcp"  # mcp: an MCP client's tools/call; web: a web page's (docs/web.md)
    denied: bool = False  # the dataset named exists, outside the caller's datasets (answered as unknown)
    options: tuple[tuple[str, int | str], ...] = ()  # the search options given (module docstring)


Observer = Callable[[ToolCall], None]  # metrics count the calls


class AuditLog:
    """MCP middleware (outside the time limit, so a timeout is logged as one): the audit line of
    every ``tools/call``; ``observer`` (metrics) sees each call too. ``tools`` are the server's tool
    names: any other name is logged as ``(unknown)``."""

    def __init__(self, queries: bool = False, observer: Observer | None = None) -> None:
        self.queries = queries
        self.observer = observer
        self.tools: frozenset[str] = frozenset()
        # Whether a dataset id exists at all, whoever asks (create_server sets it): a not-found
        # answer then says whether the caller was denied a real dataset or named none.
        self.exists: Callable[[str], bool] = lambda dataset_id: False

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        if ctx.method != "tools/call" or ctx.request_id is None:
            return await call_next(ctx)
        started = time.perf_counter()
        result: Any = None
        try:
            result = await call_next(ctx)
            return result
        finally:
            self.record(ctx.params, result, started)

    def record(self, params: Any, result: Any, started: float, door: str = "mcp") -> None:
        """Log the call of ``params`` (a tools/call's: name, arguments) that gave ``result`` (None: it
        raised), begun at ``started`` (``time.perf_counter()``), through ``door``."""
        ms = (time.perf_counter() - started) * 1000
        status = _status(result) if result is not None else "error"
        params = params if isinstance(params, dict) else {}
        arguments = params.get("arguments")
        arguments = arguments if isinstance(arguments, dict) else {}
        tool = params.get("name")
        tool = tool if isinstance(tool, str) and tool in self.tools else "(unknown)"
        query = arguments.get("query")
        caller, dataset = current_caller(), _dataset(arguments)
        denied = (
            status in _NOT_FOUND
            and dataset not in (None, "*")
            and not allowed(caller, str(dataset))
            and self.exists(str(dataset))
        )
        call = ToolCall(
            caller=caller.name[:MAX_NAME_CHARS],
            tool=tool,
            dataset=dataset,
            query_chars=len(query) if isinstance(query, str) else None,
            result_count=_count(result) if status == "ok" else None,
            status=status,
            duration_ms=round(ms, 2),
            query=query[:MAX_LOGGED_QUERY_CHARS] if self.queries and isinstance(query, str) else None,
            door=door,
            denied=denied,
            options=_options(arguments),
        )
        extra = {k: v for k, v in vars(call).items() if (k != "query" or self.queries) and k != "options"}
        logger.info("audit", extra={"event": "audit", **extra, **dict(call.options)})
        if self.observer is not None:
            self.observer(call)


def _dataset(arguments: dict[str, Any]) -> str | None:
    """The dataset a call names (``*``: every one it may read), as the client gave it: a search's
    ``dataset``, a result id's dataset part; None for a value that is no dataset id."""
    if "result_id" in arguments:
        rid = arguments["result_id"]
        value = rid.rpartition(":")[0] if isinstance(rid, str) else None
    else:
        value = arguments.get("dataset") or "*"
    return value if value == "*" or is_valid_id(value) else None


def _options(arguments: dict[str, Any]) -> tuple[tuple[str, int | str], ...]:
    """The options a call gave that the audit line keeps: whole numbers, and known words."""
    found: list[tuple[str, int | str]] = []
    for name in _NUMBER_OPTIONS:
        value = arguments.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10**12:
            found.append((name, value))
    for name, words in _WORD_OPTIONS.items():
        value = arguments.get(name)
        if isinstance(value, str) and value in words:
            found.append((name, value))
    return tuple(found)


def _field(result: Any, name: str) -> Any:
    """A field of a result, in its model or its wire form."""
    if isinstance(result, dict):
        return result.get(name)
    return getattr(result, {"structuredContent": "structured_content", "isError": "is_error"}[name], None)


def _status(result: Any) -> str:
    """``ok``, or the error code of an isError result (``error`` without one)."""
    if not _field(result, "isError"):
        return "ok"
    content = _field(result, "structuredContent")
    error = content.get("error") if isinstance(content, dict) else None
    code = error.get("code") if isinstance(error, dict) else None
    return code[:MAX_NAME_CHARS] if isinstance(code, str) and code else "error"


def _count(result: Any) -> int | None:
    """How many results an answer holds: a search's count, the datasets listed; 1 for a source or metadata."""
    content = _field(result, "structuredContent")
    if not isinstance(content, dict):
        return None
    meta = content.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("count"), int):
        return int(meta["count"])
    if isinstance(content.get("datasets"), list):
        return len(content["datasets"])
    return 1


def log_to_file(path: Path) -> None:
    """Also write the audit lines, as JSON, to ``path``: appended, through a descriptor opened once.

    Opened as the tokens file is treated: never through a symbolic link (``O_NOFOLLOW``: a link
    planted at the path made the lines append to its target), created readable and writable by
    this user only; an existing file must be a regular file of this user's (or root's) that no one
    else can write, since anyone who can could forge or erase the lines. One others can read is
    used, with a warning: the lines say who asked what. POSIX only (elsewhere the file is opened
    as it is).

    Raises:
        McpowerError: a symbolic link, not a regular file, another user's, or writable by others.
        OSError: the file cannot be opened for appending.
    """
    from mcpower.server.logging import JsonFormatter

    expanded = path.expanduser()
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
    # O_NONBLOCK: a FIFO at the path is refused below, not waited on.
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(expanded, flags, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP and expanded.is_symlink():
            raise McpowerError(
                f"the audit log {path} is a symbolic link; mcpower does not write through one (it could point "
                "the lines anywhere): give the path of the file itself"
            ) from None
        if e.errno == errno.ENXIO:  # a FIFO no one reads, a socket
            raise McpowerError(f"the audit log {path} is not a regular file; give the path of a file") from None
        raise
    try:
        _check_audit_file(path, os.fstat(fd))
        os.set_blocking(fd, True)
        stream = os.fdopen(fd, "a", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise
    handler = _FileHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)


class _FileHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that owns its stream (the file opened above): closing it closes the file."""

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.stream.close()
        super().close()


def _check_audit_file(path: Path, st: os.stat_result) -> None:
    """Raises McpowerError: ``st`` (the opened file's) is no regular file, or others can change it."""
    if os.name != "posix":
        return
    if not stat.S_ISREG(st.st_mode):
        raise McpowerError(f"the audit log {path} is not a regular file; give the path of a file")
    mode = st.st_mode & 0o777
    if st.st_uid not in (os.getuid(), 0):
        raise McpowerError(
            f"the audit log {path} belongs to another user, who could change or erase its lines; "
            "give a file of your own (a new path is created readable by you only)"
        )
    if mode & 0o022:
        raise McpowerError(
            f"the audit log {path} can be changed by other users (mode {mode:04o}): they could forge or erase "
            f"its lines; make it yours alone with: chmod 600 {path}"
        )
    if mode & 0o044:
        logger.warning(
            "the audit log %s can be read by other users (mode %04o): its lines say who asked what; chmod 600 %s",
            path,
            mode,
            path,
            extra={"event": "server.audit_log_readable"},
        )
