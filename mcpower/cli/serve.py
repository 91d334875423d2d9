"""`mcpower serve`: the MCP server (stdio or Streamable HTTP), or the snippet an MCP client needs for it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mcpower.cli import serve_config
from mcpower.cli.common import DatasetsDir, MilvusUri, Refresh, WatchDebounce, settings
from mcpower.cli.serve_oauth import Audience, DatasetsClaim, Jwks, OAuthIssuer, PublicUrl
from mcpower.cli.serving import run_server
from mcpower.cli.serving import start_watcher as start_watcher  # where tests and callers found it
from mcpower.cli.sharing import AuditLogFile, AuditQueries, MaxSearches, MetricsFlag, RateBurst, RateLimit

_HTTP_ONLY = (
    "--host",
    "--port",
    "--token-file",
    "--tokens-file",
    "--allow-origin",
    "--allow-host",
    "--oauth-issuer",
    "--jwks",
    "--audience",
    "--public-url",
    "--datasets-claim",
    "--web/--no-web",
    "--rate-limit",
    "--rate-burst",
    "--max-searches",
    "--metrics",
)


def serve(
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve MCP over stdin/stdout (the default).")] = False,
    http: Annotated[
        bool, typer.Option("--http", help="Serve MCP over Streamable HTTP at /mcp, for many clients at once.")
    ] = False,
    host: Annotated[
        str | None,
        typer.Option(
            metavar="ADDRESS",
            help="--http: address to listen on [env MCPOWER_HTTP_HOST; default 127.0.0.1].",
            show_default=False,
        ),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(
            metavar="N",
            help="--http: port, 0 for any free one [env MCPOWER_HTTP_PORT; default 8765].",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="--http: require the bearer token in this file, which reads every dataset [env MCPOWER_TOKEN_FILE; "
            "or the token itself in MCPOWER_TOKEN]. Off loopback a token is required: this one or --tokens-file.",
            show_default=False,
        ),
    ] = None,
    tokens_file: Annotated[
        Path | None,
        typer.Option(
            metavar="PATH",
            help="--http: accept the named tokens in this file, each reading only its datasets "
            "(`mcpower token add`) [env MCPOWER_TOKENS_FILE; default DATASETS_DIR/tokens.json if it exists].",
            show_default=False,
        ),
    ] = None,
    allow_origin: Annotated[
        list[str] | None,
        typer.Option(
            metavar="URL",
            help="--http: a browser origin allowed to call the server besides loopback ones, e.g. "
            "https://app.example.com; repeatable [env MCPOWER_ALLOW_ORIGINS, comma-separated].",
            show_default=False,
        ),
    ] = None,
    allow_host: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME",
            help="--http: a name clients reach the server by (Host header) besides loopback ones and --host; "
            "repeatable [env MCPOWER_ALLOW_HOSTS, comma-separated].",
            show_default=False,
        ),
    ] = None,
    oauth_issuer: OAuthIssuer = None,
    jwks: Jwks = None,
    audience: Audience = None,
    public_url: PublicUrl = None,
    datasets_claim: DatasetsClaim = None,
    web: Annotated[
        bool | None,
        typer.Option(
            "--web/--no-web",
            help="--http: serve the web pages for people at / beside /mcp (docs/web.md) [env MCPOWER_WEB; default on].",
            show_default=False,
        ),
    ] = None,
    rate_limit: RateLimit = None,
    rate_burst: RateBurst = None,
    max_searches: MaxSearches = None,
    metrics: MetricsFlag = None,
    audit_queries: AuditQueries = None,
    audit_log: AuditLogFile = None,
    datasets_dir: DatasetsDir = None,
    milvus_uri: MilvusUri = None,
    watch: Annotated[
        bool | None,
        typer.Option(
            "--watch",
            help="Re-ingest datasets when files in their source folders change [env MCPOWER_WATCH].",
            show_default=False,
        ),
    ] = None,
    watch_debounce: WatchDebounce = None,
    refresh: Refresh = None,
    watch_follow_symlinks: Annotated[
        bool | None,
        typer.Option(
            "--watch-follow-symlinks",
            help="With --watch: follow symlinks out of a source folder for datasets ingested with "
            "--follow-symlinks (off: a manifest cannot turn it on) [env MCPOWER_WATCH_FOLLOW_SYMLINKS].",
            show_default=False,
        ),
    ] = None,
    watch_code: Annotated[
        bool | None,
        typer.Option(
            "--watch-code/--no-watch-code",
            help="With --watch: read source code for datasets ingested with --code or --include '*.py', "
            "as they were built; --no-watch-code reads documents only [env MCPOWER_WATCH_CODE; default on].",
            show_default=False,
        ),
    ] = None,
    log_level: Annotated[
        str | None, typer.Option(help="debug, info, warning or error [env MCPOWER_LOG_LEVEL; default info].")
    ] = None,
    log_format: Annotated[str | None, typer.Option(help="json or text [env MCPOWER_LOG_FORMAT; default json].")] = None,
    tool_names: Annotated[
        str | None,
        typer.Option(
            help="default (knowledge_search ...) or seed (the original system's knowledge.search ...) "
            "[env MCPOWER_TOOL_NAMES; default default].",
            show_default=False,
        ),
    ] = None,
    print_config: Annotated[
        str | None,
        typer.Option(
            "--print-config",
            help="Print the config snippet for an MCP client and exit: claude-desktop, claude-code, vscode, "
            "cursor or inspector; it starts the server with this command's other options "
            "(with --http: the URL form, the token as a placeholder).",
        ),
    ] = None,
) -> None:
    """Run the MCP server: over stdio (started by MCP clients), or over HTTP with --http.

    With --watch, datasets whose source folder was recorded at ingest are re-ingested as their
    files change; searches keep answering from the previous version meanwhile.

    Logs go to stderr as JSON lines.
    """
    if stdio and http:
        raise typer.BadParameter("--stdio and --http are mutually exclusive: choose one transport")
    values = (
        host,
        port,
        token_file,
        tokens_file,
        allow_origin,
        allow_host,
        oauth_issuer,
        jwks,
        audience,
        public_url,
        datasets_claim,
        web,
        rate_limit,
        rate_burst,
        max_searches,
        metrics,
    )
    given = [name for name, value in zip(_HTTP_ONLY, values) if value is not None and value != []]
    if given and not http:
        raise typer.BadParameter(
            f"{', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to --http only; add --http"
        )
    s = settings(
        datasets_dir=datasets_dir,
        milvus_uri=milvus_uri,
        log_level=log_level,
        log_format=log_format,
        tool_names=tool_names,
        http_host=host,
        http_port=port,
        token_file=token_file,
        tokens_file=tokens_file,
        allow_origins=allow_origin or None,
        allow_hosts=allow_host or None,
        oauth_issuer=oauth_issuer,
        oauth_jwks=jwks,
        oauth_audience=audience,
        public_url=public_url,
        oauth_datasets_claim=datasets_claim,
        web=web,
        watch=watch,
        watch_debounce=watch_debounce,
        refresh=refresh,
        watch_follow_symlinks=watch_follow_symlinks,
        watch_code=watch_code,
        http_rate_limit=rate_limit,
        http_rate_burst=rate_burst,
        http_max_searches=max_searches,
        http_metrics=metrics,
        audit_queries=audit_queries,
        audit_log=audit_log,
    )
    if print_config is not None:
        serve_config.print_config(print_config, s, http)
        return
    run_server(s, http)
