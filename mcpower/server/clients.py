"""The snippets MCP clients need to start this server (`mcpower serve --print-config CLIENT`)."""

from __future__ import annotations

import json
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
