"""Watching behind the MCP server: clients get the previous version until the new one is published,
then the new one without a restart; `serve --watch` starts the watcher (over stdio here).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from conftest import FakeEmbedder, write_files
from mcp import Client
from server_fixtures import StdioServer, subprocess_env, write_launcher

from mcpower.ingestion import IngestOptions, ingest
from mcpower.registry import Registry
from mcpower.server.app import create_server
from mcpower.watch import Watcher

ADDED, MODIFIED = 1, 2
# Deadlines tell a hang from an answer; nothing here measures speed.
DEADLINE = 60.0


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def source(tmp_path: Path) -> Path:
    return write_files(
        tmp_path / "notes",
        {"guide.md": "# Guide\n\nThe zephyrine daemon starts on boot.\n", "todo.txt": "Buy a harpsichord.\n"},
    )


@pytest.fixture
def registry(source: Path, datasets_dir: Path) -> Iterator[Registry]:
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    registry = Registry(datasets_dir, embedder_factory=lambda model: FakeEmbedder())
    yield registry
    for thread in threading.enumerate():
        if thread.name == "mcpower-warm-up":
            thread.join(timeout=10)
    registry.close()


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
    registry: Registry, source: Path
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
            assert after["watch_state"] == "watching" and after["updated_at"] > before["updated_at"]
            result = await client.call_tool("knowledge_search", {"query": "ocarina", "dataset": "notes"})
            assert result.structured_content is not None
            assert result.structured_content["results"][0]["stale"] is False
    finally:
        proceed.set()
        watcher.stop()


def test_serve_stdio_watch_reindexes_and_serves_the_new_version(
    source: Path, datasets_dir: Path, tmp_path: Path
) -> None:
    """The real thing: `mcpower serve --stdio --watch` (fake model) sees an edit through the file
    system and answers with it, without a restart. Waits on the server's log, with a deadline."""
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    launcher = write_launcher(tmp_path)
    argv = ["serve", "--stdio", "--watch", "--watch-debounce", "0.05", "--datasets-dir", str(datasets_dir)]
    server = StdioServer([sys.executable, str(launcher), *argv], env=subprocess_env())
    try:
        server.initialize()
        server.wait_log("watch.watching")
        search = {"query": "ocarina", "dataset": "notes", "mode": "keyword"}
        assert server.call_tool("knowledge_search", search)["structuredContent"]["results"] == []
        # The watch may begin a moment after the dataset is claimed: edit until an edit is seen.
        for n in range(int(DEADLINE / 2)):
            (source / "todo.txt").write_text(f"Tune the ocarina {n}.\n")
            if server.wait_log("watch.reindexed", timeout=2.0, must=False):
                break
        results = server.call_tool("knowledge_search", search)["structuredContent"]["results"]
        assert [r["path"] for r in results] == ["todo.txt"]
        dataset = server.call_tool("knowledge_list_datasets", {})["structuredContent"]["datasets"][0]
        assert (dataset["watched"], dataset["watch_state"]) == (True, "watching")
        server.close_stdin()  # the client goes away: the server exits, and its claim with it
        assert server.wait_exit(30) == 0
    finally:
        server.stop()
