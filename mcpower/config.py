"""Settings shared by the CLI and the server: CLI flag, then MCPOWER_* environment, then default.

This is the one module that reads the environment. Only `cli.py` and the server build Settings;
the core takes explicit arguments (and falls back to :func:`default_cache_dir` when a library
caller gives no cache folder).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from mcpower.defaults import (
    DEFAULT_BACKEND,
    DEFAULT_DATASETS_DIR,
    DEFAULT_HTTP_HOST,
    DEFAULT_HTTP_PORT,
    DEFAULT_MAX_FILE_MB,
    DEFAULT_MODEL,
    DEFAULT_WORKER_THREADS,
    Backend,
)


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mcpower``, or ``~/.cache/mcpower``: where derived files (ONNX exports) are kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower"


class Settings(BaseSettings):
    """Everything a user can configure, read from MCPOWER_* variables."""

    model_config = SettingsConfigDict(env_prefix="MCPOWER_", extra="ignore")

    datasets_dir: Path = Field(DEFAULT_DATASETS_DIR, description="where datasets live")
    model: str = Field(DEFAULT_MODEL, description="embedding model for new datasets")
    backend: Backend = Field(DEFAULT_BACKEND, description="ingest embedding backend")
    cache_dir: Path = Field(default_factory=default_cache_dir, description="where derived files are cached")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    tool_names: Literal["default", "seed"] = "default"
    max_file_mb: float = Field(DEFAULT_MAX_FILE_MB, gt=0, description="ingest skips files larger than this")
    allowed_models: str = Field(
        "", description="comma-separated models (names or absolute folders) datasets may name, besides the packaged one"
    )
    worker_threads: int = Field(DEFAULT_WORKER_THREADS, ge=1, le=64, description="threads running searches")

    # serve --http
    http_host: str = Field(DEFAULT_HTTP_HOST, min_length=1, description="address to listen on")
    http_port: int = Field(DEFAULT_HTTP_PORT, ge=0, le=65535, description="port (0: any free one)")
    token: SecretStr | None = Field(None, description="bearer token clients must send")
    token_file: Path | None = Field(None, description="file holding the bearer token")
    allow_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="browser origins allowed besides loopback ones (comma-separated)"
    )
    allow_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Host header names allowed besides loopback ones (comma-separated)"
    )
    http_max_body_mb: float = Field(4.0, gt=0, le=1024, description="largest request body accepted")
    http_call_timeout: float = Field(60.0, gt=0, description="seconds a request may take before it is answered TIMEOUT")
    http_max_sessions: int = Field(100, ge=1, description="open MCP sessions at once; more get 503")
    http_session_idle: float = Field(1800.0, gt=0, description="seconds an idle session is kept")

    @field_validator("allow_origins", "allow_hosts", mode="before")
    @classmethod
    def _comma_separated(cls, v: object) -> object:
        return [part.strip() for part in v.split(",") if part.strip()] if isinstance(v, str) else v

    def query_models(self) -> list[str]:
        """The models a dataset's manifest may name: the allowed ones and the operator's own ingest model."""
        names = [m.strip() for m in self.allowed_models.split(",") if m.strip()] + [self.model]
        return [str(Path(n).expanduser().resolve()) if Path(n).expanduser().is_dir() else n for n in names]
