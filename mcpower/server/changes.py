"""Telling connected clients that the documents changed: ``notifications/resources/list_changed``
when ``--watch`` (or a refresh) republishes a dataset, after ``notifications/resources/updated`` for
each document of it a client subscribed to whose text changed (updates.py).

Clients of the 2025 protocol revisions get it on their session, as the token of its latest request
stands now (judged again as updates.py judges a subscriber's): a session whose token was revoked or
expired, or that may not read the republished dataset, is not told (its resource list did not change
for it, and it must not learn that another dataset was republished). Clients of 2026-07-28 get it on
a ``subscriptions/listen`` stream (the SDK's bus) if they opened one asking for resource list
changes; the bus sends to every such stream, so a stream whose token no longer stands is ended
first (updates.py), but one whose token reads other datasets only is told too.
The watcher runs on its own thread: :meth:`Changes.observer` hands its events to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged

from mcpower.server.auth.callers import allowed, caller_of

if TYPE_CHECKING:
    from mcpower.server.updates import Updates

logger = logging.getLogger(__name__)

# The revision whose clients are told through subscriptions/listen rather than on their session.
LISTEN_REVISION = "2026-07-28"
# A client that does not read its notifications is not waited for longer than this.
SEND_TIMEOUT_S = 5.0


class Changes:
    """Middleware that remembers the clients' connections (weakly: a closed one is forgotten) and the
    event loop, and sends them ``list_changed`` when :meth:`resources_changed` is called from any thread."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()  # given to the MCPServer: its subscriptions/listen streams
        # a session's connection -> the token of its latest request (None: none, as over stdio)
        self.sessions: weakref.WeakKeyDictionary[Any, AccessToken | None] = weakref.WeakKeyDictionary()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.updates: Updates | None = None  # the per-document subscriptions (create_server sets them)

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        self.loop = asyncio.get_running_loop()
        # ctx.session lives for one request; the client's connection for as long as it stays (the
        # SDK keeps it on the session, without a public name)
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
        version = str(getattr(ctx, "protocol_version", "") or "")
        if connection is not None and version < LISTEN_REVISION:
            self.sessions[connection] = get_access_token()
        return await call_next(ctx)

    def observer(self, also: Callable[[Any], object] | None = None) -> Callable[[Any], None]:
        """A watcher's ``on_event``: a republished dataset is announced, then ``also`` (the HTTP
        metrics) is told."""

        def on_event(event: Any) -> None:
            if getattr(event, "kind", None) == "reindexed":
                # which subscribed documents changed: read here, on the watcher's thread
                updates = self.updates
                changed = updates.dataset_changed(event.dataset) if updates is not None else []
                self.resources_changed(event.dataset, changed)
            if also is not None:
                also(event)

        return on_event

    def resources_changed(self, dataset: str, documents: list[str] | None = None) -> None:
        """Announce that ``dataset`` was republished to every session that may read it and every
        listen stream, after ``documents`` (changed subscribed URIs) to their subscribers; returns
        at once (any thread)."""
        loop = self.loop
        if loop is None or loop.is_closed():  # no client has connected yet: nobody to tell
            return
        with contextlib.suppress(RuntimeError):  # the loop stopped meanwhile (the server is ending)
            asyncio.run_coroutine_threadsafe(self._send(dataset, documents or []), loop)

    async def _send(self, dataset: str, documents: list[str]) -> None:
        # the documents first (and the listen streams whose token no longer stands ended): a client
        # that saw list_changed has seen every update before it
        updates = self.updates
        updated = await updates.send(documents) if updates is not None else 0
        await self.bus.publish(ResourcesListChanged())
        sent = withheld = 0
        for session, access in list(self.sessions.items()):
            caller = updates.caller_now(access) if updates is not None else caller_of(access)
            if caller is None or not allowed(caller, dataset):
                withheld += 1  # kept: a later request may bring a token that stands
                continue
            try:
                await asyncio.wait_for(session.send_resource_list_changed(), SEND_TIMEOUT_S)
                sent += 1
            except Exception:  # a departed or stuck client: the others are still told
                self.sessions.pop(session, None)
        logger.info(
            "resources.changed",
            extra={"event": "resources.changed", "sessions": sent, "withheld": withheld, "updated": updated},
        )
