"""Talking to Milvus: importing pymilvus lazily, connecting, engine errors as McpowerErrors, safe literals.

pymilvus is imported here only, when a Milvus URI is used (it costs 1-2 s and ~900 modules), so
`mcpower --help`, `datasets` of local folders and the MCP handshake never pay for it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from mcpower.env import default_cache_dir
from mcpower.errors import DatasetUnavailableError, EngineAuthError, EngineUnavailableError, McpowerError

logger = logging.getLogger(__name__)

INSTALL_HINT = "install it with `pip install 'mcpower[milvus]'`"
# Seconds a connection attempt and each call may take before the engine counts as unreachable.
CONNECT_TIMEOUT = 10.0
CALL_TIMEOUT = 60.0
# Milvus' code for "collection not found" (a dataset version dropped under a reader).
MISSING_COLLECTION = 100
# Where a lite engine's log files go, under the cache folder, and how many of them are kept.
LOG_FOLDER = "milvus-logs"
LOGS_KEPT = 200
GLOG_LOG_DIR = "GLOG_log_dir"  # glog's flags read from the environment keep their case
_OPEN_LOCK = threading.Lock()  # one lite server start at a time (fd 1 is redirected meanwhile)

T = TypeVar("T")


class EngineUnreachableError(EngineUnavailableError):
    """The engine did not answer at all (refused, gone, timed out): the catalog connects anew at its
    next call, which is how a server recovers from an engine restart, and a milvus-lite file from its
    engine process dying, without restarting mcpower."""


def is_local(uri: str) -> bool:
    """Whether ``uri`` names an embedded milvus-lite file (a path ending in .db) rather than a server."""
    return "://" not in uri and uri.endswith(".db")


def display_uri(uri: str) -> str:
    """``uri`` as messages show it: a lite file by its name only (no absolute path), a server
    without the user and password it may carry."""
    if is_local(uri):
        return Path(uri).name
    parts = urlsplit(uri)
    host = parts.hostname or ""
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def import_pymilvus() -> Any:
    """The pymilvus module, its loggers quietened (it logs every failed call with a traceback).

    Raises:
        EngineUnavailableError: pymilvus (the `milvus` extra) is not installed.
    """
    try:
        import pymilvus
    except ImportError:
        raise EngineUnavailableError(f"Milvus support is not installed; {INSTALL_HINT}") from None
    for name in ("pymilvus", "pymilvus.milvus_client", "pymilvus.bulk_writer"):
        logging.getLogger(name).setLevel(logging.CRITICAL + 1)  # after the import, which sets its own levels
    return pymilvus


def connect(uri: str, token: str | None, *, create: bool = True, log_dir: Path | None = None) -> Any:
    """A ``MilvusClient`` for ``uri``: a milvus-lite ``.db`` file (its engine started in a child
    process) or an ``http(s)://`` server.

    ``create``: whether a lite file that does not exist may be created (an ingest's, never a
    reader's). ``log_dir``: where a lite engine's log files go (default: the cache folder's
    ``milvus-logs``).

    Raises:
        EngineUnavailableError, EngineAuthError: not installed, missing, unreachable, refused.
    """
    pymilvus = import_pymilvus()
    where = display_uri(uri)
    if is_local(uri):
        path = Path(uri).expanduser()
        if not create and not path.exists():
            raise EngineUnavailableError(missing_file(where))
        if not path.parent.is_dir():
            raise EngineUnavailableError(f"Milvus file {where}: its folder does not exist; create it first")
        try:
            with warnings.catch_warnings():  # milvus-lite 2.5 imports pkg_resources, deprecated
                warnings.simplefilter("ignore", DeprecationWarning)
                warnings.simplefilter("ignore", UserWarning)
                import milvus_lite  # noqa: F401
        except ImportError:
            raise EngineUnavailableError(f"a .db Milvus URI needs milvus-lite; {INSTALL_HINT}") from None
        path = path.resolve()
        uri = str(path)
    attempts = 3 if is_local(uri) else 1  # a lite server can miss pymilvus' first look at its socket
    last: BaseException | None = None
    for _ in range(attempts):
        holder = lite_holder(Path(uri)) if is_local(uri) else None
        if holder is not None:
            raise EngineUnreachableError(
                f"Milvus at {where} is unreachable (the file is open in another process, {holder}); a .db file is "
                "opened by one process at a time: stop that process, or share datasets through a Milvus server"
            )
        try:
            with (
                _OPEN_LOCK,
                _stdout_to_stderr(is_local(uri)),
                _lite_library_path(is_local(uri)),
                _lite_log_dir(is_local(uri), log_dir),
            ):
                return pymilvus.MilvusClient(uri=uri, token=token or "", timeout=CONNECT_TIMEOUT)
        except Exception as e:
            last = e
    assert last is not None
    raise engine_error(last, where) from last


def missing_file(name: str) -> str:
    """What to say of a milvus-lite file ``name`` that does not exist (to a reader: never created)."""
    return (
        f"the Milvus database {name} does not exist (a relative --milvus-uri is taken from the folder mcpower "
        "runs in); `mcpower ingest PATH --milvus-uri …` creates it"
    )


def lite_holder(path: Path) -> int | None:
    """The id of another process whose milvus-lite engine holds the file ``path`` (milvus-lite takes a
    POSIX lock on ``.<name>.lock`` beside it), read from /proc/locks; None if none, or not Linux.

    Asked before every connection: a milvus-lite 2.5 start that fails on that lock deletes the lock
    file, after which the next start would run a second engine on the same file. Only read, never
    locked here: closing any descriptor of a file drops every POSIX lock this process holds on it.
    """
    lock = path.parent / f".{path.name}.lock"
    try:
        st = lock.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return None
    me = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        fields = line.split()  # "1: POSIX  ADVISORY  WRITE 3790 fe:00:2187737 0 EOF"; waiters have "->"
        if len(fields) >= 6 and fields[1] == "POSIX" and fields[5] == me and fields[4] != str(os.getpid()):
            return int(fields[4]) if fields[4].isdigit() else None
    return None


def disconnect(client: Any, uri: str) -> None:
    """Close ``client``; for a milvus-lite file, stop its engine process too (it holds the file)."""
    with contextlib.suppress(Exception):
        client.close()
    if is_local(uri):
        with contextlib.suppress(Exception):
            from milvus_lite.server_manager import server_manager_instance

            server_manager_instance.release_server(str(Path(uri).expanduser().resolve()))


@contextlib.contextmanager
def _lite_library_path(active: bool) -> Iterator[None]:
    """While milvus-lite starts its engine process, give LD_LIBRARY_PATH a value if it has none.

    milvus-lite starts the engine with ``LD_LIBRARY_PATH=<its lib folder>:<ours>``: with ours unset
    that ends in an empty entry, which the dynamic loader reads as the working folder, and the
    engine runs in the .db file's folder. A ``libstdc++.so.6`` there (a project folder holding
    ``milvus.db``) would be loaded into the engine. With our value set to milvus-lite's own lib
    folder, the engine's path names that folder twice and nothing else; ours is restored at once.
    """
    if not active or os.environ.get("LD_LIBRARY_PATH"):
        yield
        return
    import milvus_lite

    saved = os.environ.pop("LD_LIBRARY_PATH", None)
    os.environ["LD_LIBRARY_PATH"] = str(Path(milvus_lite.__file__).resolve().parent / "lib")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = saved


@contextlib.contextmanager
def _lite_log_dir(active: bool, log_dir: Path | None) -> Iterator[None]:
    """While milvus-lite starts its engine process, point the engine's logger (glog) at ``log_dir``.

    Left to itself, glog writes ``milvus.INFO``, ``milvus.WARNING`` and ``milvus.<host>.<user>.log.*``
    at every engine start into $TMPDIR (or /tmp), and where that cannot be written, into its working
    folder: the .db file's folder, often the user's project. ``GLOG_log_dir`` (read by glog from the
    environment, which the engine inherits) sends them to mcpower's cache folder instead, where the
    oldest are pruned. A GLOG_log_dir or GOOGLE_LOG_DIR of the user's own is kept; ours is removed
    at once.
    """
    if not active or os.environ.get(GLOG_LOG_DIR) or os.environ.get("GOOGLE_LOG_DIR"):
        yield
        return
    folder = (log_dir or default_cache_dir() / LOG_FOLDER).expanduser().resolve()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        _prune_logs(folder)
    except OSError as e:  # glog's own choice, then
        logger.debug("cannot use %s for milvus-lite's logs: %s", folder, e)
        yield
        return
    os.environ[GLOG_LOG_DIR] = str(folder)
    try:
        yield
    finally:
        os.environ.pop(GLOG_LOG_DIR, None)


def _prune_logs(folder: Path, keep: int = LOGS_KEPT) -> None:
    """Delete all but the newest ``keep`` of the engine's log files in ``folder`` (three per start)."""
    found: list[tuple[float, str]] = []
    with os.scandir(folder) as it:
        for item in it:
            with contextlib.suppress(OSError):
                if item.name.startswith("milvus.") and item.is_file(follow_symlinks=False):
                    found.append((item.stat(follow_symlinks=False).st_mtime, item.path))
    for _, path in sorted(found, reverse=True)[keep:]:
        with contextlib.suppress(OSError):
            os.unlink(path)


@contextlib.contextmanager
def _stdout_to_stderr(active: bool) -> Iterator[None]:
    """While milvus-lite starts its server process, point file descriptor 1 at stderr: the child
    inherits it and writes there, and under `serve --stdio` stdout is the MCP protocol."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def engine_error(e: BaseException, where: str) -> McpowerError:
    """A plain, coded error for a failure of the engine at ``where``."""
    if isinstance(e, McpowerError):
        return e
    status = _grpc_status(e)
    code = getattr(e, "code", None)
    message = " ".join(str(getattr(e, "message", "") or e).split())[:200]
    if status == "UNAUTHENTICATED":
        return EngineAuthError(
            f"Milvus at {where} refused the credentials; check MCPOWER_MILVUS_TOKEN (user:password or an API key)"
        )
    if status in ("UNAVAILABLE", "DEADLINE_EXCEEDED") or code == 2 or type(e).__name__ == "ConnectionConfigException":
        return EngineUnreachableError(
            f"Milvus at {where} is unreachable ({message or status}); check --milvus-uri / MCPOWER_MILVUS_URI "
            "and that the engine is running (a .db file is opened by one process at a time)"
        )
    if code == MISSING_COLLECTION:
        return DatasetUnavailableError(
            f"Milvus at {where}: a collection of this dataset is gone (dropped or replaced); "
            "search again, or re-ingest the dataset"
        )
    return EngineUnavailableError(f"Milvus at {where} failed: {type(e).__name__}: {message}")


def _grpc_status(e: BaseException) -> str | None:
    """The gRPC status name anywhere in ``e``'s cause chain (pymilvus wraps some, not all)."""
    seen: BaseException | None = e
    for _ in range(6):
        if seen is None:
            return None
        code = getattr(seen, "code", None)
        if callable(code):
            with contextlib.suppress(Exception):
                return str(getattr(code(), "name", "")) or None
        seen = seen.__cause__ or seen.__context__
    return None


def guarded(where: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, an engine failure raised as the McpowerError :func:`engine_error` makes."""
    try:
        return fn(*args, **kwargs)
    except McpowerError:
        raise
    except Exception as e:
        logger.debug("milvus call %s failed", getattr(fn, "__name__", fn), exc_info=True)
        raise engine_error(e, where) from e


# ---------------------------------------------------------------- filter expressions


def literal(value: str) -> str | None:
    """A Milvus string literal for ``value``, or None if it cannot be matched safely on every engine
    (control characters: milvus-lite 2.5 has no escape that matches a newline)."""
    if any(ord(ch) < 0x20 and ch != "\t" for ch in value) or "\x7f" in value:
        return None
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def int_list(ids: Any) -> str:
    """``[1, 2, 3]`` for an ``in`` expression, every element an int (nothing else can get in)."""
    return "[" + ", ".join(str(int(i)) for i in ids) + "]"
