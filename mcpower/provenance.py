"""Where a dataset came from: the source record a manifest keeps (the folder, the options that chose
its files, a fetched site's or repository's origin), and the rule that a re-ingest reads the same
source unless told `--replace`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from mcpower.errors import IngestError
from mcpower.manifest import DatasetInfo, Origin, SourceInfo, slugify

if TYPE_CHECKING:
    from mcpower.ingestion import IngestOptions, IngestReport


def check_same_source(ds_id: str, prev: DatasetInfo, src: Path, origin: Origin | None = None) -> None:
    """Refuse to rebuild ``ds_id`` from another folder (or site, or repository) than the one it was
    built from.

    Raises:
        IngestError: the dataset records another source.
    """
    if prev.source is None or prev.source.path == str(src):
        return
    before = prev.source.origin
    if before is not None or origin is not None:
        was = before.url if before is not None else prev.source.path
        now = origin.url if origin is not None else str(src)
        raise IngestError(
            f"dataset {ds_id!r} was built from {was}, not {now}; nothing was changed. To keep both, give "
            f"this one its own id (--id NEW-ID); to rebuild {ds_id!r} from {now} instead, pass --replace"
        )
    raise IngestError(
        f"dataset {ds_id!r} was built from {prev.source.path}, not {src}; nothing was changed. "
        f"To keep both, give this one its own id (--id {slugify(src.parent.name + '-' + src.name) or 'NEW-ID'}); "
        f"to rebuild {ds_id!r} from {src} instead, pass --replace"
    )


def source_record(src: Path, opts: IngestOptions, report: IngestReport) -> SourceInfo | None:
    """What the manifest records of the source folder and the options that select its files."""
    if opts.source_record is not None:
        update: dict[str, object] = {"path": str(src)}
        if opts.origin is not None:
            update["origin"] = opts.origin
        return opts.source_record.model_copy(update=update)
    try:
        return SourceInfo(
            path=str(src),
            include=tuple(opts.include),
            exclude=tuple(opts.exclude),
            follow_symlinks=opts.follow_symlinks,
            max_file_bytes=opts.max_file_bytes,
            code=opts.code,
            keep_site_files=opts.keep_site_files,
            keep_duplicates=opts.keep_duplicates,
            origin=opts.origin,
        )
    except ValidationError as e:
        where, msg = ".".join(str(x) for x in e.errors()[0]["loc"]), e.errors()[0]["msg"]
        reason = f"{where}: {msg}" if where else msg
        report.notes.append(f"source folder not recorded ({reason[:200]}): `serve --watch` cannot watch this dataset")
        return None
