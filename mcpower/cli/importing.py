"""`mcpower import`: convert a dataset of the original system's format into mcpower's format."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mcpower.cli.common import DatasetsDir, JsonFlag, print_json, settings, setup_logging
from mcpower.defaults import BACKENDS, DEFAULT_BACKEND


def import_(
    path: Annotated[
        Path, typer.Argument(help="Folder of a dataset in the original system's format (it holds its manifest.json).")
    ],
    dataset_id: Annotated[
        str | None,
        typer.Option(
            "--id",
            help="Dataset id; default: the one in its manifest. Imported into its own folder, it is upgraded in place.",
        ),
    ] = None,
    datasets_dir: DatasetsDir = None,
    re_embed: Annotated[
        bool,
        typer.Option(
            "--re-embed", help="Embed the chunks again with all-MiniLM-L6-v2 instead of keeping the stored vectors."
        ),
    ] = False,
    backend: Annotated[
        str | None,
        typer.Option(help=f"Backend when embedding again: {', '.join(BACKENDS)} [env MCPOWER_BACKEND; default onnx]."),
    ] = None,
    wait: Annotated[
        bool, typer.Option("--wait", help="Wait for another writer of this dataset instead of failing.")
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """Convert a dataset built by the original system into mcpower's format (chunks kept, vectors reused)."""
    from mcpower.store.original.convert import BACKUP_NAME, import_original

    setup_logging()
    s = settings(datasets_dir=datasets_dir, backend=backend)
    report = import_original(
        path,
        s.datasets_dir,
        dataset_id,
        re_embed=re_embed,
        backend=s.backend or DEFAULT_BACKEND,
        cache_dir=s.cache_dir,
        wait=wait,
    )
    if as_json:
        print_json(
            {
                "dataset": report.dataset_id,
                "path": report.location,
                "documents": report.documents,
                "chunks": report.chunks,
                "embedded": report.embedded,
                "reason": report.reason or None,
                "in_place": report.in_place,
                "seconds": round(report.seconds, 2),
            }
        )
        return
    vectors = f"embedded again ({report.reason})" if report.reason else "vectors kept"
    typer.echo(
        f"{report.dataset_id}: imported {report.documents} documents, {report.chunks} chunks; "
        f"{vectors}; {report.seconds:.1f} s"
    )
    typer.echo(f"dataset: {report.location}")
    if report.in_place:
        typer.echo(
            f"upgraded in place: the original manifest is kept as {BACKUP_NAME}; its index and metadata files "
            "are no longer read and may be removed",
            err=True,
        )
