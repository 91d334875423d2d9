"""`mcpower.cli.main` runs the short commands without the cyclic garbage collector, every other one with it.

main() is called in this process, so each test puts the collector back as it was (main freezes
what exists when it returns, and leaves the collector off if the command never turned it on).
"""

from __future__ import annotations

import gc
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer

import mcpower.cli
from mcpower.cli import common, datasets, importing, ingest, preload, search, serve, serving
from mcpower.cli.app import SHORT_COMMANDS


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    enabled, on_sigterm = gc.isenabled(), signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, on_sigterm)  # ingest unwinds on SIGTERM
    gc.unfreeze()
    if enabled:
        gc.enable()
    else:  # pragma: no cover - pytest runs with the collector on
        gc.disable()


def collector_during(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> bool:
    """Whether the collector was on when the command asked for its settings (its first step)."""
    seen: list[bool] = []

    def settings(**overrides: object) -> None:
        seen.append(gc.isenabled())
        raise typer.Exit(0)

    def run_server(s: object, http: bool) -> None:  # `serve --stdio` without typer (serve_fast.py) gets here
        seen.append(gc.isenabled())
        raise SystemExit(0)

    for module in (common, datasets, importing, ingest, search, serve):
        if hasattr(module, "settings"):
            monkeypatch.setattr(module, "settings", settings)
    monkeypatch.setattr(serving, "run_server", run_server)
    # A search would start loading the real model, which no command here gets to use.
    monkeypatch.setattr(preload, "head_start", lambda argv: None)
    monkeypatch.setattr(sys, "argv", ["mcpower", *argv])
    with pytest.raises(SystemExit) as exit_:
        mcpower.cli.main()
    assert exit_.value.code == 0
    assert len(seen) == 1, f"{argv[0]} never asked for its settings"
    return seen[0]


@pytest.mark.parametrize(
    "argv",
    [["search", "docs", "a query"], ["search", "--all", "a query"], ["validate"], ["datasets"]],
)
def test_short_commands_run_without_the_collector(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    assert argv[0] in SHORT_COMMANDS
    assert collector_during(monkeypatch, argv) is False


@pytest.mark.parametrize(
    "argv",
    [
        ["ingest", "."],
        ["import", "."],
        ["serve", "--stdio"],
        ["eval", "docs", "--queries", "q.jsonl", "--qrels", "q.tsv"],
    ],
)
def test_long_commands_run_with_the_collector(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> None:
    assert collector_during(monkeypatch, argv) is True


def test_main_freezes_what_the_command_left(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # The exit of a short command does not walk every loaded module's objects once more.
    monkeypatch.setattr(sys, "argv", ["mcpower", "datasets", "--datasets-dir", str(tmp_path)])
    before = gc.get_freeze_count()
    with pytest.raises(SystemExit):
        mcpower.cli.main()
    assert gc.get_freeze_count() > before
    assert not gc.isenabled()  # main turned it off; the fixture turns it back on
