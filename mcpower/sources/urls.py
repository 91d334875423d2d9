"""URLs of a crawl: normalised, in scope or not, and mapped to the mirror's relative paths and back.

A crawl's **scope** is its start URL's scheme, host and port, and the paths under the start URL's
folder (``http://h/library/`` and ``http://h/library/json.html`` both give ``/library/``; a last
segment without a dot, ``http://h/library``, is taken as the folder it usually is).

A page's **mirror path** (the document's ``path`` in the dataset) is its URL path under the scope's
folder, segments kept percent-encoded as normalised (so the mapping is exact both ways):

    /library/json.html      json.html         the URL's own name when its suffix fits the content
    /library/               index.html        a folder's page (and ``/library/index.html`` is it too)
    /library/intro          intro^.html       a suffix added for the reader: ``^`` marks it, as a
                                              normalised URL never holds a bare ``^``

so :func:`url_of` gives back the page's URL from the dataset's start URL and the path alone: the
dataset needs no table of URLs, and its results cite pages wherever the dataset is copied. URLs
with a query string, hidden segments (``/.well-known/``), empty segments or very long names are
out of the mapping and reported as skipped.
"""

from __future__ import annotations

import functools
import posixpath
import re
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit, urlunsplit

# A segment's characters a normalised URL keeps bare (RFC 3986 unreserved, sub-delims, ':' and '@').
_SAFE = "!$&'()*+,;=:@-._~"
_SPACE_OR_CONTROL = re.compile(r"[\x00-\x20\x7f]")
ADDED = "^"  # marks a suffix mcpower added to a URL's name
# File names and paths the mirror writes: well under NAME_MAX (255 bytes) and PATH_MAX.
MAX_SEGMENT_BYTES = 200
MAX_PATH_CHARS = 1000
MAX_URL_CHARS = 2048
# The suffix each kind of content is stored under when the URL's own name does not say it.
SUFFIX = {"html": ".html", "markdown": ".md", "text": ".txt", "rst": ".rst", "pdf": ".pdf"}
# URL name suffixes that already say the kind.
KIND_OF_SUFFIX = {
    ".html": "html",
    ".htm": "html",
    ".md": "markdown",
    ".markdown": "markdown",
    ".mdx": "markdown",
    ".txt": "text",
    ".rst": "rst",
    ".rest": "rst",
    ".pdf": "pdf",
}
INDEX = "index.html"


class URLError(ValueError):
    """A URL that cannot be crawled, with why (for a message)."""


def normalize(url: str) -> str:
    """``url`` in one canonical form: scheme and host lower-case, default port dropped, dot
    segments resolved, each path segment's percent-encoding normalised, the fragment dropped.

    Raises:
        URLError: not an http(s) URL with a host, credentials in it, or too long.
    """
    if len(url) > MAX_URL_CHARS:
        raise URLError(f"longer than {MAX_URL_CHARS} characters")
    if _SPACE_OR_CONTROL.search(url):
        raise URLError("holds spaces or control characters")
    return _normalize(url)


@functools.lru_cache(maxsize=65_536)  # a site's pages share most of their links
def _normalize(url: str) -> str:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as e:
        raise URLError(f"not a valid URL ({e})") from None
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise URLError("only http:// and https:// pages are crawled")
    if parts.username is not None or parts.password is not None:
        raise URLError("credentials in the URL are not kept; pass them with --header 'Authorization: ...'")
    host = (parts.hostname or "").lower()
    if not host:
        raise URLError("no host")
    try:
        host = host.encode("idna").decode("ascii") if not host.isascii() else host
    except UnicodeError:
        raise URLError("a host name that cannot be encoded") from None
    netloc = f"[{host}]" if ":" in host else host
    if port is not None and port != {"http": 80, "https": 443}[scheme]:
        netloc += f":{port}"
    path = posixpath.normpath(parts.path or "/") if parts.path not in ("", "/") else "/"
    if path.startswith("//"):
        path = "/" + path.lstrip("/")
    if (parts.path.endswith("/") or parts.path.endswith("/.") or parts.path.endswith("/..")) and path != "/":
        path += "/"
    segments = [quote(unquote(s), safe=_SAFE) for s in path.split("/")]
    return urlunsplit((scheme, netloc, "/".join(segments), parts.query, ""))


@dataclass(frozen=True)
class Scope:
    """What a crawl may fetch: ``origin`` (scheme://host[:port]) and the paths under ``prefix``."""

    origin: str
    prefix: str  # starts and ends with '/'

    @classmethod
    def of(cls, start: str) -> Scope:
        """The scope of a start URL (module docstring).

        Raises:
            URLError: not a URL that can be crawled.
        """
        url = normalize(start)
        parts = urlsplit(url)
        path = parts.path
        if not path.endswith("/"):
            head, _, last = path.rpartition("/")
            path = f"{head}/{last}/" if "." not in last else head + "/"
        return cls(f"{parts.scheme}://{parts.netloc}", path)

    @property
    def root(self) -> str:
        """The scope's own folder page, ``origin + prefix``."""
        return self.origin + self.prefix

    def contains(self, url: str) -> bool:
        """Whether the normalised ``url`` is in scope (the prefix folder without its slash too)."""
        if not url.startswith(self.origin + "/"):
            return False
        path = urlsplit(url).path
        return path.startswith(self.prefix) or path + "/" == self.prefix

    def path_of(self, url: str, kind: str) -> str:
        """The mirror path of the in-scope, normalised ``url`` holding ``kind`` content.

        Raises:
            URLError: the URL is out of the mapping (a query string, a hidden or empty segment ...).
        """
        parts = urlsplit(url)
        if parts.query:
            raise URLError("has a query string")
        path = parts.path if parts.path != self.prefix[:-1] else self.prefix
        if not path.startswith(self.prefix):
            raise URLError("out of scope")
        *folders, name = path[len(self.prefix) :].split("/")
        for segment in folders:
            _check_segment(segment)
        if name == "" or (name == INDEX and kind == "html"):
            name = INDEX if kind == "html" else ADDED + SUFFIX[kind]
        else:
            _check_segment(name)
            if KIND_OF_SUFFIX.get(posixpath.splitext(name)[1].lower()) != kind:
                name += ADDED + SUFFIX[kind]
        rel = "/".join([*folders, name])
        if len(rel) > MAX_PATH_CHARS:
            raise URLError(f"a path longer than {MAX_PATH_CHARS} characters")
        return rel

    def url_of(self, rel: str) -> str:
        """The URL of the page at mirror path ``rel`` (the inverse of :meth:`path_of`)."""
        *folders, name = rel.split("/")
        if name == INDEX:
            name = ""
        elif ADDED in name:
            name = name[: name.rindex(ADDED)]
        return self.origin + self.prefix + "/".join([*folders, name])


def _check_segment(segment: str) -> None:
    if segment == "":
        raise URLError("an empty path segment ('//')")
    if segment.startswith("."):
        raise URLError("a hidden path segment")
    if len(segment.encode()) > MAX_SEGMENT_BYTES:
        raise URLError(f"a path segment longer than {MAX_SEGMENT_BYTES} bytes")
    if ADDED in segment:  # only in a URL that was not normalised
        raise URLError("not normalised")


def join(base: str, href: str) -> str | None:
    """``href`` resolved against ``base`` and normalised; None if it is not an http(s) URL."""
    from urllib.parse import urljoin

    href = href.strip()
    if not href or href.startswith(("#", "javascript:", "mailto:", "data:", "tel:")):
        return None
    try:
        return normalize(urljoin(base, href))
    except (URLError, ValueError):
        return None
