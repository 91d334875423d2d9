"""`--audit-log FILE` is opened as the tokens file is treated (issue 26, item 9): never through a
symbolic link, created for this user only; refused when others can change it, a warning when they
can read it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_fixtures import subprocess_env, write_launcher

from mcpower.errors import McpowerError
from mcpower.server.audit import log_to_file

pytestmark = pytest.mark.skipif(os.name != "posix", reason="file modes, owners and O_NOFOLLOW are POSIX")

audit_logger = logging.getLogger("mcpower.audit")


@pytest.fixture(autouse=True)
def no_new_handlers() -> Iterator[None]:
    """The handlers log_to_file adds are removed (and their files closed) after each test."""
    before, level = list(audit_logger.handlers), audit_logger.level
    audit_logger.setLevel(logging.INFO)  # as the server's logging sets it
    yield
    audit_logger.setLevel(level)
    for handler in audit_logger.handlers[len(before) :]:
        audit_logger.removeHandler(handler)
        handler.close()


def write_a_line() -> None:
    audit_logger.info("audit", extra={"event": "audit", "caller": "alice"})


def test_an_audit_log_that_is_a_symlink_is_refused_and_nothing_is_written_through_it(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone else's file\n")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)

    with pytest.raises(McpowerError, match=f"the audit log {link} is a symbolic link"):
        log_to_file(link)
    write_a_line()

    assert target.read_text() == "someone else's file\n"


@pytest.mark.slow  # the same refusal through the real `serve` (a second or more for an interpreter)
def test_serve_refuses_an_audit_log_that_is_a_symlink_and_writes_nothing_through_it(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("someone else's file\n")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)

    done = subprocess.run(
        [sys.executable, str(write_launcher(tmp_path)), "serve", "--stdio", "--audit-log", str(link)],
        input="",
        capture_output=True,
        text=True,
        timeout=120,
        env={**subprocess_env(), "MCPOWER_DATASETS_DIR": str(tmp_path / "datasets")},
    )

    assert done.returncode == 1 and done.stdout == ""
    assert f"Error: the audit log {link} is a symbolic link" in done.stderr
    assert "Traceback" not in done.stderr
    assert target.read_text() == "someone else's file\n"  # untouched


def test_a_new_audit_log_is_created_for_this_user_only_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    old = os.umask(0)
    try:
        log_to_file(path)
    finally:
        os.umask(old)
    write_a_line()

    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["caller"] == "alice"


def test_an_existing_audit_log_is_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"earlier": true}\n')
    path.chmod(0o600)

    log_to_file(path)
    write_a_line()

    assert [json.loads(line).get("caller") for line in path.read_text().splitlines()] == [None, "alice"]


@pytest.mark.parametrize("mode", [0o666, 0o620, 0o602])
def test_an_audit_log_others_can_write_is_refused(tmp_path: Path, mode: int) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    path.chmod(mode)

    with pytest.raises(McpowerError, match=rf"can be changed by other users \(mode {mode:04o}\).*chmod 600"):
        log_to_file(path)
    write_a_line()

    assert path.read_text() == ""


def test_an_audit_log_others_can_read_is_used_with_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text("")
    path.chmod(0o644)
    caplog.set_level(logging.INFO, logger="mcpower.audit")

    log_to_file(path)
    write_a_line()

    (warning,) = [r for r in caplog.records if getattr(r, "event", "") == "server.audit_log_readable"]
    assert "can be read by other users (mode 0644)" in warning.getMessage()
    assert json.loads(path.read_text())["caller"] == "alice"


def test_an_audit_log_that_is_a_fifo_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    os.mkfifo(path, 0o600)
    reader = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # someone reads it: opening it to write would not block
    try:
        with pytest.raises(McpowerError, match="is not a regular file"):
            log_to_file(path)
    finally:
        os.close(reader)
