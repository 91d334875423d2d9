"""The `mcpower` command: parse, call the core, render; errors become one line and an exit code.

Exit codes: 0 success, 1 a McpowerError or failed validation, 2 usage, 130 Ctrl-C.
Results go to stdout; progress and diagnostics to stderr.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from mcpower import __version__
from mcpower.config import Settings
from mcpower.errors import McpowerError

logger = logging.getLogger("mcpower")


class _Group(TyperGroup):
    """Translates McpowerError into `Error: ...` on stderr and exit 1 — the one place that does."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except McpowerError as e:
            typer.echo(f"Error: {e.message}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    help="Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,
    rich_markup_mode=None,
)

DatasetsDir = Annotated[
    Path | None,
    typer.Option(
        "--datasets-dir", help="Datasets root [env MCPOWER_DATASETS_DIR; default ./datasets].", show_default=False
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON document for programs.")]


def _settings(**overrides: Any) -> Settings:
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def _setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(message)s", stream=sys.stderr
    )


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"mcpower {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool, typer.Option("--version", is_eager=True, callback=_show_version, help="Show the version and exit.")
    ] = False,
) -> None:
    """Local knowledge search for MCP clients: ingest documents, search them, serve them over MCP."""


# ------------------------------------------------------------------ ingest


@app.command()
def ingest(
    path: Annotated[Path, typer.Argument(help="Folder of documents (.md .markdown .mdx .txt .rst).")],
    dataset_id: Annotated[
        str | None, typer.Option("--id", help="Dataset id (a-z, 0-9, -); default: the folder name as a slug.")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Human-readable name; default: the folder name.")] = None,
    description: Annotated[str | None, typer.Option(help="What the dataset holds (shown to MCP clients).")] = None,
    datasets_dir: DatasetsDir = None,
    model: Annotated[
        str | None,
        typer.Option(help="Embedding model: all-MiniLM-L6-v2 (packaged), a local folder or cached hub name."),
    ] = None,
    backend: Annotated[
        str | None, typer.Option(help="Embedding backend: onnx (default), onnx-int8 (faster) or torch.")
    ] = None,
    chunk_tokens: Annotated[int, typer.Option(help="Chunk size in model tokens, heading path included.")] = 250,
    overlap: Annotated[int, typer.Option(help="Tokens shared by consecutive chunks of a section.")] = 32,
    include: Annotated[list[str] | None, typer.Option(help="Only files matching this glob (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Skip files matching this glob (repeatable).")] = None,
    top_k: Annotated[int | None, typer.Option("--default-top-k", min=1, max=100, help="Default result count.")] = None,
    follow_symlinks: Annotated[bool, typer.Option(help="Follow symlinks that lead outside the folder.")] = False,
    max_file_mb: Annotated[float | None, typer.Option(help="Skip files larger than this [default 10].")] = None,
    full: Annotated[
        bool, typer.Option("--full", help="Rebuild everything instead of re-embedding changed files.")
    ] = False,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for another ingest of this dataset instead of failing.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
    as_json: JsonFlag = False,
) -> None:
    """Build or update a dataset from a folder of documents (only changed files are re-embedded)."""
    from mcpower.ingestion import ingest as run_ingest

    _setup_logging()
    # SIGTERM unwinds like Ctrl-C, so the staging folder is removed on the way out.
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    s = _settings(datasets_dir=datasets_dir, model=model, backend=backend, max_file_mb=max_file_mb)
    with _Progress(enabled=not quiet and not as_json) as progress:
        report = run_ingest(
            path,
            s.datasets_dir,
            dataset_id=dataset_id,
            name=name,
            description=description,
            model=s.model,
            backend=s.backend,
            chunk_tokens=chunk_tokens,
            overlap=overlap,
            include=include or (),
            exclude=exclude or (),
            follow_symlinks=follow_symlinks,
            max_file_bytes=int(s.max_file_mb * 1024 * 1024),
            default_top_k=top_k,
            full=full,
            wait=wait,
            progress=progress,
        )
    if as_json:
        _print_json(
            {
                "dataset": report.dataset_id,
                "path": str(report.folder),
                **{
                    k: getattr(report, k)
                    for k in (
                        "documents",
                        "chunks",
                        "embedded",
                        "added",
                        "changed",
                        "removed",
                        "unchanged",
                        "full_rebuild",
                    )
                },
                "skipped": [{"path": p, "reason": r} for p, r in report.skipped],
                "seconds": round(report.seconds, 2),
                "chunks_per_second": round(report.chunks_per_second, 1),
            }
        )
        return
    for rel, reason in report.skipped:
        typer.echo(f"skipped {rel}: {reason}", err=True)
    if report.rebuild_reason:
        typer.echo(f"full rebuild: {report.rebuild_reason}", err=True)
    typer.echo(
        f"{report.dataset_id}: {report.documents} documents, {report.chunks} chunks "
        f"({report.added} added, {report.changed} changed, {report.removed} removed, {report.unchanged} unchanged); "
        f"embedded {report.embedded} chunks in {report.seconds:.1f} s ({report.chunks_per_second:.0f} chunks/s)"
    )
    typer.echo(f"dataset: {report.folder}")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


class _Progress:
    """tqdm bars on stderr for the ingest phases; silent when stderr is not a terminal-like sink."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bars: dict[str, Any] = {}

    def __enter__(self) -> _Progress:
        return self

    def __call__(self, phase: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self.bars.get(phase)
        if bar is None:
            bar = self.bars[phase] = tqdm(total=total, desc=phase, unit=phase[:-1], file=sys.stderr, leave=True)
        bar.update(done - bar.n)

    def __exit__(self, *exc: object) -> None:
        for bar in self.bars.values():
            bar.close()


# ------------------------------------------------------------------ validate / datasets


@app.command()
def validate(
    ids: Annotated[list[str] | None, typer.Argument(help="Dataset ids to check; default: all.")] = None,
    datasets_dir: DatasetsDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Check manifests and their files (schema, paths, checksums, counts, dimensions); exit 1 if any fails."""
    from mcpower.registry import Registry

    s = _settings(datasets_dir=datasets_dir)
    registry = Registry(s.datasets_dir)
    entries = registry.entries()
    rows: list[dict[str, Any]] = []
    known = {e.id for e in entries}
    for wanted in ids or []:
        if wanted not in known:
            rows.append({"id": wanted, "status": "error", "error": "no such dataset"})
    for e in entries:
        if ids and e.id not in ids:
            continue
        row: dict[str, Any] = {"id": e.id, "status": e.status}
        if e.error is None:
            try:
                store = registry.store(e.id)
                row.update(documents=store.manifest.counts.documents, chunks=store.manifest.counts.chunks)
            except McpowerError as err:
                row.update(status="error", error=err.message)
        else:
            row["error"] = e.error.message
        rows.append(row)
    ok = bool(rows) and all(r["status"] == "ready" for r in rows)
    for e in entries:
        for left in sorted(e.folder.glob(".staging-*")) if (not ids or e.id in ids) else []:
            typer.echo(
                f"note: {e.id}: leftover {left.name} from an interrupted ingest (the next ingest removes it)", err=True
            )
    if as_json:
        _print_json({"ok": ok, "datasets": rows})
    else:
        if not rows:
            typer.echo(f"no datasets under {s.datasets_dir} (create one with `mcpower ingest PATH`)", err=True)
        for r in rows:
            detail = f"{r['documents']} documents, {r['chunks']} chunks" if r["status"] == "ready" else r["error"]
            typer.echo(f"{r['status']:<6} {r['id']}: {detail}")
    raise typer.Exit(0 if ok else 1)


@app.command()
def datasets(datasets_dir: DatasetsDir = None, as_json: JsonFlag = False) -> None:
    """List the datasets under the datasets root."""
    from mcpower.registry import Registry

    s = _settings(datasets_dir=datasets_dir)
    rows = [e.summary().model_dump() for e in Registry(s.datasets_dir).entries()]
    if as_json:
        _print_json({"datasets": rows})
        return
    if not rows:
        typer.echo(f"no datasets under {s.datasets_dir} (create one with `mcpower ingest PATH`)", err=True)
    for r in rows:
        if r["status"] == "ready":
            typer.echo(f"{r['id']:<24} {r['documents']:>6} docs {r['chunks']:>8} chunks  {r['name']}")
        else:
            typer.echo(f"{r['id']:<24} error: {r['error']}")


# ------------------------------------------------------------------ search


@app.command()
def search(
    dataset: Annotated[str, typer.Argument(help="Dataset id (see `mcpower datasets`).")],
    query: Annotated[str, typer.Argument(help="What to look for, in plain words (1-1024 characters).")],
    top_k: Annotated[
        int | None, typer.Option("-k", "--top-k", help="Number of results, 1-100 [default: the dataset's].")
    ] = None,
    mode: Annotated[str, typer.Option(help="hybrid (default), semantic or keyword.")] = "hybrid",
    path: Annotated[str | None, typer.Option("--path", help="Only this document (exact relative path).")] = None,
    folder: Annotated[str | None, typer.Option("--folder", help="Only documents under this folder.")] = None,
    file_type: Annotated[str | None, typer.Option("--type", help="Only this file type, e.g. .md")] = None,
    min_score: Annotated[float, typer.Option(help="Drop results scoring below this (0-1).")] = 0.0,
    datasets_dir: DatasetsDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Search a dataset: hybrid keyword + semantic ranking, filters applied before the top k."""
    from mcpower.registry import Registry
    from mcpower.results import SearchFilters

    s = _settings(datasets_dir=datasets_dir)
    registry = Registry(s.datasets_dir)
    filters = SearchFilters(path=path, folder=folder, file_type=file_type)
    response = registry.search(
        query,
        dataset=dataset,
        top_k=top_k,
        mode=mode,
        filters=filters,
        min_score=min_score,
        snippet_chars=2048 if as_json else 360,
    )
    if as_json:
        typer.echo(response.model_dump_json(indent=2))
        return
    if not response.results:
        typer.echo(
            f"no results in {dataset} for that query" + (" with these filters" if filters.active else ""), err=True
        )
        return
    if response.meta.low_confidence:
        typer.secho(
            "(low confidence: nothing matches closely; the answer may not be in this dataset)", err=True, dim=True
        )
    width = 100
    for n, r in enumerate(response.results, 1):
        head = typer.style(f"{n:>2}. {r.score:.3f}  ", fg="green") + typer.style(r.title, bold=True)
        typer.echo(head)
        where = f"{r.path}:{r.lines.start}-{r.lines.end}"
        if r.heading_path and r.heading_path != r.title:
            where += f"  § {r.heading_path}"
        typer.secho(f"    {where}", fg="cyan")
        body = " ".join(r.snippet.split())
        for line in textwrap.wrap(body, width - 4)[:4]:
            typer.echo(f"    {line}")
        typer.secho(f"    id {r.result_id}", dim=True)
    typer.secho(
        f"{response.meta.count} results in {response.meta.duration_ms:.0f} ms ({response.meta.mode})",
        err=True,
        dim=True,
    )


def main() -> None:
    """Console-script entry point."""
    app()


# ------------------------------------------------------------------ serve

CLIENTS = ("claude-desktop", "claude-code", "vscode", "cursor")


@app.command()
def serve(
    stdio: Annotated[bool, typer.Option("--stdio", help="Serve MCP over stdin/stdout (the default transport).")] = True,
    datasets_dir: DatasetsDir = None,
    log_level: Annotated[
        str | None, typer.Option(help="debug, info, warning or error [env MCPOWER_LOG_LEVEL; default info].")
    ] = None,
    log_format: Annotated[str | None, typer.Option(help="json or text [env MCPOWER_LOG_FORMAT; default json].")] = None,
    tool_names: Annotated[
        str | None, typer.Option(help="default (knowledge_search ...) or seed (knowledge.search ...).")
    ] = None,
    print_config: Annotated[
        str | None,
        typer.Option("--print-config", help=f"Print the client config snippet and exit: {', '.join(CLIENTS)}."),
    ] = None,
) -> None:
    """Run the MCP server over stdio (started by MCP clients; logs go to stderr as JSON lines)."""
    s = _settings(datasets_dir=datasets_dir, log_level=log_level, log_format=log_format, tool_names=tool_names)
    if print_config is not None:
        typer.echo(client_config(print_config, s.datasets_dir))
        return
    from mcpower.server import configure_logging

    configure_logging(s.log_level, s.log_format)
    from mcpower.registry import Registry
    from mcpower.server import create_server
    from mcpower.transport import run_stdio

    registry = Registry(s.datasets_dir)
    entries = registry.entries()
    logger.info(
        "server.startup",
        extra={
            "event": "server.startup",
            "version": __version__,
            "datasets_dir": str(s.datasets_dir),
            "datasets": [e.id for e in entries if e.status == "ready"],
            "datasets_with_errors": [e.id for e in entries if e.status == "error"],
        },
    )
    run_stdio(create_server(registry, s.tool_names))


def client_config(client: str, datasets_dir: Path) -> str:
    """The JSON (or command) a client needs to start this server, with absolute paths."""
    import shutil

    if client not in CLIENTS:
        from mcpower.errors import McpowerError

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


# ------------------------------------------------------------------ eval


@app.command("eval")
def eval_(
    dataset: Annotated[str, typer.Argument(help="Dataset id to evaluate.")],
    queries: Annotated[Path, typer.Option(help="Queries, JSON lines with _id (or id) and text (BEIR).")],
    qrels: Annotated[Path, typer.Option(help="Judgments, TSV: query-id, corpus-id, score (header optional).")],
    mode: Annotated[str, typer.Option(help="hybrid, semantic, keyword, or all (compare the three).")] = "hybrid",
    depth: Annotated[int, typer.Option("-k", "--depth", min=10, max=1000, help="Chunks retrieved per query.")] = 300,
    datasets_dir: DatasetsDir = None,
    as_json: JsonFlag = False,
) -> None:
    """Measure retrieval quality on judged queries: nDCG@10, Recall@10, Recall@100, MRR@10."""
    from mcpower.evaluation import METRICS, SearchFn, evaluate, load_qrels, load_queries
    from mcpower.registry import Registry

    s = _settings(datasets_dir=datasets_dir)
    registry = Registry(s.datasets_dir)
    registry.store(dataset)  # fail early on an unknown or broken dataset
    q, judged = load_queries(queries), load_qrels(qrels)
    modes = ["keyword", "semantic", "hybrid"] if mode == "all" else [mode]

    def searcher(m: str) -> SearchFn:
        return lambda text, k: registry.rank_paths(text, dataset, k, m)

    reports = [evaluate(searcher(m), q, judged, depth, dataset, m) for m in modes]
    if as_json:
        _print_json([{"dataset": r.dataset, "mode": r.mode, "queries": r.queries, **r.metrics} for r in reports])
        return
    typer.echo(f"{'mode':<10}" + "".join(f"{m:>12}" for m in METRICS) + f"{'queries':>9}{'ms/query':>10}")
    for r in reports:
        ms = r.seconds * 1000 / max(r.queries, 1)
        typer.echo(f"{r.mode:<10}" + "".join(f"{r.metrics[m]:>12.4f}" for m in METRICS) + f"{r.queries:>9}{ms:>10.1f}")
