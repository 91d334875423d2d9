"""`serve` options for a server a team shares: per-caller rate limits, metrics, the audit log (docs/team.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

RateLimit = Annotated[
    float | None,
    typer.Option(
        metavar="N",
        help="--http: requests a second each caller (token name) may make on average; more get 429, "
        "0 turns it off [env MCPOWER_HTTP_RATE_LIMIT; default 20].",
        show_default=False,
    ),
]

RateBurst = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        help="--http: requests each caller may make at once above that rate [env MCPOWER_HTTP_RATE_BURST; "
        "default 100].",
        show_default=False,
    ),
]

MaxSearches = Annotated[
    int | None,
    typer.Option(
        metavar="N",
        help="--http: searches each caller may have running at once; more get 429, 0 turns it off "
        "[env MCPOWER_HTTP_MAX_SEARCHES; default 16].",
        show_default=False,
    ),
]

MetricsFlag = Annotated[
    bool | None,
    typer.Option(
        "--metrics/--no-metrics",
        help="--http: serve Prometheus metrics at /metrics, to a token with the metrics scope (token add --metrics) [env MCPOWER_HTTP_METRICS; default on].",
        show_default=False,
    ),
]

AuditQueries = Annotated[
    bool | None,
    typer.Option(
        "--audit-queries",
        help="Write each query's text into the audit log (off: only its length) [env MCPOWER_AUDIT_QUERIES].",
        show_default=False,
    ),
]

AuditLogFile = Annotated[
    Path | None,
    typer.Option(
        metavar="FILE",
        help="Also append the audit log's lines (one per tool call, JSON) to FILE [env MCPOWER_AUDIT_LOG].",
        show_default=False,
    ),
]
