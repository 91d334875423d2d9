"""A documentation site on 127.0.0.1 for crawl tests: pages from a dict or a folder, ETag and
Last-Modified with conditional answers, redirects, hostile routes, and a count of what it was asked.

Port 0 (the OS chooses); threads, so a crawl's parallel requests are parallel here too.
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

TYPES = {
    ".html": "text/html; charset=utf-8",
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".pdf": "application/pdf",
    ".png": "image/png",
}
MODIFIED = email.utils.formatdate(1_700_000_000, usegmt=True)

Handler = Callable[[BaseHTTPRequestHandler], None]


@dataclass
class Site:
    pages: dict[str, bytes | str] = field(default_factory=dict)  # path -> body
    folder: Path | None = None  # or serve files from here (under `mount`)
    mount: str = "/"
    handlers: dict[str, Handler] = field(default_factory=dict)  # path -> custom handler
    redirects: dict[str, str] = field(default_factory=dict)
    etags: bool = True
    # The first `hold_until` requests under `hold_prefix` are held until that many are in flight at
    # once (or 5 s pass): a client allowed more would send more meanwhile.
    hold_until: int = 0
    hold_prefix: str = "/"
    held: int = 0
    released: bool = False
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    cond: threading.Condition = field(init=False)
    port: int = 0

    def __post_init__(self) -> None:
        self.cond = threading.Condition(self.lock)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def body_of(self, path: str) -> bytes | None:
        if path in self.pages:
            body = self.pages[path]
            return body.encode() if isinstance(body, str) else body
        if self.folder is not None and path.startswith(self.mount):
            rel = path[len(self.mount) :] or "index.html"
            if rel.endswith("/"):
                rel += "index.html"
            file = (self.folder / rel).resolve()
            if file.is_relative_to(self.folder.resolve()) and file.is_file():
                return file.read_bytes()
        return None

    def asked(self, prefix: str = "/") -> list[tuple[str, dict[str, str]]]:
        return [(p, h) for p, h in self.requests if p.startswith(prefix)]


def _handler(site: Site) -> type[BaseHTTPRequestHandler]:
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            with site.lock:
                site.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                site.in_flight += 1
                site.max_in_flight = max(site.max_in_flight, site.in_flight)
                site.cond.notify_all()
            try:
                with site.lock:
                    hold = site.held < site.hold_until and path.startswith(site.hold_prefix)
                    site.held += hold
                if hold:
                    with site.cond:
                        site.cond.wait_for(lambda: site.released or site.in_flight >= site.hold_until, timeout=5)
                        # Then a while longer: a client that allowed more in flight would send them now.
                        site.cond.wait_for(lambda: site.in_flight > site.hold_until, timeout=0.5)
                        site.released = True
                        site.cond.notify_all()
                self._answer(path)
            finally:
                with site.lock:
                    site.in_flight -= 1

        def _answer(self, path: str) -> None:
            if path in site.handlers:
                site.handlers[path](self)
                return
            if path in site.redirects:
                self.send(301, b"", {"Location": site.redirects[path]})
                return
            body = site.body_of(path)
            if body is None:
                self.send(404, b"not found", {"Content-Type": "text/plain"})
                return
            suffix = Path(path).suffix if not path.endswith("/") else ".html"
            headers = {"Content-Type": TYPES.get(suffix, "application/octet-stream"), "Last-Modified": MODIFIED}
            etag = '"' + hashlib.sha1(body).hexdigest()[:16] + '"'
            if site.etags:
                headers["ETag"] = etag
            if (site.etags and self.headers.get("If-None-Match") == etag) or (
                not site.etags and self.headers.get("If-Modified-Since") == MODIFIED
            ):
                self.send(304, b"", headers)
                return
            self.send(200, body, headers)

        def send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            if status != 304:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if status != 304:
                self.wfile.write(body)

    return H


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a crawler that stops reading a hostile page resets the connection: expected


@contextmanager
def serve(site: Site) -> Iterator[Site]:
    server = _Server(("127.0.0.1", 0), _handler(site))
    server.daemon_threads = True
    site.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site
    finally:
        with site.cond:
            site.hold_until = 0
            site.cond.notify_all()
        server.shutdown()
        server.server_close()


# ---------------------------------------------------------------- hostile handlers


def endless(h: BaseHTTPRequestHandler) -> None:
    """A page that never ends (chunked, 64 KB at a time, until the client goes)."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.end_headers()
    try:
        for _ in range(100_000):
            h.wfile.write(b"<p>" + b"x" * 65536 + b"</p>")
    except OSError:
        pass


def slowloris(h: BaseHTTPRequestHandler) -> None:
    """A byte every 0.2 s: each read is quick, the page never completes in time."""
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Length", "100000")
    h.end_headers()
    try:
        for _ in range(100_000):
            h.wfile.write(b"x")
            h.wfile.flush()
            time.sleep(0.2)
    except OSError:
        pass


def gzip_bomb(h: BaseHTTPRequestHandler) -> None:
    """8 MB of zeros, gzipped to ~36 KB."""
    body = _BOMB.get("b")
    if body is None:
        packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
        zeros = b"\0" * (1 << 20)
        body = _BOMB["b"] = b"".join([*(packer.compress(zeros) for _ in range(8)), packer.flush()])
    h.send_response(200)
    h.send_header("Content-Type", "text/html")
    h.send_header("Content-Encoding", "gzip")
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    with contextlib.suppress(OSError):  # the client stopped reading: as it should
        h.wfile.write(body)


_BOMB: dict[str, bytes] = {}
