"""Corpora, dataset builders and a subprocess launcher shared by the MCP server tests.

Two small datasets: ``handbook`` (a toolkit manual, chunked small so one section spans several
chunks) and ``recipes`` (a cookbook). The word "toolkit" appears in both, so an all-datasets search
for it merges results from each.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import FakeEmbedder, join_warm_up, write_files

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

# One long paragraph per line, so the small chunk size splits the section into several chunks.
_SETUP_LINES = "\n".join(
    f"Step {n}: configure the zephyrine daemon option number {n} and restart the service afterwards."
    for n in range(1, 13)
)

HANDBOOK = {
    "guide/install.md": (
        "# Installation\n\n"
        "How to install the widget toolkit on your machine.\n\n"
        "## Linux\n\n"
        "Use the package manager to install the zephyrine package.\n\n"
        "## Setup\n\n"
        f"{_SETUP_LINES}\n\n"
        "## Windows\n\n"
        "Run the installer and reboot the machine afterwards.\n"
    ),
    "guide/usage.md": (
        "# Usage notes\n\nStart the toolkit with a configuration file.\n\n"
        "## Flags\n\nThe verbose flag prints quokka diagnostics; quokka output is colourful.\n"
    ),
    "api/reference.md": (
        "# API reference\n\n## connect()\n\nOpens a connection to the marmalade server and returns a marmalade session.\n"
    ),
    "notes.txt": "Meeting notes from the planning session.\n\nWe agreed to ship the harpsichord feature next month.\n",
}

RECIPES = {
    "bread.md": (
        "# Sourdough bread\n\n## Starter\n\nFeed the rye starter twice a day with flour and water.\n\n"
        "## Baking\n\nBake the loaf in a hot dutch oven; a kitchen toolkit helps with scoring.\n"
    ),
    "soup/pumpkin.md": "# Pumpkin soup\n\nRoast the pumpkin with cardamom, then blend it with stock.\n",
}

HANDBOOK_CHUNKING = {"chunk_tokens": 40, "overlap": 8}


def build_datasets(root: Path) -> Path:
    """Write both corpora under ``root`` and ingest them into ``root/datasets``; returns the datasets dir."""
    datasets = root / "datasets"
    write_files(root / "src" / "handbook", HANDBOOK)
    write_files(root / "src" / "recipes", RECIPES)
    ingest_handbook(root)
    ingest(
        root / "src" / "recipes",
        datasets,
        IngestOptions(dataset_id="recipes", name="Recipes", description="A small cookbook"),
        embedder=FakeEmbedder(),
    )
    return datasets


def copy_datasets(template: Path, root: Path) -> Path:
    """Copy a ``build_datasets`` tree (sources and datasets) into ``root``: much faster than ingesting again."""
    for part in ("src", "datasets"):
        shutil.copytree(template / part, root / part)
    return root / "datasets"


# Fixtures (a plugin of conftest.py): a module that needs other datasets defines its own of these names.


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both datasets, ingested once per session."""
    root = tmp_path_factory.mktemp("template")
    build_datasets(root)
    return root


@pytest.fixture
def datasets(template: Path, tmp_path: Path) -> Path:
    """A private copy of the datasets (tests corrupt and re-ingest them), with their sources in tmp_path/src."""
    return copy_datasets(template, tmp_path)


@pytest.fixture
def registry(datasets: Path) -> Iterator[Registry]:
    """A registry over ``datasets`` searching with the fake; closed after the servers' warm-up threads end."""
    reg = Registry(datasets, embedder_factory=lambda model: FakeEmbedder())
    yield reg
    join_warm_up()
    reg.close()


def ingest_handbook(root: Path) -> None:
    options = IngestOptions(  # replace: tests re-ingest it from a copy of the template's source folder
        dataset_id="handbook",
        name="Handbook",
        description="The widget toolkit manual",
        replace=True,
        **HANDBOOK_CHUNKING,
    )
    ingest(root / "src" / "handbook", root / "datasets", options, embedder=FakeEmbedder())


def add_broken_dataset(datasets: Path, name: str = "broken") -> None:
    """A third dataset folder whose manifest.json is not valid JSON."""
    (datasets / name).mkdir(parents=True, exist_ok=True)
    (datasets / name / "manifest.json").write_text('{"id": "broken", "name": ', encoding="utf-8")


def corrupt_index(datasets: Path, dataset_id: str) -> Path:
    """Flip bytes in the dataset's FAISS file so its checksum no longer matches the manifest."""
    manifest = json.loads((datasets / dataset_id / "manifest.json").read_text(encoding="utf-8"))
    index = datasets / dataset_id / manifest["index"]
    data = bytearray(index.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 16):
        data[i] ^= 0xFF
    index.write_bytes(bytes(data))
    return index


LAUNCHER = """\
import signal
import sys

# Ctrl-C as in a terminal, whatever started the tests: a shell's background job (`pytest &`,
# nohup) ignores SIGINT, the children inherit that, and a test's SIGINT would never arrive.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = {paths!r}
from conftest import FakeEmbedder

from mcpower import embedding

embedding.load_embedder = lambda model=None, backend=None, cache_dir=None: FakeEmbedder()
sys.argv = ["mcpower", *sys.argv[1:]]
from mcpower.cli import main

main()
"""


def write_launcher(folder: Path) -> Path:
    """A script that runs `mcpower` with the fake embedder patched in (a subprocess cannot be monkeypatched)."""
    path = folder / "fake_mcpower.py"
    path.write_text(LAUNCHER.format(paths=[str(TESTS_DIR), str(REPO_ROOT)]), encoding="utf-8")
    return path


def subprocess_env() -> dict[str, str]:
    """The test's environment (already isolated by conftest), unbuffered, without PYTHONPATH surprises."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MCPOWER_")}
    env["PYTHONUNBUFFERED"] = "1"
    env["MCPOWER_ALLOWED_MODELS"] = "fake-hash-embedder"  # the launcher's fake stands in for the model
    env.pop("PYTHONPATH", None)
    return env


CLIENTS_DIR = TESTS_DIR / "clients"  # the Node.js MCP clients (TypeScript SDK, Inspector)


@contextlib.contextmanager
def folder_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` (an existing file) across processes, where the platform has flock."""
    try:
        import fcntl
    except ImportError:  # Windows: tests run in one process there
        yield
        return
    with open(path, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def npm_install(folder: Path, timeout: float = 300) -> None:
    """``npm install`` in ``folder``; skips the test without node/npm or a reachable registry.

    Offline it fails fast instead of retrying for minutes; with node_modules current it needs no network.
    """
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for the Node.js MCP client tests")
    args = [npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--fetch-retries=1", "--fetch-timeout=20000"]
    try:
        # One install at a time per folder: pytest-xdist's workers share tests/clients/node_modules.
        with folder_lock(folder / "package.json"):
            done = subprocess.run(args, cwd=folder, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        pytest.skip("npm install timed out (offline?)")
    if done.returncode != 0:
        pytest.skip(f"npm install failed (offline?): {done.stderr.strip()[-500:]}")


def run_node(script: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> Any:
    """Run ``tests/clients/<script>`` with node; the one JSON summary it prints (it must exit 0)."""
    done = subprocess.run(
        ["node", str(CLIENTS_DIR / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else subprocess_env(),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


# ---------------------------------------------------------------- a stdlib JSON-lines MCP client

PROTOCOL_VERSION = "2025-11-25"


def initialize_request(request_id: int) -> dict[str, Any]:
    """The ``initialize`` request a test client sends first."""
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mcpower-tests", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": request_id, "method": "initialize", "params": params}


class StdioServer:
    """A server subprocess driven over pipes; every read has a deadline, so no test can hang.

    Reader threads move stdout and stderr lines into queues; ``stdout_lines`` and ``stderr_lines``
    keep everything seen, for checks after the process has exited.
    """

    def __init__(self, args: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
        self.proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else subprocess_env(),
            cwd=cwd,
        )
        self.stdout_lines: list[bytes] = []
        self.stderr_lines: list[bytes] = []
        self._out: queue.Queue[bytes | None] = queue.Queue()
        self._err: queue.Queue[bytes | None] = queue.Queue()  # for wait_log
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self.stdout_lines, self._out), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr_lines, self._err), daemon=True),
        ]
        for t in self._readers:
            t.start()
        self._next_id = 0
        self.messages: dict[Any, dict[str, Any]] = {}  # responses by id (the last one, for a repeated id)
        self.received: list[dict[str, Any]] = []  # every message read from stdout, in order

    @staticmethod
    def _pump(stream: Any, keep: list[bytes], q: queue.Queue[bytes | None] | None) -> None:
        for line in iter(stream.readline, b""):
            keep.append(line)
            if q is not None:
                q.put(line)
        if q is not None:
            q.put(None)

    # -- writing

    def send_raw(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method: str, params: dict[str, Any] | None = None) -> int:
        self._next_id += 1
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return self._next_id

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    # -- reading

    # Deadlines tell a hang from an answer, and do not measure speed: generous, so that a loaded
    # machine (CI, or the other sessions of a developer) cannot fail a test by being slow.
    def wait_for(self, request_id: Any, timeout: float = 60.0) -> dict[str, Any]:
        """The response to ``request_id``; fails after ``timeout`` seconds or if stdout closes first."""
        deadline = time.monotonic() + timeout
        while request_id not in self.messages:
            self._read_one(deadline, timeout, f"response to id {request_id!r}")
        return self.messages[request_id]

    def wait_notification(self, method: str, timeout: float = 60.0) -> dict[str, Any]:
        """The first notification ``method`` the server sent (waiting for it, up to ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while True:
            for msg in self.received:
                if msg.get("method") == method and "id" not in msg:
                    return msg
            self._read_one(deadline, timeout, method)

    def _read_one(self, deadline: float, timeout: float, awaited: str) -> None:
        """The next message from stdout, kept in ``received`` (and ``messages`` if it has an id);
        fails at ``deadline`` or if stdout closes first, naming what was ``awaited``."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no {awaited} within {timeout} s; stderr:\n{self.stderr()}")
            try:
                line = self._out.get(timeout=left)
            except queue.Empty:
                continue
            if line is None:
                raise AssertionError(f"stdout closed before {awaited}; stderr:\n{self.stderr()}")
            msg = json.loads(line)
            self.received.append(msg)
            if "id" in msg:
                self.messages[msg["id"]] = msg
            return

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """A request that must succeed; returns its ``result``."""
        response = self.wait_for(self.request(method, params), timeout)
        assert "result" in response, response
        return response["result"]  # type: ignore[no-any-return]

    def initialize(self, timeout: float = 120.0) -> dict[str, Any]:
        result = self.call("initialize", initialize_request(0)["params"], timeout=timeout)
        self.notify("notifications/initialized")
        return result

    def call_tool(self, name: str, arguments: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        return self.call("tools/call", {"name": name, "arguments": arguments}, timeout)

    def wait_log(self, event: str, timeout: float = 60.0, must: bool = True) -> dict[str, Any] | None:
        """The next log record (a JSON line on stderr) whose ``event`` is ``event``; fails after
        ``timeout`` seconds or once stderr closes (or returns None then, unless ``must``)."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._err.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                self._err.put(None)  # closed for every later wait too
                break
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == event:
                return record
        if must:
            raise AssertionError(f"no {event} logged within {timeout} s; stderr:\n{self.stderr()}")
        return None

    # -- ending

    def wait_exit(self, timeout: float) -> int:
        """The exit code; fails if the process is still running after ``timeout`` seconds."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"server still running {timeout} s later; stderr:\n{self.stderr()}") from None

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        if not self.proc.stdin.closed:
            self.proc.stdin.close()

    def stop(self) -> None:
        """Kill the process if it still runs, and release the pipes and reader threads."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        with contextlib.suppress(BrokenPipeError):
            self.close_stdin()
        for t in self._readers:
            t.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    def stderr(self) -> str:
        return b"".join(self.stderr_lines).decode("utf-8", "replace")

    def log_records(self) -> list[dict[str, Any]]:
        """Every stderr line parsed as JSON (fails on a line that is not a JSON object)."""
        records = []
        for line in self.stderr_lines:
            record = json.loads(line)
            assert isinstance(record, dict), line
            records.append(record)
        return records
