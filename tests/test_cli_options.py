"""Options and --help read like a well-kept Click tool (issue 19, items 12 and 13): one validation
path, usage errors exit 2 and name the flag the user typed (or the variable), every value named."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from mcpower.cli.app import app

COMMANDS = ["ingest", "import", "validate", "datasets", "search", "serve", "eval"]


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, [str(a) for a in args], env=env, prog_name="mcpower")


@pytest.mark.parametrize(
    ("args", "flag", "says"),
    [
        (["serve", "--log-level", "loud"], "'--log-level'", "Input should be 'debug', 'info', 'warning' or 'error'"),
        (["serve", "--http", "--port", "70000"], "'--port'", "less than or equal to 65535"),
        (["serve", "--watch-debounce", "0"], "'--watch-debounce'", "greater than or equal to 0.05"),
        (["serve", "--tool-names", "mine"], "'--tool-names'", "Input should be 'default' or 'seed'"),
        (["search", "docs", "q", "-k", "0"], "'-k' / '--top-k'", "greater than or equal to 1"),
        (["search", "docs", "q", "--min-score", "2"], "'--min-score'", "less than or equal to 1"),
        (["search", "docs", "q", "--mode", "fuzzy"], "'--mode'", "'fuzzy' is not one of hybrid, semantic, keyword"),
        (["search", "docs", "q", "--offset", "5000"], "'--offset'", "less than or equal to 1000"),
        (["ingest", ".", "--backend", "gpu"], "'--backend'", "Input should be"),
        (["eval", "docs", "--queries", "q", "--qrels", "r", "--mode", "x"], "'--mode'", "is not one of hybrid"),
    ],
)
def test_a_bad_flag_is_a_usage_error_naming_the_flag_as_typed(
    tmp_path: Path, args: list[str], flag: str, says: str
) -> None:
    result = invoke(*args, "--datasets-dir", tmp_path)

    assert result.exit_code == 2, result.output
    assert f"Invalid value for {flag}: " in result.stderr and says in result.stderr
    assert "http-port" not in result.stderr and "top_k" not in result.stderr and "min_score" not in result.stderr
    assert "Traceback" not in result.output


def test_a_bad_variable_is_named_as_the_variable(tmp_path: Path) -> None:
    result = invoke("serve", "--datasets-dir", tmp_path, env={"MCPOWER_HTTP_PORT": "70000"})
    assert result.exit_code == 2
    assert "Invalid value for 'MCPOWER_HTTP_PORT': " in result.stderr


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_every_value_clicks_way(command: str) -> None:
    for flag in ("--help", "-h"):
        result = invoke(command, flag)
        assert result.exit_code == 0, result.output
        text = result.stdout
        assert not re.search(r"<(str|int|float|path|list\[str\]|int range|float range)>|\{[a-z]+\}", text), text
        assert f" {command} [OPTIONS]" in text
        for line in text.splitlines():  # each option that takes a value names it
            m = re.match(r"\s+(?:-\w, )?(--[a-z-]+)(?: ([^\s].*?))?(?:\s{2,}|$)", line)
            if m and m.group(2) is not None and not m.group(2).startswith("/"):
                assert re.fullmatch(r"[A-Z]+|\[[a-z0-9|-]+\]", m.group(2).split()[0]), line


def test_options_with_a_variable_name_it_and_defaults_are_shown() -> None:
    serve = invoke("serve", "--help").stdout
    assert "MCPOWER_TOOL_NAMES" in serve
    ingest = " ".join(invoke("ingest", "--help").stdout.split())
    assert "--default-top-k N" in ingest and "[default: the previous version's, else 5]" in ingest


def test_k_is_top_k_in_search_and_eval_has_depth() -> None:
    assert "-k, --top-k N" in invoke("search", "--help").stdout
    eval_help = invoke("eval", "--help").stdout
    assert "--depth N" in eval_help and "-k" not in eval_help
