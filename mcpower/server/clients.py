"""The snippets MCP clients need to start this server, or reach it over HTTP (`mcpower serve [--http] --print-config CLIENT`)."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from mcpower.errors import McpowerError

CLIENTS = ("claude-desktop", "claude-code", "vscode", "cursor")


def client_config(client: str, datasets_dir: Path) -> str:
    """The JSON (or command) ``client`` needs to start this server, with absolute paths.

    Raises:
        McpowerError: an unknown client.
    """
    if client not in CLIENTS:
        raise McpowerError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}")
    exe = shutil.which("mcpower") or sys.argv[0]
    command = str(Path(exe).resolve())
    args = ["serve", "--stdio"]
    env = {"MCPOWER_DATASETS_DIR": str(datasets_dir.expanduser().resolve())}
    if client == "claude-code":
        return f"claude mcp add mcpower --env MCPOWER_DATASETS_DIR={env['MCPOWER_DATASETS_DIR']} -- {command} serve --stdio"
    server = {"command": command, "args": args, "env": env}
    if client == "vscode":
        return json.dumps({"servers": {"mcpower": {"type": "stdio", **server}}}, indent=2)
    return json.dumps({"mcpServers": {"mcpower": server}}, indent=2)


# What a client sends as the token: a placeholder its config resolves, never the token itself.
VSCODE_TOKEN_INPUT = "mcpower-token"
TOKEN_PLACEHOLDERS = {
    "claude-code": "$MCPOWER_TOKEN",  # expanded by the shell when the command runs
    "vscode": f"${{input:{VSCODE_TOKEN_INPUT}}}",  # VS Code asks once and keeps it in its secret storage
    "cursor": "${env:MCPOWER_TOKEN}",  # read from Cursor's environment
}


def http_client_config(client: str, host: str, port: int, token: bool, allow_hosts: list[str] | None = None) -> str:
    """The JSON (or command) ``client`` needs to reach ``mcpower serve --http`` on ``host``:``port``.

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
    if host in ("0.0.0.0", "::"):  # listening everywhere: clients use a name it answers to
        host = re.sub(r":(\d+|\*)$", "", allow_hosts[0]) if allow_hosts else "127.0.0.1"
    url = f"http://{f'[{host}]' if ':' in host and not host.startswith('[') else host}:{port}/mcp"
    header = f"Bearer {TOKEN_PLACEHOLDERS[client]}"
    if client == "claude-code":
        auth = f' --header "Authorization: {header}"' if token else ""
        return f"claude mcp add --transport http mcpower {url}{auth}"
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
