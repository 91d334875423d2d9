"""Watching behind the MCP server: clients get the previous version until the new one is published,
then the new one without a restart; `serve --watch` starts the watcher over stdio and over HTTP.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import numpy as np
import pytest
from conftest import FakeEmbedder, join_warm_up
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ResourceListChangedNotification
from server_fixtures import StdioServer, subprocess_env, write_launcher
from watch_fixtures import MODIFIED, Clock, write_notes

from mcpower.ingestion import IngestOptions, ingest
from mcpower.layout import read_watch
from mcpower.manifest import MANIFEST_NAME, read_manifest
from mcpower.registry import Registry
from mcpower.server.app import create_server
from mcpower.watch import Watcher

# Deadlines tell a hang from an answer; nothing here measures speed.
DEADLINE = 60.0


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_notes(tmp_path / "notes", ("guide.md", "todo.txt"))


@pytest.fixture
def registry(source: Path, datasets_dir: Path) -> Iterator[Registry]:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    registry = Registry(datasets_dir, embedder_factory=lambda model: FakeEmbedder())
    yield registry
    join_warm_up()
    registry.close()


def published_at(datasets_dir: Path) -> str:
    """When the current version of 'notes' was published, as its manifest says."""
    return read_manifest(datasets_dir / "notes" / MANIFEST_NAME).updated_at.isoformat()


async def paths(client: Client, word: str) -> list[str]:
    result = await client.call_tool("knowledge_search", {"query": word, "dataset": "notes", "mode": "keyword"})
    assert not result.is_error and result.structured_content is not None
    return [r["path"] for r in result.structured_content["results"]]


async def listed(client: Client) -> dict[str, Any]:
    result = await client.call_tool("knowledge_list_datasets", {})
    assert result.structured_content is not None
    return next(d for d in result.structured_content["datasets"] if d["id"] == "notes")  # type: ignore[no-any-return]


@pytest.mark.anyio
async def test_clients_get_the_previous_version_until_the_new_one_is_published(
    registry: Registry, source: Path, datasets_dir: Path
) -> None:
    """A re-ingest held in the middle (in the worker's thread, as the watcher runs it): the server
    answers from the old version meanwhile, says the dataset is being indexed, and answers from the
    new one as soon as it is published, in the same server process."""
    entered, proceed = threading.Event(), threading.Event()

    class Held(FakeEmbedder):
        def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
            entered.set()
            assert proceed.wait(DEADLINE)
            return super().embed_documents(texts, progress)

    clock, events = Clock(), []
    watcher = Watcher(registry, clock=clock, on_event=events.append, embedder_factory=lambda info: Held())
    try:
        watcher.recheck(clock.t)
        watcher.run_due(clock.t)
        async with Client(create_server(registry)) as client:
            before = await listed(client)
            assert (before["watched"], before["watch_state"]) == (True, "watching")
            (source / "todo.txt").write_text("Tune the ocarina.\n")
            watcher.changed({(MODIFIED, str(source.resolve() / "todo.txt"))}, clock.t)
            clock.t += 5

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, watcher.run_due, clock.t)
                assert await anyio.to_thread.run_sync(entered.wait, DEADLINE)
                assert await paths(client, "harpsichord") == ["todo.txt"]  # mid-ingest: the old text
                assert await paths(client, "ocarina") == []
                assert (await listed(client))["watch_state"] == "indexing"
                proceed.set()

            assert [e.kind for e in events] == ["watching", "reindexed"]
            assert await paths(client, "ocarina") == ["todo.txt"]
            assert await paths(client, "harpsichord") == []
            after = await listed(client)
            # The listing tells the new version's time (whole seconds: it may equal the old one's).
            assert after["watch_state"] == "watching" and after["updated_at"] == published_at(datasets_dir)
            result = await client.call_tool("knowledge_search", {"query": "ocarina", "dataset": "notes"})
            assert result.structured_content is not None
            assert result.structured_content["results"][0]["stale"] is False
    finally:
        proceed.set()
        watcher.stop()


def test_serve_stdio_watch_reindexes_and_serves_the_new_version(
    source: Path, datasets_dir: Path, tmp_path: Path
) -> None:
    """The real thing: `mcpower serve --stdio` with MCPOWER_WATCH=1 (fake model) sees an edit through
    the file system and answers with it, without a restart. Waits on the server's log, with a deadline."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    launcher = write_launcher(tmp_path)
    argv = ["serve", "--stdio", "--datasets-dir", str(datasets_dir)]
    env = {**subprocess_env(), "MCPOWER_WATCH": "1", "MCPOWER_WATCH_DEBOUNCE": "0.05"}  # as a client's "env"
    server = StdioServer([sys.executable, str(launcher), *argv], env=env)
    try:
        server.initialize()
        startup = server.wait_log("server.startup")
        assert startup is not None and startup["watch"] is True
        server.wait_log("watch.watching")
        search = {"query": "ocarina", "dataset": "notes", "mode": "keyword"}
        assert server.call_tool("knowledge_search", search)["structuredContent"]["results"] == []
        # The watch may begin a moment after the dataset is claimed: edit until an edit is seen.
        for n in range(int(DEADLINE / 2)):
            (source / "todo.txt").write_text(f"Tune the ocarina {n}.\n")
            if server.wait_log("watch.reindexed", timeout=2.0, must=False):
                break
        # The client is told the documents changed (the capabilities claim listChanged).
        server.wait_notification("notifications/resources/list_changed", timeout=DEADLINE)
        results = server.call_tool("knowledge_search", search)["structuredContent"]["results"]
        assert [r["path"] for r in results] == ["todo.txt"]
        dataset = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"][0]
        assert (dataset["watched"], dataset["watch_state"]) == (True, "watching")
        server.close_stdin()  # the client goes away: the server exits, and its claim with it
        assert server.wait_exit(30) == 0
    finally:
        server.stop()


# ---------------------------------------------------------------- over Streamable HTTP


@asynccontextmanager
async def http_session(url: str, on_message: Any = None) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=httpx2.Timeout(30, read=60)) as h,
        Client(streamable_http_client(url, http_client=h), mode="legacy", message_handler=on_message) as c,
    ):
        yield c


def saw(server: HttpServer, event: str, timeout: float) -> bool:
    try:
        server.wait_event(event, timeout=timeout)
    except AssertionError:
        return False
    return True


def test_serve_http_watch_keeps_every_client_current(source: Path, datasets_dir: Path, tmp_path: Path) -> None:
    """One `serve --http --watch` process: two clients connected before an edit both get the new
    version after it, the dataset is listed as watched, and SIGTERM still exits 0."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    server = HttpServer(write_http_launcher(tmp_path), datasets_dir, "--watch", "--watch-debounce", "0.05")
    try:
        server.wait_event("watch.watching", timeout=DEADLINE)

        changed = anyio.Event()

        async def on_message(message: Any) -> None:
            if isinstance(message, ResourceListChangedNotification):
                changed.set()

        async def main() -> None:
            async with http_session(server.url, on_message) as first, http_session(server.url) as second:
                for c in (first, second):
                    assert await paths(c, "ocarina") == [] and await paths(c, "harpsichord") == ["todo.txt"]
                before = await listed(first)
                assert (before["watched"], before["watch_state"]) == (True, "watching")

                def edit_until_seen() -> None:
                    for n in range(int(DEADLINE / 2)):  # the watch may begin a moment after the claim
                        (source / "todo.txt").write_text(f"Tune the ocarina {n}.\n")
                        if saw(server, "watch.reindexed", 2.0):
                            return
                    raise AssertionError(f"no re-index; stderr:\n{server.stderr()}")

                await anyio.to_thread.run_sync(edit_until_seen)
                with anyio.fail_after(DEADLINE):  # the client is told the documents changed
                    await changed.wait()
                for c in (first, second):
                    assert await paths(c, "ocarina") == ["todo.txt"] and await paths(c, "harpsichord") == []
                assert (await listed(second))["updated_at"] == published_at(datasets_dir)

        anyio.run(main)
        server.proc.send_signal(signal.SIGTERM)
        assert server.wait_exit(30) == 0
        assert read_watch(datasets_dir / "notes") is None  # the claim went with the process
    finally:
        server.stop()


def test_serve_http_watch_that_cannot_listen_watches_nothing(source: Path, datasets_dir: Path, tmp_path: Path) -> None:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    (source / "todo.txt").write_text("Tune the ocarina.\n")  # a change a watcher would catch up with
    manifest = (datasets_dir / "notes" / "manifest.json").read_bytes()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = [sys.executable, str(write_http_launcher(tmp_path)), "serve", "--http", "--watch"]
        argv += ["--port", str(taken.getsockname()[1]), "--datasets-dir", str(datasets_dir)]
        done = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), timeout=120, check=False)
    assert done.returncode == 1 and "cannot listen on 127.0.0.1 port" in done.stderr
    assert '"watch.' not in done.stderr
    assert (datasets_dir / "notes" / "manifest.json").read_bytes() == manifest


def test_watch_settings_come_from_flags_or_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from mcpower.config import Settings
    from mcpower.errors import McpowerError

    assert (Settings.load().watch, Settings.load().watch_debounce) == (False, 1.0)
    monkeypatch.setenv("MCPOWER_WATCH", "true")
    monkeypatch.setenv("MCPOWER_WATCH_DEBOUNCE", "0.3")
    assert (Settings.load().watch, Settings.load().watch_debounce) == (True, 0.3)
    assert Settings.load(watch_debounce=2.0).watch_debounce == 2.0  # the flag wins
    monkeypatch.setenv("MCPOWER_WATCH_DEBOUNCE", "0")
    with pytest.raises(McpowerError, match="MCPOWER_WATCH_DEBOUNCE"):
        Settings.load()
