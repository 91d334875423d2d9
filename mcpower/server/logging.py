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


class TextFormatter(logging.Formatter):
    """One line per record for people: time, level, logger, message, then every detail as key=value."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        details = {k: v for k, v in record.__dict__.items() if k not in JsonFormatter._STD and k != "event"}
        return " ".join([line, *(f"{k}={_text(v)}" for k, v in details.items())])


def _text(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + ",".join(_text(v) for v in value) + "]"
    text = str(value)
    return json.dumps(text, ensure_ascii=False) if not text or any(c.isspace() or c in '"=' for c in text) else text


class TerminalNotes(logging.Filter):
    """On a terminal, says in plain words what the moments a person waits for mean (the log
    records stay as they are, for programs): that a stdio server waits for its client, where an
    HTTP server listens."""

    def __init__(self, stream: Any) -> None:
        super().__init__()
        self.stream = stream

    def filter(self, record: logging.LogRecord) -> bool:
        event = getattr(record, "event", "")
        if event == "server.startup" and getattr(record, "transport", "") == "stdio":
            self._say(
                "mcpower is serving MCP over stdin/stdout and waits for a client; this is normal. MCP clients "
                "start this command themselves: `mcpower serve --print-config claude-desktop` prints the "
                "snippet for one. Ctrl-C stops."
            )
        elif event == "server.listening":
            self._say(f"mcpower is listening on {getattr(record, 'url', '?')} (Ctrl-C stops)")
        return True

    def _say(self, line: str) -> None:
        self.stream.write(line + "\n")
        self.stream.flush()


def configure_logging(level: str = "info", fmt: str = "json") -> None:
    """Send all logs to stderr; must run before MCPServer is built (it configures the root logger too).

    On a terminal, a plain line also says what the server waits for (:class:`TerminalNotes`).
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    if sys.stderr.isatty():
        handler.addFilter(TerminalNotes(sys.stderr))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)  # libraries stay quiet unless something is wrong
    logging.getLogger("mcpower").setLevel(level.upper())
