"""Reading documents in a worker process, with a time limit and a memory limit.

Parsers of binary or deeply nested input (PDF, Word, HTML, reST: :data:`mcpower.chunking.ISOLATED`)
run on untrusted files in C or in pure Python, and no limit inside those libraries covers every
hostile file: a PDF stream can inflate to gigabytes, docutils holds the whole tree while it
recurses. The other parsers are linear, but not small: markdown-it keeps an object for every block
token until it is done, and the sections a document becomes keep one for every heading and block,
so a megabyte of one-line list items or empty headings took 450 to 900 times its size — under `serve
--watch`, anyone who can write into a watched folder could have the server killed for its memory.
So the risky formats, and every file over :data:`IN_PROCESS_MAX_BYTES`, are read *and chunked* in
one long-lived worker process (started on the first such file, reused for the next ones) whose
address space is capped (Linux; RLIMIT_AS is not enforced on macOS) and whose every file has a
deadline in processor time (RLIMIT_CPU: a busy machine slows a file down, it does not fail it);
what comes back is the chunks and the stored text, a small multiple of the file. A file that runs
out of time or memory, or kills the worker, is skipped with the reason (a reST file is read as
plain text instead); the worker is restarted for the next file, and nothing else is lost.
Smaller files of the other formats are read in this process, where the threshold bounds what their
parse takes (the worst input measured, ~900 times its size: under 30 MB).

The worker is a new interpreter talking over a socket pair: not a fork (the ingest process runs
the model's threads), and not multiprocessing's spawn, which would import the caller's main script
again in the worker. It runs only this process's own code, whatever folder the ingest was started
in: the interpreter is isolated (``-I``: neither the working folder, PYTHONPATH, the user's site
folder nor any PYTHON* variable shapes its path), it starts in mcpower's own folder, and a small
bootstrap gives it this process's module path (less the working folder) and loads the very
``mcpower`` package this process runs (mcpower/isolated.py). ``python -m`` would have put the
working folder first on the path, and a ``socket.py`` there would have run in the worker.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import socket
import subprocess
import traceback
import warnings
from multiprocessing.connection import Connection
from typing import Any

from mcpower.chunking import (
    FORMATS,
    ISOLATED,
    Document,
    Parsed,
    TokenCounter,
    UnreadableError,
    build_document,
    format_of,
    parse_document,
)
from mcpower.isolated import python_command

logger = logging.getLogger(__name__)

# Each file's deadline, in seconds of processor time (RLIMIT_CPU; on a busy machine a file may take
# many times that in wall time, and is not skipped for it): the slowest real documents measured (a
# 4,000-line reST reference page, a 50-page PDF) take about a second; ...
DEFAULT_TIMEOUT = 60.0
# ... plus this much a megabyte for the formats outside ISOLATED, whose parsers are linear: they
# are there for their size, and had no deadline before. A 10 MB Markdown file of real pages takes
# 16 s of processor time, a megabyte of empty headings 26 s (its 10 MB: 260 s, under 660).
TIMEOUT_PER_MB = 60.0
# Where the processor time is counted, a file is also given this many times its deadline in wall
# time (at least WALL_MIN), for a worker stuck without running (a 2-core machine at load 16 gives a
# busy process an eighth of a core); where it is not (Windows), its deadline is wall time.
WALL_FACTOR = 10
WALL_MIN = 120.0
# Files up to this size of a format outside ISOLATED are read in this process. Their parsers are
# linear, at worst ~900 times the file (Markdown of empty headings, "#" on each line: an object per
# token and per section), so at most ~30 MB here; bigger ones are read and chunked in the worker,
# whose answer is a small multiple of the file. Real pages are smaller (the FastAPI docs: median
# 3 KB, 154 of 155 under this), so an ingest pays for the worker only for its few big files (each
# file read there costs a few milliseconds more: docs/robustness.md).
IN_PROCESS_MAX_BYTES = 32 * 1024
# The worker's address space: 50 MB of HTML peaked at ~650 MB; a 2,000-level reST file took
# 1.8 GB before failing.
DEFAULT_MEMORY_BYTES = 2 * 1024**3
# How long the worker may take to start (an interpreter and mcpower's chunking, on a busy machine);
# a file's deadline starts once it is ready.
START_TIMEOUT = 120.0
# Read as plain text when their parser fails this way (their text is still good).
_TEXT_FALLBACK = frozenset({FORMATS[".rst"]})


class Reader:
    """Reads documents: formats in ISOLATED in the worker process, the others in this one.

    A context manager: the worker (if one was started) ends with it.
    """

    def __init__(self, timeout: float = DEFAULT_TIMEOUT, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> None:
        self.timeout = timeout
        self.memory_bytes = memory_bytes
        self._process: subprocess.Popen[bytes] | None = None
        self._conn: Connection | None = None
        self._cpu_limited = False  # whether the worker counts each file's processor time

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def worker_pid(self) -> int | None:
        """The worker process's id while one runs (benchmarks read its peak memory)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def read(self, data: bytes, file_type: str) -> Parsed:
        """The parsed document (its ``text`` set); formats in ISOLATED are parsed in the worker.

        Raises:
            UnreadableError: the file cannot be read, or ran out of time or memory.
        """
        module = format_of(data, file_type)
        if module not in ISOLATED:
            return parse_document(data, file_type, module)
        try:
            parsed: Parsed = self._in_worker(module, data, None)
            return parsed
        except _Failed as e:
            if module in _TEXT_FALLBACK:
                return _as_plain_text(data, str(e))
            raise UnreadableError(str(e)) from None

    def document(
        self, data: bytes, file_type: str, file_name: str, count_tokens: TokenCounter, chunk_tokens: int, overlap: int
    ) -> Document:
        """The document read and cut into chunks (``chunking.build_document``): in the worker for
        the formats in ISOLATED and for any file over IN_PROCESS_MAX_BYTES, which must then be
        given a ``count_tokens`` that pickles (``Embedder.token_counter``); in this process otherwise.

        Raises:
            UnreadableError: the file cannot be read, or ran out of time or memory.
            ChunkingError: the chunker failed on it (a bug), in the worker.
        """
        module = format_of(data, file_type)
        if module not in ISOLATED and len(data) <= IN_PROCESS_MAX_BYTES:
            return build_document(
                parse_document(data, file_type, module), file_name, count_tokens, chunk_tokens, overlap
            )
        try:
            task = ("document", file_name, count_tokens, chunk_tokens, overlap)
            document: Document = self._in_worker(module, data, task)
            return document
        except _Failed as e:
            if module in _TEXT_FALLBACK:
                return build_document(_as_plain_text(data, str(e)), file_name, count_tokens, chunk_tokens, overlap)
            raise UnreadableError(str(e)) from None

    def sample(self, data: bytes, file_type: str, chars: int) -> str:
        """The first ``chars`` characters of the document's text, headings left out (a language
        sample: model_choice.py), read where :meth:`document` would read it, so a big file's
        structure costs this process nothing here either.

        Raises:
            UnreadableError: the file cannot be read, or ran out of time or memory.
        """
        module = format_of(data, file_type)
        if module not in ISOLATED and len(data) <= IN_PROCESS_MAX_BYTES:
            return _sample_text(parse_document(data, file_type, module), chars)
        try:
            text: str = self._in_worker(module, data, ("sample", chars))
            return text
        except _Failed as e:
            if module in _TEXT_FALLBACK:
                return _sample_text(_as_plain_text(data, str(e)), chars)
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

    def _in_worker(self, module: str, data: bytes, task: tuple[Any, ...] | None) -> Any:
        """What the worker answers for the file: its Parsed; for ``("document", file name, token
        counter, chunk size, overlap)`` its Document; for ``("sample", chars)`` its sample text."""
        if self._process is None or self._process.poll() is not None:
            self._start()
        assert self._conn is not None
        seconds = max(1, math.ceil(self.timeout + (0 if module in ISOLATED else TIMEOUT_PER_MB * len(data) / 2**20)))
        limit = "the limit per file" if module in ISOLATED else "the limit for its size"
        late = _Failed(f"took longer than {seconds:,} s to read ({limit})")
        wall = max(WALL_FACTOR * seconds, WALL_MIN) if self._cpu_limited else seconds
        try:
            self._conn.send((module, data, task, seconds))
            if not self._conn.poll(wall):
                self._kill()
                raise late
            status, value = self._conn.recv()
        except (EOFError, OSError) as e:
            code = None
            if self._process is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    code = self._process.wait(timeout=5)
            self._kill()
            if code == -getattr(signal, "SIGXCPU", 0):  # the kernel ended it at its processor-time limit
                raise late from None
            raise _Failed(f"the reader process died reading it (exit code {code})") from e
        if status == "ok":
            return value
        if status == "chunking":
            raise ChunkingError(*value)
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
            hello = self._conn.recv() if self._conn.poll(START_TIMEOUT) else None
            ready = isinstance(hello, tuple) and hello[0] == "ready"
            self._cpu_limited = ready and bool(hello[1])  # type: ignore[index]
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


class ChunkingError(Exception):
    """The chunker failed on a file in the worker (a bug): ``kind`` is the exception's type name,
    and the message the worker's traceback."""

    def __init__(self, kind: str, trace: str) -> None:
        super().__init__(f"{kind} in the reader process:\n{trace}")
        self.kind = kind


def _as_plain_text(data: bytes, why: str) -> Parsed:
    """A file whose parser failed (reST), read as plain text, with a note saying why."""
    parsed = parse_document(data, ".txt", FORMATS[".txt"])
    return Parsed(parsed.sections, parsed.title, parsed.text, notes=(f"read as plain text: {why}",))


def worker_command(*args: str) -> tuple[list[str], str]:
    """The command that starts a worker with ``args`` (a descriptor and a memory limit), and the
    folder it starts in: see the module's docstring."""
    return python_command("mcpower.chunking.worker", *args)


def _serve(conn: Connection, memory_bytes: int) -> None:
    """The worker: read (module, bytes, task, seconds) requests until None, answer (status, value)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C stops the ingest, which ends the worker
    try:
        import resource
    except ImportError:  # Windows
        pass
    else:
        # No core file when a limit ends it (it runs in mcpower's folder); each limit on its own,
        # since one may be refused (RLIMIT_AS on macOS, or a lower hard limit already set).
        for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_AS, memory_bytes)):
            with contextlib.suppress(ValueError, OSError):
                resource.setrlimit(limit, (value, value))
    warnings.simplefilter("ignore")
    logging.disable(logging.CRITICAL)  # parsers log what they repair: the terminal is the ingest's
    conn.send(("ready", _limit_cpu(0)))
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return
        if request is None:
            return
        module, data, task, seconds = request
        _limit_cpu(seconds)
        try:
            answer: tuple[str, Any] = ("ok", parse_document(data, "", module))
        except UnreadableError as e:
            answer = ("unreadable", str(e))
        except MemoryError:
            answer = ("memory", "")
        except Exception as e:  # a parser bug on hostile input: this file is skipped, the worker lives
            answer = ("error", f"{type(e).__name__}: {' '.join(str(e).split())[:200]}")
        del data
        if task is not None and answer[0] == "ok":
            answer = (
                _chunked(answer[1], *task[1:]) if task[0] == "document" else ("ok", _sample_text(answer[1], *task[1:]))
            )
        try:
            conn.send(answer)
        except MemoryError:
            conn.send(("memory", ""))


def _limit_cpu(seconds: int) -> bool:
    """Have the kernel end this process (SIGXCPU) once it has run ``seconds`` more seconds of
    processor time (RLIMIT_CPU counts every thread); no limit for 0. Whether it could."""
    try:
        import resource

        used = resource.getrusage(resource.RUSAGE_SELF)
        hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        soft = math.ceil(used.ru_utime + used.ru_stime) + seconds if seconds else hard
        if hard != resource.RLIM_INFINITY:
            soft = min(soft, hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
    except (ImportError, ValueError, OSError):  # Windows
        return False
    return True


def _sample_text(parsed: Parsed, chars: int) -> str:
    """The first ``chars`` characters of the text of ``parsed``'s blocks, headings left out."""
    return "\n".join(b.text for s in parsed.sections for b in s.blocks if not b.heading)[:chars]


def _chunked(parsed: Parsed, file_name: str, count_tokens: TokenCounter, chunk_tokens: int, overlap: int) -> Any:
    """The worker's answer for a document to chunk: ("ok", Document), or why not."""
    try:
        return ("ok", build_document(parsed, file_name, count_tokens, chunk_tokens, overlap))
    except MemoryError:
        return ("memory", "")
    except Exception as e:  # a chunker bug: said as one, with where it happened (assembly logs it)
        return ("chunking", (type(e).__name__, "".join(traceback.format_exception(e))[-4000:]))


def main(argv: list[str]) -> None:
    """The worker's entry point (run by the bootstrap): ``argv`` is the descriptor and the memory limit."""
    _serve(Connection(int(argv[0])), int(argv[1]))
