"""`mcpower validate` and `mcpower datasets`: what datasets there are, and whether they are sound."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Annotated, Any

import typer

from mcpower.cli.common import DatasetsDir, JsonFlag, MilvusUri, no_datasets, open_registry, print_json, settings
from mcpower.cli.progress import plural
from mcpower.errors import McpowerError


def _message(dataset_id: str, message: str) -> str:
    """An error message without the dataset id it starts with (the row already names it)."""
    return message.removeprefix(f"{dataset_id}: ")


def _looked_in(root: Path) -> str:
    where = root.expanduser().resolve()
    if where.is_dir():
        return f"under {where}"
    return f"under {where}: the folder does not exist (point --datasets-dir / MCPOWER_DATASETS_DIR at your datasets)"


def validate(
    ids: Annotated[list[str] | None, typer.Argument(help="Dataset ids to check; default: all.")] = None,
    datasets_dir: DatasetsDir = None,
    milvus_uri: MilvusUri = None,
    as_json: JsonFlag = False,
) -> None:
    """Check manifests and their files (schema, paths, checksums, counts, dimensions); exit 1 if any fails.

    Datasets of the original system's format have no checksums: their vector and record counts,
    dimension and unit-length vectors are checked instead.
    """

    s = settings(datasets_dir=datasets_dir, milvus_uri=milvus_uri)
    registry = open_registry(s)
    entries = registry.entries()
    rows: list[dict[str, Any]] = []
    known = {e.id for e in entries}
    unread = "; ".join(registry.unreadable())  # it may be where mcpower could not look
    for wanted in ids or []:
        if wanted not in known:
            error = f"no such dataset {_looked_in(s.datasets_dir)}"
            if unread:
                error += f"; it may be in a database that could not be read: {unread}"
            rows.append({"id": wanted, "status": "error", "error": error})
    for e in entries:
        if ids and e.id not in ids:
            continue
        row: dict[str, Any] = {"id": e.id, "status": e.status}
        if e.error is None:
            try:
                counts = registry.store(e.id).info.counts
                row.update(documents=counts.documents, chunks=counts.chunks)
            except McpowerError as err:
                row.update(status="error", error=err.message)
        else:
            row["error"] = e.error.message
        rows.append(row)
    # Nothing to check is not a failure (as `datasets` and `search --all` exit 0): the message on
    # stderr names the folder, so a wrong --datasets-dir is still plain to see.
    ok = all(r["status"] == "ready" for r in rows)
    for e in entries:
        for note in e.notes if (not ids or e.id in ids) else []:
            typer.echo(f"note: {e.id}: {note}", err=True)
    if as_json:
        print_json({"ok": ok, "datasets": rows})
    else:
        if not rows:
            typer.echo(no_datasets(s.datasets_dir), err=True)
        for r in rows:
            detail = (
                f"{plural(r['documents'], 'document')}, {plural(r['chunks'], 'chunk')}"
                if r["status"] == "ready"
                else _message(r["id"], r["error"])
            )
            typer.echo(f"{r['status']:<6} {r['id']}: {detail}")
    raise typer.Exit(0 if ok else 1)


def _origin_line(origin: dict[str, Any]) -> str:
    """'site https://… fetched 2026-11-28 01:16' or 'repository … (ref v2, folder docs) at 1a2b3c4d5e6f fetched …'."""
    parts = [("site " if origin["kind"] == "web" else "repository ") + origin["url"]]
    extra = [f"{label} {origin[key]}" for key, label in (("ref", "ref"), ("subdir", "folder")) if origin.get(key)]
    if extra:
        parts.append(f"({', '.join(extra)})")
    if origin.get("commit"):
        parts.append(f"at {origin['commit'][:12]}")
    if origin.get("fetched_at"):
        parts.append(f"fetched {origin['fetched_at'][:16].replace('T', ' ')}")
    return " ".join(parts)


def datasets(datasets_dir: DatasetsDir = None, milvus_uri: MilvusUri = None, as_json: JsonFlag = False) -> None:
    """List the datasets under the datasets root: counts, when each was last updated (UTC), whether
    an mcpower process watches its source folder (`--watch`), the site or repository (and commit) it
    was fetched from and when, and its folder (--json)."""

    s = settings(datasets_dir=datasets_dir, milvus_uri=milvus_uri)
    entries = open_registry(s).entries()
    rows: list[dict[str, Any]] = []
    for e in entries:
        source = e.info.source if e.info is not None and e.error is None else None
        # The source folder is shown here, to the user at the terminal, never to MCP clients.
        origin = source.origin if source is not None else None
        rows.append(
            {
                **e.summary().model_dump(),
                "source": source.path if source else None,
                "origin": origin.model_dump(mode="json", exclude_none=True) if origin is not None else None,
            }
        )
    if as_json:
        print_json({"datasets": rows})
        return
    if not rows:
        typer.echo(no_datasets(s.datasets_dir), err=True)
        return
    width = max(len("DATASET"), *(len(r["id"]) for r in rows))
    typer.echo(
        f"{'DATASET':<{width}}  {'DOCS':>6}  {'CHUNKS':>8}  {'UPDATED (UTC)':<16}  {'WATCH':<14}  NAME / DESCRIPTION"
    )
    for r, e in zip(rows, entries):
        if r["status"] != "ready":
            typer.echo(f"{r['id']:<{width}}  error: {_message(r['id'], r['error'])}")
            continue
        updated = (r["updated_at"] or "")[:16].replace("T", " ")
        watched = (r["watch_state"] or "").replace("_", " ") if r["watched"] else "not watched"
        typer.echo(
            f"{r['id']:<{width}}  {r['documents']:>6}  {r['chunks']:>8}  {updated:<16}  {watched:<14}  {r['name']}"
        )
        indent = width + 2 + 6 + 2 + 8 + 2 + 16 + 2 + 14 + 2
        description = " ".join((r["description"] or "").split())
        if description and description != r["name"]:
            typer.echo(" " * indent + textwrap.shorten(description, width=max(40, 118 - indent), placeholder=" …"))
        types = sorted((r["file_types"] or {}).items(), key=lambda t: (-t[1], t[0]))
        if types:
            typer.echo(" " * indent + "files: " + ", ".join(f"{t} {n}" for t, n in types))
        languages = sorted((r["languages"] or {}).items(), key=lambda t: (-t[1], t[0]))
        if languages:
            typer.echo(" " * indent + "languages (chunks): " + ", ".join(f"{code} {n}" for code, n in languages))
        if r["origin"]:
            typer.echo(" " * indent + _origin_line(r["origin"]))
        if r["watch_message"]:
            typer.echo(" " * indent + r["watch_message"])
        if r["format"] == "original":
            typer.echo(
                " " * indent + "original system's format, served read-only; "
                f"`mcpower import {s.datasets_dir / e.location}` converts it"
            )
