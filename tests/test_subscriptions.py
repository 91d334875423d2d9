"""Per-document subscriptions, in process: ``resources/subscribe`` (2025 revisions) and the resource
URIs of ``subscriptions/listen`` (2026-07-28) announce a republished document whose text changed or
which is gone, to its subscribers only, and only within what their token may read.

A re-ingest stands for the watcher's republish; its observer is called as the watcher calls it, on
a thread. "Nothing arrived" is decided by ``list_changed``, which is sent after every update of the
same republish (changes.py), never by waiting.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import write_files
from mcp import Client, MCPError
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.types import ResourceListChangedNotification, ResourceUpdatedNotification
from server_fixtures import ingest_handbook

from mcpower.registry import Registry
from mcpower.server.app import KnowledgeServer, create_server
from mcpower.server.auth.callers import caller_of, scopes_for
from mcpower.server.auth.tokens import NamedToken, digest, new_secret, write_tokens
from mcpower.server.auth.verifiers import DIGEST_CLAIM, NamedTokenVerifier, judge_again
from mcpower.server.updates import MAX_PER_SESSION
from mcpower.watch.watcher import WatchEvent

pytestmark = [pytest.mark.anyio, pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")]

INSTALL = "mcpower://handbook/guide/install.md"
USAGE = "mcpower://handbook/guide/usage.md"
NOTES = "mcpower://handbook/notes.txt"
BREAD = "mcpower://recipes/bread.md"


@contextmanager
def as_caller(name: str, patterns: list[str]) -> Iterator[None]:
    """Requests made in this block (and the in-memory server's tasks started in it) come from a
    named token reading ``patterns``, as the HTTP gate would set it."""
    token = AccessToken(token="x", client_id=name, scopes=scopes_for(patterns))
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        yield
    finally:
        auth_context_var.reset(reset)


class Inbox:
    """The notifications a client received, and a wait for the next list_changed."""

    def __init__(self) -> None:
        self.updated: list[str] = []
        self.changed = 0
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.updated.append(str(message.params.uri))
        elif isinstance(message, ResourceListChangedNotification):
            self.changed += 1
            self.event.set()

    async def next_change(self) -> None:
        with anyio.fail_after(30):
            await self.event.wait()
        self.event = anyio.Event()


async def republish(server: KnowledgeServer, root: Path, files: dict[str, str], gone: tuple[str, ...] = ()) -> None:
    """Edit the handbook's source, re-ingest it, and tell the server as the watcher does (its thread)."""
    source = root / "src" / "handbook"
    write_files(source, files)
    for path in gone:
        (source / path).unlink()
    await anyio.to_thread.run_sync(ingest_handbook, root)
    await anyio.to_thread.run_sync(server.changes.observer(), WatchEvent("handbook", "reindexed"))


async def test_a_subscribed_document_that_changed_or_went_is_announced_and_only_it(
    registry: Registry, datasets: Path
) -> None:
    server, inbox = create_server(registry), Inbox()
    root = datasets.parent
    async with Client(server, mode="legacy", message_handler=inbox) as c:
        resources = c.server_capabilities.resources
        assert resources is not None and resources.subscribe is True and resources.list_changed is True
        for uri in (INSTALL, USAGE, NOTES, BREAD):
            await c.subscribe_resource(uri)
        await c.subscribe_resource(INSTALL)  # again: still one subscription

        await republish(server, root, {"guide/usage.md": "# Usage notes\n\nNow with ocarinas.\n"}, gone=("notes.txt",))
        await inbox.next_change()
        assert sorted(inbox.updated) == [USAGE, NOTES]  # install.md unchanged, bread.md in another dataset

        await c.unsubscribe_resource(USAGE)
        await c.unsubscribe_resource(USAGE)  # not subscribed any more: no error
        inbox.updated.clear()
        await republish(server, root, {"guide/usage.md": "# Usage\n\nAnd lutes.\n", "guide/install.md": "# New\n"})
        await inbox.next_change()
        assert inbox.updated == [INSTALL]  # usage.md changed too, but nobody follows it now
    gc.collect()
    assert server.changes.updates is not None and len(server.changes.updates.sessions) == 0  # the session ended


async def test_only_documents_there_and_readable_can_be_subscribed(registry: Registry) -> None:
    with as_caller("alice", ["handbook"]):
        async with Client(create_server(registry), mode="legacy") as c:
            await c.subscribe_resource(INSTALL)
            for uri, said in [
                (BREAD, "dataset 'recipes'"),  # there, but not alice's: told as an unknown dataset is
                ("mcpower://nosuch/a.md", "dataset 'nosuch'"),
                ("mcpower://handbook/guide/missing.md", "no document 'guide/missing.md'"),
                ("https://example.com/a.md", "only documents"),
                ("mcpower://handbook/" + "a" * 5000, "at most"),
            ]:
                with pytest.raises(MCPError) as refused:
                    await c.subscribe_resource(uri)
                assert said in str(refused.value), (uri, str(refused.value))
            for uri in (BREAD, "mcpower://nosuch/a.md"):  # refused in the same words as a read
                with pytest.raises(MCPError) as read:
                    await c.read_resource(uri)
                with pytest.raises(MCPError) as subscribed:
                    await c.subscribe_resource(uri)
                assert str(subscribed.value) == str(read.value) and "available" in str(read.value)


async def test_subscriptions_per_session_are_bounded(registry: Registry, datasets: Path) -> None:
    files = {f"many/{n}.md": f"# Page {n}\n\nText {n}.\n" for n in range(MAX_PER_SESSION + 1)}
    write_files(datasets.parent / "src" / "handbook", files)
    await anyio.to_thread.run_sync(ingest_handbook, datasets.parent)
    async with Client(create_server(registry), mode="legacy") as c:
        for n in range(MAX_PER_SESSION):
            await c.subscribe_resource(f"mcpower://handbook/many/{n}.md")
        with pytest.raises(MCPError, match=f"{MAX_PER_SESSION} documents"):
            await c.subscribe_resource(f"mcpower://handbook/many/{MAX_PER_SESSION}.md")
        await c.unsubscribe_resource("mcpower://handbook/many/0.md")
        await c.subscribe_resource(f"mcpower://handbook/many/{MAX_PER_SESSION}.md")  # room again


async def test_a_listen_stream_hears_of_its_documents_within_its_token(registry: Registry, datasets: Path) -> None:
    """2026-07-28: the stream's resource URIs are acknowledged only for documents the caller may
    read; a change to one reaches the stream as ResourceUpdated, before the list change."""
    server = create_server(registry)
    with as_caller("alice", ["handbook"]):
        async with (
            Client(server, mode="auto") as c,
            c.listen(resources_list_changed=True, resource_subscriptions=[USAGE, INSTALL, BREAD]) as stream,
        ):
            resources = c.server_capabilities.resources
            assert resources is not None and resources.subscribe is True and resources.list_changed is True
            assert stream.honored is not None and stream.honored.resource_subscriptions == [USAGE, INSTALL]
            await republish(server, datasets.parent, {"guide/usage.md": "# Usage\n\nBagpipes.\n"})
            with anyio.fail_after(30):
                first, second = await stream.__anext__(), await stream.__anext__()
            assert (type(first).__name__, getattr(first, "uri", None)) == ("ResourceUpdated", USAGE)
            assert type(second).__name__ == "ResourcesListChanged"


def subscribers(server: KnowledgeServer) -> list[str]:
    """The callers with a subscription in some session, by name."""
    assert server.changes.updates is not None
    return sorted(s.caller.name for mine in server.changes.updates.sessions.values() for s in mine.values())


async def test_a_subscriber_whose_token_no_longer_stands_hears_nothing_more(registry: Registry, datasets: Path) -> None:
    """Each update, and the list_changed after it, is sent as the session's token stands now (http.py
    judges it again: revoked, expired, edited): a revoked token's subscriptions end and its session
    is told nothing; a token narrowed to other datasets hears nothing of these until it may read them
    again. carol, whose token stands, joined last: list_changed goes to the sessions in the order
    they joined, so once she has heard of a republish, the others were told whatever they were."""
    server, root = create_server(registry), datasets.parent
    assert server.changes.updates is not None
    now: dict[str, AccessToken | None] = {}
    server.changes.updates.judge = lambda access: now.get(access.client_id, access)
    alice, bob, carol = Inbox(), Inbox(), Inbox()
    with as_caller("alice", ["handbook"]):
        async with Client(server, mode="legacy", message_handler=alice) as a:
            for uri in (USAGE, INSTALL):  # in alice's block: the in-memory client's requests carry its caller
                await a.subscribe_resource(uri)
            with as_caller("bob", ["handbook"]):
                async with Client(server, mode="legacy", message_handler=bob) as b:
                    await b.subscribe_resource(USAGE)
                    with as_caller("carol", ["handbook"]):
                        async with Client(server, mode="legacy", message_handler=carol) as c:
                            await c.list_resources()
                            assert subscribers(server) == ["alice", "alice", "bob"]
                            now["alice"] = None  # revoked
                            await republish(
                                server, root, {"guide/usage.md": "# Usage\n\nKazoos.\n", "guide/install.md": "# I\n"}
                            )
                            await carol.next_change()
                            await bob.next_change()
                            assert (alice.updated, alice.changed, bob.updated) == ([], 0, [USAGE])
                            assert subscribers(server) == ["bob"]  # alice's ended, both of them

                            bob.updated.clear()
                            now["bob"] = AccessToken(token="x", client_id="bob", scopes=scopes_for(["recipes"]))
                            await republish(server, root, {"guide/usage.md": "# Usage\n\nTubas.\n"})
                            await carol.next_change()
                            assert (bob.updated, bob.changed) == ([], 1)  # narrowed: kept, not told at all
                            assert subscribers(server) == ["bob"]

                            del now["bob"]  # handbook's again
                            await republish(server, root, {"guide/usage.md": "# Usage\n\nHarps.\n"})
                            await bob.next_change()
                            assert bob.updated == [USAGE] and (alice.updated, alice.changed) == ([], 0)


async def test_list_changed_goes_only_to_sessions_that_may_read_the_republished_dataset(
    registry: Registry, datasets: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A session is told its resource list changed only if it did: a token reading other datasets
    only does not learn that this one was republished (nor a session without a token of a server
    that asks for them). Over stdio (no judge, no token) every session is told."""
    server = create_server(registry)
    outsider, insider = Inbox(), Inbox()
    with as_caller("olga", ["recipes"]):
        async with Client(server, mode="legacy", message_handler=outsider) as o:
            await o.list_resources()
            with as_caller("ivan", ["hand*"]):
                async with Client(server, mode="legacy", message_handler=insider) as i:
                    await i.list_resources()
                    with caplog.at_level("INFO", logger="mcpower.server.changes"):
                        await republish(server, datasets.parent, {"guide/usage.md": "# Usage\n\nBells.\n"})
                        await insider.next_change()
    assert outsider.changed == 0
    said = [r for r in caplog.records if r.getMessage() == "resources.changed"]
    assert [(r.sessions, r.withheld) for r in said] == [(1, 1)]  # type: ignore[attr-defined]

    stdio, local = create_server(registry), Inbox()  # no token: the local caller reads everything
    async with Client(stdio, mode="legacy", message_handler=local) as c:
        await c.list_resources()
        await republish(stdio, datasets.parent, {"guide/usage.md": "# Usage\n\nGongs.\n"})
        await local.next_change()
    assert local.changed == 1


async def test_a_named_token_is_judged_again_from_its_digest_and_others_by_their_expiry(tmp_path: Path) -> None:
    path, secret, made = tmp_path / "tokens.json", new_secret(), datetime.now(timezone.utc)
    alice = NamedToken("alice", digest(secret), ("handbook",), made)
    write_tokens(path, [alice])
    verifier = NamedTokenVerifier(path)
    access = await verifier.verify_token(secret)
    assert access is not None and secret not in access.model_dump_json()  # its digest only, never the secret
    judge = partial(judge_again, verifier, time.time)

    def patterns() -> tuple[str, ...] | None:
        judged = judge(access)
        return None if judged is None else caller_of(judged).patterns

    assert patterns() == ("handbook",)
    write_tokens(path, [replace(alice, datasets=("recipes",))])
    assert patterns() == ("recipes",)  # edited: what the file says now
    write_tokens(path, [replace(alice, sha256=digest(new_secret()))])
    assert patterns() is None  # the name given a new secret: the old one stays out
    write_tokens(path, [replace(alice, expires=made - timedelta(minutes=1))])
    assert patterns() is None  # expired
    write_tokens(path, [])
    assert patterns() is None  # revoked
    forged = access.model_copy(update={"claims": {DIGEST_CLAIM: "not hex"}})
    assert judge(forged) is None

    soon = AccessToken(token="jwt", client_id="oauth:ann", scopes=["mcpower:read"], expires_at=int(time.time()) + 600)
    assert judge(soon) is soon  # an OAuth access token: until its expiry
    assert judge(soon.model_copy(update={"expires_at": int(time.time()) - 1})) is None


@pytest.mark.parametrize("now", ["revoked", "narrowed", "standing"])
async def test_a_listen_stream_whose_token_no_longer_stands_is_ended(
    registry: Registry, datasets: Path, now: str
) -> None:
    """The SDK's bus sends to every open listen stream whose filter names the document: a stream
    whose token was revoked, or no longer reads its documents' datasets, is ended before the update
    goes out (the client is told the stream ended, as on a deliberate close); one whose token still
    stands hears it."""
    server = create_server(registry)
    assert server.changes.updates is not None
    verdicts: dict[str, AccessToken | None] = {}
    server.changes.updates.judge = lambda access: verdicts.get(access.client_id, access)
    heard: list[str] = []
    with as_caller("alice", ["handbook"]):
        async with (
            Client(server, mode="auto") as c,
            c.listen(resources_list_changed=True, resource_subscriptions=[USAGE]) as stream,
        ):
            assert len(server.changes.updates.streams) == 1
            if now != "standing":
                narrowed = AccessToken(token="x", client_id="alice", scopes=scopes_for(["recipes"]))
                verdicts["alice"] = None if now == "revoked" else narrowed
            await republish(server, datasets.parent, {"guide/usage.md": "# Usage\n\nCastanets.\n"})
            with anyio.fail_after(30):
                async for event in stream:  # ends without the update, or hears it
                    heard.append(type(event).__name__)
                    if heard[-1] == "ResourceUpdated":
                        break
            assert ("ResourceUpdated" in heard) == (now == "standing")
    assert not server.changes.updates.streams
