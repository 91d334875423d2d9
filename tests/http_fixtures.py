"""`mcpower serve --http` as a subprocess on an ephemeral port, and a search that blocks on demand.

The launcher runs the CLI with the fake embedder (as server_fixtures.write_launcher does); a query
holding ``blockme-KEY`` logs ``test.search_blocked`` and then waits, inside its worker thread,
until the file ``KEY`` appears in ``$MCPOWER_TEST_RELEASE_DIR``: a test can hold a call in flight
for as long as it needs, and knows when it started, without timing anything.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from server_fixtures import REPO_ROOT, TESTS_DIR, subprocess_env

TOKEN = "test-token-0123456789abcdef"

HTTP_LAUNCHER = """\
import logging, os, re, sys, threading

sys.path[:0] = {paths!r}
from conftest import FakeEmbedder

from mcpower import embedding

_embed_query = FakeEmbedder.embed_query


def embed_query(self, text):
    match = re.search(r"blockme-(\\w+)", text)
    if match:
        key = match.group(1)
        logging.getLogger("mcpower").warning("test.search_blocked", extra={{"event": "test.search_blocked", "key": key}})
        release = os.path.join(os.environ["MCPOWER_TEST_RELEASE_DIR"], key)
        while not os.path.exists(release):
            threading.Event().wait(0.005)
    return _embed_query(self, text)


FakeEmbedder.embed_query = embed_query
embedding.load_embedder = lambda model=None, backend=None, cache_dir=None: FakeEmbedder()
sys.argv = ["mcpower", *sys.argv[1:]]
from mcpower.cli import main

main()
"""


def write_http_launcher(folder: Path) -> Path:
    path = folder / "fake_mcpower_http.py"
    path.write_text(HTTP_LAUNCHER.format(paths=[str(TESTS_DIR), str(REPO_ROOT)]), encoding="utf-8")
    return path


class HttpServer:
    """`mcpower serve --http --port 0` in a subprocess; its JSON log records arrive in a queue.

    Every wait has a deadline, so no test can hang; :meth:`stop` kills and reaps it.
    """

    def __init__(self, launcher: Path, datasets: Path, *extra: str, token: str | None = TOKEN) -> None:
        self.release_dir = launcher.parent / "release"
        self.release_dir.mkdir(exist_ok=True)
        env = subprocess_env()
        env["MCPOWER_TEST_RELEASE_DIR"] = str(self.release_dir)
        if token is not None:
            env["MCPOWER_TOKEN"] = token
        args = [sys.executable, str(launcher), "serve", "--http", "--port", "0", "--datasets-dir", str(datasets)]
        self.proc = subprocess.Popen(
            [*args, *extra], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
        )
        self.records: list[dict[str, Any]] = []
        self.stderr_lines: list[bytes] = []
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._seen: list[dict[str, Any]] = []  # records taken from the queue, for later waits
        self._pumper = threading.Thread(target=self._pump, daemon=True)
        self._pumper.start()
        listening = self.wait_event("server.listening", timeout=60)
        self.port: int = listening["port"]
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp"

    def _pump(self) -> None:
        assert self.proc.stderr is not None
        for line in iter(self.proc.stderr.readline, b""):
            self.stderr_lines.append(line)
            try:
                record = json.loads(line)
            except ValueError:
                record = {"event": "non-json", "line": line.decode(errors="replace")}
            self.records.append(record)
            self._queue.put(record)
        self._queue.put(None)

    def wait_event(self, name: str, timeout: float = 30.0, **fields: Any) -> dict[str, Any]:
        """The first log record with ``event`` ``name`` (and these fields), waiting for it if need be."""

        def matches(r: dict[str, Any]) -> bool:
            return r.get("event") == name and all(r.get(k) == v for k, v in fields.items())

        for record in self._seen:
            if matches(record):
                return record
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {name} event within {timeout} s; stderr:\n{self.stderr()}")
            try:
                record = self._queue.get(timeout=left)
            except queue.Empty:
                continue
            if record is None:
                raise AssertionError(f"the server exited before a {name} event; stderr:\n{self.stderr()}")
            self._seen.append(record)
            if matches(record):
                return record

    def release(self, key: str) -> None:
        """Let the blocked search ``blockme-KEY`` go on."""
        (self.release_dir / key).touch()

    def stderr(self) -> str:
        return b"".join(self.stderr_lines).decode(errors="replace")

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self._pumper.join(timeout=30)  # stderr reaches EOF once the process is gone
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
