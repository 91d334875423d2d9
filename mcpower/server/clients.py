"""The snippets MCP clients need to start this server, or reach it over HTTP (`mcpower serve [--http] --print-config CLIENT`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path

from mcpower.errors import McpowerError

CLIENTS = ("claude-desktop", "claude-code", "vscode", "cursor", "inspector")
INSPECTOR = "npx @modelcontextprotocol/inspector"
# A line that sends the token needs --header (Inspector 0.16+); on Node 20 an unpinned npx installs 0.15, and
# 0.22.0 is the newest that runs there (and on Node 22): the version tests/clients/inspector pins.
INSPECTOR_WITH_HEADER = "npx @modelcontextprotocol/inspector@0.22.0"


@dataclass(frozen=True)
class Launch:
    """How a client starts this server over stdio: the command, its arguments, its environment."""

    command: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


def this_mcpower() -> list[str]:
    """The command that starts the mcpower this process runs, for a client that has none of its
    environment: the ``mcpower`` script beside this Python (a virtualenv's or pipx's bin folder),
    else this Python with ``-m mcpower`` (``python -m mcpower``, a zipapp, a test's launcher)."""
    python = Path(sys.executable).absolute()  # not resolved: a virtualenv's python is a symlink
    script = python.parent / ("mcpower.exe" if sys.platform == "win32" else "mcpower")
    if script.is_file() and os.access(script, os.X_OK):
        return [str(script)]
    return [str(python), "-m", "mcpower"]


def client_config(client: str, launch: Launch) -> str:
    """The JSON (or command line) ``client`` needs to start this server as ``launch`` says.

    Raises:
        McpowerError: an unknown client.
    """
    if client not in CLIENTS:
        raise McpowerError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    argv = [launch.command, *launch.args]
    if client == "claude-code":  # a shell command: every word quoted for the shell
        env = [w for k, v in launch.env.items() for w in ("--env", f"{k}={v}")]
        return shlex.join(["claude", "mcp", "add", "mcpower", *env, "--", *argv])
    if client == "inspector":
        env = [w for k, v in launch.env.items() for w in ("-e", f"{k}={v}")]
        return " ".join([INSPECTOR, shlex.join([*env, "--", *argv])])
    server = {"command": launch.command, "args": list(launch.args), "env": launch.env}
    if client == "vscode":
        return json.dumps({"servers": {"mcpower": {"type": "stdio", **server}}}, indent=2)
    return json.dumps({"mcpServers": {"mcpower": server}}, indent=2)


# What a client sends as the token: a placeholder its config resolves, never the token itself. The
# variable is the client's own, never MCPOWER_TOKEN: that one is the *server's* token for every
# dataset, and a caller's secret exported under that name in the shell that then starts `serve
# --http` would have become one (issue 28, item 4; the server also refuses to start that way).
CLIENT_TOKEN_VARIABLE = "MCPOWER_CLIENT_TOKEN"
VSCODE_TOKEN_INPUT = "mcpower-token"
TOKEN_PLACEHOLDERS = {
    "claude-code": f"${CLIENT_TOKEN_VARIABLE}",  # expanded by the shell when the command runs
    "vscode": f"${{input:{VSCODE_TOKEN_INPUT}}}",  # VS Code asks once and keeps it in its secret storage
    "cursor": f"${{env:{CLIENT_TOKEN_VARIABLE}}}",  # read from Cursor's environment
    "inspector": f"${CLIENT_TOKEN_VARIABLE}",  # expanded by the shell when the command runs
}


def token_note(client: str) -> str:
    """Where ``client``'s snippet takes the token from, said beside it."""
    if client == "vscode":
        return "note: VS Code asks for the token (the mcpower-token input) once and keeps it in its secret storage"
    where = "in Cursor's environment" if client == "cursor" else "in the shell that runs the line"
    return (
        f"note: the token comes from {CLIENT_TOKEN_VARIABLE} {where} (export {CLIENT_TOKEN_VARIABLE}=<the "
        "secret>); not MCPOWER_TOKEN, the server's own token for every dataset"
    )


# Clients that do the MCP authorization flow themselves (find the issuer from the server's 401, sign
# the user in, keep and refresh the token): with --oauth-issuer their snippet sends no header.
OAUTH_CLIENTS = ("claude-code", "vscode", "cursor")


def http_url(host: str, port: int, allow_hosts: list[str] | None = None) -> str:
    """The URL a client on this machine or the network reaches the server at.

    Listening on every address (0.0.0.0, ::) names no address a client can use: the first
    ``--allow-host`` name if there is one (the name clients are meant to use), else this machine's
    host name, which the network can resolve where 127.0.0.1 would only reach the client's own.
    """
    if host in ("0.0.0.0", "::"):
        host = re.sub(r":(\d+|\*)$", "", allow_hosts[0]) if allow_hosts else socket.gethostname()
    return f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{port}/mcp"


def http_client_config(
    client: str, host: str, port: int, token: bool, allow_hosts: list[str] | None = None, url: str | None = None
) -> str:
    """The JSON (or command) ``client`` needs to reach ``mcpower serve --http`` on ``host``:``port``
    (or at ``url``: the public URL, in OAuth mode).

    With ``token``, the Authorization header carries a placeholder the client fills in.

    Raises:
        McpowerError: an unknown client, or one whose config file cannot name a URL.
    """
    if client not in CLIENTS:
        raise McpowerError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    if client == "claude-desktop":
        raise McpowerError(
            "Claude Desktop's config file starts stdio servers only; "
            "use `mcpower serve --print-config claude-desktop` without --http"
        )
    url = url or http_url(host, port, allow_hosts)
    header = f"Bearer {TOKEN_PLACEHOLDERS[client]}"
    if client in ("claude-code", "inspector"):  # a shell command; the placeholder is expanded by the shell
        inspector = (INSPECTOR_WITH_HEADER if token else INSPECTOR).split()
        words = (
            ["claude", "mcp", "add", "--transport", "http", "mcpower", url]
            if client == "claude-code"
            else [*inspector, "--cli", url, "--transport", "http", "--method", "tools/list"]
        )
        line = shlex.join(words)
        return line + (f' --header "Authorization: {header}"' if token else "")
    server: dict[str, object] = {"url": url}
    if token:
        server["headers"] = {"Authorization": header}
    if client == "vscode":
        config: dict[str, object] = {"servers": {"mcpower": {"type": "http", **server}}}
        if token:
            config["inputs"] = [
                {"type": "promptString", "id": VSCODE_TOKEN_INPUT, "description": "mcpower token", "password": True}
            ]
        return json.dumps(config, indent=2)
    return json.dumps({"mcpServers": {"mcpower": server}}, indent=2)
