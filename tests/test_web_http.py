"""The web pages over a real socket, from `mcpower serve --http --watch` in a subprocess: the
datasets page follows a re-index (watched, then the new counts and the time of the last re-index)
as the page's live refresh reads it, and a browser polling it does not hold SIGTERM's drain."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx2
from conftest import FakeEmbedder
from http_fixtures import TOKEN, HttpServer, write_http_launcher
from watch_fixtures import write_notes

from mcpower.ingestion import IngestOptions, ingest

DEADLINE = 60.0  # tells a hang from an answer; nothing here measures speed


def notes_row(client: httpx2.Client) -> dict[str, Any]:
    r = client.get("/?format=json")
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["datasets"]
    return next(d for d in rows if d["id"] == "notes")


def test_the_datasets_page_follows_a_watched_reindex(tmp_path: Path, datasets_dir: Path) -> None:
    source = write_notes(tmp_path / "notes", ("guide.md", "todo.txt"))
    ingest(source, datasets_dir, IngestOptions(dataset_id="notes"), embedder=FakeEmbedder())
    server = HttpServer(write_http_launcher(tmp_path), datasets_dir, "--watch", "--watch-debounce", "0.05")
    try:
        server.wait_event("watch.watching", timeout=DEADLINE)
        with httpx2.Client(base_url=server.base, headers={"Authorization": f"Bearer {TOKEN}"}) as client:
            before = notes_row(client)
            assert (before["watched"], before["watch_state"], before["documents"]) == (True, "watching", 2)
            assert before["last_reindex"] is None
            (source / "more.md").write_text("# More\n\nA third note about the ocarina.\n")
            server.wait_event("watch.reindexed", timeout=DEADLINE)
            after = notes_row(client)
            assert after["documents"] == 3 and after["last_reindex"] is not None
            counts = after["last_reindex_counts"]
            assert (counts["added"], counts["changed"], counts["removed"]) == (1, 0, 0) and counts["embedded"] >= 1
            assert after["updated_at"] > before["updated_at"]
            page = client.get("/")
            assert 'data-testid="dataset-documents">3<' in page.text
            assert "1 added, 0 changed, 0 removed" in page.text
            anonymous = httpx2.get(server.base + "/", follow_redirects=False)
            assert anonymous.status_code == 303 and anonymous.headers["location"] == "/login?next=%2F"
            # A browser keeps its connection open between polls: SIGTERM must not wait for it.
            server.proc.send_signal(signal.SIGTERM)
            assert server.wait_exit(30) == 0
    finally:
        server.stop()
