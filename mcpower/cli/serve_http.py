"""`mcpower serve --http`: the HttpOptions its settings make (tokens, OAuth, limits), checked before anything loads."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from mcpower.cli.serve_oauth import oauth_options
from mcpower.config import Settings

if TYPE_CHECKING:
    from mcpower.server.http import HttpOptions

logger = logging.getLogger("mcpower")


def tokens_file_in_use(s: Settings) -> Path | None:
    """The named tokens file `serve --http` reads: --tokens-file (MCPOWER_TOKENS_FILE), else the
    default one where `mcpower token add` writes, if it exists."""
    from mcpower.server.auth.tokens import default_tokens_file

    if s.tokens_file is not None:
        return s.tokens_file.expanduser()
    default = default_tokens_file(s.datasets_dir)
    return default if default.exists() else None


def http_options(s: Settings) -> HttpOptions:
    """What `serve --http` serves with, from the settings; bad access settings stop it here.

    Raises:
        McpowerError: a token or tokens file that cannot be used, a public address without one, a
            malformed origin, OAuth options that do not fit together.
    """
    from mcpower.server.auth.access import check_exposure, load_token, transport_security, trusted_networks
    from mcpower.server.auth.ratelimit import RateLimits
    from mcpower.server.auth.tokens import check_apart
    from mcpower.server.auth.verifiers import load_named_tokens
    from mcpower.server.http import HttpOptions

    token = load_token(s.token.get_secret_value() if s.token else None, s.token_file)
    oauth = oauth_options(s)
    tokens_file = tokens_file_in_use(s)
    if tokens_file is not None:
        named = load_named_tokens(tokens_file)  # a missing or malformed file stops the server here
        logger.info(
            "http.named_tokens: %d from %s",
            len(named),
            tokens_file,
            extra={"event": "http.named_tokens", "tokens": len(named), "expired": sum(t.expired() for t in named)},
        )
        if token is not None:
            source = "MCPOWER_TOKEN" if s.token_file is None else f"the token file {s.token_file}"
            check_apart(token, named, source, tokens_file)
    if oauth is None:  # with OAuth every request needs a token
        check_exposure(s.http_host, token, tokens_file)
    transport_security(s.http_host, s.allow_hosts, s.allow_origins)  # refuses a malformed origin
    trusted_networks(s.http_trusted_proxies)  # refuses a malformed proxy address
    return HttpOptions(
        oauth=oauth,
        host=s.http_host,
        port=s.http_port,
        token=token,
        tokens_file=tokens_file,
        allow_hosts=s.allow_hosts,
        allow_origins=s.allow_origins,
        max_body_bytes=int(s.http_max_body_mb * 1024 * 1024),
        call_timeout=s.http_call_timeout,
        max_sessions=s.http_max_sessions,
        max_sessions_per_caller=s.http_max_sessions_per_caller,
        max_streams_per_caller=s.http_max_streams_per_caller,
        session_idle=s.http_session_idle,
        threads=s.worker_threads,
        max_connections=s.http_max_connections,
        max_connections_per_address=s.http_max_connections_per_address,
        trusted_proxies=s.http_trusted_proxies,
        web=s.web,
        rate_limits=RateLimits(s.http_rate_limit, s.http_rate_burst, s.http_max_searches),
        metrics=s.http_metrics,
        audit_queries=s.audit_queries,
    )
