"""The MCPOWER_* environment variables, read raw: their names, and the default cache folder.

config.py validates them into Settings, for everything that runs after pydantic has been
imported. The one reader that runs before, the query model's head start of a cold `mcpower search`
(cli/preload.py), reads the two values it needs here and checks them against Settings later.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_PREFIX = "MCPOWER_"


def variable(setting: str) -> str:
    """The environment variable of a setting: ``cache_dir`` -> ``MCPOWER_CACHE_DIR``."""
    return ENV_PREFIX + setting.upper()


def raw(setting: str) -> str | None:
    """The setting's variable as it is set, unchecked; None when unset."""
    return os.environ.get(variable(setting))


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/mcpower``, or ``~/.cache/mcpower``: where derived files (ONNX exports) are kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mcpower"
