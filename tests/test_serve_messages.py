"""What `mcpower serve` tells a person at a terminal, and the text log format's details (issue 19, item 10)."""

from __future__ import annotations

import io
import logging
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from server_fixtures import subprocess_env, write_launcher

from mcpower.server.logging import TerminalNotes, TextFormatter


def record(msg: str, **extra: object) -> logging.LogRecord:
    r = logging.LogRecord("mcpower", logging.INFO, __file__, 1, msg, (), None)
    r.__dict__.update(extra)
    return r


def test_the_text_format_keeps_every_detail() -> None:
    line = TextFormatter().format(
        record(
            "server.startup",
            event="server.startup",
            transport="http",
            datasets_dir="/home/u/My Notes",
            datasets=["docs", "notes"],
            watch=False,
        )
    )
    assert "INFO mcpower: server.startup" in line
    assert 'transport=http datasets_dir="/home/u/My Notes" datasets=[docs,notes] watch=False' in line
    assert "event=" not in line  # it is the message already


def test_terminal_notes_say_what_the_server_waits_for() -> None:
    out = io.StringIO()
    notes = TerminalNotes(out)
    assert notes.filter(record("server.startup", event="server.startup", transport="stdio"))
    assert notes.filter(record("server.startup", event="server.startup", transport="http"))  # said when listening
    assert notes.filter(record("server.listening", event="server.listening", url="http://127.0.0.1:8765/mcp"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("mcpower is serving MCP over stdin/stdout and waits for a client; this is normal.")
    assert "--print-config claude-desktop" in lines[0]
    assert lines[1] == "mcpower is listening on http://127.0.0.1:8765/mcp (Ctrl-C stops)"
    assert len(lines) == 2


def read_until(fd: int, text: str, deadline: float) -> str:
    seen = b""
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            break
        try:
            chunk = os.read(fd, 4096)
        except OSError:  # the terminal closed: the process ended
            break
        if not chunk:
            break
        seen += chunk
    return seen.decode(errors="replace")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["serve", "--stdio"], "waits for a client; this is normal"),
        (["serve", "--http", "--port", "0"], "mcpower is listening on http://127.0.0.1:"),
    ],
)
def test_a_server_started_in_a_terminal_says_so_in_plain_words(tmp_path: Path, args: list[str], said: str) -> None:
    launcher = write_launcher(tmp_path)
    main, terminal = pty.openpty()
    with subprocess.Popen(
        [sys.executable, str(launcher), *args, "--datasets-dir", str(tmp_path / "datasets")],
        stdin=subprocess.PIPE,  # held open: a stdio server waits on it
        stdout=subprocess.DEVNULL,
        stderr=terminal,
        env=subprocess_env(),
    ) as proc:
        os.close(terminal)
        try:
            text = read_until(main, said, time.monotonic() + 120)
        finally:
            proc.terminate()
            proc.wait(30)
            os.close(main)
    assert said in text, text
