"""Reading documents in a worker process, with a time limit and a memory limit.

Parsers of binary or deeply nested input (PDF, Word, HTML, reST: :data:`mcpower.chunking.ISOLATED`)
run on untrusted files in C or in pure Python, and no limit inside those libraries covers every
hostile file: a PDF stream can inflate to gigabytes, docutils holds the whole tree while it
recurses. So they run in one long-lived worker process (started on the first such file, reused
for the next ones) whose address space is capped (Linux; RLIMIT_AS is not enforced on macOS) and
whose every file has a deadline. A file that runs out of time or memory, or kills the worker, is
skipped with the reason (a reST file is read as plain text instead); the worker is restarted for
the next file, and nothing else is lost. The other formats are read in this process.

The worker is a new interpreter talking over a socket pair: not a fork (the ingest process runs
the model's threads), and not multiprocessing's spawn, which would import the caller's main script
again in the worker. It runs only this process's own code, whatever folder the ingest was started
in: the interpreter is isolated (``-I``: neither the working folder, PYTHONPATH, the user's site
folder nor any PYTHON* variable shapes its path), it starts in mcpower's own folder, and a small
bootstrap gives it this process's module path (less the working folder) and loads the very
``mcpower`` package this process runs (:func:`worker_command`). ``python -m`` would have put the
working folder first on the path, and a ``socket.py`` there would have run in the worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import warnings
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from mcpower.chunking import FORMATS, ISOLATED, Parsed, UnreadableError, format_of, parse_document

logger = logging.getLogger(__name__)

# Each file's deadline: the slowest real documents measured (a 4,000-line reST reference page, a
# 50-page PDF) take about a second.
DEFAULT_TIMEOUT = 60.0
# The worker's address space: 50 MB of HTML peaked at ~650 MB; a 2,000-level reST file took
# 1.8 GB before failing.
DEFAULT_MEMORY_BYTES = 2 * 1024**3
# How long the worker may take to start (an interpreter and mcpower's chunking, on a busy machine);
# a file's deadline starts once it is ready.
START_TIMEOUT = 120.0
# Read as plain text when their parser fails this way (their text is still good).
_TEXT_FALLBACK = frozenset({FORMATS[".rst"]})
# What the isolated interpreter runs first: this process's module path (argv 1, JSON), then the
# mcpower package found in exactly the folder this process loaded it from (argv 2), whatever else
# the path holds; then the worker's loop (argv 3 on).
_BOOTSTRAP = """\
import importlib.machinery, importlib.util, json, sys
sys.path[:] = json.loads(sys.argv[1])
spec = importlib.machinery.PathFinder.find_spec("mcpower", [sys.argv[2]])
package = importlib.util.module_from_spec(spec)
sys.modules["mcpower"] = package
spec.loader.exec_module(package)
from mcpower.chunking.worker import main
main(sys.argv[3:])
"""


class Reader:
    """Reads documents: formats in ISOLATED in the worker process, the others in this one.

    A context manager: the worker (if one was started) ends with it.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id while one runs (benchmarks read its peak memory)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def read(self, data: bytes, file_type: str) -> Parsed:
        """The parsed document (its ``text`` set).

        Raises:
            UnreadableError: the file cannot be read, or ran out of time or memory.
        """
        module = format_of(data, file_type)
        if module not in ISOLATED:
            return parse_document(data, file_type, module)
        try:
            return self._in_worker(module, data)
        except _Failed as e:
            if module in _TEXT_FALLBACK:
                parsed = parse_document(data, ".txt", FORMATS[".txt"])
                return Parsed(parsed.sections, parsed.title, parsed.text, notes=(f"read as plain text: {e}",))
            raise UnreadableError(str(e)) from None

    def close(self) -> None:
        """End the worker, if one runs."""
        if self._conn is not None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(None)
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(timeout=5)
        self._kill()

    def _in_worker(self, module: str, data: bytes) -> Parsed:
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._conn is not None
        try:
            self._conn.send((module, data))
            if not self._conn.poll(self.timeout):
                self._kill()
                raise _Failed(f"took longer than {self.timeout:g} s to read (the limit per file)")
            status, value = self._conn.recv()
        except (EOFError, OSError) as e:
            code = None
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self._process.wait(timeout=5)
            self._kill()
            raise _Failed(f"the reader process died reading it (exit code {code})") from e
        if status == "ok":
            parsed: Parsed = value
            return parsed
        if status == "memory":
            self._kill()  # whatever the parser held may not have been released
            raise _Failed(f"ran out of memory reading it (the limit is {self.memory_bytes / 1024**3:g} GiB)")
        if status == "unreadable":
            raise UnreadableError(value)
        raise _Failed(f"the reader failed ({value})")

    def _start(self) -> None:
        self._kill()
        ours, theirs = socket.socketpair()
        try:
            command, cwd = worker_command(str(theirs.fileno()), str(self.memory_bytes))
            self._process = subprocess.Popen(
                command,
                cwd=cwd,
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # parsers print nothing where a user would see it
                stderr=subprocess.DEVNULL,
            )
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        try:
            ready = self._conn.poll(START_TIMEOUT) and self._conn.recv() == "ready"
        except (EOFError, OSError):
            ready = False
        if not ready:
            code = self._process.poll()
            self._kill()
            raise _Failed(
                f"the reader process did not start (exit code {code})"
                if code is not None
                else f"the reader process did not start within {START_TIMEOUT:g} s"
            )

    def _kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None


class _Failed(Exception):
    """Reading ran out of time or memory, or the worker died."""


def worker_command(*args: str) -> tuple[list[str], str]:
    """The command that starts a worker with ``args`` (a descriptor and a memory limit), and the
    folder it starts in: see the module's docstring."""
    package = Path(os.path.abspath(__file__)).parent.parent  # this module is mcpower/chunking/worker.py
    here = os.path.realpath(os.getcwd())
    path = [p for p in sys.path if isinstance(p, str) and os.path.isabs(p) and os.path.realpath(p) != here]
    command = [sys.executable, "-I", "-c", _BOOTSTRAP, json.dumps(path), str(package.parent), *args]
    # Its own folder: nothing a parser opens by a relative name comes from the user's working folder.
    return command, str(package) if package.is_dir() else os.path.dirname(sys.executable) or os.sep


def _serve(conn: Connection, memory_bytes: int) -> None:
    """The worker: read (module, bytes) requests until None, answer (status, value)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the ingest, which ends the worker
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    except (ImportError, ValueError, OSError):  # Windows; or a lower hard limit already set
        pass
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # parsers log what they repair: the terminal is the ingest's
    conn.send("ready")
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        module, data = request
        try:
            answer: tuple[str, Any] = ("ok", parse_document(data, "", module))
        except UnreadableError as e:
            answer = ("unreadable", str(e))
        except MemoryError:
            answer = ("memory", "")
        except Exception as e:  # a parser bug on hostile input: this file is skipped, the worker lives
            answer = ("error", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        del data
        try:
            conn.send(answer)
        except MemoryError:
            conn.send(("memory", ""))


def main(argv: list[str]) -> None:
    """The worker's entry point (run by the bootstrap): ``argv`` is the descriptor and the memory limit."""
    _serve(Connection(int(argv[0])), int(argv[1]))
