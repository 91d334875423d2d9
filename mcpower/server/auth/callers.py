"""Who is calling, and which datasets they may read: the one rule every HTTP entry point asks.

A caller is what an access token says: its name (the token's ``client_id``: a named token's name,
an OAuth token's client or subject) and its scopes. Dataset access is written as scopes:

- ``mcpower:read`` — every dataset;
- ``mcpower:read:<pattern>`` — the datasets whose id matches ``<pattern>`` (``fnmatch``, case-sensitive:
  ``eng-*``, ``hr-policies``).

Every verifier (the single ``MCPOWER_TOKEN``, named tokens, OAuth access tokens) hands back an
``AccessToken`` in these terms, so :func:`allowed` is the only place a decision is made. Without
authentication (stdio, a loopback HTTP server without a token) the caller is :data:`LOCAL`: the
user who started the server, who may read everything.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from mcpower.registry import Registry
from mcpower.server.auth.scoped import ScopedRegistry
from mcpower.server.auth.tokens import grants

READ_SCOPE = "mcpower:read"
_READ_PREFIX = READ_SCOPE + ":"


@dataclass(frozen=True)
class Caller:
    """A caller's name (for logs, metrics, rate limits) and the dataset patterns it may read
    (None: every dataset)."""

    name: str
    patterns: tuple[str, ...] | None


LOCAL = Caller("local", None)


def scopes_for(patterns: Iterable[str] | None) -> list[str]:
    """The scopes that grant ``patterns`` (None or a ``*`` among them: every dataset)."""
    if patterns is None:
        return [READ_SCOPE]
    listed = list(patterns)
    return [READ_SCOPE] if "*" in listed else [_READ_PREFIX + p for p in listed]


def caller_of(token: AccessToken | None) -> Caller:
    """The caller an access token stands for; :data:`LOCAL` without one."""
    if token is None:
        return LOCAL
    if READ_SCOPE in token.scopes:
        return Caller(token.client_id, None)
    patterns = tuple(
        s[len(_READ_PREFIX) :] for s in token.scopes if s.startswith(_READ_PREFIX) and len(s) > len(_READ_PREFIX)
    )
    return Caller(token.client_id, patterns)


def current_caller() -> Caller:
    """The caller of the MCP request being handled (the SDK keeps its token in a context variable)."""
    return caller_of(get_access_token())


def caller_from_scope(scope: dict[str, Any] | Any) -> Caller:
    """The caller of an HTTP request, from the user the authentication middleware put in its scope."""
    user = scope.get("user") if hasattr(scope, "get") else None
    return caller_of(user.access_token if isinstance(user, AuthenticatedUser) else None)


def allowed(caller: Caller, dataset_id: str) -> bool:
    """Whether ``caller`` may read the dataset ``dataset_id``: the one decision."""
    if caller.patterns is None:
        return True
    return any(grants(p, dataset_id) for p in caller.patterns)


def visible(registry: Registry, caller: Caller) -> Registry:
    """The datasets ``caller`` may read, as a registry every door (tools, resources, web pages,
    ``/healthz``) searches and lists through: the others answer as unknown ids do (scoped.py)."""
    if caller.patterns is None:
        return registry
    return ScopedRegistry(registry, partial(allowed, caller), caller.patterns)
