"""Server logging: everything to stderr (stdout is the protocol under stdio), as JSON lines or text."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, event, message and any `extra` fields."""

    _STD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
        }
        data.update({k: v for k, v in record.__dict__.items() if k not in self._STD})
        data.setdefault("event", record.getMessage().split(" ", 1)[0])
        data["message"] = record.getMessage()
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Send all logs to stderr; must run before MCPServer is built (it configures the root logger too)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # libraries stay quiet unless something is wrong
    logging.getLogger("mcpower").setLevel(level.upper())
