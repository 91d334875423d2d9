"""`serve --print-config`: snippets that work as printed (issue 19, items 4-6) — quoted for the
shell and run through one, a command that starts this mcpower, every option of the command."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from server_fixtures import StdioServer, subprocess_env
from typer.testing import CliRunner, Result

from mcpower.cli.app import app
from mcpower.server import clients

BASH = shutil.which("bash")
needs_bash = pytest.mark.skipif(BASH is None, reason="bash is needed to run the printed command line")


def invoke(*args: str | Path, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, ["serve", "--print-config", *[str(a) for a in args]], env=env)


def stub(folder: Path, name: str) -> None:
    """A ``name`` command on PATH that prints its arguments as JSON (stands in for claude, npx)."""
    folder.mkdir(exist_ok=True)
    script = folder / name
    script.write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    script.chmod(0o755)


def run_in_bash(line: str, stubs: Path) -> list[str]:
    assert BASH is not None
    syntax = subprocess.run([BASH, "-n", "-c", line], capture_output=True, text=True, check=False)
    assert syntax.returncode == 0, syntax.stderr
    # The client's variable holds its token; the server's MCPOWER_TOKEN (another value here) is not read.
    path = f"{stubs}{os.pathsep}{os.environ['PATH']}"
    env = {**os.environ, "PATH": path, "MCPOWER_CLIENT_TOKEN": "s3cret", "MCPOWER_TOKEN": "server-only"}
    done = subprocess.run([BASH, "-c", line], capture_output=True, text=True, env=env, check=True)
    argv: list[str] = json.loads(done.stdout)
    return argv


@needs_bash
def test_claude_code_line_is_quoted_for_the_shell(tmp_path: Path) -> None:
    notes = tmp_path / "My Notes (2024)"
    stub(tmp_path / "bin", "claude")

    result = invoke("claude-code", "--datasets-dir", notes)

    assert result.exit_code == 0, result.output
    argv = run_in_bash(result.stdout.strip(), tmp_path / "bin")
    command, *args = clients.this_mcpower()
    assert argv == [
        *["mcp", "add", "mcpower", "--env", f"MCPOWER_DATASETS_DIR={notes}", "--"],
        *[command, *args, "serve", "--stdio"],
    ]


@needs_bash
def test_inspector_stdio_line_runs_through_a_shell(tmp_path: Path) -> None:
    notes = tmp_path / "it's $HOME; `x`"
    stub(tmp_path / "bin", "npx")

    result = invoke("inspector", "--datasets-dir", notes, "--watch")

    assert result.exit_code == 0, result.output
    argv = run_in_bash(result.stdout.strip(), tmp_path / "bin")
    assert argv[:4] == ["@modelcontextprotocol/inspector", "-e", f"MCPOWER_DATASETS_DIR={notes}", "--"]
    assert argv[-3:] == ["serve", "--stdio", "--watch"]


@needs_bash
@pytest.mark.parametrize("client", ["claude-code", "inspector"])
def test_http_lines_run_through_a_shell_with_the_token_from_the_environment(tmp_path: Path, client: str) -> None:
    stub(tmp_path / "bin", "claude" if client == "claude-code" else "npx")
    result = CliRunner().invoke(
        app, ["serve", "--http", "--port", "9123", "--print-config", client], env={"MCPOWER_TOKEN": "t" * 32}
    )
    assert result.exit_code == 0, result.output
    assert "t" * 32 not in result.stdout
    argv = run_in_bash(result.stdout.strip(), tmp_path / "bin")
    assert "http://127.0.0.1:9123/mcp" in argv
    assert argv[-2:] == ["--header", "Authorization: Bearer s3cret"]  # the shell filled the placeholder in


def test_the_http_inspector_line_that_sends_the_token_pins_an_inspector_with_header() -> None:
    """Unpinned, npx installs Inspector 0.15 on Node 20, which has no --header and stops with "Arguments
    cannot be passed to a URL-based MCP server" (seen running the printed line from a fresh clone)."""
    args = ["serve", "--http", "--print-config", "inspector"]
    with_token = CliRunner().invoke(app, args, env={"MCPOWER_TOKEN": "t" * 32})
    assert with_token.exit_code == 0, with_token.output
    assert with_token.stdout.startswith("npx @modelcontextprotocol/inspector@0.22.0 --cli http://127.0.0.1:8765/mcp ")
    package = json.loads((Path(__file__).parent / "clients" / "inspector" / "package.json").read_text(encoding="utf-8"))
    assert package["dependencies"]["@modelcontextprotocol/inspector"] == "0.22.0"  # the version the tests run


def test_the_printed_command_starts_this_mcpower_even_from_python_dash_m(tmp_path: Path) -> None:
    """`python -m mcpower serve --print-config claude-desktop`: the command it prints is executable
    (not __main__.py) and starts a server that answers initialize."""
    datasets = tmp_path / "datasets"
    done = subprocess.run(
        [sys.executable, "-m", "mcpower", "serve", "--print-config", "claude-desktop", "--datasets-dir", str(datasets)],
        capture_output=True,
        text=True,
        env=subprocess_env(),
        cwd=tmp_path,
        check=True,
    )
    server: dict[str, Any] = json.loads(done.stdout)["mcpServers"]["mcpower"]
    assert not server["command"].endswith(".py") and os.access(server["command"], os.X_OK)

    started = StdioServer([server["command"], *server["args"]], env={**subprocess_env(), **server["env"]})
    try:
        answer = started.initialize(timeout=120)
        assert answer["serverInfo"]["name"] == "mcpower"
    finally:
        started.stop()


def test_without_a_script_beside_python_it_is_python_dash_m(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(python))
    assert clients.this_mcpower() == [str(python), "-m", "mcpower"]
    (python.parent / "mcpower").write_text("#!/bin/sh\n")
    (python.parent / "mcpower").chmod(0o755)
    assert clients.this_mcpower() == [str(python.parent / "mcpower")]


def test_every_option_of_the_command_is_in_the_snippet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    options = [
        "--watch",
        "--watch-debounce",
        "2",
        "--tool-names",
        "seed",
        "--log-level",
        "debug",
        "--log-format",
        "text",
    ]
    result = invoke("claude-desktop", "--datasets-dir", "data", "--milvus-uri", "./m.db", *options)
    assert result.exit_code == 0, result.output
    server = json.loads(result.stdout)["mcpServers"]["mcpower"]
    args = server["args"]
    assert args[args.index("serve") :] == ["serve", "--stdio", *options]
    # folders absolute: the client starts the server from its own working folder
    assert server["env"] == {
        "MCPOWER_DATASETS_DIR": str(tmp_path / "data"),
        "MCPOWER_MILVUS_URI": str(tmp_path / "m.db"),
    }
    assert not (tmp_path / "m.db").exists()  # printing creates nothing


def test_defaults_add_nothing() -> None:
    server = json.loads(invoke("cursor").stdout)["mcpServers"]["mcpower"]
    assert server["args"][-2:] == ["serve", "--stdio"] and list(server["env"]) == ["MCPOWER_DATASETS_DIR"]


def test_listening_everywhere_prints_a_url_a_client_can_reach() -> None:
    result = CliRunner().invoke(
        app, ["serve", "--http", "--host", "0.0.0.0", "--print-config", "cursor"], env={"MCPOWER_TOKEN": "t" * 32}
    )
    assert result.exit_code == 0, result.output
    url = json.loads(result.stdout)["mcpServers"]["mcpower"]["url"]
    assert url == f"http://{socket.gethostname()}:8765/mcp" and "0.0.0.0" not in url


@pytest.mark.parametrize("http", [False, True])
def test_an_unknown_client_is_a_usage_error(http: bool) -> None:
    result = CliRunner().invoke(app, ["serve", *(["--http"] if http else []), "--print-config", "emacs"])
    assert result.exit_code == 2
    assert "'emacs' is not one of claude-desktop, claude-code, vscode, cursor, inspector" in result.stderr


OAUTH = ["serve", "--http", "--oauth-issuer", "https://idp.example", "--public-url", "https://kb.example.com"]


@pytest.mark.parametrize("client", ["claude-code", "vscode", "cursor"])
def test_in_oauth_mode_clients_that_sign_in_themselves_get_no_token_header(client: str) -> None:
    """They find the issuer from the server's 401 and sign in there: a header would stand in their way.
    The URL is the public one, the resource their tokens are issued for."""
    result = CliRunner().invoke(app, [*OAUTH, "--print-config", client])
    assert result.exit_code == 0, result.output
    assert "Authorization" not in result.stdout and "MCPOWER_TOKEN" not in result.stdout
    assert "https://kb.example.com/mcp" in result.stdout
    if client != "claude-code":
        config = json.loads(result.stdout)
        assert "inputs" not in config and "headers" not in json.dumps(config)
    assert f"{client} signs in at https://idp.example itself" in result.stderr


def test_in_oauth_mode_the_inspector_line_sends_a_token_got_elsewhere() -> None:
    result = CliRunner().invoke(app, [*OAUTH, "--print-config", "inspector"])
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith('--header "Authorization: Bearer $MCPOWER_CLIENT_TOKEN"')
    assert "MCPOWER_CLIENT_TOKEN must hold an access token from https://idp.example for https://kb.example.com/mcp" in (
        result.stderr
    )


# ---------------------------------------------------------------- the client's token variable (issue 28, item 4)

CLIENT_SNIPPETS = ["claude-code", "cursor", "inspector"]  # VS Code asks for the token itself


@pytest.mark.parametrize("client", [*CLIENT_SNIPPETS, "vscode"])
def test_http_snippets_take_the_token_from_the_clients_variable_never_the_servers(client: str) -> None:
    """MCPOWER_TOKEN is the server's token for every dataset: a snippet reading it invited exporting a
    caller's secret under that name, in a shell that might then start `serve --http`."""
    result = CliRunner().invoke(app, ["serve", "--http", "--print-config", client], env={"MCPOWER_TOKEN": "t" * 32})

    assert result.exit_code == 0, result.output
    assert "MCPOWER_TOKEN" not in result.stdout
    if client in CLIENT_SNIPPETS:
        assert "MCPOWER_CLIENT_TOKEN" in result.stdout
        assert "note: the token comes from MCPOWER_CLIENT_TOKEN" in result.stderr
        assert "not MCPOWER_TOKEN, the server's own token for every dataset" in result.stderr
    else:
        assert "${input:mcpower-token}" in result.stdout and "VS Code asks for the token" in result.stderr


DOCS = [Path(__file__).parent.parent / "README.md", *sorted((Path(__file__).parent.parent / "docs").glob("*.md"))]


def test_the_docs_name_one_client_variable_for_the_token() -> None:
    """The docs mixed $KB_TOKEN and $MCPOWER_TOKEN in what a client sends: one name, the client's."""
    sent = [
        (doc.name, line.strip())
        for doc in DOCS
        for line in doc.read_text(encoding="utf-8").splitlines()
        if "KB_TOKEN" in line or ("Bearer" in line and "MCPOWER_TOKEN" in line) or "env:MCPOWER_TOKEN" in line
    ]
    assert sent == []
