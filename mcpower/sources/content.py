"""What a fetched body is: which reader takes it (by its Content-Type, its URL's suffix, its first
bytes), and its text in UTF-8 when the server names another charset."""

from __future__ import annotations

import codecs
import posixpath
from urllib.parse import urlsplit

from mcpower.sources.urls import KIND_OF_SUFFIX, SUFFIX

_TYPES = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/x-rst": "rst",
    "text/prs.fallenstein.rst": "rst",
    "application/pdf": "pdf",
}
_GENERIC = {"", "application/octet-stream", "binary/octet-stream"}
_TEXT_KINDS = ("markdown", "rst", "text")


def media_type(content_type: str) -> str:
    return content_type.split(";")[0].strip().lower()


def content_kind(content_type: str, url: str, head: bytes) -> str | None:
    """'html', 'markdown', 'rst', 'text' or 'pdf'; None for content mcpower does not read.

    ``head`` is the body's first bytes (a PDF or an HTML page served without a useful type).
    """
    media = media_type(content_type)
    by_suffix = KIND_OF_SUFFIX.get(posixpath.splitext(urlsplit(url).path)[1].lower())
    if media in _TYPES:
        return _TYPES[media]
    if media == "text/plain":  # servers send .md and .rst files as text/plain
        return by_suffix if by_suffix in _TEXT_KINDS else "text"
    if media in _GENERIC:
        if head.startswith(b"%PDF-"):
            return "pdf"
        start = head[:512].lstrip().lower()
        if start.startswith((b"<!doctype html", b"<html")):
            return "html"
        if by_suffix in (*_TEXT_KINDS, "html"):
            return by_suffix
    return None


def suffix_of(kind: str) -> str:
    return SUFFIX[kind]


def as_utf8(body: bytes, content_type: str, kind: str) -> bytes:
    """``body`` re-encoded as UTF-8 when it is text the server says is in another charset (and is
    not valid UTF-8 already); otherwise as it came."""
    if kind == "pdf":
        return body
    charset = ""
    for param in content_type.split(";")[1:]:
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset":
            charset = value.strip().strip("\"'").lower()
    if not charset or charset in ("utf-8", "utf8", "us-ascii", "ascii"):
        return body
    try:
        body.decode("utf-8")
        return body
    except UnicodeDecodeError:
        pass
    try:
        codecs.lookup(charset)
    except LookupError:
        return body
    return body.decode(charset, "replace").encode("utf-8")
