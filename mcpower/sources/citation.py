"""The URL a result cites: a crawled page's own URL, or a repository file's page at the commit it
was read from on a well-known host (GitHub, GitLab, Codeberg and other Forgejo/Gitea hosts,
Bitbucket, sourcehut). A file on another host, or in a repository cloned from disk, has none: its
``path`` is the citation.

Computed from the dataset's source record and the document's path alone (urls.py's mapping), so a
dataset needs no table of URLs. Light: on the cold search path.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import quote, urlsplit

from mcpower.manifest import SourceInfo
from mcpower.sources.urls import Scope, URLError

_SCP = re.compile(r"^[^@/]+@([^:/]+):(.+)$")
# host -> how a file at a commit is linked: {base} is https://host/owner/repo
_HOSTS = {
    "github.com": "{base}/blob/{commit}/{path}",
    "gitlab.com": "{base}/-/blob/{commit}/{path}",
    "codeberg.org": "{base}/src/commit/{commit}/{path}",
    "gitea.com": "{base}/src/commit/{commit}/{path}",
    "bitbucket.org": "{base}/src/{commit}/{path}",
    "git.sr.ht": "{base}/tree/{commit}/item/{path}",
}


def url_of(source: SourceInfo | None, path: str) -> str | None:
    """The URL of the document at ``path`` of a dataset with this source record, or None."""
    origin = source.origin if source is not None else None
    if origin is None:
        return None
    if origin.kind == "web":
        scope = _scope(origin.url)
        return scope.url_of(path) if scope is not None else None
    if origin.commit:
        inside = f"{origin.subdir.strip('/')}/{path}" if origin.subdir and origin.subdir.strip("/") else path
        return file_link(origin.url, origin.commit, inside)
    return None


@functools.lru_cache(maxsize=256)
def _scope(url: str) -> Scope | None:
    try:
        return Scope.of(url)
    except URLError:
        return None


def repository_page(url: str) -> tuple[str, str] | None:
    """(host, ``https://host/owner/repo``) for a repository address on a well-known host."""
    scp = _SCP.match(url)
    if scp:
        host, path = scp.group(1).lower(), scp.group(2)
    else:
        parts = urlsplit(url)
        if parts.scheme.lower().removeprefix("git+") not in ("https", "http", "ssh"):
            return None
        host, path = (parts.hostname or "").lower(), parts.path
    if host not in _HOSTS:
        return None
    path = path.strip("/").removesuffix(".git")
    if path.count("/") < 1 or any(p in ("", ".", "..") for p in path.split("/")):
        return None
    return host, f"https://{host}/{quote(path, safe='/~')}"


def file_link(repository: str, commit: str, path: str) -> str | None:
    """The page of ``path`` at ``commit`` on the repository's host, or None (an unknown host)."""
    page = repository_page(repository)
    if page is None or not re.fullmatch(r"[0-9a-f]{7,64}", commit):
        return None
    host, base = page
    return _HOSTS[host].format(base=base, commit=commit, path=quote(path, safe="/"))
