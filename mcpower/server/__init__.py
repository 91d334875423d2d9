"""The MCP server: one app over the core, and one module per transport.

    app.py       create_server(): the tools, resources and error envelope, for every transport
    stdio.py     serving over stdin/stdout (started by MCP clients)
    logging.py   logs to stderr, as JSON lines or text
    clients.py   the configuration snippets MCP clients need to start this server

Nothing is imported here, so `mcpower.server.clients` stays free of the SDK.
"""
