"""The MCPOWER_* environment variables, read raw: their names, and the default cache folder; and the
variables that keep dependencies from recording or sending telemetry.

config.py validates them into Settings, for everything that runs after pydantic has been
imported. The readers that run before, the query model's head start of a cold `mcpower search`
(cli/preload.py) and :func:`disable_telemetry`, read the values they need here; Settings checks
them later.
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


def cpus() -> int:
    """CPUs this process may run on (the affinity mask honours taskset and container cpusets)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# What dependencies record about this machine or send unless told not to, and what tells each.
TELEMETRY_OFF = {
    # onnxruntime 1.29+ (Linux, macOS): a device id and process, session and model events queued in
    # ~/.cache/Microsoft/DeveloperTools/.onnxruntime for upload, from the moment it is imported.
    "ORT_DISABLE_TELEMETRY": "1",
    # huggingface_hub (and transformers, sentence-transformers through it): usage in hub requests.
    "HF_HUB_DISABLE_TELEMETRY": "1",
}
# Values of MCPOWER_ALLOW_TELEMETRY that allow it (pydantic's true words: Settings accepts the same).
_YES = frozenset({"1", "true", "t", "yes", "y", "on"})


def telemetry_allowed() -> bool:
    """Whether the operator lets dependencies keep their own telemetry (MCPOWER_ALLOW_TELEMETRY=1)."""
    return (raw("allow_telemetry") or "").strip().lower() in _YES


def disable_telemetry() -> None:
    """Turn off every dependency's telemetry (:data:`TELEMETRY_OFF`, whatever those variables said)
    unless the operator allows it. Run before any of them is imported, by every entry point: the
    command's ``main`` and the embedding package (the library's way to onnxruntime and the hub).
    Child processes inherit it."""
    if not telemetry_allowed():
        os.environ.update(TELEMETRY_OFF)
