"""What a command tells a person on stderr: warnings as ``warning: …``, and mcpower's notices
(information worth seeing, such as a model's first export) as plain lines. No typer here: a
search's head start (preload.py) sets it up before any command is imported, so a notice logged
by the model loading in its thread is not lost.
"""

from __future__ import annotations

import logging
import sys


def setup_logging(verbose: bool = False) -> None:
    """Log records to stderr for a person: warnings as ``warning: …``, and mcpower's notices
    (information worth seeing, such as the first model export) as plain lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_CliFormatter())
    if not verbose:
        handler.addFilter(lambda r: r.levelno >= logging.WARNING or bool(getattr(r, "notice", False)))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
    if not verbose:
        logging.getLogger("mcpower").setLevel(logging.INFO)  # its notices reach the handler's filter


class _CliFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        if record.levelno < logging.WARNING:
            return message
        return f"{record.levelname.lower()}: {message}"
