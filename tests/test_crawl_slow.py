"""Issue 29's "Must show", end to end with the real model: Debian's Python 3.11 documentation served
on 127.0.0.1 (robots.txt, ETags), `mcpower ingest http://127.0.0.1:PORT/library/ --id pyweb`, a
search for json.html, a second ingest that asks conditionally and embeds nothing; and a git
repository ingested by file:// URL, then again after a new commit.

Slow (the real model, ~300 pages): `pytest -m slow tests/test_crawl_slow.py`. Needs
`apt-get install python3.11-doc`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from site_server import Site, serve
from test_git_source import commit, git

DOCS = Path("/usr/share/doc/python3.11/html")
FORBIDDEN = "/library/idle.html"  # robots.txt forbids one page under the prefix

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (DOCS / "library" / "json.html").is_file(), reason="apt-get install python3.11-doc"),
]


def mcpower(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcpower", *args], cwd=cwd, capture_output=True, text=True, timeout=3600, check=False
    )


def test_the_python_library_docs_by_url(tmp_path: Path) -> None:
    site = Site(folder=DOCS, pages={"/robots.txt": f"User-agent: *\nDisallow: {FORBIDDEN}\n"})
    with serve(site):
        start = f"{site.base}/library/"
        first = mcpower("ingest", start, "--id", "pyweb", "--json", "--quiet", cwd=tmp_path)
        assert first.returncode == 0, first.stderr[-2000:]
        report = json.loads(first.stdout)
        fetched = {p for p, _ in site.requests}
        on_disk = {f"/library/{p.name}" for p in (DOCS / "library").glob("*.html")}
        assert not {p for p in fetched if not p.startswith("/library/")} - {"/robots.txt", "/sitemap.xml", "/llms.txt"}
        assert FORBIDDEN not in fetched
        assert on_disk - {FORBIDDEN} <= fetched | {"/library/index.html"}  # every page under the prefix
        assert report["documents"] >= len(on_disk) - 1

        found = mcpower(
            "search", "pyweb", "serialize a Python object to a JSON formatted string", "--json", cwd=tmp_path
        )
        assert found.returncode == 0, found.stderr
        top = json.loads(found.stdout)["results"][:3]
        assert f"{start}json.html" in [r["url"] for r in top], [(r["path"], r["url"]) for r in top]

        before = len(site.requests)
        second = mcpower("ingest", start, "--id", "pyweb", "--json", "--quiet", cwd=tmp_path)
        assert second.returncode == 0, second.stderr[-2000:]
        again = json.loads(second.stdout)
        pages = [h for p, h in site.requests[before:] if p.startswith("/library/") and p.endswith((".html", "/"))]
        conditional = [h for h in pages if "if-none-match" in h or "if-modified-since" in h]
        assert len(conditional) >= 0.8 * len(pages) and again["embedded"] == 0
        assert again["fetch"]["not_modified"] >= 0.8 * again["documents"]


def test_a_repository_by_file_url(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    git(work, "init", "-q")
    commit(work, {"docs/setup.md": "# Setup\n\nConfigure the reticulating spline cache before the first run.\n"}, "1")
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(work), str(bare)], check=True)
    git(work, "remote", "add", "origin", str(bare))

    assert mcpower("ingest", bare.as_uri(), "--id", "gitdocs", "--quiet", cwd=tmp_path).returncode == 0
    found = mcpower("search", "gitdocs", "reticulating splines", "--json", cwd=tmp_path)
    hit = json.loads(found.stdout)["results"][0]
    assert hit["path"] == "docs/setup.md"

    commit(work, {"docs/backup.md": "# Backups\n\nSnapshots go to the walrus vault every night.\n"}, "2")
    git(work, "push", "-q", "origin", "HEAD")
    assert mcpower("ingest", bare.as_uri(), "--id", "gitdocs", "--quiet", cwd=tmp_path).returncode == 0
    found = mcpower("search", "gitdocs", "nightly snapshots vault", "--json", cwd=tmp_path)
    hit = json.loads(found.stdout)["results"][0]
    assert hit["path"] == "docs/backup.md"
