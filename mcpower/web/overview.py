"""The datasets page's data: each dataset as ``knowledge_list_datasets`` and ``mcpower datasets``
describe it (its :meth:`DatasetEntry.summary`), with what a person looking after it also needs:
its source folder (the real one for the operator; for anyone else relative, or redacted as clients
see paths), size on disk, when it was created
and last re-indexed, and, for a dataset in error, its reason in plain words and the command that
fixes it."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from mcpower.errors import NO_DATASETS_YET
from mcpower.lookups import utc_now_iso
from mcpower.manifest import Origin
from mcpower.registry import Registry
from mcpower.server.responses import Redactor
from mcpower.store import DatasetEntry

# A dataset's folder is walked for its size at most once per published version, and no further
# than this many files (a local dataset holds a handful; a stray copy in its folder could hold more).
MAX_SIZED_FILES = 10_000

# What each error code means for the person looking at the page, and what to run.
_PROBLEMS: dict[str, tuple[str, str]] = {
    "INVALID_MANIFEST": (
        "Its description (manifest.json) cannot be read or breaks a rule, so it cannot be searched.",
        "mcpower ingest {source} --id {id} --replace",
    ),
    "INDEX_MISMATCH": (
        "Its files disagree with its description: they changed or were damaged after it was written.",
        "mcpower validate {id}   # then rebuild it: mcpower ingest {source} --id {id} --replace",
    ),
    "ENGINE_UNAVAILABLE": (
        "The database holding it (Milvus) cannot be reached, or its client is not installed.",
        "pip install 'mcpower[milvus]'   # and check --milvus-uri / MCPOWER_MILVUS_URI",
    ),
    "ENGINE_AUTH": (
        "The database holding it refused this server's credentials.",
        "export MCPOWER_MILVUS_TOKEN=user:password   # then restart the server",
    ),
    "EMBEDDING_MODEL": (
        "The embedding model it was built with cannot be loaded here, or is not allowed.",
        "export MCPOWER_ALLOWED_MODELS=<its model>   # or rebuild it: mcpower ingest {source} --id {id} --replace",
    ),
    "DATASET_UNAVAILABLE": (
        "It exists but cannot be loaded.",
        "mcpower validate {id}",
    ),
}
_DEFAULT_PROBLEM = ("It cannot be served.", "mcpower validate {id}")


class Sizes:
    """Size on disk per dataset version, measured once per version (a republish measures again)."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, int], int | None] = {}
        self._lock = threading.Lock()

    def of(self, entry: DatasetEntry) -> int | None:
        folder = entry.handle
        if not isinstance(folder, Path) or entry.info is None:
            return None  # not a folder of ours (Milvus): its engine knows
        key = (entry.id, hash(entry.version))
        with self._lock:
            if key in self._known:
                return self._known[key]
        size = folder_size(folder)
        with self._lock:
            if len(self._known) > 1000:
                self._known.clear()
            self._known[key] = size
        return size


def folder_size(folder: Path) -> int | None:
    """Bytes of the files under ``folder`` (symlinks not followed), None if it cannot be read."""
    total = files = 0
    try:
        for root, _, names in os.walk(folder):
            for name in names:
                files += 1
                if files > MAX_SIZED_FILES:
                    return total
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                total += st.st_size
    except OSError:
        return None
    return total


def shown_folder(path: str, redactor: Redactor, reveal: bool = False) -> str:
    """A source folder as the page shows it: as it is to the operator (``reveal``: the server's own
    all-datasets token, or nobody authenticated on a loopback server — the user who started it);
    otherwise relative to the server's working folder when inside it, else as MCP clients are
    shown paths (``<datasets>/x``, ``~/x``, ``<path>``)."""
    if reveal:
        return path
    try:
        rel = Path(path).relative_to(Path.cwd())
    except (ValueError, OSError):
        return redactor.message(path)
    return str(rel) if str(rel) != "." else "."


def origin_row(origin: Origin, redactor: Redactor, reveal: bool = False) -> dict[str, Any]:
    """A fetched source as the page shows it: its address (a ``file://`` one's path redacted as
    clients see paths, but for the operator), ref, commit, folder and when it was fetched."""
    local = origin.url.startswith("file:") and not reveal
    url = "file://" + redactor.message(origin.url[7:]) if local else origin.url
    return {
        "kind": origin.kind,
        "url": url,
        "link": url if url.startswith(("http://", "https://")) else None,
        "ref": origin.ref,
        "commit": origin.commit,
        "subdir": origin.subdir,
        "fetched_at": origin.fetched_at.isoformat() if origin.fetched_at else None,
    }


def _staleness(entry: DatasetEntry, source: str | None) -> tuple[bool | None, str | None]:
    """Whether a ready dataset is known to be behind its files: a watched one is kept current; one
    whose source folder is gone cannot be (one stat); otherwise unknown without reading the folder
    (each search result still says whether its own file changed)."""
    if entry.error is not None or source is None:
        return None, None
    if entry.watch is not None and entry.watch.state in ("watching", "indexing"):
        return False, None
    if not os.path.isdir(source):
        return True, "folder gone"
    return None, None


def dataset_rows(
    registry: Registry, entries: list[DatasetEntry], redactor: Redactor, sizes: Sizes, reveal: bool = False
) -> dict[str, Any]:
    """The datasets page's data (and its JSON twin's); ``reveal``: shown to the operator, with the
    real source folders (:func:`shown_folder`)."""
    rows = []
    for e in entries:
        row: dict[str, Any] = redactor.payload(e.summary().model_dump(mode="json"))
        info = e.info
        source = info.source if info is not None and e.error is None else None
        row["source"] = shown_folder(source.path, redactor, reveal) if source is not None else None
        row["origin"] = origin_row(source.origin, redactor, reveal) if source is not None and source.origin else None
        row["created_at"] = info.created_at.isoformat() if info is not None and e.error is None else None
        row["size_bytes"] = sizes.of(e) if e.error is None else None
        row["watch_since"] = e.watch.since or None if e.watch else None
        row["last_reindex"] = e.watch.last_update if e.watch else None
        counts = e.watch.last_counts if e.watch else None
        row["last_reindex_counts"] = counts.model_dump() if counts is not None else None
        row["notes"] = [redactor.message(n) for n in e.notes]
        row.update(error_code=None, problem=None, fix=None)
        local = source is not None and source.origin is None  # a fetched source is as fresh as its fetch
        row["stale"], row["stale_reason"] = _staleness(e, source.path if local and source is not None else None)
        if e.error is not None:
            meaning, fix = _PROBLEMS.get(e.error.code, _DEFAULT_PROBLEM)
            where = row["source"] or "SOURCE_FOLDER"
            row["error_code"] = e.error.code
            row["problem"] = meaning
            row["fix"] = fix.format(id=e.id if "@" not in e.id else e.id.split("@")[0], source=where)
        if row.get("status") == "ready" and row.get("watch_state") in ("source_missing", "failed"):
            row["problem"] = "Its watch needs attention: " + (row.get("watch_message") or "see the server's log")
        elif row["stale"]:
            row["problem"] = "Its source folder is gone: it answers from the files as they were when indexed."
            row["fix"] = f"mcpower ingest NEW_FOLDER --id {e.id} --replace"
        rows.append(row)
    return {
        "datasets": rows,
        "counts": {
            "ready": sum(r["status"] == "ready" for r in rows),
            "error": sum(r["status"] == "error" for r in rows),
            "watched": sum(bool(r.get("watched")) for r in rows),
            "indexing": sum(r.get("watch_state") == "indexing" for r in rows),
        },
        "unreadable": [redactor.message(u) for u in registry.unreadable()],
        # Said when nothing is listed and it is not that none exists yet (the page says that itself):
        # the caller's token grants none.
        "none_here": None if rows or registry.none_here() == NO_DATASETS_YET else registry.none_here(),
        "generated_at": utc_now_iso(),
    }
