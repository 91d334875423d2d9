"""Server logging: everything to stderr (stdout is the protocol under stdio), as JSON lines or text.

Log values come from outside (a JWT's header, a client's arguments, a document's path), and a log
is read in a terminal: a control character written raw can move the cursor, rewrite the screen or
the window's title (``ESC ] 0 ;``), and a newline can forge a record. So every control character
(C0, DEL, C1), every direction-changing and invisible character (bidi embeddings, overrides,
isolates and marks; zero-width characters; line and paragraph separators) is written as an escape:
``\x1b``, ``\u202e`` in text logs, JSON's ``\u001b`` in JSON lines (JSON escapes C0 by itself, not
DEL, C1 or the rest). A traceback keeps its line breaks, each of its lines indented, so none of
them can pass for a record.
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from typing import Any

# C0 and C1 controls and DEL; then the characters that change direction or hide (as web/text.py
# marks them on the pages), the line and paragraph separators, and Unicode's invisible tags.
_UNSAFE = re.compile(
    "[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u115f\u1160\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\u3164\ufe00-\ufe0f\ufeff\ufff9-\ufffb\U000e0000-\U000e007f]"
)
# What a traceback's lines are indented by in text logs.
_TRACE_INDENT = "    "


_SHORT = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _as_text_escape(m: re.Match[str]) -> str:
    char = m.group(0)
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _as_json_escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes a character past the BMP as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_text(text: str) -> str:
    """``text`` with every unsafe character (the module's docstring) written as a Python-style escape."""
    return _UNSAFE.sub(_as_text_escape, text)


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
        if record.stack_info:
            data["stack"] = self.formatStack(record.stack_info)
        # Inside JSON strings only (keys and values), so the escapes are JSON's and the line still parses.
        return _UNSAFE.sub(_as_json_escape, json.dumps(data, ensure_ascii=False, default=str))


class TextFormatter(logging.Formatter):
    """One line per record for people: time, level, logger, message, then every detail as key=value;
    every unsafe character escaped (the module's docstring); a traceback on the lines after, indented."""

    def format(self, record: logging.LogRecord) -> str:
        head = f"{self.formatTime(record)} {record.levelname} {record.name}: {record.getMessage()}"
        details = {k: v for k, v in record.__dict__.items() if k not in JsonFormatter._STD and k != "event"}
        line = escape_text(" ".join([head, *(f"{k}={_text(v)}" for k, v in details.items())]))
        trace = [self.formatException(record.exc_info)] if record.exc_info else []
        if record.stack_info:
            trace.append(self.formatStack(record.stack_info))
        for block in trace:
            line += "".join(f"\n{_TRACE_INDENT}{escape_text(part)}" for part in block.rstrip("\n").split("\n"))
        return line


def _text(value: object) -> str:
    if isinstance(value, list | tuple):
        return "[" + ",".join(_text(v) for v in value) + "]"
    text = str(value)
    if text and not any(c.isspace() or c in '"=' for c in text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'  # its controls are escaped with the line


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
