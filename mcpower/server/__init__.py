"""The MCP server: one app over the core, and one module per transport.

    app.py       create_server(): the MCP server and its error envelope, for every transport
    tools.py     the four tools: names, descriptions, argument schemas
    tool_schemas.py  their JSON schemas, precomputed; their pydantic models built after the handshake
    documents.py the documents as resources (mcpower://dataset/path): listed, read, completed
    changes.py   telling connected clients a dataset was republished (resources/list_changed)
    updates.py   per-document subscriptions (resources/subscribe, listen streams) and their updates
    stdio.py     serving over stdin/stdout (started by MCP clients)
    http.py      serving Streamable HTTP at /mcp (one process, many clients), with /healthz
    auth/        who is calling, what they may read, how fast: the boundary every HTTP request
                 crosses (gate, verifiers, callers, ratelimit ...; its __init__ draws the order)
    connections.py  the HTTP connection cap, deadlines on headers and unread bodies
    sessions.py  the HTTP session cap, kept by ending idle sessions
    limits.py    worker threads and the time limit per request
    logging.py   logs to stderr, as JSON lines or text
    clients.py   the configuration snippets MCP clients need to start this server

Nothing is imported here, so `mcpower.server.clients` stays free of the SDK.
"""
