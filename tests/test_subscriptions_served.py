"""Per-document subscriptions end to end: a real `mcpower serve --watch` (fake model), a client that
subscribes to a document, an edit through the file system, and ``notifications/resources/updated``
for that document only — over stdio, and over HTTP per session and within each token's datasets.

Nothing here waits by time: each wait is for a message or a log line, with a deadline that tells a
hang from an answer.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import FakeEmbedder, write_files
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types import ResourceListChangedNotification, ResourceUpdatedNotification
from server_fixtures import StdioServer, subprocess_env, write_launcher
from test_token_traps import token_add
from watch_fixtures import write_notes

from mcpower.ingestion import IngestOptions, ingest
from mcpower.server.auth.tokens import read_tokens, write_tokens

pytestmark = pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")

DEADLINE = 60.0
TODO = "mcpower://notes/todo.txt"
GUIDE = "mcpower://notes/guide.md"
SECRET = "mcpower://secret/plans.md"


@pytest.fixture
def source(tmp_path: Path, datasets_dir: Path) -> Path:
    notes = write_notes(tmp_path / "notes", ("guide.md", "todo.txt"))
    ingest(notes, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    return notes


def updated(server: StdioServer) -> list[str]:
    return [m["params"]["uri"] for m in server.received if m.get("method") == "notifications/resources/updated"]


def read_until(server: StdioServer, done: Any, awaited: str) -> None:
    """Reads the server's messages until ``done()``; fails after DEADLINE."""
    end = time.monotonic() + DEADLINE
    while not done():
        server._read_one(end, DEADLINE, awaited)


def edit_until_reindexed(server: StdioServer, files: dict[Path, str]) -> None:
    """Write ``files`` (``{n}`` numbered) until the watcher re-indexes: its watch may begin a moment
    after the dataset is claimed, so one edit can go unseen."""
    for n in range(int(DEADLINE / 2)):
        for path, text in files.items():
            path.write_text(text.format(n=n))
        if server.wait_log("watch.reindexed", timeout=2.0, must=False):
            return
    raise AssertionError(f"no re-index; stderr:\n{server.stderr()}")


def test_serve_stdio_watch_tells_a_subscriber_its_document_changed(
    source: Path, datasets_dir: Path, tmp_path: Path
) -> None:
    argv = ["serve", "--stdio", "--watch", "--datasets-dir", str(datasets_dir)]
    env = {**subprocess_env(), "MCPOWER_WATCH_DEBOUNCE": "0.05"}
    server = StdioServer([sys.executable, str(write_launcher(tmp_path)), *argv], env=env)
    try:
        resources = server.initialize()["capabilities"]["resources"]
        assert resources == {"subscribe": True, "listChanged": True}
        server.wait_log("watch.watching")
        for uri in (TODO, GUIDE):
            assert server.call("resources/subscribe", {"uri": uri}) == {}
        assert server.call("resources/unsubscribe", {"uri": GUIDE}) == {}
        refused = server.wait_for(server.request("resources/subscribe", {"uri": "mcpower://notes/nosuch.md"}))
        assert refused["error"]["code"] == -32602 and "no document 'nosuch.md'" in refused["error"]["message"]

        # todo.txt last: whichever re-index came first, its edit is seen by a watcher already watching
        edit_until_reindexed(
            server, {source / "guide.md": "# G\n\nLute {n}.\n", source / "todo.txt": "Tune the ocarina {n}.\n"}
        )
        read_until(server, lambda: TODO in updated(server), "notifications/resources/updated")
        server.wait_notification("notifications/resources/list_changed")
        # guide.md's edit is published too (it is served), yet its unsubscribed client heard nothing of it:
        # one more change to todo.txt, and every notification of the earlier republishes came before its own.
        for _ in range(int(DEADLINE / 2)):
            if "Lute" in server.call("resources/read", {"uri": GUIDE})["contents"][0]["text"]:
                break
            server.wait_log("watch.reindexed", timeout=2.0, must=False)
        else:
            raise AssertionError(f"guide.md's edit was never published; stderr:\n{server.stderr()}")
        before = updated(server).count(TODO)
        edit_until_reindexed(server, {source / "todo.txt": "Tune the lute {n}.\n"})
        read_until(server, lambda: updated(server).count(TODO) > before, "a second update of todo.txt")
        assert set(updated(server)) == {TODO}
        server.close_stdin()
        assert server.wait_exit(30) == 0
    finally:
        server.stop()


@pytest.fixture
def secret(tmp_path: Path, datasets_dir: Path) -> None:
    folder = write_files(tmp_path / "secret", {"plans.md": "# Plans\n\nThe merger is in May.\n"})
    ingest(folder, datasets_dir, IngestOptions(dataset_id="secret"), embedder=FakeEmbedder())


class Heard:
    def __init__(self) -> None:
        self.updated: list[str] = []
        self.changed = anyio.Event()
        self.got = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
            self.got.set()
        elif isinstance(message, ResourceListChangedNotification):
            self.changed.set()


def http_client(url: str, secret: str, heard: Heard) -> Any:
    h = httpx2.AsyncClient(headers={"Authorization": f"Bearer {secret}"}, timeout=httpx2.Timeout(30, read=60))
    return h, Client(streamable_http_client(url, http_client=h), mode="legacy", message_handler=heard)


@pytest.fixture
def served(source: Path, secret: None, datasets_dir: Path, tmp_path: Path) -> Iterator[tuple[HttpServer, str]]:
    tokens = tmp_path / "tokens.json"
    alice, _ = token_add(tokens, datasets_dir, "alice", "notes")
    server = HttpServer(
        write_http_launcher(tmp_path), datasets_dir, "--watch", "--watch-debounce", "0.05", "--tokens-file", str(tokens)
    )
    try:
        yield server, alice
    finally:
        server.stop()


@pytest.mark.slow  # a second server process: ~5 s
def test_serve_http_watch_tells_each_session_of_its_own_subscriptions_within_its_token(
    served: tuple[HttpServer, str], source: Path, tmp_path: Path
) -> None:
    server, alice = served
    tokens = tmp_path / "tokens.json"
    server.wait_event("watch.watching", timeout=DEADLINE)

    async def main() -> None:
        mine, other = Heard(), Heard()
        h1, c1 = http_client(server.url, alice, mine)
        h2, c2 = http_client(server.url, TOKEN, other)
        h3 = httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice}"}, timeout=httpx2.Timeout(30, read=60))
        streamed: list[str] = []
        stream_heard, stream_ended = anyio.Event(), anyio.Event()

        async def follow(stream: Any) -> None:  # alice's listen stream (2026-07-28), heard until it ends
            async for event in stream:
                streamed.append(type(event).__name__)
                stream_heard.set()
            stream_ended.set()

        async with (
            h1,
            h2,
            h3,
            c1 as subscriber,
            c2 as bystander,
            Client(streamable_http_client(server.url, http_client=h3), mode="auto") as modern,
            modern.listen(resource_subscriptions=[TODO]) as stream,
            anyio.create_task_group() as tasks,
        ):
            tasks.start_soon(follow, stream)
            assert subscriber.server_capabilities.resources is not None
            assert subscriber.server_capabilities.resources.subscribe is True
            await subscriber.subscribe_resource(TODO)
            with pytest.raises(MCPError, match="dataset 'secret'"):  # there, but not alice's
                await subscriber.subscribe_resource(SECRET)
            await bystander.subscribe_resource(GUIDE)  # another session, another document
            await bystander.list_resources()

            def edit() -> None:
                for n in range(int(DEADLINE / 2)):
                    (source / "todo.txt").write_text(f"Tune the ocarina {n}.\n")
                    try:
                        server.wait_event("watch.reindexed", timeout=2.0)
                        return
                    except AssertionError:
                        continue
                raise AssertionError(f"no re-index; stderr:\n{server.stderr()}")

            await anyio.to_thread.run_sync(edit)
            with anyio.fail_after(DEADLINE):
                await mine.got.wait()
                await mine.changed.wait()
                await other.changed.wait()  # told the list changed, after any update of that republish
            assert set(mine.updated) == {TODO} and other.updated == []
            with anyio.fail_after(DEADLINE):
                await stream_heard.wait()

            # alice's token revoked while her session and stream are open: the next change is not hers,
            # nor the news that the list changed (the bystander's token stands: it is told)
            mine.changed, other.changed = anyio.Event(), anyio.Event()
            write_tokens(tokens, [t for t in read_tokens(tokens) if t.name != "alice"])
            (source / "todo.txt").write_text("Tune the kazoo.\n")
            await anyio.to_thread.run_sync(lambda: server.wait_event("resources.subscriptions_ended", DEADLINE))
            with anyio.fail_after(DEADLINE):
                await other.changed.wait()
                await stream_ended.wait()  # ended, as on a deliberate close
            told = await anyio.to_thread.run_sync(lambda: server.wait_event("resources.changed", DEADLINE, withheld=1))
            assert told["sessions"] == 1  # the bystander; alice's session withheld
            assert mine.updated == [TODO] and streamed == ["ResourceUpdated"] and not mine.changed.is_set()
            assert server.wait_event("resources.stream_ended")["caller"] == "alice"

    anyio.run(main)
