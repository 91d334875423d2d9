"""Settings shared by the CLI and the server: CLI flag, then MCPOWER_* environment, then default.

This module and env.py (the variables' names and raw values) are the only ones that read the
environment. Only the CLI and the server build Settings; the core takes explicit arguments (and
falls back to :func:`default_cache_dir` when a library caller gives no cache folder). Plain pydantic rather than pydantic-settings: reading a few
variables does not need the 0.1 s that package adds to every cold `mcpower search`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from mcpower.defaults import (
    DEFAULT_DATASETS_DIR,
    DEFAULT_EMBEDDING_STORE_MB,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_MAX_CONNECTIONS,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MODEL,
    DEFAULT_WATCH_DEBOUNCE,
    DEFAULT_WORKER_THREADS,
    Backend,
    is_model_path,
)
from mcpower.env import default_cache_dir, variable
from mcpower.errors import InvalidSettingError

__all__ = ["FLAGS", "Settings", "default_cache_dir"]

# The flags whose names are not the setting's own (`--port` sets http_port).
FLAGS = {
    "http_host": "--host",
    "http_port": "--port",
    "allow_origins": "--allow-origin",
    "allow_hosts": "--allow-host",
    "http_rate_limit": "--rate-limit",
    "http_rate_burst": "--rate-burst",
    "http_max_searches": "--max-searches",
    "http_metrics": "--metrics",
    "oauth_jwks": "--jwks",
    "oauth_audience": "--audience",
    "oauth_datasets_claim": "--datasets-claim",
}


class Settings(BaseModel):
    """Everything a user can configure; each field ``name`` is read from ``MCPOWER_NAME``."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    datasets_dir: Path = Field(DEFAULT_DATASETS_DIR, description="where datasets live")
    # None: a plain ingest chooses by the documents' languages (mcpower/model_choice.py).
    model: str | None = Field(None, description="embedding model for new datasets")
    # None: an ingest keeps the previous version's backend, else DEFAULT_BACKEND (ingest_types.py).
    backend: Backend | None = Field(None, description="ingest embedding backend")
    cache_dir: Path = Field(default_factory=default_cache_dir, description="where derived files are cached")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    tool_names: Literal["default", "seed"] = "default"
    max_file_mb: float = Field(DEFAULT_MAX_FILE_MB, gt=0, description="ingest skips files larger than this")
    embedding_store_mb: float = Field(
        DEFAULT_EMBEDDING_STORE_MB,
        ge=0,
        description="MB the embedding store may keep in the cache folder, so an interrupted ingest resumes (0: none)",
    )
    watch: bool = Field(False, description="serve: re-ingest datasets as their source folders change")
    watch_debounce: float = Field(
        DEFAULT_WATCH_DEBOUNCE, ge=0.05, le=60, description="seconds of quiet after a change before re-ingesting"
    )
    # What a manifest may ask the watcher for: a manifest is data, so these are the operator's to allow.
    watch_follow_symlinks: bool = Field(
        False,
        description="serve --watch: follow symlinks out of a folder, for datasets ingested with --follow-symlinks",
    )
    refresh: float = Field(
        3600.0,
        ge=0,
        description="serve --watch: seconds between re-fetches of datasets ingested from a site or a repository "
        "(0: never)",
    )
    watch_code: bool = Field(
        True, description="serve --watch: read source code, for datasets ingested with --include '*.py' (or --code)"
    )
    milvus_uri: str = Field(
        "", description="a Milvus database for datasets: a milvus-lite file (x.db) or http(s)://host:19530"
    )
    milvus_token: str = Field("", description="credentials for a Milvus server: user:password or an API key")
    allowed_models: str = Field(
        "", description="comma-separated models (names or absolute folders) datasets may name, besides the packaged one"
    )
    worker_threads: int = Field(DEFAULT_WORKER_THREADS, ge=1, le=64, description="threads running searches")
    allow_telemetry: bool = Field(
        False,
        description="let dependencies (onnxruntime, Hugging Face) record and send their telemetry; read by env.py",
    )

    # serve --http
    http_host: str = Field(DEFAULT_HTTP_HOST, min_length=1, description="address to listen on")
    http_port: int = Field(DEFAULT_HTTP_PORT, ge=0, le=65535, description="port (0: any free one)")
    token: SecretStr | None = Field(None, description="bearer token clients must send")
    token_file: Path | None = Field(None, description="file holding the bearer token")
    tokens_file: Path | None = Field(
        None,
        description="named tokens, each limited to some datasets (`mcpower token add`); "
        "default: tokens.json in the datasets folder, if it exists",
    )
    allow_origins: list[str] = Field(
        default_factory=list, description="browser origins allowed besides loopback ones (comma-separated)"
    )
    allow_hosts: list[str] = Field(
        default_factory=list, description="Host header names allowed besides loopback ones (comma-separated)"
    )
    # serve --http, OAuth resource-server mode (server/auth/oauth.py)
    oauth_issuer: str | None = Field(None, min_length=1, description="the issuer of the JWT access tokens accepted")
    oauth_jwks: str | None = Field(None, min_length=1, description="the issuer's key set: URL or file")
    oauth_audience: str | None = Field(None, min_length=1, description="the aud tokens must carry")
    public_url: str | None = Field(None, min_length=1, description="the URL clients reach /mcp at")
    oauth_datasets_claim: str | None = Field(None, min_length=1, description="a claim listing dataset patterns")
    http_max_body_mb: float = Field(4.0, gt=0, le=1024, description="largest request body accepted")
    http_call_timeout: float = Field(60.0, gt=0, description="seconds a request may take before it is answered TIMEOUT")
    http_max_sessions: int = Field(100, ge=1, description="open MCP sessions at once; more get 503")
    http_max_sessions_per_caller: int | None = Field(
        None, ge=1, description="open MCP sessions each caller may hold (default: a quarter of the cap)"
    )
    http_max_streams_per_caller: int | None = Field(
        None, ge=1, description="streams each caller may hold open (default: its session share)"
    )
    http_session_idle: float = Field(1800.0, gt=0, description="seconds an idle session is kept")
    http_max_connections: int = Field(
        DEFAULT_HTTP_MAX_CONNECTIONS, ge=1, le=65536, description="open connections at once; more are closed unread"
    )
    http_max_connections_per_address: int | None = Field(
        None, ge=1, le=65536, description="open connections from one client address (default: a quarter of the cap)"
    )
    http_trusted_proxies: list[str] = Field(
        default_factory=list,
        description="reverse proxies (addresses or networks, comma-separated) whose X-Forwarded-For names the client",
    )
    # Fairness between callers (server/auth/ratelimit.py; docs/team.md): an agent makes a few calls a
    # second at its busiest, a runaway loop hundreds.
    http_rate_limit: float = Field(
        20.0, ge=0, description="requests a second each caller may make on average (0: no limit)"
    )
    http_rate_burst: int = Field(100, ge=1, description="requests each caller may make at once, above the rate")
    http_max_searches: int = Field(16, ge=0, description="searches each caller may have running at once (0: no limit)")
    http_metrics: bool = Field(True, description="serve Prometheus metrics at /metrics (to a metrics-scoped token)")
    audit_queries: bool = Field(False, description="write each query's text into the audit log")
    audit_log: Path | None = Field(None, description="also append the audit log's lines to this file")
    web: bool = Field(True, description="serve --http: the web pages for people at / (docs/web.md)")

    @field_validator("allow_origins", "allow_hosts", "http_trusted_proxies", mode="before")
    @classmethod
    def _comma_separated(cls, v: object) -> object:
        return [part.strip() for part in v.split(",") if part.strip()] if isinstance(v, str) else v

    @classmethod
    def load(cls, **flags: Any) -> Settings:
        """The flags given (None: not given) over the MCPOWER_* variables over the defaults.

        Raises:
            InvalidSettingError: a value breaks its setting's rule (named as the flag or variable it came from).
        """
        values = {name: os.environ[cls.variable(name)] for name in cls.model_fields if cls.variable(name) in os.environ}
        given = {name: value for name, value in flags.items() if value is not None}
        try:
            return cls.model_validate({**values, **given})
        except ValidationError as e:
            err = e.errors()[0]
            name = str(err["loc"][0]) if err["loc"] else "settings"
            source = FLAGS.get(name, f"--{name.replace('_', '-')}") if name in given else cls.variable(name)
            raise InvalidSettingError(source, f"{err['msg']} (got {str(err.get('input'))[:60]!r})") from None

    @staticmethod
    def variable(name: str) -> str:
        return variable(name)

    @property
    def query_model(self) -> str:
        """The operator's own model: MCPOWER_MODEL, else the packaged default (what a search preloads)."""
        return self.model or DEFAULT_MODEL

    def query_models(self) -> list[str]:
        """The models a dataset's manifest may name: the allowed ones and the operator's own ingest model."""
        names = [m.strip() for m in self.allowed_models.split(",") if m.strip()] + [self.query_model]
        # Folders as absolute paths, as manifests name them; a hub name stays a name, even where the
        # working folder holds a folder of that name.
        return [str(Path(n).expanduser().resolve()) if is_model_path(n) else n for n in names]
