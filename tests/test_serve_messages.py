"""What `mcpower serve` tells a person at a terminal, and the log formats' details (issue 19, item 10;
issue 26, item 7: control characters)."""

from __future__ import annotations

import contextlib
import http.client
import io
import json
import logging
import os
import pty
import queue
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from oauth_fixtures import Issuer, unsigned
from server_fixtures import subprocess_env, write_launcher

from mcpower.server.logging import JsonFormatter, TerminalNotes, TextFormatter


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


# ---------------------------------------------------------------- control characters in the logs (issue 26, item 7)

# What a hostile value may carry: terminal escapes (a title, a clear screen, an 8-bit CSI), a forged
# record after a newline, direction overrides, zero-width and invisible characters.
HOSTILE = "\x1b]0;PWNED\x07\x1b[2J\x9b31m\x7f\r\n2026-01-01 00:00:00,000 INFO mcpower: forged\u202e\u2066\u200b\u2028\ufeff\U000e0041"
UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\U000e0000-\U000e007f]"
)


def hostile_record() -> logging.LogRecord:
    try:
        raise ValueError(f"bad key {HOSTILE}")
    except ValueError:
        r = logging.LogRecord(
            "mcpower.server", logging.INFO, __file__, 1, "oauth.refused: %s", (HOSTILE,), sys.exc_info()
        )
    r.__dict__.update(event="oauth.refused", kid=HOSTILE, alg=[HOSTILE, "RS256"], note=f"two words {HOSTILE}")
    return r


def test_text_logs_escape_every_unsafe_character_in_every_field() -> None:
    text = TextFormatter().format(hostile_record())

    first, *trace = text.split("\n")
    assert not UNSAFE.search(first) and all(not UNSAFE.search(line) for line in trace)
    assert first.count(r"\x1b]0;PWNED\x07\x1b[2J\x9b31m\x7f\r\n2026-01-01") == 4  # message, kid, alg, note
    assert r"\u202e\u2066\u200b\u2028\ufeff\U000e0041" in first
    assert trace and all(line.startswith("    ") for line in trace)  # no traceback line passes for a record
    assert any(line.startswith(r"    ValueError: bad key \x1b]0;PWNED") for line in trace)
    assert trace[-1].startswith("    2026-01-01 00:00:00,000 INFO mcpower: forged")  # the forged "record", indented


def test_json_logs_escape_what_json_leaves_raw_and_still_parse() -> None:
    line = JsonFormatter().format(hostile_record())

    assert not UNSAFE.search(line)  # JSON escapes C0 itself; DEL, C1, bidi and invisibles are escaped too
    parsed = json.loads(line)
    assert parsed["kid"] == HOSTILE and parsed["alg"] == [HOSTILE, "RS256"]  # the values, exactly
    assert "ValueError: bad key" in parsed["exception"]


@pytest.mark.slow  # a real server and an issuer; the two tests above check every field of the format
def test_a_jwt_header_of_escape_sequences_is_logged_escaped_by_a_real_server(tmp_path: Path) -> None:
    """The attack as it was found: no token, a JWT whose `kid` rewrites the terminal, against
    `serve --http --log-format text --oauth-issuer`; the refusal is logged with the kid escaped."""
    issuer = Issuer()
    issuer.add_key("rsa", kid="rsa-1")
    argv = [sys.executable, str(write_launcher(tmp_path)), "serve", "--http", "--port", "0", "--log-format", "text"]
    argv += ["--datasets-dir", str(tmp_path / "datasets"), "--oauth-issuer", issuer.url]
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=subprocess_env()
    )
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in iter(proc.stderr.readline, b"")], daemon=True).start()  # type: ignore[union-attr]
    seen: list[bytes] = []

    def wait_for(text: bytes) -> bytes:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
                if text in seen[-1]:
                    return seen[-1]
        raise AssertionError(f"no {text!r} in the server's log:\n{b''.join(seen).decode(errors='replace')}")

    try:
        port = int(re.search(rb"port=(\d+)", wait_for(b"server.listening")).group(1))  # type: ignore[union-attr]
        token = unsigned({"alg": "RS256", "kid": "\x1b]0;PWNED\x07\x1b[2J"}, issuer.claims())
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request(
            "POST", "/mcp", body=b"{}", headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        )
        assert conn.getresponse().status == 401
        conn.close()
        refused = wait_for(b"http.refused").decode()  # the gate logs every refusal (docs/team.md)
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stderr.close()  # type: ignore[union-attr]
        issuer.close()
    assert r"kid=\x1b]0;PWNED\x07\x1b[2J" in refused
    assert not any(UNSAFE.search(line.decode().rstrip("\n")) for line in seen)
