"""Per-document subscriptions: a client asks to hear when one document (``mcpower://<dataset>/<path>``)
changes, and is told with ``notifications/resources/updated`` when a watcher republishes its dataset
with that document's text changed, or without it.

Two doors, one table. Clients of the 2025 protocol revisions call ``resources/subscribe`` and
``resources/unsubscribe`` (per session: a session's subscriptions end with it); clients of 2026-07-28
name the documents in a ``subscriptions/listen`` request (per stream: they end with the stream), and
hear on that stream through the SDK's bus. Either way a caller can subscribe only to a document it
may read (auth/callers.py), as ``resources/read`` would find it, and at most
:data:`MAX_PER_SESSION` of them on one session or stream. A session's subscription keeps the token
it was made with, judged again before each update (``Updates.judge``, set by http.py:
verifiers.judge_again): a token revoked or expired since ends that session's subscriptions made
with it, and one edited to other datasets hears only of what it may read now. The SDK's bus sends
to every listen stream whose filter names a document, so before an update is published a stream
whose token no longer stands, or no longer reads every dataset of its documents, is ended (as the
SDK ends one on purpose); listening again meets the token's checks as they are now.

What changed is decided from the text a client would read: the sha256 of each subscribed document's
stored text is kept, and compared when its dataset is republished (only the subscribed documents of
that dataset are read again, so the cost is bounded by the subscriptions, not the dataset's size).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import weakref
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.subscriptions import ResourceUpdated, SubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp.types import INVALID_PARAMS, EmptyResult, SubscribeRequestParams, UnsubscribeRequestParams
from mcp_types import SubscriptionsListenResult

from mcpower.errors import McpowerError
from mcpower.registry import Registry
from mcpower.server.auth.callers import Caller, allowed, caller_of, visible
from mcpower.server.documents import URI_SCHEME
from mcpower.server.middleware import MAX_RESOURCE_URI_CHARS

logger = logging.getLogger(__name__)

MAX_PER_SESSION = 256  # documents one session (or one listen stream) may subscribe to
MAX_DOCUMENTS = 20_000  # distinct documents subscribed to over all sessions: bounds a republish's reads
SEND_TIMEOUT_S = 5.0  # a client that does not read its notifications is not waited for longer
_PREFIX = f"{URI_SCHEME}://"
_GONE = "gone"  # the fingerprint of a document that is not there (a sha256 is 64 hex digits)

Run = Callable[[Callable[[], Any]], Awaitable[Any]]
# What a subscriber's access token stands for now (None: revoked, expired): http.py's, from its verifier.
Judge = Callable[[AccessToken], AccessToken | None]


@dataclass(frozen=True, eq=False)
class Stream:
    """An open ``subscriptions/listen`` stream: who opened it, with which token, the datasets of
    its documents, and the scope that ends it."""

    caller: Caller
    access: AccessToken | None
    datasets: frozenset[str]
    scope: anyio.CancelScope


@dataclass(frozen=True)
class Subscriber:
    """Who subscribed to a document in a session: the caller, and the token it came with (None:
    no token, as over stdio), judged again before each update is sent."""

    caller: Caller
    access: AccessToken | None


def _dataset_of(uri: str) -> str | None:
    parts = parse_uri(uri)
    return parts[0] if parts is not None else None


def parse_uri(uri: str) -> tuple[str, str] | None:
    """(dataset, path) of a document URI as documents.py makes them; None for anything else."""
    if not uri.startswith(_PREFIX):
        return None
    dataset, slash, path = uri[len(_PREFIX) :].partition("/")
    if not dataset or not slash or not path:
        return None
    return dataset, unquote(path)


def fingerprint(registry: Registry, dataset: str, path: str) -> str:
    """The sha256 of the text ``resources/read`` serves for the document, or _GONE."""
    try:
        doc = registry.store(dataset).document(path)
    except McpowerError:
        return _GONE
    return _GONE if doc is None else hashlib.sha256(doc.content.encode("utf-8", "surrogatepass")).hexdigest()


class Updates:
    """The subscriptions of every session and listen stream, and the text each document had when
    last seen. Subscribing runs on the event loop; :meth:`dataset_changed` on a watcher's thread."""

    def __init__(self, registry: Registry, run: Run, bus: SubscriptionBus) -> None:
        self.registry = registry
        self.run = run  # the server's worker threads: reading a document is blocking work
        self.bus = bus
        self.lock = threading.Lock()
        # A session's connection -> {uri: who subscribed}; a closed session is forgotten.
        self.sessions: weakref.WeakKeyDictionary[Any, dict[str, Subscriber]] = weakref.WeakKeyDictionary()
        # Set by http.py when callers bring tokens: a subscriber whose token no longer stands hears nothing more.
        self.judge: Judge | None = None
        self.listening: Counter[str] = Counter()  # the URIs of open listen streams, counted per stream
        self.streams: set[Stream] = set()  # the open listen streams
        self.known: dict[str, str] = {}  # uri -> fingerprint of its text when last seen

    # ------------------------------------------------------------ resources/subscribe (up to 2025-11-25)

    async def subscribe(self, ctx: Any, params: SubscribeRequestParams) -> EmptyResult:
        uri, connection = str(params.uri), self._connection(ctx)
        access = get_access_token()
        caller = caller_of(access)
        seen = await self._check(uri, caller)
        with self.lock:
            mine = self.sessions.setdefault(connection, {})
            if uri not in mine and len(mine) >= MAX_PER_SESSION:
                raise MCPError(
                    INVALID_PARAMS,
                    f"this session already subscribes to {MAX_PER_SESSION} documents, the most it may; "
                    "unsubscribe from one first (resources/unsubscribe)",
                )
            self._remember(uri, seen)
            mine[uri] = Subscriber(caller, access)
        logger.info("resources.subscribed", extra={"event": "resources.subscribed", "uri": uri[:200]})
        return EmptyResult()

    async def unsubscribe(self, ctx: Any, params: UnsubscribeRequestParams) -> EmptyResult:
        """Ends the session's subscription; unsubscribing from what it never subscribed to is no error
        (the client may have lost track after a reconnect), as the protocol leaves it."""
        connection = self._connection(ctx)
        with self.lock:
            mine = self.sessions.get(connection)
            if mine is not None:
                mine.pop(str(params.uri), None)
        return EmptyResult()

    @staticmethod
    def _connection(ctx: Any) -> Any:
        # ctx.session lives for one request; the client's connection for as long as it stays (the SDK
        # keeps it on the session without a public name), as changes.py finds it
        connection = getattr(getattr(ctx, "session", None), "_connection", None)
        if connection is None:
            raise MCPError(INVALID_PARAMS, "resources/subscribe needs a session to send updates on")
        return connection

    # ------------------------------------------------------------ subscriptions/listen (2026-07-28)

    def listen(self, handler: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
        """The SDK's ``subscriptions/listen`` handler, with the stream's resource URIs checked as
        ``resources/subscribe`` checks them: a document the caller may not read (or that is not there)
        is left out of the acknowledged filter, so the stream never hears of it."""

        async def listen(ctx: Any, params: Any) -> Any:
            wanted = list(params.notifications.resource_subscriptions or [])
            if len(wanted) > MAX_PER_SESSION:
                raise MCPError(
                    INVALID_PARAMS,
                    f"{len(wanted)} resource subscriptions on one stream; at most {MAX_PER_SESSION}",
                )
            access = get_access_token()
            caller, kept = caller_of(access), []
            for uri in dict.fromkeys(wanted):
                try:
                    seen = await self._check(uri, caller)
                    with self.lock:
                        self._remember(uri, seen)
                        self.listening[uri] += 1
                except MCPError:
                    continue  # not honoured: the acknowledgement leaves it out
                kept.append(uri)
            honoured = params.notifications.model_copy(update={"resource_subscriptions": kept or None})
            stream = Stream(
                caller, access, frozenset(d for uri in kept if (d := _dataset_of(uri))), anyio.CancelScope()
            )
            try:
                with stream.scope:
                    with self.lock:
                        self.streams.add(stream)
                    return await handler(ctx, params.model_copy(update={"notifications": honoured}))
                # Ended by send(): its token no longer stands. Closed as the SDK closes a stream on purpose.
                return SubscriptionsListenResult(_meta={SUBSCRIPTION_ID_META_KEY: ctx.request_id})
            finally:
                with self.lock:
                    self.streams.discard(stream)
                    self.listening.subtract(kept)
                    for uri in kept:
                        if self.listening[uri] <= 0:
                            del self.listening[uri]

        return listen

    def _end_streams_gone_stale(self) -> None:
        """End the listen streams whose token no longer stands, or no longer reads every dataset
        their documents are in (the SDK's bus cannot be told to leave a stream out): the client is
        told the stream ended, and listening again meets the token's checks as they are now."""
        if self.judge is None:
            return
        with self.lock:
            streams = list(self.streams)
        for stream in streams:
            caller = self.caller_now(stream.access)
            if caller is None or not all(allowed(caller, d) for d in stream.datasets):
                stream.scope.cancel()
                logger.info(
                    "resources.stream_ended: the token it was opened with no longer stands as it did",
                    extra={"event": "resources.stream_ended", "caller": stream.caller.name[:64]},
                )

    def caller_now(self, access: AccessToken | None) -> Caller | None:
        """The caller ``access`` stands for now (the local caller without a token; as it stood
        without a judge); None when the token no longer stands (revoked, expired)."""
        if self.judge is None or access is None:
            return caller_of(access)
        judged = self.judge(access)
        return caller_of(judged) if judged is not None else None

    def _subscriber_now(self, connection: Any, subscriber: Subscriber) -> Caller | None:
        """The caller ``subscriber`` stands for now, its token judged again; None when the token no
        longer stands (revoked, expired): then every subscription made with it in this session ends."""
        caller = self.caller_now(subscriber.access)
        if caller is not None:
            return caller
        with self.lock:
            mine = self.sessions.get(connection, {})
            for uri in [u for u, s in mine.items() if s.access is subscriber.access]:
                del mine[uri]
        logger.info(
            "resources.subscriptions_ended: the token they were made with no longer stands",
            extra={"event": "resources.subscriptions_ended", "caller": subscriber.caller.name[:64]},
        )
        return None

    # ------------------------------------------------------------ both

    async def _check(self, uri: str, caller: Caller) -> str:
        """The document's fingerprint, if ``caller`` may read it and it is there; else the error a
        read would give (a dataset the caller may not see is reported as an unknown one)."""
        if len(uri) > MAX_RESOURCE_URI_CHARS:
            raise MCPError(INVALID_PARAMS, f"resource URI of {len(uri)} characters; at most {MAX_RESOURCE_URI_CHARS}")
        parts = parse_uri(uri)
        if parts is None:
            raise MCPError(
                INVALID_PARAMS,
                f"cannot subscribe to {uri[:200]!r}: only documents ({_PREFIX}<dataset>/<path>, as resources/list names them)",
            )
        dataset, path = parts
        scoped = visible(self.registry, caller)

        def read() -> str:
            try:
                scoped.store(dataset)  # an unknown dataset (or one not the caller's) says so, as a read does
            except McpowerError as e:
                raise MCPError(INVALID_PARAMS, e.message, {"uri": uri[:200]}) from None
            return fingerprint(scoped, dataset, path)

        seen: str = await self.run(read)
        if seen == _GONE:
            raise MCPError(
                INVALID_PARAMS, f"no document {path[:200]!r} in dataset {dataset[:100]!r}", {"uri": uri[:200]}
            )
        return seen

    def _remember(self, uri: str, seen: str) -> None:
        """Keeps the text first seen (a later subscriber must not hide a change; under self.lock)."""
        if uri not in self.known and len(self.known) >= MAX_DOCUMENTS:
            raise MCPError(INVALID_PARAMS, f"the server already follows {MAX_DOCUMENTS} documents; try again later")
        self.known.setdefault(uri, seen)

    def dataset_changed(self, dataset: str) -> list[str]:
        """The subscribed URIs of ``dataset`` whose text changed (or which are gone) since last seen,
        each now remembered as it is; blocking (a watcher's thread). Forgets what nobody follows."""
        with self.lock:
            followed = set(self.listening)
            for mine in self.sessions.values():
                followed.update(mine)
            for uri in set(self.known) - followed:
                del self.known[uri]
            ours = [(uri, parts[1]) for uri in self.known if (parts := parse_uri(uri)) and parts[0] == dataset]
        changed = []
        for uri, path in ours:
            now = fingerprint(self.registry, dataset, path)
            with self.lock:
                if uri in self.known and self.known[uri] != now:
                    self.known[uri] = now
                    changed.append(uri)
        return changed

    async def send(self, changed: list[str]) -> int:
        """``notifications/resources/updated`` for each of ``changed`` to the sessions subscribed to
        it whose caller may read it, and to the listen streams (the bus matches their URIs); returns
        how many notifications went to sessions."""
        sent = 0
        self._end_streams_gone_stale()  # before anything is published, list_changed included
        for uri in changed:
            await self.bus.publish(ResourceUpdated(uri=uri))
        with self.lock:
            sessions = [(connection, dict(mine)) for connection, mine in self.sessions.items()]
        for connection, mine in sessions:
            now: dict[int, Caller | None] = {}  # each subscriber's token judged once a send
            for uri in changed:
                parts = parse_uri(uri)
                subscriber = mine.get(uri)
                if subscriber is None or parts is None:
                    continue
                if id(subscriber.access) not in now:
                    now[id(subscriber.access)] = self._subscriber_now(connection, subscriber)
                caller = now[id(subscriber.access)]
                if caller is None or not allowed(caller, parts[0]):
                    continue
                try:
                    await asyncio.wait_for(connection.send_resource_updated(uri), SEND_TIMEOUT_S)
                    sent += 1
                except Exception:  # a departed or stuck client: its subscriptions end, the others are told
                    with self.lock:
                        self.sessions.pop(connection, None)
                    break
        return sent
