"""`serve --stdio` without typer (mcpower/cli/serve_fast.py): the settings it runs with are the ones
the typer command would pass, and whatever it does not read plainly is the typer command's to answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import subprocess_env
from typer.testing import CliRunner

from mcpower.cli import serve_fast
from mcpower.cli.app import app_for


class _Stop(Exception):
    pass


def typer_overrides(args: list[str], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the typer command passes to the settings for ``args`` (it stops there)."""
    import mcpower.cli.serve

    seen: dict[str, Any] = {}

    def settings(**overrides: Any) -> None:
        seen.update(overrides)
        raise _Stop

    monkeypatch.setattr(mcpower.cli.serve, "settings", settings)
    result = CliRunner().invoke(app_for(args), args, prog_name="mcpower")
    assert isinstance(result.exception, _Stop), result.output
    return seen


@pytest.mark.parametrize(
    "args",
    [
        ["serve", "--stdio"],
        ["serve"],
        ["serve", "--stdio", "--datasets-dir", "some/where"],
        ["serve", "--datasets-dir=/tmp/with space/d", "--stdio"],
        ["serve", "--datasets-dir", "a=b"],
        ["serve", "--stdio", "--watch", "--watch-debounce", "0.5", "--refresh", "0", "--no-watch-code"],
        ["serve", "--watch-follow-symlinks", "--watch-code", "--watch-debounce=60", "--refresh=3600.25"],
        ["serve", "--watch-debounce", "0.05", "--watch"],
        ["serve", "--log-level", "debug", "--log-format=text", "--tool-names", "seed", "--audit-queries"],
        ["serve", "--audit-log", "audit.jsonl", "--milvus-uri", "team.db", "--stdio"],
    ],
)
def test_a_plain_serve_runs_with_the_settings_typer_would_give(
    args: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    planned = serve_fast.plan(args)

    assert planned is not None
    assert planned == typer_overrides(args, monkeypatch)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--version"],
        ["search", "x"],
        ["serv"],
        ["serve", "--help"],
        ["serve", "-h"],
        ["serve", "--stdio", "--help"],
        ["serve", "--http"],
        ["serve", "--stdio", "--http"],
        ["serve", "--print-config", "vscode"],
        ["serve", "--port", "8000"],
        ["serve", "--no-web"],
        ["serve", "--stdio", "--stdio"],
        ["serve", "--watch", "--watch"],
        ["serve", "--watch-code", "--no-watch-code"],
        ["serve", "--datasets-dir", "a", "--datasets-dir=b"],
        ["serve", "--watch-debounce", "0.01"],
        ["serve", "--watch-debounce", "61"],
        ["serve", "--watch-debounce", "1e0"],
        ["serve", "--watch-debounce", "nan"],
        ["serve", "--refresh", "-1"],
        ["serve", "--datasets-dir"],
        ["serve", "--datasets-dir="],
        ["serve", "--datasets-dir", "--stdio"],
        ["serve", "--log-level", "-v"],
        ["serve", "--stdio=yes"],
        ["serve", "--watch=true"],
        ["serve", "datasets"],
        ["serve", "--", "--stdio"],
        ["serve", "--datasets", "d"],  # no abbreviations
        ["serve", "-v"],
    ],
)
def test_any_other_command_line_is_left_to_typer(args: list[str]) -> None:
    assert serve_fast.plan(args) is None


def test_settings_their_rules_refuse_are_left_to_typer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a_file = tmp_path / "datasets"
    a_file.write_text("not a folder", encoding="utf-8")

    assert serve_fast.prepare(["serve", "--log-level", "loud"]) is None
    assert serve_fast.prepare(["serve", "--datasets-dir", str(a_file)]) is None
    assert serve_fast.prepare(["serve", "--datasets-dir", str(tmp_path)]) is not None
    monkeypatch.setenv("MCPOWER_LOG_FORMAT", "xml")
    assert serve_fast.prepare(["serve", "--datasets-dir", str(tmp_path)]) is None
    monkeypatch.delenv("MCPOWER_LOG_FORMAT")
    monkeypatch.setenv("_MCPOWER_COMPLETE", "bash_source")  # typer's shell completion
    assert serve_fast.prepare(["serve", "--datasets-dir", str(tmp_path)]) is None


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpower", *map(str, args)],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        env=subprocess_env(),
        timeout=120,
    )


def test_an_error_while_starting_reads_as_the_typer_command_says_it(tmp_path: Path) -> None:
    audit = tmp_path / "no such folder" / "audit.jsonl"
    # The same settings; "1e0" is a number typer reads and the fast path leaves to it.
    fast = _run("serve", "--stdio", "--datasets-dir", tmp_path, "--audit-log", audit, "--watch-debounce", "1")
    typer = _run("serve", "--stdio", "--datasets-dir", tmp_path, "--audit-log", audit, "--watch-debounce", "1e0")

    assert serve_fast.plan(["serve", "--watch-debounce", "1"]) and not serve_fast.plan(
        ["serve", "--watch-debounce", "1e0"]
    )
    assert fast.returncode == typer.returncode == 1
    assert fast.stderr == typer.stderr
    assert fast.stderr.startswith(f"Error: cannot write the audit log {audit}: ")
    assert fast.stdout == typer.stdout == ""
