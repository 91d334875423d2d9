"""`mcpower token add / list / revoke`: the named tokens `serve --http` accepts, each limited to some datasets.

The file (server/auth/tokens.py) keeps each secret's SHA-256, never the secret: `add` prints the secret
once. A running server re-reads the file on its next request, so `add` and `revoke` take effect
without a restart.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mcpower.cli.common import DatasetsDir, JsonFlag, open_registry, print_json, settings

if TYPE_CHECKING:
    from mcpower.server.auth.tokens import NamedToken

app = typer.Typer(
    help="Named tokens for `serve --http`: each caller its own secret, reading only the datasets it is given.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

TokensFile = Annotated[
    Path | None,
    typer.Option(
        "--tokens-file",
        metavar="PATH",
        help="The tokens file [env MCPOWER_TOKENS_FILE; default DATASETS_DIR/tokens.json].",
        show_default=False,
    ),
]


def _path(tokens_file: Path | None, datasets_dir: Path | None) -> Path:
    from mcpower.server.auth.tokens import default_tokens_file

    s = settings(tokens_file=tokens_file, datasets_dir=datasets_dir)
    return s.tokens_file.expanduser() if s.tokens_file is not None else default_tokens_file(s.datasets_dir)


def _read(path: Path) -> list[NamedToken]:
    from mcpower.server.auth.tokens import check_access, read_tokens

    if path.exists():
        check_access(path)  # a file others could have changed is not built on
    return read_tokens(path)


@app.command()
def add(
    name: Annotated[str, typer.Argument(metavar="NAME", help="Who the token is for: shown in logs and `token list`.")],
    datasets: Annotated[
        list[str] | None,
        typer.Option(
            "--datasets",
            "-d",
            metavar="PATTERN",
            help="A dataset id, or a pattern such as 'eng-*' ('*': every dataset); repeatable.",
            show_default=False,
        ),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option(metavar="WHEN", help="30d, 12h, 90m, 2w from now, or a date (2026-12-31, UTC); default: never."),
    ] = None,
    tokens_file: TokensFile = None,
    datasets_dir: DatasetsDir = None,
    metrics: Annotated[
        bool,
        typer.Option(
            "--metrics",
            help="The token may read GET /metrics (a Prometheus scraper's); without --datasets it reads nothing else.",
        ),
    ] = False,
) -> None:
    """Add a token and print its secret, once: the file keeps only its hash."""
    from mcpower.errors import McpowerError
    from mcpower.server.auth.tokens import (
        NamedToken,
        check_name,
        check_patterns,
        digest,
        editing,
        new_secret,
        parse_expiry,
        write_tokens,
    )

    path = _path(tokens_file, datasets_dir)
    token = NamedToken(
        name=check_name(name),
        sha256="",
        datasets=check_patterns(datasets or [], metrics),
        created=datetime.now(timezone.utc),
        expires=parse_expiry(expires) if expires is not None else None,
        metrics=metrics,
    )
    secret = new_secret()
    with editing(path):  # read, checked and written again under the lock: two adds at once both land
        tokens = _read(path)
        if any(t.name == name for t in tokens):
            raise McpowerError(
                f"there is already a token named {name!r} in {path}: revoke it first, or choose another name"
            )
        write_tokens(path, [*tokens, replace(token, sha256=digest(secret))])
    typer.echo(secret)
    until = f", until {_when(token.expires)} UTC" if token.expires else ""
    grants = [f"datasets {', '.join(token.datasets)}"] if token.datasets else []
    grants += ["/metrics"] if token.metrics else []
    typer.echo(
        f"token {name!r} added to {path} for {' and '.join(grants)}{until}.\n"
        "The secret above is shown only now (the file keeps its hash): give it to the client as its bearer "
        "token (Authorization: Bearer ...; the snippets of `mcpower serve --http --print-config CLIENT` read it "
        "from MCPOWER_CLIENT_TOKEN). A running server accepts it from its next request.",
        err=True,
    )
    for warning in _unmatched(token.datasets, datasets_dir):
        typer.echo(f"warning: {warning}", err=True)


# Dataset ids a warning names; the rest are counted.
SHOWN = 20


def _unmatched(patterns: tuple[str, ...], datasets_dir: Path | None) -> list[str]:
    """A warning for each pattern that matches no dataset there is now (a typo: `dcos` for `docs`),
    naming the datasets there are. The token is kept as given: a dataset of that name may come."""
    from mcpower.errors import McpowerError
    from mcpower.server.auth.tokens import grants

    s = settings(datasets_dir=datasets_dir)
    try:
        registry = open_registry(s, missing_ok=True)
        try:
            ids = [e.id for e in registry.entries()]
        finally:
            registry.close()
    except McpowerError as e:  # the datasets cannot be listed: nothing to compare with, say so
        return [f"cannot list the datasets to check the patterns against: {e.message}"]
    where = s.datasets_dir.expanduser().resolve()
    if "*" in patterns:
        return []
    if not ids:
        return [f"there are no datasets under {where} yet: the token reads nothing until one it names exists"]
    there = ", ".join(ids[:SHOWN]) + (f" and {len(ids) - SHOWN} more" if len(ids) > SHOWN else "")
    return [
        f"--datasets {p!r} matches no dataset under {where} (there are: {there}); the token reads what it names "
        "once such a dataset exists, nothing until then: if that is a typo, `mcpower token revoke` it and add it again"
        for p in patterns
        if not any(grants(p, i) for i in ids)
    ]


@app.command("list")
def list_(tokens_file: TokensFile = None, datasets_dir: DatasetsDir = None, as_json: JsonFlag = False) -> None:
    """List the tokens: name, datasets, /metrics, expiry (expired ones marked), created. Never a secret or its hash."""
    path = _path(tokens_file, datasets_dir)
    tokens = _read(path)
    now = datetime.now(timezone.utc)
    rows: list[dict[str, Any]] = [
        {
            "name": t.name,
            "datasets": list(t.datasets),
            "metrics": t.metrics,
            "expires": t.to_json()["expires"],
            "expired": t.expired(now),
            "created": t.to_json()["created"],
        }
        for t in tokens
    ]
    if as_json:
        print_json({"tokens_file": str(path), "tokens": rows})
        return
    if not rows:
        typer.echo(f"no tokens in {path} (add one with `mcpower token add NAME --datasets ID`)", err=True)
        return
    table = [("NAME", "EXPIRES (UTC)", "CREATED (UTC)", "METRICS", "DATASETS")]
    for r, t in zip(rows, tokens):
        expiry = "never" if t.expires is None else _when(t.expires) + (" (expired)" if r["expired"] else "")
        table.append((r["name"], expiry, _when(t.created), "yes" if t.metrics else "no", ", ".join(t.datasets) or "-"))
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]  # each column as wide as it needs
    for row in table:
        typer.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])


@app.command()
def revoke(
    name: Annotated[str, typer.Argument(metavar="NAME", help="The token's name (`mcpower token list`).")],
    tokens_file: TokensFile = None,
    datasets_dir: DatasetsDir = None,
) -> None:
    """Remove a token: a running server refuses it from its next request."""
    from mcpower.errors import McpowerError
    from mcpower.server.auth.tokens import editing, write_tokens

    path = _path(tokens_file, datasets_dir)
    with editing(path):
        tokens = _read(path)
        kept = [t for t in tokens if t.name != name]
        if len(kept) == len(tokens):
            raise McpowerError(f"there is no token named {name[:80]!r} in {path}; `mcpower token list` shows them")
        write_tokens(path, kept)
    typer.echo(f"token {name!r} revoked in {path}", err=True)


def _when(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
