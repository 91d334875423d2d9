"""Who is calling, and which datasets they may read: the one rule every HTTP entry point asks.

A caller is what an access token says: its name (the token's ``client_id``) and its scopes. The
name says how the caller authenticated, so no two ways can ever name the same caller:

- ``token``: the single ``MCPOWER_TOKEN`` (the operator);
- ``<name>``: a named token (letters, digits, ``.``, ``_``, ``-``: never the separator ``:``);
- ``oauth:<subject>``: an OAuth access token's ``sub`` (else its ``client_id``/``azp``);
- ``local``: nobody authenticated (stdio, a loopback server without tokens).

Rate-limit buckets, audit lines, metrics labels, the web pages' header and the logs all use it.
Access is written as scopes:

- ``mcpower:read`` — every dataset;
- ``mcpower:read:<pattern>`` — the datasets whose id matches ``<pattern>`` (``fnmatch``, case-sensitive:
  ``eng-*``, ``hr-policies``);
- ``mcpower:metrics`` — ``GET /metrics`` (the operator's single token, a named token added with
  ``--metrics``, an OAuth token with that scope).

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
METRICS_SCOPE = "mcpower:metrics"
_READ_PREFIX = READ_SCOPE + ":"
SEPARATOR = ":"  # between how a caller authenticated and its name there (oauth:alice)
OAUTH_PREFIX = "oauth" + SEPARATOR
OPERATOR = "token"  # the single MCPOWER_TOKEN's caller


@dataclass(frozen=True)
class Caller:
    """A caller's name (for logs, metrics, rate limits), the dataset patterns it may read (None:
    every dataset), and whether it may read ``/metrics``."""

    name: str
    patterns: tuple[str, ...] | None
    metrics: bool = False


LOCAL = Caller("local", None, metrics=True)  # the user who started the server


def scopes_for(patterns: Iterable[str] | None, metrics: bool = False) -> list[str]:
    """The scopes that grant ``patterns`` (None or a ``*`` among them: every dataset; empty: none),
    and ``/metrics`` with ``metrics``."""
    extra = [METRICS_SCOPE] if metrics else []
    if patterns is None:
        return [READ_SCOPE, *extra]
    listed = list(patterns)
    return [READ_SCOPE, *extra] if "*" in listed else [*(_READ_PREFIX + p for p in listed), *extra]


def oauth_caller(subject: str) -> str:
    """The caller name of an OAuth access token's subject: never a named token's or the operator's."""
    return OAUTH_PREFIX + subject


def caller_of(token: AccessToken | None) -> Caller:
    """The caller an access token stands for; :data:`LOCAL` without one."""
    if token is None:
        return LOCAL
    metrics = METRICS_SCOPE in token.scopes
    if READ_SCOPE in token.scopes:
        return Caller(token.client_id, None, metrics)
    patterns = tuple(
        s[len(_READ_PREFIX) :] for s in token.scopes if s.startswith(_READ_PREFIX) and len(s) > len(_READ_PREFIX)
    )
    return Caller(token.client_id, patterns, metrics)


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
