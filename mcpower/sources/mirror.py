"""Where fetched sources live on disk: one folder per (datasets location, dataset, source) in
mcpower's cache, held under a lock while it is written.

    <cache>/sources/<dataset>-<hash>/
        .lock        held (flock) by the crawl or clone writing here
        state.json   the crawl's sidecar: per page, its URL, ETag, Last-Modified, type, when fetched
        pages/       the crawled pages, at their mirror paths (urls.py): the folder ingest reads
        checkout/    or a git clone (git.py)

The sidecar holds no request header (a ``--header`` value is never written anywhere). Pages are
written atomically (a hidden temporary file renamed over the page, so discovery never sees half a
page) and only when their bytes changed, so an unchanged page keeps its file as it was. The folder
is a cache: deleting it costs a full fetch, never the dataset.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mcpower.errors import DatasetLockedError, IngestError

MAX_STATE_BYTES = 64 * 1024 * 1024
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def source_folder(cache_dir: Path, location: str, dataset_id: str, source: str) -> Path:
    """The cache folder of ``dataset_id`` (in the datasets at ``location``) fetched from ``source``."""
    key = hashlib.sha256(f"{location}\0{dataset_id}\0{source}".encode()).hexdigest()[:12]
    return cache_dir.expanduser() / "sources" / f"{dataset_id}-{key}"


@contextlib.contextmanager
def locked(folder: Path, wait: bool = False) -> Iterator[None]:
    """Hold ``folder``'s lock (made if need be) while fetching into it.

    Raises:
        DatasetLockedError: another mcpower process is fetching into it, and not ``wait``.
    """
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / ".lock", os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise DatasetLockedError(
                "another mcpower process is fetching this source now; try again when it is done (or pass --wait)"
            ) from None
        yield
    finally:
        os.close(fd)


@dataclass
class PageState:
    url: str
    etag: str | None = None
    last_modified: str | None = None
    content_type: str | None = None
    fetched_at: str = ""

    def validators(self) -> dict[str, str]:
        out = {}
        if self.etag:
            out["If-None-Match"] = self.etag
        if self.last_modified:
            out["If-Modified-Since"] = self.last_modified
        return out


@dataclass
class CrawlState:
    """The sidecar of a crawled mirror: the start URL and each page's state, by mirror path."""

    start: str
    pages: dict[str, PageState] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path, start: str) -> CrawlState:
        """The sidecar in ``folder`` for ``start``; an empty one if there is none, it is damaged
        (a cache: a full fetch puts it right), or it was written for another start URL."""
        from mcpower.jsonfile import read_json

        try:
            data: Any = read_json(folder / "state.json", MAX_STATE_BYTES, "crawl states")
        except ValueError:
            return cls(start)
        if not isinstance(data, dict) or data.get("start") != start or not isinstance(data.get("pages"), dict):
            return cls(start)
        pages = {}
        for rel, p in data["pages"].items():
            if isinstance(rel, str) and isinstance(p, dict) and isinstance(p.get("url"), str):
                pages[rel] = PageState(
                    p["url"],
                    _text(p.get("etag")),
                    _text(p.get("lastModified")),
                    _text(p.get("contentType")),
                    _text(p.get("fetchedAt")) or "",
                )
        return cls(start, pages)

    def write(self, folder: Path) -> None:
        data = {
            "start": self.start,
            "pages": {
                rel: {
                    "url": p.url,
                    "etag": p.etag,
                    "lastModified": p.last_modified,
                    "contentType": p.content_type,
                    "fetchedAt": p.fetched_at,
                }
                for rel, p in sorted(self.pages.items())
            },
        }
        write_atomic(folder / "state.json", json.dumps(data, ensure_ascii=False, indent=1).encode())


def _text(v: object) -> str | None:
    return v[:1024] if isinstance(v, str) and v.isprintable() else None


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a hidden temporary file renamed over it. Not fsynced: the
    folder is a cache, and a page a crash loses is fetched again by the next crawl (an fsync per
    page was a tenth of a crawl's time)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def store_page(root: Path, rel: str, data: bytes) -> bool:
    """Put ``data`` at ``root/rel`` unless it is there already; whether the file changed.

    Raises:
        IngestError: the path clashes with another page's (a file where a folder must be ...).
    """
    path = root.joinpath(*rel.split("/"))
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | _NOFOLLOW)) as f:
            if f.read(len(data) + 1) == data:
                return False
    except (FileNotFoundError, NotADirectoryError):
        pass
    except OSError as e:
        raise IngestError(f"its mirror path clashes with another page's ({e.strerror})") from None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)
    except OSError as e:
        raise IngestError(f"its mirror path clashes with another page's ({e.strerror})") from None
    return True


def remove_pages(root: Path, rels: list[str]) -> None:
    """Delete these pages from the mirror, and the folders they leave empty."""
    for rel in rels:
        path = root.joinpath(*rel.split("/"))
        with contextlib.suppress(OSError):
            path.unlink()
        parent = path.parent
        while parent != root and parent.is_relative_to(root):
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent
