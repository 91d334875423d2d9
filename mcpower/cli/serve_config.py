"""`mcpower serve --print-config`: the snippet an MCP client needs for the server the settings describe."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from mcpower.cli.common import no_datasets
from mcpower.cli.serve_http import tokens_file_in_use
from mcpower.config import Settings
from mcpower.errors import McpowerError

if TYPE_CHECKING:
    from mcpower.server.clients import Launch


def print_config(client: str, s: Settings, http: bool) -> None:
    """The snippet ``client`` needs for the server these settings describe, every option included."""
    from mcpower.server.clients import (
        CLIENT_TOKEN_VARIABLE,
        CLIENTS,
        OAUTH_CLIENTS,
        client_config,
        http_client_config,
        token_note,
    )

    if client not in CLIENTS:
        raise typer.BadParameter(f"{client!r} is not one of {', '.join(CLIENTS)}", param_hint="'--print-config'")
    signs_in = http and s.oauth_issuer is not None and client in OAUTH_CLIENTS
    if http:
        url = _oauth_url(s) if s.oauth_issuer is not None else None
        token = _token_required(s) and not signs_in
        try:
            text = http_client_config(client, s.http_host, s.http_port, token, s.allow_hosts, url)
        except McpowerError as e:  # a client that cannot reach HTTP servers: a usage error
            raise typer.BadParameter(e.message, param_hint="'--print-config'") from None
    else:
        text = client_config(client, _launch(s))
    typer.echo(text)
    if signs_in:
        typer.echo(
            f"note: no Authorization header: {client} signs in at {s.oauth_issuer} itself (MCP authorization); "
            "to send a token instead, add the header as docs/clients.md shows",
            err=True,
        )
    elif http and s.oauth_issuer is not None:
        typer.echo(f"note: {CLIENT_TOKEN_VARIABLE} must hold an access token from {s.oauth_issuer} for {url}", err=True)
    elif http and token:
        typer.echo(token_note(client), err=True)
    if s.milvus_token and not http:
        typer.echo(
            "note: MCPOWER_MILVUS_TOKEN is a secret and is not in the snippet: add it to the client's env", err=True
        )
    if not http and not s.milvus_uri and not any(s.datasets_dir.expanduser().glob("*/manifest.json")):
        typer.echo(f"warning: {no_datasets(s.datasets_dir)}", err=True)


def _oauth_url(s: Settings) -> str:
    """The URL OAuth clients must use: the resource tokens are issued for (``--public-url``, else the listening one)."""
    from mcpower.server.auth.oauth import OAuthOptions, resource_url
    from mcpower.server.clients import http_url

    assert s.oauth_issuer is not None
    return resource_url(OAuthOptions(s.oauth_issuer, public_url=s.public_url), http_url(s.http_host, s.http_port))


def _launch(s: Settings) -> Launch:
    """How a client starts `serve --stdio` as these settings say: flags for the server's own options,
    the environment for folders and models (absolute, since a client starts it from anywhere)."""
    from mcpower.server.clients import Launch, this_mcpower

    default = Settings()
    env = {Settings.variable("datasets_dir"): str(s.datasets_dir.expanduser().resolve())}
    if s.milvus_uri:  # a milvus-lite file is a path: absolute, or the client would create one where it starts
        uri = s.milvus_uri if "://" in s.milvus_uri else str(Path(s.milvus_uri).expanduser().resolve())
        env[Settings.variable("milvus_uri")] = uri
    for name in ("model", "allowed_models", "cache_dir", "worker_threads"):
        value = getattr(s, name)
        if value != getattr(default, name):
            env[Settings.variable(name)] = str(value.expanduser().resolve() if isinstance(value, Path) else value)
    command, *first = this_mcpower()
    args = [*first, "serve", "--stdio"] + (["--watch"] if s.watch else [])
    if s.watch_debounce != default.watch_debounce:
        args += ["--watch-debounce", f"{s.watch_debounce:g}"]
    for name in ("tool_names", "log_level", "log_format"):
        if getattr(s, name) != getattr(default, name):
            args += [f"--{name.replace('_', '-')}", str(getattr(s, name))]
    return Launch(command, tuple(args), env)


def _token_required(s: Settings) -> bool:
    from mcpower.server.auth.access import is_loopback

    named = tokens_file_in_use(s) is not None
    authenticated = s.token is not None or s.token_file is not None or named or s.oauth_issuer is not None
    return authenticated or not is_loopback(s.http_host)
